//! Producer state and open transactions at promotion, against real Kafka brokers.
//!
//! A running source broker: idempotent producers that take producer ids the target cluster will hand out again,
//! committed transactions, and a transaction left **open** while `segmirror seed` reads the live log dir (on a
//! partition of one segment and on one of many small segments), aborted on the source afterwards. The mirror is
//! promoted into a stopped target broker. Then:
//! - promote reports the cut (producer id, first offset, records) and the promoted partitions are sound for
//!   `segmirror verify` and for Kafka's `DumpLogSegments --deep-iteration` (the ABORT markers are real markers);
//! - after a clean start and an unclean (SIGKILL) restart, `read_committed` shows none of the open transaction's
//!   records (exactly what the source shows after its abort), and a new committed transactional write becomes
//!   visible at once (the last stable offset moves);
//! - the target's first idempotent producers — whose ids the source used — each write once, after the source's
//!   records; again after a SIGKILL restart with target writes in the active segment; and the broker never
//!   replays a source segment to rebuild producer state.
//!
//! [`a_tail_fed_cut_before_two_commits_of_its_producer_promotes_as_the_walk`]: a tail-fed mirror of a real broker cut
//! before two commits of one producer: decided by the appender's closed log, the walk's partition, served by the
//! target.
//!
//! [`keeping_the_source_producer_state_loses_new_writes`] is the experiment behind the decision: the same
//! source-like partition copied with its producer snapshot (what promotion did before) and promoted, on a fresh
//! target cluster whose producer ids start at 0 again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::str::FromStr;

use segment_format::batch::ControlType;
use segment_format::checkpoint::{OffsetCheckpoint, OffsetCheckpointEntry};
use segment_format::dir::{
    PARTITION_METADATA_FILE, RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};
use segmirror_tests::dump::dump_deep;
use segmirror_tests::mirror::{
    assert_same_files, copy_catalog, files_under, record_writer_mirror, run_segmirror_env, segmirror_promote,
    segmirror_promote_env,
};
use segmirror_tests::segmirror_cli::segmirror_verify;
use segmirror_tests::service::direct_link;
use segmirror_tests::*;

/// The source's idempotent producers: twice the number the target starts after each (re)start, so that every
/// target producer id below this was also a source producer id.
const SOURCE_PRODUCERS: usize = 6;
/// Idempotent producers the target starts after each start.
const TARGET_PRODUCERS: usize = 3;
/// Records each source idempotent producer writes (so its sequence numbers are far from a new producer's).
const RECORDS_PER_SOURCE_PRODUCER: usize = 5;
const IDEM: &str = "idem";
/// One segment; the open transaction in it.
const TXN_ONE: &str = "txn-one";
/// Many small segments; the open transaction spans several.
const TXN_MANY: &str = "txn-many";
/// Records of the open transaction per partition.
const OPEN_RECORDS: [(&str, usize); 2] = [(TXN_ONE, 5), (TXN_MANY, 40)];
/// `internal.segment.bytes` of `TXN_MANY` (small, as the harness's shapes use).
const SMALL_SEGMENT_BYTES: u32 = 1024;
/// Promoted on its own with `--consistent-cut` (two partitions; the open transaction also writes partition 0).
const CUT: &str = "cut";
/// Records of the open transaction in `CUT` partition 0.
const CUT_OPEN_RECORDS: usize = 3;

fn record(value: String) -> OutRecord {
    record_to(0, value)
}

fn record_to(partition: i32, value: String) -> OutRecord {
    OutRecord {
        partition: Some(partition),
        key: None,
        value: Some(value.into_bytes()),
        headers: vec![],
        timestamp: None,
    }
}

fn topic_specs() -> Vec<TopicSpec> {
    vec![
        TopicSpec::new(IDEM, 1),
        TopicSpec::new(TXN_ONE, 1),
        TopicSpec::new(TXN_MANY, 1).config("internal.segment.bytes", SMALL_SEGMENT_BYTES),
        TopicSpec::new(CUT, 2),
    ]
}

/// One new idempotent producer per value, each writing one record; returns the acknowledged offsets.
fn idempotent_writes(bootstrap: &str, topic: &str, values: &[String]) -> Vec<i64> {
    values
        .iter()
        .map(|v| {
            let plan = ProducePlan::new(topic)
                .config("enable.idempotence", "true")
                .config("acks", "all")
                .step(ProduceStep::Send(vec![record(v.clone())]));
            let acked = python_produce(bootstrap, &plan).unwrap();
            assert_eq!(acked.len(), 1);
            acked[0].offset
        })
        .collect()
}

/// A committed transaction of `values` on `topic`, by a producer with `transactional_id`.
fn committed_transaction(bootstrap: &str, topic: &str, transactional_id: &str, values: &[String]) -> Vec<Record> {
    let plan = ProducePlan::new(topic)
        .config("transactional.id", transactional_id)
        .step(ProduceStep::InitTransactions)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(values.iter().cloned().map(record).collect()))
        .step(ProduceStep::CommitTransaction);
    python_produce(bootstrap, &plan).unwrap()
}

fn values(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap_or_default()).unwrap())
        .collect()
}

/// One row of `kafka-transactions.sh describe-producers`: the broker's producer state for a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerRow {
    producer_id: i64,
    epoch: i64,
    last_sequence: i64,
    current_txn_start: Option<i64>,
}

fn describe_producers(bootstrap: &str, topic: &str) -> Vec<ProducerRow> {
    let tools = KafkaTools::new(KafkaInstall::locate().unwrap(), bootstrap);
    let args = [
        "--bootstrap-server",
        bootstrap,
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
    ]
    .map(String::from);
    let out = tools.run("org.apache.kafka.tools.TransactionsCommand", &args).unwrap();
    let mut rows: Vec<ProducerRow> = out
        .lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            Some(ProducerRow {
                producer_id: t.first()?.parse().ok()?,
                epoch: t.get(1)?.parse().ok()?,
                last_sequence: t.get(3)?.parse().ok()?,
                current_txn_start: t.get(5)?.parse().ok(),
            })
        })
        .collect();
    rows.sort_by_key(|r| r.producer_id);
    rows
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs
}

