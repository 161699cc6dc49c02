//! Consumer-group probes for the leader-epoch experiments behind `segmirror promote`.
//!
//! Why: a mirrored partition's batches carry the *source* cluster's leader epochs, and KIP-320 clients validate
//! their fetch positions and committed offsets against the leader epochs the *target* broker reports. Whether that
//! breaks a consumer is a question for real clients, so these probes run one consumer-group session each with the
//! Java client (`tests/java/EpochProbe.java`, Java's single-file source launcher on the harness's Kafka jars) and
//! with librdkafka (`tests/python/epoch_probe.py`, confluent-kafka), and report what the session read, whether it
//! stalled, what it committed (offset and leader epoch), and the client's own log lines about epochs and resets.
//!
//! [`write_epoch_partition`] writes the input of those experiments: a partition whose batches carry chosen leader
//! epochs, as a source cluster that went through several leader elections leaves it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};
use serde::Deserialize;
use serde_json::json;

use crate::clients::{Header, Isolation, Record, TimestampType};
use crate::install::{require_python_client, KafkaInstall};

/// A committed offset as the group coordinator returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: Option<i32>,
}

/// What one consumer-group session did.
#[derive(Debug, Clone, Deserialize)]
pub struct GroupSession {
    /// The group's committed offset when the session started.
    pub committed_before: Option<Committed>,
    /// `(offset, leader epoch)` of every record read, in order.
    pub records: Vec<(i64, Option<i32>)>,
    /// The session saw the end of the partition.
    pub reached_end: bool,
    /// The session ran out of time before reading `max_records` or reaching the end.
    pub timed_out: bool,
    pub errors: Vec<String>,
    /// The group's committed offset when the session ended.
    pub committed_after: Option<Committed>,
    /// Client log lines about epochs, validation, truncation and resets (librdkafka: its debug log filtered;
    /// Java: `Metadata` DEBUG lines refusing metadata of an older epoch).
    #[serde(default)]
    pub log: Vec<String>,
}

impl GroupSession {
    /// Offsets read, in order.
    pub fn offsets(&self) -> Vec<i64> {
        self.records.iter().map(|(o, _)| *o).collect()
    }

    /// Whether the session re-read records at or before the committed offset minus one, i.e. the client reset
    /// its position instead of resuming.
    pub fn rewound(&self) -> bool {
        match (self.committed_before, self.records.first()) {
            (Some(c), Some((first, _))) => *first < c.offset,
            _ => false,
        }
    }
}

/// One session of the request's group.
#[derive(Debug, Clone)]
pub struct GroupProbe<'a> {
    pub bootstrap: &'a str,
    pub topic: &'a str,
    pub partition: i32,
    pub group: &'a str,
    pub max_records: usize,
    pub timeout: Duration,
    pub isolation: Isolation,
}

