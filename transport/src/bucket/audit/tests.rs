//! Audit tests: a bucket built by hand with one partition per scenario, audited
//! once; every defect class must be reported on the right key with the right
//! severity, and nothing else.

use std::collections::BTreeSet;

use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::report::Severity;
use segmirror_contract::manifest::{
    EpochStart, KeyPrefix, Manifest, ManifestFile, PartitionKey, SegmentFileName, SegmentRange, ShipperStamp,
    MANIFEST_FORMAT_V1,
};

use super::*;
use crate::bucket::lease::HeldLease;
use crate::bucket::store::StoreUrl;
use segmirror_contract::digest::digest_of;

const LINK: &str = "dc1";
const TID: Uuid = Uuid([9; 16]);
const TID2: Uuid = Uuid([10; 16]);

/// One segment to ship.
#[derive(Clone)]
struct Seg {
    topic_id: Uuid,
    base: i64,
    batches: i64,
    /// `None`: last offset + 1.
    next: Option<i64>,
    sealed: bool,
    epoch: i32,
    lease_epoch: u64,
    created_at_ms: i64,
    log_start_offset: i64,
}

fn seg(base: i64, batches: i64) -> Seg {
    Seg {
        topic_id: TID,
        base,
        batches,
        next: None,
        sealed: true,
        epoch: 1,
        lease_epoch: 1,
        created_at_ms: 1000 + base,
        log_start_offset: 0,
    }
}

/// Two records per batch, offsets from `base`, leader epoch `epoch`.
fn log_bytes(base: i64, batches: i64, epoch: i32) -> Vec<u8> {
    let mut out = Vec::new();
    for b in 0..batches {
        let offset = base + 2 * b;
        out.extend(
            BatchBuilder::new(offset)
                .partition_leader_epoch(epoch)
                .records((0..2).map(|i| {
                    RecordSpec::new(i, 10_000 + offset + i64::from(i))
                        .with_key(format!("k{offset}"))
                        .with_value(vec![7u8; 20])
                }))
                .build(),
        );
    }
    out
}

/// One time-index entry: the segment's max timestamp at its last offset.
fn time_index(base: i64, last: i64, max_ts: i64) -> Vec<u8> {
    let mut out = max_ts.to_be_bytes().to_vec();
    out.extend_from_slice(&((last - base) as i32).to_be_bytes());
    out
}

struct Bucket {
    _dir: tempfile::TempDir,
    store: Store,
    prefix: KeyPrefix,
}

impl Bucket {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(dir.path().join("bucket").to_str().unwrap()).unwrap();
        let store = Store::open(&url, &Default::default()).unwrap();
        Bucket {
            _dir: dir,
            store,
            prefix: KeyPrefix::new("mirror").unwrap(),
        }
    }

    fn partition(&self, topic: &str) -> PartitionKey {
        PartitionKey::new(self.prefix.clone(), LINK, topic, 0).unwrap()
    }

    async fn lease(&self, topic: &str) {
        HeldLease::acquire(&self.store, &self.partition(topic), "test-shipper")
            .await
            .unwrap();
    }

    /// Upload a segment's files and its manifest; returns the manifest key and manifest.
    async fn ship(&self, topic: &str, s: Seg) -> (String, Manifest) {
        let p = self.partition(topic);
        let log = log_bytes(s.base, s.batches, s.epoch);
        let last = s.base + 2 * s.batches - 1;
        let max_ts = 10_000 + last;
        let next = s.next.unwrap_or(last + 1);
        let range = SegmentRange::new(s.base, next).unwrap();
        let mut files = Vec::new();
        for (kind, bytes) in [
            (SegmentFileKind::Log, log),
            (SegmentFileKind::Index, Vec::new()),
            (SegmentFileKind::TimeIndex, time_index(s.base, last, max_ts)),
        ] {
            let name = SegmentFileName::new(s.base, kind);
            let key = p.data_key(&s.topic_id, range, name).unwrap();
            let d = digest_of(&bytes);
            self.store.put_bytes(&key, bytes).await.unwrap();
            files.push(ManifestFile {
                name,
                key,
                size: d.size,
                crc32c: d.crc32c,
                sha256: d.sha256,
                mtime_ms: 5,
            });
        }
        let m = Manifest {
            format: MANIFEST_FORMAT_V1.into(),
            link: LINK.into(),
            topic: topic.into(),
            partition: 0,
            source_topic_id: s.topic_id,
            source_cluster_id: "cluster-a".into(),
            base_offset: s.base,
            first_offset: Some(s.base),
            last_offset: Some(last),
            next_offset: next,
            batches: s.batches as u64,
            records: 2 * s.batches as u64,
            max_timestamp: max_ts,
            sealed: s.sealed,
            epochs: vec![EpochStart {
                epoch: s.epoch,
                start_offset: s.base,
            }],
            log_start_offset: s.log_start_offset,
            files,
            end_snapshot: None,
            log_chunks: Vec::new(),
            shipper: ShipperStamp {
                id: "test-shipper".into(),
                lease_epoch: s.lease_epoch,
            },
            created_at_ms: s.created_at_ms,
        };
        m.validate().unwrap();
        let key = p.manifest_key(&s.topic_id, s.base).unwrap();
        self.store.put_bytes(&key, m.to_json()).await.unwrap();
        (key, m)
    }

    async fn put_manifest(&self, key: &str, m: &Manifest) {
        self.store.put_bytes(key, m.to_json()).await.unwrap();
    }

    async fn audit(&self, deep: bool) -> AuditReport {
        let options = AuditOptions {
            verify_hashes: true,
            deep,
            temp_dir: None,
        };
        audit_store(&self.store, &self.prefix, &options).await.unwrap()
    }
}

