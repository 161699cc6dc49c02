//! Promotion into a real Kafka broker, end to end.
//!
//! 1. **Leader epochs** ([`leader_epochs_above_the_target_break_consumers_and_promotion_restamps_them`]): the
//!    experiment behind `segmirror promote`'s epoch handling, kept as a test. The same source-like partition
//!    (batches of leader epochs 3 and 7) goes into a stopped target broker twice: once copied as is (what a plain
//!    byte-for-byte installation does) and once by `segmirror promote`. On the target the partition's leader epoch
//!    is 2. Real consumer groups — the Java client and librdkafka — read part of each partition, commit, and
//!    resume: on the plain copy the Java consumer refuses the broker's metadata as older than the epoch it
//!    committed and never fetches again, and librdkafka's offset validation fails and resets to the beginning;
//!    on the promoted partition both resume exactly where they stopped. New writes continue at the end, restarts
//!    are clean, and raising the target epoch by restarts (the alternative) is shown to work only once the target
//!    epoch reaches the source's. It also checks that promotion refuses a running broker and that a broker does not
//!    start while a promotion is unfinished.
//! 2. **Every shape through an S3 bucket** ([`every_shape_seeded_through_s3_applied_and_promoted_reads_back_identically`]):
//!    a source broker with every data shape (codecs, transactions with aborts, idempotence, compaction, retention,
//!    LogAppendTime, several partitions), `segmirror seed` into a moto S3 server, `segmirror apply`, `segmirror
//!    promote` into a target broker; a real consumer then reads every record with the source's offset, timestamp
//!    (and type), key, value and headers at both isolation levels, new records continue at the mirror's end offset,
//!    and the target restarts cleanly.
//! 3. **Across Kafka versions** ([`kafka_3_9_source_promoted_into_a_kafka_4_4_target`],
//!    [`kafka_4_4_source_promoted_into_a_kafka_3_9_target`]): the same run with a Kafka 3.9 source and a 4.4 target,
//!    and the other way round, on a smaller set of shapes that still covers an uncompressed idempotent topic, a
//!    compressed one, a transactional one with aborts and a retention-trimmed one, each with several partitions and
//!    several segments. A 3.9 target must load what `promote` writes (partition.metadata, leader-epoch-checkpoint,
//!    the root checkpoints) as a 4.4 one does; a 4.4 target must accept a 3.9 broker's segments and snapshots.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use segment_format::checkpoint::{LeaderEpochCheckpoint, OffsetCheckpoint, OffsetCheckpointEntry};
use segment_format::dir::{
    LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_format::now_ms;
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segmirror_tests::epoch_probe::{
    java_group_session, python_group_session, write_epoch_partition, GroupProbe, GroupSession,
};
use segmirror_tests::mirror::{
    assert_same_files, leader_epoch_from_log, record_writer_mirror, run_segmirror_env, segmirror_promote,
};
use segmirror_tests::s3::MotoServer;
use segmirror_tests::shapes::{self, produce_shapes, segment_base_offsets};
use segmirror_tests::*;

/// Replaces or adds one partition's entry in a root offset checkpoint, keeping the others.
fn set_checkpoint(path: &Path, topic: &str, partition: i32, offset: i64) {
    let mut cp = OffsetCheckpoint::read(path).unwrap();
    cp.entries.retain(|e| !(e.topic == topic && e.partition == partition));
    cp.entries.push(OffsetCheckpointEntry {
        topic: topic.to_string(),
        partition,
        offset,
    });
    cp.write(path).unwrap();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Java,
    Librdkafka,
}

fn session(install: &'static KafkaInstall, client: Client, probe: &GroupProbe<'_>) -> GroupSession {
    match client {
        Client::Java => java_group_session(install, probe).unwrap(),
        Client::Librdkafka => python_group_session(probe).unwrap(),
    }
}

/// One consumer-group session reading `topic` at `read_committed`.
fn probe<'a>(bootstrap: &'a str, topic: &'a str, group: &'a str, max_records: usize, timeout_s: u64) -> GroupProbe<'a> {
    GroupProbe {
        bootstrap,
        topic,
        partition: 0,
        group,
        max_records,
        timeout: Duration::from_secs(timeout_s),
        isolation: Isolation::ReadCommitted,
    }
}

