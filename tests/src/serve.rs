//! `segmirror serve` beside a running replication, and the clients that read it while replication runs.
//!
//! Why a module: the endpoint's end-to-end tests all need the same scene (a live Kafka source, `ship --connect`
//! into `apply --listen`, then `serve` over the mirror with the applier's catalog) and the same kind of client: one
//! that keeps running while the test produces, prints what it receives as it receives it, and is stopped when the
//! test has seen enough. [`Replication`] is the scene; [`Client`] is such a process (kcat, the Java console
//! consumer, `tests/python/serve_client.py`), its stdout collected line by line; [`records`] says what the tests
//! produce and turns each client's lines into the harness's records; [`wire`] sends the raw requests no stock
//! client would.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::clients::Isolation;
use crate::install::{kafka_support_dir, repo_root, KafkaInstall};
use crate::ports::free_port;
use crate::service::Service;
use crate::tools::{TopicSpec, CONSOLE_CONSUMER};
use crate::{admin, BrokerConfig, KafkaBroker};

pub mod records;
pub mod wire;

/// Guard against hangs for anything a test waits on; never a speed assertion.
pub const PATIENCE: Duration = Duration::from_secs(180);

/// Per partition: the `.log` files of its directory, (name, length).
type DirState = Vec<Vec<(String, u64)>>;

/// A source broker replicated by `segmirror ship --connect` into `segmirror apply --listen` (plaintext, up to the
/// log end), link [`Replication::link`], its mirror and catalog in temporary directories.
pub struct Replication {
    pub broker: KafkaBroker,
    pub link: String,
    pub mirror: tempfile::TempDir,
    pub work: tempfile::TempDir,
    pub catalog: PathBuf,
    /// The applier and the shipper; none in the reference mode ([`REFERENCE_ENV`]), which needs no mirror.
    services: Option<(Service, Service)>,
    /// (topic, partitions) of every topic created.
    pub topics: Vec<(String, i32)>,
}

/// Whether the tests run against Kafka itself ([`REFERENCE_ENV`]).
pub fn reference_mode() -> bool {
    std::env::var(REFERENCE_ENV).is_ok_and(|v| v == "kafka")
}

impl Replication {
    /// Starts a Kafka broker named `name`, creates `specs`, then the applier and the shipper of `link`.
    pub fn start(name: &str, link: &str, specs: &[TopicSpec]) -> Replication {
        let broker = KafkaBroker::start(BrokerConfig::new(name)).unwrap();
        admin(&broker.bootstrap(), specs, &[]).unwrap();
        let mirror = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let catalog = work.path().join("catalog.sqlite");
        let services = (!reference_mode()).then(|| {
            let mut applier = Service::start(
                "apply",
                [
                    "apply",
                    "--listen",
                    "127.0.0.1:0",
                    "--mirror",
                    mirror.path().to_str().unwrap(),
                    "--catalog",
                    catalog.to_str().unwrap(),
                    "--link",
                    link,
                    "--plaintext",
                ],
            )
            .patience(PATIENCE);
            let addr = applier.wait_for("listening on ").trim().to_string();
            let shipper = Service::start(
                "ship",
                [
                    "ship",
                    "--log-dir",
                    broker.log_dir().to_str().unwrap(),
                    "--link",
                    link,
                    "--plaintext",
                    "--connect",
                    &addr,
                    "--upto",
                    "log-end",
                    // The topics' configs travel with the link (DescribeConfigs answers them).
                    "--metadata-log-dir",
                    broker.log_dir().to_str().unwrap(),
                    "--meta-interval-ms",
                    "200",
                ],
            )
            .patience(PATIENCE);
            (applier, shipper)
        });
        Replication {
            broker,
            link: link.to_string(),
            mirror,
            work,
            catalog,
            services,
            topics: specs.iter().map(|s| (s.name.clone(), s.partitions)).collect(),
        }
    }

    pub fn bootstrap(&self) -> String {
        self.broker.bootstrap()
    }

    /// Fails the test, with the logs, if the applier or the shipper exited.
    pub fn assert_running(&mut self) {
        if let Some((applier, shipper)) = &mut self.services {
            applier.assert_running();
            shipper.assert_running();
        }
    }

    /// The logs of the applier and the shipper.
    pub fn logs(&self) -> String {
        match &self.services {
            Some((applier, shipper)) => format!("--- apply ---\n{}\n--- ship ---\n{}", applier.log(), shipper.log()),
            None => String::new(),
        }
    }

