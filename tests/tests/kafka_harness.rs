//! Tests of the real-Kafka harness itself: brokers start, stop cleanly, restart on their log dir, run side by
//! side; every client and tool round-trips records; every data shape lands on disk as intended.
//!
//! These need Kafka, kcat and confluent-kafka installed by `scripts/install-test-deps.sh`; without them they fail
//! with a message saying to run `scripts/test-all.sh`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use segment_format::now_ms;
use segmirror_tests::clients::{kcat_consume, kcat_produce};
use segmirror_tests::shapes::{segment_base_offsets, Codec, Shape, ShapeOptions, ShapeTopic};
use segmirror_tests::tools::ConsoleRecord;
use segmirror_tests::*;

/// Files of a partition directory with the given extension, sorted by name.
fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .collect();
    v.sort();
    v
}

fn binary_records(partition: i32, ts: i64) -> Vec<OutRecord> {
    vec![
        OutRecord {
            partition: Some(partition),
            key: Some(b"k\x00\xff".to_vec()),
            value: Some((0..=255u8).collect()),
            headers: vec![
                Header {
                    key: "a".into(),
                    value: Some(b"1".to_vec()),
                },
                Header {
                    key: "a".into(),
                    value: None,
                },
                Header {
                    key: "bin".into(),
                    value: Some(vec![0, 0xff]),
                },
            ],
            timestamp: Some(ts),
        },
        OutRecord {
            partition: Some(partition),
            key: None,
            value: None,
            headers: vec![],
            timestamp: Some(ts + 1),
        },
        OutRecord {
            partition: Some(partition),
            key: Some(Vec::new()),
            value: Some(Vec::new()),
            headers: vec![],
            timestamp: Some(ts + 2),
        },
    ]
}