/// Records per epoch-partition: 4 batches of epoch 3 and 4 of epoch 7, 5 records each.
const EPOCHS: [(i32, usize); 2] = [(3, 4), (7, 4)];
const SOURCE_MAX_EPOCH: i32 = 7;
const RECORDS: i64 = 40;
/// The first session stops inside the epoch-7 batches, so it commits epoch 7 (or the restamped epoch).
const FIRST_SESSION: usize = 25;

#[test]
fn leader_epochs_above_the_target_break_consumers_and_promotion_restamps_them() {
    let install = KafkaInstall::locate().unwrap();
    let (raw, promoted, handed) = ("epoch-raw", "epoch-promoted", "epoch-handed-over");
    let mut target = KafkaBroker::start(BrokerConfig::new("epochs")).unwrap();
    let specs = [
        TopicSpec::new(raw, 1),
        TopicSpec::new(promoted, 1),
        TopicSpec::new(handed, 1),
    ];
    let ids = admin(&target.bootstrap(), &specs, &[raw, promoted, handed]).unwrap();

    // The source side: identical bytes for both topics (a writer-made partition as a source broker that led in
    // epochs 3 and 7 leaves it), one of them recorded as an applied mirror in a catalog.
    let work = tempfile::tempdir().unwrap();
    let (plain_root, mirror, catalog) = (
        work.path().join("plain"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    let base_ts = now_ms() - 60_000;
    let (plain, expected_raw) = write_epoch_partition(&plain_root, raw, 0, &EPOCHS, base_ts).unwrap();
    let (written, expected) = write_epoch_partition(&mirror, promoted, 0, &EPOCHS, base_ts).unwrap();
    assert_eq!(written.log_end_offset, RECORDS);
    record_writer_mirror(&catalog, "epochs", &written.topic_id.to_string(), &[(&written, 0)]).unwrap();
    // A second mirror (its own link and catalog), promoted by handing its files over (`--handover rename`).
    let (handed_mirror, handed_catalog) = (work.path().join("handed-mirror"), work.path().join("handed.sqlite"));
    let (handed_written, expected_handed) = write_epoch_partition(&handed_mirror, handed, 0, &EPOCHS, base_ts).unwrap();
    record_writer_mirror(
        &handed_catalog,
        "handed",
        &handed_written.topic_id.to_string(),
        &[(&handed_written, 0)],
    )
    .unwrap();

    // Promotion refuses while the broker runs (it holds the log dir's .lock).
    let run = segmirror_promote(&mirror, target.log_dir(), &catalog, &[]).unwrap();
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("the broker is running"), "{run}");
    target.stop().unwrap();
    let log_dir = target.log_dir().to_path_buf();
    let target_epoch =
        LeaderEpochCheckpoint::read(&target.partition_dir(promoted, 0).join(LEADER_EPOCH_CHECKPOINT_FILE))
            .unwrap()
            .entries
            .last()
            .unwrap()
            .epoch;
    assert!(target_epoch < SOURCE_MAX_EPOCH);

    // The plain copy: the source's files with their epochs, under the target's topic id, with the root
    // checkpoints a copier needs.
    let dst = target.partition_dir(raw, 0);
    std::fs::remove_dir_all(&dst).unwrap();
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(&plain.dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    PartitionMetadata::new(Uuid::from_str(&ids[raw].topic_id).unwrap())
        .write(&dst.join(PARTITION_METADATA_FILE))
        .unwrap();
    for file in [RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE] {
        set_checkpoint(&log_dir.join(file), raw, 0, RECORDS);
    }

    // An unfinished promotion keeps the broker from starting: its staging directory is not a partition name.
    let staging = log_dir.join(".segmirror-promote");
    std::fs::create_dir(&staging).unwrap();
    let refused = target
        .restart()
        .expect_err("a broker must not start during a promotion");
    assert!(format!("{refused:#}").contains(".segmirror-promote"), "{refused:#}");
    std::fs::remove_dir(&staging).unwrap();

    // Promotion.
    let run = segmirror_promote(&mirror, &log_dir, &catalog, &["--json"]).unwrap();
    assert_eq!(run.code, 0, "{run}");
    let report = run.json().unwrap();
    let p = &report["partitions"][0];
    assert_eq!(p["outcome"], "promoted", "{report}");
    assert_eq!(p["leader_epoch"], target_epoch, "{report}");
    assert_eq!(p["batches_restamped"], 8, "{report}");
    assert_eq!(p["target_topic_id"], ids[promoted].topic_id.as_str(), "{report}");
    assert_eq!(p["handed_over"], false, "{report}");

    // Promotion by handover: the mirror's files are renamed into the log dir and restamped in place.
    let mirror_log = handed_written.dir.join("00000000000000000000.log");
    assert!(mirror_log.is_file());
    let run = segmirror_promote(
        &handed_mirror,
        &log_dir,
        &handed_catalog,
        &["--json", "--handover", "rename"],
    )
    .unwrap();
    assert_eq!(run.code, 0, "{run}");
    let report = run.json().unwrap();
    let p = &report["partitions"][0];
    assert_eq!(
        (p["outcome"].as_str(), p["handed_over"].as_bool()),
        (Some("promoted"), Some(true)),
        "{report}"
    );
    assert_eq!(p["batches_restamped"], 8, "{report}");
    assert!(!mirror_log.exists(), "the mirror gave its .log up");

    target.restart().unwrap();
    let leader_epoch = leader_epoch_from_log(&target, promoted, 0).unwrap();
    assert!(
        leader_epoch < SOURCE_MAX_EPOCH,
        "the experiment needs a target epoch ({leader_epoch}) below the source's"
    );
    let bootstrap = target.bootstrap();

    // A plain read of the whole topic works either way.
    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let read = consume_topics(&bootstrap, &[raw, promoted, handed], isolation).unwrap();
        for (topic, want) in [(raw, &expected_raw), (promoted, &expected), (handed, &expected_handed)] {
            assert_eq!(&read[topic], want, "{topic} {isolation:?}");
        }
    }

    // Consumer groups: read part, commit, resume.
    let mut evidence = Vec::new();
    for client in [Client::Java, Client::Librdkafka] {
        for topic in [raw, promoted] {
            let group = format!("{client:?}-{topic}");
            let first = session(install, client, &probe(&bootstrap, topic, &group, FIRST_SESSION, 30));
            assert_eq!(
                first.offsets(),
                (0..FIRST_SESSION as i64).collect::<Vec<_>>(),
                "{client:?} {topic}: {first:?}"
            );
            let committed_epoch = if topic == raw { SOURCE_MAX_EPOCH } else { target_epoch };
            assert_eq!(
                first.committed_after.map(|c| (c.offset, c.leader_epoch)),
                Some((FIRST_SESSION as i64, Some(committed_epoch))),
                "{client:?} {topic}: a KIP-320 client commits the epoch of the last record it read"
            );
            let second = session(install, client, &probe(&bootstrap, topic, &group, 1000, 15));
            let resumed = (FIRST_SESSION as i64..RECORDS).collect::<Vec<_>>();
            match (topic == promoted, client) {
                (true, _) => {
                    assert_eq!(second.offsets(), resumed, "{client:?} {topic}: {second:?}");
                    assert!(second.reached_end && second.errors.is_empty(), "{client:?}: {second:?}");
                }
                (false, Client::Java) => {
                    // Stuck: the committed epoch 7 is "newer" than any metadata the broker can send.
                    assert!(second.records.is_empty() && second.timed_out, "{second:?}");
                    let refused_metadata = format!("older epoch {leader_epoch} (current is {SOURCE_MAX_EPOCH})");
                    assert!(
                        second.log.iter().any(|l| l.contains(&refused_metadata)),
                        "{:?}",
                        second.log
                    );
                }
                (false, Client::Librdkafka) => {
                    // Reset: OffsetForLeaderEpoch(7) finds no such epoch, so the position is "truncated" and
                    // auto.offset.reset=earliest re-reads everything the group had already consumed.
                    assert!(second.rewound(), "{second:?}");
                    assert_eq!(second.offsets(), (0..RECORDS).collect::<Vec<_>>());
                    assert!(
                        second.log.iter().any(|l| l.contains("log truncation detected")),
                        "{:?}",
                        second.log
                    );
                }
            }
            evidence.push(format!(
                "{client:?} {topic}: resumed from {:?} -> read {} record(s) starting at {:?}, timed out {}",
                second.committed_before,
                second.records.len(),
                second.records.first().map(|r| r.0),
                second.timed_out
            ));
        }
    }

    // New writes continue at the mirror's end, stamped with the broker's epoch.
    for topic in [raw, promoted, handed] {
        let records = (0..3)
            .map(|i| OutRecord {
                partition: Some(0),
                key: Some(format!("new-{i}").into_bytes()),
                value: Some(b"after promotion".to_vec()),
                headers: vec![],
                timestamp: Some(now_ms()),
            })
            .collect();
        let acked = python_produce(&bootstrap, &ProducePlan::new(topic).step(ProduceStep::Send(records))).unwrap();
        assert_eq!(
            acked.iter().map(|r| r.offset).collect::<Vec<_>>(),
            [RECORDS, RECORDS + 1, RECORDS + 2]
        );
    }
    let broker_log = std::fs::read_to_string(target.log_file()).unwrap();
    assert!(
        broker_log.contains(&format!("[LeaderEpochCache {raw}-0] New epoch entry")),
        "the plain copy's epoch cache is truncated"
    );
    assert!(
        !broker_log.contains(&format!("[LeaderEpochCache {promoted}-0] New epoch entry")),
        "the promoted cache is consistent"
    );

    // A clean restart serves old and new records.
    target.stop().unwrap();
    target.restart().unwrap();
    let after = consume_topics(&target.bootstrap(), &[promoted, handed], Isolation::ReadCommitted).unwrap();
    for (topic, want) in [(promoted, &expected), (handed, &expected_handed)] {
        assert_eq!(&after[topic][..RECORDS as usize], want.as_slice(), "{topic}");
        assert_eq!(after[topic].len(), RECORDS as usize + 3, "{topic}");
    }

    // The alternative to restamping: raise the target epoch to the source's. Each clean restart of this single
    // node bumps it by two (no leader while stopped, a new leader at start); once it reaches 7 the stuck Java
    // group resumes. A real source's epochs grow with every election over years, so this does not scale.
    let mut restarts = 1;
    while leader_epoch_from_log(&target, raw, 0).unwrap() < SOURCE_MAX_EPOCH {
        target.stop().unwrap();
        target.restart().unwrap();
        restarts += 1;
    }
    let raised = leader_epoch_from_log(&target, raw, 0).unwrap();
    let java_group = format!("{:?}-{raw}", Client::Java);
    let unstuck = session(install, Client::Java, &probe(&bootstrap, raw, &java_group, 1000, 30));
    assert_eq!(
        unstuck.offsets(),
        (FIRST_SESSION as i64..RECORDS + 3).collect::<Vec<_>>(),
        "{unstuck:?}"
    );
    target.stop().unwrap();
    eprintln!(
        "leader epochs: source epochs up to {SOURCE_MAX_EPOCH}, target epoch {leader_epoch} (restamped to \
         {target_epoch}).\n  {}\n  raising the target epoch took {restarts} restart(s) (epoch {raised}) before the Java \
         group resumed",
        evidence.join("\n  ")
    );
}

/// Target-side configs of a shape topic: the source's, minus what would make the target broker change the promoted
/// data on its own before the test reads it (retention by size, and compaction of records the source had not
/// compacted yet: the target's cleaner starts without a checkpoint and would clean the whole log again). The small
/// segment size is set with the target version's key.
fn target_spec(topic: &ShapeTopic, target: &KafkaInstall) -> TopicSpec {
    let mut spec = TopicSpec::new(&topic.name, topic.partitions);
    for (k, v) in &topic.configs {
        match k.as_str() {
            "retention.bytes" | "min.cleanable.dirty.ratio" | "segment.ms" => {}
            "internal.segment.bytes" | "segment.bytes" => spec = spec.config(target.segment_bytes_config(), v),
            "min.compaction.lag.ms" => spec = spec.config(k, 24 * 3_600_000),
            _ => spec = spec.config(k, v),
        }
    }
    spec
}

#[test]
fn every_shape_seeded_through_s3_applied_and_promoted_reads_back_identically() {
    promote_through_s3(None, None, &Shape::all());
}

/// The Kafka 3.x version installed for the cross-version tests (`tests/kafka/kafka-compat.versions`).
fn kafka_3() -> &'static str {
    segmirror_tests::install::compat_kafka_versions()
        .into_iter()
        .find(|v| v.starts_with("3."))
        .expect("tests/kafka/kafka-compat.versions lists a Kafka 3.x version")
}

