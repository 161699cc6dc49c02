//! Writing bulk segment bytes past the page cache (`O_DIRECT`), for the applier's appends.
//!
//! Why: an applier writes gigabytes that nothing reads until a failover, and each page it writes through the page
//! cache costs the kernel a fresh page, a copy and later a write-back. On virtual machines whose free memory goes
//! back to the host (virtio-balloon free page reporting, the norm in clouds, and this project's test machine), the
//! first touch of each such page is also a fault in the host. Measured on the test machine with `dd bs=1M` of
//! 1 GiB a few seconds after the previous file was deleted: 2.6–3.2 s of system time through the cache (plus 0.6 s
//! of `sync`) against 0.19 s with `oflag=direct` (1.27 s wall). In the direct tail catch-up that cache fill was 56 %
//! of the applier's CPU (`tools/bench/direct_profile.sh`). Direct I/O also leaves the target host's cache to the
//! target broker's own data.
//!
//! How: whole 4 KiB blocks (the largest logical block size of common disks) go by `O_DIRECT` from an aligned
//! buffer, the bytes of the first block that lie before `at` read back so that the block is rewritten whole; the
//! last partial block goes by an ordinary write, so the file ends exactly at `at + len` and the next append finds
//! its head in the cache. The kernel keeps the two paths coherent (a direct write first writes back and drops the
//! cached pages of its range). Small writes, non-Linux systems, and a filesystem that refuses `O_DIRECT` (`EINVAL`
//! at open or at a write: tmpfs before Linux 6.6, some FUSE filesystems) get ordinary writes.
//!
//! Durability is the caller's, as before: `O_DIRECT` does not flush the disk's cache or the file's size and
//! extents, so the caller's fsync stays where it was.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Alignment of direct writes: file offsets, lengths and buffer addresses.
pub const BLOCK: usize = 4096;
/// Bytes per direct write (a multiple of [`BLOCK`]); also the size of each thread's aligned buffer.
pub const PIECE: usize = 2 << 20;
/// Writes shorter than this go through the cache: the head block's read and the second open would cost more than
/// the cache fill they save.
pub const MIN_DIRECT: usize = 64 << 10;

/// How a write went: which path carried the bytes (tests and the caller's metrics look).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Whole blocks by direct I/O, the partial last block (if any) through the cache.
    Direct,
    /// All of it through the cache (small, or direct I/O refused by the filesystem).
    Cached,
}

