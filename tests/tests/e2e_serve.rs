//! `segmirror serve` end to end: stock clients read a mirror while a live Kafka 4.4 source is replicated into it.
//!
//! Every test runs the real scene: a Kafka 4.4 broker, `segmirror ship --connect` into `segmirror apply --listen`,
//! and `segmirror serve` over the applier's mirror and catalog, the clients pointed at it. What they read is
//! compared with what the source broker itself serves to the same client, record by record (partition, offset,
//! timestamp, key, value, headers).
//!
//! - Readers while replication runs: kcat and confluent-kafka (assign mode) at both isolation levels, and the Java
//!   `kafka-console-consumer` in a group under `read_committed`, started while an idempotent and a transactional
//!   producer (committing and aborting) write to the source; they follow new records to the end.
//! - A producer pointed at the endpoint is refused at once (a retrying producer would hang until its timeout).
//! - A classic group of two members rebalances when one leaves, and its committed offsets survive a restart of
//!   `serve`: OffsetFetch returns them and a member resumes exactly there.
//! - Hostile clients (bad frames, absurd sizes, unknown API keys and versions, a thousand idle connections, fetches
//!   out of range, unknown topics) get Kafka's answers or a closed connection; the endpoint keeps serving honest
//!   clients, its memory and descriptors bounded.
//! - Lookups (ListOffsets earliest, latest, by time and max timestamp; OffsetForLeaderEpoch; DescribeConfigs) get
//!   the source's answers.
//! - Over mutual TLS behind `--advertised-listener`, clients with a certificate read; others are refused.
//! - Clients that ask for a large Fetch answer and never read it neither starve an honest consumer nor grow the
//!   endpoint's memory past `--fetch-memory`.
//!
//! `SEGMIRROR_SERVE_REFERENCE=kafka` runs the same clients and assertions against the source broker itself (all
//! but the write refusal and TLS tests, which Kafka's plaintext listener cannot pass; no memory bound for its JVM):
//! a check that the tests expect what Kafka does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segmirror_tests::clients::{python_group_resume, GroupProtocol};
use segmirror_tests::install::kafka_support_dir;
use segmirror_tests::serve::*;
use segmirror_tests::tools::{ConsoleConsumed, CONSOLE_PRODUCER};
use segmirror_tests::*;
use serde_json::{json, Value};

/// The link the applier records and `serve` serves: distinctive, so a refusal that names it can be recognized.
const LINK: &str = "ro-mirror-link";
/// Records per flushed step of the idempotent producer, and per transaction of the transactional one.
const STEP_RECORDS: usize = 16;
/// Pause between two producer rounds: a steady pace rather than a burst.
const ROUND_PAUSE: Duration = Duration::from_millis(300);
/// Per-reader patience for the first record and for the last.
const READ_PATIENCE: Duration = Duration::from_secs(120);
/// The endpoint's resident memory after the hostile clients, at most.
const RSS_LIMIT_KIB: u64 = 200 * 1024;
/// Idle connections held open at once.
const IDLE_CONNECTIONS: usize = 1000;
/// How long a hostile connection may stay open without an answer before the test calls it a hang.
const HOSTILE_PATIENCE: Duration = Duration::from_secs(10);

fn topic_spec(topic: &str, partitions: i32) -> TopicSpec {
    let install = KafkaInstall::locate().unwrap();
    // Small segments: the readers cross segment boundaries.
    TopicSpec::new(topic, partitions)
        .config(install.segment_bytes_config(), 16 * 1024)
        .config("retention.ms", -1)
}

