//! Non-Java clients: the Python `confluent-kafka` script (`tests/python/kafka_client.py`) and `kcat`.
//!
//! The Python client is the reference reader of the harness: [`consume_all`] returns every record of a topic with
//! exact bytes, offsets, timestamps (and their type) and headers, under either isolation level, so a test can
//! compare two clusters record by record. Its producer side does what the Java tools cannot script easily:
//! explicit timestamps, binary keys/values/headers, idempotence and transactions that are committed or aborted.
//! `kcat` is a second, independent librdkafka front end for text data (its JSON output is not binary safe).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::install::{python_client_script, require_kcat, require_python_client};
use crate::tools::TopicSpec;

/// Timestamp type of a record as the broker serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
    NoTimestamp,
}

/// Consumer isolation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// A record header; the value may be null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Header {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// A record as stored by the broker and seen by a consumer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub timestamp_type: TimestampType,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

/// (partition, offset, key, value) of a record: what must be identical on source and target.
pub type RecordIdentity = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Every record's [`RecordIdentity`], sorted.
pub fn record_identities(records: &[Record]) -> Vec<RecordIdentity> {
    let mut out: Vec<_> = records
        .iter()
        .map(|r| (r.partition, r.offset, r.key.clone(), r.value.clone()))
        .collect();
    out.sort();
    out
}

/// A record to send. `partition: None` lets the client's partitioner choose; `timestamp: None` = now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutRecord {
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
    pub timestamp: Option<i64>,
}

/// One step of a produce plan. Every `Send` is flushed (all records acknowledged) before the next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceStep {
    Send(Vec<OutRecord>),
    /// `init_transactions` (once, first, for a producer with `transactional.id`).
    InitTransactions,
    BeginTransaction,
    CommitTransaction,
    AbortTransaction,
}

/// What the Python producer does: producer properties (librdkafka names, e.g. `compression.type`,
/// `enable.idempotence`, `transactional.id`, `linger.ms`) and the steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePlan {
    pub topic: String,
    pub config: BTreeMap<String, String>,
    pub steps: Vec<ProduceStep>,
}

impl ProducePlan {
    pub fn new(topic: &str) -> Self {
        ProducePlan {
            topic: topic.to_string(),
            config: BTreeMap::new(),
            steps: Vec::new(),
        }
    }

    pub fn config(mut self, key: &str, value: impl ToString) -> Self {
        self.config.insert(key.to_string(), value.to_string());
        self
    }

    pub fn step(mut self, step: ProduceStep) -> Self {
        self.steps.push(step);
        self
    }

    /// All records of all `Send` steps, in send order.
    pub fn out_records(&self) -> impl Iterator<Item = &OutRecord> {
        self.steps.iter().flat_map(|s| match s {
            ProduceStep::Send(records) => records.as_slice(),
            _ => &[],
        })
    }
}

fn b64(bytes: &Option<Vec<u8>>) -> Value {
    match bytes {
        Some(b) => Value::String(B64.encode(b)),
        None => Value::Null,
    }
}

fn unb64(value: &Option<String>) -> Result<Option<Vec<u8>>> {
    value
        .as_ref()
        .map(|s| B64.decode(s).context("bad base64 from kafka_client.py"))
        .transpose()
}

fn headers_json(headers: &[Header]) -> Value {
    Value::Array(headers.iter().map(|h| json!([h.key, b64(&h.value)])).collect())
}

pub(crate) fn run_python(command: &str, request: &Value) -> Result<String> {
    require_python_client()?;
    let script = python_client_script();
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning python3 {}", script.display()))?;
    {
        let mut stdin = child.stdin.take().context("python stdin")?;
        stdin
            .write_all(request.to_string().as_bytes())
            .context("writing the request to kafka_client.py")?;
    }
    let Output { status, stdout, stderr } = child.wait_with_output().context("running kafka_client.py")?;
    if !status.success() {
        bail!(
            "kafka_client.py {command} failed ({status}): {}",
            String::from_utf8_lossy(&stderr)
        );
    }
    String::from_utf8(stdout).context("kafka_client.py printed non-UTF-8")
}

