//! Records `DeleteRecords` erased on the source never reach a reader of the promoted target, on either delivery
//! path, against a real Kafka 4.4 source.
//!
//! One source broker with small segments and two topics of two partitions each: `erased-direct` replicated over
//! the direct link (`ship --connect` + `apply --listen`), `erased-bucket` through a folder store (`seed` +
//! `apply`). Once the direct link has caught up, `kafka-delete-records` moves each topic's log start inside a
//! segment: partition 0 to 37 (inside its first segment: no file is deleted, only the broker's
//! `log-start-offset-checkpoint` tells it), partition 1 a few offsets into its second segment (the broker's
//! retention then deletes the first segment whole). The direct link must carry the exact log start (the catalog's
//! log start reaches the source's, and the mirror drops the segment the source dropped); the bucket path is
//! seeded after the move. Both mirrors are promoted into one stopped target broker; started, it reports the
//! source's earliest offsets (`ListOffsets -2`) and serves exactly the source's records: none of the erased ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use segmirror_catalog::Catalog;
use segmirror_tests::clients::record_identities;
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::service::direct_link;
use segmirror_tests::*;

const DIRECT: &str = "erased-direct";
const BUCKET: &str = "erased-bucket";
const PARTITIONS: i32 = 2;
/// Small segments: each partition rolls a few times.
const SEGMENT_BYTES: u64 = 16 * 1024;
const VALUE_BYTES: usize = 300;
/// Records per partition: about 45 KiB, three segments or so.
const RECORDS: usize = 150;
/// Where partition 0's log start moves: inside its first segment.
const INSIDE_FIRST: i64 = 37;
/// How far into partition 1's second segment its log start moves.
const INTO_SECOND: i64 = 7;
/// Failure guard for anything the test waits for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(200);

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn produce(bootstrap: &str, topic: &str) {
    let records: Vec<OutRecord> = (0..PARTITIONS)
        .flat_map(|p| {
            (0..RECORDS).map(move |i| OutRecord {
                partition: Some(p),
                key: Some(format!("{topic}-{p}-{i}").into_bytes()),
                value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
                headers: Vec::new(),
                timestamp: None,
            })
        })
        .collect();
    let plan = ProducePlan::new(topic)
        .config("linger.ms", "2")
        .config("batch.size", "4096")
        .step(ProduceStep::Send(records));
    python_produce(bootstrap, &plan).unwrap();
}

/// The `.log` files of a partition directory: base offset and size.
fn logs(dir: &Path) -> BTreeMap<i64, u64> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(base) = name.strip_suffix(".log").and_then(|b| b.parse::<i64>().ok()) {
            out.insert(base, std::fs::metadata(&path).map_or(0, |m| m.len()));
        }
    }
    out
}

/// Waits until `done` holds, failing with `what` and `logs` after [`PATIENCE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool, logs: impl Fn() -> String) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}:\n{}", logs());
        std::thread::sleep(POLL);
    }
}

/// The log start offset the catalog records per partition of `topic`.
fn catalog_log_starts(catalog: &Path, link: &str, topic: &str) -> BTreeMap<i32, i64> {
    let Ok(catalog) = Catalog::open(catalog) else {
        return BTreeMap::new();
    };
    catalog
        .partitions(link)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.key.topic == topic)
        .map(|p| (p.key.partition, p.log_start_offset))
        .collect()
}

