//! Promotion's planning against real Kafka 4.4 brokers: the retention prediction and promote's refusals.
//!
//! 1. [`a_real_brokers_metadata_log_is_read_snapshot_first`]: a broker creates, reconfigures and deletes topics and
//!    sets a dynamic broker default; `segment_format::metadata_log` reads its `__cluster_metadata-0` (a snapshot
//!    plus the records after it) and finds the topic ids the broker reports, the partition counts and the configs
//!    in force; the same state comes out of the segments alone.
//! 2. [`retention_on_the_target_is_predicted_refused_and_then_carried_out_by_the_broker`]: a target topic with
//!    `retention.ms` of one hour and a mirror whose first segments hold records from three days ago. Promotion
//!    refuses, naming the partition, the offsets and the timestamps; in the same run it names every other reason
//!    (two target partitions that hold data, a topic the target lacks), exit code 2, nothing changed. A mistyped
//!    mirror root or link is refused and created nowhere. With `--allow-retention-delete` it promotes and reports
//!    what the broker will delete; the started broker then deletes exactly that, while a topic with the default
//!    retention (7 days) keeps the same three-day-old data, promoted without a refusal.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use segment_format::metadata_log::{read_metadata_dir, METADATA_DIR, SNAPSHOT_SUFFIX};
use segment_format::now_ms;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};
use segmirror_catalog::Catalog;
use segmirror_tests::mirror::{record_writer_mirror, segmirror_promote};
use segmirror_tests::tools::{CONFIG_COMMAND, TOPIC_COMMAND};
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

fn s(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn a_real_brokers_metadata_log_is_read_snapshot_first() {
    let mut broker =
        KafkaBroker::start(BrokerConfig::new("metadata-log").property("metadata.log.max.snapshot.interval.ms", 500))
            .unwrap();
    let bootstrap = broker.bootstrap();
    let tools = broker.tools();
    let specs = [
        TopicSpec::new("md-a", 3).config("retention.ms", 1000),
        TopicSpec::new("md-b", 1),
        TopicSpec::new("md-gone", 2).config("retention.ms", 5),
    ];
    admin(&bootstrap, &specs, &[]).unwrap();
    tools
        .alter_topic_config("md-a", &[("retention.ms", "7200000"), ("retention.bytes", "1048576")])
        .unwrap();
    tools
        .run(
            CONFIG_COMMAND,
            &s(&[
                "--bootstrap-server",
                &bootstrap,
                "--alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "log.retention.ms=86400000",
            ]),
        )
        .unwrap();
    tools
        .run(
            TOPIC_COMMAND,
            &s(&["--bootstrap-server", &bootstrap, "--delete", "--topic", "md-gone"]),
        )
        .unwrap();
    let metadata = broker.log_dir().join(METADATA_DIR);
    let has_snapshot = || {
        Ok(std::fs::read_dir(&metadata)?
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().ends_with(SNAPSHOT_SUFFIX))
            .then_some(()))
    };
    wait_for(
        "a metadata snapshot",
        Duration::from_secs(30),
        Duration::from_millis(200),
        has_snapshot,
    )
    .unwrap();
    // Changes after the snapshot: a new override, and a deleted one.
    tools.alter_topic_config("md-b", &[("retention.ms", "5000")]).unwrap();
    tools
        .run(
            CONFIG_COMMAND,
            &s(&[
                "--bootstrap-server",
                &bootstrap,
                "--alter",
                "--entity-type",
                "topics",
                "--entity-name",
                "md-a",
                "--delete-config",
                "retention.bytes",
            ]),
        )
        .unwrap();
    let ids = admin(&bootstrap, &[], &["md-a", "md-b"]).unwrap();
    broker.stop().unwrap();

    let m = read_metadata_dir(&metadata).unwrap();
    assert!(m.snapshot.is_some(), "{m:?}");
    let a = m.topic("md-a").unwrap();
    assert_eq!(a.topic_id.to_string(), ids["md-a"].topic_id);
    assert_eq!(a.partition_count(), 3);
    assert_eq!(
        a.configs,
        BTreeMap::from([("retention.ms".to_string(), "7200000".to_string())])
    );
    let b = m.topic("md-b").unwrap();
    assert_eq!(
        (b.topic_id.to_string(), b.partition_count()),
        (ids["md-b"].topic_id.clone(), 1)
    );
    assert_eq!(
        b.configs,
        BTreeMap::from([("retention.ms".to_string(), "5000".to_string())])
    );
    assert!(
        m.topic("md-gone").is_none(),
        "deleted topics are gone: {:?}",
        m.topics.keys()
    );
    assert_eq!(m.broker_config(1, "log.retention.ms"), Some("86400000"));

    // The segments alone (the log still starts at 0 here) give the same state.
    let copy = tempfile::tempdir().unwrap();
    let mut copied_segments = 0;
    for e in std::fs::read_dir(&metadata).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") {
            std::fs::copy(e.path(), copy.path().join(&name)).unwrap();
            copied_segments += 1;
        }
    }
    assert!(copied_segments > 0);
    let from_log = read_metadata_dir(copy.path()).unwrap();
    assert_eq!(from_log.snapshot, None);
    assert_eq!(from_log.topics, m.topics);
    assert_eq!(from_log.broker_configs, m.broker_configs);
    assert_eq!(from_log.end_offset, m.end_offset);
}

