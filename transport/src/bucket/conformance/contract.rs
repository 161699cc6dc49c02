//! The conformance suite of the traits: what every transport — the object
//! store on a local folder or S3, a fault-injecting wrapper in pass-through
//! mode, the direct transport to come — must do, checked only through
//! [`SegmentSink`] and [`SegmentSource`].
//!
//! Each check works below a fresh random key prefix, so runs against a shared
//! bucket do not interfere. The functions panic on failure, as test helpers do.

use std::path::Path;

use bytes::Bytes;
use segment_format::dir::SegmentFileKind;
use segment_format::partition_metadata::Uuid;

use super::{fresh_prefix, test_bytes};
use crate::bucket::traits::{SegmentSink, SegmentSource, StagedFile};
use segmirror_contract::digest::digest_of;
use segmirror_contract::error::{Error, MismatchKind};
use segmirror_contract::index::ManifestRead;
use segmirror_contract::manifest::{
    KeyPrefix, Manifest, ManifestFile, PartitionKey, SegmentFileName, SegmentRange, ShipperStamp, MANIFEST_FORMAT_V1,
};

/// The lineage every check ships.
pub const TOPIC_ID: Uuid = Uuid([0x5e; 16]);
/// Offsets of the segment version every check ships.
pub const BASE: i64 = 100;
pub const NEXT: i64 = 150;
/// Size of the `.log` every check ships: large enough to take more than one read chunk of a backend.
pub const LOG_BYTES: usize = (3 << 20) + 17;

/// Run every check of the suite against `t`.
pub async fn run_all<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    staged_files_are_fetched_verified(t).await;
    wrong_expectations_are_mismatches(t).await;
    documents_are_capped(t).await;
    a_committed_version_is_indexed_and_read_back(t).await;
    a_stale_lease_cannot_commit(t).await;
    an_invalid_manifest_is_never_committed(t).await;
    foreign_keys_are_set_aside(t).await;
}

/// A fresh prefix and a partition under it.
pub fn partition(what: &str) -> PartitionKey {
    let prefix = KeyPrefix::new(&fresh_prefix(what)).expect("fresh prefixes are valid");
    PartitionKey::new(prefix, "conformance", "orders", 3).expect("a valid partition key")
}

/// Stage a `.log` of [`LOG_BYTES`], a 16-byte `.index` and a 24-byte `.timeindex` of the version `[BASE, NEXT)`, from files in `dir`.
pub async fn stage_version<T: SegmentSink + ?Sized>(t: &T, p: &PartitionKey, dir: &Path) -> Vec<(ManifestFile, Bytes)> {
    let range = SegmentRange::new(BASE, NEXT).unwrap();
    let mut staged = Vec::new();
    for (kind, bytes) in [
        (SegmentFileKind::Log, test_bytes(LOG_BYTES, 1)),
        (SegmentFileKind::Index, test_bytes(16, 2)),
        (SegmentFileKind::TimeIndex, test_bytes(24, 3)),
    ] {
        let name = SegmentFileName::new(BASE, kind);
        let key = p.data_key(&TOPIC_ID, range, name).unwrap();
        let local = dir.join(name.to_string());
        std::fs::write(&local, &bytes).unwrap();
        let StagedFile { key: at, digest } = t.stage_file(&key, &local, None).await.unwrap();
        assert_eq!(at, key);
        assert_eq!(digest, digest_of(&bytes), "{key}: the digest of what was staged");
        staged.push((
            ManifestFile {
                name,
                key,
                size: digest.size,
                crc32c: digest.crc32c,
                sha256: digest.sha256,
                mtime_ms: 1_700_000_000_000,
            },
            Bytes::from(bytes),
        ));
    }
    staged
}

/// [`stage_version`], the manifest entries only.
pub async fn staged_files<T: SegmentSink + ?Sized>(t: &T, p: &PartitionKey, dir: &Path) -> Vec<ManifestFile> {
    stage_version(t, p, dir).await.into_iter().map(|(f, _)| f).collect()
}

/// A valid manifest for `files` of the version `[BASE, NEXT)` of `p`, committed under `lease_epoch`.
pub fn manifest_for(p: &PartitionKey, files: Vec<ManifestFile>, lease_epoch: u64) -> Manifest {
    Manifest {
        format: MANIFEST_FORMAT_V1.into(),
        link: p.link().into(),
        topic: p.topic().into(),
        partition: p.partition(),
        source_topic_id: TOPIC_ID,
        source_cluster_id: "conformance-cluster".into(),
        base_offset: BASE,
        first_offset: Some(BASE),
        last_offset: Some(NEXT - 1),
        next_offset: NEXT,
        batches: 5,
        records: 50,
        max_timestamp: 1_700_000_000_000,
        sealed: true,
        epochs: vec![],
        log_start_offset: 0,
        files,
        end_snapshot: None,
        log_chunks: Vec::new(),
        shipper: ShipperStamp {
            id: "conformance".into(),
            lease_epoch,
        },
        created_at_ms: 1_700_000_000_001,
    }
}

