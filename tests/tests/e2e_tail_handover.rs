//! A tail started on a mirror that `seed`/`apply` produced continues where they ended (the hand-over).
//!
//! A live Kafka 4.4 broker with small segments: partition 0 rolls several times, partition 1 stays in its first
//! segment. `segmirror seed` ships both into a local folder store while the broker runs (each active segment as an
//! unsealed prefix) and `segmirror apply` installs them into a mirror. More is produced (partition 0 rolls again,
//! so its seeded prefix is sealed at the source; partition 1 only grows). Then `segmirror ship` and
//! `segmirror apply --listen` run on the SAME mirror and catalog: the applier hands the partitions over (their
//! position derived from the catalog and checked against the files), the shipper resumes there, and the mirror
//! catches up: every segment equals the broker's byte for byte, `verify --strict` finds the mirror sound, and
//! `segmirror promote` into a stopped target broker gives consumers every record exactly once at identical
//! offsets (read_uncommitted and read_committed, an aborted transaction included). Partition 1 is promoted while
//! its last segment is still the seeded prefix the tail appended to.
//!
//! And the refusal, without a broker: a mirror whose files no longer match its catalog is not taken over.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use segmirror_tests::clients::record_identities;
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::segmirror_cli::{run_segmirror, segmirror_verify};
use segmirror_tests::service::{direct_link, Service};
use segmirror_tests::*;

const TOPIC: &str = "handover";
const PARTITIONS: i32 = 2;
/// Small segments: partition 0 rolls several times.
const SEGMENT_BYTES: u64 = 16 * 1024;
const VALUE_BYTES: usize = 300;
/// Records to partition 0 per round: about 22 KiB, more than a segment, so each round rolls it.
const BUSY_RECORDS: usize = 70;
/// Idempotent records to partition 1 per round (plus one committed and one aborted): about 1.5 KiB, so it does not
/// roll in the test's six rounds.
const QUIET_RECORDS: usize = 2;
/// Failure guard for anything the test waits for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);

fn record(partition: i32, round: usize, i: usize, tag: &str) -> OutRecord {
    OutRecord {
        partition: Some(partition),
        key: Some(format!("{tag}-{partition}-{round}-{i}").into_bytes()),
        value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
        headers: Vec::new(),
        timestamp: None,
    }
}

/// One round: an idempotent producer (many records to partition 0, a few to partition 1), then a transactional
/// one that commits one transaction and aborts another, on both partitions.
fn produce_round(bootstrap: &str, round: usize) {
    let busy = (0..BUSY_RECORDS).map(|i| record(0, round, i, "idem"));
    let quiet = (0..QUIET_RECORDS).map(|i| record(1, round, i, "idem"));
    let plan = ProducePlan::new(TOPIC)
        .config("enable.idempotence", "true")
        .config("acks", "all")
        .config("linger.ms", "2")
        .config("batch.size", "8192")
        .step(ProduceStep::Send(busy.chain(quiet).collect()));
    python_produce(bootstrap, &plan).unwrap();
    // Three records to partition 0, one to partition 1, per transaction.
    let txn = |tag: &str| -> Vec<OutRecord> { (0..4).map(|i| record(i32::from(i == 3), round, i, tag)).collect() };
    let plan = ProducePlan::new(TOPIC)
        .config("transactional.id", format!("{TOPIC}-txn"))
        .config("linger.ms", "2")
        .step(ProduceStep::InitTransactions)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(txn("commit")))
        .step(ProduceStep::CommitTransaction)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(txn("abort")))
        .step(ProduceStep::AbortTransaction);
    python_produce(bootstrap, &plan).unwrap();
}

/// The `.log` files of a partition directory, by base offset.
fn logs(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(base) = name.strip_suffix(".log").and_then(|s| s.parse::<i64>().ok()) {
            out.insert(base, path);
        }
    }
    out
}

/// Per partition: each segment's base and size.
fn sizes(dirs: &[PathBuf]) -> Vec<Vec<(i64, u64)>> {
    dirs.iter()
        .map(|d| {
            logs(d)
                .into_iter()
                .map(|(b, p)| (b, std::fs::metadata(p).map_or(0, |m| m.len())))
                .collect()
        })
        .collect()
}

