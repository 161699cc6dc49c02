//! The producer snapshot a broker writes at its log end on clean shutdown travels with the last segment version:
//! `seed` ships it, the applier installs it byte for byte, a longer version replaces it (the stale one removed, on
//! disk and by the sweep), a snapshot that does not parse is neither shipped nor installed, and the mirror
//! verifies sound (`--strict`) with it.

#[path = "../../applier/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::*;
use segment_format::dir::{segment_file_name, PartitionDir, SegmentFileKind, META_PROPERTIES_FILE};
use segment_format::partition_metadata::Uuid;
use segment_format::verify::{verify_paths, Depth, NoProgress as NoVerifyProgress, Strictness, VerifyOptions};
use segment_format::writer::LogDirIdentity;
use segmirror_applier::report::{PartitionOutcome, Refusal, Verdict};
use segmirror_shipper::bucket::seed::{self, SeedConfig, SeedReport};
use segmirror_transport::digest::digest_of;
use segmirror_transport::manifest::{KeyPrefix, Manifest, PartitionKey, MAX_MANIFEST_BYTES};

const TOPIC: &str = "orders";
const TOPIC_ID: Uuid = Uuid([9; 16]);
/// Small segments, so the partition has sealed segments and an active one.
const SEGMENT_BYTES: u64 = 4096;

fn snapshot_name(offset: i64) -> String {
    segment_file_name(offset, SegmentFileKind::Snapshot)
}

