//! Kafka's own command-line tools, run as `java -cp '<libs>/*' <main class> ...`.
//!
//! Using the stock tools (not a client library of ours) keeps the tests honest: topic creation, offsets,
//! `DumpLogSegments` and the Java producer/consumer are exactly what an operator would run. Each call starts a JVM
//! (~1 s on this machine), so tests should make few of them; bulk admin work is also available through the Python
//! client ([`crate::clients::admin`]).
//!
//! Main classes (Kafka 4.x): `org.apache.kafka.tools.{TopicCommand, ConfigCommand, GetOffsetShell,
//! DeleteRecordsCommand, ProducerPerformance, ConsoleProducer, DumpLogSegments}`,
//! `org.apache.kafka.tools.consumer.ConsoleConsumer`, and `kafka.tools.StorageTool` (in `kafka_2.13`). On Kafka
//! 3.x three of them were still Scala classes; [`KafkaInstall::main_class`] maps the names. The helpers below are
//! exercised on the pinned version; on 3.9 the tests use topic creation, offsets and `DeleteRecordsCommand`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use anyhow::{bail, Context, Result};

use crate::install::{kafka_support_dir, KafkaInstall};

pub const TOPIC_COMMAND: &str = "org.apache.kafka.tools.TopicCommand";
pub const CONFIG_COMMAND: &str = "org.apache.kafka.tools.ConfigCommand";
pub const GET_OFFSET_SHELL: &str = "org.apache.kafka.tools.GetOffsetShell";
pub const DELETE_RECORDS_COMMAND: &str = "org.apache.kafka.tools.DeleteRecordsCommand";
pub const PRODUCER_PERFORMANCE: &str = "org.apache.kafka.tools.ProducerPerformance";
pub const CONSOLE_PRODUCER: &str = "org.apache.kafka.tools.ConsoleProducer";
pub const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";
pub const CONSUMER_GROUP_COMMAND: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
pub const DUMP_LOG_SEGMENTS: &str = "org.apache.kafka.tools.DumpLogSegments";
pub const STORAGE_TOOL: &str = "kafka.tools.StorageTool";

/// Heap for tool JVMs.
const TOOL_HEAP_MB: u32 = 256;

/// Null marker handed to the console producer (`null.marker`) and used for its empty header list.
pub const CONSOLE_NULL: &str = "<NULL>";

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    /// Topic-level configs (`--config k=v`).
    pub configs: BTreeMap<String, String>,
}

impl TopicSpec {
    pub fn new(name: &str, partitions: i32) -> Self {
        TopicSpec {
            name: name.to_string(),
            partitions,
            configs: BTreeMap::new(),
        }
    }

    pub fn config(mut self, key: &str, value: impl ToString) -> Self {
        self.configs.insert(key.to_string(), value.to_string());
        self
    }
}

/// Formatter properties of the console consumer whose lines [`parse_console_line`] reads.
const CONSOLE_PRINT_PROPERTIES: [&str; 5] = [
    "print.timestamp",
    "print.partition",
    "print.offset",
    "print.headers",
    "print.key",
];

/// What `TopicCommand --describe` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    /// Topic id in Kafka's text form (the value in `partition.metadata`).
    pub topic_id: String,
    pub partitions: i32,
    /// Non-default configs.
    pub configs: BTreeMap<String, String>,
}

/// A text record for the Java console producer/consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleRecord {
    pub key: Option<String>,
    pub value: String,
    pub headers: Vec<(String, String)>,
}

/// A record as printed by the console consumer (all `print.*` options on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConsumed {
    pub timestamp_type: String,
    pub timestamp: i64,
    pub partition: i32,
    pub offset: i64,
    pub record: ConsoleRecord,
}

/// Runs Kafka tools against one cluster.
#[derive(Debug, Clone)]
pub struct KafkaTools {
    install: &'static KafkaInstall,
    bootstrap: String,
}

