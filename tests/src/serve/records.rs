//! What the endpoint tests produce to the source, and how they compare what clients read with what the source
//! serves: text records (kcat and the console consumer print text) from an idempotent producer and a transactional
//! one that commits and aborts; the parsers of each client's output (`serve_client.py follow`'s JSON lines, kcat's,
//! the Java console consumer's) into the harness's records; a comparison that names the first differing record.

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::Value;

use crate::clients::{python_produce, Header, Isolation, OutRecord, ProducePlan, ProduceStep, Record, TimestampType};
use crate::install::KafkaInstall;
use crate::serve::Client;
use crate::tools::{ConsoleConsumed, ConsoleRecord, TopicSpec};

/// Records per flushed step of the idempotent producer, and per transaction of the transactional one.
pub const STEP_RECORDS: usize = 16;

pub fn topic_spec(topic: &str, partitions: i32) -> TopicSpec {
    let install = KafkaInstall::locate().unwrap();
    // Small segments: the readers cross segment boundaries.
    TopicSpec::new(topic, partitions)
        .config(install.segment_bytes_config(), 16 * 1024)
        .config("retention.ms", -1)
}

/// A text record (kcat and the console consumer print text): `tag` says which producer, `outcome` whether its
/// transaction commits (`committed`) or aborts (`aborted`).
pub fn record(partitions: i32, round: usize, step: usize, i: usize, tag: &str, outcome: &str) -> OutRecord {
    let seq = format!("{round}.{step}.{i}");
    OutRecord {
        partition: Some((i % partitions as usize) as i32),
        key: Some(format!("{tag}-{seq}").into_bytes()),
        value: Some(format!("{outcome}-{tag}-{seq}-{}", "v".repeat(120)).into_bytes()),
        headers: vec![
            Header {
                key: "origin".into(),
                value: Some(tag.as_bytes().to_vec()),
            },
            Header {
                key: "seq".into(),
                value: Some(seq.into_bytes()),
            },
        ],
        timestamp: None,
    }
}

/// One round: an idempotent producer in two flushed steps, then a transactional one that commits a transaction and
/// aborts the next.
pub fn produce_round(bootstrap: &str, topic: &str, partitions: i32, round: usize) {
    let mut plan = ProducePlan::new(topic)
        .config("enable.idempotence", "true")
        .config("linger.ms", "2");
    for step in 0..2 {
        let records = (0..STEP_RECORDS)
            .map(|i| record(partitions, round, step, i, "idem", "committed"))
            .collect();
        plan = plan.step(ProduceStep::Send(records));
    }
    python_produce(bootstrap, &plan).unwrap();
    let txn = |step: usize, outcome: &str| -> Vec<OutRecord> {
        (0..STEP_RECORDS)
            .map(|i| record(partitions, round, step, i, "txn", outcome))
            .collect()
    };
    let plan = ProducePlan::new(topic)
        .config("transactional.id", format!("{topic}-txn"))
        .config("linger.ms", "2")
        .step(ProduceStep::InitTransactions)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(txn(0, "committed")))
        .step(ProduceStep::CommitTransaction)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(txn(1, "aborted")))
        .step(ProduceStep::AbortTransaction);
    python_produce(bootstrap, &plan).unwrap();
}

pub fn is_aborted(r: &Record) -> bool {
    r.value.as_ref().is_some_and(|v| v.starts_with(b"aborted-"))
}

/// Fails with the first difference (not two vectors of hundreds of records).
pub fn assert_same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(g, w)| g != w);
    match first {
        Some(i) => panic!(
            "{what}: record {i} differs (got {} records, want {}):\n  got  {:?}\n  want {:?}",
            got.len(),
            want.len(),
            got[i],
            want[i]
        ),
        None => panic!(
            "{what}: got {} records, want {}; the first extra: {:?}",
            got.len(),
            want.len(),
            got.get(want.len())
                .map(|g| format!("{g:?}"))
                .or(want.get(got.len()).map(|w| format!("{w:?}")))
        ),
    }
}

pub fn sorted_records(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_by_key(|r| (r.partition, r.offset));
    records
}

/// Which client a reader is, and so how its lines parse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReaderKind {
    Python(Isolation),
    Kcat(Isolation),
    /// The Java console consumer in a group, `read_committed`.
    JavaGroup,
}

