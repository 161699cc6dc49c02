//! Transfers between local files and a local-folder store, done by the kernel.
//!
//! Through `object_store`, an upload to a folder reads the file into memory and
//! writes it out again, and a download comes back a few KiB per task switch:
//! every byte is copied through this process twice, and a byte copy costs as
//! much as hashing it. Here the bytes are copied file to file in the kernel
//! (`copy_file_range`, where the OS has it: `std::io::copy` falls back to a
//! plain copy elsewhere) and then hashed where they landed, through a mapping
//! of the destination, a window at a time. The digest is therefore always that
//! of the destination's bytes, never of a source that may have changed between
//! two reads.
//!
//! An upload keeps `object_store`'s layout exactly: the object is assembled in
//! `<file>#<n>` next to its final name (such names are never listed) and
//! renamed into place when complete, so a reader never sees a partial object.
//! Like `object_store`'s folder store (with its default settings), an upload is
//! not fsynced. Neither is a download: the caller fsyncs what it keeps, once (measured: the applier used to fsync every
//! staged file twice, here and after setting its modification time).
//!
//! Everything here is blocking; the store runs it in `spawn_blocking`.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use segment_format::durable::write_behind;

use super::io::{hash_range, Dest};
use super::Digest;
use segmirror_contract::digest::Hasher;
use segmirror_contract::error::{Error, MismatchKind, Result};

/// Bytes hashed per mapping of a destination: bounds what a transfer adds to
/// the resident set.
const HASH_WINDOW: u64 = 8 << 20;

/// Bytes copied and hashed at a time when no part size says otherwise: small
/// enough that the hasher finds them still in the CPU's cache.
const COPY_PIECE: u64 = 8 << 20;

/// Attempts at a free `<file>#<n>` name before giving up.
const STAGING_NAMES: u32 = 1000;

/// Hash `len` bytes of `file` from `start`, mapping them a window at a time.
fn hash_mapped(file: &File, start: u64, len: u64, hasher: &mut Hasher) -> std::io::Result<()> {
    let mut done = 0;
    while done < len {
        let window = (len - done).min(HASH_WINDOW);
        let Ok(window_len) = usize::try_from(window) else {
            return Err(std::io::Error::other("mapping window does not fit in memory"));
        };
        // SAFETY: a read-only mapping of a file this process created moments
        // ago under a name of its own (an upload's `#<n>` staging file, or a
        // download's staging path), wholly written before it is mapped, and
        // dropped before the function returns. Nothing of ours writes the file
        // while it is mapped; another process truncating it would make the
        // reads fault, as with any mapped file.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(start + done)
                .len(window_len)
                .populate()
                .map(file)?
        };
        hasher.update(&map);
        done += window;
    }
    Ok(())
}

/// Copy up to `len` bytes from `from`'s position to `to`'s (the end of what
/// was copied before, `at`), then hash them in `to` and start writing them to
/// disk. Returns how many were copied: fewer only at the end of `from`.
fn copy_hashing(from: &mut File, to: &mut File, at: u64, len: u64, hasher: &mut Hasher) -> std::io::Result<u64> {
    let copied = std::io::copy(&mut from.take(len), to)?;
    hash_mapped(to, at, copied, hasher)?;
    write_behind(to, at, copied);
    Ok(copied)
}