#[derive(Deserialize)]
struct Delivered {
    index: usize,
    partition: i32,
    offset: i64,
    timestamp: i64,
    timestamp_type: TimestampType,
}

#[derive(Deserialize)]
struct Consumed {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: i64,
    timestamp_type: TimestampType,
    key: Option<String>,
    value: Option<String>,
    headers: Vec<(String, Option<String>)>,
}

/// Runs a produce plan with the Python client. Returns one [`Record`] per sent record, in send order, with the
/// partition, offset and timestamp the broker acknowledged (for LogAppendTime topics: the broker's time).
pub fn python_produce(bootstrap: &str, plan: &ProducePlan) -> Result<Vec<Record>> {
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| match s {
            ProduceStep::Send(records) => json!({"send": records.iter().map(|r| json!({
                "partition": r.partition,
                "key": b64(&r.key),
                "value": b64(&r.value),
                "headers": headers_json(&r.headers),
                "timestamp": r.timestamp,
            })).collect::<Vec<_>>()}),
            ProduceStep::InitTransactions => json!({"txn": "init"}),
            ProduceStep::BeginTransaction => json!({"txn": "begin"}),
            ProduceStep::CommitTransaction => json!({"txn": "commit"}),
            ProduceStep::AbortTransaction => json!({"txn": "abort"}),
        })
        .collect();
    let request = json!({"bootstrap": bootstrap, "topic": plan.topic, "config": plan.config, "steps": steps});
    let out = run_python("produce", &request)?;
    let sent: Vec<&OutRecord> = plan.out_records().collect();
    let mut records = Vec::with_capacity(sent.len());
    for (i, line) in out.lines().enumerate() {
        let d: Delivered = serde_json::from_str(line).with_context(|| format!("delivery report {line:?}"))?;
        let Some(src) = sent.get(d.index).filter(|_| d.index == i) else {
            bail!("delivery report {i} names record {} of {}", d.index, sent.len());
        };
        records.push(Record {
            partition: d.partition,
            offset: d.offset,
            timestamp: d.timestamp,
            timestamp_type: d.timestamp_type,
            key: src.key.clone(),
            value: src.value.clone(),
            headers: src.headers.clone(),
        });
    }
    if records.len() != sent.len() {
        bail!("{} records sent but {} delivery reports", sent.len(), records.len());
    }
    Ok(records)
}

/// Reads `topic` (all partitions, or the given ones) from the first offset to the end — the high watermark, or the
/// last stable offset under `ReadCommitted` — with the Python client. Sorted by (partition, offset).
pub fn consume_all(
    bootstrap: &str,
    topic: &str,
    partitions: Option<&[i32]>,
    isolation: Isolation,
) -> Result<Vec<Record>> {
    let request = json!({
        "bootstrap": bootstrap,
        "topic": topic,
        "partitions": partitions,
        "isolation": isolation.as_str(),
        "timeout_s": 120,
    });
    Ok(consumed(&run_python("consume", &request)?)?
        .remove(topic)
        .unwrap_or_default())
}

/// [`consume_all`] of every partition of each of `topics`, with one client: each topic's records (an entry for
/// every topic, empty ones too), sorted by (partition, offset). Why: a test that reads a dozen topics at two
/// isolation levels, on two brokers, started one Python client per topic and read, each a second or more of a
/// loaded machine's time.
pub fn consume_topics<S: AsRef<str>>(
    bootstrap: &str,
    topics: &[S],
    isolation: Isolation,
) -> Result<BTreeMap<String, Vec<Record>>> {
    let names: Vec<&str> = topics.iter().map(AsRef::as_ref).collect();
    let request = json!({
        "bootstrap": bootstrap,
        "topics": names,
        "isolation": isolation.as_str(),
        "timeout_s": 120,
    });
    let mut by_topic = consumed(&run_python("consume", &request)?)?;
    if let Some(extra) = by_topic.keys().find(|t| !names.contains(&t.as_str())) {
        bail!("kafka_client.py consume returned a record of {extra:?}, not asked for");
    }
    for name in names {
        by_topic.entry(name.to_string()).or_default();
    }
    Ok(by_topic)
}

