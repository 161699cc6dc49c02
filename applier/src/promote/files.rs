//! File-system steps of a promotion, each failure naming its path, and "already done" (exists / not found) counted
//! as success where a rerun after a crash would meet it.

use std::path::Path;

use super::error::{Error, Result};

pub(super) fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).map_err(|e| Error::io(from, e))?;
    Ok(())
}

/// Write a file of a partition being built in staging: written in place, without the temporary file and fsyncs
/// of `durable::write_atomically`. Why that is enough: nothing reads a `.building` directory (a rerun after a crash
/// builds it again), and it is renamed `.ready` only after one `syncfs` of the log dir's filesystem has made every
/// build's files and directories durable at once (`swap::execute`).
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

pub(super) fn remove_dir_all(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}