/// The shapes of the cross-version runs: uncompressed idempotent, compressed (producer-side zstd), transactional
/// with aborts, and retention-trimmed (a log start offset above zero, mid-segment on partition 1); every one with two
/// partitions of several segments.
const CROSS_VERSION_SHAPES: [Shape; 4] = [
    Shape::Idempotent,
    Shape::Codec(shapes::Codec::Zstd),
    Shape::Transactions,
    Shape::Retention,
];

#[test]
fn kafka_3_9_source_promoted_into_a_kafka_4_4_target() {
    promote_through_s3(Some(kafka_3()), None, &CROSS_VERSION_SHAPES);
}

#[test]
fn kafka_4_4_source_promoted_into_a_kafka_3_9_target() {
    promote_through_s3(None, Some(kafka_3()), &CROSS_VERSION_SHAPES);
}

/// A broker config of the given Kafka version (`None`: the pinned default).
fn broker_config(name: &str, version: Option<&str>) -> BrokerConfig {
    match version {
        Some(v) => BrokerConfig::new(name).kafka_version(v),
        None => BrokerConfig::new(name),
    }
}

/// Source broker (of `source_version`) with `shape_list` → `seed` into moto S3 → `apply` → `promote` into a stopped
/// target broker (of `target_version`) → consumers, new writes, a clean restart.
fn promote_through_s3(source_version: Option<&str>, target_version: Option<&str>, shape_list: &[Shape]) {
    // The source: the shapes, read back by a real consumer at both isolation levels, then stopped cleanly.
    let mut source = KafkaBroker::start(broker_config("e2e-source", source_version)).unwrap();
    eprintln!(
        "promote through S3: source Kafka {}, target Kafka {}, {} shape(s)",
        source.install().version,
        target_version.unwrap_or(segmirror_tests::install::pinned_kafka_version()),
        shape_list.len()
    );
    let shapes = produce_shapes(&source, shape_list, &ShapeOptions::default()).unwrap();
    let names: Vec<&str> = shapes.iter().map(|t| t.name.as_str()).collect();
    let mut source_records = BTreeMap::new();
    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let mut read = consume_topics(&source.bootstrap(), &names, isolation).unwrap();
        for topic in &shapes {
            let got = read.remove(&topic.name).unwrap();
            if let Some(expected) = topic.expected(isolation) {
                assert_eq!(got, expected, "{} {isolation:?} on the source", topic.name);
            }
            source_records.insert((topic.name.clone(), isolation == Isolation::ReadCommitted), got);
        }
    }
    source.stop().unwrap();

    // Seed into a real S3-compatible server, apply into a mirror.
    let s3 = MotoServer::start().unwrap();
    let env = s3.env();
    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = (work.path().join("mirror"), work.path().join("catalog.sqlite"));
    let store = s3.store_url("e2e");
    let source_log_dir = source.log_dir().to_string_lossy().into_owned();
    let seed = run_segmirror_env(
        [
            "seed",
            "--log-dir",
            &source_log_dir,
            "--store",
            &store,
            "--link",
            "e2e",
            "--allow-http",
        ],
        &env,
    )
    .unwrap();
    assert_eq!(seed.code, 0, "{seed}");
    let mirror_arg = mirror.to_string_lossy().into_owned();
    let catalog_arg = catalog.to_string_lossy().into_owned();
    let apply = run_segmirror_env(
        [
            "apply",
            "--store",
            &store,
            "--mirror",
            &mirror_arg,
            "--catalog",
            &catalog_arg,
            "--link",
            "e2e",
            "--allow-http",
        ],
        &env,
    )
    .unwrap();
    assert_eq!(apply.code, 0, "{apply}");
    // The mirror holds the source's data byte for byte. A segment the log cleaner emptied (a 0-byte `.log`: every
    // record in it was superseded, and no later cleaning pass merged it into a neighbour) has no records to
    // install: seed ships it as an empty version and apply skips it, so only the source's non-empty `.log` files
    // have a mirror copy. Whether the cleaner's last pass leaves such segments depends on its timing.
    for topic in &shapes {
        for p in 0..topic.partitions {
            let name = format!("{}-{p}", topic.name);
            let source_dir = source.log_dir().join(&name);
            let logs = assert_same_files(&source_dir, &mirror.join(&name), |rel| {
                rel.extension().is_some_and(|e| e == "log")
                    && std::fs::metadata(source_dir.join(rel)).map_or(true, |m| m.len() > 0)
            })
            .unwrap();
            assert!(logs > 0, "{name}");
        }
    }

    // The target cluster: the same topics and partition counts (new topic ids), stopped for the promotion.
    let mut target = KafkaBroker::start(broker_config("e2e-target", target_version)).unwrap();
    let specs: Vec<TopicSpec> = shapes.iter().map(|t| target_spec(t, target.install())).collect();
    let target_ids = admin(&target.bootstrap(), &specs, &names).unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(&mirror, target.log_dir(), &catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    let mut ends = BTreeMap::new();
    for p in report["partitions"].as_array().unwrap() {
        let topic = p["topic"].as_str().unwrap().to_string();
        assert_eq!(p["outcome"], "promoted", "{p}");
        assert_eq!(p["target_topic_id"], target_ids[&topic].topic_id.as_str(), "{p}");
        ends.insert(
            (topic, p["partition"].as_i64().unwrap() as i32),
            p["log_end_offset"].as_i64().unwrap(),
        );
    }
    assert_eq!(ends.len(), shapes.iter().map(|t| t.partitions as usize).sum::<usize>());
    // Promoting again changes nothing.
    let again = segmirror_promote(&mirror, target.log_dir(), &catalog, &["--json"]).unwrap();
    assert_eq!(again.code, 0, "{again}");
    assert!(again.json().unwrap()["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["outcome"] == "already_promoted"));

    // Every record, as the source served it: offset, timestamp and its type, key, value, headers; aborted
    // transactions hidden under read_committed.
    target.restart().unwrap();
    let bootstrap = target.bootstrap();
    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let read = consume_topics(&bootstrap, &names, isolation).unwrap();
        for topic in &shapes {
            let want = &source_records[&(topic.name.clone(), isolation == Isolation::ReadCommitted)];
            assert_eq!(&read[&topic.name], want, "{} {isolation:?} on the target", topic.name);
        }
    }
    if shape_list.contains(&Shape::Transactions) {
        let committed = source_records[&("shape-transactions".to_string(), true)].len();
        let uncommitted = source_records[&("shape-transactions".to_string(), false)].len();
        assert!(committed < uncommitted, "the transactions shape has aborted records");
    }
    // Several segments per partition: what the test is about, not an accident of sizes.
    for topic in &shapes {
        for p in 0..topic.partitions {
            let name = format!("{}-{p}", topic.name);
            let segments = segment_base_offsets(&target.log_dir().join(&name)).unwrap();
            assert!(segments.len() > 1, "{name} on the target has {segments:?}");
        }
    }

    // New records continue at the mirror's end offset in every partition.
    let mut appended: BTreeMap<String, Vec<Record>> = BTreeMap::new();
    for topic in &shapes {
        let records = (0..topic.partitions)
            .map(|p| OutRecord {
                partition: Some(p),
                key: Some(format!("after-promotion-{p}").into_bytes()),
                value: Some(b"written on the target".to_vec()),
                headers: vec![Header {
                    key: "origin".into(),
                    value: Some(b"target".to_vec()),
                }],
                timestamp: Some(now_ms()),
            })
            .collect();
        let plan = ProducePlan::new(&topic.name)
            .config("acks", "all")
            .step(ProduceStep::Send(records));
        for r in python_produce(&bootstrap, &plan).unwrap() {
            assert_eq!(
                r.offset,
                ends[&(topic.name.clone(), r.partition)],
                "{} partition {}",
                topic.name,
                r.partition
            );
            appended.entry(topic.name.clone()).or_default().push(r);
        }
    }

    // A clean restart: the broker loads without recovery and serves old and new records.
    target.stop().unwrap();
    target.restart().unwrap();
    let read = consume_topics(&target.bootstrap(), &names, Isolation::ReadUncommitted).unwrap();
    for topic in &shapes {
        let got = &read[&topic.name];
        let mut want = source_records[&(topic.name.clone(), false)].clone();
        want.extend(appended[&topic.name].iter().cloned());
        want.sort_by_key(|r| (r.partition, r.offset));
        assert_eq!(got, &want, "{} after a restart", topic.name);
    }
    let log = std::fs::read_to_string(target.log_file()).unwrap();
    assert!(
        !log.contains("caused truncation of conflicting entries"),
        "promoted epoch caches are consistent"
    );
    assert!(!log.contains("Found invalid"), "no recovery found anything to fix");
    // Whatever the two versions: the target has nothing to say about the promoted partitions.
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains("shape-"))
        .collect();
    assert!(
        complaints.is_empty(),
        "Kafka {} warns about promoted partitions:\n{}",
        target.install().version,
        complaints.join("\n")
    );
    target.stop().unwrap();
}