    fn partitions(&self) -> Vec<String> {
        self.topics
            .iter()
            .flat_map(|(t, n)| (0..*n).map(move |p| format!("{t}-{p}")))
            .collect()
    }

    /// Per partition: the `.log` files (name, length) of the source and of the mirror.
    fn state(&self) -> (DirState, DirState) {
        let parts = self.partitions();
        let of = |root: &Path| -> DirState { parts.iter().map(|p| logs(&root.join(p))).collect() };
        (of(self.broker.log_dir()), of(self.mirror.path()))
    }

    /// Waits until the mirror holds every `.log` of the source at the source's length, unchanged for a second
    /// (the producers are stopped: nothing moves any more).
    pub fn wait_caught_up(&mut self) {
        if self.services.is_none() {
            return;
        }
        let start = Instant::now();
        let mut equal_since: Option<(Instant, DirState)> = None;
        loop {
            self.assert_running();
            let (src, mir) = self.state();
            let caught_up = src == mir && src.iter().all(|segments| !segments.is_empty());
            match &equal_since {
                Some((at, seen)) if caught_up && *seen == src => {
                    if at.elapsed() >= Duration::from_secs(1) {
                        return;
                    }
                }
                _ if caught_up => equal_since = Some((Instant::now(), src.clone())),
                _ => equal_since = None,
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the mirror never caught up: source {src:?}, mirror {mir:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until every partition of the mirror has a non-empty `.log`.
    pub fn wait_mirror_has_data(&mut self) {
        if self.services.is_none() {
            return;
        }
        let start = Instant::now();
        loop {
            self.assert_running();
            let (_, mir) = self.state();
            if mir.iter().all(|segments| segments.iter().any(|(_, len)| *len > 0)) {
                return;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the mirror never got data: {mir:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The arguments of `segmirror serve` over this mirror, plaintext on `127.0.0.1:port`.
    pub fn serve_args(&self, port: u16) -> Vec<String> {
        let mut args = self.serve_base_args(port);
        args.push("--plaintext".into());
        args
    }

    /// The arguments of `segmirror serve` over this mirror on `127.0.0.1:port`, without the transport's.
    fn serve_base_args(&self, port: u16) -> Vec<String> {
        [
            "serve",
            "--mirror",
            self.mirror.path().to_str().unwrap(),
            "--link",
            &self.link,
            "--catalog",
            self.catalog.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ]
        .map(String::from)
        .to_vec()
    }

    /// Stops the shipper and the applier with SIGTERM; both must exit 0.
    pub fn stop(self) {
        if let Some((applier, shipper)) = self.services {
            let (code, log) = shipper.stop();
            assert_eq!(code, Some(0), "ship:\n{log}");
            let (code, log) = applier.stop();
            assert_eq!(code, Some(0), "apply:\n{log}");
        }
    }
}

/// `(name, length)` of every `.log` in `dir`, by name (none if the directory does not exist yet).
fn logs(dir: &Path) -> Vec<(String, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, u64)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| {
            let len = e.metadata().map_or(0, |m| m.len());
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    out.sort();
    out
}

/// Set to `kafka`, the tests' clients talk to the source broker itself instead of `segmirror serve`: a check of
/// the tests' own expectations (parsers, client flags, error codes) against Kafka. The write refusal test fails
/// there by design (Kafka accepts writes); the memory bound is not checked (a JVM).
pub const REFERENCE_ENV: &str = "SEGMIRROR_SERVE_REFERENCE";

/// The server the clients of a test talk to.
pub enum Endpoint {
    /// `segmirror serve`, with its arguments (a restart reuses them, and so the port).
    Serve {
        service: Service,
        args: Vec<String>,
        port: u16,
    },
    /// The source broker (see [`REFERENCE_ENV`]).
    Reference { port: u16, pid: u32, log_file: PathBuf },
}

impl Endpoint {
    /// `host:port` for the clients.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    pub fn port(&self) -> u16 {
        match self {
            Endpoint::Serve { port, .. } | Endpoint::Reference { port, .. } => *port,
        }
    }

    pub fn is_reference(&self) -> bool {
        matches!(self, Endpoint::Reference { .. })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        match self {
            Endpoint::Serve { service, .. } => service.pid(),
            Endpoint::Reference { pid, .. } => *pid,
        }
    }

    /// Fails the test, with the log, if `serve` exited.
    pub fn assert_running(&mut self) {
        if let Endpoint::Serve { service, .. } = self {
            service.assert_running();
        }
    }

    /// What the server logged (the last lines of the broker's log for the reference).
    pub fn log(&self) -> String {
        match self {
            Endpoint::Serve { service, .. } => service.log(),
            Endpoint::Reference { log_file, .. } => {
                let text = std::fs::read_to_string(log_file).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(40)..].join("\n")
            }
        }
    }

    /// Stops `serve` with SIGTERM: it must exit 0 (the reference broker runs on).
    pub fn stop(self) {
        if let Endpoint::Serve { service, .. } = self {
            let (code, log) = service.stop();
            assert_eq!(code, Some(0), "serve:\n{log}");
        }
    }
}

impl Replication {
    /// `segmirror serve` over this mirror on a free port, accepting connections (or the reference, see
    /// [`REFERENCE_ENV`]).
    pub fn start_endpoint(&self) -> Endpoint {
        if reference_mode() {
            return Endpoint::Reference {
                port: self.broker.broker_port(),
                pid: self.broker.pid().unwrap(),
                log_file: self.broker.log_file(),
            };
        }
        let port = free_port().unwrap();
        let args = self.serve_args(port);
        let mut service = Service::start("serve", &args).patience(PATIENCE);
        wait_accepting(&mut service, port);
        Endpoint::Serve { service, args, port }
    }

    /// `segmirror serve` over this mirror on a free port with the arguments `more` gives for that port (the
    /// transport's: `--plaintext`, or the TLS files; `--advertised-listener`), accepting connections. Never the
    /// reference.
    pub fn start_serve_with(&self, more: impl FnOnce(u16) -> Vec<String>) -> Endpoint {
        let port = free_port().unwrap();
        let mut args = self.serve_base_args(port);
        args.extend(more(port));
        let mut service = Service::start("serve", &args).patience(PATIENCE);
        wait_accepting(&mut service, port);
        Endpoint::Serve { service, args, port }
    }

    /// Stops the endpoint (serve: SIGTERM, exit 0; the reference: a clean broker stop) and starts it again on the
    /// same port.
    pub fn restart_endpoint(&mut self, endpoint: Endpoint) -> Endpoint {
        match endpoint {
            Endpoint::Serve { service, args, port } => {
                let (code, log) = service.stop();
                assert_eq!(code, Some(0), "serve:\n{log}");
                let mut service = Service::start("serve", &args).patience(PATIENCE);
                wait_accepting(&mut service, port);
                Endpoint::Serve { service, args, port }
            }
            Endpoint::Reference { port, log_file, .. } => {
                self.broker.stop().unwrap();
                self.broker.restart().unwrap();
                Endpoint::Reference {
                    port,
                    pid: self.broker.pid().unwrap(),
                    log_file,
                }
            }
        }
    }
}

/// Waits until something accepts TCP connections on `127.0.0.1:port`, while `serve` runs.
fn wait_accepting(serve: &mut Service, port: u16) {
    let start = Instant::now();
    loop {
        serve.assert_running();
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "serve never accepted connections on port {port}:\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A client process that keeps running: its stdout lines collected as they come, its stderr kept for failure
/// messages, its stdin open for commands. Killed when dropped.
pub struct Client {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Client {
    /// Spawns `cmd` (stdin, stdout and stderr piped) and writes `first_line` to its stdin when given.
    pub fn spawn(name: &str, mut cmd: Command, first_line: Option<&str>) -> Result<Client> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().context("stdout")?;
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let err = child.stderr.take().context("stderr")?;
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut client = Client {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        };
        if let Some(line) = first_line {
            client.send(line)?;
        }
        Ok(client)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes one line to the client's stdin.
    pub fn send(&mut self, line: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{line}")
            .and_then(|_| stdin.flush())
            .with_context(|| format!("writing to {}", self.name))
    }

    /// Closes the client's stdin (the end of its input).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Every stdout line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL if it has not exited 30 s later: the exit code (None when killed), every stdout line
    /// and the stderr.
    pub fn stop(mut self) -> (Option<i32>, Vec<String>, String) {
        self.stdin.take();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        let status = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status.code();
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The reader threads collect what is left in the pipes.
        std::thread::sleep(Duration::from_millis(200));
        (status, self.lines(), self.stderr())
    }

    /// Waits until the process exits by itself (after its stdin closed, say): its exit code.
    pub fn wait_exit(&mut self, patience: Duration) -> Result<Option<i32>> {
        self.stdin.take();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                std::thread::sleep(Duration::from_millis(200));
                return Ok(status.code());
            }
            if start.elapsed() > patience {
                bail!("{} did not exit within {patience:?}:\n{}", self.name, self.stderr());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tests/python/serve_client.py`.
pub fn serve_client_script() -> PathBuf {
    repo_root().join("tests").join("python").join("serve_client.py")
}

/// `serve_client.py <command>` with `request` as its first stdin line, left running.
pub fn python_client(name: &str, command: &str, request: &Value) -> Result<Client> {
    crate::install::require_python_client()?;
    let mut cmd = Command::new("python3");
    cmd.arg(serve_client_script()).arg(command);
    Client::spawn(name, cmd, Some(&request.to_string()))
}

/// `serve_client.py <command>` run to its end: the JSON object it printed last.
pub fn python_call(command: &str, request: &Value, patience: Duration) -> Result<Value> {
    let mut client = python_client(command, command, request)?;
    let code = client.wait_exit(patience)?;
    if code != Some(0) {
        bail!("serve_client.py {command} exited {code:?}:\n{}", client.stderr());
    }
    let lines = client.lines();
    let last = lines
        .last()
        .with_context(|| format!("serve_client.py {command} printed nothing"))?;
    serde_json::from_str(last).with_context(|| format!("serve_client.py {command} printed {last:?}"))
}

/// An assign-mode reader of every partition of `topic` from offset 0 (`serve_client.py follow`).
pub fn python_follow(bootstrap: &str, topic: &str, isolation: Isolation) -> Result<Client> {
    let request = serde_json::json!({"bootstrap": bootstrap, "topic": topic, "isolation": isolation.as_str()});
    python_client(&format!("python follow {}", isolation.as_str()), "follow", &request)
}

/// `kcat -C` of every partition of `topic` from the beginning, following (no `-e`), JSON lines, unbuffered.
pub fn kcat_follow(bootstrap: &str, topic: &str, isolation: Isolation) -> Result<Client> {
    crate::install::require_kcat()?;
    let mut cmd = Command::new("kcat");
    cmd.args(["-C", "-b", bootstrap, "-t", topic, "-J", "-q", "-u", "-o", "beginning"])
        .arg("-X")
        .arg(format!("isolation.level={}", isolation.as_str()));
    Client::spawn(&format!("kcat {}", isolation.as_str()), cmd, None)
}

/// Java `kafka-console-consumer` as a member of `group` from the beginning, following, with timestamp, partition,
/// offset, headers and key printed.
pub fn java_console_follow(
    install: &'static KafkaInstall,
    bootstrap: &str,
    topic: &str,
    group: &str,
    isolation: Isolation,
) -> Result<Client> {
    let mut cmd = install.java(256, &kafka_support_dir().join("tools-log4j2.properties"));
    cmd.arg(install.main_class(CONSOLE_CONSUMER)).args([
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--isolation-level",
        isolation.as_str(),
    ]);
    for p in [
        "print.timestamp",
        "print.partition",
        "print.offset",
        "print.headers",
        "print.key",
    ] {
        cmd.arg("--formatter-property").arg(format!("{p}=true"));
    }
    Client::spawn(&format!("kafka-console-consumer {}", isolation.as_str()), cmd, None)
}

/// `VmRSS` of a process, in KiB.
pub fn vm_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    line.split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()
        .context("VmRSS number")
}

/// How many descriptors a process has open.
pub fn open_fds(pid: u32) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))
        .context("reading /proc/PID/fd")?
        .count())
}

/// Makes sure this process may open `wanted` descriptors: raises the soft `RLIMIT_NOFILE` to the hard limit with
/// `prlimit` when it is lower. The processes it starts afterwards inherit the limit.
pub fn ensure_fd_limit(wanted: u64) -> Result<()> {
    let soft = || -> Result<(u64, u64)> {
        let limits = std::fs::read_to_string("/proc/self/limits")?;
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .context("no 'Max open files' in /proc/self/limits")?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parse = |s: &str| {
            if s == "unlimited" {
                Ok(u64::MAX)
            } else {
                s.parse::<u64>()
            }
        };
        Ok((parse(fields[3])?, parse(fields[4])?))
    };
    let (current, hard) = soft()?;
    if current >= wanted {
        return Ok(());
    }
    if hard < wanted {
        bail!("this test needs {wanted} descriptors but the hard limit is {hard} (raise it: ulimit -Hn)");
    }
    let hard = if hard == u64::MAX {
        "unlimited".to_string()
    } else {
        hard.to_string()
    };
    let status = Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={hard}:{hard}"))
        .status()
        .context("running prlimit")?;
    let (now, _) = soft()?;
    if !status.success() || now < wanted {
        bail!("could not raise the descriptor limit from {current} to {wanted} (ulimit -n {wanted})");
    }
    Ok(())
}