/// A mirror partition whose first `old` batches carry timestamps from `old_ts` on and whose next `recent` batches
/// carry timestamps from `recent_ts` on (3 records each, small segments). Returns it and the first recent offset.
fn write_aged(
    root: &Path,
    topic: &str,
    partition: i32,
    (old, old_ts): (usize, i64),
    (recent, recent_ts): (usize, i64),
) -> (WrittenPartition, i64) {
    let config = WriterConfig {
        segment_bytes: 1024,
        fsync: false,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, topic, partition, 0, config).unwrap();
    w.become_leader(4);
    let mut first_recent = 0;
    for i in 0..old + recent {
        let base = w.next_offset();
        if i == old {
            first_recent = base;
        }
        let ts = if i < old { old_ts } else { recent_ts } + base;
        let mut b = BatchBuilder::new(base).partition_leader_epoch(4);
        for r in 0..3 {
            b = b.record(
                RecordSpec::new(r, ts + i64::from(r))
                    .with_key(format!("{topic}-{partition}-{}", base + i64::from(r)))
                    .with_value(vec![b'v'; 60]),
            );
        }
        w.append(b).unwrap();
    }
    (w.close().unwrap(), first_recent)
}

/// The base offset of the first segment holding an offset at or after `offset`.
fn segment_holding(w: &WrittenPartition, offset: i64) -> i64 {
    w.segments
        .iter()
        .find(|s| s.last_offset.is_some_and(|l| l >= offset))
        .unwrap()
        .base_offset
}

/// Fails naming the files that differ (a whole log dir's bytes are too long for a message). `.lock` is left out:
/// the broker removes it at a clean stop and promotion creates it to lock the log dir.
fn assert_unchanged(before: &BTreeMap<std::path::PathBuf, Vec<u8>>, after: &BTreeMap<std::path::PathBuf, Vec<u8>>) {
    let differ: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|k| k.as_os_str() != ".lock" && before.get(*k) != after.get(*k))
        .collect();
    assert!(differ.is_empty(), "a refused promotion changed {differ:?}");
}

fn refused_kinds(json: &serde_json::Value) -> Vec<(String, String)> {
    json["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let what = match (&r["partition"], &r["topic"]) {
                (serde_json::Value::Object(p), _) => format!("{}-{}", p["topic"].as_str().unwrap(), p["partition"]),
                (_, serde_json::Value::String(t)) => t.clone(),
                _ => String::new(),
            };
            (r["kind"].as_str().unwrap().to_string(), what)
        })
        .collect()
}

