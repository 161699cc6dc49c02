//! Opening the files of a log dir or mirror: regular files only, size-checked.
//!
//! A log dir is input segmirror does not control. Opening a FIFO for reading
//! blocks until a writer appears (a `verify` that never ends), a device can be
//! read forever, and a symlink can lead anywhere outside the directory being
//! checked. Kafka creates none of these, so every file segmirror reads goes
//! through [`open_regular`]: it opens with `O_NONBLOCK | O_NOFOLLOW` (opening a
//! FIFO then returns at once, a final symlink is refused) and checks with
//! `fstat` on the opened descriptor, not on the name, so a file swapped for a
//! FIFO between a listing and the open is still refused. Listings use
//! [`entry_kind`] (`lstat`), which never follows a symlink either.
//!
//! Sizes are checked against Kafka's own limits before anything is read
//! ([`read_capped`]): a file a broker could never have written is rejected by
//! its `stat`, so memory stays bounded whatever the input, and a 50 GiB sparse
//! file costs a `stat`, not a scan.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::Path;

use crate::error::{Defect, Error};

/// Largest `.log` segment Kafka writes: `segment.bytes` is an `Int` (at most
/// `Int.MaxValue`), and positions inside a segment are `Int`s.
pub const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

/// Largest index file Kafka writes: `segment.index.bytes` is an `Int` too, and
/// index files are mapped with `Int` positions.
pub const MAX_INDEX_FILE_BYTES: u64 = i32::MAX as u64;

/// Largest producer snapshot read (64 MiB). A snapshot holds one entry per live
/// producer (under 40 bytes each, plus 24 bytes per retained batch), so this is
/// over a million producers, far beyond what a broker keeps; the cap exists so a
/// hostile file cannot make a reader allocate gigabytes.
pub const MAX_SNAPSHOT_BYTES: u64 = 64 * 1024 * 1024;

/// Largest checkpoint or metadata text file read (64 MiB): a root offset
/// checkpoint lists one line (under 300 bytes) per partition of the broker, a
/// leader-epoch checkpoint one line per epoch; 64 MiB is several hundred thousand
/// partitions. Only a bound against hostile input, like [`MAX_SNAPSHOT_BYTES`].
pub const MAX_TEXT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// What a directory entry is, from `lstat` (symlinks are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    /// Anything else: never opened, reported by name.
    Other(&'static str),
}

/// Describe a file type that is neither a regular file nor a directory.
fn other_kind(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
    }
    if file_type.is_symlink() {
        return "a symbolic link";
    }
    "not a regular file"
}

/// The kind of a listed entry (from `DirEntry::file_type`, which is `lstat`).
pub fn entry_kind(file_type: std::fs::FileType) -> EntryKind {
    if file_type.is_file() {
        EntryKind::File
    } else if file_type.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Other(other_kind(file_type))
    }
}

/// The defect of an entry segmirror does not open.
pub fn not_regular_defect(file_type: &'static str) -> Defect {
    Defect::NotRegularFile { file_type }
}

/// The error for a path that is not a regular file.
fn not_regular(path: &Path, file_type: &'static str) -> Error {
    Error::corrupt(path, 0, None, not_regular_defect(file_type))
}

/// Open `path` for reading if, and only if, it is a regular file: without
/// blocking on a FIFO and without following a final symlink. Returns the file
/// and its metadata, taken from the opened descriptor.
pub fn open_regular(path: &Path) -> Result<(File, Metadata), Error> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    }
    let file = match options.open(path) {
        Ok(f) => f,
        Err(e) => {
            // O_NOFOLLOW fails with ELOOP on a symlink, and opening a socket with
            // ENXIO: name what the entry is rather than the errno.
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if !meta.is_file() && !meta.is_dir() {
                    return Err(not_regular(path, other_kind(meta.file_type())));
                }
            }
            return Err(Error::io(path, e));
        }
    };
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            other_kind(meta.file_type())
        };
        return Err(not_regular(path, kind));
    }
    Ok((file, meta))
}

/// The error for a file larger than `limit` bytes, naming the limit.
pub fn too_large(path: &Path, what: &'static str, size: u64, limit: u64) -> Error {
    Error::corrupt(path, 0, None, Defect::TooLarge { what, size, limit })
}

/// Read a whole regular file of at most `limit` bytes (see [`open_regular`]).
/// A larger file is refused by its size before any byte is read, and a file
/// that grows while it is read is read only up to the limit and refused.
pub fn read_capped(path: &Path, what: &'static str, limit: u64) -> Result<Vec<u8>, Error> {
    let (file, meta) = open_regular(path)?;
    if meta.len() > limit {
        return Err(too_large(path, what, meta.len(), limit));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(path, what, bytes.len() as u64, limit));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_open_and_others_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.log");
        std::fs::write(&file, b"hello").unwrap();
        let (_, meta) = open_regular(&file).unwrap();
        assert_eq!(meta.len(), 5);
        assert_eq!(read_capped(&file, "test file", 5).unwrap(), b"hello");
        let err = read_capped(&file, "test file", 4).unwrap_err();
        assert!(
            err.to_string().contains("test file of 5 bytes exceeds the limit of 4"),
            "{err}"
        );

        let err = open_regular(dir.path()).unwrap_err();
        assert!(err.to_string().contains("a directory, not a regular file"), "{err}");

        #[cfg(unix)]
        {
            let link = dir.path().join("link.log");
            std::os::unix::fs::symlink(&file, &link).unwrap();
            let err = open_regular(&link).unwrap_err();
            assert!(err.to_string().contains("a symbolic link, not a regular file"), "{err}");
            assert_eq!(err.path(), link);

            let fifo = dir.path().join("fifo.log");
            let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            // Would block forever without O_NONBLOCK.
            let err = open_regular(&fifo).unwrap_err();
            assert!(err.to_string().contains("a FIFO, not a regular file"), "{err}");
        }
    }
}