impl KafkaTools {
    pub fn new(install: &'static KafkaInstall, bootstrap: &str) -> Self {
        KafkaTools {
            install,
            bootstrap: bootstrap.to_string(),
        }
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Runs `main_class args...`; fails (with both output streams) on a non-zero exit. Returns stdout.
    pub fn run(&self, main_class: &str, args: &[String]) -> Result<String> {
        run_tool(self.install, main_class, args, None)
    }

    /// `TopicCommand --create` (replication factor 1).
    pub fn create_topic(&self, spec: &TopicSpec) -> Result<()> {
        let mut args = vec![
            "--bootstrap-server".to_string(),
            self.bootstrap.clone(),
            "--create".into(),
            "--topic".into(),
            spec.name.clone(),
            "--partitions".into(),
            spec.partitions.to_string(),
            "--replication-factor".into(),
            "1".into(),
        ];
        for (k, v) in &spec.configs {
            args.push("--config".into());
            args.push(format!("{k}={v}"));
        }
        self.run(TOPIC_COMMAND, &args).map(drop)
    }

    /// `TopicCommand --describe`, parsed.
    pub fn describe_topic(&self, topic: &str) -> Result<TopicDescription> {
        let args = ["--bootstrap-server", &self.bootstrap, "--describe", "--topic", topic].map(String::from);
        let out = self.run(TOPIC_COMMAND, &args)?;
        parse_topic_description(&out).with_context(|| format!("parsing TopicCommand --describe output:\n{out}"))
    }

    /// `ConfigCommand --alter --add-config` on a topic.
    pub fn alter_topic_config(&self, topic: &str, configs: &[(&str, &str)]) -> Result<()> {
        let joined: Vec<String> = configs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let args = [
            "--bootstrap-server",
            &self.bootstrap,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            &joined.join(","),
        ]
        .map(String::from);
        self.run(CONFIG_COMMAND, &args).map(drop)
    }

    /// `ConfigCommand --describe` of a topic: its topic-level overrides (`Dynamic configs for topic T are:` and one
    /// `  key=value sensitive=... synonyms={...}` line per override).
    pub fn describe_topic_configs(&self, topic: &str) -> Result<BTreeMap<String, String>> {
        let args = [
            "--bootstrap-server",
            &self.bootstrap,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
        ]
        .map(String::from);
        let out = self.run(CONFIG_COMMAND, &args)?;
        let mut configs = BTreeMap::new();
        for line in out.lines().filter(|l| l.starts_with("  ")) {
            let pair = line.trim_start().split(" sensitive=").next().unwrap_or_default();
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("parsing ConfigCommand --describe line {line:?}:\n{out}"))?;
            configs.insert(key.to_string(), value.to_string());
        }
        Ok(configs)
    }

    /// Latest offsets (high watermarks) per partition, via `GetOffsetShell --time -1`.
    pub fn end_offsets(&self, topic: &str) -> Result<BTreeMap<i32, i64>> {
        self.offsets(topic, "-1")
    }

    /// Earliest offsets (log start offsets) per partition, via `GetOffsetShell --time -2`.
    pub fn earliest_offsets(&self, topic: &str) -> Result<BTreeMap<i32, i64>> {
        self.offsets(topic, "-2")
    }

    fn offsets(&self, topic: &str, time: &str) -> Result<BTreeMap<i32, i64>> {
        let args = ["--bootstrap-server", &self.bootstrap, "--topic", topic, "--time", time].map(String::from);
        let out = self.run(GET_OFFSET_SHELL, &args)?;
        parse_offsets(topic, &out).with_context(|| format!("parsing GetOffsetShell output:\n{out}"))
    }

    /// `DeleteRecordsCommand`: moves the log start offset of `topic`-`partition` to `before_offset`.
    pub fn delete_records(&self, topic: &str, partition: i32, before_offset: i64) -> Result<()> {
        let json = serde_json::json!({
            "version": 1,
            "partitions": [{"topic": topic, "partition": partition, "offset": before_offset}],
        });
        let file = tempfile::NamedTempFile::new().context("temp file for the offsets json")?;
        std::fs::write(file.path(), json.to_string())?;
        let args = vec![
            "--bootstrap-server".to_string(),
            self.bootstrap.clone(),
            "--offset-json-file".into(),
            file.path().display().to_string(),
        ];
        let out = self.run(DELETE_RECORDS_COMMAND, &args)?;
        if out.contains("error") || out.contains("Error") {
            bail!("DeleteRecordsCommand reported an error:\n{out}");
        }
        Ok(())
    }