#[test]
fn tail_continues_a_mirror_seed_and_apply_produced() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("e2e-handover")).unwrap();
    let bootstrap = broker.bootstrap();
    let spec = TopicSpec::new(TOPIC, PARTITIONS)
        .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
        .config("retention.ms", -1);
    admin(&bootstrap, &[spec], &[]).unwrap();
    let source_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| broker.partition_dir(TOPIC, p)).collect();
    let work = tempfile::tempdir().unwrap();
    let (store, mirror, catalog) = (
        work.path().join("store"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    let mirror_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| mirror.join(format!("{TOPIC}-{p}"))).collect();
    let s = |p: &Path| p.to_str().unwrap().to_string();

    // Seed and apply while the broker runs: the active segments go as unsealed prefixes.
    for round in 0..3 {
        produce_round(&bootstrap, round);
    }
    let seed = run_segmirror([
        "seed",
        "--log-dir",
        &s(broker.log_dir()),
        "--store",
        &s(&store),
        "--link",
        "dr",
        "--topics",
        TOPIC,
    ])
    .unwrap();
    assert_eq!(seed.code, 0, "{seed}");
    let apply = run_segmirror([
        "apply",
        "--store",
        &s(&store),
        "--mirror",
        &s(&mirror),
        "--catalog",
        &s(&catalog),
        "--link",
        "dr",
    ])
    .unwrap();
    assert_eq!(apply.code, 0, "{apply}");
    let seeded = sizes(&mirror_dirs);
    assert!(seeded[0].len() >= 3, "partition 0 rolled before the seed: {seeded:?}");
    assert_eq!(seeded[1].len(), 1, "partition 1 has one segment: {seeded:?}");
    assert!(!mirror.join(".tail").exists(), "apply wrote no tail state");

    // More data: partition 0 rolls past its seeded prefix, partition 1 grows its.
    for round in 3..5 {
        produce_round(&bootstrap, round);
    }
    let before = sizes(&source_dirs);
    let (seeded_last, _) = *seeded[0].last().unwrap();
    assert!(
        before[0].iter().any(|(b, _)| *b > seeded_last),
        "partition 0 rolled after the seed: seeded {seeded:?}, source {before:?}"
    );
    assert!(before[1][0].1 > seeded[1][0].1, "partition 1 grew: {before:?}");

    // The tail on the same mirror and catalog.
    let (mut applier, mut shipper) = direct_link(&mirror, &catalog, broker.log_dir(), "dr", &["--topics", TOPIC]);
    let caught_up = |shipper: &mut Service, applier: &mut Service| {
        let start = Instant::now();
        loop {
            shipper.assert_running();
            applier.assert_running();
            let (src, mir) = (sizes(&source_dirs), sizes(&mirror_dirs));
            if src == mir {
                return;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "never caught up: source {src:?}, mirror {mir:?}\n--- ship ---\n{}\n--- apply ---\n{}",
                shipper.log(),
                applier.log()
            );
            std::thread::sleep(POLL);
        }
    };
    caught_up(&mut shipper, &mut applier);
    // And it keeps following.
    produce_round(&bootstrap, 5);
    caught_up(&mut shipper, &mut applier);
    assert_eq!(
        logs(&source_dirs[1]).len(),
        1,
        "partition 1 is still in its seeded segment (promoted as the tail's active segment)"
    );
    let (code, ship_log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{ship_log}");
    let (code, apply_log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{apply_log}");
    assert_eq!(
        apply_log.matches("handing over a partition installed by apply").count(),
        PARTITIONS as usize,
        "apply:\n{apply_log}"
    );
    // Nothing shipped twice: the shipper resumed at the seeded ends, not at byte 0 (a resend is compared and
    // logged by neither side, so check the positions the applier handed over instead).
    for (p, seg) in seeded.iter().enumerate() {
        let (base, size) = seg.last().unwrap();
        let needle = format!("partition={TOPIC}-{p}");
        let line = apply_log
            .lines()
            .find(|l| l.contains("handing over") && l.contains(&needle))
            .unwrap_or_else(|| panic!("no hand-over of {needle}:\n{apply_log}"));
        assert!(
            line.contains(&format!("segment_base={base}")) && line.contains(&format!("position={size}")),
            "{line}"
        );
    }

    // The mirror is the source, byte for byte, and sound.
    for (m, src) in mirror_dirs.iter().zip(&source_dirs) {
        for (base, path) in logs(src) {
            let mirrored = m.join(path.file_name().unwrap());
            assert!(
                std::fs::read(&path).unwrap() == std::fs::read(&mirrored).unwrap(),
                "segment {base} of {} differs on the mirror",
                src.display()
            );
        }
    }
    // Sealed segments carry the source's companions too (installed by `apply`, or sent with the tail's seals).
    for (m, src) in mirror_dirs.iter().zip(&source_dirs) {
        let sealed: Vec<i64> = logs(src).keys().copied().collect();
        for base in &sealed[..sealed.len() - 1] {
            for ext in ["index", "timeindex", "txnindex"] {
                let name = format!("{base:020}.{ext}");
                assert_eq!(
                    std::fs::read(src.join(&name)).ok(),
                    std::fs::read(m.join(&name)).ok(),
                    "{} differs on the mirror",
                    src.join(&name).display()
                );
            }
        }
    }
    // `verify --strict` on the stopped mirror: sound, exit 0, not a finding, active segments included (the tail
    // appender keeps their `.txnindex` entries, offset and time index right, from the hand-over on).
    let verify = segmirror_verify(
        &mirror_dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    assert!(
        !verify
            .stdout
            .lines()
            .any(|l| l.starts_with("error") || l.starts_with("warning")),
        "findings on the stopped mirror:\n{verify}"
    );

    let uncommitted = consume_all(&bootstrap, TOPIC, None, Isolation::ReadUncommitted).unwrap();
    let committed = consume_all(&bootstrap, TOPIC, None, Isolation::ReadCommitted).unwrap();
    assert!(committed.len() < uncommitted.len(), "no aborted records on the source");
    broker.stop().unwrap();

    // Promote into a stopped target: every record exactly once at identical offsets.
    let mut target = KafkaBroker::start(BrokerConfig::new("e2e-handover-target")).unwrap();
    let spec = TopicSpec::new(TOPIC, PARTITIONS).config("retention.ms", -1);
    admin(&target.bootstrap(), &[spec], &[]).unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(&mirror, target.log_dir(), &catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| target.partition_dir(TOPIC, p)).collect();
    let verify = segmirror_verify(
        &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    target.restart().unwrap();
    let tb = target.bootstrap();
    let t_uncommitted = consume_all(&tb, TOPIC, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        record_identities(&t_uncommitted),
        record_identities(&uncommitted),
        "read_uncommitted on the target"
    );
    let t_committed = consume_all(&tb, TOPIC, None, Isolation::ReadCommitted).unwrap();
    assert_eq!(
        record_identities(&t_committed),
        record_identities(&committed),
        "read_committed on the target"
    );
    target.stop().unwrap();
}

/// A mirror whose last installed segment no longer has the SHA-256 its catalog recorded (here: a catalog that
/// recorded zeros) is not taken over: `segmirror apply --listen` stops at the first session with an error naming
/// the file and both digests, and writes nothing (no tail state, the mirror's files unchanged).
#[test]
fn tail_refuses_a_mirror_whose_files_differ_from_the_catalog() {
    use segment_format::record::{BatchBuilder, RecordSpec};
    use segment_format::writer::{PartitionWriter, WriterConfig};
    use segmirror_tests::mirror::{files_under, record_writer_mirror};

    let work = tempfile::tempdir().unwrap();
    let (source, mirror, catalog) = (
        work.path().join("source"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    // The same writer-made partition as the source's log dir and as the mirror `apply` left.
    let write = |root: &Path| {
        let config = WriterConfig {
            segment_bytes: 1024,
            fsync: false,
            topic_id: Some(segment_format::partition_metadata::Uuid([5; 16])),
            ..WriterConfig::default()
        };
        let mut w = PartitionWriter::create(root, "refused", 0, 0, config).unwrap();
        w.become_leader(1);
        for i in 0..20 {
            let base = w.next_offset();
            w.append(
                BatchBuilder::new(base)
                    .partition_leader_epoch(1)
                    .record(RecordSpec::new(0, 1_700_000_000_000 + i).with_value(vec![b'x'; 100])),
            )
            .unwrap();
        }
        w.close().unwrap()
    };
    write(&source);
    // A Kafka log dir: the shipper reads the source cluster id from its meta.properties.
    segment_format::writer::LogDirIdentity::random(1)
        .unwrap()
        .meta_properties()
        .write(&source.join(segment_format::dir::META_PROPERTIES_FILE))
        .unwrap();
    let written = write(&mirror);
    assert!(written.segments.len() >= 2, "the writer rolled");
    // Recorded as `apply` records, except that every SHA-256 is zeros: the files do not match the catalog.
    record_writer_mirror(&catalog, "dr", &written.topic_id.to_string(), &[(&written, 0)]).unwrap();
    // The mirror's files (apply's lock files aside), with their bytes.
    let contents = || -> BTreeMap<PathBuf, Vec<u8>> {
        files_under(&mirror)
            .unwrap()
            .into_iter()
            .filter(|(rel, _)| {
                let rel = rel.to_string_lossy();
                !rel.starts_with(".segmirror-apply") && !rel.starts_with(".tail")
            })
            .map(|(rel, abs)| (rel, std::fs::read(abs).unwrap()))
            .collect()
    };
    let before = contents();

    let (mut applier, shipper) = direct_link(&mirror, &catalog, &source, "dr", &[]);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = applier.exited() {
            break status;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the applier did not stop:\n{}\n--- ship ---\n{}",
            applier.log(),
            shipper.log()
        );
        std::thread::sleep(POLL);
    };
    std::thread::sleep(Duration::from_millis(100));
    let log = applier.log();
    assert_eq!(status.code(), Some(2), "apply (this side's own failure):\n{log}");
    let last = written.segments.last().unwrap();
    let last_log = mirror.join("refused-0").join(format!("{:020}.log", last.base_offset));
    assert!(
        log.contains("cannot continue the mirror `apply` installed")
            && log.contains(&last_log.display().to_string())
            && log.contains(&format!("the catalog recorded {} at install", "0".repeat(64))),
        "apply:\n{log}"
    );
    assert!(!mirror.join(".tail").join("refused-0.json").exists());
    let after = contents();
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|rel| before.get(*rel) != after.get(*rel))
        .collect();
    assert!(changed.is_empty(), "the mirror's files changed: {changed:?}");
}