/// A text record (kcat and the console consumer print text): `tag` says which producer, `outcome` whether its
/// transaction commits (`committed`) or aborts (`aborted`).
fn record(partitions: i32, round: usize, step: usize, i: usize, tag: &str, outcome: &str) -> OutRecord {
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
fn produce_round(bootstrap: &str, topic: &str, partitions: i32, round: usize) {
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

fn is_aborted(r: &Record) -> bool {
    r.value.as_ref().is_some_and(|v| v.starts_with(b"aborted-"))
}

/// Fails with the first difference (not two vectors of hundreds of records).
fn assert_same<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
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

/// Which client a reader is, and so how its lines parse.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ReaderKind {
    Python(Isolation),
    Kcat(Isolation),
    /// The Java console consumer in a group, `read_committed`.
    JavaGroup,
}

impl ReaderKind {
    /// (partition, offset) of every record line printed so far; an error line fails the test.
    fn positions(self, client: &Client) -> Vec<(i32, i64)> {
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
fn record_lines(kind: ReaderKind, lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| kind != ReaderKind::JavaGroup || !l.starts_with("Processed a total"))
        .cloned()
        .collect()
}

fn sorted_records(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_by_key(|r| (r.partition, r.offset));
    records
}

/// Stock readers follow the endpoint while the source is produced to and replicated, and end with exactly what
/// the source serves them.
#[test]
fn a_mirror_is_read_while_replication_runs() {
    let topic = "orders";
    let partitions = 2;
    let mut repl = Replication::start("e2e-serve-read", LINK, &[topic_spec(topic, partitions)]);
    let source = repl.bootstrap();
    produce_round(&source, topic, partitions, 0);
    repl.wait_mirror_has_data();

    // A producer at a steady pace until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(1));
    let producer = {
        let (stop, rounds, source) = (stop.clone(), rounds.clone(), source.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let round = rounds.load(Ordering::SeqCst);
                produce_round(&source, topic, partitions, round);
                rounds.store(round + 1, Ordering::SeqCst);
                std::thread::sleep(ROUND_PAUSE);
            }
        })
    };

    let mut serve = repl.start_endpoint();
    let endpoint = serve.bootstrap();
    // Metadata: one broker, at the address the clients used, leading every partition of the topic.
    let (code, out, err) = kcat(&["-L", "-J", "-b", &endpoint, "-t", topic], &[]);
    assert_eq!(code, Some(0), "kcat -L: {err}");
    let metadata: Value = serde_json::from_str(&out).unwrap();
    let brokers = metadata["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 1, "Metadata's brokers: {metadata}");
    assert_eq!(brokers[0]["name"].as_str(), Some(endpoint.as_str()), "{metadata}");
    let leaders: Vec<(i64, i64)> = metadata["topics"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["partition"].as_i64().unwrap(), p["leader"].as_i64().unwrap()))
        .collect();
    let leader = brokers[0]["id"].as_i64().unwrap();
    assert_eq!(leaders, [(0, leader), (1, leader)], "partition leaders: {metadata}");
    let install = repl.broker.install();
    let group = "console-readers";
    let mut readers: Vec<(ReaderKind, Client)> = vec![
        (
            ReaderKind::Kcat(Isolation::ReadCommitted),
            kcat_follow(&endpoint, topic, Isolation::ReadCommitted).unwrap(),
        ),
        (
            ReaderKind::Kcat(Isolation::ReadUncommitted),
            kcat_follow(&endpoint, topic, Isolation::ReadUncommitted).unwrap(),
        ),
        (
            ReaderKind::Python(Isolation::ReadCommitted),
            python_follow(&endpoint, topic, Isolation::ReadCommitted).unwrap(),
        ),
        (
            ReaderKind::Python(Isolation::ReadUncommitted),
            python_follow(&endpoint, topic, Isolation::ReadUncommitted).unwrap(),
        ),
        (
            ReaderKind::JavaGroup,
            java_console_follow(install, &endpoint, topic, group, Isolation::ReadCommitted).unwrap(),
        ),
    ];

    // Every reader gets records while the producer still runs.
    let start = Instant::now();
    for (kind, client) in readers.iter_mut() {
        while kind.positions(client).is_empty() {
            assert!(
                client.running(),
                "{} exited before reading a record:\n{}\n--- serve ---\n{}",
                client.name(),
                client.stderr(),
                serve.log()
            );
            serve.assert_running();
            assert!(
                start.elapsed() < READ_PATIENCE,
                "{} read nothing from the endpoint:\n{}\n--- serve ---\n{}",
                client.name(),
                client.stderr(),
                serve.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert!(!producer.is_finished(), "the producer stopped before the readers read");
    // Three more rounds produced after every reader is reading, then a last record per partition: following.
    let reading_at = rounds.load(Ordering::SeqCst);
    while rounds.load(Ordering::SeqCst) < reading_at + 3 {
        repl.assert_running();
        serve.assert_running();
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::SeqCst);
    producer.join().unwrap();
    let follow_on: Vec<OutRecord> = (0..partitions)
        .map(|p| OutRecord {
            partition: Some(p),
            key: Some(b"follow-on".to_vec()),
            value: Some(format!("follow-on-{p}").into_bytes()),
            headers: vec![Header {
                key: "origin".into(),
                value: Some(b"follow".to_vec()),
            }],
            timestamp: None,
        })
        .collect();
    let follow_on = python_produce(
        &source,
        &ProducePlan::new(topic)
            .config("enable.idempotence", "true")
            .step(ProduceStep::Send(follow_on)),
    )
    .unwrap();
    repl.wait_caught_up();

    // What the source serves, read the same ways.
    let src_committed = consume_all(&source, topic, None, Isolation::ReadCommitted).unwrap();
    let src_uncommitted = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();
    let kcat_committed = kcat_consume(&source, topic, Isolation::ReadCommitted).unwrap();
    let kcat_uncommitted = kcat_consume(&source, topic, Isolation::ReadUncommitted).unwrap();
    let aborted: Vec<&Record> = src_uncommitted.iter().filter(|r| is_aborted(r)).collect();
    assert!(!aborted.is_empty(), "the source has no aborted records");
    assert!(src_committed.iter().all(|r| !is_aborted(r)));
    assert_eq!(src_committed.len() + aborted.len(), src_uncommitted.len());
    let expected = |kind: ReaderKind| -> usize {
        match kind {
            ReaderKind::Python(Isolation::ReadCommitted) | ReaderKind::JavaGroup => src_committed.len(),
            ReaderKind::Python(Isolation::ReadUncommitted) => src_uncommitted.len(),
            ReaderKind::Kcat(Isolation::ReadCommitted) => kcat_committed.len(),
            ReaderKind::Kcat(Isolation::ReadUncommitted) => kcat_uncommitted.len(),
        }
    };

    // Every reader reaches the end (or shows what it lacks), then is stopped.
    let start = Instant::now();
    for (kind, client) in readers.iter_mut() {
        loop {
            let seen = kind.positions(client).len();
            if seen >= expected(*kind) {
                break;
            }
            serve.assert_running();
            assert!(
                client.running() && start.elapsed() < READ_PATIENCE,
                "{} read {seen} of {} records:\n{}\n--- serve ---\n{}",
                client.name(),
                expected(*kind),
                client.stderr(),
                serve.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    for (kind, client) in readers {
        let name = client.name().to_string();
        let (_, lines, stderr) = client.stop();
        let lines = record_lines(kind, &lines);
        let context = format!("{name} (stderr:\n{stderr})");
        match kind {
            ReaderKind::Python(isolation) => {
                let got = sorted_records(lines.iter().map(|l| parse_python_line(l).unwrap()).collect());
                let want = match isolation {
                    Isolation::ReadCommitted => &src_committed,
                    Isolation::ReadUncommitted => &src_uncommitted,
                };
                assert_same(&context, &got, want);
            }
            ReaderKind::Kcat(isolation) => {
                let got = sorted_records(lines.iter().map(|l| parse_kcat_line(l).unwrap()).collect());
                let want = match isolation {
                    Isolation::ReadCommitted => &kcat_committed,
                    Isolation::ReadUncommitted => &kcat_uncommitted,
                };
                assert_same(&context, &got, want);
                let aborted_seen = got.iter().filter(|r| is_aborted(r)).count();
                match isolation {
                    Isolation::ReadCommitted => assert_eq!(aborted_seen, 0, "{context}: aborted records read"),
                    Isolation::ReadUncommitted => assert_eq!(aborted_seen, aborted.len(), "{context}"),
                }
            }
            ReaderKind::JavaGroup => {
                let mut got: Vec<ConsoleConsumed> = lines.iter().map(|l| parse_console_line(l).unwrap()).collect();
                got.sort_by_key(|c| (c.partition, c.offset));
                let want: Vec<ConsoleConsumed> = src_committed.iter().map(as_console).collect();
                assert_same(&context, &got, &want);
            }
        }
        eprintln!("{name}: {} records, as the source serves them", lines.len());
    }
    // The follow-on records (produced after every reader was reading) were among what each read; the group of
    // the console consumer committed its position on close: right past each partition's follow-on record.
    for r in &follow_on {
        assert!(src_committed
            .iter()
            .any(|s| s.offset == r.offset && s.partition == r.partition));
    }
    let committed = python_call(
        "committed",
        &json!({"bootstrap": endpoint, "topic": topic, "group": group, "partitions": (0..partitions).collect::<Vec<_>>()}),
        READ_PATIENCE,
    )
    .unwrap();
    let want: Vec<Value> = follow_on.iter().map(|r| json!([r.partition, r.offset + 1])).collect();
    assert_eq!(
        committed["offsets"],
        Value::Array(want),
        "the console consumer's group offsets"
    );

    serve.stop();
    repl.stop();
}

/// What a client looks up besides records (ListOffsets earliest and latest at both isolation levels and by time,
/// OffsetForLeaderEpoch, DescribeConfigs) is answered as the source answers it.
#[test]
fn lookups_are_answered_as_the_source_answers_them() {
    let topic = "looked-up";
    let partitions = 2;
    let mut repl = Replication::start("e2e-serve-lookups", LINK, &[topic_spec(topic, partitions)]);
    let source = repl.bootstrap();
    for round in 0..3 {
        produce_round(&source, topic, partitions, round);
    }
    repl.wait_caught_up();
    let mut serve = repl.start_endpoint();
    let endpoint = serve.bootstrap();
    let src_uncommitted = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();

    let last = src_uncommitted.iter().map(|r| r.timestamp).max().unwrap();
    let timestamps = [
        src_uncommitted[0].timestamp - 1,
        src_uncommitted[src_uncommitted.len() / 2].timestamp,
        last,
        last + 3_600_000,
    ];
    let lookups = |bootstrap: &str| {
        python_call(
            "lookups",
            &json!({"bootstrap": bootstrap, "topic": topic, "partitions": (0..partitions).collect::<Vec<_>>(),
                    "timestamps": timestamps}),
            READ_PATIENCE,
        )
        .unwrap()
    };
    let (served, want) = (lookups(&endpoint), lookups(&source));
    eprintln!("lookups of the endpoint: {served}");
    assert_eq!(served["watermarks"], want["watermarks"], "ListOffsets earliest/latest");
    assert_eq!(served["times"], want["times"], "ListOffsets by time");
    let source_configs = want["configs"].as_object().unwrap();
    let served_configs = served["configs"].as_object().unwrap();
    assert_eq!(
        served_configs.get("retention.ms").and_then(Value::as_str),
        Some("-1"),
        "DescribeConfigs: the topic's retention.ms as the source set it: {served_configs:?}"
    );
    for (name, value) in served_configs {
        assert_eq!(Some(value), source_configs.get(name), "DescribeConfigs {name}");
    }
    for timestamp in [-1, -2, -3] {
        let served = list_offsets(serve.port(), topic, partitions, timestamp);
        let want = list_offsets(repl.broker.broker_port(), topic, partitions, timestamp);
        assert_eq!(served, want, "ListOffsets {timestamp}");
    }
    for epoch in [0, 7] {
        let served = offset_for_leader_epoch(serve.port(), topic, partitions, epoch);
        let want = offset_for_leader_epoch(repl.broker.broker_port(), topic, partitions, epoch);
        let files: Vec<String> = std::fs::read_dir(repl.mirror.path().join(format!("{topic}-0")))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            served, want,
            "OffsetForLeaderEpoch of epoch {epoch} (the mirror's {topic}-0 holds {files:?})"
        );
    }

    serve.assert_running();
    serve.stop();
    repl.stop();
}

/// An unsigned varint (the flexible versions' lengths).
fn uvarint(mut n: u32, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A flexible request frame: request header v2 (the client id, then no tagged fields), body.
fn flexible_frame(api_key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut header_and_body = vec![0u8]; // no tagged fields in the header
    header_and_body.extend(body);
    frame(api_key, version, correlation, &header_and_body)
}

impl Cursor<'_> {
    fn uvarint(&mut self) -> u32 {
        let (mut n, mut shift) = (0u32, 0);
        loop {
            let b = self.take(1)[0];
            n |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return n;
            }
            shift += 7;
        }
    }
    fn compact_string(&mut self) -> String {
        let len = self.uvarint() as usize;
        String::from_utf8_lossy(self.take(len.saturating_sub(1))).into_owned()
    }
    fn no_tagged_fields(&mut self) {
        assert_eq!(self.uvarint(), 0, "tagged fields in an answer");
    }
}

/// ListOffsets v7 (flexible) of `timestamp` (-1 latest, -2 earliest, -3 the max timestamp) for every partition of
/// `topic`, read_uncommitted, on a raw connection: per partition, (error code, partition, timestamp, offset).
fn list_offsets(port: u16, topic: &str, partitions: i32, timestamp: i64) -> Vec<(i16, i32, i64, i64)> {
    let mut body = Vec::new();
    body.extend((-1i32).to_be_bytes()); // replica id: a consumer
    body.push(0); // read_uncommitted
    uvarint(2, &mut body); // one topic
    uvarint(topic.len() as u32 + 1, &mut body);
    body.extend(topic.as_bytes());
    uvarint(partitions as u32 + 1, &mut body);
    for p in 0..partitions {
        body.extend(p.to_be_bytes());
        body.extend((-1i32).to_be_bytes()); // current leader epoch
        body.extend(timestamp.to_be_bytes());
        body.push(0);
    }
    body.push(0); // the topic's tagged fields
    body.push(0); // the body's
    let mut stream = connect(port);
    stream.write_all(&flexible_frame(2, 7, 2, &body)).unwrap();
    let Outcome::Answered(2, response) = read_response(&mut stream) else {
        panic!("no answer to a ListOffsets v7");
    };
    let mut c = Cursor(&response);
    c.no_tagged_fields(); // response header v1
    c.i32(); // throttle time
    assert_eq!(c.uvarint(), 2, "topics in the ListOffsets answer");
    assert_eq!(c.compact_string(), topic);
    let n = c.uvarint().saturating_sub(1);
    let mut out: Vec<(i16, i32, i64, i64)> = (0..n)
        .map(|_| {
            let (partition, code, timestamp, offset, _epoch) = (c.i32(), c.i16(), c.i64(), c.i64(), c.i32());
            c.no_tagged_fields();
            (code, partition, timestamp, offset)
        })
        .collect();
    out.sort_by_key(|e| e.1);
    out
}

/// OffsetForLeaderEpoch v3 of `epoch` for every partition of `topic` on a raw connection: per partition, (error
/// code, partition, leader epoch, end offset).
fn offset_for_leader_epoch(port: u16, topic: &str, partitions: i32, epoch: i32) -> Vec<(i16, i32, i32, i64)> {
    let mut body = Vec::new();
    body.extend((-1i32).to_be_bytes()); // replica id: a consumer
    body.extend(1i32.to_be_bytes());
    body.extend(string(topic));
    body.extend(partitions.to_be_bytes());
    for p in 0..partitions {
        body.extend(p.to_be_bytes());
        body.extend((-1i32).to_be_bytes()); // current leader epoch: unknown, no fencing
        body.extend(epoch.to_be_bytes());
    }
    let mut stream = connect(port);
    stream.write_all(&frame(23, 3, 23, &body)).unwrap();
    let Outcome::Answered(23, response) = read_response(&mut stream) else {
        panic!("no answer to an OffsetForLeaderEpoch v3");
    };
    let mut c = Cursor(&response);
    c.i32(); // throttle time
    assert_eq!(c.i32(), 1, "topics in the OffsetForLeaderEpoch answer");
    assert_eq!(c.nullable_string().as_deref(), Some(topic));
    let n = c.i32();
    let mut out: Vec<(i16, i32, i32, i64)> = (0..n).map(|_| (c.i16(), c.i32(), c.i32(), c.i64())).collect();
    out.sort_by_key(|e| e.1);
    out
}

/// Whether a producer asks for a producer id first (InitProducerId) or sends its records straight away (Produce).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Idempotence {
    /// The Java client's default: InitProducerId first.
    On,
    /// `enable.idempotence=false`: its first request after Metadata is a Produce.
    Off,
}

/// The Java console producer, given one record and then the end of its input; its exit code, how long it took
/// and its stderr.
fn java_console_produce(
    install: &'static KafkaInstall,
    bootstrap: &str,
    topic: &str,
    idempotence: Idempotence,
) -> (Option<i32>, Duration, String) {
    let mut cmd = install.java(256, &kafka_support_dir().join("tools-log4j2.properties"));
    cmd.arg(install.main_class(CONSOLE_PRODUCER))
        .args(["--bootstrap-server", bootstrap, "--topic", topic]);
    let mut properties = vec![("request.timeout.ms", "20000"), ("delivery.timeout.ms", "60000")];
    if idempotence == Idempotence::Off {
        properties.extend([("enable.idempotence", "false"), ("acks", "1")]);
    }
    for (k, v) in properties {
        cmd.arg("--command-property").arg(format!("{k}={v}"));
    }
    let started = Instant::now();
    let mut client = Client::spawn("kafka-console-producer", cmd, Some("refused-record")).unwrap();
    client.close_stdin();
    let code = client.wait_exit(Duration::from_secs(120)).unwrap();
    (code, started.elapsed(), client.stderr())
}

/// A producer pointed at the endpoint fails fast with a broker error, not a timeout; the mirror is unchanged.
#[test]
fn a_producer_pointed_at_the_endpoint_is_refused() {
    let topic = "refused";
    let mut repl = Replication::start("e2e-serve-refused", LINK, &[topic_spec(topic, 1)]);
    let source = repl.bootstrap();
    produce_round(&source, topic, 1, 0);
    repl.wait_caught_up();
    let mut serve = repl.start_endpoint();
    let endpoint = serve.bootstrap();

    // librdkafka: a delivery report with the broker's error, long before the 60 s message timeout.
    let report = python_call(
        "produce",
        &json!({"bootstrap": endpoint, "topic": topic, "timeout_s": 60}),
        Duration::from_secs(120),
    )
    .unwrap();
    eprintln!("confluent-kafka producer: {report}");
    assert_eq!(
        report["delivered"], false,
        "a record was delivered to the endpoint: {report}"
    );
    assert!(report["error_code"].is_i64(), "{report}");
    assert_ne!(
        report["error_name"], "_MSG_TIMED_OUT",
        "the producer retried until its timeout: {report}"
    );
    let elapsed = report["elapsed_s"].as_f64().unwrap();
    assert!(elapsed < 20.0, "refused only after {elapsed:.1} s: {report}");

    // The Java producer, idempotent (its default: InitProducerId is refused) or not (Produce is refused): its send
    // fails promptly and it says why.
    let mut java_errors = String::new();
    for idempotence in [Idempotence::Off, Idempotence::On] {
        let (code, elapsed, stderr) = java_console_produce(repl.broker.install(), &endpoint, topic, idempotence);
        eprintln!("kafka-console-producer, idempotence {idempotence:?}: exit {code:?} after {elapsed:?}\n{stderr}");
        assert!(
            stderr.contains("Error when sending message") || code != Some(0),
            "the Java producer (idempotence {idempotence:?}) reported no error (exit {code:?}):\n{stderr}"
        );
        assert!(
            !stderr.contains("TimeoutException"),
            "the Java producer (idempotence {idempotence:?}) timed out instead of being refused:\n{stderr}"
        );
        assert!(
            elapsed < Duration::from_secs(45),
            "the Java producer (idempotence {idempotence:?}) took {elapsed:?}"
        );
        java_errors.push_str(&stderr);
    }
    let stderr = java_errors;
    // What the clients show of the endpoint's message depends on the error code: reported, not asserted.
    eprintln!(
        "the link named by confluent-kafka's error: {}, by the Java producer's: {}",
        report["error_str"].as_str().is_some_and(|s| s.contains(LINK)),
        stderr.contains(LINK)
    );
    // On the wire: Produce v8 (the first version with a partition error message) is refused with a message
    // that names the link.
    let (code, message) = raw_produce(serve.port(), topic);
    eprintln!("raw Produce v8: error {code}, message {message:?}");
    assert_ne!(code, 0, "a raw Produce was accepted");
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains(LINK) && m.contains(topic)),
        "the Produce refusal does not name the link {LINK:?} and the topic: {message:?}"
    );

    // Nothing was written: the endpoint serves exactly the source's records.
    serve.assert_running();
    let served = consume_all(&endpoint, topic, None, Isolation::ReadUncommitted).unwrap();
    let want = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();
    assert_same("the endpoint after the refused writes", &served, &want);
    serve.stop();
    repl.stop();
}

/// The member events of a `serve_client.py member`: its current assignment (None after a revoke), whether it
/// closed, the offsets it committed, and any error it printed.
#[derive(Debug, Default)]
struct MemberState {
    assignment: Option<Vec<i32>>,
    committed: Option<Vec<(i32, i64)>>,
    records: usize,
    closed: bool,
    errors: Vec<String>,
}

fn member_state(client: &Client) -> MemberState {
    let mut state = MemberState::default();
    for line in client.lines() {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: {line:?}: {e}", client.name()));
        let partitions = || -> Vec<i32> {
            v["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_i64().unwrap() as i32)
                .collect()
        };
        match v["event"].as_str().unwrap_or("") {
            "assigned" => state.assignment = Some(partitions()),
            "revoked" => state.assignment = None,
            "record" => state.records += 1,
            "committed" => {
                let mut offsets: Vec<(i32, i64)> = v["offsets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| (o[0].as_i64().unwrap() as i32, o[1].as_i64().unwrap()))
                    .collect();
                offsets.sort();
                state.committed = Some(offsets);
            }
            "closed" => state.closed = true,
            _ => state.errors.push(line.clone()),
        }
    }
    state
}

fn wait_members(
    what: &str,
    serve: &mut Endpoint,
    members: &mut [&mut Client],
    patience: Duration,
    done: impl Fn(&[MemberState]) -> bool,
) {
    let start = Instant::now();
    loop {
        let states: Vec<MemberState> = members.iter().map(|m| member_state(m)).collect();
        for (m, s) in members.iter().zip(&states) {
            assert!(s.errors.is_empty(), "{}: {:?}\n{}", m.name(), s.errors, m.stderr());
        }
        if done(&states) {
            return;
        }
        serve.assert_running();
        if start.elapsed() > patience {
            let detail: Vec<String> = members
                .iter()
                .zip(&states)
                .map(|(m, s)| format!("{}: {s:?}\n{}", m.name(), m.stderr()))
                .collect();
            panic!(
                "never: {what} within {patience:?}\n{}\n--- serve ---\n{}",
                detail.join("\n"),
                serve.log()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn committed_offsets(endpoint: &str, topic: &str, group: &str, partitions: i32) -> Vec<(i32, i64)> {
    let v = python_call(
        "committed",
        &json!({"bootstrap": endpoint, "topic": topic, "group": group, "partitions": (0..partitions).collect::<Vec<_>>()}),
        READ_PATIENCE,
    )
    .unwrap();
    v["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o[0].as_i64().unwrap() as i32, o[1].as_i64().unwrap()))
        .collect()
}

/// Two members of a classic group share the partitions; one leaves and the other gets them all; the offsets it
/// commits survive a restart of `serve` and a new member resumes exactly at them.
#[test]
fn a_group_of_two_rebalances_and_resumes_after_restart() {
    let topic = "grouped";
    let partitions = 4;
    let mut repl = Replication::start("e2e-serve-group", LINK, &[topic_spec(topic, partitions)]);
    let source = repl.bootstrap();
    produce_round(&source, topic, partitions, 0);
    produce_round(&source, topic, partitions, 1);
    repl.wait_caught_up();
    let mut serve = repl.start_endpoint();
    let endpoint = serve.bootstrap();
    let group = "pair";
    let all: Vec<i32> = (0..partitions).collect();

    let member = |name: &str| {
        let request = json!({"bootstrap": endpoint, "topic": topic, "group": group, "session_timeout_ms": 45000});
        python_client(name, "member", &request).unwrap()
    };
    let mut a = member("member a");
    wait_members(
        "member a has partitions",
        &mut serve,
        &mut [&mut a],
        READ_PATIENCE,
        |s| s[0].assignment.as_ref().is_some_and(|p| !p.is_empty()),
    );
    let mut b = member("member b");
    wait_members(
        "two members share the partitions",
        &mut serve,
        &mut [&mut a, &mut b],
        READ_PATIENCE,
        |s| match (&s[0].assignment, &s[1].assignment) {
            (Some(x), Some(y)) if !x.is_empty() && !y.is_empty() => {
                let union: BTreeSet<i32> = x.iter().chain(y).copied().collect();
                x.len() + y.len() == all.len() && union.into_iter().collect::<Vec<_>>() == all
            }
            _ => false,
        },
    );
    // Both read their share.
    wait_members(
        "both members read",
        &mut serve,
        &mut [&mut a, &mut b],
        READ_PATIENCE,
        |s| s.iter().all(|m| m.records > 0),
    );

    // B leaves (LeaveGroup): A gets every partition, sooner than B's 45 s session would have expired.
    let left = Instant::now();
    b.send(r#"{"cmd": "close"}"#).unwrap();
    wait_members("member b closed", &mut serve, &mut [&mut b], READ_PATIENCE, |s| {
        s[0].closed
    });
    wait_members(
        "member a has every partition",
        &mut serve,
        &mut [&mut a],
        Duration::from_secs(40),
        |s| s[0].assignment.as_deref() == Some(&all[..]),
    );
    eprintln!("rebalance after the leave: {:?}", left.elapsed());

    // A commits an offset in the middle of each partition, then leaves.
    let src = consume_all(&source, topic, None, Isolation::ReadCommitted).unwrap();
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for r in &src {
        ends.insert(r.partition, r.offset + 1);
    }
    let commit: Vec<(i32, i64)> = all.iter().map(|p| (*p, ends[p] / 2 + *p as i64)).collect();
    a.send(&json!({"cmd": "commit", "offsets": commit}).to_string())
        .unwrap();
    wait_members("member a committed", &mut serve, &mut [&mut a], READ_PATIENCE, |s| {
        s[0].committed.is_some()
    });
    assert_eq!(member_state(&a).committed.unwrap(), commit);
    a.send(r#"{"cmd": "close"}"#).unwrap();
    wait_members("member a closed", &mut serve, &mut [&mut a], READ_PATIENCE, |s| {
        s[0].closed
    });
    assert_eq!(
        committed_offsets(&endpoint, topic, group, partitions),
        commit,
        "OffsetFetch"
    );

    // Restart serve: the offsets are durable.
    let serve = repl.restart_endpoint(serve);
    assert_eq!(
        committed_offsets(&endpoint, topic, group, partitions),
        commit,
        "OffsetFetch after the restart"
    );
    // Kafka's own group tool (ListGroups, DescribeGroups, OffsetFetch) sees the same.
    let described = KafkaTools::new(repl.broker.install(), &endpoint)
        .describe_group_offsets()
        .unwrap();
    let want: BTreeMap<(String, String, i32), i64> = commit
        .iter()
        .map(|(p, o)| ((group.to_string(), topic.to_string(), *p), *o))
        .collect();
    assert_eq!(described, want, "kafka-consumer-groups --describe --all-groups");
    let resumed = python_group_resume(&endpoint, topic, partitions as usize, group, GroupProtocol::Classic).unwrap();
    let mut got: Vec<(i32, i64, Option<Vec<u8>>)> = resumed;
    got.sort_by_key(|r| (r.0, r.1));
    let want: Vec<(i32, i64, Option<Vec<u8>>)> = src
        .iter()
        .filter(|r| commit.iter().any(|(p, o)| *p == r.partition && r.offset >= *o))
        .map(|r| (r.partition, r.offset, r.value.clone()))
        .collect();
    assert_same("the group resumed after the restart", &got, &want);
    for (p, o) in &commit {
        let first = got.iter().find(|r| r.0 == *p).map(|r| r.1);
        // The first record at or after the committed offset (a transaction marker may sit exactly at it).
        let want_first = src
            .iter()
            .find(|r| r.partition == *p && r.offset >= *o)
            .map(|r| r.offset);
        assert_eq!(first, want_first, "partition {p} resumed at {first:?}, committed {o}");
    }
    serve.stop();
    repl.stop();
}

/// A request frame: size, api key, version, correlation id, client id (request header v1), body.
fn frame(api_key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut request = Vec::new();
    request.extend(api_key.to_be_bytes());
    request.extend(version.to_be_bytes());
    request.extend(correlation.to_be_bytes());
    request.extend(7i16.to_be_bytes());
    request.extend(b"hostile");
    request.extend(body);
    let mut out = (request.len() as i32).to_be_bytes().to_vec();
    out.extend(request);
    out
}

/// What became of a hostile request.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The endpoint closed the connection.
    Closed,
    /// An answer with this correlation id; the response body after it.
    Answered(i32, Vec<u8>),
    /// Neither within [`HOSTILE_PATIENCE`].
    Hung,
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(HOSTILE_PATIENCE)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Sends `bytes` on a new connection (then closes our half when `half_close`) and sees what comes back.
fn send_hostile(port: u16, bytes: &[u8], half_close: bool) -> Outcome {
    let mut stream = connect(port);
    if stream.write_all(bytes).is_err() {
        return Outcome::Closed;
    }
    if half_close {
        let _ = stream.shutdown(Shutdown::Write);
    }
    read_response(&mut stream)
}

fn read_response(stream: &mut TcpStream) -> Outcome {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            return Outcome::Hung
        }
        Err(_) => return Outcome::Closed,
    }
    let size = i32::from_be_bytes(size);
    assert!((4..=16 << 20).contains(&size), "a response of {size} bytes");
    let mut body = vec![0u8; size as usize];
    if stream.read_exact(&mut body).is_err() {
        return Outcome::Closed;
    }
    let correlation = i32::from_be_bytes(body[..4].try_into().unwrap());
    Outcome::Answered(correlation, body[4..].to_vec())
}

/// ApiVersions v0 on a new connection: the (api key, min, max) the endpoint announces; panics unless it answers
/// with error 0.
fn api_versions(port: u16) -> Vec<(i16, i16, i16)> {
    let mut stream = connect(port);
    stream.write_all(&frame(18, 0, 4242, &[])).unwrap();
    let Outcome::Answered(correlation, body) = read_response(&mut stream) else {
        panic!("no ApiVersions answer");
    };
    assert_eq!(correlation, 4242);
    let error = i16::from_be_bytes([body[0], body[1]]);
    assert_eq!(error, 0, "ApiVersions v0 answered error {error}");
    let count = i32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let at = 6 + i * 6;
            let field = |o: usize| i16::from_be_bytes([body[at + o], body[at + o + 1]]);
            (field(0), field(2), field(4))
        })
        .collect()
}

/// The endpoint answers an honest ApiVersions with Fetch, ListOffsets and Metadata among its APIs.
fn assert_serving(port: u16, serve: &mut Endpoint, after: &str) {
    serve.assert_running();
    let apis: BTreeSet<i16> = api_versions(port).into_iter().map(|(k, _, _)| k).collect();
    for key in [1, 2, 3, 18] {
        assert!(apis.contains(&key), "after {after}: API {key} not announced: {apis:?}");
    }
}

/// A Kafka string: i16 length and the bytes.
fn string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as i16).to_be_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

/// Reads big-endian fields off a response body.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        assert!(self.0.len() >= n, "a response shorter than its fields");
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    fn nullable_string(&mut self) -> Option<String> {
        let len = self.i16();
        (len >= 0).then(|| String::from_utf8_lossy(self.take(len as usize)).into_owned())
    }
}

/// A Produce v8 (acks=-1) of an empty record set to partition 0 of `topic`, on a raw connection: the error code
/// and the error message of the partition's answer.
fn raw_produce(port: u16, topic: &str) -> (i16, Option<String>) {
    let mut body = Vec::new();
    body.extend((-1i16).to_be_bytes()); // transactional id: null
    body.extend((-1i16).to_be_bytes()); // acks
    body.extend(5000i32.to_be_bytes()); // timeout
    body.extend(1i32.to_be_bytes());
    body.extend(string(topic));
    body.extend(1i32.to_be_bytes());
    body.extend(0i32.to_be_bytes()); // partition
    body.extend(0i32.to_be_bytes()); // records: zero bytes
    let mut stream = connect(port);
    stream.write_all(&frame(0, 8, 77, &body)).unwrap();
    let Outcome::Answered(77, response) = read_response(&mut stream) else {
        panic!("no answer to a Produce v8");
    };
    let mut c = Cursor(&response);
    assert_eq!(c.i32(), 1, "topics in the Produce answer");
    assert_eq!(c.nullable_string().as_deref(), Some(topic));
    assert_eq!(c.i32(), 1, "partitions in the Produce answer");
    assert_eq!(c.i32(), 0, "partition index");
    let code = c.i16();
    let (_base_offset, _append_time, _log_start) = (c.i64(), c.i64(), c.i64());
    let record_errors = c.i32();
    for _ in 0..record_errors.max(0) {
        c.i32();
        c.nullable_string();
    }
    (code, c.nullable_string())
}

/// Hostile and broken clients, then an honest one: Kafka's error codes or a closed connection for the former, no
/// crash, bounded memory and descriptors, everything for the latter.
#[test]
fn hostile_clients_do_not_stop_the_endpoint() {
    ensure_fd_limit(IDLE_CONNECTIONS as u64 + 500).unwrap();
    let topic = "hostile";
    let partitions = 2;
    let mut repl = Replication::start("e2e-serve-hostile", LINK, &[topic_spec(topic, partitions)]);
    let source = repl.bootstrap();
    produce_round(&source, topic, partitions, 0);
    repl.wait_caught_up();
    let mut serve = repl.start_endpoint();
    let (endpoint, port) = (serve.bootstrap(), serve.port());
    // An honest reader, connected through everything that follows.
    let follower = python_follow(&endpoint, topic, Isolation::ReadUncommitted).unwrap();
    let first = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();
    let start = Instant::now();
    while ReaderKind::Python(Isolation::ReadUncommitted)
        .positions(&follower)
        .len()
        < first.len()
    {
        assert!(
            start.elapsed() < READ_PATIENCE,
            "the follower never read the mirror:\n{}",
            follower.stderr()
        );
        serve.assert_running();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_serving(port, &mut serve, "start-up");
    let pid = serve.pid();
    let (rss_before, fds_before) = (vm_rss_kib(pid).unwrap(), open_fds(pid).unwrap());

    let unknown_key = frame(32000, 0, 1, &[]);
    // Metadata v1 claiming 2^31 - 16 topics, none sent; Fetch v4 of garbage.
    let huge_array = frame(3, 1, 2, &0x7fff_fff0i32.to_be_bytes());
    let garbage = frame(1, 4, 3, &[0xff; 64]);
    let mut truncated = frame(3, 1, 4, &[0; 80]);
    truncated.truncate(30);
    let mut two_gib = i32::MAX.to_be_bytes().to_vec();
    two_gib.extend(&frame(18, 0, 5, &[])[4..]);
    let mut negative = (-5i32).to_be_bytes().to_vec();
    negative.extend(&frame(18, 0, 6, &[])[4..]);
    let unsupported_metadata = frame(3, 999, 7, &[]);
    let cases: Vec<(&str, Vec<u8>, bool, i32)> = vec![
        ("an unknown API key", unknown_key, false, 1),
        ("an array of 2^31 topics", huge_array, false, 2),
        ("a garbage Fetch", garbage, false, 3),
        ("a truncated frame", truncated, true, 4),
        ("a frame declaring 2 GiB", two_gib, false, 5),
        ("a negative frame size", negative, false, 6),
        ("Metadata v999", unsupported_metadata, false, 7),
    ];
    for (what, bytes, half_close, correlation) in &cases {
        let outcome = send_hostile(port, bytes, *half_close);
        eprintln!(
            "{what}: {:?}",
            match &outcome {
                Outcome::Answered(c, body) => format!("answered (correlation {c}, {} bytes)", body.len()),
                other => format!("{other:?}"),
            }
        );
        match outcome {
            Outcome::Closed => {}
            Outcome::Answered(c, _) => {
                assert!(
                    !matches!(
                        *what,
                        "a truncated frame" | "a frame declaring 2 GiB" | "a negative frame size"
                    ),
                    "{what} was answered"
                );
                assert_eq!(c, *correlation, "{what}: an answer to another request");
            }
            Outcome::Hung => panic!("{what}: neither answered nor closed within {HOSTILE_PATIENCE:?}"),
        }
        assert_serving(port, &mut serve, what);
    }

    // An ApiVersions of a version the endpoint does not know: Kafka answers UNSUPPORTED_VERSION (35) in version 0,
    // so that the client retries with one it knows. Header v2 and a v3-style body, as a newer client sends.
    let body = [0u8, 0x02, b'x', 0x02, b'1', 0x00];
    match send_hostile(port, &frame(18, 127, 8, &body), false) {
        Outcome::Answered(8, body) => {
            let error = i16::from_be_bytes([body[0], body[1]]);
            assert_eq!(
                error, 35,
                "ApiVersions v127 answered error {error}, not UNSUPPORTED_VERSION"
            );
        }
        other => panic!("ApiVersions v127: {other:?}, not an UNSUPPORTED_VERSION answer"),
    }
    assert_serving(port, &mut serve, "ApiVersions v127");

    // Out of range and unknown: Kafka's error codes as the client reports them.
    let probe = python_call(
        "probe",
        &json!({"bootstrap": endpoint, "topic": topic, "unknown_topic": "no-such-topic", "partition": 0,
                "offset": 1_000_000_000i64}),
        READ_PATIENCE,
    )
    .unwrap();
    eprintln!("probe: {probe}");
    assert_eq!(probe["unknown_topic"]["code"], 3, "UNKNOWN_TOPIC_OR_PARTITION: {probe}");
    let out_of_range = &probe["out_of_range"];
    assert!(
        out_of_range["code"] == 1
            || out_of_range["str"]
                .as_str()
                .is_some_and(|s| s.to_lowercase().contains("offset out of range")),
        "OFFSET_OUT_OF_RANGE: {probe}"
    );

    // A thousand idle connections; meanwhile a new honest client reads everything.
    let idle: Vec<TcpStream> = (0..IDLE_CONNECTIONS)
        .map(|i| TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("idle connection {i}: {e}")))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    assert_serving(port, &mut serve, "a thousand idle connections");
    let fds_idle = open_fds(pid).unwrap();
    let served = consume_all(&endpoint, topic, None, Isolation::ReadUncommitted).unwrap();
    assert_same("an honest reader beside the idle connections", &served, &first);
    drop(idle);
    // Their descriptors are released.
    let start = Instant::now();
    let fds_after = loop {
        let fds = open_fds(pid).unwrap();
        if fds <= fds_before + 16 {
            break fds;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve keeps {fds} descriptors after the idle connections closed ({fds_before} before)"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // Replication goes on; the reader connected before all this follows it to the end.
    produce_round(&source, topic, partitions, 1);
    repl.wait_caught_up();
    let all = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();
    assert!(all.len() > first.len());
    let start = Instant::now();
    while ReaderKind::Python(Isolation::ReadUncommitted)
        .positions(&follower)
        .len()
        < all.len()
    {
        assert!(
            start.elapsed() < READ_PATIENCE,
            "the follower stopped at {} of {} records:\n{}\n--- serve ---\n{}",
            ReaderKind::Python(Isolation::ReadUncommitted)
                .positions(&follower)
                .len(),
            all.len(),
            follower.stderr(),
            serve.log()
        );
        serve.assert_running();
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, lines, _) = follower.stop();
    let got = sorted_records(lines.iter().map(|l| parse_python_line(l).unwrap()).collect());
    assert_same("the follower after the hostile clients", &got, &all);
    let committed = consume_all(&endpoint, topic, None, Isolation::ReadCommitted).unwrap();
    let want = consume_all(&source, topic, None, Isolation::ReadCommitted).unwrap();
    assert_same("read_committed after the hostile clients", &committed, &want);

    serve.assert_running();
    let rss_after = vm_rss_kib(pid).unwrap();
    eprintln!(
        "serve: VmRSS {rss_before} KiB before, {rss_after} KiB after; descriptors {fds_before} before, \
         {fds_idle} with {IDLE_CONNECTIONS} idle connections, {fds_after} after"
    );
    if !serve.is_reference() {
        assert!(rss_after < RSS_LIMIT_KIB, "serve grew to {rss_after} KiB");
    }
    serve.stop();
    repl.stop();
}

/// PEM files of a CA and of two leaves it signed, the endpoint's (`localhost`, `127.0.0.1`) and a client's:
/// (cert, key) of each, and the CA.
struct Certs {
    server: (String, String),
    client: (String, String),
    ca: String,
}

fn certs(dir: &std::path::Path) -> Certs {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "e2e-serve-ca");
    let issuer = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, issuer.pem()).unwrap();
    let leaf = |name: &str| -> (String, String) {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.display().to_string(), k.display().to_string())
    };
    Certs {
        server: leaf("server"),
        client: leaf("client"),
        ca: ca.display().to_string(),
    }
}

/// `kcat <args> -X <config>...` run to its end (60 s at most): (exit code, stdout, stderr).
fn kcat(args: &[&str], config: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = std::process::Command::new("kcat");
    cmd.args(args);
    for (k, v) in config {
        cmd.arg("-X").arg(format!("{k}={v}"));
    }
    let mut client = Client::spawn("kcat", cmd, None).unwrap();
    client.close_stdin();
    let code = client.wait_exit(Duration::from_secs(60)).unwrap();
    (code, client.lines().join("\n"), client.stderr())
}

/// Over TLS (mutual, the direct transport's flags) behind an advertised listener: a client with a certificate the
/// CA signed reads everything at the advertised address; a plaintext client and one without a certificate are
/// refused, and the endpoint goes on serving. (No reference run: the source broker listens in plaintext.)
#[test]
fn a_tls_endpoint_serves_clients_with_certificates_at_its_advertised_address() {
    let topic = "secured";
    let partitions = 2;
    let mut repl = Replication::start("e2e-serve-tls", LINK, &[topic_spec(topic, partitions)]);
    let source = repl.bootstrap();
    produce_round(&source, topic, partitions, 0);
    repl.wait_caught_up();
    let certs = certs(repl.work.path());
    let mut serve = repl.start_serve_with(|port| {
        [
            "--tls-cert",
            &certs.server.0,
            "--tls-key",
            &certs.server.1,
            "--tls-ca",
            &certs.ca,
            "--advertised-listener",
            &format!("localhost:{port}"),
        ]
        .map(String::from)
        .to_vec()
    });
    let advertised = format!("localhost:{}", serve.port());
    let bootstrap = serve.bootstrap();
    let tls = [
        ("security.protocol", "ssl"),
        ("ssl.ca.location", certs.ca.as_str()),
        ("ssl.certificate.location", certs.client.0.as_str()),
        ("ssl.key.location", certs.client.1.as_str()),
    ];

    // Metadata names the advertised address; a read through it is the source's.
    let (code, out, err) = kcat(&["-L", "-J", "-b", &bootstrap, "-t", topic], &tls);
    assert_eq!(code, Some(0), "kcat -L over TLS: {err}");
    let metadata: Value = serde_json::from_str(&out).unwrap();
    let brokers: Vec<&str> = metadata["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(brokers, [advertised.as_str()], "Metadata's brokers: {metadata}");
    let read = |config: &[(&str, &str)]| {
        let (code, out, err) = kcat(
            &["-C", "-b", &bootstrap, "-t", topic, "-J", "-e", "-q", "-o", "beginning"],
            config,
        );
        assert_eq!(code, Some(0), "kcat -C over TLS: {err}");
        sorted_records(out.lines().map(|l| parse_kcat_line(l).unwrap()).collect())
    };
    let mut config = tls.to_vec();
    config.push(("isolation.level", "read_committed"));
    let want = kcat_consume(&source, topic, Isolation::ReadCommitted).unwrap();
    assert_same("kcat over TLS", &read(&config), &want);

    // Refused: plaintext, and TLS without a client certificate. Promptly, and the endpoint serves on.
    let started = Instant::now();
    let (code, _, err) = kcat(&["-L", "-b", &bootstrap, "-m", "3"], &[]);
    assert_ne!(code, Some(0), "a plaintext client got metadata from the TLS endpoint");
    eprintln!("plaintext client: exit {code:?} after {:?}: {err}", started.elapsed());
    let (code, _, err) = kcat(&["-L", "-b", &bootstrap, "-m", "3"], &tls[..2]);
    assert_ne!(code, Some(0), "a client without a certificate got metadata");
    eprintln!("client without a certificate: exit {code:?}: {err}");
    serve.assert_running();
    assert_same("kcat over TLS after the refusals", &read(&config), &want);
    serve.stop();
    repl.stop();
}

/// A Fetch v4 of partition 0 of `topic` from offset 0 (no wait, `max_bytes` for the response and the partition)
/// sent on a new connection whose answer is never read: a client that stops reading mid-response.
fn stalled_fetch(port: u16, topic: &str, max_bytes: i32) -> TcpStream {
    let mut body = Vec::new();
    body.extend((-1i32).to_be_bytes()); // replica id: a consumer
    body.extend(0i32.to_be_bytes()); // max wait
    body.extend(0i32.to_be_bytes()); // min bytes
    body.extend(max_bytes.to_be_bytes());
    body.push(0); // read_uncommitted
    body.extend(1i32.to_be_bytes());
    body.extend(string(topic));
    body.extend(1i32.to_be_bytes());
    body.extend(0i32.to_be_bytes()); // partition
    body.extend(0i64.to_be_bytes()); // fetch offset
    body.extend(max_bytes.to_be_bytes()); // partition max bytes
    let mut stream = connect(port);
    stream.write_all(&frame(1, 4, 99, &body)).unwrap();
    stream
}

/// Clients that ask for a large response and never read it: the endpoint's fetch memory stays within
/// `--fetch-memory`, and an honest consumer still reads the whole partition meanwhile.
#[test]
fn stalled_readers_neither_starve_honest_ones_nor_grow_memory() {
    const RECORDS: u64 = 20_000;
    const FETCH_MEMORY_MIB: u64 = 64;
    let topic = "bulk";
    let install = KafkaInstall::locate().unwrap();
    let spec = TopicSpec::new(topic, 1)
        .config(install.segment_bytes_config(), 4 << 20)
        .config("retention.ms", -1);
    let mut repl = Replication::start("e2e-serve-stalled", LINK, &[spec]);
    // About 20 MB: several times what the kernel's socket buffers take in of an answer nobody reads.
    repl.broker
        .tools()
        .producer_perf(topic, RECORDS, 1000, &[("acks", "1"), ("compression.type", "none")])
        .unwrap();
    repl.wait_caught_up();
    let mut serve = if reference_mode() {
        repl.start_endpoint()
    } else {
        repl.start_serve_with(|_| {
            ["--plaintext", "--fetch-memory", &FETCH_MEMORY_MIB.to_string()]
                .map(String::from)
                .to_vec()
        })
    };
    let (port, bootstrap) = (serve.port(), serve.bootstrap());
    let stalled: Vec<TcpStream> = (0..8).map(|_| stalled_fetch(port, topic, i32::MAX)).collect();
    std::thread::sleep(Duration::from_secs(2));
    let rss_stalled = vm_rss_kib(serve.pid()).unwrap();

    // An honest reader of the whole partition (offsets only), while the stalled answers are pending.
    let started = Instant::now();
    let mut cmd = std::process::Command::new("kcat");
    cmd.args([
        "-C",
        "-b",
        &bootstrap,
        "-t",
        topic,
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%o\n",
    ])
    // A request unanswered for 20 s fails the reader (the default waits a minute); Kafka serves all this in ~1 s.
    .args(["-X", "socket.timeout.ms=20000"]);
    let mut honest = Client::spawn("kcat -C", cmd, None).unwrap();
    honest.close_stdin();
    let code = honest.wait_exit(Duration::from_secs(60));
    let offsets = honest.lines();
    eprintln!(
        "honest reader beside 8 stalled fetches: {} records in {:?}; serve VmRSS {rss_stalled} KiB",
        offsets.len(),
        started.elapsed()
    );
    assert!(
        matches!(code, Ok(Some(0))) && offsets.len() as u64 == RECORDS,
        "an honest reader got {} of {RECORDS} records in {:?} ({code:?}) while 8 connections did not read \
         their Fetch answers:\n{}\n--- serve ---\n{}",
        offsets.len(),
        started.elapsed(),
        honest.stderr(),
        serve.log()
    );
    assert_eq!(
        offsets.last().map(String::as_str),
        Some((RECORDS - 1).to_string().as_str())
    );
    serve.assert_running();
    let rss = vm_rss_kib(serve.pid()).unwrap().max(rss_stalled);
    assert!(
        serve.is_reference() || rss < (FETCH_MEMORY_MIB + 100) * 1024,
        "serve holds {rss} KiB with --fetch-memory {FETCH_MEMORY_MIB}"
    );
    drop(stalled);
    serve.stop();
    repl.stop();
}