    /// `ProducerPerformance` with `--throughput -1`; `props` are producer properties (e.g. `compression.type`).
    /// Returns the tool's summary output.
    pub fn producer_perf(
        &self,
        topic: &str,
        num_records: u64,
        record_size: u32,
        props: &[(&str, &str)],
    ) -> Result<String> {
        let mut args = vec![
            "--bootstrap-server".to_string(),
            self.bootstrap.clone(),
            "--topic".into(),
            topic.into(),
            "--num-records".into(),
            num_records.to_string(),
            "--record-size".into(),
            record_size.to_string(),
            "--throughput".into(),
            "-1".into(),
        ];
        if !props.is_empty() {
            args.push("--command-property".into());
            args.extend(props.iter().map(|(k, v)| format!("{k}={v}")));
        }
        let out = self.run(PRODUCER_PERFORMANCE, &args)?;
        if !out.contains(&format!("{num_records} records sent")) {
            bail!("ProducerPerformance did not confirm {num_records} records:\n{out}");
        }
        Ok(out)
    }

    /// Java `ConsoleProducer` (acks=all). Keys, values and header parts must not contain tab, `,` or `:`;
    /// `None` keys are sent as null via `null.marker`.
    pub fn console_produce(&self, topic: &str, records: &[ConsoleRecord]) -> Result<()> {
        let mut input = String::new();
        for r in records {
            let headers = if r.headers.is_empty() {
                CONSOLE_NULL.to_string()
            } else {
                r.headers
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let key = r.key.clone().unwrap_or_else(|| CONSOLE_NULL.to_string());
            input.push_str(&format!("{headers}\t{key}\t{}\n", r.value));
        }
        let args = [
            "--bootstrap-server",
            &self.bootstrap,
            "--topic",
            topic,
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "parse.headers=true",
            "--reader-property",
            &format!("null.marker={CONSOLE_NULL}"),
        ]
        .map(String::from);
        run_tool(self.install, CONSOLE_PRODUCER, &args, Some(input.as_bytes())).map(drop)
    }

    /// Java `ConsoleConsumer` as a member of `group` (from the earliest offset of `topic`, `properties` as
    /// `--consumer-property`), stopping after `max_messages`; on exit it commits what it consumed. Returns how
    /// many records it printed.
    pub fn console_consume_group(
        &self,
        topic: &str,
        group: &str,
        max_messages: usize,
        properties: &[(&str, &str)],
    ) -> Result<usize> {
        let mut args: Vec<String> = [
            "--bootstrap-server",
            &self.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            &max_messages.to_string(),
            "--timeout-ms",
            "30000",
        ]
        .map(String::from)
        .to_vec();
        for (k, v) in properties {
            args.push("--consumer-property".into());
            args.push(format!("{k}={v}"));
        }
        let out = run_tool(self.install, CONSOLE_CONSUMER, &args, None)?;
        Ok(out.lines().filter(|l| !l.starts_with("Processed a total")).count())
    }

    /// Java `ConsoleConsumer` as a member of `group` resuming from its committed offsets (no `--from-beginning`;
    /// `auto.offset.reset=none`, so a partition without a committed offset fails instead of resetting), stopping
    /// after `max_messages` or 10 s without a record; printed with partition and offset. Commits on exit.
    pub fn console_resume_group(
        &self,
        topic: &str,
        group: &str,
        max_messages: usize,
        properties: &[(&str, &str)],
    ) -> Result<Vec<ConsoleConsumed>> {
        let mut args: Vec<String> = [
            "--bootstrap-server",
            &self.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--max-messages",
            &max_messages.to_string(),
            "--timeout-ms",
            "10000",
        ]
        .map(String::from)
        .to_vec();
        // Kafka 4.x deprecates --consumer-property (and says so on stdout, among the records).
        let flag = if self.install.major() >= 4 {
            "--command-property"
        } else {
            "--consumer-property"
        };
        for (k, v) in [("auto.offset.reset", "none")].iter().chain(properties) {
            args.push(flag.into());
            args.push(format!("{k}={v}"));
        }
        for p in CONSOLE_PRINT_PROPERTIES {
            args.push("--formatter-property".into());
            args.push(format!("{p}=true"));
        }
        let out = run_tool(self.install, CONSOLE_CONSUMER, &args, None)?;
        out.lines()
            .filter(|l| !l.is_empty() && !l.starts_with("Processed a total"))
            .map(|l| parse_console_line(l).with_context(|| format!("parsing console consumer line {l:?}")))
            .collect()
    }

    /// `kafka-consumer-groups --describe --all-groups`: the committed offset of every (group, topic, partition)
    /// that has one (`CURRENT-OFFSET` not `-`).
    pub fn describe_group_offsets(&self) -> Result<BTreeMap<(String, String, i32), i64>> {
        let args = ["--bootstrap-server", &self.bootstrap, "--describe", "--all-groups"].map(String::from);
        let out = self.run(CONSUMER_GROUP_COMMAND, &args)?;
        parse_group_offsets(&out)
    }

    /// `kafka-consumer-groups --delete --group GROUP` (the group must have no members).
    pub fn delete_group(&self, group: &str) -> Result<()> {
        let args = ["--bootstrap-server", &self.bootstrap, "--delete", "--group", group].map(String::from);
        self.run(CONSUMER_GROUP_COMMAND, &args).map(drop)
    }

    /// Java `ConsoleConsumer` on one partition from the earliest offset, stopping after `max_messages` (or after
    /// 10 s without a record). Prints and parses timestamp, partition, offset, headers, key and value.
    pub fn console_consume(&self, topic: &str, partition: i32, max_messages: usize) -> Result<Vec<ConsoleConsumed>> {
        let mut args: Vec<String> = [
            "--bootstrap-server",
            &self.bootstrap,
            "--topic",
            topic,
            "--partition",
            &partition.to_string(),
            "--offset",
            "earliest",
            "--max-messages",
            &max_messages.to_string(),
            "--timeout-ms",
            "10000",
        ]
        .map(String::from)
        .to_vec();
        for p in CONSOLE_PRINT_PROPERTIES {
            args.push("--formatter-property".into());
            args.push(format!("{p}=true"));
        }
        // The consumer exits non-zero-free but logs an ERROR on timeout; only stdout matters.
        let out = run_tool(self.install, CONSOLE_CONSUMER, &args, None)?;
        out.lines()
            .filter(|l| !l.is_empty() && !l.starts_with("Processed a total"))
            .map(|l| parse_console_line(l).with_context(|| format!("parsing console consumer line {l:?}")))
            .collect()
    }
}

/// `DumpLogSegments --files <files> <extra args>` (e.g. `--deep-iteration`, `--print-data-log`,
/// `--verify-index-only`); returns stdout.
pub fn dump_log_segments(install: &'static KafkaInstall, files: &[&Path], extra_args: &[&str]) -> Result<String> {
    let list: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut args = vec!["--files".to_string(), list.join(",")];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    run_tool(install, DUMP_LOG_SEGMENTS, &args, None)
}

fn run_tool(install: &'static KafkaInstall, main_class: &str, args: &[String], stdin: Option<&[u8]>) -> Result<String> {
    let mut cmd = install.java(TOOL_HEAP_MB, &kafka_support_dir().join("tools-log4j2.properties"));
    cmd.arg(install.main_class(main_class))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().with_context(|| format!("spawning java {main_class}"))?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().context("tool stdin")?;
        pipe.write_all(input)
            .with_context(|| format!("writing to {main_class}"))?;
    }
    let Output { status, stdout, stderr } = child
        .wait_with_output()
        .with_context(|| format!("running {main_class}"))?;
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    if !status.success() {
        bail!(
            "{main_class} {} failed ({status}):\nstdout:\n{stdout}\nstderr:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&stderr)
        );
    }
    Ok(stdout)
}