/// `<dest>#<n>` for the first free `n`, created for reading and writing, with
/// `dest`'s directory created if missing.
fn create_staging(dest: &Path) -> std::io::Result<(File, PathBuf)> {
    let mut created_parent = false;
    let mut n = 1;
    while n <= STAGING_NAMES {
        let mut name = dest.as_os_str().to_owned();
        name.push(format!("#{n}"));
        let staging = PathBuf::from(name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staging)
        {
            Ok(file) => return Ok((file, staging)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == ErrorKind::NotFound && !created_parent => {
                let Some(parent) = dest.parent() else { return Err(e) };
                std::fs::create_dir_all(parent)?;
                created_parent = true;
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        ErrorKind::AlreadyExists,
        format!("{STAGING_NAMES} staging files of {} exist already", dest.display()),
    ))
}

/// A failure writing the store's side, as the store reports its own failures.
fn store_error(key: &str, e: std::io::Error) -> Error {
    super::error::from_store(
        key,
        "put",
        object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(e),
        },
    )
}

/// Upload the first `len` bytes of `source` (at `source_path`) to the object at
/// `dest` (for `key`), assembling it in `parts` pieces of `part_size` when
/// `part_size` is given, else in one. Returns the digest of the object and the
/// number of parts. A source shorter than `len` fails with an `UnexpectedEof`
/// I/O error on `source_path`, a vanished one with `NotFound`.
pub(super) fn put(
    source_path: &Path,
    len: u64,
    dest: &Path,
    key: &str,
    part_size: Option<u64>,
) -> Result<(Digest, Option<u32>)> {
    let mut source = File::open(source_path).map_err(|e| Error::io(source_path, e))?;
    let (mut staging, staging_path) = create_staging(dest).map_err(|e| store_error(key, e))?;
    let assembled = (|| {
        let mut hasher = Hasher::new();
        let piece = part_size.unwrap_or(COPY_PIECE).max(1);
        let mut parts = 0u32;
        while hasher.size() < len {
            let at = hasher.size();
            let copied = copy_hashing(&mut source, &mut staging, at, piece.min(len - at), &mut hasher)
                .map_err(|e| store_error(key, e))?;
            if copied == 0 {
                return Err(super::io::shrank(source_path, len, at));
            }
            parts = parts.saturating_add(1);
        }
        Ok((hasher.finish(), part_size.map(|_| parts)))
    })();
    drop(staging);
    let published = assembled.and_then(|done| {
        std::fs::rename(&staging_path, dest)
            .map(|()| done)
            .map_err(|e| store_error(key, e))
    });
    if published.is_err() {
        let _ = std::fs::remove_file(&staging_path);
    }
    published
}

/// Download `len` bytes of a local store's `object` (at `object_path`) from
/// `start` into a new file at `dest` (write-behind started, not fsynced). Stops early at the end of the
/// object; the caller compares the digest's size.
///
/// The object's pages are dropped from the page cache as they are copied (`durable::drop_cached`; clean pages only): an
/// applier reads each object once, and the freed pages are what its writes to the mirror take next, still hot.
/// Left cached, every page of the mirror is a fresh one, which on a VM whose free memory goes back to the host costs
/// a fault in the host (see `durable::drop_cached`): `tools/bench/phase_ab.sh apply` went from 1.25 to 1.09 s and
/// 1.93 to 1.59 CPU s for 200 small partitions (docs/BENCHMARKS.md).
pub(super) fn get(mut object: File, object_path: &Path, start: u64, len: u64, dest: &Path) -> Result<Digest> {
    use std::io::{Seek, SeekFrom};
    object
        .seek(SeekFrom::Start(start))
        .map_err(|e| Error::io(object_path, e))?;
    let mut out = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dest)
        .map_err(|e| Error::io(dest, e))?;
    let mut hasher = Hasher::new();
    while hasher.size() < len {
        let at = hasher.size();
        let copied = copy_hashing(&mut object, &mut out, at, COPY_PIECE.min(len - at), &mut hasher)
            .map_err(|e| Error::io(dest, e))?;
        if copied == 0 {
            break;
        }
        // Piece by piece: a segment of a GiB recycles its pages as it goes, not all at its end.
        segment_format::durable::drop_cached(&object, start + at + copied);
    }
    Ok(hasher.finish())
}

/// Download the whole object `key` of the local folder `root` into `sink`: opened as
/// [`super::listing::open_regular_file`] opens it, its size checked against `expected` before a byte is copied, and
/// against the bytes copied after.
pub(super) fn download(root: &Path, key: &str, expected: Option<u64>, sink: Dest) -> Result<Digest> {
    let Some((file, size)) = super::listing::open_regular_file(root, key)? else {
        return Err(Error::NotFound { key: key.to_string() });
    };
    if let Some(expected) = expected {
        if size != expected {
            return Err(Error::mismatch(key, MismatchKind::Size, expected, size));
        }
    }
    let path = root.join(key);
    let digest = match sink {
        Dest::File(dest) => get(file, &path, 0, size, &dest)?,
        Dest::Discard => hash_range(file, &path, 0, size)?,
    };
    if digest.size != size {
        return Err(Error::mismatch(key, MismatchKind::Size, size, digest.size));
    }
    Ok(digest)
}