/// Writes `bytes` at byte `at` of the existing file `path`, which must be at least `at` bytes long; the file's
/// length afterwards is at least `at + bytes.len()` (bytes past that are left as they were).
pub fn write_at(path: &Path, at: u64, bytes: &[u8]) -> Result<Written> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len < at {
        return Err(Error::io(
            path,
            std::io::Error::other(format!("{len} bytes long: a write at {at} would leave a hole")),
        ));
    }
    if bytes.len() < MIN_DIRECT {
        return cached(path, &file, at, bytes);
    }
    match direct::open(path) {
        Ok(Some(direct)) => direct::write(path, &file, &direct, at, bytes),
        Ok(None) => cached(path, &file, at, bytes),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn cached(path: &Path, file: &File, at: u64, bytes: &[u8]) -> Result<Written> {
    file.write_all_at(bytes, at).map_err(|e| Error::io(path, e))?;
    Ok(Written::Cached)
}

#[cfg(target_os = "linux")]
mod direct {
    use std::cell::RefCell;
    use std::fs::{File, OpenOptions};
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::path::Path;

    use super::{cached, Written, BLOCK, PIECE};
    use crate::error::{Error, Result};

    thread_local! {
        /// One aligned window per thread, allocated once: a fresh allocation per write would touch fresh pages,
        /// the cost this module avoids.
        static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    /// `path` opened for direct writes; `None` if the filesystem refuses `O_DIRECT`.
    pub(super) fn open(path: &Path) -> std::io::Result<Option<File>> {
        match OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => Ok(Some(f)),
            Err(e) if refused(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn refused(e: &std::io::Error) -> bool {
        e.raw_os_error() == Some(libc::EINVAL)
    }

    pub(super) fn write(path: &Path, file: &File, direct: &File, at: u64, bytes: &[u8]) -> Result<Written> {
        let outcome = BUFFER.with(|cell| {
            let mut storage = cell.borrow_mut();
            if storage.len() < PIECE + BLOCK {
                storage.resize(PIECE + BLOCK, 0);
            }
            let skip = storage.as_ptr().align_offset(BLOCK);
            let window = storage
                .get_mut(skip..skip + PIECE)
                .ok_or_else(|| std::io::Error::other("no aligned window in the write buffer (allocator alignment)"))?;
            blocks(file, direct, window, at, bytes)
        });
        match outcome {
            Ok(()) => Ok(Written::Direct),
            // Refused mid-way (a filesystem that accepts the flag but not the alignment): the whole range again
            // through the cache; blocks already written hold the same bytes.
            Err(e) if refused(&e) => cached(path, file, at, bytes),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// The blocks from the one holding `at` to the last whole one by direct I/O through `window`, the rest cached.
    fn blocks(file: &File, direct: &File, window: &mut [u8], at: u64, bytes: &[u8]) -> std::io::Result<()> {
        let start = at - at % BLOCK as u64;
        let head = (at - start) as usize;
        let mut filled = head;
        if let Some(before) = window.get_mut(..head) {
            file.read_exact_at(before, start)?;
        }
        let mut pos = start;
        let mut rest = bytes;
        loop {
            let take = rest.len().min(window.len() - filled);
            let (now, later) = rest.split_at(take);
            window[filled..filled + take].copy_from_slice(now);
            filled += take;
            rest = later;
            let whole = filled - filled % BLOCK;
            if whole > 0 && (rest.is_empty() || filled == window.len()) {
                direct.write_all_at(&window[..whole], pos)?;
                window.copy_within(whole..filled, 0);
                filled -= whole;
                pos += whole as u64;
            }
            if rest.is_empty() {
                break;
            }
        }
        if filled > 0 {
            file.write_all_at(&window[..filled], pos)?;
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod direct {
    use std::fs::File;
    use std::path::Path;

    use super::{cached, Written};
    use crate::error::Result;

    pub(super) fn open(_path: &Path) -> std::io::Result<Option<File>> {
        Ok(None)
    }

    pub(super) fn write(path: &Path, file: &File, _: &File, at: u64, bytes: &[u8]) -> Result<Written> {
        cached(path, file, at, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn appends_at_unaligned_positions_leave_exactly_the_bytes_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, b"").unwrap();
        let mut expected = Vec::new();
        // Sizes that start and end inside blocks, cross a piece, end on a block, and stay under MIN_DIRECT.
        let sizes = [
            100_001usize,
            MIN_DIRECT,
            PIECE + 3 * BLOCK + 17,
            BLOCK * 40 + 1234,
            10,
            300_000,
        ];
        let mut direct = 0;
        for (i, size) in sizes.into_iter().enumerate() {
            let bytes = pattern(size, i as u8);
            let how = write_at(&path, expected.len() as u64, &bytes).unwrap();
            direct += usize::from(how == Written::Direct);
            if size < MIN_DIRECT {
                assert_eq!(how, Written::Cached);
            }
            expected.extend_from_slice(&bytes);
            assert_eq!(std::fs::metadata(&path).unwrap().len(), expected.len() as u64);
            assert!(
                std::fs::read(&path).unwrap() == expected,
                "after write {i} of {size} bytes"
            );
        }
        // On Linux's usual test filesystems (ext4, xfs, btrfs, tmpfs from 6.6) the large writes go direct.
        if cfg!(target_os = "linux") && direct::open(&path).unwrap().is_some() {
            assert_eq!(direct, 5);
        }
    }

    #[test]
    fn a_rewrite_inside_the_file_keeps_the_bytes_around_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut expected = pattern(3 * PIECE, 7);
        std::fs::write(&path, &expected).unwrap();
        let at = PIECE as u64 + 999;
        let bytes = pattern(PIECE / 2 + 5, 99);
        write_at(&path, at, &bytes).unwrap();
        expected[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
        assert!(std::fs::read(&path).unwrap() == expected);
    }

    #[test]
    fn a_file_shorter_than_the_position_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("short.log");
        std::fs::write(&path, b"abc").unwrap();
        for size in [10, MIN_DIRECT] {
            let err = write_at(&path, 5000, &pattern(size, 1)).unwrap_err().to_string();
            assert!(err.contains("short.log") && err.contains("hole"), "{err}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"abc", "nothing written");
        let missing = dir.path().join("missing.log");
        let err = write_at(&missing, 0, b"x").unwrap_err().to_string();
        assert!(err.contains("missing.log"), "{err}");
    }
}
