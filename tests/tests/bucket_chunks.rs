//! Appendable chunks in buckets (manifest v2): `seed` rerun against a growing active segment uploads only the
//! appended bytes, `apply` after each run installs only what it has not installed (never downloading its installed
//! prefix again) and gives a mirror equal to the source, the audit counts chunk objects as referenced, a bucket
//! written in the old (v1, whole prefix) format keeps applying and turns chunked without re-uploading, and hostile
//! chunks are refused naming the key and field.

#[path = "../../applier/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::*;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::{verify_paths, Depth, NoProgress as NoVerifyProgress, Strictness, VerifyOptions};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_applier::{PartitionOutcome, Refusal, Verdict};
use segmirror_shipper::bucket::seed::{self, SeedConfig};
use segmirror_transport::bucket::audit::{audit_store, AuditOptions, Check};
use segmirror_transport::digest::digest_of;
use segmirror_transport::manifest::{KeyPrefix, LogChunk, Manifest, PartitionKey, MAX_MANIFEST_BYTES};
use segmirror_transport::SegmentSink;

const TOPIC: &str = "orders";
/// Large enough that the whole test stays in one active segment.
const SEGMENT_BYTES: u64 = 1 << 20;

fn topic_id() -> Uuid {
    Uuid([7; 16])
}

fn batch(base: i64, i: i64) -> BatchBuilder {
    let ts = 1_700_000_000_000 + i * 1000;
    BatchBuilder::new(base)
        .partition_leader_epoch(0)
        .record(
            RecordSpec::new(0, ts)
                .with_key(format!("k{i}"))
                .with_value(vec![b'v'; 400]),
        )
        .record(RecordSpec::new(1, ts + 1).with_value(vec![b'w'; 20]))
}

/// A source (running: no clean-shutdown files) with one partition of `batches` batches in its active segment.
/// Returns the partition dir and its log end offset.
fn source(log_dir: &Path, batches: i64, running: bool) -> (PathBuf, i64) {
    source_rolled(log_dir, batches, running, false)
}

/// As [`source`]; with `roll` the broker rolled after the last batch (segment 0 sealed, an empty active one).
/// Deterministic: a longer source's segment 0 starts with a shorter one's bytes.
fn source_rolled(log_dir: &Path, batches: i64, running: bool, roll: bool) -> (PathBuf, i64) {
    let config = WriterConfig {
        segment_bytes: SEGMENT_BYTES,
        index_interval_bytes: 512,
        running,
        fsync: false,
        topic_id: Some(topic_id()),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, TOPIC, 0, 0, config).unwrap();
    w.become_leader(0);
    for i in 0..batches {
        w.append(batch(0, i)).unwrap();
    }
    if roll {
        w.roll().unwrap();
    }
    let written = w.close().unwrap();
    let identity = LogDirIdentity {
        cluster_id: "test-cluster-id".into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    let state = if running {
        LogDirState::Running
    } else {
        LogDirState::CleanShutdown { broker_epoch: 1 }
    };
    write_log_dir_files(log_dir, &identity, std::slice::from_ref(&written), state).unwrap();
    (written.dir, written.log_end_offset)
}

/// Append `n` batches (one offset each... two records each) at `next`, as the broker appends; returns the new end
/// offset and the bytes appended.
fn grow(partition_dir: &Path, mut next: i64, n: i64) -> (i64, u64) {
    let log = partition_dir.join(segment_file_name(0, SegmentFileKind::Log));
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    let mut bytes = 0;
    for i in 0..n {
        let b = batch(next, 1000 + next + i).build();
        f.write_all(&b).unwrap();
        bytes += b.len() as u64;
        next += 2;
    }
    (next, bytes)
}

/// Bytes of the bucket's `.log` data (whole-prefix `.log` objects and chunk objects), by walking the folder.
fn log_object_bytes(bucket: &Path) -> u64 {
    fn walk(dir: &Path, total: &mut u64) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, total);
            } else if path.extension().is_some_and(|e| e == "log" || e == "logchunk") {
                *total += std::fs::metadata(&path).unwrap().len();
            }
        }
    }
    let mut total = 0;
    walk(bucket, &mut total);
    total
}

