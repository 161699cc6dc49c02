//! Holding a broker log dir's `.lock` while promotion writes into it.
//!
//! A Kafka broker takes `FileChannel.tryLock()` on `<log dir>/.lock` at start-up and keeps it until it exits
//! (`LogManager.lockLogDirs`, `FileLock`); a second broker on the same dir fails with "Failed to acquire lock".
//! On Unix the JVM implements that lock with `fcntl(F_SETLK)` record locks — not `flock(2)`, which on Linux does
//! not conflict with them — so promotion takes the same kind of lock: if the broker runs, taking it fails and
//! promotion refuses; while promotion holds it, a broker started by mistake fails to start instead of loading a
//! half-written partition. A record lock belongs to the process and is released when any descriptor of the file
//! is closed, so the file is opened exactly once, here, and kept open in [`LogDirLock`] until it is dropped (or
//! the process dies, crash included).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use segment_format::dir::LOCK_FILE;

use super::error::Error;

/// An exclusive record lock on `<log dir>/.lock`, held until dropped.
#[derive(Debug)]
pub struct LogDirLock {
    path: PathBuf,
    _file: File,
}

/// Why the lock could not be taken.
#[derive(Debug)]
pub enum LockFailure {
    /// Another process (a running broker) holds it.
    Held,
    /// The file could not be opened or locked for another reason.
    Io(Error),
}

impl LogDirLock {
    /// Take the lock without waiting. The file is created if missing, as the broker does.
    pub fn try_acquire(log_dir: &Path) -> std::result::Result<LogDirLock, LockFailure> {
        let path = log_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| LockFailure::Io(Error::io(&path, e)))?;
        lock_exclusive(&file).map_err(|e| {
            if is_contended(&e) {
                LockFailure::Held
            } else {
                LockFailure::Io(Error::io(&path, e))
            }
        })?;
        Ok(LogDirLock { path, _file: file })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(unix)]
fn lock_exclusive(file: &File) -> std::io::Result<()> {
    use rustix::fs::{fcntl_lock, FlockOperation};
    fcntl_lock(file, FlockOperation::NonBlockingLockExclusive).map_err(std::io::Error::from)
}

#[cfg(not(unix))]
fn lock_exclusive(_file: &File) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "locking a Kafka log dir is implemented for Unix only",
    ))
}

/// `F_SETLK` reports a conflicting lock as `EAGAIN` or `EACCES` (POSIX allows either).
fn is_contended(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::PermissionDenied
    )
}

#[cfg(all(test, unix))]
mod tests;
