//! One real Kafka node (KRaft, `process.roles=broker,controller` unless [`NodeRole`] says otherwise) per
//! [`KafkaBroker`], of the pinned Kafka version or of another installed one ([`BrokerConfig::kafka_version`]; 3.9
//! and 4.4 start, format and stop the same way here).
//!
//! Why a real broker: segmirror's output must be loadable by stock Kafka and readable by stock clients, and only
//! the real thing proves that. Each broker gets its own free loopback ports, its own cluster id and its own work
//! directory (config, `broker.log`, and by default the log dir `data/`). The storage is formatted with
//! `kafka.tools.StorageTool format` only when the log dir has no `meta.properties`, so a broker can be started
//! again on an existing log dir (after `stop()`, or by a new `KafkaBroker` given the same `log_dir`) — the way a
//! test puts copied segments in front of a broker.
//!
//! The quorum is configured statically (`controller.quorum.voters`), not with a formatted voter set, so a log dir
//! can be restarted under different ports. Dropping a broker kills it; if the thread is panicking the tail of the
//! broker's log is printed and its work directory is kept for inspection.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::install::{kafka_support_dir, KafkaInstall};
use crate::ports::free_port;
use crate::tools::KafkaTools;

/// The line `KafkaRaftServer` logs once the broker serves clients (registered and unfenced).
const STARTED_LINE: &str = "Kafka Server started";
/// How the harness marks each start of a broker in its `broker.log` (followed by ` #<n> of broker <name> ====`).
pub const START_MARKER: &str = "==== segmirror harness: start";
/// Marker file the broker writes into each log dir after a clean shutdown.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// Default heap: enough for tests with small segments; nine brokers would still fit in this machine's memory.
pub const DEFAULT_HEAP_MB: u32 = 384;
/// Default start timeout: start-up takes ~2 s here, but several JVMs starting at once on two cores take longer.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a clean shutdown may take before `stop()` gives up and kills.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start a broker. Build with [`BrokerConfig::new`] and the chained setters.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Short name used in the work-dir name and in log messages.
    pub name: String,
    /// Log dir (`log.dirs`); `None` = `data/` inside the broker's temporary work dir. An existing formatted dir is
    /// reused without formatting.
    pub log_dir: Option<PathBuf>,
    /// Cluster id for formatting (22-char base64 UUID); `None` = random. Ignored (but checked) for an existing dir.
    pub cluster_id: Option<String>,
    /// JVM heap in MiB.
    pub heap_mb: u32,
    /// `server.properties` entries that override or extend the harness defaults.
    pub properties: BTreeMap<String, String>,
    /// How long to wait for the broker to serve.
    pub start_timeout: Duration,
    /// Kafka version to run (an installed one, see [`KafkaInstall::version`]); `None` = the pinned default.
    pub kafka_version: Option<String>,
    /// (PLAINTEXT, CONTROLLER) ports; `None` = two fresh ones. A cluster chooses them before any node starts, since
    /// every node's `controller.quorum.voters` names all controllers.
    pub ports: Option<(u16, u16)>,
    /// What the node runs (`process.roles`); default both, a single-node cluster.
    pub role: NodeRole,
}

/// `process.roles` of a node: a single-node test broker runs both; a [`KafkaCluster`](crate::cluster::KafkaCluster)
/// splits them (brokers that can all stop cleanly while their controller still runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeRole {
    /// `broker,controller`: listens on both ports.
    #[default]
    Combined,
    /// `broker` only: listens on the PLAINTEXT port; its controllers are named by `controller.quorum.voters`.
    Broker,
    /// `controller` only: listens on the CONTROLLER port and serves no clients.
    Controller,
}

impl NodeRole {
    fn process_roles(self) -> &'static str {
        match self {
            NodeRole::Combined => "broker,controller",
            NodeRole::Broker => "broker",
            NodeRole::Controller => "controller",
        }
    }
}

impl BrokerConfig {
    pub fn new(name: &str) -> Self {
        BrokerConfig {
            name: name.to_string(),
            log_dir: None,
            cluster_id: None,
            heap_mb: DEFAULT_HEAP_MB,
            properties: BTreeMap::new(),
            start_timeout: DEFAULT_START_TIMEOUT,
            kafka_version: None,
            ports: None,
            role: NodeRole::Combined,
        }
    }

    /// Runs as this role instead of a combined broker and controller.
    pub fn role(mut self, role: NodeRole) -> Self {
        self.role = role;
        self
    }

    /// Listens on these (PLAINTEXT, CONTROLLER) ports instead of fresh ones.
    pub fn ports(mut self, broker: u16, controller: u16) -> Self {
        self.ports = Some((broker, controller));
        self
    }