#[test]
fn promoted_partitions_start_with_no_producer_state_and_no_open_transaction() {
    // The source, running throughout the seed.
    let mut source = KafkaBroker::start(BrokerConfig::new("producers-source")).unwrap();
    let sb = source.bootstrap();
    let names = [IDEM, TXN_ONE, TXN_MANY];
    admin(&sb, &topic_specs(), &[IDEM, TXN_ONE, TXN_MANY, CUT]).unwrap();
    for p in 0..SOURCE_PRODUCERS {
        let plan = ProducePlan::new(IDEM)
            .config("enable.idempotence", "true")
            .config("acks", "all")
            .step(ProduceStep::Send(
                (0..RECORDS_PER_SOURCE_PRODUCER)
                    .map(|i| record(format!("source-{p}-{i}")))
                    .collect(),
            ));
        python_produce(&sb, &plan).unwrap();
    }
    for (topic, _) in OPEN_RECORDS {
        committed_transaction(
            &sb,
            topic,
            "committed-on-source",
            &["committed-0".into(), "committed-1".into()],
        );
    }
    let cut_before = |p: i32| {
        (0..3)
            .map(|i| record_to(p, format!("before-{p}-{i}")))
            .collect::<Vec<_>>()
    };
    for p in 0..2 {
        python_produce(&sb, &ProducePlan::new(CUT).step(ProduceStep::Send(cut_before(p)))).unwrap();
    }
    let sends: Vec<(&str, i32, usize)> = OPEN_RECORDS
        .iter()
        .chain(&[(CUT, CUT_OPEN_RECORDS)])
        .map(|(topic, count)| (*topic, 0, *count))
        .collect();
    let open = OpenTransaction::start(&sb, "left-open", &sends);
    // Plain records after the open transaction's: beyond the source's last stable offset while it is open.
    for (topic, _) in OPEN_RECORDS {
        let plan = ProducePlan::new(topic).step(ProduceStep::Send(vec![record("after-open".into())]));
        python_produce(&sb, &plan).unwrap();
    }
    // The consistent cut's moment: after `CUT`'s first records and the open transaction's, before its last ones
    // (CreateTime: the producer's clock, this machine's). Partition 1 then gets a record stamped before the cut:
    // after a newer one, it is left behind too (the promoted log stays a prefix).
    std::thread::sleep(std::time::Duration::from_millis(50));
    let cut_at = segment_format::now_ms();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut cut_first_left = BTreeMap::new();
    for p in 0..2 {
        let late = python_produce(
            &sb,
            &ProducePlan::new(CUT).step(ProduceStep::Send(vec![record_to(p, format!("late-{p}"))])),
        )
        .unwrap();
        cut_first_left.insert(p, late[0].offset);
    }
    let old = OutRecord {
        timestamp: Some(cut_at - 60_000),
        ..record_to(1, "late-but-stamped-earlier".into())
    };
    python_produce(&sb, &ProducePlan::new(CUT).step(ProduceStep::Send(vec![old]))).unwrap();
    let many_segments = log_files(&source.partition_dir(TXN_MANY, 0)).len();
    assert!(many_segments >= 4, "{TXN_MANY} has {many_segments} segments");
    assert_eq!(log_files(&source.partition_dir(TXN_ONE, 0)).len(), 1);

    let work = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (store, mirror, catalog) = (
        work.path().join("store"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    std::fs::create_dir_all(&store).unwrap();
    let seed = run_segmirror_env(
        [
            "seed",
            "--log-dir",
            &s(source.log_dir()),
            "--store",
            &s(&store),
            "--link",
            "p",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(seed.code, 0, "{seed}");
    let apply = run_segmirror_env(
        [
            "apply",
            "--store",
            &s(&store),
            "--mirror",
            &s(&mirror),
            "--catalog",
            &s(&catalog),
            "--link",
            "p",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(apply.code, 0, "{apply}");

    // The source decides: abort. What a read_committed consumer of the source now sees is the truth.
    open.abort();
    let mut read = consume_topics(&sb, &names, Isolation::ReadCommitted).unwrap();
    let on_source: BTreeMap<&str, Vec<Record>> = names.iter().map(|t| (*t, read.remove(*t).unwrap())).collect();
    for (topic, _) in OPEN_RECORDS {
        let v = values(&on_source[topic]);
        assert!(!v.iter().any(|v| v.starts_with("open-")), "{topic}: {v:?}");
        assert!(v.contains(&"after-open".to_string()));
    }
    // The source's idempotent producers, as its broker holds them: distinct ids, sequences up to 4.
    let source_producers = describe_producers(&sb, IDEM);
    assert_eq!(source_producers.len(), SOURCE_PRODUCERS, "{source_producers:?}");
    assert!(source_producers
        .iter()
        .all(|r| r.last_sequence == RECORDS_PER_SOURCE_PRODUCER as i64 - 1));
    let source_ids: Vec<i64> = source_producers.iter().map(|r| r.producer_id).collect();
    eprintln!("source producers of {IDEM}: {source_producers:?}");
    let cut_on_source = consume_all(&sb, CUT, None, Isolation::ReadUncommitted).unwrap();
    source.stop().unwrap();

    // The target: same topics, stopped, promoted.
    let mut target = KafkaBroker::start(BrokerConfig::new("producers-target")).unwrap();
    admin(&target.bootstrap(), &topic_specs(), &names).unwrap();
    target.stop().unwrap();
    let cut_ends = promote_with_a_consistent_cut(&mirror, target.log_dir(), &catalog, cut_at, &cut_first_left);
    let promote = segmirror_promote(
        &mirror,
        target.log_dir(),
        &catalog,
        &["--json", "--topics", "idem|txn-.*"],
    )
    .unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    let mut ends = BTreeMap::new();
    for p in report["partitions"].as_array().unwrap() {
        let topic = p["topic"].as_str().unwrap().to_string();
        let cut = p["transactions_aborted"].as_array().unwrap();
        let end = p["log_end_offset"].as_i64().unwrap();
        match OPEN_RECORDS.iter().find(|(t, _)| *t == topic) {
            Some((_, records)) => {
                assert_eq!(cut.len(), 1, "{p}");
                assert_eq!(cut[0]["records"], *records as u64, "{p}");
                assert_eq!(cut[0]["marker_offset"].as_i64(), Some(end - 1), "{p}");
                // The open transaction began after the committed one (2 records and its marker).
                assert_eq!(cut[0]["first_offset"], 3, "{p}");
            }
            None => assert!(cut.is_empty(), "{p}"),
        }
        ends.insert(topic, end);
    }
    assert_eq!(ends.len(), 3);
    let idem_end = ends[IDEM];
    assert_eq!(idem_end, (SOURCE_PRODUCERS * RECORDS_PER_SOURCE_PRODUCER) as i64);

    // Sound for segmirror's verify and for Kafka's own deep dump; the markers are real ABORT markers.
    let dirs: Vec<PathBuf> = names.iter().map(|t| target.partition_dir(t, 0)).collect();
    let verify = segmirror_verify(
        &dirs.iter().map(|d| d.as_path()).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    // Every segment file, indexes and snapshots included: DumpLogSegments checks each index against its log.
    let files: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| ["log", "index", "timeindex", "txnindex", "snapshot"].contains(&e.to_str().unwrap()))
        })
        .collect();
    let (dumped, out) = dump_deep(target.install(), &files).unwrap();
    // DumpLogSegments starts every file at "previous offset -1": `-1 is followed by <base>` is not a gap.
    let complaints: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.starts_with("Non-consecutive offsets in ") && !l.trim().starts_with("-1 is followed by "))
        .collect();
    assert!(complaints.is_empty(), "DumpLogSegments complained:\n{}", out.stderr);
    let txn_dump: Vec<&String> = dumped
        .values()
        .flat_map(|f| &f.other_lines)
        .filter(|l| l.contains("producerId"))
        .collect();
    eprintln!("DumpLogSegments, transaction index and snapshot lines: {txn_dump:#?}");
    for (topic, _) in OPEN_RECORDS {
        let marker_offset = ends[topic] - 1;
        let marker = dumped
            .iter()
            .filter(|(path, _)| path.starts_with(target.partition_dir(topic, 0)))
            .flat_map(|(_, f)| &f.batches)
            .find(|b| b.base_offset == marker_offset)
            .unwrap_or_else(|| panic!("{topic}: no batch at {marker_offset}"));
        assert!(
            marker.is_control && marker.is_transactional && marker.is_valid,
            "{marker:?}"
        );
        assert_eq!(marker.records[0].end_txn_marker.as_deref(), Some("ABORT"), "{marker:?}");
    }

    // A clean start, then an unclean one before any write.
    target.restart().unwrap();
    target.kill().unwrap();
    target.restart().unwrap();
    let tb = target.bootstrap();
    let check_committed = |bootstrap: &str, extra: &BTreeMap<&str, Vec<Record>>| {
        let read = consume_topics(bootstrap, &OPEN_RECORDS.map(|(t, _)| t), Isolation::ReadCommitted).unwrap();
        for (topic, _) in OPEN_RECORDS {
            let got = &read[topic];
            let mut want = on_source[topic].clone();
            want.extend(extra.get(topic).cloned().unwrap_or_default());
            assert_eq!(values(got), values(&want), "{topic} read_committed on the target");
            assert_eq!(
                got.iter().map(|r| r.offset).collect::<Vec<_>>(),
                want.iter().map(|r| r.offset).collect::<Vec<_>>(),
                "{topic}"
            );
        }
    };
    check_committed(&tb, &BTreeMap::new());
    check_consistent_cut(&tb, cut_at, &cut_on_source, &cut_first_left, &cut_ends);
    // No producer state of the source's, no open transaction.
    for topic in names {
        assert_eq!(describe_producers(&tb, topic), vec![], "{topic}");
    }

    // A new committed transaction on the target is visible to read_committed at once: the LSO moves.
    let mut new_txn = BTreeMap::new();
    for (topic, _) in OPEN_RECORDS {
        let acked = committed_transaction(&tb, topic, "committed-on-target", &["target-txn-0".into()]);
        assert_eq!(acked[0].offset, ends[topic], "{topic}: right after the abort marker");
        new_txn.insert(topic, acked);
    }
    check_committed(&tb, &new_txn);

    // The target's first idempotent producers reuse the source's producer ids: every write is stored once, after
    // the source's records.
    let first: Vec<String> = (0..TARGET_PRODUCERS).map(|i| format!("target-a-{i}")).collect();
    let offsets = idempotent_writes(&tb, IDEM, &first);
    assert_eq!(
        offsets,
        (idem_end..idem_end + TARGET_PRODUCERS as i64).collect::<Vec<_>>()
    );
    let check_idem = |bootstrap: &str, written: &[String]| {
        let got = consume_all(bootstrap, IDEM, None, Isolation::ReadUncommitted).unwrap();
        let mut want = values(&on_source[IDEM]);
        want.extend(written.iter().cloned());
        assert_eq!(values(&got), want, "{IDEM} on the target");
        let end = KafkaTools::new(target_install(), bootstrap).end_offsets(IDEM).unwrap();
        assert_eq!(end[&0], idem_end + written.len() as i64);
    };
    check_idem(&tb, &first);
    // They did take ids the source had used: the broker now knows each with its single record's sequence 0.
    let target_producers = describe_producers(&tb, IDEM);
    eprintln!("target producers of {IDEM}: {target_producers:?}");
    assert_eq!(target_producers.len(), TARGET_PRODUCERS, "{target_producers:?}");
    for r in &target_producers {
        assert!(
            source_ids.contains(&r.producer_id),
            "{r:?} is not one of the source's {source_ids:?}"
        );
        assert_eq!((r.last_sequence, r.current_txn_start), (0, None), "{r:?}");
    }

    // An unclean restart with target writes in the active segment: the broker recovers only that segment, from
    // the empty snapshot, and never replays the source's.
    target.kill().unwrap();
    target.restart().unwrap();
    let tb = target.bootstrap();
    check_idem(&tb, &first);
    assert_eq!(
        describe_producers(&tb, IDEM),
        target_producers,
        "the same state after the unclean restart"
    );
    let second: Vec<String> = (0..TARGET_PRODUCERS).map(|i| format!("target-b-{i}")).collect();
    let offsets = idempotent_writes(&tb, IDEM, &second);
    let after = idem_end + TARGET_PRODUCERS as i64;
    assert_eq!(offsets, (after..after + TARGET_PRODUCERS as i64).collect::<Vec<_>>());
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    check_idem(&tb, &all);
    check_committed(&tb, &new_txn);
    let log = std::fs::read_to_string(target.log_file()).unwrap();
    for topic in names {
        let needle = "Recovering unflushed segment ";
        let recovered: Vec<i64> = log
            .lines()
            .filter(|l| l.contains(&format!("for {topic}-0")))
            .filter_map(|l| l.split(needle).nth(1))
            .map(|rest| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(
            !recovered.is_empty() || topic != IDEM,
            "{IDEM}: the unclean restarts recovered nothing"
        );
        let replayed: Vec<&i64> = recovered.iter().filter(|base| **base < ends[topic]).collect();
        assert!(
            replayed.is_empty(),
            "{topic}: a promoted segment was recovered: {replayed:?}"
        );
    }
    target.stop().unwrap();
}

/// `promote --topics cut --consistent-cut T`: each partition of `CUT` cut at its first record produced after T,
/// partition 0's open transaction aborted at the cut; returns each partition's promoted end (after the marker).
fn promote_with_a_consistent_cut(
    mirror: &Path,
    log_dir: &Path,
    catalog: &Path,
    cut_at: i64,
    first_left: &BTreeMap<i32, i64>,
) -> BTreeMap<i32, i64> {
    let at = cut_at.to_string();
    let run = segmirror_promote(
        mirror,
        log_dir,
        catalog,
        &["--json", "--topics", CUT, "--consistent-cut", &at],
    )
    .unwrap();
    assert_eq!(run.code, 0, "{run}");
    let report = run.json().unwrap();
    let mut ends = BTreeMap::new();
    for p in report["partitions"].as_array().unwrap() {
        assert_eq!(p["topic"], CUT, "{p}");
        let partition = p["partition"].as_i64().unwrap() as i32;
        let c = &p["consistent_cut"];
        let cut_offset = first_left[&partition];
        assert_eq!(c["timestamp_ms"], cut_at, "{p}");
        assert_eq!(c["cut_offset"], cut_offset, "{p}");
        assert_eq!(c["first_left_offset"], cut_offset, "{p}");
        assert!(c["first_left_timestamp"].as_i64().unwrap() > cut_at, "{p}");
        // Partition 1 also leaves the record stamped before the cut that came after the newer one.
        let left = if partition == 1 { 2 } else { 1 };
        assert_eq!(c["left_offsets"], left, "{p}");
        assert_eq!(p["mirror_end_offset"], cut_offset + left, "{p}");
        let aborted = p["transactions_aborted"].as_array().unwrap();
        let end = p["log_end_offset"].as_i64().unwrap();
        if partition == 0 {
            assert_eq!(aborted.len(), 1, "{p}");
            assert_eq!(aborted[0]["records"], CUT_OPEN_RECORDS as u64, "{p}");
            assert_eq!(aborted[0]["marker_offset"], cut_offset, "{p}");
            assert_eq!(end, cut_offset + 1, "{p}");
        } else {
            assert!(aborted.is_empty(), "{p}");
            assert_eq!(end, cut_offset, "{p}");
        }
        ends.insert(partition, end);
    }
    assert_eq!(ends.len(), 2, "{report}");
    ends
}

/// On the started target: a `read_committed` consumer of `CUT` gets every source record up to the cut except the
/// aborted open transaction's, none newer than T, and is not held back by the transaction; a new transactional
/// producer commits right after the marker and is read.
fn check_consistent_cut(
    bootstrap: &str,
    cut_at: i64,
    on_source: &[Record],
    first_left: &BTreeMap<i32, i64>,
    ends: &BTreeMap<i32, i64>,
) {
    let got = consume_all(bootstrap, CUT, None, Isolation::ReadCommitted).unwrap();
    let want: Vec<&Record> = on_source
        .iter()
        .filter(|r| r.offset < first_left[&r.partition])
        .filter(|r| !r.value.as_deref().unwrap_or_default().starts_with(b"open"))
        .collect();
    let key = |r: &Record| (r.partition, r.offset, r.value.clone(), r.timestamp);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(|r| key(r)).collect::<Vec<_>>(),
        "{CUT} read_committed on the target"
    );
    assert!(got.iter().all(|r| r.timestamp <= cut_at), "{got:?}");
    let uncommitted = consume_all(bootstrap, CUT, None, Isolation::ReadUncommitted).unwrap();
    assert!(uncommitted.iter().all(|r| r.timestamp <= cut_at), "{uncommitted:?}");
    assert_eq!(
        uncommitted
            .iter()
            .filter(|r| r.value.as_deref().unwrap_or_default().starts_with(b"open"))
            .count(),
        CUT_OPEN_RECORDS
    );
    let acked = committed_transaction(bootstrap, CUT, "after-the-cut", &["target-after-cut".into()]);
    assert_eq!(acked[0].offset, ends[&0], "right after the abort marker");
    let got = consume_all(bootstrap, CUT, Some(&[0]), Isolation::ReadCommitted).unwrap();
    assert_eq!(
        got.last().map(|r| r.value.clone()),
        Some(Some(b"target-after-cut".to_vec()))
    );
}

fn target_install() -> &'static KafkaInstall {
    KafkaInstall::locate().unwrap()
}

/// Source producers of the writer-made partition: ids 0.. on the source, as a fresh target cluster hands them out.
const WRITER_PRODUCERS: i64 = 9;
/// One-record batches of each odd source producer; each even one wrote a single one-record batch (sequence 0),
/// which a new producer's first batch duplicates exactly.
const WRITER_BATCHES: i32 = 5;
/// New producers on the promoted copy (ids 0..3, first) and on the kept copy (ids 3..9, then).
const PROMOTED_WRITES: usize = 3;
const KEPT_WRITES: usize = 6;

/// A partition as a source broker that served idempotent producers 0..WRITER_PRODUCERS leaves it at clean shutdown
/// (producer snapshot at the log end included).
fn write_idempotent_partition(root: &Path, topic: &str) -> WrittenPartition {
    let config = WriterConfig {
        fsync: false,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, topic, 0, 0, config).unwrap();
    w.become_leader(1);
    // Recent timestamps: the broker expires producers idle longer than `producer.id.expiration.ms` (1 day) at load.
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 60_000;
    for seq in 0..WRITER_BATCHES {
        for pid in (0..WRITER_PRODUCERS).filter(|pid| seq == 0 || pid % 2 == 1) {
            let base = w.next_offset();
            let batch = BatchBuilder::new(base)
                .partition_leader_epoch(1)
                .producer(pid, 0, seq)
                .record(RecordSpec::new(0, ts + base).with_value(format!("source-{pid}-{seq}")));
            w.append(batch).unwrap();
        }
    }
    w.close().unwrap()
}

fn set_checkpoint(path: &Path, topic: &str, offset: i64) {
    let mut cp = OffsetCheckpoint::read(path).unwrap();
    cp.entries.retain(|e| e.topic != topic);
    cp.entries.push(OffsetCheckpointEntry {
        topic: topic.to_string(),
        partition: 0,
        offset,
    });
    cp.write(path).unwrap();
}

#[test]
fn keeping_the_source_producer_state_loses_new_writes() {
    let (kept, promoted) = ("producers-kept", "producers-promoted");
    let mut target = KafkaBroker::start(BrokerConfig::new("producers-experiment")).unwrap();
    let specs = [TopicSpec::new(kept, 1), TopicSpec::new(promoted, 1)];
    let ids = admin(&target.bootstrap(), &specs, &[kept, promoted]).unwrap();
    target.stop().unwrap();

    let work = tempfile::tempdir().unwrap();
    let (plain_root, mirror, catalog) = (
        work.path().join("plain"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    let plain = write_idempotent_partition(&plain_root, kept);
    let written = write_idempotent_partition(&mirror, promoted);
    let end = written.log_end_offset;
    assert!(plain.snapshots.contains(&end), "{:?}", plain.snapshots);

    // The copy that keeps producer state: the source's files, snapshot included, under the target's topic id.
    let dst = target.partition_dir(kept, 0);
    std::fs::remove_dir_all(&dst).unwrap();
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(&plain.dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    PartitionMetadata::new(Uuid::from_str(&ids[kept].topic_id).unwrap())
        .write(&dst.join(PARTITION_METADATA_FILE))
        .unwrap();
    for file in [RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE] {
        set_checkpoint(&target.log_dir().join(file), kept, end);
    }
    // The promoted copy.
    record_writer_mirror(&catalog, "experiment", &written.topic_id.to_string(), &[(&written, 0)]).unwrap();
    let run = segmirror_promote(&mirror, target.log_dir(), &catalog, &[]).unwrap();
    assert_eq!(run.code, 0, "{run}");

    target.restart().unwrap();
    let tb = target.bootstrap();
    // New idempotent producers on each copy; the fresh target cluster hands out ids 0.. again, all of which the
    // source used.
    let mut outcomes = BTreeMap::new();
    for (topic, writes) in [(promoted, PROMOTED_WRITES), (kept, KEPT_WRITES)] {
        let mut acked = Vec::new();
        for i in 0..writes {
            let plan = ProducePlan::new(topic)
                .config("enable.idempotence", "true")
                .config("acks", "all")
                .step(ProduceStep::Send(vec![record(format!("target-{i}"))]));
            acked.push(
                python_produce(&tb, &plan)
                    .map(|r| r[0].offset)
                    .map_err(|e| format!("{e:#}")),
            );
        }
        let producers = describe_producers(&tb, topic);
        let stored: Vec<String> = values(&consume_all(&tb, topic, None, Isolation::ReadUncommitted).unwrap())
            .into_iter()
            .filter(|v| v.starts_with("target-"))
            .collect();
        eprintln!("{topic}: acknowledged {acked:?}, stored {stored:?}, producer state {producers:?}");
        outcomes.insert(topic, (acked, stored, producers));
    }
    // Promoted: every write stored once after the source's records, by producers whose ids the source used.
    let (acked, stored, producers) = &outcomes[promoted];
    assert_eq!(acked, &(end..end + 3).map(Ok).collect::<Vec<_>>());
    assert_eq!(stored, &["target-0", "target-1", "target-2"]);
    assert!(
        producers
            .iter()
            .all(|r| r.producer_id < WRITER_PRODUCERS && r.last_sequence == 0),
        "{producers:?}"
    );
    // Kept: the broker believes the source's producers. A new producer whose id matches a source producer that
    // wrote one batch gets its write acknowledged at the *source's* offset and dropped as a duplicate; one whose id
    // matches a producer that wrote more is refused (fatal OUT_OF_ORDER_SEQUENCE_NUMBER). Nothing is stored.
    let (acked, stored, producers) = &outcomes[kept];
    assert!(
        producers
            .iter()
            .any(|r| r.last_sequence == i64::from(WRITER_BATCHES) - 1),
        "the source's producer state is loaded: {producers:?}"
    );
    let duplicates = acked.iter().filter(|a| matches!(a, Ok(o) if *o < end)).count();
    let refused = acked
        .iter()
        .filter(|a| matches!(a, Err(e) if e.contains("out of order sequence")))
        .count();
    assert_eq!((duplicates, refused), (KEPT_WRITES / 2, KEPT_WRITES / 2), "{acked:?}");
    assert!(stored.is_empty(), "{stored:?}");
    target.stop().unwrap();
}

/// Topic of [`the_log_end_snapshot_travels_with_the_mirror_and_promotion_still_starts_empty`]: small segments, so
/// the partition has sealed segments before its active one.
const END_SNAP: &str = "end-snap";

/// `ship --upto log-end` → `apply --listen` of `source` into `mirror` until the mirror's `.log` files are the
/// source's, then both stopped: the records on the source, read uncommitted.
fn tail(mirror: &Path, catalog: &Path, source: &KafkaBroker) -> Vec<Record> {
    let (mut applier, shipper) = direct_link(mirror, catalog, source.log_dir(), "tc", &[]);
    let (source_dir, mirror_dir) = (source.partition_dir(TAIL_CUT, 0), mirror.join(format!("{TAIL_CUT}-0")));
    let logs = |dir: &Path| -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|(rel, _)| rel.extension().is_some_and(|e| e == "log"))
            .map(|(rel, path)| (rel, std::fs::read(path).unwrap_or_default()))
            .collect()
    };
    let start = std::time::Instant::now();
    while logs(&source_dir) != logs(&mirror_dir) {
        applier.assert_running();
        assert!(
            start.elapsed().as_secs() < 120,
            "the mirror never caught up:\n{}",
            applier.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{log}");
    consume_all(&source.bootstrap(), TAIL_CUT, None, Isolation::ReadUncommitted).unwrap()
}

/// `seed` the log dir, then `apply` it into the mirror.
fn seed_and_apply(log_dir: &Path, store: &Path, mirror: &Path, catalog: &Path) {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let seed = run_segmirror_env(
        ["seed", "--log-dir", &s(log_dir), "--store", &s(store), "--link", "p"],
        &[],
    )
    .unwrap();
    assert_eq!(seed.code, 0, "{seed}");
    let apply = run_segmirror_env(
        [
            "apply",
            "--store",
            &s(store),
            "--mirror",
            &s(mirror),
            "--catalog",
            &s(catalog),
            "--link",
            "p",
        ],
        &[],
    )
    .unwrap();
    assert_eq!(apply.code, 0, "{apply}");
}

/// Offsets of the `.snapshot` files in `dir`.
fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut offsets: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect();
    offsets.sort_unstable();
    offsets
}

/// The source's end offset, which its clean shutdown wrote `<end>.snapshot` at; the mirror holds that file byte for
/// byte, and is sound for `verify --strict`.
fn assert_end_snapshot_mirrored(source_dir: &Path, mirror_dir: &Path, end: i64) {
    let name = format!("{end:020}.snapshot");
    let source_bytes = std::fs::read(source_dir.join(&name))
        .unwrap_or_else(|e| panic!("the source's clean shutdown wrote {name}: {e}"));
    assert_eq!(
        std::fs::read(mirror_dir.join(&name)).ok().as_ref(),
        Some(&source_bytes),
        "{name} in the mirror is the source's, byte for byte"
    );
    let verify = segmirror_verify(&[mirror_dir], &["--deep", "--strict"]).unwrap();
    assert_eq!(verify.code, 0, "{verify}");
}

#[test]
fn the_log_end_snapshot_travels_with_the_mirror_and_promotion_still_starts_empty() {
    let spec = || vec![TopicSpec::new(END_SNAP, 1).config("internal.segment.bytes", SMALL_SEGMENT_BYTES)];
    let mut source = KafkaBroker::start(BrokerConfig::new("end-snapshot-source")).unwrap();
    let sb = source.bootstrap();
    admin(&sb, &spec(), &[END_SNAP]).unwrap();
    let produce = |bootstrap: &str, round: &str| {
        for p in 0..SOURCE_PRODUCERS {
            let plan = ProducePlan::new(END_SNAP)
                .config("enable.idempotence", "true")
                .config("acks", "all")
                .step(ProduceStep::Send(
                    (0..RECORDS_PER_SOURCE_PRODUCER)
                        // Padded, so that the small segments roll.
                        .map(|i| record(format!("{round}-{p}-{i}-{}", "x".repeat(100))))
                        .collect(),
                ));
            python_produce(bootstrap, &plan).unwrap();
        }
        committed_transaction(bootstrap, END_SNAP, &format!("txn-{round}"), &[format!("{round}-txn")]);
    };
    let end_offset = |bootstrap: &str| {
        KafkaTools::new(target_install(), bootstrap)
            .end_offsets(END_SNAP)
            .unwrap()[&0]
    };
    produce(&sb, "first");
    let first_end = end_offset(&sb);
    source.stop().unwrap();
    let source_dir = source.partition_dir(END_SNAP, 0);
    assert!(log_files(&source_dir).len() >= 2, "sealed and active segments");
    assert_eq!(
        snapshot_offsets(&source_dir).last(),
        Some(&first_end),
        "the clean shutdown's snapshot"
    );

    let work = tempfile::tempdir().unwrap();
    let (store, mirror, catalog) = (
        work.path().join("store"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    std::fs::create_dir_all(&store).unwrap();
    seed_and_apply(source.log_dir(), &store, &mirror, &catalog);
    let mirror_dir = mirror.join(format!("{END_SNAP}-0"));
    assert_end_snapshot_mirrored(&source_dir, &mirror_dir, first_end);

    // More writes on the restarted source, a clean shutdown again: a new log-end snapshot, the old one stale.
    source.restart().unwrap();
    let sb = source.bootstrap();
    produce(&sb, "second");
    let on_source = consume_all(&sb, END_SNAP, None, Isolation::ReadCommitted).unwrap();
    let second_end = end_offset(&sb);
    source.stop().unwrap();
    assert_eq!(
        snapshot_offsets(&source_dir).last(),
        Some(&second_end),
        "the clean shutdown's snapshot"
    );
    assert!(second_end > first_end, "{second_end} > {first_end}");
    seed_and_apply(source.log_dir(), &store, &mirror, &catalog);
    assert_end_snapshot_mirrored(&source_dir, &mirror_dir, second_end);
    let bases: Vec<i64> = log_files(&mirror_dir)
        .iter()
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect();
    // Snapshots at segment bases, and the one at the log end; the first end snapshot is gone (unless a segment
    // now starts there).
    let mirror_snapshots = snapshot_offsets(&mirror_dir);
    assert!(
        mirror_snapshots.iter().all(|o| bases.contains(o) || *o == second_end),
        "{mirror_snapshots:?} vs bases {bases:?}"
    );
    assert!(mirror_snapshots.contains(&second_end));
    assert!(bases.contains(&first_end) || !mirror_snapshots.contains(&first_end));

    // Promote: no transaction to cut (the end snapshot says so, as the batches do), no producer state on the
    // target, and the target's first idempotent producers each write once after the source's records.
    let mut target = KafkaBroker::start(BrokerConfig::new("end-snapshot-target")).unwrap();
    admin(&target.bootstrap(), &spec(), &[END_SNAP]).unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(&mirror, target.log_dir(), &catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    let p = &report["partitions"][0];
    assert_eq!(p["transactions_aborted"].as_array().map(Vec::len), Some(0), "{p}");
    assert_eq!(p["log_end_offset"].as_i64(), Some(second_end), "{p}");
    target.restart().unwrap();
    let tb = target.bootstrap();
    assert_eq!(describe_producers(&tb, END_SNAP), vec![]);
    let got = consume_all(&tb, END_SNAP, None, Isolation::ReadCommitted).unwrap();
    assert_eq!(values(&got), values(&on_source));
    let writes: Vec<String> = (0..TARGET_PRODUCERS).map(|i| format!("target-{i}")).collect();
    let offsets = idempotent_writes(&tb, END_SNAP, &writes);
    assert_eq!(
        offsets,
        (second_end..second_end + TARGET_PRODUCERS as i64).collect::<Vec<_>>()
    );
    let got = consume_all(&tb, END_SNAP, None, Isolation::ReadUncommitted).unwrap();
    let mut want = values(&on_source);
    want.extend(writes);
    assert_eq!(values(&got), want);
    target.stop().unwrap();
}

/// The topic of the consistent cuts below.
const TAIL_CUT: &str = "tailcut";

/// How the mirror of a consistent cut below is fed from the source broker.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// `ship --upto log-end` → `apply --listen`: the tail appender's closed log names the producer's markers.
    Direct,
    /// `seed` → `apply` of the stopped broker's log dir: the install's segment log names them.
    Bucket,
}

/// A tail-fed mirror (`ship --upto log-end` → `apply --listen`) of a real broker's partition, cut with
/// `--consistent-cut` inside a transaction whose producer commits it after the cut and then commits another: two
/// markers of the producer after the cut, its first event before it where the transaction began, with other
/// producers' records between. The appender's closed log decides the producer (no reading back from the cut), the
/// promoted partition is byte for byte what the same mirror promotes to without anything the appender kept (the
/// walk), and the target broker started on it serves `read_committed` the records before the cut except the
/// transaction's, then commits a new transaction.
#[test]
fn a_tail_fed_cut_before_two_commits_of_its_producer_promotes_as_the_walk() {
    cut_before_two_commits_promotes_as_the_walk(Feed::Direct);
}

/// The same through the bucket (`seed` → `apply`): the install's log of every marker in the segment decides the
/// producer, and the promotion equals the walk's of the same mirror without the installs' records.
#[test]
fn a_bucket_fed_cut_before_two_commits_of_its_producer_promotes_as_the_walk() {
    cut_before_two_commits_promotes_as_the_walk(Feed::Bucket);
}

fn cut_before_two_commits_promotes_as_the_walk(feed: Feed) {
    let name = match feed {
        Feed::Direct => "tailcut",
        Feed::Bucket => "bucketcut",
    };
    let mut source = KafkaBroker::start(BrokerConfig::new(&format!("{name}-source"))).unwrap();
    let sb = source.bootstrap();
    admin(&sb, &[TopicSpec::new(TAIL_CUT, 1)], &[TAIL_CUT]).unwrap();
    let plain = |prefix: &str, n: usize| {
        let plan = ProducePlan::new(TAIL_CUT).step(ProduceStep::Send(
            (0..n).map(|i| record(format!("{prefix}-{i}"))).collect(),
        ));
        python_produce(&sb, &plan).unwrap()
    };
    plain("early", 5);
    let quiet = OpenTransaction::start(&sb, "quiet", &[(TAIL_CUT, 0, 3)]);
    plain("between", 20);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let cut_at = segment_format::now_ms();
    std::thread::sleep(std::time::Duration::from_millis(50));
    // After the cut: the transaction's commit (the first batch newer than the cut: the cut lands on it), the
    // producer's next transaction and its commit (the same transactional id: the same producer id), more records.
    quiet.commit();
    committed_transaction(&sb, TAIL_CUT, "quiet", &["second-0".into(), "second-1".into()]);
    plain("late", 5);

    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = (work.path().join("mirror"), work.path().join("catalog.sqlite"));
    let on_source = match feed {
        Feed::Direct => {
            let on_source = tail(&mirror, &catalog, &source);
            source.stop().unwrap();
            on_source
        }
        Feed::Bucket => {
            let on_source = consume_all(&sb, TAIL_CUT, None, Isolation::ReadUncommitted).unwrap();
            source.stop().unwrap();
            seed_and_apply(source.log_dir(), &work.path().join("store"), &mirror, &catalog);
            on_source
        }
    };
    let commit_offset = |first: &str| {
        let at = on_source
            .iter()
            .position(|r| r.value.as_deref() == Some(first.as_bytes()))
            .unwrap();
        on_source[at].offset
    };
    // The cut: the first offset after the transaction's last record and the plain ones before the cut.
    let open_first = commit_offset("open-0");
    let cut_offset = commit_offset("between-19") + 1;

    // Two stopped targets with the topic: one promoted from what the appender kept, one by the walks.
    let mut target = KafkaBroker::start(BrokerConfig::new(&format!("{name}-target"))).unwrap();
    admin(&target.bootstrap(), &[TopicSpec::new(TAIL_CUT, 1)], &[TAIL_CUT]).unwrap();
    target.stop().unwrap();
    let walked_log_dir = work.path().join("walked-target");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(target.log_dir())
        .arg(&walked_log_dir)
        .status()
        .unwrap();
    assert!(copied.success());
    let at = cut_at.to_string();
    let promote = |log_dir: &Path| {
        let extra = ["--handover", "copy", "--consistent-cut", &at, "--json"];
        let env = [("SEGMIRROR_LOG", "segmirror_applier::promote=debug".to_string())];
        let run = segmirror_promote_env(&mirror, log_dir, &catalog, &extra, &env).unwrap();
        assert_eq!(run.code, 0, "{run}");
        run
    };
    // The catalog as the applier left it, for the second promotion (the first records the partition promoted).
    let saved = work.path().join("saved.sqlite");
    copy_catalog(&catalog, &saved);
    let kept = promote(target.log_dir());
    let decided = match feed {
        Feed::Direct => "decided by the closed log",
        Feed::Bucket => "decided by the segment's log",
    };
    assert!(kept.stderr.contains(decided), "{}", kept.stderr);
    let report = kept.json().unwrap();
    let p = &report["partitions"][0];
    assert_eq!(p["consistent_cut"]["cut_offset"], cut_offset, "{p}");
    let aborted = p["transactions_aborted"].as_array().unwrap();
    assert_eq!(aborted.len(), 1, "{p}");
    assert_eq!(aborted[0]["first_offset"], open_first, "{p}");
    assert_eq!(aborted[0]["records"], 3, "{p}");
    // The same mirror without what the appender kept, or the installs recorded: walked, and the same partition byte
    // for byte.
    copy_catalog(&saved, &catalog);
    match feed {
        Feed::Direct => {
            let state = mirror.join(".tail").join(format!("{TAIL_CUT}-0.json"));
            let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
            doc.as_object_mut().unwrap().remove("kept");
            std::fs::write(&state, serde_json::to_vec(&doc).unwrap()).unwrap();
        }
        Feed::Bucket => {
            let forgotten = rusqlite::Connection::open(&catalog)
                .unwrap()
                .execute("UPDATE segments SET txn_ends = NULL", [])
                .unwrap();
            assert!(forgotten >= 1);
        }
    }
    let walked = promote(&walked_log_dir);
    assert!(!walked.stderr.contains(decided), "{}", walked.stderr);
    assert_eq!(
        walked.json().unwrap()["partitions"][0]["consistent_cut"],
        p["consistent_cut"]
    );
    // Byte for byte, but for the time each promotion stamped its ABORT marker with (in the marker batch, its CRC, and
    // the time index entry of a roll after it): those batches compared by their headers otherwise.
    let (promoted, walked_dir) = (
        target.partition_dir(TAIL_CUT, 0),
        walked_log_dir.join(format!("{TAIL_CUT}-0")),
    );
    let stamped = |rel: &Path| rel.extension().is_some_and(|e| e == "log" || e == "timeindex");
    let same = assert_same_files(&promoted, &walked_dir, |rel| !stamped(rel)).unwrap();
    assert!(same >= 4, "{same} files");
    // Offset, max timestamp (none for a marker), producer id and epoch, transactional, marker type, records.
    type Header = (i64, i64, i64, i16, bool, Option<ControlType>, i32);
    let batches = |dir: &Path| -> Vec<Header> {
        files_under(dir)
            .unwrap()
            .into_iter()
            .filter(|(rel, _)| rel.extension().is_some_and(|e| e == "log"))
            .flat_map(|(_, path)| {
                let bytes = std::fs::read(path).unwrap();
                segment_format::log::scan_frames(&bytes, 0)
                    .map(|f| f.unwrap().info)
                    .map(|b| {
                        let stamp = if b.is_control { -1 } else { b.max_timestamp };
                        let tx = b.is_transactional;
                        (
                            b.base_offset,
                            stamp,
                            b.producer_id,
                            b.producer_epoch,
                            tx,
                            b.control,
                            b.records_count,
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let (kept_batches, walked_batches) = (batches(&promoted), batches(&walked_dir));
    assert_eq!(kept_batches, walked_batches);
    assert!(kept_batches
        .iter()
        .any(|b| b.0 == cut_offset && b.5 == Some(ControlType::Abort)));
    let log_before_cut = |dir: &Path| {
        let bytes = std::fs::read(dir.join("00000000000000000000.log")).unwrap();
        bytes[..p["log_bytes"].as_u64().unwrap() as usize].to_vec()
    };
    assert!(log_before_cut(&promoted) == log_before_cut(&walked_dir));

    // The target serves the records before the cut, without the transaction's, and commits a new one.
    target.restart().unwrap();
    let tb = target.bootstrap();
    let read = consume_all(&tb, TAIL_CUT, None, Isolation::ReadCommitted).unwrap();
    let expected: Vec<String> = (0..5)
        .map(|i| format!("early-{i}"))
        .chain((0..20).map(|i| format!("between-{i}")))
        .collect();
    assert_eq!(values(&read), expected);
    let new = committed_transaction(&tb, TAIL_CUT, "after-promotion", &["new-0".into()]);
    assert!(new[0].offset > cut_offset, "{new:?}");
    let read = consume_all(&tb, TAIL_CUT, None, Isolation::ReadCommitted).unwrap();
    assert_eq!(values(&read).last().map(String::as_str), Some("new-0"));
    target.stop().unwrap();
}