fn seed_config(log_dir: &Path) -> SeedConfig {
    let mut c = SeedConfig::new(vec![log_dir.to_path_buf()], LINK).unwrap();
    c.shipper_id = "test-shipper".into();
    c
}

async fn active_manifest(w: &World) -> (String, Manifest) {
    manifest_in(&w.store).await
}

async fn manifest_in(store: &segmirror_transport::Store) -> (String, Manifest) {
    let pk = PartitionKey::new(KeyPrefix::root(), LINK, TOPIC, 0).unwrap();
    let key = pk.manifest_key(&topic_id(), 0).unwrap();
    let bytes = store.get_bytes(&key, MAX_MANIFEST_BYTES).await.unwrap();
    (key.clone(), Manifest::from_json(&key, &bytes).unwrap())
}

fn mirror_log(w: &World) -> Vec<u8> {
    std::fs::read(
        w.mirror()
            .join(format!("{TOPIC}-0"))
            .join(segment_file_name(0, SegmentFileKind::Log)),
    )
    .unwrap()
}

fn source_log(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_reruns_upload_only_appended_bytes_and_apply_installs_only_new_chunks() {
    let w = World::new();
    let log_dir = w.path("source");
    let (dir, mut next) = source(&log_dir, 40, true);
    let bucket = w.path("bucket");
    let config = seed_config(&log_dir);

    let mut previous_chunks: Vec<LogChunk> = Vec::new();
    for run in 0..3 {
        let appended = if run == 0 {
            source_log(&dir).len() as u64
        } else {
            let (n, bytes) = grow(&dir, next, 15 + run);
            next = n;
            bytes
        };
        let before = log_object_bytes(&bucket);
        let report = seed::seed(&w.store, &config, &seed::NoProgress).await.unwrap();
        assert!(report.is_complete(), "run {run}: {report:#?}");
        let uploaded = log_object_bytes(&bucket) - before;
        assert_eq!(
            uploaded, appended,
            "run {run}: the .log bytes uploaded are exactly the bytes appended since the last run"
        );

        let (_, m) = active_manifest(&w).await;
        assert!(!m.sealed);
        assert_eq!(m.next_offset, next);
        assert_eq!(
            m.is_chunked(),
            run > 0,
            "the first version is v1, grown ones are chunked"
        );
        if run > 0 {
            // Earlier chunks are referenced unchanged; one new chunk holds the new bytes.
            assert_eq!(m.log_chunks.len(), run as usize + 1);
            assert_eq!(m.log_chunks[..previous_chunks.len()], previous_chunks[..]);
            assert_eq!(m.log_chunks.last().unwrap().size(), appended);
        }
        previous_chunks = if m.is_chunked() {
            m.log_chunks.clone()
        } else {
            v1_as_chunk(&m)
        };

        w.counting.reset();
        let applied = w.apply().await;
        assert_eq!(applied.verdict(), Verdict::Ok, "run {run}: {applied:#?}");
        assert_eq!(
            mirror_log(&w),
            source_log(&dir),
            "run {run}: the mirror's .log is the source's"
        );
        if run > 0 {
            // Only the new chunk was downloaded: the installed prefix is proved by its digests, not fetched.
            let data_gets = w.counting.data_gets();
            let new_key = &m.log_chunks.last().unwrap().key;
            assert!(data_gets.iter().any(|k| k == new_key), "{data_gets:?}");
            for c in &m.log_chunks[..m.log_chunks.len() - 1] {
                assert!(!data_gets.contains(&c.key), "run {run}: {} downloaded again", c.key);
            }
        }
    }
    let verified = verify_paths(
        &[w.mirror().join(format!("{TOPIC}-0"))],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoVerifyProgress,
    );
    assert!(verified.is_sound(), "{:#?}", verified.findings);

    // The audit hashes chunk objects and counts them as referenced: no error, no chunk or referenced `.log` orphaned.
    let audit = audit_store(
        &w.store,
        &KeyPrefix::root(),
        &AuditOptions {
            verify_hashes: true,
            deep: true,
            temp_dir: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(audit.errors(), 0, "{:#?}", audit.findings);
    let referenced: Vec<&str> = previous_chunks.iter().map(|c| c.key.as_str()).collect();
    for f in &audit.findings {
        if f.check == Check::OrphanObject {
            let key = f.finding.path.to_string_lossy();
            assert!(
                !referenced.contains(&key.as_ref()),
                "referenced chunk reported as orphan: {key}"
            );
            assert!(!key.ends_with(".logchunk"), "{key}");
        }
    }

    // A rerun with nothing new uploads nothing and the apply installs nothing.
    let before = log_object_bytes(&bucket);
    seed::seed(&w.store, &config, &seed::NoProgress).await.unwrap();
    assert_eq!(log_object_bytes(&bucket), before);
    w.counting.reset();
    assert_eq!(w.apply().await.segments_installed(), 0);
    assert!(w.counting.data_gets().is_empty());
}

/// The chunk a v1 version stands for (its whole `.log`), as the shipper references it.
fn v1_as_chunk(m: &Manifest) -> Vec<LogChunk> {
    let log = m.file(SegmentFileKind::Log).unwrap();
    vec![LogChunk {
        from: 0,
        to: log.size,
        next_offset: m.next_offset,
        key: log.key.clone(),
        crc32c: log.crc32c,
        sha256: log.sha256,
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_format_bucket_applies_and_a_new_seed_continues_it_without_reuploading() {
    let w = World::new();
    let log_dir = w.path("source");
    // Cleanly shut down: the hand-made v1 shipper ships the broker's own (trimmed) indexes.
    let (dir, next) = source(&log_dir, 30, false);
    // Written the way a seed before chunks did: every version v1, the active one as its whole prefix.
    let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &dir).await;
    assert!(shipped.iter().all(|s| !s.manifest.is_chunked()));
    let first = w.apply().await;
    assert_eq!(first.verdict(), Verdict::Ok, "{first:#?}");
    assert_eq!(mirror_log(&w), source_log(&dir));

    let (_, appended) = grow(&dir, next, 10);
    let before = log_object_bytes(&w.path("bucket"));
    let report = seed::seed(&w.store, &seed_config(&log_dir), &seed::NoProgress)
        .await
        .unwrap();
    assert!(report.is_complete(), "{report:#?}");
    assert_eq!(log_object_bytes(&w.path("bucket")) - before, appended);
    let (_, m) = active_manifest(&w).await;
    let old_log = shipped
        .last()
        .unwrap()
        .manifest
        .file(SegmentFileKind::Log)
        .unwrap()
        .clone();
    assert_eq!(
        m.log_chunks[0].key, old_log.key,
        "the v1 prefix object is the first chunk"
    );

    w.counting.reset();
    let second = w.apply().await;
    assert_eq!(second.verdict(), Verdict::Ok, "{second:#?}");
    assert!(!w.counting.data_gets().contains(&old_log.key));
    assert_eq!(mirror_log(&w), source_log(&dir));
}

/// A bucket with a grown, chunked active version, before any apply.
async fn chunked_bucket(w: &World) -> (String, Manifest) {
    let log_dir = w.path("source");
    let (dir, next) = source(&log_dir, 20, true);
    let config = seed_config(&log_dir);
    assert!(seed::seed(&w.store, &config, &seed::NoProgress)
        .await
        .unwrap()
        .is_complete());
    grow(&dir, next, 12);
    assert!(seed::seed(&w.store, &config, &seed::NoProgress)
        .await
        .unwrap()
        .is_complete());
    let (key, m) = active_manifest(w).await;
    assert!(m.is_chunked() && m.log_chunks.len() == 2, "{m:#?}");
    (key, m)
}

fn refusal(report: &segmirror_applier::ApplyReport) -> Refusal {
    match &report.partitions[0].outcome {
        PartitionOutcome::Refused(r) => r.refusal.clone(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_object_whose_bytes_changed_is_refused_naming_its_key() {
    let w = World::new();
    let (_, m) = chunked_bucket(&w).await;
    let key = m.log_chunks[1].key.clone();
    let mut bytes = w.store.get_bytes(&key, u64::MAX).await.unwrap().to_vec();
    bytes[40] ^= 1;
    w.store.put_bytes(&key, bytes).await.unwrap();
    let report = w.apply().await;
    match refusal(&report) {
        Refusal::Mismatch { key: k, what, .. } => assert_eq!((k.as_str(), what.as_str()), (key.as_str(), "sha256")),
        other => panic!("{other:?}"),
    }
    assert!(!w
        .mirror()
        .join(format!("{TOPIC}-0"))
        .join(segment_file_name(0, SegmentFileKind::Log))
        .exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_does_not_end_on_a_batch_boundary_is_refused() {
    let w = World::new();
    let (key, mut m) = chunked_bucket(&w).await;
    // Re-cut the second chunk 7 bytes into its bytes: both pieces carry true digests, so only the batch check can
    // tell the cut is not on a batch boundary.
    let second = m.log_chunks.pop().unwrap();
    let bytes = w.store.get_bytes(&second.key, u64::MAX).await.unwrap().to_vec();
    let pk = PartitionKey::new(KeyPrefix::root(), LINK, TOPIC, 0).unwrap();
    let cut = 7usize;
    for (from, piece, next_offset) in [
        (second.from, &bytes[..cut], second.next_offset - 2),
        (second.from + cut as u64, &bytes[cut..], second.next_offset),
    ] {
        let range = segmirror_transport::manifest::SegmentRange::new(0, next_offset).unwrap();
        let chunk_key = pk.chunk_key(&topic_id(), range, from);
        w.store.stage_bytes(&chunk_key, piece.to_vec().into()).await.unwrap();
        let d = digest_of(piece);
        m.log_chunks.push(LogChunk {
            from,
            to: from + piece.len() as u64,
            next_offset,
            key: chunk_key,
            crc32c: d.crc32c,
            sha256: d.sha256,
        });
    }
    m.validate().unwrap();
    put_manifest(
        &w.store,
        &Shipped {
            key,
            manifest: m.clone(),
        },
    )
    .await;
    let report = w.apply().await;
    match refusal(&report) {
        Refusal::InvalidManifest { reason } => {
            assert!(reason.contains(&m.log_chunks[1].key), "{reason}");
            assert!(reason.contains("not a batch boundary"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_bytes_that_differ_from_a_referenced_chunk_are_refused_not_overwritten() {
    let w = World::new();
    let log_dir = w.path("source");
    let (dir, next) = source(&log_dir, 20, true);
    let config = seed_config(&log_dir);
    assert!(seed::seed(&w.store, &config, &seed::NoProgress)
        .await
        .unwrap()
        .is_complete());
    assert_eq!(w.apply().await.verdict(), Verdict::Ok);
    grow(&dir, next, 5);
    assert!(seed::seed(&w.store, &config, &seed::NoProgress)
        .await
        .unwrap()
        .is_complete());
    // The referenced first chunk now claims other digests than the installed bytes (a rewritten bucket).
    let (key, mut m) = active_manifest(&w).await;
    let fake = digest_of(b"not the installed bytes");
    m.log_chunks[0].sha256 = fake.sha256;
    put_manifest(
        &w.store,
        &Shipped {
            key,
            manifest: m.clone(),
        },
    )
    .await;
    let installed = mirror_log(&w);
    let report = w.apply().await;
    match refusal(&report) {
        Refusal::Mismatch { key, what, .. } => {
            assert!(key.starts_with(&m.log_chunks[0].key), "{key}");
            assert_eq!(what, "sha256");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mirror_log(&w), installed, "the installed segment is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sealed_version_references_the_shipped_chunks_and_adds_only_the_rest() {
    let w = World::new();
    // One source partition seen three times: running with 20 batches, running with 35, rolled after 50.
    let (small, _) = source(&w.path("s1"), 20, true);
    let (grown, _) = source(&w.path("s2"), 35, true);
    let (rolled, _) = source_rolled(&w.path("s3"), 50, false, true);
    let bucket = w.path("bucket");
    let mut chunks_before = Vec::new();
    for (run, (log_dir, dir)) in [("s1", &small), ("s2", &grown), ("s3", &rolled)]
        .into_iter()
        .enumerate()
    {
        let before = log_object_bytes(&bucket);
        let report = seed::seed(&w.store, &seed_config(&w.path(log_dir)), &seed::NoProgress)
            .await
            .unwrap();
        assert!(report.is_complete(), "{log_dir}: {report:#?}");
        let shipped_before = if run == 0 {
            0
        } else {
            source_log([&small, &grown][run - 1]).len() as u64
        };
        assert_eq!(
            log_object_bytes(&bucket) - before,
            source_log(dir).len() as u64 - shipped_before,
            "{log_dir}: only the bytes after what was shipped went up"
        );
        let (_, m) = active_manifest(&w).await;
        assert_eq!(m.sealed, run == 2, "{log_dir}");
        if run > 0 {
            assert!(m.is_chunked());
            assert_eq!(
                m.log_chunks[..chunks_before.len()],
                chunks_before[..],
                "{log_dir}: earlier chunks referenced"
            );
        }
        chunks_before = if m.is_chunked() {
            m.log_chunks.clone()
        } else {
            v1_as_chunk(&m)
        };

        w.counting.reset();
        let applied = w.apply().await;
        assert_eq!(applied.verdict(), Verdict::Ok, "{log_dir}: {applied:#?}");
        assert_eq!(mirror_log(&w), source_log(dir), "{log_dir}");
        if run > 0 {
            let gets = w.counting.data_gets();
            for c in &chunks_before[..chunks_before.len() - 1] {
                assert!(!gets.contains(&c.key), "{log_dir}: {} downloaded again", c.key);
            }
        }
    }
    // The sealed segment came with the broker's own indexes.
    let mirror = w.mirror().join(format!("{TOPIC}-0"));
    for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        let name = segment_file_name(0, kind);
        assert_eq!(
            std::fs::read(mirror.join(&name)).unwrap(),
            std::fs::read(rolled.join(&name)).unwrap()
        );
    }
    let verified = verify_paths(
        &[mirror],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoVerifyProgress,
    );
    assert!(verified.is_sound(), "{:#?}", verified.findings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_travel_through_s3_as_through_a_folder() {
    use segmirror_tests::s3::{MotoServer, ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY};
    use segmirror_transport::bucket::store::{S3Options, StoreUrl};
    let server = MotoServer::start().unwrap();
    let url = server.store_url("");
    let options = S3Options {
        endpoint: Some(server.endpoint()),
        region: Some(REGION.into()),
        access_key_id: Some(ACCESS_KEY_ID.into()),
        secret_access_key: Some(SECRET_ACCESS_KEY.into()),
        session_token: None,
        allow_http: Some(true),
    };
    let store = segmirror_transport::Store::open(&StoreUrl::parse(&url).unwrap(), &options).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("source");
    let (dir, mut next) = source(&log_dir, 20, true);
    let config = seed_config(&log_dir);
    let mirror = tmp.path().join("mirror");
    let catalog = tmp.path().join("catalog/catalog.sqlite");
    for run in 0..3 {
        if run > 0 {
            next = grow(&dir, next, 9).0;
        }
        let report = seed::seed(&store, &config, &seed::NoProgress).await.unwrap();
        assert!(report.is_complete(), "run {run}: {report:#?}");
        let (_, m) = manifest_in(&store).await;
        assert_eq!(
            (m.is_chunked(), m.log_chunks.len()),
            (run > 0, if run > 0 { run + 1 } else { 0 })
        );
        let apply = segmirror_applier::ApplyConfig::new(store.clone(), url.clone(), mirror.clone()).with_link(LINK);
        let catalog = segmirror_catalog::Catalog::open(&catalog).unwrap();
        let applied = segmirror_applier::apply(&apply, catalog, &segmirror_applier::NoProgress)
            .await
            .unwrap();
        assert_eq!(applied.verdict(), Verdict::Ok, "run {run}: {applied:#?}");
        let installed = std::fs::read(
            mirror
                .join(format!("{TOPIC}-0"))
                .join(segment_file_name(0, SegmentFileKind::Log)),
        );
        assert_eq!(installed.unwrap(), source_log(&dir), "run {run}");
    }
}