#[test]
fn every_client_and_tool_round_trips_records() {
    let broker = KafkaBroker::start(BrokerConfig::new("clients")).unwrap();
    let tools = broker.tools();
    let bootstrap = broker.bootstrap();

    // Admin via TopicCommand / ConfigCommand; the topic id is the one the broker writes into partition.metadata.
    tools
        .create_topic(&TopicSpec::new("clients", 2).config("max.message.bytes", 200000))
        .unwrap();
    tools
        .alter_topic_config("clients", &[("retention.ms", "86400000")])
        .unwrap();
    let desc = tools.describe_topic("clients").unwrap();
    assert_eq!(desc.partitions, 2);
    assert_eq!(
        desc.configs.get("max.message.bytes").map(String::as_str),
        Some("200000")
    );
    assert_eq!(desc.configs.get("retention.ms").map(String::as_str), Some("86400000"));
    let pm = std::fs::read_to_string(broker.partition_dir("clients", 0).join("partition.metadata")).unwrap();
    assert_eq!(pm, format!("version: 0\ntopic_id: {}", desc.topic_id));

    // Python: exact bytes, null vs empty, repeated and null headers, explicit timestamps.
    let ts = now_ms() - 60_000;
    let mut plan_records = binary_records(0, ts);
    plan_records.extend(binary_records(1, ts + 10));
    let sent = python_produce(
        &bootstrap,
        &ProducePlan::new("clients").step(ProduceStep::Send(plan_records)),
    )
    .unwrap();
    assert_eq!(
        sent.iter().map(|r| (r.partition, r.offset)).collect::<Vec<_>>(),
        [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    );
    assert!(sent.iter().all(|r| r.timestamp_type == TimestampType::CreateTime));
    assert_eq!(sent[0].timestamp, ts);
    let got = consume_all(&bootstrap, "clients", None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(got, sent);
    assert_eq!(got[1].key, None);
    assert_eq!(got[2].key, Some(Vec::new()));

    // kcat: text records with headers to partition 1; kcat and Python read them back identically.
    kcat_produce(
        &bootstrap,
        "clients",
        1,
        &[(Some("kk"), Some("vv")), (None, Some("no-key"))],
        &[("src", "kcat")],
    )
    .unwrap();
    let by_kcat: Vec<Record> = kcat_consume(&bootstrap, "clients", Isolation::ReadUncommitted)
        .unwrap()
        .into_iter()
        .filter(|r| r.partition == 1 && r.offset >= 3)
        .collect();
    let by_python: Vec<Record> = consume_all(&bootstrap, "clients", Some(&[1]), Isolation::ReadCommitted)
        .unwrap()
        .into_iter()
        .filter(|r| r.offset >= 3)
        .collect();
    assert_eq!(by_kcat, by_python);
    assert_eq!(by_kcat.len(), 2);
    assert_eq!(
        (
            by_kcat[0].offset,
            by_kcat[0].key.as_deref(),
            by_kcat[0].value.as_deref()
        ),
        (3, Some(&b"kk"[..]), Some(&b"vv"[..]))
    );
    assert_eq!(by_kcat[1].key, None);
    assert_eq!(
        by_kcat[1].headers,
        vec![Header {
            key: "src".into(),
            value: Some(b"kcat".to_vec())
        }]
    );

    // Java console producer/consumer on a one-partition topic.
    tools.create_topic(&TopicSpec::new("console", 1)).unwrap();
    let console = vec![
        ConsoleRecord {
            key: Some("c1".into()),
            value: "one".into(),
            headers: vec![("h".into(), "x".into())],
        },
        ConsoleRecord {
            key: None,
            value: "two".into(),
            headers: vec![],
        },
    ];
    tools.console_produce("console", &console).unwrap();
    let consumed = tools.console_consume("console", 0, 2).unwrap();
    assert_eq!(consumed.iter().map(|c| c.offset).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(consumed.iter().map(|c| c.record.clone()).collect::<Vec<_>>(), console);
    assert!(consumed
        .iter()
        .all(|c| c.timestamp_type == "CreateTime" && c.partition == 0));
    let py = consume_all(&bootstrap, "console", None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        py.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
        consumed.iter().map(|c| c.timestamp).collect::<Vec<_>>()
    );

    // ProducerPerformance bulk data; GetOffsetShell end and start offsets; DumpLogSegments sees the codec.
    tools.create_topic(&TopicSpec::new("perf", 1)).unwrap();
    tools
        .producer_perf(
            "perf",
            3000,
            200,
            &[("compression.type", "lz4"), ("linger.ms", "5"), ("acks", "all")],
        )
        .unwrap();
    assert_eq!(tools.end_offsets("perf").unwrap(), BTreeMap::from([(0, 3000)]));
    assert_eq!(
        tools.earliest_offsets("clients").unwrap(),
        BTreeMap::from([(0, 0), (1, 0)])
    );
    let log = broker.partition_dir("perf", 0).join("00000000000000000000.log");
    let dump = dump_log_segments(broker.install(), &[&log], &[]).unwrap();
    assert!(dump.contains("compresscodec: lz4"), "{dump}");
    assert!(
        dump.contains("isvalid: true") && !dump.contains("isvalid: false"),
        "{dump}"
    );
    assert_eq!(batch_field(&dump, "count").iter().sum::<i64>(), 3000);
}

#[test]
fn clean_stop_restart_kill_and_reuse_of_a_log_dir() {
    let data = tempfile::tempdir().unwrap();
    let log_dir = data.path().join("logs");
    let mut broker = KafkaBroker::start(BrokerConfig::new("restart").log_dir(&log_dir)).unwrap();
    let cluster_id = broker.cluster_id().to_string();
    let bootstrap = broker.bootstrap();
    admin(&bootstrap, &[TopicSpec::new("r", 1)], &[]).unwrap();
    let ts = now_ms() - 1000;
    let sent = python_produce(
        &bootstrap,
        &ProducePlan::new("r").step(ProduceStep::Send(binary_records(0, ts))),
    )
    .unwrap();

    // Clean stop writes the marker with the broker epoch (KIP-966 JSON).
    broker.stop().unwrap();
    let marker = std::fs::read_to_string(log_dir.join(CLEAN_SHUTDOWN_FILE)).unwrap();
    assert!(marker.starts_with("{\"version\":0,\"brokerEpoch\":"), "{marker}");
    assert!(!broker.is_running());

    // Restart on the same dir and ports: same data; the broker removed the marker at start-up.
    broker.restart().unwrap();
    assert_eq!(broker.bootstrap(), bootstrap);
    assert!(!log_dir.join(CLEAN_SHUTDOWN_FILE).exists());
    assert_eq!(
        consume_all(&bootstrap, "r", None, Isolation::ReadUncommitted).unwrap(),
        sent
    );

    // Crash: no marker; the next start recovers and still serves the data.
    broker.kill().unwrap();
    assert!(!log_dir.join(CLEAN_SHUTDOWN_FILE).exists());
    broker.restart().unwrap();
    assert_eq!(
        consume_all(&bootstrap, "r", None, Isolation::ReadUncommitted).unwrap(),
        sent
    );
    broker.stop().unwrap();
    drop(broker);

    // A new broker (new ports) on the stopped broker's log dir: no re-format, same cluster, same records.
    let again = KafkaBroker::start(BrokerConfig::new("reuse").log_dir(&log_dir)).unwrap();
    assert_eq!(again.cluster_id(), cluster_id);
    assert_eq!(
        consume_all(&again.bootstrap(), "r", None, Isolation::ReadUncommitted).unwrap(),
        sent
    );
    // A wrong cluster id for an existing dir is refused before starting.
    drop(again);
    let err = KafkaBroker::start(
        BrokerConfig::new("wrong")
            .log_dir(&log_dir)
            .cluster_id("AAAAAAAAAAAAAAAAAAAAAA"),
    )
    .err();
    assert!(format!("{:#}", err.unwrap()).contains("belongs to cluster"));
}

#[test]
fn two_brokers_run_side_by_side() {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| KafkaBroker::start(BrokerConfig::new("source")).unwrap());
        let b = s.spawn(|| KafkaBroker::start(BrokerConfig::new("target")).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    let ports: BTreeSet<u16> = [
        a.broker_port(),
        a.controller_port(),
        b.broker_port(),
        b.controller_port(),
    ]
    .into();
    assert_eq!(ports.len(), 4);
    assert_ne!(a.cluster_id(), b.cluster_id());
    let ia = admin(&a.bootstrap(), &[TopicSpec::new("same", 1)], &["same"]).unwrap();
    let ib = admin(&b.bootstrap(), &[TopicSpec::new("same", 1)], &["same"]).unwrap();
    assert_ne!(ia["same"].topic_id, ib["same"].topic_id, "topic ids are per cluster");
    let ts = now_ms();
    let sa = python_produce(
        &a.bootstrap(),
        &ProducePlan::new("same").step(ProduceStep::Send(binary_records(0, ts))),
    )
    .unwrap();
    assert_eq!(
        consume_all(&a.bootstrap(), "same", None, Isolation::ReadUncommitted).unwrap(),
        sa
    );
    assert!(consume_all(&b.bootstrap(), "same", None, Isolation::ReadUncommitted)
        .unwrap()
        .is_empty());
}

/// Prints what a shape put on disk (for humans reading test output with --nocapture).
fn describe_on_disk(broker: &KafkaBroker, topic: &ShapeTopic) -> String {
    let mut out = String::new();
    for p in 0..topic.partitions {
        let dir = broker.partition_dir(&topic.name, p);
        let mut counts: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let kind = match name.split_once('.') {
                Some((_, ext)) => ext.to_string(),
                None => name.clone(),
            };
            let c = counts.entry(kind).or_default();
            c.0 += 1;
            c.1 += e.metadata().unwrap().len();
        }
        out.push_str(&format!("{}-{p}: {counts:?}\n", topic.name));
    }
    out
}

#[test]
fn every_shape_lands_on_disk() {
    let broker = KafkaBroker::start(BrokerConfig::new("shapes")).unwrap();
    let started = std::time::Instant::now();
    let topics = shapes::produce_all_shapes(&broker, &ShapeOptions::default()).unwrap();
    eprintln!("produced {} shape topics in {:?}", topics.len(), started.elapsed());
    assert_eq!(topics.len(), Shape::all().len());
    let bootstrap = broker.bootstrap();

    for topic in &topics {
        eprint!("{}", describe_on_disk(&broker, topic));
        for p in 0..topic.partitions {
            let dir = broker.partition_dir(&topic.name, p);
            let pm = std::fs::read_to_string(dir.join("partition.metadata")).unwrap();
            assert_eq!(pm, format!("version: 0\ntopic_id: {}", topic.topic_id));
            let bases = segment_base_offsets(&dir).unwrap();
            assert!(bases.len() >= 2, "{}-{p} has only segments {bases:?}", topic.name);
        }
        let uncommitted = consume_all(&bootstrap, &topic.name, None, Isolation::ReadUncommitted).unwrap();
        match topic.expected(Isolation::ReadUncommitted) {
            Some(expected) => assert_same_records(&uncommitted, &expected, &topic.name),
            None => check_compacted(topic, &uncommitted),
        }
    }

    let by_shape: BTreeMap<Shape, &ShapeTopic> = topics.iter().map(|t| (t.shape, t)).collect();

    // Codecs: one DumpLogSegments over the first segment of every codec topic (one JVM).
    let expected_codecs: Vec<(Shape, &str)> = Codec::ALL
        .iter()
        .map(|c| (Shape::Codec(*c), c.name()))
        .chain([(Shape::BrokerCompressed, "zstd")])
        .collect();
    let firsts: Vec<PathBuf> = expected_codecs
        .iter()
        .map(|(shape, _)| files_with_ext(&broker.partition_dir(&by_shape[shape].name, 0), "log")[0].clone())
        .collect();
    let refs: Vec<&Path> = firsts.iter().map(PathBuf::as_path).collect();
    let dump = dump_log_segments(broker.install(), &refs, &[]).unwrap();
    let sections: Vec<&str> = dump.split("Dumping ").filter(|s| !s.trim().is_empty()).collect();
    assert_eq!(sections.len(), firsts.len());
    for (section, (shape, codec)) in sections.iter().zip(&expected_codecs) {
        assert!(
            section.contains(&format!("compresscodec: {codec}")),
            "{shape:?}: {section}"
        );
        assert!(!section.contains("isvalid: false"));
        // Non-idempotent producers: no producer id.
        assert!(section.contains("producerId: -1"), "{section}");
    }

    // Idempotent producers: producer ids and sequences in batches; producer snapshots at segment rolls.
    let idem = by_shape[&Shape::Idempotent];
    let dir = broker.partition_dir(&idem.name, 0);
    let logs = files_with_ext(&dir, "log");
    let dump = dump_log_segments(
        broker.install(),
        &logs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &[],
    )
    .unwrap();
    let pids: BTreeSet<i64> = batch_field(&dump, "producerId").into_iter().collect();
    assert_eq!(pids.len(), 2, "two idempotent producers: {pids:?}");
    assert!(pids.iter().all(|p| *p >= 0));
    assert_eq!(
        batch_field(&dump, "baseSequence")
            .into_iter()
            .filter(|s| *s == 0)
            .count(),
        2
    );
    assert!(!files_with_ext(&dir, "snapshot").is_empty());

    // Transactions: aborted records hidden under read_committed, and .txnindex files of 34-byte entries.
    let txn = by_shape[&Shape::Transactions];
    assert!(!txn.aborted.is_empty());
    let committed = consume_all(&bootstrap, &txn.name, None, Isolation::ReadCommitted).unwrap();
    assert_same_records(&committed, &txn.expected(Isolation::ReadCommitted).unwrap(), &txn.name);
    assert_eq!(committed.len() + txn.aborted.len(), txn.records.len());
    for p in 0..txn.partitions {
        let idx = files_with_ext(&broker.partition_dir(&txn.name, p), "txnindex");
        assert!(!idx.is_empty(), "no .txnindex in partition {p}");
        for f in idx {
            let len = std::fs::metadata(&f).unwrap().len();
            assert!(len > 0 && len % 34 == 0, "{} has {len} bytes", f.display());
        }
    }

    // Retention: segments gone, log start offset > 0, mid-segment on partition 1 (DeleteRecordsCommand).
    let ret = by_shape[&Shape::Retention];
    let earliest = broker.tools().earliest_offsets(&ret.name).unwrap();
    assert_eq!(earliest, ret.log_start_offsets);
    assert!(earliest.values().all(|o| *o > 0));
    let bases1 = segment_base_offsets(&broker.partition_dir(&ret.name, 1)).unwrap();
    assert!(
        !bases1.contains(&earliest[&1]),
        "log start {} should be inside a segment {bases1:?}",
        earliest[&1]
    );

    // LogAppendTime: the broker's clock, not the producer's (which was an hour back).
    let lat = by_shape[&Shape::LogAppendTime];
    assert!(lat
        .records
        .iter()
        .all(|r| r.timestamp_type == TimestampType::LogAppendTime));
    assert!(lat.records.iter().all(|r| r.timestamp > now_ms() - 600_000));
    assert!(by_shape[&Shape::Codec(Codec::None)]
        .records
        .iter()
        .all(|r| r.timestamp_type == TimestampType::CreateTime));
}

/// The values of `field: <int>` in every batch line of a DumpLogSegments output.
fn batch_field(dump: &str, field: &str) -> Vec<i64> {
    let needle = format!(" {field}: ");
    dump.lines()
        .filter(|l| l.starts_with("baseOffset:"))
        .filter_map(|l| l.split(&needle).nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

/// Record-by-record comparison that reports the first difference instead of two huge vectors.
fn assert_same_records(got: &[Record], expected: &[Record], what: &str) {
    if let Some(i) = (0..got.len().min(expected.len())).find(|i| got[*i] != expected[*i]) {
        panic!(
            "{what}: record {i} differs:\n got      {:?}\n expected {:?}",
            got[i], expected[i]
        );
    }
    assert_eq!(got.len(), expected.len(), "{what}: record counts differ");
}

fn check_compacted(topic: &ShapeTopic, consumed: &[Record]) {
    let produced: BTreeSet<&Record> = topic.records.iter().collect();
    for r in consumed {
        assert!(produced.contains(r), "consumed record not produced: {r:?}");
    }
    let gaps = consumed.windows(2).filter(|w| w[1].offset != w[0].offset + 1).count();
    assert!(gaps > 0, "compaction left no offset gaps");
    assert!(consumed.len() < topic.records.len());
    let kept: BTreeSet<&Record> = consumed.iter().collect();
    for latest in topic.latest_per_key().values() {
        assert!(kept.contains(latest), "latest value of a key lost: {latest:?}");
    }
}
