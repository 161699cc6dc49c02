//! One applier per mirror.
//!
//! Two `apply` runs on one mirror would each clear the other's staging directory and could each install the same
//! version; one reported a healthy object as corrupt because the other had removed its staged file mid-check (and
//! recorded the rejection). So a run takes an exclusive lock on the lock file in the mirror root
//! ([`crate::mirror::apply_lock_file`]) before it
//! touches anything there, and holds it to the end. The lock is an advisory `flock`, released by the kernel when
//! the process exits however it exits, so a killed run never leaves the mirror locked. The holder's pid and start
//! time go to the holder file beside it ([`crate::mirror::apply_holder_file`]), only to name the holder in the error a second run reports; it is
//! removed when the lock is released, so a run leaves the mirror as it found it (the lock file itself stays,
//! empty: removing it while others may be opening it would let two runs lock two different files).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::mirror::{apply_holder_file, apply_lock_file};

/// Why the lock could not be taken. The lock's own error (the crate's [`crate::Error`] takes it in as
/// `MirrorLocked` or `Io`), so that this module needs nothing of the crate but the mirror's paths and `promote`,
/// which the crate's error wraps, can take the lock without an import cycle.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{}: the mirror is in use by another applier ({holder}); wait for it or stop it", path.display())]
    Locked { path: PathBuf, holder: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl LockError {
    fn io(path: &Path, source: std::io::Error) -> LockError {
        LockError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

type Result<T> = std::result::Result<T, LockError>;

/// What taking the lock does when another run holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Block until the holder is done (call it off the async runtime).
    Wait,
    /// Fail at once with [`LockError::Locked`], naming the holder.
    Fail,
}

/// The held lock; released on drop (or when the process exits).
#[derive(Debug)]
pub struct MirrorLock {
    _file: File,
    holder: PathBuf,
}

impl Drop for MirrorLock {
    fn drop(&mut self) {
        // Best effort: a stale holder file is overwritten by the next run and read only while a lock is held.
        let _ = std::fs::remove_file(&self.holder);
    }
}

/// Take the lock of the mirror at `root` (which must exist). A lock held by another run fails at once naming the
/// holder, or is waited for, as `wait` says.
pub fn lock_mirror(root: &Path, wait: LockWait) -> Result<MirrorLock> {
    let path = apply_lock_file(root);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| LockError::io(&path, e))?;
    lock_file(root, file, wait)
}

/// Like [`lock_mirror`] without waiting, for a reader of the mirror that must not change it (`promote`): a mirror
/// without a lock file has never had an applier, so there is nothing to lock and nothing is created (`None`).
/// An applier starting afterwards is kept off the partitions promotion works on by their catalog state (paused).
pub fn lock_mirror_if_used(root: &Path) -> Result<Option<MirrorLock>> {
    let path = apply_lock_file(root);
    match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(file) => lock_file(root, file, LockWait::Fail).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LockError::io(&path, e)),
    }
}

fn lock_file(root: &Path, file: File, wait: LockWait) -> Result<MirrorLock> {
    let path = apply_lock_file(root);
    let holder_path = apply_holder_file(root);
    match wait {
        LockWait::Wait => file.lock().map_err(|e| LockError::io(&path, e))?,
        LockWait::Fail => match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LockError::Locked {
                    path: path.clone(),
                    holder: holder(&holder_path),
                })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LockError::io(&path, e)),
        },
    }
    let since = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let stamp = format!("pid {} since {since}\n", std::process::id());
    std::fs::write(&holder_path, stamp).map_err(|e| LockError::io(&holder_path, e))?;
    Ok(MirrorLock {
        _file: file,
        holder: holder_path,
    })
}

/// What the holder wrote, or why it cannot be told.
fn holder(path: &Path) -> String {
    let mut text = String::new();
    // The holder writes its stamp right after locking: a run that lost the race by microseconds may find none.
    let read = File::open(path).and_then(|f| f.take(256).read_to_string(&mut text));
    match read {
        Ok(_) if !text.trim().is_empty() => text.trim().to_string(),
        _ => "holder unknown: it has not written its pid yet".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_fails_naming_the_holder_and_the_first_release_frees_it() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock_mirror(dir.path(), LockWait::Fail).unwrap();
        match lock_mirror(dir.path(), LockWait::Fail) {
            Err(LockError::Locked { path, holder }) => {
                assert_eq!(path, apply_lock_file(dir.path()));
                assert!(
                    holder.starts_with(&format!("pid {} since 20", std::process::id())),
                    "{holder}"
                );
            }
            other => panic!("{other:?}"),
        }
        drop(held);
        assert!(!apply_holder_file(dir.path()).exists(), "released: no holder named");
        let again = lock_mirror(dir.path(), LockWait::Fail).unwrap();
        drop(again);
        // The lock file stays, empty: a run leaves the mirror's contents as they were.
        assert_eq!(std::fs::read(apply_lock_file(dir.path())).unwrap(), b"");
    }
}