/// The records `kafka_client.py consume` printed, by topic, in the order printed.
fn consumed(out: &str) -> Result<BTreeMap<String, Vec<Record>>> {
    let mut by_topic: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for line in out.lines() {
        let c: Consumed = serde_json::from_str(line).with_context(|| format!("consumed record {line:?}"))?;
        let record = Record {
            partition: c.partition,
            offset: c.offset,
            timestamp: c.timestamp,
            timestamp_type: c.timestamp_type,
            key: unb64(&c.key)?,
            value: unb64(&c.value)?,
            headers: c
                .headers
                .into_iter()
                .map(|(key, value)| {
                    Ok(Header {
                        key,
                        value: unb64(&value)?,
                    })
                })
                .collect::<Result<_>>()?,
        };
        by_topic.entry(c.topic).or_default().push(record);
    }
    Ok(by_topic)
}

/// A consumer group protocol: the classic one (JoinGroup/SyncGroup) or KIP-848's (`group.protocol=consumer`, Kafka
/// 4.x).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    Classic,
    Consumer,
}

impl GroupProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }
}

/// A member of `group` (Python client, `protocol`) subscribes to `topic`, commits exactly `offsets` (partition,
/// offset) and leaves.
pub fn python_group_commit(
    bootstrap: &str,
    topic: &str,
    group: &str,
    protocol: GroupProtocol,
    offsets: &[(i32, i64)],
) -> Result<()> {
    let request = json!({"bootstrap": bootstrap, "topic": topic, "group": group, "protocol": protocol.as_str(),
                         "commit": offsets});
    run_python("group", &request).map(drop)
}

/// `(partition, offset, value)` of a record a group member read.
pub type ResumedRecord = (i32, i64, Option<Vec<u8>>);

/// A member of `group` (Python client, `protocol`) subscribes to `topic` (of `partitions` partitions) and reads from
/// the group's committed offsets (a partition without one is an error, never a reset) to the end of every
/// partition, committing nothing. Returns `(partition, offset, value)` of every record read, in the order read.
pub fn python_group_resume(
    bootstrap: &str,
    topic: &str,
    partitions: usize,
    group: &str,
    protocol: GroupProtocol,
) -> Result<Vec<ResumedRecord>> {
    #[derive(Deserialize)]
    struct Resumed {
        records: Vec<(i32, i64, Option<String>)>,
    }
    let request = json!({"bootstrap": bootstrap, "topic": topic, "partitions": partitions, "group": group,
                         "protocol": protocol.as_str()});
    let out = run_python("group_resume", &request)?;
    let resumed: Resumed = serde_json::from_str(out.trim()).with_context(|| format!("group_resume printed {out:?}"))?;
    resumed
        .records
        .into_iter()
        .map(|(p, o, v)| Ok((p, o, unb64(&v)?)))
        .collect()
}

