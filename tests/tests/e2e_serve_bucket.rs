//! `segmirror serve --store` end to end: stock clients read a bucket that `segmirror ship --store` fills from a
//! live Kafka 4.4 source, with no mirror and no applier in between (a remote read replica).
//!
//! The scene: a Kafka 4.4 broker with a topic of two partitions (small segments, so readers cross rolls), written
//! to by an idempotent producer and by a transactional one that commits and aborts; `segmirror ship --store` into
//! a local folder, running continuously with a short upload interval and asking the broker for its high
//! watermarks; `segmirror serve --store` over the same folder, following new manifests with a short poll and a
//! small cache.
//!
//! kcat and confluent-kafka (assign mode from offset 0) follow the endpoint at both isolation levels, and Kafka's
//! `kafka-console-consumer` in a group at `read_committed`, while the producers run, and go on after they stop; a record produced per partition after every reader is reading must
//! reach each of them (new manifests are followed). Once serve's ListOffsets latest equals the source's high
//! watermark on every partition, everything each follower read, and a fresh read of the endpoint by the same
//! clients, is compared with what the source broker itself serves them, record by record (partition, offset,
//! timestamp, key, value, headers): aborted records absent under `read_committed`, present under
//! `read_uncommitted`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segmirror_tests::serve::records::*;
use segmirror_tests::serve::wire::list_offsets;
use segmirror_tests::serve::*;
use segmirror_tests::service::Service;
use segmirror_tests::tools::ConsoleConsumed;
use segmirror_tests::*;

/// The link the shipper writes under and `serve` serves.
const LINK: &str = "bucket-replica";
const TOPIC: &str = "replicated";
/// The console consumer's group.
const GROUP: &str = "console-readers";
const PARTITIONS: i32 = 2;
/// Pause between two producer rounds: a steady pace rather than a burst.
const ROUND_PAUSE: Duration = Duration::from_millis(300);
/// Guard for anything the test waits on; never a speed assertion.
const WAIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);

/// The highest `next_offset` of the bucket's manifests of one partition (0 while there are none).
fn shipped_next(bucket: &std::path::Path, partition: i32) -> i64 {
    let dir = bucket.join(LINK).join(TOPIC).join(partition.to_string());
    let mut next = 0;
    let Ok(lineages) = std::fs::read_dir(&dir) else {
        return next;
    };
    for lineage in lineages.flatten() {
        let Ok(manifests) = std::fs::read_dir(lineage.path().join("manifests")) else {
            continue;
        };
        for m in manifests.flatten() {
            let Ok(bytes) = std::fs::read(m.path()) else { continue };
            // A manifest being written may not parse yet: looked at again on the next poll.
            if let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                next = next.max(json["next_offset"].as_i64().unwrap_or(0));
            }
        }
    }
    next
}

/// ListOffsets latest (read_uncommitted) per partition on a raw connection: (error code, offset) of each.
fn latest(port: u16) -> Vec<(i16, i64)> {
    list_offsets(port, TOPIC, PARTITIONS, -1)
        .into_iter()
        .map(|(code, _, _, offset)| (code, offset))
        .collect()
}

/// kcat `-C -e` of the whole topic from the beginning, run to its end: its records by (partition, offset).
fn kcat_read(bootstrap: &str, isolation: Isolation) -> Vec<Record> {
    let mut cmd = std::process::Command::new("kcat");
    cmd.args(["-C", "-b", bootstrap, "-t", TOPIC, "-J", "-e", "-q", "-o", "beginning"])
        .arg("-X")
        .arg(format!("isolation.level={}", isolation.as_str()));
    let mut client = Client::spawn("kcat -e", cmd, None).unwrap();
    let code = client.wait_exit(WAIT).unwrap();
    assert_eq!(code, Some(0), "kcat -e from {bootstrap}: {}", client.stderr());
    sorted_records(client.lines().iter().map(|l| parse_kcat_line(l).unwrap()).collect())
}

