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
//! - Lookups (ListOffsets earliest, latest, by time and max timestamp; OffsetForLeaderEpoch; DescribeConfigs) get
//!   the source's answers.
//! - Over mutual TLS behind `--advertised-listener`, clients with a certificate read; others are refused.
//!
//! Hostile clients are in `e2e_serve_hostile.rs`. `SEGMIRROR_SERVE_REFERENCE=kafka` runs the same clients and
//! assertions against the source broker itself (all but the write refusal and TLS tests, which Kafka's plaintext
//! listener cannot pass): a check that the tests expect what Kafka does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segmirror_tests::clients::{python_group_resume, GroupProtocol};
use segmirror_tests::install::kafka_support_dir;
use segmirror_tests::serve::records::*;
use segmirror_tests::serve::wire::*;
use segmirror_tests::serve::*;
use segmirror_tests::tools::{ConsoleConsumed, CONSOLE_PRODUCER};
use segmirror_tests::*;
use serde_json::{json, Value};

/// The link the applier records and `serve` serves: distinctive, so a refusal that names it can be recognized.
const LINK: &str = "ro-mirror-link";

/// Pause between two producer rounds: a steady pace rather than a burst.
const ROUND_PAUSE: Duration = Duration::from_millis(300);

/// Per-reader patience for the first record and for the last.
const READ_PATIENCE: Duration = Duration::from_secs(120);

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