    /// Runs this Kafka version instead of the pinned default (it must be installed: see
    /// `tests/kafka/kafka-compat.versions`).
    pub fn kafka_version(mut self, version: &str) -> Self {
        self.kafka_version = Some(version.to_string());
        self
    }

    pub fn log_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.log_dir = Some(dir.into());
        self
    }

    pub fn cluster_id(mut self, id: &str) -> Self {
        self.cluster_id = Some(id.to_string());
        self
    }

    pub fn heap_mb(mut self, mb: u32) -> Self {
        self.heap_mb = mb;
        self
    }

    /// Sets one `server.properties` entry (overrides a harness default of the same key).
    pub fn property(mut self, key: &str, value: impl ToString) -> Self {
        self.properties.insert(key.to_string(), value.to_string());
        self
    }
}

/// Harness defaults for fast single-node tests; `BrokerConfig::properties` overrides them.
fn default_properties() -> Vec<(&'static str, &'static str)> {
    vec![
        ("num.partitions", "1"),
        ("default.replication.factor", "1"),
        ("auto.create.topics.enable", "false"),
        ("offsets.topic.replication.factor", "1"),
        ("offsets.topic.num.partitions", "1"),
        ("transaction.state.log.replication.factor", "1"),
        ("transaction.state.log.min.isr", "1"),
        ("transaction.state.log.num.partitions", "1"),
        ("share.coordinator.state.topic.replication.factor", "1"),
        ("share.coordinator.state.topic.min.isr", "1"),
        ("group.initial.rebalance.delay.ms", "0"),
        ("num.network.threads", "2"),
        ("num.io.threads", "2"),
        ("background.threads", "2"),
        ("num.recovery.threads.per.data.dir", "1"),
        // Retention and cleaning run soon and often so that tests see deleted and compacted segments quickly.
        ("log.initial.task.delay.ms", "0"),
        ("log.retention.check.interval.ms", "500"),
        ("log.cleaner.backoff.ms", "200"),
        ("log.cleaner.threads", "1"),
        // Checkpoint files on disk stay close to the broker's memory state (defaults: 60 s / 60 s / 5 s), so tests
        // that read a live log dir see current recovery points, log start offsets and high watermarks.
        ("log.flush.offset.checkpoint.interval.ms", "1000"),
        ("log.flush.start.offset.checkpoint.interval.ms", "1000"),
        ("replica.high.watermark.checkpoint.interval.ms", "1000"),
        // The default 128 MiB dedupe buffer does not fit a small heap.
        ("log.cleaner.dedupe.buffer.size", "16777216"),
    ]
}

/// A running (or stopped) single-node Kafka.
pub struct KafkaBroker {
    install: &'static KafkaInstall,
    config: BrokerConfig,
    /// Work dir (server.properties, broker.log, default log dir). `None` once kept after a panic.
    work: Option<tempfile::TempDir>,
    work_path: PathBuf,
    log_dir: PathBuf,
    cluster_id: String,
    broker_port: u16,
    controller_port: u16,
    child: Option<Child>,
    starts: u32,
    /// Where in `broker.log` the latest launch began, until it was seen serving.
    launched_at: Option<u64>,
}

impl KafkaBroker {
    /// Formats (if needed) and starts a broker, returning once it serves clients.
    pub fn start(config: BrokerConfig) -> Result<KafkaBroker> {
        let mut broker = Self::spawn(config)?;
        broker.wait_until_started()?;
        Ok(broker)
    }

    /// Formats (if needed) and launches a broker without waiting for it to serve: the nodes of a cluster serve
    /// only once a quorum of them runs, so they are all launched first and then waited for
    /// ([`wait_until_started`](Self::wait_until_started)).
    pub fn spawn(config: BrokerConfig) -> Result<KafkaBroker> {
        let install = match &config.kafka_version {
            Some(version) => KafkaInstall::version(version)?,
            None => KafkaInstall::locate()?,
        };
        let work = tempfile::Builder::new()
            .prefix(&format!("segmirror-kafka-{}-", config.name))
            .tempdir()
            .context("creating the broker work dir")?;
        let work_path = work.path().to_path_buf();
        let log_dir = config.log_dir.clone().unwrap_or_else(|| work_path.join("data"));
        let mut broker = KafkaBroker {
            install,
            work: Some(work),
            work_path,
            log_dir,
            cluster_id: String::new(),
            broker_port: match config.ports {
                Some((b, _)) => b,
                None => free_port()?,
            },
            controller_port: match config.ports {
                Some((_, c)) => c,
                None => free_port()?,
            },
            child: None,
            starts: 0,
            launched_at: None,
            config,
        };
        broker.write_server_properties()?;
        broker.cluster_id = broker.format_if_needed()?;
        broker.launch()?;
        Ok(broker)
    }

