//! A running `segmirror` service (`ship`, `apply --listen|--connect`) with its stderr collected line by line, for
//! the CLI tests of the long-running services.

use std::io::{BufRead, BufReader};
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

/// The data directory (`SEGMIRROR_HOME`) of every `segmirror` this test process starts: one per process, never the
/// user's own, so no catalog or link record is shared with another test binary or with the operator.
pub fn test_home() -> &'static std::path::Path {
    static HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let home = std::env::temp_dir().join(format!("segmirror-tools-test-home-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&home).expect("creating the tests' SEGMIRROR_HOME");
        home
    })
}