fn probe_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Runs the session with librdkafka (confluent-kafka).
pub fn python_group_session(probe: &GroupProbe<'_>) -> Result<GroupSession> {
    require_python_client()?;
    let script = probe_dir().join("python").join("epoch_probe.py");
    let request = json!({
        "bootstrap": probe.bootstrap,
        "topic": probe.topic,
        "partition": probe.partition,
        "group": probe.group,
        "max_records": probe.max_records,
        "timeout_s": probe.timeout.as_secs_f64(),
        "isolation": probe.isolation.as_str(),
    });
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning python3 {}", script.display()))?;
    child
        .stdin
        .take()
        .context("python stdin")?
        .write_all(request.to_string().as_bytes())
        .context("writing the probe request")?;
    let out = child.wait_with_output().context("running epoch_probe.py")?;
    if !out.status.success() {
        bail!(
            "epoch_probe.py failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("epoch_probe.py printed {:?}", String::from_utf8_lossy(&out.stdout)))
}

/// log4j2 configuration for the Java probe: warnings to stderr, plus `Metadata` at DEBUG (its "older epoch" lines
/// are the evidence of a metadata refresh loop).
const JAVA_PROBE_LOG4J2: &str = "status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
logger.metadata.name = org.apache.kafka.clients.Metadata
logger.metadata.level = DEBUG
logger.validation.name = org.apache.kafka.clients.consumer.internals.SubscriptionState
logger.validation.level = INFO
";

/// Log lines of the Java client worth reporting (and counting).
const JAVA_LOG_NEEDLES: [&str; 3] = ["older epoch", "Truncation detected", "resetting offset"];

/// Runs the session with the Java client (Kafka's `KafkaConsumer`, classic group protocol).
pub fn java_group_session(install: &'static KafkaInstall, probe: &GroupProbe<'_>) -> Result<GroupSession> {
    let dir = tempfile::tempdir().context("temp dir for the Java probe's log config")?;
    let log4j2 = dir.path().join("probe-log4j2.properties");
    std::fs::write(&log4j2, JAVA_PROBE_LOG4J2).context("writing the Java probe's log config")?;
    let source = probe_dir().join("java").join("EpochProbe.java");
    let out = install
        .java(256, &log4j2)
        .arg(&source)
        .args([
            probe.bootstrap.to_string(),
            probe.topic.to_string(),
            probe.partition.to_string(),
            probe.group.to_string(),
            probe.max_records.to_string(),
            probe.timeout.as_millis().to_string(),
            probe.isolation.as_str().to_string(),
        ])
        .output()
        .with_context(|| format!("running java {}", source.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("EpochProbe.java failed ({}): {stderr}", out.status);
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("EpochProbe.java printed no JSON; stderr: {stderr}"))?;
    let mut session: GroupSession =
        serde_json::from_str(line).with_context(|| format!("EpochProbe.java printed {line:?}"))?;
    session.log = stderr
        .lines()
        .filter(|l| JAVA_LOG_NEEDLES.iter().any(|n| l.contains(n)))
        .map(str::to_string)
        .collect();
    Ok(session)
}

/// Records per batch written by [`write_epoch_partition`].
pub const RECORDS_PER_EPOCH_BATCH: usize = 5;

/// Writes `<log_dir>/<topic>-<partition>/` as a cleanly stopped source broker leaves it after leading the partition
/// in the given epochs: for each `(epoch, batches)` it becomes leader in `epoch` and appends `batches` batches of
/// [`RECORDS_PER_EPOCH_BATCH`] records (key, value, one header), timestamps from `base_timestamp` on. Returns what
/// was written and the records a consumer must read back.
pub fn write_epoch_partition(
    log_dir: &Path,
    topic: &str,
    partition: i32,
    epochs: &[(i32, usize)],
    base_timestamp: i64,
) -> Result<(WrittenPartition, Vec<Record>)> {
    let config = WriterConfig {
        segment_bytes: 1024,
        fsync: false,
        ..WriterConfig::default()
    };
    let mut writer = PartitionWriter::create(log_dir, topic, partition, 0, config)?;
    let mut expected = Vec::new();
    for &(epoch, batches) in epochs {
        writer.become_leader(epoch);
        for _ in 0..batches {
            let base = writer.next_offset();
            let mut batch = BatchBuilder::new(base).partition_leader_epoch(epoch);
            for i in 0..RECORDS_PER_EPOCH_BATCH {
                let offset = base + i as i64;
                let timestamp = base_timestamp + offset;
                let key = format!("k{offset}").into_bytes();
                let value = format!("value {offset} written in epoch {epoch}").into_bytes();
                let header = epoch.to_string().into_bytes();
                batch = batch.record(
                    RecordSpec::new(i as i32, timestamp)
                        .with_key(key.clone())
                        .with_value(value.clone())
                        .with_header("epoch", Some(header.clone())),
                );
                expected.push(Record {
                    partition,
                    offset,
                    timestamp,
                    timestamp_type: TimestampType::CreateTime,
                    key: Some(key),
                    value: Some(value),
                    headers: vec![Header {
                        key: "epoch".to_string(),
                        value: Some(header),
                    }],
                });
            }
            writer.append(batch)?;
        }
    }
    Ok((writer.close()?, expected))
}