    /// Waits until the latest launch serves clients (at once if it was already seen serving).
    pub fn wait_until_started(&mut self) -> Result<()> {
        match self.launched_at {
            Some(from) => {
                self.wait_until_serving(&self.log_file(), from)?;
                self.launched_at = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Starts the broker again on the same log dir and ports (after [`stop`](Self::stop) or [`kill`](Self::kill)).
    pub fn restart(&mut self) -> Result<()> {
        if self.is_running() {
            bail!(
                "broker {} is still running; stop() or kill() it first",
                self.config.name
            );
        }
        self.launch()?;
        self.wait_until_started()
    }

    /// `host:port` of the PLAINTEXT listener.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.broker_port)
    }

    pub fn broker_port(&self) -> u16 {
        self.broker_port
    }

    pub fn controller_port(&self) -> u16 {
        self.controller_port
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The log dir (`log.dirs`).
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// `<log dir>/<topic>-<partition>`.
    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.log_dir.join(format!("{topic}-{partition}"))
    }

    /// Directory holding `server.properties` and `broker.log`.
    pub fn work_dir(&self) -> &Path {
        &self.work_path
    }

    /// The broker's stdout+stderr (log4j at INFO), appended across restarts.
    pub fn log_file(&self) -> PathBuf {
        self.work_path.join("broker.log")
    }

    /// The last `lines` lines of the broker log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read(self.log_file())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Java tool runner bound to this broker.
    pub fn tools(&self) -> KafkaTools {
        KafkaTools::new(self.install, &self.bootstrap())
    }

    pub fn install(&self) -> &'static KafkaInstall {
        self.install
    }

    /// OS process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the broker process is alive (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// Clean shutdown: SIGTERM, wait for exit, and check that a broker wrote `.kafka_cleanshutdown`.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            bail!("broker {} is not running", self.config.name);
        };
        let pid = child.id().to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("running kill -TERM")?;
        if !status.success() {
            bail!("kill -TERM {pid} failed for broker {}", self.config.name);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if child.try_wait().context("waiting for the broker")?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "broker {} did not stop within {STOP_TIMEOUT:?} after SIGTERM; killed. Log tail:\n{}",
                    self.config.name,
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The marker is the log manager's: a controller-only node has none (its metadata log is the Raft client's).
        if self.config.role != NodeRole::Controller && !self.log_dir.join(CLEAN_SHUTDOWN_FILE).is_file() {
            bail!(
                "broker {} exited without writing {CLEAN_SHUTDOWN_FILE} in {}. Log tail:\n{}",
                self.config.name,
                self.log_dir.display(),
                self.log_tail(40)
            );
        }
        Ok(())
    }

    /// Crash: SIGKILL and reap. No clean-shutdown marker is written.
    pub fn kill(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            bail!("broker {} is not running", self.config.name);
        };
        child.kill().context("SIGKILL to the broker")?;
        child.wait().context("reaping the killed broker")?;
        Ok(())
    }

    fn server_properties_path(&self) -> PathBuf {
        self.work_path.join("server.properties")
    }

    fn write_server_properties(&self) -> Result<()> {
        let mut props: BTreeMap<String, String> = default_properties()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (b, c) = (self.broker_port, self.controller_port);
        let role = self.config.role;
        let listeners = match role {
            NodeRole::Combined => format!("PLAINTEXT://127.0.0.1:{b},CONTROLLER://127.0.0.1:{c}"),
            NodeRole::Broker => format!("PLAINTEXT://127.0.0.1:{b}"),
            NodeRole::Controller => format!("CONTROLLER://127.0.0.1:{c}"),
        };
        let mut fixed = vec![
            ("process.roles", role.process_roles().to_string()),
            ("node.id", "1".to_string()),
            ("controller.quorum.voters", format!("1@127.0.0.1:{c}")),
            ("listeners", listeners),
            ("controller.listener.names", "CONTROLLER".to_string()),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_string(),
            ),
            ("log.dirs", self.log_dir.display().to_string()),
        ];
        if role != NodeRole::Controller {
            fixed.push(("advertised.listeners", format!("PLAINTEXT://127.0.0.1:{b}")));
            fixed.push(("inter.broker.listener.name", "PLAINTEXT".to_string()));
        }
        for (k, v) in fixed {
            props.insert(k.to_string(), v);
        }
        for (k, v) in &self.config.properties {
            props.insert(k.clone(), v.clone());
        }
        let mut text = format!(
            "# written by the segmirror test harness for broker {}\n",
            self.config.name
        );
        for (k, v) in &props {
            text.push_str(&format!("{k}={}\n", escape_property(v)));
        }
        std::fs::write(self.server_properties_path(), text).context("writing server.properties")
    }

    /// Formats the log dir unless it has a `meta.properties`; returns the cluster id in use.
    fn format_if_needed(&self) -> Result<String> {
        let meta = self.log_dir.join("meta.properties");
        if meta.is_file() {
            let existing = read_properties(&meta)?
                .remove("cluster.id")
                .with_context(|| format!("{} has no cluster.id", meta.display()))?;
            if let Some(wanted) = &self.config.cluster_id {
                if wanted != &existing {
                    bail!(
                        "log dir {} belongs to cluster {existing}, not {wanted}",
                        self.log_dir.display()
                    );
                }
            }
            return Ok(existing);
        }
        let cluster_id = match &self.config.cluster_id {
            Some(id) => id.clone(),
            None => random_cluster_id()?,
        };
        std::fs::create_dir_all(&self.log_dir).with_context(|| format!("creating {}", self.log_dir.display()))?;
        let out = self
            .install
            .java(256, &kafka_support_dir().join("tools-log4j2.properties"))
            .arg(crate::tools::STORAGE_TOOL)
            // `--cluster-id=<id>`: a random id may start with '-', which argparse would take for an option.
            .args(["format", &format!("--cluster-id={cluster_id}"), "--config"])
            .arg(self.server_properties_path())
            .output()
            .context("running kafka.tools.StorageTool format")?;
        if !out.status.success() {
            bail!(
                "kafka.tools.StorageTool format failed for {}:\n{}\n{}",
                self.log_dir.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(cluster_id)
    }

    fn launch(&mut self) -> Result<()> {
        let log_path = self.log_file();
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("opening {}", log_path.display()))?;
        self.starts += 1;
        writeln!(
            log,
            "{START_MARKER} #{} of broker {} ====",
            self.starts, self.config.name
        )?;
        let from = log.metadata()?.len();
        let stderr = log.try_clone()?;
        let child = self
            .install
            .java(
                self.config.heap_mb,
                &kafka_support_dir().join("broker-log4j2.properties"),
            )
            .arg(format!("-Dkafka.logs.dir={}", self.work_path.display()))
            .arg("kafka.Kafka")
            .arg(self.server_properties_path())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .spawn()
            .context("spawning java kafka.Kafka")?;
        self.child = Some(child);
        self.launched_at = Some(from);
        Ok(())
    }

    fn wait_until_serving(&mut self, log_path: &Path, from: u64) -> Result<()> {
        let deadline = Instant::now() + self.config.start_timeout;
        let mut seen_started = false;
        loop {
            if !self.is_running() {
                bail!(
                    "broker {} exited during start-up (log: {}). Log tail:\n{}",
                    self.config.name,
                    log_path.display(),
                    self.log_tail(60)
                );
            }
            if !seen_started {
                seen_started = log_contains_since(log_path, from, STARTED_LINE)?;
            }
            if seen_started {
                let port = match self.config.role {
                    NodeRole::Controller => self.controller_port,
                    NodeRole::Combined | NodeRole::Broker => self.broker_port,
                };
                let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
                if TcpStream::connect_timeout(&addr.into(), Duration::from_millis(500)).is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "broker {} did not serve within {:?} (log: {}). Log tail:\n{}",
                    self.config.name,
                    self.config.start_timeout,
                    log_path.display(),
                    self.log_tail(60)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let kept = self.work.take().map(|w| w.keep());
            eprintln!(
                "==== broker {} (bootstrap {}, log dir {}) — last lines of {}{} ====\n{}\n==== end of broker {} log ====",
                self.config.name,
                self.bootstrap(),
                self.log_dir.display(),
                self.log_file().display(),
                if kept.is_some() { ", work dir kept" } else { "" },
                self.log_tail(50),
                self.config.name
            );
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn log_contains_since(path: &Path, from: u64, needle: &str) -> Result<bool> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).contains(needle))
}

/// Escapes a value for a Java properties file (backslashes; the values we write have no newlines).
fn escape_property(value: &str) -> String {
    value.replace('\\', "\\\\")
}

/// Reads a simple `key=value` Java properties file (no continuations; comments skipped).
pub fn read_properties(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

/// A random cluster id in Kafka's `Uuid` text form: 16 random bytes, URL-safe base64 without padding.
pub fn random_cluster_id() -> Result<String> {
    use base64::Engine;
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_ids_are_22_url_safe_chars_and_differ() {
        let a = random_cluster_id().unwrap();
        let b = random_cluster_id().unwrap();
        assert_eq!(a.len(), 22);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(a, b);
    }

    #[test]
    fn properties_parse_like_meta_properties() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.properties");
        std::fs::write(
            &path,
            "#\n#Sat Nov 29 13:44:00 UTC 2026\nnode.id=1\ndirectory.id=abc\nversion=1\ncluster.id=xyz\n",
        )
        .unwrap();
        let props = read_properties(&path).unwrap();
        assert_eq!(props.get("cluster.id").map(String::as_str), Some("xyz"));
        assert_eq!(props.get("node.id").map(String::as_str), Some("1"));
        assert_eq!(props.len(), 4);
    }
}