/// Like [`python_group_resume`], but the member stays in the group for `hold` (an active member), in a child
/// process returned once it has all `partitions` assigned; kill and wait for it when done.
pub fn python_group_member(
    bootstrap: &str,
    topic: &str,
    partitions: usize,
    group: &str,
    protocol: GroupProtocol,
    hold: std::time::Duration,
) -> Result<std::process::Child> {
    use std::io::BufRead;
    require_python_client()?;
    let script = python_client_script();
    let mut child = Command::new("python3")
        .arg(&script)
        .arg("group_resume")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning python3 {}", script.display()))?;
    let request = json!({"bootstrap": bootstrap, "topic": topic, "partitions": partitions, "group": group,
                         "protocol": protocol.as_str(), "hold_s": hold.as_secs_f64()});
    {
        let mut stdin = child.stdin.take().context("python stdin")?;
        stdin
            .write_all(request.to_string().as_bytes())
            .context("writing the request")?;
    }
    let stdout = child.stdout.take().context("python stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .context("reading the member's first line")?;
    if !line.contains("assigned") {
        let _ = child.kill();
        let _ = child.wait();
        bail!("group member {group}: printed {line:?} instead of its assignment");
    }
    Ok(child)
}

/// A transactional producer (`transactional_id`) commits offsets of `topic` for `group` with
/// sendOffsetsToTransaction, one transaction per entry, committed when its flag is true and aborted otherwise.
pub fn python_txn_offsets(
    bootstrap: &str,
    topic: &str,
    group: &str,
    transactional_id: &str,
    transactions: &[(&[(i32, i64)], bool)],
) -> Result<()> {
    let transactions: Vec<Value> = transactions
        .iter()
        .map(|(offsets, commit)| json!({"offsets": offsets, "end": if *commit { "commit" } else { "abort" }}))
        .collect();
    let request = json!({"bootstrap": bootstrap, "topic": topic, "group": group,
                         "transactional_id": transactional_id, "transactions": transactions});
    run_python("txn_offsets", &request).map(drop)
}

/// Topic metadata from the Python admin client.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TopicInfo {
    /// Topic id in Kafka's text form (as in `partition.metadata`).
    pub topic_id: String,
    pub partitions: i32,
}

/// Creates `create` topics (replication factor 1; waits for leaders) and describes `describe` topics, in one
/// Python process.
pub fn admin(bootstrap: &str, create: &[TopicSpec], describe: &[&str]) -> Result<BTreeMap<String, TopicInfo>> {
    let create: Vec<Value> = create
        .iter()
        .map(|t| json!({"name": t.name, "partitions": t.partitions, "config": t.configs}))
        .collect();
    let request = json!({"bootstrap": bootstrap, "create": create, "describe": describe});
    let out = run_python("admin", &request)?;
    #[derive(Deserialize)]
    struct AdminOut {
        topics: BTreeMap<String, TopicInfo>,
    }
    let parsed: AdminOut = serde_json::from_str(out.trim()).with_context(|| format!("admin output {out:?}"))?;
    Ok(parsed.topics)
}