/// Files staged from disk and from memory come back byte for byte, with the digests they were staged with.
pub async fn staged_files_are_fetched_verified<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("fetch");
    let dir = tempfile::tempdir().unwrap();
    for (file, bytes) in stage_version(t, &p, dir.path()).await {
        let dest = dir.path().join("fetched");
        let digest = t.fetch_manifest_file(&file, &dest).await.unwrap();
        assert_eq!(digest, digest_of(&bytes));
        assert_eq!(std::fs::read(&dest).unwrap(), bytes, "{}", file.key);
    }
    let key = p.lease_dir() + "/../not-a-lease";
    assert!(
        matches!(
            t.stage_bytes(&key, Bytes::from_static(b"x")).await,
            Err(Error::BadKey { .. })
        ),
        "a key that is not canonical never reaches the transport"
    );
    let small = format!("{}/small", p.dir());
    let staged = t.stage_bytes(&small, Bytes::from_static(b"small file")).await.unwrap();
    assert_eq!(staged.digest, digest_of(b"small file"));
    let dest = dir.path().join("small");
    t.fetch_file(&small, &dest, staged.digest.size, &staged.digest.sha256)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), b"small file");
}

/// A fetch whose expectations do not hold fails with a mismatch naming what differed, and leaves no file; a
/// missing object is [`Error::NotFound`].
pub async fn wrong_expectations_are_mismatches<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("mismatch");
    let dir = tempfile::tempdir().unwrap();
    let staged = stage_version(t, &p, dir.path()).await;
    let (file, _) = &staged[0];
    let dest = dir.path().join("fetched");
    match t.fetch_file(&file.key, &dest, file.size + 1, &file.sha256).await {
        Err(Error::Mismatch {
            what: MismatchKind::Size,
            key,
            ..
        }) => assert_eq!(key, file.key),
        other => panic!("expected a size mismatch, got {other:?}"),
    }
    assert!(!dest.exists(), "a refused fetch left {}", dest.display());
    let mut wrong = file.sha256;
    wrong.0[0] ^= 1;
    match t.fetch_file(&file.key, &dest, file.size, &wrong).await {
        Err(Error::Mismatch {
            what: MismatchKind::Sha256,
            ..
        }) => {}
        other => panic!("expected a sha256 mismatch, got {other:?}"),
    }
    assert!(!dest.exists(), "a refused fetch left {}", dest.display());
    let missing = format!("{}/missing", p.dir());
    assert!(matches!(
        t.fetch_file(&missing, &dest, 1, &file.sha256).await,
        Err(Error::NotFound { .. })
    ));
    assert!(!dest.exists());
}

/// Documents are refused above the caller's limit, before they are read.
pub async fn documents_are_capped<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("cap");
    let key = format!("{}/doc", p.dir());
    t.stage_bytes(&key, Bytes::from(vec![b'x'; 100])).await.unwrap();
    assert_eq!(t.read_document(&key, 100).await.unwrap().len(), 100);
    assert!(matches!(
        t.read_document(&key, 99).await,
        Err(Error::TooLarge {
            size: 100,
            limit: 99,
            ..
        })
    ));
    assert!(matches!(
        t.read_document(&format!("{}/none", p.dir()), 10).await,
        Err(Error::NotFound { .. })
    ));
}