/// The bytes of the object `key` of the local folder `root`, refused past `limit` (also when it grows while read).
pub(super) fn read(root: &Path, key: &str, limit: u64) -> Result<bytes::Bytes> {
    let Some((file, size)) = super::listing::open_regular_file(root, key)? else {
        return Err(Error::NotFound { key: key.to_string() });
    };
    let too_large = |size| Error::TooLarge {
        key: key.to_string(),
        size,
        limit,
    };
    if size > limit {
        return Err(too_large(size));
    }
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Error::io(root.join(key), e))?;
    if out.len() as u64 > limit {
        return Err(too_large(out.len() as u64));
    }
    Ok(bytes::Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use segmirror_contract::digest::digest_of;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
    }

    #[test]
    fn an_upload_is_assembled_aside_and_renamed_with_the_digest_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes((3 << 20) + 5);
        let src = dir.path().join("src.log");
        std::fs::write(&src, &data).unwrap();
        let dest = dir.path().join("bucket/a/b/obj.log");
        // In parts: the last one short.
        let (digest, parts) = put(&src, data.len() as u64, &dest, "a/b/obj.log", Some(1 << 20)).unwrap();
        assert_eq!((digest, parts), (digest_of(&data), Some(4)));
        assert!(std::fs::read(&dest).unwrap() == data);
        // A prefix, in one piece, over the existing object.
        let (digest, parts) = put(&src, 1000, &dest, "a/b/obj.log", None).unwrap();
        assert_eq!((digest, parts), (digest_of(&data[..1000]), None));
        assert_eq!(std::fs::read(&dest).unwrap(), &data[..1000]);
        let names: Vec<_> = std::fs::read_dir(dest.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1, "no staging file left: {names:?}");
    }

    #[test]
    fn a_short_or_missing_source_fails_as_a_source_error_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.log");
        std::fs::write(&src, bytes(100)).unwrap();
        let dest = dir.path().join("obj");
        match put(&src, 101, &dest, "obj", None) {
            Err(Error::Io { path, source }) => {
                assert_eq!(path, src);
                assert_eq!(source.kind(), ErrorKind::UnexpectedEof);
            }
            other => panic!("{other:?}"),
        }
        match put(&dir.path().join("gone"), 1, &dest, "obj", None) {
            Err(Error::Io { source, .. }) => assert_eq!(source.kind(), ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only the source");
    }

    #[test]
    fn a_staging_name_in_use_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("obj");
        std::fs::write(dir.path().join("obj#1"), b"someone else's").unwrap();
        let (_, staging) = create_staging(&dest).unwrap();
        assert_eq!(staging, dir.path().join("obj#2"));
    }

    #[test]
    fn a_download_copies_a_range_and_hashes_what_landed() {
        let dir = tempfile::tempdir().unwrap();
        let data = bytes((17 << 20) + 3);
        let obj = dir.path().join("obj");
        std::fs::write(&obj, &data).unwrap();
        let dest = dir.path().join("out");
        std::fs::write(&dest, b"old contents, longer than nothing").unwrap();
        let digest = get(File::open(&obj).unwrap(), &obj, 0, data.len() as u64, &dest).unwrap();
        assert_eq!(digest, digest_of(&data));
        assert!(std::fs::read(&dest).unwrap() == data);
        let digest = get(File::open(&obj).unwrap(), &obj, 10, 20, &dest).unwrap();
        assert_eq!(digest, digest_of(&data[10..30]));
        // Past the end: stops there, the size tells.
        let digest = get(File::open(&obj).unwrap(), &obj, 5, data.len() as u64, &dest).unwrap();
        assert_eq!(digest.size, data.len() as u64 - 5);
    }

    /// A local object is read once by the applier that downloads it: its pages go back to the free lists for the
    /// mirror's writes to reuse (see `get`), and the copy is whole.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_download_leaves_the_object_out_of_the_page_cache() {
        use segment_format::durable::cached_pages;
        let dir = tempfile::tempdir().unwrap();
        let data = bytes((3 << 20) + 5);
        let obj = dir.path().join("obj");
        std::fs::write(&obj, &data).unwrap();
        let object = File::open(&obj).unwrap();
        object.sync_all().unwrap();
        assert_eq!(std::fs::read(&obj).unwrap(), data, "read once: cached");
        let len = data.len() as u64;
        let before = cached_pages(&object, len).unwrap();
        assert!(
            before >= (len >> 12) / 2,
            "the object is cached before the download ({before} pages)"
        );
        let dest = dir.path().join("out");
        let digest = get(object.try_clone().unwrap(), &obj, 0, len, &dest).unwrap();
        assert_eq!(digest, digest_of(&data));
        assert!(std::fs::read(&dest).unwrap() == data);
        let after = cached_pages(&object, len).unwrap();
        assert!(
            after <= 1,
            "the downloaded object's pages are dropped ({after} of {before} left)"
        );
    }
}