fn key_of(m: &Manifest, kind: SegmentFileKind) -> String {
    m.file(kind).unwrap().key.clone()
}

fn found(report: &AuditReport) -> BTreeSet<(Check, String, Severity)> {
    report
        .findings
        .iter()
        .map(|f| {
            (
                f.check,
                f.finding.path.to_string_lossy().into_owned(),
                f.finding.severity,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_bucket_has_no_findings_even_deep() {
    let b = Bucket::new();
    b.lease("healthy").await;
    b.ship("healthy", seg(0, 5)).await;
    b.ship("healthy", seg(10, 5)).await;
    // The active segment, shipped up to its last complete batch.
    b.ship(
        "healthy",
        Seg {
            sealed: false,
            ..seg(20, 3)
        },
    )
    .await;
    let report = b.audit(true).await;
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
    assert!(report.is_sound());
    assert_eq!(report.objects, 1 + 3 * 4);
    assert!(report.bytes_downloaded > 0);
    let [p] = report.partitions.as_slice() else {
        panic!("{:?}", report.partitions)
    };
    assert_eq!((p.link.as_str(), p.topic.as_str(), p.partition), (LINK, "healthy", 0));
    assert_eq!(p.lease_epochs, 1);
    assert_eq!(
        p.current_lease.as_ref().map(|l| (l.epoch, l.owner.as_str())),
        Some((1, "test-shipper"))
    );
    let [l] = p.lineages.as_slice() else { panic!() };
    assert_eq!(
        (l.manifests, l.valid_manifests, l.base_offset, l.next_offset),
        (3, 3, Some(0), Some(26))
    );
    // The report serialises with a stable kind per finding.
    serde_json::to_string(&report).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_defect_class_is_reported_on_its_key() {
    let b = Bucket::new();
    let s = &b.store;
    let mut expected: BTreeSet<(Check, String, Severity)> = BTreeSet::new();
    let mut expect = |check, key: &str, severity| {
        expected.insert((check, key.to_string(), severity));
    };
    use Severity::{Error as E, Warning as W};

    // Data objects: missing, wrong size, wrong bytes.
    b.lease("objects").await;
    let (_, m) = b.ship("objects", seg(0, 5)).await;
    s.delete(&key_of(&m, SegmentFileKind::Index)).await.unwrap();
    expect(Check::MissingObject, &key_of(&m, SegmentFileKind::Index), E);
    s.put_bytes(&key_of(&m, SegmentFileKind::TimeIndex), vec![0u8; 24])
        .await
        .unwrap();
    expect(Check::SizeMismatch, &key_of(&m, SegmentFileKind::TimeIndex), E);
    let (_, m2) = b.ship("objects", seg(10, 5)).await;
    let log_key = key_of(&m2, SegmentFileKind::Log);
    let mut log = s.get_bytes(&log_key, 1 << 20).await.unwrap().to_vec();
    log[100] ^= 0xff;
    s.put_bytes(&log_key, log).await.unwrap();
    expect(Check::HashMismatch, &log_key, E); // sha256 and crc32c: two findings, one key

    // Orphans: an interrupted upload, and the older version of a re-shipped active segment.
    let orphan = b
        .partition("objects")
        .data_key(
            &TID,
            SegmentRange::new(500, 510).unwrap(),
            SegmentFileName::new(500, SegmentFileKind::Log),
        )
        .unwrap();
    s.put_bytes(&orphan, &b"x"[..]).await.unwrap();
    expect(Check::OrphanObject, &orphan, W);
    let (_, old) = b
        .ship(
            "objects",
            Seg {
                sealed: false,
                ..seg(20, 2)
            },
        )
        .await;
    b.ship(
        "objects",
        Seg {
            sealed: false,
            ..seg(20, 3)
        },
    )
    .await;
    for f in &old.files {
        expect(Check::OrphanObject, &f.key, W);
    }

    // Keys that are not ours.
    for k in ["mirror/dc1/objects/0/notes.txt", "mirror/stray"] {
        s.put_bytes(k, &b"?"[..]).await.unwrap();
        expect(Check::UnknownKey, k, W);
    }

    // Invalid manifests: garbage, a future format, a manifest stored under another base.
    b.lease("manifests").await;
    let p = b.partition("manifests");
    let garbage = p.manifest_key(&TID, 100).unwrap();
    s.put_bytes(&garbage, &b"{not json"[..]).await.unwrap();
    expect(Check::InvalidManifest, &garbage, E);
    let (_, good) = b.ship("manifests", seg(0, 5)).await;
    let future = p.manifest_key(&TID, 200).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&good.to_json()).unwrap();
    v["format"] = "segmirror.manifest.v2".into();
    s.put_bytes(&future, serde_json::to_vec(&v).unwrap()).await.unwrap();
    expect(Check::InvalidManifest, &future, E);
    let moved = p.manifest_key(&TID, 300).unwrap();
    b.put_manifest(&moved, &good).await;
    expect(Check::InvalidManifest, &moved, E);

    // Offset chain.
    b.lease("gap").await;
    b.ship("gap", seg(0, 5)).await;
    let (k, _) = b.ship("gap", seg(20, 5)).await;
    expect(Check::OffsetGap, &k, E);

    b.lease("retention").await;
    b.ship("retention", seg(0, 5)).await;
    let (k, _) = b
        .ship(
            "retention",
            Seg {
                log_start_offset: 20,
                ..seg(20, 5)
            },
        )
        .await;
    expect(Check::RetentionGap, &k, W);

    b.lease("tail").await;
    let (k, _) = b
        .ship(
            "tail",
            Seg {
                sealed: false,
                ..seg(0, 4)
            },
        )
        .await;
    b.ship("tail", seg(10, 5)).await;
    expect(Check::UnshippedTail, &k, W);

    b.lease("overlap").await;
    b.ship("overlap", seg(0, 5)).await;
    let (k, _) = b.ship("overlap", seg(6, 5)).await;
    expect(Check::OffsetOverlap, &k, E);

    b.lease("compacted").await;
    let (k, _) = b
        .ship(
            "compacted",
            Seg {
                created_at_ms: 1000,
                ..seg(10, 5)
            },
        )
        .await;
    b.ship(
        "compacted",
        Seg {
            created_at_ms: 2000,
            next: Some(20),
            ..seg(0, 3)
        },
    )
    .await;
    b.ship(
        "compacted",
        Seg {
            created_at_ms: 1500,
            ..seg(20, 5)
        },
    )
    .await;
    expect(Check::SupersededManifest, &k, W);

    b.lease("epochs").await;
    b.ship("epochs", Seg { epoch: 5, ..seg(0, 5) }).await;
    let (k, _) = b.ship("epochs", Seg { epoch: 3, ..seg(10, 5) }).await;
    expect(Check::EpochRegression, &k, E);

    // Leases.
    b.lease("unleased").await;
    let (k, _) = b
        .ship(
            "unleased",
            Seg {
                lease_epoch: 9,
                ..seg(0, 5)
            },
        )
        .await;
    expect(Check::UnleasedCommit, &k, E);

    b.lease("zombie").await;
    b.lease("zombie").await;
    b.ship(
        "zombie",
        Seg {
            lease_epoch: 2,
            created_at_ms: 1000,
            ..seg(0, 5)
        },
    )
    .await;
    let (k, _) = b
        .ship(
            "zombie",
            Seg {
                lease_epoch: 1,
                created_at_ms: 2000,
                ..seg(10, 5)
            },
        )
        .await;
    expect(Check::StaleLeaseCommit, &k, W);

    b.lease("badlease").await;
    let lease_key = b.partition("badlease").lease_key(1);
    s.put_bytes(
        &lease_key,
        &b"{\"format\":\"segmirror.lease.v1\",\"owner\":\"\",\"epoch\":1,\"acquired_at_ms\":0}"[..],
    )
    .await
    .unwrap();
    b.ship("badlease", seg(0, 5)).await;
    expect(Check::InvalidLease, &lease_key, E);

    // A recreated topic: two lineages, reported, not merged (each chain is fine on its own).
    b.lease("recreated").await;
    b.ship("recreated", seg(0, 5)).await;
    b.ship(
        "recreated",
        Seg {
            topic_id: TID2,
            created_at_ms: 9000,
            ..seg(0, 2)
        },
    )
    .await;
    expect(Check::LineageBreak, &b.partition("recreated").lineage_dir(&TID2), W);

    let report = b.audit(false).await;
    assert_eq!(found(&report), expected, "{:#?}", report.findings);
    assert_eq!(report.of(Check::HashMismatch).count(), 2, "sha256 and crc32c");
    assert!(!report.is_sound());
    // Offsets are named where known.
    let gap = report.of(Check::OffsetGap).next().unwrap();
    assert_eq!(gap.finding.offset, Some(10));
    assert!(
        gap.finding.defect.to_string().contains("[10, 20)"),
        "{}",
        gap.finding.defect
    );
    let recreated = report.partitions.iter().find(|p| p.topic == "recreated").unwrap();
    assert_eq!(recreated.lineages.len(), 2);
    assert_eq!(recreated.lineages[1].topic_id, TID2.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_audit_finds_what_hashes_cannot() {
    let b = Bucket::new();
    b.lease("deep").await;
    // A batch with a bad CRC, committed with hashes of the bad bytes: only the deep audit sees it.
    let (mk, m) = b.ship("deep", seg(0, 5)).await;
    let log_key = key_of(&m, SegmentFileKind::Log);
    let mut log = b.store.get_bytes(&log_key, 1 << 20).await.unwrap().to_vec();
    let last = log.len() - 1;
    log[last] ^= 0x01;
    let d = digest_of(&log);
    b.store.put_bytes(&log_key, log).await.unwrap();
    let mut m = m;
    let f = m
        .files
        .iter_mut()
        .find(|f| f.name.kind == SegmentFileKind::Log)
        .unwrap();
    (f.sha256, f.crc32c) = (d.sha256, d.crc32c);
    b.put_manifest(&mk, &m).await;
    // A manifest whose counts disagree with its data.
    let (mk2, mut m2) = b.ship("deep", seg(10, 5)).await;
    m2.records = 9;
    b.put_manifest(&mk2, &m2).await;

    let shallow = b.audit(false).await;
    assert!(shallow.findings.is_empty(), "{:#?}", shallow.findings);
    let deep = b.audit(true).await;
    let crc: Vec<_> = deep.of(Check::DeepVerify).collect();
    assert!(!crc.is_empty(), "{:#?}", deep.findings);
    assert!(
        crc.iter().all(|f| f.finding.path == std::path::Path::new(&log_key)),
        "{crc:#?}"
    );
    assert!(crc
        .iter()
        .any(|f| matches!(f.finding.defect, Defect::CrcMismatch { .. }) && f.finding.severity == Severity::Error));
    let mismatch: Vec<_> = deep.of(Check::ManifestDataMismatch).collect();
    assert_eq!(mismatch.len(), 1, "{:#?}", deep.findings);
    assert_eq!(mismatch[0].finding.path, std::path::Path::new(&mk2));
    assert!(
        mismatch[0].finding.defect.to_string().contains("records 9"),
        "{}",
        mismatch[0].finding.defect
    );
}

#[tokio::test]
async fn foreign_entries_and_upload_leftovers_are_findings_and_nothing_else_stops() {
    let b = Bucket::new();
    b.lease("t").await;
    let (key, _) = b.ship("t", seg(0, 5)).await;
    let root = b._dir.path().join("bucket");
    // What a killed upload leaves, a name no key can have, a link loop, a FIFO.
    std::fs::write(root.join(format!("{key}#3")), b"partial").unwrap();
    std::fs::write(root.join("mirror/bad\nname"), b"x").unwrap();
    std::os::unix::fs::symlink(root.join("mirror"), root.join("mirror/loop")).unwrap();
    let fifo = std::ffi::CString::new(root.join("mirror/pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

    let report = tokio::time::timeout(std::time::Duration::from_secs(60), b.audit(false))
        .await
        .expect("the audit hung");
    let unknown: BTreeSet<String> = report
        .of(Check::UnknownKey)
        .map(|f| f.finding.path.to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = ["mirror/bad\nname", "mirror/loop", "mirror/pipe"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(unknown, expected);
    let leftovers: Vec<&AuditFinding> = report.of(Check::UploadLeftover).collect();
    assert_eq!(leftovers.len(), 1);
    assert_eq!(leftovers[0].finding.path.to_str(), Some(format!("{key}#3").as_str()));
    assert_eq!(leftovers[0].finding.severity, Severity::Warning);
    // The partition is still audited, and sound.
    assert!(report.is_sound(), "{:#?}", report.findings);
    assert_eq!(report.partitions.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_end_snapshot_is_audited_like_every_other_object() {
    use segment_format::snapshot::{ProducerSnapshot, ProducerSnapshotEntry};
    let b = Bucket::new();
    b.lease("end").await;
    b.ship("end", seg(0, 5)).await;
    let (key, mut m) = b
        .ship(
            "end",
            Seg {
                sealed: false,
                ..seg(10, 3)
            },
        )
        .await;
    let snapshot = ProducerSnapshot {
        entries: vec![ProducerSnapshotEntry {
            producer_id: 4,
            epoch: 0,
            last_sequence: 2,
            last_offset: 15,
            offset_delta: 0,
            timestamp: 10_015,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        }],
    }
    .to_bytes();
    let end_key = b.partition("end").end_snapshot_key(&TID, m.range().unwrap());
    let put = |bytes: Vec<u8>| {
        let d = digest_of(&bytes);
        (
            bytes,
            ManifestFile {
                name: SegmentFileName::new(16, SegmentFileKind::Snapshot),
                key: end_key.clone(),
                size: d.size,
                crc32c: d.crc32c,
                sha256: d.sha256,
                mtime_ms: 5,
            },
        )
    };
    let (bytes, file) = put(snapshot.clone());
    b.store.put_bytes(&end_key, bytes).await.unwrap();
    m.end_snapshot = Some(file);
    m.validate().unwrap();
    b.put_manifest(&key, &m).await;
    let report = b.audit(true).await;
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
    assert_eq!(
        report.objects,
        1 + 2 * 4 + 1,
        "the end snapshot is one of the lineage's objects"
    );

    // Bytes the manifest describes faithfully but that are no snapshot: only the deep audit sees it, on its key.
    let mut garbage = snapshot.clone();
    garbage[0] = 0x7f;
    let (bytes, file) = put(garbage);
    b.store.put_bytes(&end_key, bytes).await.unwrap();
    m.end_snapshot = Some(file);
    b.put_manifest(&key, &m).await;
    assert!(b.audit(false).await.findings.is_empty());
    let report = b.audit(true).await;
    assert_eq!(
        found(&report),
        BTreeSet::from([(Check::DeepVerify, end_key.clone(), Severity::Error)]),
        "{:#?}",
        report.findings
    );

    // Gone from the bucket: a missing object named by the manifest.
    b.store.delete(&end_key).await.unwrap();
    let report = b.audit(false).await;
    assert_eq!(
        found(&report),
        BTreeSet::from([(Check::MissingObject, end_key, Severity::Error)]),
        "{:#?}",
        report.findings
    );
}