/// Stage, take a lease, commit: the index shows the version under its partition and lineage, the manifest reads
/// back equal, a manifest that is not there is [`ManifestRead::Gone`], and the lease reads back.
pub async fn a_committed_version_is_indexed_and_read_back<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("commit");
    let dir = tempfile::tempdir().unwrap();
    let staged = stage_version(t, &p, dir.path()).await;
    let lease = t.acquire_lease(&p, "conformance").await.unwrap();
    assert_eq!(lease.epoch, 1);
    assert_eq!(t.read_lease(&p, 1).await.unwrap(), lease);
    let manifest = manifest_for(&p, staged.iter().map(|(f, _)| f.clone()).collect(), lease.epoch);
    t.commit(p.prefix(), &lease, &manifest).await.unwrap();

    let index = t.index(p.prefix(), None).await.unwrap();
    assert!(index.foreign.is_empty() && index.skipped.is_empty(), "{index:?}");
    assert_eq!(index.partitions.len(), 1);
    let part = &index.partitions[&p];
    assert_eq!(part.leases.keys().copied().collect::<Vec<_>>(), [1]);
    let lineage = &part.lineages[&TOPIC_ID];
    let key = p.manifest_key(&TOPIC_ID, BASE).unwrap();
    assert_eq!(lineage.manifests.keys().copied().collect::<Vec<_>>(), [BASE]);
    assert_eq!(lineage.manifests[&BASE].key, key);
    assert_eq!(lineage.data.len(), staged.len());
    assert_eq!(
        t.index(p.prefix(), Some("other-link")).await.unwrap().partitions.len(),
        0
    );

    match t.read_manifest(p.prefix(), &key).await.unwrap() {
        ManifestRead::Valid(read) => assert_eq!(*read, manifest),
        other => panic!("expected the committed manifest, got {other:?}"),
    }
    let absent = p.manifest_key(&TOPIC_ID, NEXT).unwrap();
    assert!(matches!(
        t.read_manifest(p.prefix(), &absent).await.unwrap(),
        ManifestRead::Gone
    ));
    // Read under another prefix, the same manifest is not where it claims to be.
    let elsewhere = partition("commit-elsewhere");
    let copied = elsewhere.manifest_key(&TOPIC_ID, BASE).unwrap();
    t.stage_bytes(&copied, Bytes::from(manifest.to_json())).await.unwrap();
    assert!(matches!(
        t.read_manifest(elsewhere.prefix(), &copied).await.unwrap(),
        ManifestRead::Invalid(Error::BadDocument { .. })
    ));
}

/// A second shipper's lease fences the first: its commit fails with [`Error::Fenced`] and writes nothing.
pub async fn a_stale_lease_cannot_commit<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("fence");
    let dir = tempfile::tempdir().unwrap();
    let files = staged_files(t, &p, dir.path()).await;
    let old = t.acquire_lease(&p, "shipper-a").await.unwrap();
    let new = t.acquire_lease(&p, "shipper-b").await.unwrap();
    assert!(new.epoch > old.epoch);
    let manifest = manifest_for(&p, files, old.epoch);
    match t.commit(p.prefix(), &old, &manifest).await {
        Err(Error::Fenced {
            held_epoch,
            newer_epoch,
            ..
        }) => assert_eq!((held_epoch, newer_epoch), (old.epoch, new.epoch)),
        other => panic!("expected the stale holder to be fenced, got {other:?}"),
    }
    let key = p.manifest_key(&TOPIC_ID, BASE).unwrap();
    assert!(matches!(
        t.read_manifest(p.prefix(), &key).await.unwrap(),
        ManifestRead::Gone
    ));
    let manifest = manifest_for(&p, manifest.files.clone(), new.epoch);
    t.commit(p.prefix(), &new, &manifest).await.unwrap();
    assert!(matches!(
        t.read_manifest(p.prefix(), &key).await.unwrap(),
        ManifestRead::Valid(_)
    ));
}

/// A manifest that does not validate is refused at commit, before anything is written.
pub async fn an_invalid_manifest_is_never_committed<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("invalid");
    let dir = tempfile::tempdir().unwrap();
    let files = staged_files(t, &p, dir.path()).await;
    let lease = t.acquire_lease(&p, "conformance").await.unwrap();
    let mut manifest = manifest_for(&p, files, lease.epoch);
    manifest.first_offset = Some(NEXT + 5);
    assert!(matches!(
        t.commit(p.prefix(), &lease, &manifest).await,
        Err(Error::BadDocument { .. })
    ));
    let index = t.index(p.prefix(), None).await.unwrap();
    assert!(index.partitions[&p].lineages[&TOPIC_ID].manifests.is_empty());
}

/// Keys under the prefix that the contract does not build are listed as foreign, with a reason; the rest of the
/// index is unaffected.
pub async fn foreign_keys_are_set_aside<T: SegmentSink + SegmentSource + ?Sized>(t: &T) {
    let p = partition("foreign");
    let lease = t.acquire_lease(&p, "conformance").await.unwrap();
    let foreign = [format!("{}/notes.txt", p.dir()), format!("{}/x", p.prefix().join("l"))];
    for key in &foreign {
        t.stage_bytes(key, Bytes::from_static(b"?")).await.unwrap();
    }
    let index = t.index(p.prefix(), None).await.unwrap();
    let mut listed: Vec<&str> = index.foreign.iter().map(|f| f.key.as_str()).collect();
    listed.sort();
    let mut expected: Vec<&str> = foreign.iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(listed, expected);
    assert!(index.foreign.iter().all(|f| !f.reason.is_empty()));
    assert_eq!(
        index.partitions[&p].leases.keys().copied().collect::<Vec<_>>(),
        [lease.epoch]
    );
}