#[test]
fn retention_on_the_target_is_predicted_refused_and_then_carried_out_by_the_broker() {
    let now = now_ms();
    let three_days_ago = now - 3 * DAY_MS;
    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = (work.path().join("mirror"), work.path().join("catalog.sqlite"));

    // The mirror: two topics with three-day-old data followed by fresh data, two partitions for a topic whose
    // target partitions will hold data, and a topic the target does not have.
    let (short, short_recent) = write_aged(&mirror, "ret-short", 0, (12, three_days_ago), (4, now - 60_000));
    let (long, _) = write_aged(&mirror, "ret-long", 0, (12, three_days_ago), (4, now - 60_000));
    let busy: Vec<_> = (0..2)
        .map(|p| write_aged(&mirror, "busy", p, (0, 0), (3, now - 60_000)).0)
        .collect();
    let (missing, _) = write_aged(&mirror, "missing", 0, (0, 0), (3, now - 60_000));
    assert!(short.segments.len() >= 4, "several segments: {:?}", short.segments);
    let expected_kept = segment_holding(&short, short_recent);
    assert!(expected_kept > 0 && expected_kept < short.log_end_offset);
    for (w, parts) in [
        (&short, vec![&short]),
        (&long, vec![&long]),
        (&busy[0], busy.iter().collect()),
        (&missing, vec![&missing]),
    ] {
        let list: Vec<(&WrittenPartition, i64)> = parts.into_iter().map(|p| (p, 0)).collect();
        record_writer_mirror(&catalog, "ret", &w.topic_id.to_string(), &list).unwrap();
    }

    // The target: ret-short gets a one-hour retention after creation; ret-long keeps Kafka's default (7 days); busy's
    // partitions receive a record each.
    let mut target = KafkaBroker::start(BrokerConfig::new("retention-target")).unwrap();
    let bootstrap = target.bootstrap();
    let specs = [
        TopicSpec::new("ret-short", 1),
        TopicSpec::new("ret-long", 1),
        TopicSpec::new("busy", 2),
    ];
    admin(&bootstrap, &specs, &[]).unwrap();
    target
        .tools()
        .alter_topic_config("ret-short", &[("retention.ms", &HOUR_MS.to_string())])
        .unwrap();
    let records = (0..2)
        .map(|p| OutRecord {
            partition: Some(p),
            value: Some(b"written on the target".to_vec()),
            ..OutRecord::default()
        })
        .collect();
    python_produce(&bootstrap, &ProducePlan::new("busy").step(ProduceStep::Send(records))).unwrap();
    target.stop().unwrap();
    let log_dir = target.log_dir().to_path_buf();
    let server_properties = target.work_dir().join("server.properties");
    let config_arg = server_properties.to_string_lossy().into_owned();
    // Every file of the log dir with its bytes.
    let snapshot = |dir: &Path| -> BTreeMap<std::path::PathBuf, Vec<u8>> {
        segmirror_tests::mirror::files_under(dir)
            .unwrap()
            .into_iter()
            .map(|(rel, path)| (rel, std::fs::read(path).unwrap()))
            .collect()
    };
    let target_before = snapshot(&log_dir);

    // Every reason, in one run, as JSON and as text.
    let run = segmirror_promote(&mirror, &log_dir, &catalog, &["--json", "--target-config", &config_arg]).unwrap();
    assert_eq!(run.code, 2, "{run}");
    let json = run.json().unwrap();
    let mut kinds = refused_kinds(&json);
    kinds.sort();
    let want: Vec<(String, String)> = [
        ("partition_count_mismatch", "missing"),
        ("retention_unknown", "missing"),
        ("retention_would_delete", "ret-short-0"),
        ("target_not_empty", "busy-0"),
        ("target_not_empty", "busy-1"),
        ("target_partition_missing", "missing-0"),
    ]
    .iter()
    .map(|(k, w)| (k.to_string(), w.to_string()))
    .collect();
    assert_eq!(kinds, want, "{json:#}");
    let loss = json["refused"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "retention_would_delete")
        .unwrap();
    let oldest = three_days_ago + segment_last(&short, 0);
    assert_eq!(loss["oldest_segment_max_timestamp"], oldest, "{loss:#}");
    assert_eq!(loss["first_kept_offset"], expected_kept, "{loss:#}");
    assert_eq!(loss["log_start_offset"], 0);
    assert_eq!(loss["retention"]["retention_ms"], HOUR_MS);
    let cutoff = loss["cutoff_ms"].as_i64().unwrap();
    assert_eq!(cutoff, loss["now_ms"].as_i64().unwrap() - HOUR_MS);
    assert!(cutoff >= now - HOUR_MS, "{loss:#}");
    let doomed = loss["segments"].as_array().unwrap();
    let doomed_bases: Vec<i64> = doomed.iter().map(|d| d["base_offset"].as_i64().unwrap()).collect();
    let want_bases: Vec<i64> = short
        .segments
        .iter()
        .map(|s| s.base_offset)
        .filter(|b| *b < expected_kept)
        .collect();
    assert_eq!(doomed_bases, want_bases);
    for d in doomed {
        let ts = d["max_timestamp"].as_i64().unwrap();
        assert!(ts < cutoff && d["reason"] == "retention_ms", "{d}");
    }
    assert_unchanged(&target_before, &snapshot(&log_dir));

    let text = segmirror_promote(&mirror, &log_dir, &catalog, &["--target-config", &config_arg]).unwrap();
    assert_eq!(text.code, 2, "{text}");
    for needle in [
        "busy-0: the target partition holds data".to_string(),
        "busy-1: the target partition holds data".to_string(),
        "missing-0: the target has no".to_string(),
        format!("ret-short-0: the target's retention would delete offsets [0, {expected_kept})"),
        format!("has timestamp {oldest}"),
        "retention.ms=3600000 (topic config)".to_string(),
    ] {
        assert!(text.stderr.contains(&needle), "{needle:?} in\n{text}");
    }
    assert_eq!(
        text.stderr.lines().filter(|l| l.starts_with("  - ")).count(),
        6,
        "{text}"
    );

    // A mistyped mirror root or link: refused, created nowhere.
    let nowhere = work.path().join("no-such-mirror");
    let run = segmirror_promote(&nowhere, &log_dir, &catalog, &[]).unwrap();
    assert_eq!(run.code, 2, "{run}");
    assert!(run.stderr.contains("no-such-mirror does not exist"), "{run}");
    assert!(!nowhere.exists());
    let run = segmirror_promote(&mirror, &log_dir, &catalog, &["--link", "typo", "--json"]).unwrap();
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(
        refused_kinds(&run.json().unwrap()),
        [("unknown_link".to_string(), String::new())]
    );
    let links: Vec<String> = Catalog::open(&catalog)
        .unwrap()
        .links()
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(links, ["ret"], "no link is created");
    assert_unchanged(&target_before, &snapshot(&log_dir));

    // The two retention topics alone: only ret-short is refused; told to go on, both are promoted and the report
    // says what the broker will delete.
    let select = ["--topics", "ret-.*", "--target-config", &config_arg, "--json"];
    let run = segmirror_promote(&mirror, &log_dir, &catalog, &select).unwrap();
    assert_eq!(run.code, 2, "{run}");
    assert_eq!(
        refused_kinds(&run.json().unwrap()),
        [("retention_would_delete".to_string(), "ret-short-0".to_string())]
    );
    let mut allowed = select.to_vec();
    allowed.push("--allow-retention-delete");
    let run = segmirror_promote(&mirror, &log_dir, &catalog, &allowed).unwrap();
    assert_eq!(run.code, 0, "{run}");
    let report = run.json().unwrap();
    let deletes = report["retention_deletes"].as_array().unwrap();
    assert_eq!(deletes.len(), 1, "{report:#}");
    assert_eq!(deletes[0]["partition"]["topic"], "ret-short");
    assert_eq!(deletes[0]["first_kept_offset"], expected_kept);
    let text = segmirror_promote(&mirror, &log_dir, &catalog, &["--topics", "ret-.*"]).unwrap();
    assert_eq!(text.code, 0, "promoted partitions are not checked again: {text}");

    // The broker deletes exactly what was predicted, and keeps the three-day-old data of the default-retention topic.
    target.restart().unwrap();
    let tools = target.tools();
    let start = wait_for(
        "retention on ret-short-0",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || Ok(tools.earliest_offsets("ret-short")?.get(&0).copied().filter(|o| *o > 0)),
    )
    .unwrap();
    assert_eq!(start, expected_kept);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        tools.earliest_offsets("ret-short").unwrap()[&0],
        expected_kept,
        "nothing more goes"
    );
    assert_eq!(tools.earliest_offsets("ret-long").unwrap()[&0], 0);
    let read = consume_all(&target.bootstrap(), "ret-short", None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        read.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (expected_kept..short.log_end_offset).collect::<Vec<_>>()
    );
    let read = consume_all(&target.bootstrap(), "ret-long", None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(read.len() as i64, long.log_end_offset);
    target.stop().unwrap();
}

/// Last offset of segment `i` of `w`.
fn segment_last(w: &WrittenPartition, i: usize) -> i64 {
    w.segments[i].last_offset.unwrap()
}
