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
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn a_second_process_cannot_take_the_lock_while_it_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LogDirLock::try_acquire(dir.path()).expect("free lock");
        assert_eq!(lock.path(), dir.path().join(LOCK_FILE));
        // Another process sees it held: python's fcntl.lockf is the same F_SETLK record lock the JVM uses.
        let probe = |expect: &str| {
            let script = format!(
                "import fcntl,sys\nf=open({:?},'a')\ntry:\n fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB)\n print('free')\nexcept OSError:\n print('held')\n",
                dir.path().join(LOCK_FILE)
            );
            let out = Command::new("python3")
                .args(["-c", &script])
                .stderr(Stdio::inherit())
                .output()
                .expect("python3 (the test harness needs it too)");
            assert!(out.status.success());
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), expect);
        };
        probe("held");
        drop(lock);
        probe("free");
        // And it can be taken again once released.
        drop(LogDirLock::try_acquire(dir.path()).expect("lock again"));
    }

    #[test]
    fn a_lock_held_by_another_process_is_reported_as_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        let script = format!(
            "import fcntl,sys,time\nf=open({path:?},'a')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()\n"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 (the test harness needs it too)");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "locked");
        assert!(matches!(LogDirLock::try_acquire(dir.path()), Err(LockFailure::Held)));
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(LogDirLock::try_acquire(dir.path()).is_ok());
    }
}