#[test]
fn a_bucket_is_read_while_the_shipper_fills_it() {
    let started = Instant::now();
    let mut broker = KafkaBroker::start(BrokerConfig::new("e2e-serve-bucket")).unwrap();
    let source = broker.bootstrap();
    admin(&source, &[topic_spec(TOPIC, PARTITIONS)], &[]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let bucket = work.path().join("bucket");
    std::fs::create_dir_all(&bucket).unwrap();
    let cache = work.path().join("cache");

    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--store",
            bucket.to_str().unwrap(),
            "--log-dir",
            broker.log_dir().to_str().unwrap(),
            "--link",
            LINK,
            "--source-bootstrap",
            &source,
            "--upload-interval-ms",
            "200",
        ],
    )
    .patience(WAIT);
    produce_round(&source, TOPIC, PARTITIONS, 0);
    let start = Instant::now();
    while (0..PARTITIONS).any(|p| shipped_next(&bucket, p) == 0) {
        shipper.assert_running();
        assert!(
            start.elapsed() < WAIT,
            "the bucket never got both partitions:\n--- ship ---\n{}",
            shipper.log()
        );
        std::thread::sleep(POLL);
    }

    // A producer at a steady pace until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(1));
    let producer = {
        let (stop, rounds, source) = (stop.clone(), rounds.clone(), source.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let round = rounds.load(Ordering::SeqCst);
                produce_round(&source, TOPIC, PARTITIONS, round);
                rounds.store(round + 1, Ordering::SeqCst);
                std::thread::sleep(ROUND_PAUSE);
            }
        })
    };

    let mut serve = Service::start(
        "serve",
        [
            "serve",
            "--store",
            bucket.to_str().unwrap(),
            "--link",
            LINK,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--cache-size",
            "64",
            "--poll-interval-ms",
            "200",
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
        ],
    )
    .patience(WAIT);
    let endpoint = serve
        .wait_for(&format!("segmirror serve: link {LINK} on "))
        .trim()
        .to_string();
    let port: u16 = endpoint
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("serve's address: {endpoint:?}"));
    let logs =
        |shipper: &Service, serve: &Service| format!("--- ship ---\n{}\n--- serve ---\n{}", shipper.log(), serve.log());

    let kinds = [
        ReaderKind::Kcat(Isolation::ReadCommitted),
        ReaderKind::Kcat(Isolation::ReadUncommitted),
        ReaderKind::Python(Isolation::ReadCommitted),
        ReaderKind::Python(Isolation::ReadUncommitted),
        ReaderKind::JavaGroup,
    ];
    let mut readers: Vec<(ReaderKind, Client)> = kinds
        .iter()
        .map(|kind| {
            let client = match *kind {
                ReaderKind::Kcat(isolation) => kcat_follow(&endpoint, TOPIC, isolation),
                ReaderKind::Python(isolation) => python_follow(&endpoint, TOPIC, isolation),
                ReaderKind::JavaGroup => {
                    java_console_follow(broker.install(), &endpoint, TOPIC, GROUP, Isolation::ReadCommitted)
                }
            };
            (*kind, client.unwrap())
        })
        .collect();

    // Every reader gets records while the producer still runs.
    let start = Instant::now();
    for (kind, client) in readers.iter_mut() {
        while kind.positions(client).is_empty() {
            serve.assert_running();
            shipper.assert_running();
            assert!(
                client.running() && start.elapsed() < WAIT,
                "{} read nothing from the endpoint:\n{}\n{}",
                client.name(),
                client.stderr(),
                logs(&shipper, &serve)
            );
            std::thread::sleep(POLL);
        }
    }
    assert!(!producer.is_finished(), "the producer stopped before the readers read");
    // Two more rounds after every reader is reading, then a last record per partition: following new manifests.
    let reading_at = rounds.load(Ordering::SeqCst);
    let start = Instant::now();
    while rounds.load(Ordering::SeqCst) < reading_at + 2 {
        serve.assert_running();
        shipper.assert_running();
        assert!(start.elapsed() < WAIT, "the producer is stuck");
        std::thread::sleep(POLL);
    }
    stop.store(true, Ordering::SeqCst);
    producer.join().unwrap();
    let follow_on: Vec<OutRecord> = (0..PARTITIONS)
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
        &ProducePlan::new(TOPIC)
            .config("enable.idempotence", "true")
            .step(ProduceStep::Send(follow_on)),
    )
    .unwrap();

    // Caught up: serve's latest offset is the source's high watermark on every partition.
    let want_latest = latest(broker.broker_port());
    assert!(want_latest.iter().all(|(code, _)| *code == 0), "{want_latest:?}");
    let start = Instant::now();
    loop {
        let served = latest(port);
        if served == want_latest {
            break;
        }
        serve.assert_running();
        shipper.assert_running();
        assert!(
            start.elapsed() < WAIT,
            "serve's ListOffsets latest {served:?} never reached the source's high watermarks {want_latest:?}:\n{}",
            logs(&shipper, &serve)
        );
        std::thread::sleep(POLL);
    }
    let caught_up = started.elapsed();

    // What the source serves, read the same ways.
    let src_committed = consume_all(&source, TOPIC, None, Isolation::ReadCommitted).unwrap();
    let src_uncommitted = consume_all(&source, TOPIC, None, Isolation::ReadUncommitted).unwrap();
    let kcat_committed = kcat_read(&source, Isolation::ReadCommitted);
    let kcat_uncommitted = kcat_read(&source, Isolation::ReadUncommitted);
    let aborted = src_uncommitted.iter().filter(|r| is_aborted(r)).count();
    assert!(aborted > 0, "the source has no aborted records");
    assert!(src_committed.iter().all(|r| !is_aborted(r)));
    assert_eq!(src_committed.len() + aborted, src_uncommitted.len());
    for r in &follow_on {
        assert!(src_committed
            .iter()
            .any(|s| s.partition == r.partition && s.offset == r.offset));
    }
    let want = |kind: ReaderKind| -> &Vec<Record> {
        match kind {
            ReaderKind::Python(Isolation::ReadCommitted) | ReaderKind::JavaGroup => &src_committed,
            ReaderKind::Python(Isolation::ReadUncommitted) => &src_uncommitted,
            ReaderKind::Kcat(Isolation::ReadCommitted) => &kcat_committed,
            ReaderKind::Kcat(Isolation::ReadUncommitted) => &kcat_uncommitted,
        }
    };

    // Every follower reaches the end, the follow-on records included (or shows what it lacks), then is stopped.
    let start = Instant::now();
    for (kind, client) in readers.iter_mut() {
        loop {
            let seen = kind.positions(client);
            let has_follow_on = follow_on.iter().all(|r| seen.contains(&(r.partition, r.offset)));
            if seen.len() >= want(*kind).len() && has_follow_on {
                break;
            }
            serve.assert_running();
            assert!(
                client.running() && start.elapsed() < WAIT,
                "{} read {} of {} records (the follow-on records among them: {has_follow_on}):\n{}\n{}",
                client.name(),
                seen.len(),
                want(*kind).len(),
                client.stderr(),
                logs(&shipper, &serve)
            );
            std::thread::sleep(POLL);
        }
    }
    for (kind, client) in readers {
        let name = client.name().to_string();
        let (_, lines, stderr) = client.stop();
        let lines = record_lines(kind, &lines);
        let context = format!("{name}, following the endpoint (stderr:\n{stderr})");
        if kind == ReaderKind::JavaGroup {
            // The console consumer prints what it shows of a record, not the bytes: compared as it shows them.
            let mut got: Vec<ConsoleConsumed> = lines.iter().map(|l| parse_console_line(l).unwrap()).collect();
            got.sort_by_key(|c| (c.partition, c.offset));
            let want: Vec<ConsoleConsumed> = src_committed.iter().map(as_console).collect();
            assert_same(&context, &got, &want);
            eprintln!("{name}: {} records, as the source serves them", got.len());
            continue;
        }
        let got = sorted_records(
            lines
                .iter()
                .map(|l| match kind {
                    ReaderKind::Kcat(_) => parse_kcat_line(l).unwrap(),
                    _ => parse_python_line(l).unwrap(),
                })
                .collect(),
        );
        assert_same(&context, &got, want(kind));
        let aborted_seen = got.iter().filter(|r| is_aborted(r)).count();
        match kind {
            ReaderKind::Kcat(Isolation::ReadCommitted) | ReaderKind::Python(Isolation::ReadCommitted) => {
                assert_eq!(aborted_seen, 0, "{context}: aborted records read")
            }
            _ => assert_eq!(aborted_seen, aborted, "{context}: aborted records"),
        }
        eprintln!("{name}: {} records, as the source serves them", got.len());
    }

    // After production stopped: a fresh read of the endpoint by each client is the source's.
    for (isolation, want) in [
        (Isolation::ReadCommitted, &kcat_committed),
        (Isolation::ReadUncommitted, &kcat_uncommitted),
    ] {
        let got = kcat_read(&endpoint, isolation);
        assert_same(&format!("kcat -e {} of the endpoint", isolation.as_str()), &got, want);
    }
    for (isolation, want) in [
        (Isolation::ReadCommitted, &src_committed),
        (Isolation::ReadUncommitted, &src_uncommitted),
    ] {
        let got = consume_all(&endpoint, TOPIC, None, isolation).unwrap();
        assert_same(
            &format!("confluent-kafka {} of the endpoint", isolation.as_str()),
            &got,
            want,
        );
    }
    eprintln!(
        "{} producer rounds, {} records ({aborted} aborted), high watermarks {want_latest:?}; serve caught up after \
         {caught_up:?}, test {:?}",
        rounds.load(Ordering::SeqCst),
        src_uncommitted.len(),
        started.elapsed()
    );

    serve.assert_running();
    let (code, log) = serve.stop();
    assert_eq!(code, Some(0), "serve on SIGTERM:\n{log}");
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship on SIGTERM:\n{log}");
    broker.stop().unwrap();
}