/// Produces text records with `kcat -P` to one partition. `None` keys/values are sent as null (`-Z`).
/// All records of one call carry the same `headers`. Keys and values must not contain newlines or tabs.
pub fn kcat_produce(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    records: &[(Option<&str>, Option<&str>)],
    headers: &[(&str, &str)],
) -> Result<()> {
    require_kcat()?;
    let mut input = String::new();
    for (key, value) in records {
        if key.is_some_and(|k| k.contains(['\t', '\n'])) || value.is_some_and(|v| v.contains(['\t', '\n'])) {
            bail!("kcat_produce: keys and values must not contain tabs or newlines");
        }
        input.push_str(&format!("{}\t{}\n", key.unwrap_or(""), value.unwrap_or("")));
    }
    let mut cmd = Command::new("kcat");
    cmd.args([
        "-P",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-p",
        &partition.to_string(),
        "-K",
        "\t",
        "-Z",
    ]);
    cmd.args(["-X", "acks=all"]);
    for (k, v) in headers {
        cmd.arg("-H").arg(format!("{k}={v}"));
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning kcat -P")?;
    {
        let mut stdin = child.stdin.take().context("kcat stdin")?;
        stdin.write_all(input.as_bytes()).context("writing to kcat")?;
    }
    let out = child.wait_with_output().context("running kcat -P")?;
    if !out.status.success() {
        bail!(
            "kcat -P failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Reads a whole topic with `kcat -C -J -e` (all partitions, from the beginning to the end). Text data only:
/// non-UTF-8 bytes come back replaced. Sorted by (partition, offset).
pub fn kcat_consume(bootstrap: &str, topic: &str, isolation: Isolation) -> Result<Vec<Record>> {
    require_kcat()?;
    let out = Command::new("kcat")
        .args(["-C", "-b", bootstrap, "-t", topic, "-J", "-e", "-q", "-o", "beginning"])
        .arg("-X")
        .arg(format!("isolation.level={}", isolation.as_str()))
        .stdin(Stdio::null())
        .output()
        .context("running kcat -C")?;
    if !out.status.success() {
        bail!(
            "kcat -C failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut records = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| parse_kcat_json(line).with_context(|| format!("kcat line {line:?}")))
        .collect::<Result<Vec<_>>>()?;
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

fn parse_kcat_json(line: &str) -> Result<Record> {
    let v: Value = serde_json::from_str(line)?;
    let text = |field: &str| -> Option<Vec<u8>> { v.get(field).and_then(Value::as_str).map(|s| s.as_bytes().to_vec()) };
    let int = |field: &str| {
        v.get(field)
            .and_then(Value::as_i64)
            .with_context(|| format!("no integer {field}"))
    };
    let timestamp_type = match v.get("tstype").and_then(Value::as_str) {
        Some("create") => TimestampType::CreateTime,
        Some("logappend") => TimestampType::LogAppendTime,
        _ => TimestampType::NoTimestamp,
    };
    let mut headers = Vec::new();
    if let Some(list) = v.get("headers").and_then(Value::as_array) {
        for pair in list.chunks(2) {
            let key = pair.first().and_then(Value::as_str).context("header name")?.to_string();
            let value = pair.get(1).and_then(Value::as_str).map(|s| s.as_bytes().to_vec());
            headers.push(Header { key, value });
        }
    }
    Ok(Record {
        partition: i32::try_from(int("partition")?)?,
        offset: int("offset")?,
        timestamp: int("ts")?,
        timestamp_type,
        key: text("key"),
        value: text("payload"),
        headers,
    })
}

/// `tests/python/open_txn.py`: a transaction left open on a live broker until told how to end it. The records of
/// `sends` (topic, partition, count; values `open-<i>`, one record a batch) are on the broker, undecided, when
/// [`OpenTransaction::start`] returns. Dropped without a decision, the producer is killed (the transaction stays
/// open until the broker's coordinator times it out).
pub struct OpenTransaction {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl OpenTransaction {
    pub fn start(bootstrap: &str, transactional_id: &str, sends: &[(&str, i32, usize)]) -> OpenTransaction {
        let sends: Vec<Value> = sends
            .iter()
            .map(|(topic, partition, count)| json!({"topic": topic, "partition": partition, "count": count, "prefix": "open"}))
            .collect();
        let request = json!({"bootstrap": bootstrap, "transactional_id": transactional_id, "sends": sends});
        let script = python_client_script().with_file_name("open_txn.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(request.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut t = OpenTransaction { child, stdin, stdout };
        assert_eq!(t.line(), "open", "open_txn.py did not open its transaction");
        t
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        line.trim().to_string()
    }

    /// Ends the transaction with an ABORT.
    pub fn abort(self) {
        self.end("abort");
    }

    /// Ends the transaction with a COMMIT.
    pub fn commit(self) {
        self.end("commit");
    }

    fn end(mut self, decision: &str) {
        writeln!(self.stdin, "{decision}").expect("open_txn.py reads its decision");
        assert_eq!(self.line(), "done");
        assert!(self.child.wait().expect("open_txn.py exits").success());
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kcat_json_lines_parse() {
        let r = parse_kcat_json(
            r#"{"topic":"t1","partition":1,"offset":3,"tstype":"logappend","ts":17,"broker":1,"headers":["h1","x","h2",null],"key":null,"payload":"v1"}"#,
        )
        .unwrap();
        assert_eq!((r.partition, r.offset, r.timestamp), (1, 3, 17));
        assert_eq!(r.timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(r.key, None);
        assert_eq!(r.value.as_deref(), Some(&b"v1"[..]));
        assert_eq!(
            r.headers,
            vec![
                Header {
                    key: "h1".into(),
                    value: Some(b"x".to_vec())
                },
                Header {
                    key: "h2".into(),
                    value: None
                }
            ]
        );
    }
}