#[test]
fn records_deleted_on_the_source_are_not_served_by_the_promoted_target_on_either_path() {
    let source = KafkaBroker::start(BrokerConfig::new("e2e-log-start-source")).unwrap();
    let bootstrap = source.bootstrap();
    let specs: Vec<TopicSpec> = [DIRECT, BUCKET]
        .iter()
        .map(|t| {
            TopicSpec::new(t, PARTITIONS)
                .config(source.install().segment_bytes_config(), SEGMENT_BYTES)
                .config("retention.ms", -1)
        })
        .collect();
    admin(&bootstrap, &specs, &[]).unwrap();
    produce(&bootstrap, DIRECT);
    produce(&bootstrap, BUCKET);
    let tools = source.tools();
    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = (work.path().join("mirror"), work.path().join("catalog.sqlite"));
    let source_dirs =
        |topic: &str| -> Vec<PathBuf> { (0..PARTITIONS).map(|p| source.partition_dir(topic, p)).collect() };
    let mirror_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| mirror.join(format!("{DIRECT}-{p}"))).collect();
    for dir in source_dirs(DIRECT).iter().chain(&source_dirs(BUCKET)) {
        assert!(logs(dir).len() >= 3, "{} rolled twice: {:?}", dir.display(), logs(dir));
    }

    // The direct link, caught up.
    let (applier, shipper) = direct_link(&mirror, &catalog, source.log_dir(), "direct", &["--topics", DIRECT]);
    let mirrored = |from: &[PathBuf]| from.iter().map(|d| logs(d)).collect::<Vec<_>>();
    wait_until(
        "the direct link never caught up",
        || mirrored(&source_dirs(DIRECT)) == mirrored(&mirror_dirs),
        || format!("--- ship ---\n{}\n--- apply ---\n{}", shipper.log(), applier.log()),
    );

    // DeleteRecords: inside partition 0's first segment, inside partition 1's second one, on both topics.
    let mut moved_to = BTreeMap::new();
    for topic in [DIRECT, BUCKET] {
        let second = *logs(&source_dirs(topic)[1]).keys().nth(1).unwrap();
        for (p, offset) in [(0, INSIDE_FIRST), (1, second + INTO_SECOND)] {
            tools.delete_records(topic, p, offset).unwrap();
            moved_to.insert((topic, p), offset);
        }
    }
    let deleted_at = Instant::now();
    for topic in [DIRECT, BUCKET] {
        let earliest = tools.earliest_offsets(topic).unwrap();
        for p in 0..PARTITIONS {
            assert_eq!(
                earliest[&p],
                moved_to[&(topic, p)],
                "{topic}-{p}'s log start on the source"
            );
        }
    }
    // The broker writes the checkpoint lazily (every second in the harness) and deletes partition 1's first
    // segment at its next retention check.
    let checkpoint = source.log_dir().join("log-start-offset-checkpoint");
    wait_until(
        "the source's log-start-offset-checkpoint never listed the moved log starts",
        || {
            let text = std::fs::read_to_string(&checkpoint).unwrap_or_default();
            moved_to
                .iter()
                .all(|((t, p), o)| text.lines().any(|l| l == format!("{t} {p} {o}")))
        },
        || std::fs::read_to_string(&checkpoint).unwrap_or_default(),
    );
    wait_until(
        "the source's retention never deleted partition 1's first segment",
        || {
            [DIRECT, BUCKET]
                .iter()
                .all(|t| !logs(&source_dirs(t)[1]).contains_key(&0))
        },
        || format!("{:?}", mirrored(&source_dirs(DIRECT))),
    );

    // The direct link carries the exact log starts: the catalog has them, the mirror dropped what the source
    // dropped (whole segments only: partition 0 keeps its first segment, which holds offsets 37 and on).
    let want_direct: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, moved_to[&(DIRECT, p)])).collect();
    wait_until(
        "the direct link never carried the source's log starts",
        || {
            catalog_log_starts(&catalog, "direct", DIRECT) == want_direct
                && mirrored(&source_dirs(DIRECT)) == mirrored(&mirror_dirs)
        },
        || {
            format!(
                "catalog {:?}, source {:?}, mirror {:?}\n--- ship ---\n{}\n--- apply ---\n{}",
                catalog_log_starts(&catalog, "direct", DIRECT),
                mirrored(&source_dirs(DIRECT)),
                mirrored(&mirror_dirs),
                shipper.log(),
                applier.log()
            )
        },
    );
    assert!(
        logs(&mirror_dirs[0]).contains_key(&0),
        "partition 0's first segment holds the log start"
    );
    // A figure, not asserted: the broker's checkpoint interval (1 s here) dominates.
    eprintln!(
        "the direct link carried the log starts {} ms after the last DeleteRecords",
        deleted_at.elapsed().as_millis()
    );
    let (code, ship_log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{ship_log}");
    let (code, apply_log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{apply_log}");

    // The bucket path, seeded after the move.
    let (store, bucket_mirror, bucket_catalog) = (
        work.path().join("store"),
        work.path().join("bucket-mirror"),
        work.path().join("bucket-catalog.sqlite"),
    );
    let seed = run_segmirror([
        "seed",
        "--log-dir",
        &s(source.log_dir()),
        "--store",
        &s(&store),
        "--link",
        "bucket",
        "--topics",
        BUCKET,
    ])
    .unwrap();
    assert_eq!(seed.code, 0, "{seed}");
    let apply = run_segmirror([
        "apply",
        "--store",
        &s(&store),
        "--mirror",
        &s(&bucket_mirror),
        "--catalog",
        &s(&bucket_catalog),
        "--link",
        "bucket",
    ])
    .unwrap();
    assert_eq!(apply.code, 0, "{apply}");
    let want_bucket: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, moved_to[&(BUCKET, p)])).collect();
    assert_eq!(catalog_log_starts(&bucket_catalog, "bucket", BUCKET), want_bucket);

    // What a reader of the source gets, erased records excluded.
    let source_records: BTreeMap<&str, _> = [DIRECT, BUCKET]
        .iter()
        .map(|t| {
            (
                *t,
                record_identities(&consume_all(&bootstrap, t, None, Isolation::ReadUncommitted).unwrap()),
            )
        })
        .collect();
    for (topic, records) in &source_records {
        for p in 0..PARTITIONS {
            let first = records.iter().filter(|r| r.0 == p).map(|r| r.1).min();
            assert_eq!(first, Some(moved_to[&(*topic, p)]), "{topic}-{p} on the source");
        }
    }
    let source_earliest: BTreeMap<&str, _> = [DIRECT, BUCKET]
        .iter()
        .map(|t| (*t, tools.earliest_offsets(t).unwrap()))
        .collect();
    drop(source);

    // Both mirrors promoted into one stopped target.
    let mut target = KafkaBroker::start(BrokerConfig::new("e2e-log-start-target")).unwrap();
    let specs: Vec<TopicSpec> = [DIRECT, BUCKET]
        .iter()
        .map(|t| TopicSpec::new(t, PARTITIONS).config("retention.ms", -1))
        .collect();
    admin(&target.bootstrap(), &specs, &[]).unwrap();
    target.stop().unwrap();
    for (mirror, catalog) in [(&mirror, &catalog), (&bucket_mirror, &bucket_catalog)] {
        let promote = segmirror_promote(mirror, target.log_dir(), catalog, &["--json"]).unwrap();
        assert_eq!(promote.code, 0, "{promote}");
    }
    let target_checkpoint = std::fs::read_to_string(target.log_dir().join("log-start-offset-checkpoint")).unwrap();
    for ((topic, p), offset) in &moved_to {
        assert!(
            target_checkpoint.lines().any(|l| l == format!("{topic} {p} {offset}")),
            "{topic}-{p} at {offset} in the promoted checkpoint:\n{target_checkpoint}"
        );
    }
    target.restart().unwrap();
    let tb = target.bootstrap();
    let target_tools = target.tools();
    for topic in [DIRECT, BUCKET] {
        assert_eq!(
            target_tools.earliest_offsets(topic).unwrap(),
            source_earliest[topic],
            "{topic}: the target's low watermarks are the source's"
        );
        let served = record_identities(&consume_all(&tb, topic, None, Isolation::ReadUncommitted).unwrap());
        assert_eq!(
            &served, &source_records[topic],
            "{topic}: the target serves exactly the source's records"
        );
        for p in 0..PARTITIONS {
            assert!(
                served.iter().filter(|r| r.0 == p).all(|r| r.1 >= moved_to[&(topic, p)]),
                "{topic}-{p}: a record below the log start was served"
            );
        }
    }
}
