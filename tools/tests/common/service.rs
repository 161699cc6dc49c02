//! A running `segmirror` service (`ship`, `apply --listen|--connect`) with its stderr collected line by line, for
//! the CLI tests of the long-running services, and the waits those tests share (a condition, a mirror equal to its
//! source), each failing with every service's log when a service exits or the patience runs out.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for something that should happen (a guard against hangs, not a speed assertion).
pub const PATIENCE: Duration = Duration::from_secs(90);

/// A running `segmirror` with its stderr collected line by line.
pub struct Service {
    pub child: Child,
    stderr: Arc<Mutex<String>>,
    pub name: &'static str,
}

impl Service {
    /// Started with `SEGMIRROR_LOG=info`, so its tracing lines are in the log too.
    pub fn start(name: &'static str, args: &[String]) -> Service {
        Service::spawn(name, args, Some("info"))
    }

    /// Started with `SEGMIRROR_LOG` unset: the log holds what the service prints by default.
    pub fn start_quiet(name: &'static str, args: &[String]) -> Service {
        Service::spawn(name, args, None)
    }

    fn spawn(name: &'static str, args: &[String], log_filter: Option<&str>) -> Service {
        let mut command = Command::new(env!("CARGO_BIN_EXE_segmirror"));
        command.env("SEGMIRROR_HOME", test_home()).args(args);
        match log_filter {
            Some(filter) => command.env("SEGMIRROR_LOG", filter),
            None => command.env_remove("SEGMIRROR_LOG"),
        };
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Service { child, stderr, name }
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until stderr contains `needle`; panics with the log if the process exits or patience runs out.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if let Some(at) = log.find(needle) {
                return log[at + needle.len()..].lines().next().unwrap_or("").to_string();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}) before logging {needle:?}:\n{log}", self.name);
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{} never logged {needle:?}:\n{log}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The address a `--listen 127.0.0.1:0` service bound.
    pub fn bound(&mut self) -> String {
        self.wait_for("listening on ").trim().to_string()
    }

    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, then the exit code.
    pub fn stop(mut self) -> (Option<i32>, String) {
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(r, 0);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader thread drain the pipe.
                std::thread::sleep(Duration::from_millis(100));
                return (status.code(), self.log());
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{} did not stop:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `done()` holds; fails naming `what`, with every service's log, when one of them exits or
/// [`PATIENCE`] runs out.
pub fn wait_until(what: &str, services: &mut [&mut Service], mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        for s in services.iter_mut() {
            assert!(s.running(), "{} exited while waiting for {what}:\n{}", s.name, s.log());
        }
        if start.elapsed() >= PATIENCE {
            let logs: String = services
                .iter()
                .map(|s| format!("--- {} ---\n{}", s.name, s.log()))
                .collect();
            panic!("never: {what}\n{logs}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `.log` files of `dir`, relative to `root` (`<partition>/<base>.log`), sorted; with `dir == root`, those of
/// every partition directory under it.
pub fn log_files(root: &Path, dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && d == root {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "log") {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Does `mirror` hold each of `files` (relative paths) with `source`'s bytes?
pub fn same_files(source: &Path, mirror: &Path, files: &[std::path::PathBuf]) -> bool {
    files
        .iter()
        .all(|f| std::fs::read(mirror.join(f)).ok() == Some(std::fs::read(source.join(f)).unwrap()))
}

/// Waits until `mirror` holds every `.log` of `source`'s partition directory `rel` (e.g. `orders-0`; `""` for
/// every partition) with the same bytes. The source must have some: an empty comparison proves nothing.
pub fn wait_mirrored(source: &Path, mirror: &Path, rel: &str, services: &mut [&mut Service]) {
    let files = log_files(source, &source.join(rel));
    assert!(!files.is_empty(), "no .log under {}", source.join(rel).display());
    let what = format!("{} mirrored in {}", source.join(rel).display(), mirror.display());
    wait_until(&what, services, || same_files(source, mirror, &files));
}

static HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// The data directory (`SEGMIRROR_HOME`) of every `segmirror` this test process starts: one per process, never the
/// user's own, so no catalog or link record is shared with another test binary or with the operator. Removed when
/// the test process exits (a process killed by a signal leaves it).
pub fn test_home() -> &'static std::path::Path {
    HOME.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let home = std::env::temp_dir().join(format!("segmirror-tools-test-home-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&home).expect("creating the tests' SEGMIRROR_HOME");
        // SAFETY: registers a plain function with no arguments; it runs once, at exit.
        unsafe { libc::atexit(remove_test_home) };
        home
    })
}

extern "C" fn remove_test_home() {
    if let Some(home) = HOME.get() {
        let _ = std::fs::remove_dir_all(home);
    }
}