/// Rows of `kafka-consumer-groups --describe` (`GROUP TOPIC PARTITION CURRENT-OFFSET ...`, under a header line per
/// group) with a committed offset.
pub fn parse_group_offsets(out: &str) -> Result<BTreeMap<(String, String, i32), i64>> {
    let mut offsets = BTreeMap::new();
    for line in out.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [group, topic, partition, current, ..] = fields[..] else {
            continue;
        };
        let Ok(partition) = partition.parse::<i32>() else {
            continue; // a header line, or a message
        };
        if current == "-" {
            continue;
        }
        let offset = current
            .parse::<i64>()
            .with_context(|| format!("CURRENT-OFFSET of describe line {line:?}"))?;
        offsets.insert((group.to_string(), topic.to_string(), partition), offset);
    }
    Ok(offsets)
}

fn parse_topic_description(out: &str) -> Result<TopicDescription> {
    let first = out
        .lines()
        .find(|l| l.starts_with("Topic:"))
        .context("no 'Topic:' line")?;
    let mut fields = BTreeMap::new();
    for part in first.split('\t') {
        if let Some((k, v)) = part.split_once(':') {
            fields.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    let get = |k: &str| fields.get(k).cloned().with_context(|| format!("no {k} field"));
    let configs = get("Configs")
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(TopicDescription {
        name: get("Topic")?,
        topic_id: get("TopicId")?,
        partitions: get("PartitionCount")?.parse().context("PartitionCount")?,
        configs,
    })
}

fn parse_offsets(topic: &str, out: &str) -> Result<BTreeMap<i32, i64>> {
    let mut offsets = BTreeMap::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        // topic:partition:offset; the topic itself cannot contain ':'.
        let mut parts = line.rsplitn(3, ':');
        let (Some(offset), Some(partition), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            bail!("unexpected line {line:?}");
        };
        if name == topic {
            offsets.insert(
                partition.parse().context("partition")?,
                offset.parse().context("offset")?,
            );
        }
    }
    Ok(offsets)
}

/// Parses `CreateTime:<ts>\tPartition:<p>\tOffset:<o>\t<headers>\t<key>\t<value>`.
fn parse_console_line(line: &str) -> Result<ConsoleConsumed> {
    let parts: Vec<&str> = line.splitn(6, '\t').collect();
    let [ts, partition, offset, headers, key, value] = parts[..] else {
        bail!("expected 6 tab-separated fields");
    };
    let (timestamp_type, timestamp) = ts.split_once(':').context("timestamp field")?;
    let partition = partition
        .strip_prefix("Partition:")
        .context("partition field")?
        .parse()?;
    let offset = offset.strip_prefix("Offset:").context("offset field")?.parse()?;
    let headers = if headers == "NO_HEADERS" {
        Vec::new()
    } else {
        headers
            .split(',')
            .map(|h| {
                h.split_once(':')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .context("header without ':'")
            })
            .collect::<Result<_>>()?
    };
    Ok(ConsoleConsumed {
        timestamp_type: timestamp_type.to_string(),
        timestamp: timestamp.parse().context("timestamp")?,
        partition,
        offset,
        record: ConsoleRecord {
            key: if key == "null" { None } else { Some(key.to_string()) },
            value: value.to_string(),
            headers,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_topic_describe() {
        let out = "Topic: t1\tTopicId: BtvEQz2MSZOGlV1iuNUttg\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: \
                   compression.type=producer,min.insync.replicas=1\n\tTopic: t1\tPartition: 0\tLeader: 1\n";
        let d = parse_topic_description(out).unwrap();
        assert_eq!(d.name, "t1");
        assert_eq!(d.topic_id, "BtvEQz2MSZOGlV1iuNUttg");
        assert_eq!(d.partitions, 2);
        assert_eq!(d.configs.get("compression.type").map(String::as_str), Some("producer"));
    }

    #[test]
    fn parses_get_offset_shell() {
        let out = "seg:0:1000\nt1:0:2\nt1:1:3\n";
        let o = parse_offsets("t1", out).unwrap();
        assert_eq!(o, BTreeMap::from([(0, 2), (1, 3)]));
    }

    #[test]
    fn parses_console_consumer_lines() {
        let c = parse_console_line("CreateTime:1795959874608\tPartition:0\tOffset:7\th1:x,h2:y\tk1\tv\t1").unwrap();
        assert_eq!((c.timestamp, c.partition, c.offset), (1795959874608, 0, 7));
        assert_eq!(
            c.record.headers,
            vec![("h1".into(), "x".into()), ("h2".into(), "y".into())]
        );
        assert_eq!(c.record.key.as_deref(), Some("k1"));
        assert_eq!(c.record.value, "v\t1");
        let c = parse_console_line("LogAppendTime:5\tPartition:1\tOffset:0\tNO_HEADERS\tnull\tv").unwrap();
        assert_eq!(c.timestamp_type, "LogAppendTime");
        assert!(c.record.headers.is_empty() && c.record.key.is_none());
    }
}
