//! File-system steps of a promotion, each failure naming its path, and "already done" (exists / not found) counted
//! as success where a rerun after a crash would meet it.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::error::{Error, Result};

pub(super) fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).map_err(|e| Error::io(from, e))?;
    Ok(())
}

/// Write a file of a partition being built in staging: written in place, without the temporary file and fsyncs
/// of `durable::write_atomically`. Why that is enough: nothing reads a `.building` directory (a rerun after a crash
/// builds it again), and none is swapped in before one `syncfs` of the log dir's filesystem has made every build's
/// files and directories durable at once (`swap::execute`).
pub(super) fn write_staged(path: &Path, bytes: &[u8]) -> Result<()> {
    segment_format::durable::write_unsynced(path, bytes)?;
    Ok(())
}

pub(super) fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::io(from, e))
}

pub(super) fn create_dir(path: &Path) -> Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

pub(super) fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Cut the regular file at `path` back to `size` bytes when it is longer (nothing when it is missing or not longer:
/// a file shorter than planned is the caller's to refuse, when it reads it). Durable with the rest of staging.
pub(super) fn truncate_beyond(path: &Path, size: u64) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() > size => {}
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    file.set_len(size).map_err(|e| Error::io(path, e))
}

/// The names in a directory (none when it does not exist). Why: a promotion asks of each of thousands of
/// partitions which of its names (`.building`, `.old`) staging holds; one listing answers them all,
/// where a `stat` per name and partition was three system calls per partition and phase.
pub(super) fn names_in(dir: &Path) -> Result<HashSet<OsString>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io(dir, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashSet::new()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

pub(super) fn remove_dir_all(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Every entry of `dir` but those named in `keep` removed, by up to `threads` threads at once. Why: at the end of a
/// promotion staging holds every partition's `.old` directory (10,000 of them for 10,000 partitions), and removing
/// them is the kernel's work per file; one thread left the other core idle.
pub(super) fn remove_entries_parallel(dir: &Path, threads: usize, keep: &[&str]) -> Result<()> {
    // Each entry's kind comes from the listing itself (`d_type`), not a `stat` per entry.
    let entries: Vec<(std::path::PathBuf, Option<std::fs::FileType>)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter(|e| e.as_ref().map_or(true, |e| !keep.iter().any(|k| e.file_name() == *k)))
            .map(|e| e.map(|e| (e.path(), e.file_type().ok())))
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io(dir, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let threads = threads.clamp(1, entries.len().max(1));
    let per_thread = entries.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = entries
            .chunks(per_thread)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk.iter().try_for_each(|(path, file_type)| {
                        let file_type = match file_type {
                            Some(t) => Ok(*t),
                            None => std::fs::symlink_metadata(path).map(|m| m.file_type()),
                        };
                        match file_type {
                            Ok(t) if t.is_dir() => remove_dir_all(path),
                            Ok(_) => remove_file(path),
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                            Err(e) => Err(Error::io(path, e)),
                        }
                    })
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(Error::io(dir, std::io::Error::other("a removal thread panicked"))))
        })
    })
}

/// Whether [`mark_durably`] marked `dir` with `name` (a `stat`, not a listing of the 10,000 names beside it).
pub(super) fn marked(dir: &Path, name: &str) -> Result<bool> {
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Create the empty file `name` in `dir` and make it and its name durable: a step of a promotion done for every
/// partition at once, said by one name instead of one per partition.
pub(super) fn mark_durably(dir: &Path, name: &str) -> Result<()> {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(&path, e))?;
    segment_format::durable::fsync_dir(dir)?;
    Ok(())
}
