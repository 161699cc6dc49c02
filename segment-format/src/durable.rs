//! The one crash-safe way this project writes a small file.
//!
//! Kafka rewrites its checkpoints and `partition.metadata` by writing `<path>.tmp`,
//! forcing it to disk, renaming it over the target and flushing the parent
//! directory (`CheckpointFile.write`, `Utils.atomicMoveWithFallback`). A reader —
//! the broker, or our own verifier — therefore sees either the old file or the
//! new one, never a torn mix, and after a crash the rename itself is durable.
//! Every writer in segmirror goes through [`write_atomically`] so that this
//! ordering lives in exactly one place.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Suffix of the temporary file written next to the target (Kafka uses the same).
pub const TMP_SUFFIX: &str = ".tmp";

/// `<path>.tmp`: where [`write_atomically`] stages the new content.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// Replace `path` with `bytes` so that a crash leaves either the old or the new
/// content: write `<path>.tmp` (truncating any leftover), fsync it, rename it over
/// `path`, then fsync the parent directory so the rename survives a crash.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically_unflushed(path, bytes)?;
    fsync_dir(parent_dir(path))
}

/// [`write_atomically`] without its last step, the fsync of the parent directory: for a caller that fsyncs that
/// directory itself later, after more renames into it, before anything depends on the file being there (one
/// directory fsync for several files). Until then a crash may leave the old content (never a torn mix).
pub fn write_atomically_unflushed(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    write_synced(&tmp, bytes)?;
    fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// Write `bytes` to `path` (truncating what is there) and fsync it, for a caller that renames it into place itself.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    file.write_all(bytes).map_err(|e| Error::io(path, e))?;
    file.sync_all().map_err(|e| Error::io(path, e))
}

/// Flush a directory's entries (creations, renames, deletions) to disk.
///
/// On Unix a directory is opened read-only and `fsync`ed. Other platforms have no
/// portable equivalent; there this is a no-op, as in Kafka's `Utils.flushDir`
/// which ignores the failure to open a directory on Windows.
pub fn fsync_dir(path: &Path) -> Result<()> {
    if cfg!(unix) {
        let dir = File::open(path).map_err(|e| Error::io(path, e))?;
        dir.sync_all().map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// The directory holding `path`; `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Asks the kernel to start writing `len` bytes of `file` from `at` to disk now, without waiting (write-behind), so
/// the disk works while the next pieces are produced instead of all at once in the final fsync. Only a hint:
/// durability still comes from that fsync; a failure only means no write-behind.
#[cfg(target_os = "linux")]
pub fn write_behind(file: &File, at: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(nbytes)) = (libc::off64_t::try_from(at), libc::off64_t::try_from(len)) else {
        return;
    };
    // SAFETY: `sync_file_range` reads no memory of ours; `file` is open and outlives the call.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, nbytes, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn write_behind(_file: &File, _at: u64, _len: u64) {}

/// Tells the kernel `file` is read from start to end (it doubles read-ahead). Only a hint: failure changes nothing.
#[cfg(target_os = "linux")]
pub fn read_sequentially(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor; the call reads no memory of ours.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

#[cfg(not(target_os = "linux"))]
pub fn read_sequentially(_file: &File) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replaces_and_leaves_no_tmp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("leader-epoch-checkpoint");
        write_atomically(&path, b"first").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"first");
        write_atomically(&path, b"2nd").expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"2nd");
        assert!(!tmp_path(&path).exists(), "temporary file must be renamed away");
    }

    #[test]
    fn stale_longer_tmp_is_truncated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("partition.metadata");
        fs::write(tmp_path(&path), b"a much longer stale temporary file").expect("stale");
        write_atomically(&path, b"short").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"short");
    }

    #[test]
    fn tmp_path_appends_suffix() {
        assert_eq!(
            tmp_path(Path::new("/d/replication-offset-checkpoint")),
            PathBuf::from("/d/replication-offset-checkpoint.tmp")
        );
    }

    #[test]
    fn missing_directory_is_an_io_error_naming_the_tmp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent").join("file");
        let err = write_atomically(&path, b"x").expect_err("must fail");
        assert!(matches!(err, Error::Io { .. }));
        assert_eq!(err.path(), tmp_path(&path));
    }

    #[test]
    fn fsync_dir_works_and_reports_missing_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        fsync_dir(dir.path()).expect("fsync existing dir");
        assert!(fsync_dir(&dir.path().join("nope")).is_err());
    }
}
