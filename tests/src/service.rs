//! `segmirror` services (`ship`, `apply --listen|--connect`) as child processes, for end-to-end tests that run
//! them as an operator would: started with their arguments, their stderr collected, waited on for a log line,
//! SIGKILLed and restarted with the same arguments, or stopped with SIGTERM (the exit code and the log returned).
//!
//! Why one module: the services tests and the tail process tests drive the same binary the same way, and a fix
//! to how a child is watched (a hang guard, a lost log line) belongs to both.
//!
//! Also here: [`Settle`], the "caught up, and still so after a while" rule the tail tests wait on; [`wait_until`],
//! the plain "until this holds, while every service runs" wait; [`follow_args`], how the tests start an
//! `apply --follow`; [`direct_link`], a plaintext direct link on loopback.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::segmirror_cli::segmirror_binary;

/// A direct link on loopback for link `link`, both ends running: `segmirror apply --listen 127.0.0.1:0 --plaintext`
/// into `mirror` (with `catalog`), and `segmirror ship --upto log-end --plaintext --connect` from the broker log dir
/// `log_dir` to it, with `ship_extra` arguments (e.g. `--topics`). Returns (applier, shipper).
pub fn direct_link(
    mirror: &Path,
    catalog: &Path,
    log_dir: &Path,
    link: &str,
    ship_extra: &[&str],
) -> (Service, Service) {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut applier = Service::start(
        "apply --listen",
        [
            "apply",
            "--mirror",
            &s(mirror),
            "--catalog",
            &s(catalog),
            "--link",
            link,
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
        ],
    );
    let addr = applier.wait_for("listening on ").trim().to_string();
    let mut ship = vec![
        "ship".to_string(),
        "--log-dir".into(),
        s(log_dir),
        "--link".into(),
        link.into(),
        "--upto".into(),
        "log-end".into(),
        "--connect".into(),
        addr,
        "--plaintext".into(),
    ];
    ship.extend(ship_extra.iter().map(|a| a.to_string()));
    let shipper = Service::start("ship", ship);
    (applier, shipper)
}

/// How long a service is waited for (a log line, an exit after SIGTERM) before the test fails: a guard against
/// hangs, never a speed assertion. Three minutes: a shipper restarted into a broker's retention can take a minute
/// to log what it waits for on a loaded two-core machine. [`Service::patience`] sets another.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(180);

/// How often a wait looks at the log or the child again.
const POLL: Duration = Duration::from_millis(50);

/// A running `segmirror` with its stderr collected, restartable with the same arguments. Killed when dropped.
pub struct Service {
    child: Child,
    stderr: Arc<Mutex<String>>,
    name: String,
    args: Vec<String>,
    /// Extra environment variables (e.g. the `AWS_*` of an S3-compatible server), kept for restarts.
    env: Vec<(String, String)>,
    /// The logs of the earlier (killed) incarnations, for failure messages.
    history: String,
    patience: Duration,
    /// Collect stdout into the log too (a command whose report goes to stdout).
    with_stdout: bool,
}

impl Service {
    /// Starts `segmirror <args>` (`SEGMIRROR_LOG=info`); `name` says which service in failure messages.
    pub fn start<S: AsRef<str>>(name: &str, args: impl IntoIterator<Item = S>) -> Service {
        Service::start_with_env(name, args, &[])
    }