/// The source partition after `batches` batches and a clean shutdown (a fresh write of the same deterministic
/// history: a longer run's first bytes equal a shorter run's).
fn source_with(root: &Path, batches: i64) -> (PathBuf, i64) {
    let dir = root.join(format!("{TOPIC}-0"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let dir = write_partition(root, TOPIC, TOPIC_ID, batches, SEGMENT_BYTES);
    let pd = PartitionDir::open(&dir).unwrap();
    let leo = batches * 3;
    assert!(
        pd.snapshots.iter().any(|s| s.offset == leo),
        "the writer's clean shutdown leaves {leo}.snapshot: {:?}",
        pd.snapshots
    );
    assert!(pd.segments.len() >= 2, "sealed and active segments");
    (dir, leo)
}

async fn seed_all(w: &World, source_root: &Path) -> SeedReport {
    // A Kafka log dir: `seed` reads the cluster id from its meta.properties.
    let meta = source_root.join(META_PROPERTIES_FILE);
    if !meta.exists() {
        LogDirIdentity::random(1)
            .unwrap()
            .meta_properties()
            .write(&meta)
            .unwrap();
    }
    let config = SeedConfig::new(vec![source_root.to_path_buf()], LINK).unwrap();
    let report = seed::seed(&w.store, &config, &seed::NoProgress).await.unwrap();
    assert!(!report.has_failures() && !report.has_refusals(), "{report:#?}");
    report
}

async fn last_manifest(w: &World, dir: &Path) -> (String, Manifest) {
    let pd = PartitionDir::open(dir).unwrap();
    let base = pd.segments.last().unwrap().base_offset;
    let key = PartitionKey::new(KeyPrefix::root(), LINK, TOPIC, 0)
        .unwrap()
        .manifest_key(&TOPIC_ID, base)
        .unwrap();
    let bytes = w.store.get_bytes(&key, MAX_MANIFEST_BYTES).await.unwrap();
    let m = Manifest::from_json(&key, &bytes).unwrap();
    (key, m)
}

/// The mirror partition holds exactly the source's segment files, base snapshots, checkpoint and metadata, plus
/// the log-end snapshot, all byte-identical (but the active segment's rebuilt indexes), and verifies sound.
fn assert_mirror_with_end_snapshot(source: &Path, mirror: &Path, leo: i64) {
    let mut expected = expected_mirror_files(source);
    let name = snapshot_name(leo);
    expected.insert(name.clone(), std::fs::read(source.join(&name)).unwrap());
    let actual = tree(mirror);
    let names = |m: &std::collections::BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&actual), names(&expected), "files of {}", mirror.display());
    // The shipper rebuilds the active segment's indexes from its batches (at its own index interval).
    let active = PartitionDir::open(source).unwrap().segments.last().unwrap().base_offset;
    for (file, bytes) in &expected {
        let rebuilt = file.starts_with(&format!("{active:020}.")) && file.ends_with("index");
        assert!(rebuilt || actual.get(file) == Some(bytes), "{file} differs");
    }
    let verified = verify_paths(
        &[mirror.to_path_buf()],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoVerifyProgress,
    );
    assert!(
        verified.is_sound() && verified.io_errors.is_empty() && verified.findings.is_empty(),
        "{:#?}",
        verified.findings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_end_snapshot_is_installed_and_replaced_with_the_version() {
    let w = World::new();
    let source_root = w.path("source");
    let (source, leo) = source_with(&source_root, 25);
    seed_all(&w, &source_root).await;
    let (_, m) = last_manifest(&w, &source).await;
    let end = m
        .end_snapshot
        .as_ref()
        .expect("the active version carries the log-end snapshot");
    assert_eq!(end.name.base_offset, leo);
    assert_eq!(m.next_offset, leo);

    let report = w.apply_with(w.config().with_deep_validation(true)).await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    let mirror = w.mirror().join(format!("{TOPIC}-0"));
    assert_mirror_with_end_snapshot(&source, &mirror, leo);

    // An apply with nothing new keeps it (the sweep knows it is the installed log end) and fetches nothing.
    w.counting.reset();
    let again = w.apply().await;
    assert_eq!(again.segments_installed(), 0, "{again:#?}");
    assert!(w.counting.data_gets().is_empty());
    assert!(mirror.join(snapshot_name(leo)).is_file());

    // More writes, a clean shutdown again: the longer version brings the new log-end snapshot, the old one goes.
    let (source, leo2) = source_with(&source_root, 40);
    seed_all(&w, &source_root).await;
    let report = w.apply_with(w.config().with_deep_validation(true)).await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    let bases: Vec<i64> = PartitionDir::open(&source)
        .unwrap()
        .segments
        .iter()
        .map(|s| s.base_offset)
        .collect();
    if !bases.contains(&leo) {
        assert!(
            !mirror.join(snapshot_name(leo)).exists(),
            "stale end snapshot {leo} removed"
        );
    }
    assert_mirror_with_end_snapshot(&source, &mirror, leo2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_end_snapshot_of_a_replaced_version_in_the_same_segment_is_removed() {
    // One large segment: the replacement grows the same segment, whose old end snapshot lies inside the new range.
    let w = World::new();
    let source_root = w.path("source");
    let write = |batches: i64| {
        let dir = source_root.join(format!("{TOPIC}-0"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
        write_partition(&source_root, TOPIC, TOPIC_ID, batches, 1 << 20)
    };
    let source = write(5);
    seed_all(&w, &source_root).await;
    assert_eq!(w.apply().await.verdict(), Verdict::Ok);
    let mirror = w.mirror().join(format!("{TOPIC}-0"));
    assert!(mirror.join(snapshot_name(15)).is_file());
    let source = {
        let _ = source;
        write(8)
    };
    seed_all(&w, &source_root).await;
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    let p = &report.partitions[0];
    assert_eq!(p.installed.len(), 1);
    assert_eq!(p.installed[0].replaced, Some(15), "{p:#?}");
    assert!(
        !mirror.join(snapshot_name(15)).exists(),
        "stale end snapshot removed at placing"
    );
    assert!(
        p.removed.is_empty(),
        "placing removed it, not the sweep: {:?}",
        p.removed
    );
    assert_mirror_with_end_snapshot(&source, &mirror, 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_snapshot_that_does_not_parse_is_neither_shipped_nor_installed() {
    // A running broker's snapshot may be empty or half written: seed leaves it out with a warning.
    let w = World::new();
    let source_root = w.path("source");
    let (source, leo) = source_with(&source_root, 25);
    let path = source.join(snapshot_name(leo));
    let good = std::fs::read(&path).unwrap();
    std::fs::write(&path, b"").unwrap();
    let report = seed_all(&w, &source_root).await;
    let warnings = &report.partition(TOPIC, 0).unwrap().warnings;
    assert!(
        warnings
            .iter()
            .any(|f| f.path == path && f.to_string().contains("end snapshot not shipped")),
        "{warnings:#?}"
    );
    let (key, m) = last_manifest(&w, &source).await;
    assert_eq!(m.end_snapshot, None);
    assert_eq!(w.apply().await.verdict(), Verdict::Ok);
    let mirror = w.mirror().join(format!("{TOPIC}-0"));
    assert!(!mirror.join(snapshot_name(leo)).exists());

    // Once the source has a good one (a clean shutdown), the next seed adds it to the same version.
    std::fs::write(&path, &good).unwrap();
    seed_all(&w, &source_root).await;
    let (key2, m2) = last_manifest(&w, &source).await;
    assert_eq!(key2, key);
    assert_eq!(m2.next_offset, m.next_offset);
    assert_eq!(m2.files, m.files, "the segment's objects are reused");
    let end = m2.end_snapshot.as_ref().unwrap();
    assert_eq!(end.size, good.len() as u64);
    assert_eq!(end.sha256, digest_of(&good).sha256);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_snapshot_object_that_is_not_a_snapshot_is_refused_naming_its_key() {
    let w = World::new();
    let source_root = w.path("source");
    let (source, leo) = source_with(&source_root, 25);
    seed_all(&w, &source_root).await;
    let (key, mut m) = last_manifest(&w, &source).await;
    // Bytes of a legal snapshot size that are no snapshot, with a manifest that describes them faithfully: only
    // parsing them tells.
    let garbage = vec![0x5a_u8; 10 + 46];
    let end = m.end_snapshot.as_mut().unwrap();
    let digest = digest_of(&garbage);
    end.size = digest.size;
    end.crc32c = digest.crc32c;
    end.sha256 = digest.sha256;
    let data_key = end.key.clone();
    w.store.put_bytes(&data_key, garbage).await.unwrap();
    w.store.put_bytes(&key, m.to_json()).await.unwrap();

    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Refused, "{report:#?}");
    let (_, refused) = report.refusals().next().unwrap();
    assert_eq!(refused.manifest_key, key);
    match &refused.refusal {
        Refusal::Corrupt { findings, .. } => {
            assert!(findings.iter().any(|f| f.path == Path::new(&data_key)), "{findings:#?}")
        }
        other => panic!("{other:?}"),
    }
    let mirror = w.mirror().join(format!("{TOPIC}-0"));
    assert!(
        !mirror.join(snapshot_name(leo)).exists(),
        "nothing of the version installed"
    );
    assert!(matches!(report.partitions[0].outcome, PartitionOutcome::Refused(_)));
}
