//! Unit tests of the log dir lock (taken the way the broker takes it).

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