impl ReaderKind {
    /// (partition, offset) of every record line printed so far; an error line fails the test.
    pub fn positions(self, client: &Client) -> Vec<(i32, i64)> {
        record_lines(self, &client.lines())
            .into_iter()
            .map(|line| match self {
                ReaderKind::Python(_) => parse_python_line(&line).map(|r| (r.partition, r.offset)),
                ReaderKind::Kcat(_) => parse_kcat_line(&line).map(|r| (r.partition, r.offset)),
                ReaderKind::JavaGroup => parse_console_line(&line).map(|c| (c.partition, c.offset)),
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .unwrap_or_else(|e| panic!("{}: {e:#}\nstderr:\n{}", client.name(), client.stderr()))
    }
}

/// The lines of a reader that are records (the console consumer's summary line is not).
pub fn record_lines(kind: ReaderKind, lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| kind != ReaderKind::JavaGroup || !l.starts_with("Processed a total"))
        .cloned()
        .collect()
}

fn unb64(value: Option<&Value>) -> Result<Option<Vec<u8>>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(B64.decode(s).context("base64")?)),
        Some(other) => bail!("not base64: {other}"),
    }
}

fn timestamp_type(name: &str) -> TimestampType {
    match name {
        "CreateTime" | "create" => TimestampType::CreateTime,
        "LogAppendTime" | "logappend" => TimestampType::LogAppendTime,
        _ => TimestampType::NoTimestamp,
    }
}

/// A record line of `serve_client.py follow`; `Err` for its `{"error": ...}` lines and anything else.
pub fn parse_python_line(line: &str) -> Result<Record> {
    let v: Value = serde_json::from_str(line)?;
    if let Some(e) = v.get("error") {
        bail!("the client reported an error: {e}");
    }
    let int = |f: &str| v.get(f).and_then(Value::as_i64).with_context(|| format!("no {f}"));
    let mut headers = Vec::new();
    for h in v.get("headers").and_then(Value::as_array).context("no headers")? {
        let key = h.get(0).and_then(Value::as_str).context("header name")?.to_string();
        headers.push(Header {
            key,
            value: unb64(h.get(1))?,
        });
    }
    Ok(Record {
        partition: i32::try_from(int("partition")?)?,
        offset: int("offset")?,
        timestamp: int("timestamp")?,
        timestamp_type: timestamp_type(v.get("timestamp_type").and_then(Value::as_str).unwrap_or("")),
        key: unb64(v.get("key"))?,
        value: unb64(v.get("value"))?,
        headers,
    })
}

/// A `kcat -J` line (text data).
pub fn parse_kcat_line(line: &str) -> Result<Record> {
    let v: Value = serde_json::from_str(line)?;
    let text = |f: &str| v.get(f).and_then(Value::as_str).map(|s| s.as_bytes().to_vec());
    let int = |f: &str| v.get(f).and_then(Value::as_i64).with_context(|| format!("no {f}"));
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
        timestamp_type: timestamp_type(v.get("tstype").and_then(Value::as_str).unwrap_or("")),
        key: text("key"),
        value: text("payload"),
        headers,
    })
}

/// A console consumer line: `CreateTime:<ts>\tPartition:<p>\tOffset:<o>\t<headers>\t<key>\t<value>`.
pub fn parse_console_line(line: &str) -> Result<ConsoleConsumed> {
    let parts: Vec<&str> = line.splitn(6, '\t').collect();
    let [ts, partition, offset, headers, key, value] = parts[..] else {
        bail!("expected 6 tab-separated fields");
    };
    let (timestamp_type, timestamp) = ts.split_once(':').context("timestamp field")?;
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
        partition: partition.strip_prefix("Partition:").context("partition")?.parse()?,
        offset: offset.strip_prefix("Offset:").context("offset")?.parse()?,
        record: ConsoleRecord {
            key: (key != "null").then(|| key.to_string()),
            value: value.to_string(),
            headers,
        },
    })
}

/// How a record of the harness prints in the console consumer (text keys, values and headers).
pub fn as_console(r: &Record) -> ConsoleConsumed {
    let text = |b: &Option<Vec<u8>>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    ConsoleConsumed {
        timestamp_type: match r.timestamp_type {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
            TimestampType::NoTimestamp => "NoTimestampType",
        }
        .to_string(),
        timestamp: r.timestamp,
        partition: r.partition,
        offset: r.offset,
        record: ConsoleRecord {
            key: text(&r.key),
            value: text(&r.value).unwrap_or_else(|| "null".to_string()),
            headers: r
                .headers
                .iter()
                .map(|h| (h.key.clone(), text(&h.value).unwrap_or_else(|| "null".to_string())))
                .collect(),
        },
    }
}