    /// As [`Service::start`], with extra environment variables (kept for restarts).
    pub fn start_with_env<S: AsRef<str>>(
        name: &str,
        args: impl IntoIterator<Item = S>,
        env: &[(&str, String)],
    ) -> Service {
        let args: Vec<String> = args.into_iter().map(|a| a.as_ref().to_string()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let (child, stderr) = spawn(&args, &env, false);
        Service {
            child,
            stderr,
            name: name.to_string(),
            args,
            env,
            history: String::new(),
            patience: DEFAULT_PATIENCE,
            with_stdout: false,
        }
    }

    /// As [`Service::start`], with stdout collected into the log as well (lines of the two streams interleaved as
    /// they arrive): for a command that reports its progress on stdout, such as `segmirror failover`.
    pub fn start_with_stdout<S: AsRef<str>>(name: &str, args: impl IntoIterator<Item = S>) -> Service {
        let args: Vec<String> = args.into_iter().map(|a| a.as_ref().to_string()).collect();
        let (child, stderr) = spawn(&args, &[], true);
        Service {
            child,
            stderr,
            name: name.to_string(),
            args,
            env: Vec::new(),
            history: String::new(),
            patience: DEFAULT_PATIENCE,
            with_stdout: true,
        }
    }

    /// Waits until the service exits by itself: its exit code and the log.
    pub fn wait_exit(&mut self) -> (Option<i32>, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                std::thread::sleep(Duration::from_millis(100));
                return (status.code(), self.log());
            }
            assert!(
                start.elapsed() < self.patience,
                "{} did not exit:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits of at most `patience` from now on.
    pub fn patience(mut self, patience: Duration) -> Service {
        self.patience = patience;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Everything logged so far, earlier incarnations first, without the terminal colours of its fields.
    pub fn log(&self) -> String {
        strip_ansi(&format!("{}{}", self.history, self.stderr.lock().unwrap()))
    }

    /// The process id of the current incarnation.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, once the service has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Fails the test, with the log, when the service has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.exited() {
            panic!("{} exited ({status}):\n{}", self.name, self.log());
        }
    }

    /// Waits until this incarnation logs `needle`; returns the rest of that line.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let start = Instant::now();
        loop {
            let current = self.stderr.lock().unwrap().clone();
            if let Some(at) = current.find(needle) {
                return strip_ansi(current[at + needle.len()..].lines().next().unwrap_or(""));
            }
            self.assert_running();
            assert!(
                start.elapsed() < self.patience,
                "{} never logged {needle:?}:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILL (no cleanup at all), then the same command again.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.restart();
    }

    /// SIGKILL; the service must have been running.
    pub fn kill(&mut self) {
        self.assert_running();
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }

    /// The same command again, after [`Service::kill`].
    pub fn restart(&mut self) {
        let old = std::mem::take(&mut *self.stderr.lock().unwrap());
        self.history
            .push_str(&format!("{old}--- {} SIGKILLed and restarted ---\n", self.name));
        let (child, stderr) = spawn(&self.args, &self.env, self.with_stdout);
        self.child = child;
        self.stderr = stderr;
    }

    /// SIGTERM; the exit code and the log.
    pub fn stop(mut self) -> (Option<i32>, String) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The last lines the reader thread has yet to collect.
                std::thread::sleep(Duration::from_millis(100));
                return (status.code(), self.log());
            }
            assert!(
                start.elapsed() < self.patience,
                "{} did not stop:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn next_shipper_home() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn spawn(args: &[String], env: &[(String, String)], with_stdout: bool) -> (Child, Arc<Mutex<String>>) {
    // A shipper gets a data directory of its own: it would otherwise read the link record the applier of the same
    // test keeps in the shared one (both ends on one host, one catalog) and follow that record's state and regex.
    let home = if args.first().is_some_and(|a| a == "ship") {
        let home = crate::segmirror_cli::test_home().join(format!("shipper-{}", next_shipper_home()));
        std::fs::create_dir_all(&home).unwrap();
        home
    } else {
        crate::segmirror_cli::test_home().to_path_buf()
    };
    let mut child = Command::new(segmirror_binary().unwrap())
        .env("SEGMIRROR_HOME", home)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("SEGMIRROR_LOG", "info")
        .stdout(if with_stdout { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    let collect = |pipe: Box<dyn std::io::Read + Send>| {
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
    };
    collect(Box::new(child.stderr.take().unwrap()));
    if let Some(out) = child.stdout.take() {
        collect(Box::new(out));
    }
    (child, stderr)
}

/// How often [`wait_until`] looks again: a few times per upload or poll interval of the services under test.
const WAIT_POLL: Duration = Duration::from_millis(200);

/// Waits until `probe` returns `(true, _)`, looking every 200 ms; fails naming `what`, with the last value `probe`
/// saw and every service's log, when a service exits or `patience` runs out.
pub fn wait_until<T: std::fmt::Debug>(
    what: &str,
    patience: Duration,
    services: &mut [&mut Service],
    mut probe: impl FnMut() -> (bool, T),
) {
    let start = Instant::now();
    loop {
        let (done, seen) = probe();
        if done {
            return;
        }
        for s in services.iter_mut() {
            s.assert_running();
        }
        if start.elapsed() > patience {
            let logs: Vec<String> = services
                .iter()
                .map(|s| format!("--- {} ---\n{}", s.name(), s.log()))
                .collect();
            panic!("never: {what} (last seen {seen:?})\n{}", logs.join("\n"));
        }
        std::thread::sleep(WAIT_POLL);
    }
}

/// `segmirror apply --store URL --follow` of `link` into its own `mirror` and `catalog`, looking at the bucket every
/// 100 ms (tests wait on it, an operator would not poll this often).
pub fn follow_args(url: &str, mirror: &Path, catalog: &Path, link: &str) -> Vec<String> {
    let (mirror, catalog) = (mirror.display().to_string(), catalog.display().to_string());
    [
        "apply",
        "--store",
        url,
        "--mirror",
        &mirror,
        "--catalog",
        &catalog,
        "--link",
        link,
        "--follow",
        "--poll-interval-ms",
        "100",
    ]
    .map(String::from)
    .to_vec()
}

/// What a [`Settle`] says about an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settling {
    /// Caught up, with the same state for the whole settling time: stop waiting.
    Settled,
    /// Not yet: look again.
    Waiting,
    /// The patience ran out before.
    TimedOut,
}

/// "Caught up, and the same for a while": a mirror must equal its source and stay equal while the broker's
/// background work (retention, the cleaner) could still change the source. Fed one observation per poll by the
/// test's own loop (which knows how to look, synchronously or not, and what to print on a timeout).
#[derive(Debug)]
pub struct Settle<S> {
    since: Option<(Instant, S)>,
    settled_for: Duration,
    deadline: Instant,
}

impl<S: PartialEq> Settle<S> {
    /// Settled once caught up with an unchanged state for `settled_for` (zero: at the first observation caught
    /// up); timed out after `patience` from now.
    pub fn new(settled_for: Duration, patience: Duration) -> Settle<S> {
        Settle {
            since: None,
            settled_for,
            deadline: Instant::now() + patience,
        }
    }

    /// One observation: whether the mirror is caught up, and the state compared between observations.
    pub fn observe(&mut self, caught_up: bool, state: S) -> Settling {
        self.observe_at(Instant::now(), caught_up, state)
    }

    fn observe_at(&mut self, now: Instant, caught_up: bool, state: S) -> Settling {
        match &self.since {
            _ if !caught_up => self.since = None,
            Some((_, before)) if *before == state => {}
            _ => self.since = Some((now, state)),
        }
        if self
            .since
            .as_ref()
            .is_some_and(|(at, _)| now.duration_since(*at) >= self.settled_for)
        {
            Settling::Settled
        } else if now >= self.deadline {
            Settling::TimedOut
        } else {
            Settling::Waiting
        }
    }
}

/// `s` without ANSI escape sequences (`ESC [ ... m`).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_only_on_an_unchanged_caught_up_state() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut s = Settle::new(Duration::from_millis(30), Duration::from_secs(3600));
        assert_eq!(s.observe_at(at(0), true, 1), Settling::Waiting);
        // Changed after 40 ms: the settling time starts again; not caught up: it stops.
        assert_eq!(s.observe_at(at(40), true, 2), Settling::Waiting);
        assert_eq!(s.observe_at(at(50), false, 2), Settling::Waiting);
        assert_eq!(s.observe_at(at(60), true, 2), Settling::Waiting);
        assert_eq!(s.observe_at(at(80), true, 2), Settling::Waiting);
        assert_eq!(s.observe_at(at(90), true, 2), Settling::Settled);
        // Zero settling time: the first caught-up observation; past the deadline, a timeout.
        let mut zero = Settle::new(Duration::ZERO, Duration::from_secs(3600));
        assert_eq!(zero.observe_at(at(0), true, ()), Settling::Settled);
        let mut late = Settle::new(Duration::from_secs(1), Duration::from_secs(1));
        assert_eq!(late.observe_at(at(0), true, ()), Settling::Waiting);
        assert_eq!(late.observe_at(at(5000), false, ()), Settling::TimedOut);
    }
}
