//! Follow mode's in-place append: a follower installs each grown version of the active segment
//! the continuous shipper's rounds commit by appending the new chunks to the installed `.log` — the same file
//! (inode), no staged copy of the prefix, the prefix read back only once per follower — after every check, and
//! the mirror is the one a staged install of the same bucket gives, byte for byte. A hostile chunk or a lying
//! manifest is refused naming the key and field, and leaves the installed file as it was.

#[path = "../../applier/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use segment_format::batch::ControlType;
use segment_format::closed_log;
use segment_format::control::{end_txn_marker_batch, EndTxnMarker};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::txn_ends::TxnEnds;
use segment_format::verify::{verify_paths, Depth, NoProgress as NoVerifyProgress, Strictness, VerifyOptions};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_applier::{Applier, ApplyConfig, ApplyReport, NoProgress, PartitionOutcome, Refusal, Verdict};
use segmirror_catalog::Catalog;
use segmirror_shipper::bucket::seed::{self, HeldLeases, SeedConfig};
use segmirror_transport::manifest::{KeyPrefix, Manifest, PartitionKey, MAX_MANIFEST_BYTES};

const TOPIC: &str = "orders";

fn topic_id() -> Uuid {
    Uuid([5; 16])
}

fn batch(base: i64, i: i64) -> BatchBuilder {
    let ts = 1_700_000_000_000 + i * 1000;
    BatchBuilder::new(base)
        .partition_leader_epoch(0)
        .record(
            RecordSpec::new(0, ts)
                .with_key(format!("k{i}"))
                .with_value(vec![b'v'; 300]),
        )
        .record(RecordSpec::new(1, ts + 1).with_value(vec![b'w'; 20]))
}

/// A running source with one partition of `batches` batches in its active segment: its dir and log end offset.
fn source(log_dir: &Path, batches: i64) -> (PathBuf, i64) {
    let config = WriterConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 4096,
        running: true,
        fsync: false,
        topic_id: Some(topic_id()),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, TOPIC, 0, 0, config).unwrap();
    w.become_leader(0);
    for i in 0..batches {
        w.append(batch(0, i)).unwrap();
    }
    let written = w.close().unwrap();
    let identity = LogDirIdentity {
        cluster_id: "test-cluster-id".into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    write_log_dir_files(log_dir, &identity, std::slice::from_ref(&written), LogDirState::Running).unwrap();
    (written.dir, written.log_end_offset)
}

/// Append `n` batches at `next` as the broker does: the new end offset and the bytes appended.
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

struct Shipper {
    config: SeedConfig,
    held: HeldLeases,
}

impl Shipper {
    fn new(log_dir: &Path) -> Shipper {
        let mut config = SeedConfig::new(vec![log_dir.to_path_buf()], LINK).unwrap();
        config.shipper_id = "test-shipper".into();
        Shipper {
            config,
            held: HeldLeases::default(),
        }
    }

    /// One round of `ship --store`.
    async fn round(&self, w: &World) {
        let report = seed::seed_round(&w.store, &self.config, &seed::NoProgress, Some(&self.held))
            .await
            .unwrap();
        assert!(report.is_complete(), "{report:#?}");
    }
}

/// A source of 30 batches shipped once, and a follower of its bucket that has not run yet: the source partition's
/// dir, its log end, the shipper and the follower.
async fn following(w: &World) -> (PathBuf, i64, Shipper, Applier) {
    let log_dir = w.path("source");
    let (dir, next) = source(&log_dir, 30);
    let shipper = Shipper::new(&log_dir);
    shipper.round(w).await;
    (dir, next, shipper, Applier::new(w.config(), w.catalog()).appending())
}

fn mirror_log(root: &Path) -> PathBuf {
    root.join(format!("{TOPIC}-0"))
        .join(segment_file_name(0, SegmentFileKind::Log))
}

async fn run(applier: &mut Applier) -> ApplyReport {
    applier.run(&NoProgress).await.unwrap()
}

async fn active_manifest(w: &World) -> (String, Manifest) {
    let pk = PartitionKey::new(KeyPrefix::root(), LINK, TOPIC, 0).unwrap();
    let key = pk.manifest_key(&topic_id(), 0).unwrap();
    let bytes = w.store.get_bytes(&key, MAX_MANIFEST_BYTES).await.unwrap();
    (key.clone(), Manifest::from_json(&key, &bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_appends_grown_versions_in_place_and_ends_with_the_mirror_a_staged_install_gives() {
    let w = World::new();
    let log_dir = w.path("source");
    let (dir, mut next) = source(&log_dir, 30);
    let shipper = Shipper::new(&log_dir);
    shipper.round(&w).await;
    let mut applier = Applier::new(w.config(), w.catalog()).appending();
    assert_eq!(run(&mut applier).await.verdict(), Verdict::Ok);
    let installed = mirror_log(&w.mirror());
    let inode = std::fs::metadata(&installed).unwrap().ino();
    let first_size = std::fs::metadata(&installed).unwrap().len();

    for round in 0..3 {
        let before = std::fs::metadata(&installed).unwrap().len();
        let (n, appended) = grow(&dir, next, 5 + round);
        next = n;
        shipper.round(&w).await;
        let report = run(&mut applier).await;
        assert_eq!(report.verdict(), Verdict::Ok, "round {round}: {report:#?}");
        let p = &report.partitions[0];
        assert_eq!(p.installed.len(), 1, "round {round}");
        assert_eq!(
            (p.bytes_fetched, p.bytes_reused),
            (appended, before),
            "round {round}: the new chunk downloaded, the installed prefix kept"
        );
        let meta = std::fs::metadata(&installed).unwrap();
        assert_eq!(meta.ino(), inode, "round {round}: appended in place, not renamed over");
        assert_eq!(
            std::fs::read(&installed).unwrap(),
            std::fs::read(dir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap(),
            "round {round}"
        );
        // The prefix is read back once, at the first append (hashed and indexed), never again.
        assert_eq!(applier.append_proof_bytes_read(), 2 * first_size, "round {round}");
    }
    // A transaction opened, then committed: each appended version is recorded with how it leaves the producer
    // (what promotion reads instead of the segment), and still appended in place.
    let catalog = w.catalog();
    let id = catalog
        .partition(&segmirror_catalog::PartitionKey::new(LINK, TOPIC, 0))
        .unwrap()
        .id;
    // No transactional producer yet (and so no producer's last marker).
    let none = TxnEnds {
        closings: Some(Default::default()),
        ..TxnEnds::default()
    };
    assert_eq!(catalog.installed_txn_ends(id).unwrap()[&0].1, Some(none));
    let open = BatchBuilder::new(next)
        .partition_leader_epoch(0)
        .producer(77, 0, 0)
        .transactional(true)
        .record(RecordSpec::new(0, 1_700_000_100_000).with_value(vec![b't'; 40]))
        .build();
    let marker = EndTxnMarker {
        control_type: ControlType::Commit,
        coordinator_epoch: 0,
    };
    let commit = end_txn_marker_batch(next + 1, 1_700_000_100_001, 0, 77, 0, marker);
    // The producer's next transaction and its commit, in later runs: two markers of it in the segment.
    let open_again = BatchBuilder::new(next + 2)
        .partition_leader_epoch(0)
        .producer(77, 0, 1)
        .transactional(true)
        .record(RecordSpec::new(0, 1_700_000_100_002).with_value(vec![b't'; 40]))
        .build();
    let commit_again = end_txn_marker_batch(next + 3, 1_700_000_100_003, 0, 77, 0, marker);
    let rounds = [(open, true), (commit, false), (open_again, true), (commit_again, false)];
    for (round, (bytes, want_open)) in rounds.into_iter().enumerate() {
        let log = dir.join(segment_file_name(0, SegmentFileKind::Log));
        std::fs::OpenOptions::new()
            .append(true)
            .open(log)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
        shipper.round(&w).await;
        let report = run(&mut applier).await;
        assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
        assert_eq!(report.partitions[0].bytes_fetched, bytes.len() as u64, "appended");
        assert_eq!(std::fs::metadata(&installed).unwrap().ino(), inode);
        let recorded = catalog.installed_txn_ends(id).unwrap()[&0].1.clone().unwrap();
        let producers = std::collections::BTreeSet::from([77]);
        let want = if want_open {
            TxnEnds {
                open: producers,
                ..Default::default()
            }
        } else {
            TxnEnds {
                closed: producers,
                ..Default::default()
            }
        };
        assert_eq!(recorded.without_runs(), want);
        // The open transaction's run, carried through the in-place append: what promotion aborts it from.
        let (derived, every) = segment_format::txn_ends::logged_of_log(&installed, i64::MAX).unwrap();
        assert_eq!(recorded.without_log(), derived.unwrap());
        assert_eq!(recorded.runs.contains_key(&77), want_open);
        // The segment's log of every marker, added to run by run and recorded with each version: what a
        // consistent cut before the first commit looks the producer up in.
        let markers = round.div_ceil(2);
        assert_eq!(every.len(), markers, "round {round}");
        match recorded.log {
            None => assert_eq!(markers, 0),
            Some(record) => {
                let path = segmirror_applier::mirror::segment_log_file(&w.mirror(), &format!("{TOPIC}-0"), 0);
                let bytes = closed_log::read_recorded(&path, record)
                    .unwrap()
                    .expect("the recorded log");
                assert_eq!(closed_log::parse_segment(&bytes).unwrap(), every, "round {round}");
            }
        }
    }
    let (findings, io_errors) = segmirror_applier::verify::verify_recorded_transactions(&w.mirror(), &catalog);
    assert!(
        findings.is_empty() && io_errors.is_empty(),
        "{findings:?} {io_errors:?}"
    );
    let verified = verify_paths(
        &[w.mirror().join(format!("{TOPIC}-0"))],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoVerifyProgress,
    );
    assert!(verified.is_sound(), "{:#?}", verified.findings);

    // The same bucket installed the staged way into another mirror: the same files, byte for byte.
    let other = w.path("mirror2");
    std::fs::create_dir_all(&other).unwrap();
    let config = ApplyConfig::new(w.store.clone(), w.path("bucket").display().to_string(), &other).with_link(LINK);
    let staged = segmirror_applier::apply(
        &config,
        Catalog::open(w.path("catalog2/catalog.sqlite")).unwrap(),
        &NoProgress,
    )
    .await
    .unwrap();
    assert_eq!(staged.verdict(), Verdict::Ok);
    assert_eq!(
        tree(&w.mirror().join(format!("{TOPIC}-0"))),
        tree(&other.join(format!("{TOPIC}-0")))
    );
    // And the segment's log, added to run by run here, written whole there.
    let log = |root: &Path| {
        std::fs::read(segmirror_applier::mirror::segment_log_file(
            root,
            &format!("{TOPIC}-0"),
            0,
        ))
    };
    assert_eq!(log(&w.mirror()).unwrap(), log(&other).unwrap());
}

fn refusal(report: &ApplyReport) -> Refusal {
    match &report.partitions[0].outcome {
        PartitionOutcome::Refused(r) => r.refusal.clone(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_chunk_or_a_lying_claim_is_refused_by_key_and_field_and_leaves_the_installed_file_alone() {
    let w = World::new();
    let (dir, next, shipper, mut applier) = following(&w).await;
    assert_eq!(run(&mut applier).await.verdict(), Verdict::Ok);
    let (next, _) = grow(&dir, next, 4);
    shipper.round(&w).await;
    assert_eq!(run(&mut applier).await.verdict(), Verdict::Ok);
    let installed = mirror_log(&w.mirror());
    let good = std::fs::read(&installed).unwrap();
    let proofs = applier.append_proof_bytes_read();

    grow(&dir, next, 3);
    shipper.round(&w).await;
    let (key, honest) = active_manifest(&w).await;
    let chunk = honest.log_chunks.last().unwrap().clone();
    let chunk_bytes = w.store.get_bytes(&chunk.key, u64::MAX).await.unwrap();

    // A chunk object whose bytes changed in the bucket.
    let mut bad = chunk_bytes.to_vec();
    bad[30] ^= 1;
    w.store.put_bytes(&chunk.key, bad).await.unwrap();
    match refusal(&run(&mut applier).await) {
        Refusal::Mismatch { key: k, what, .. } => {
            assert_eq!((k.as_str(), what.as_str()), (chunk.key.as_str(), "sha256"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&installed).unwrap(), good, "nothing appended");
    w.store.put_bytes(&chunk.key, chunk_bytes).await.unwrap();

    // A manifest that lies about its record count.
    let mut lie = honest.clone();
    lie.records -= 1;
    w.store.put_bytes(&key, lie.to_json()).await.unwrap();
    match refusal(&run(&mut applier).await) {
        Refusal::ManifestDataMismatch { what, .. } => {
            assert!(what.contains("records") && what.contains(&key), "{what}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&installed).unwrap(), good, "nothing appended");

    // The honest version, committed again, is appended from the state kept across the refusals.
    w.store.put_bytes(&key, honest.to_json()).await.unwrap();
    assert_eq!(run(&mut applier).await.verdict(), Verdict::Ok);
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(dir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap()
    );
    assert_eq!(
        applier.append_proof_bytes_read(),
        proofs,
        "the prefix was not read back again"
    );
}

/// A read side that counts what its listings returned: the keys a follower's poll had to receive from the store.
#[derive(Debug)]
struct CountingListings {
    inner: segmirror_transport::Store,
    listings: std::sync::atomic::AtomicU64,
    keys: std::sync::atomic::AtomicU64,
}

impl CountingListings {
    fn note(&self, listing: &segmirror_transport::Listing) {
        use std::sync::atomic::Ordering::SeqCst;
        self.listings.fetch_add(1, SeqCst);
        self.keys.fetch_add(
            (listing.objects.len() + listing.skipped.len() + listing.temporary.len()) as u64,
            SeqCst,
        );
    }

    /// (listings, keys) since the last call.
    fn take(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.listings.swap(0, SeqCst), self.keys.swap(0, SeqCst))
    }
}

#[async_trait::async_trait]
impl segmirror_transport::SegmentSource for CountingListings {
    async fn list(&self, root: &str) -> segmirror_transport::Result<segmirror_transport::Listing> {
        let listing = self.inner.list_all(root).await?;
        self.note(&listing);
        Ok(listing)
    }

    async fn list_versions(
        &self,
        prefix: &KeyPrefix,
        root: &str,
    ) -> segmirror_transport::Result<segmirror_transport::Listing> {
        let listing = self.inner.list_versions(prefix, root).await?;
        self.note(&listing);
        Ok(listing)
    }

    async fn read_document(&self, key: &str, limit: u64) -> segmirror_transport::Result<bytes::Bytes> {
        self.inner.get_bytes(key, limit).await
    }

    async fn stat(&self, key: &str) -> segmirror_transport::Result<Option<segmirror_transport::ObjectInfo>> {
        segmirror_transport::SegmentSource::stat(&self.inner, key).await
    }

    async fn receive_file(
        &self,
        key: &str,
        dest: &Path,
        size: u64,
        sha256: &segmirror_transport::manifest::Sha256Digest,
    ) -> segmirror_transport::Result<segmirror_transport::Digest> {
        self.inner.get_to_file(key, dest, size, sha256).await
    }
}

/// A follower's poll lists only manifests and leases: over many rounds of a continuous shipper (each adding a
/// chunk and two index objects to the bucket) every poll is one listing of the same few keys, while the bucket grows
/// by three objects a round; and the mirror still ends byte for byte the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_poll_lists_the_same_few_keys_however_many_rounds_were_shipped() {
    let w = World::new();
    let log_dir = w.path("source");
    let (dir, mut next) = source(&log_dir, 10);
    let shipper = Shipper::new(&log_dir);
    shipper.round(&w).await;
    let (counting, mut applier) = counting_follower(&w, Some(LINK));
    assert_eq!(run(&mut applier).await.verdict(), Verdict::Ok);
    let first = counting.take();
    let bucket_at_first = w.plain_store().list_all("").await.unwrap().objects.len();
    const ROUNDS: usize = 40;
    for round in 0..ROUNDS {
        next = grow(&dir, next, 2).0;
        shipper.round(&w).await;
        let report = run(&mut applier).await;
        assert_eq!(report.verdict(), Verdict::Ok, "round {round}: {report:#?}");
        assert_eq!(report.partitions[0].installed.len(), 1, "round {round}");
        assert_eq!(
            counting.take(),
            first,
            "round {round}: one listing of the manifest and the lease, as at the first poll"
        );
    }
    // What a listing of everything would have cost by now: every round's chunk and indexes.
    let bucket_now = w.plain_store().list_all("").await.unwrap().objects.len();
    assert!(
        bucket_now >= bucket_at_first + 3 * ROUNDS,
        "{bucket_at_first} -> {bucket_now} objects"
    );
    assert_eq!(first, (1, 3), "the manifest, the lease and the link's change notice");
    assert_eq!(
        std::fs::read(mirror_log(&w.mirror())).unwrap(),
        std::fs::read(dir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap()
    );
}

/// A follower of `w`'s bucket reading it through a source that counts its listings; `link`: the link it is given.
fn counting_follower(w: &World, link: Option<&str>) -> (std::sync::Arc<CountingListings>, Applier) {
    let counting = std::sync::Arc::new(CountingListings {
        inner: w.plain_store(),
        listings: Default::default(),
        keys: Default::default(),
    });
    let mut config = ApplyConfig::new(
        ArcSource(counting.clone()),
        w.path("bucket").display().to_string(),
        w.mirror(),
    );
    if let Some(link) = link {
        config = config.with_link(link);
    }
    (counting, Applier::new(config, w.catalog()).appending())
}

/// `ApplyConfig::new` takes the source by value: a shared one, so the test can read its counters.
#[derive(Debug)]
struct ArcSource(std::sync::Arc<CountingListings>);

#[async_trait::async_trait]
impl segmirror_transport::SegmentSource for ArcSource {
    async fn list(&self, root: &str) -> segmirror_transport::Result<segmirror_transport::Listing> {
        self.0.list(root).await
    }

    async fn list_versions(
        &self,
        prefix: &KeyPrefix,
        root: &str,
    ) -> segmirror_transport::Result<segmirror_transport::Listing> {
        self.0.list_versions(prefix, root).await
    }

    async fn read_document(&self, key: &str, limit: u64) -> segmirror_transport::Result<bytes::Bytes> {
        self.0.read_document(key, limit).await
    }

    async fn stat(&self, key: &str) -> segmirror_transport::Result<Option<segmirror_transport::ObjectInfo>> {
        self.0.stat(key).await
    }

    async fn receive_file(
        &self,
        key: &str,
        dest: &Path,
        size: u64,
        sha256: &segmirror_transport::manifest::Sha256Digest,
    ) -> segmirror_transport::Result<segmirror_transport::Digest> {
        self.0.receive_file(key, dest, size, sha256).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_passes_over_a_complete_partition_until_its_listing_changes_or_a_full_run_is_due() {
    let w = World::new();
    let (dir, next, shipper, mut applier) = following(&w).await;
    let first = run(&mut applier).await;
    assert_eq!((first.verdict(), first.partitions.len()), (Verdict::Ok, 1));
    assert_eq!(first.partitions[0].outcome, PartitionOutcome::Complete);

    // Nothing new in the bucket: the partition is passed over.
    let idle = run(&mut applier).await;
    assert_eq!((idle.partitions.len(), idle.partitions_unchanged), (0, 1), "{idle:#?}");

    // A new version of the active segment: looked at again, and installed.
    grow(&dir, next, 4);
    shipper.round(&w).await;
    let grown = run(&mut applier).await;
    assert_eq!(
        (grown.partitions.len(), grown.partitions_unchanged),
        (1, 0),
        "{grown:#?}"
    );
    assert_eq!(grown.partitions[0].installed.len(), 1);
    assert_eq!(
        std::fs::read(mirror_log(&w.mirror())).unwrap(),
        std::fs::read(dir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap()
    );

    // With a full run due every time, nothing is passed over.
    let mut full = Applier::new(w.config(), w.catalog())
        .appending()
        .with_full_run_interval(std::time::Duration::ZERO);
    for _ in 0..2 {
        let r = run(&mut full).await;
        assert_eq!((r.partitions.len(), r.partitions_unchanged), (1, 0), "{r:#?}");
    }
}

/// A follower whose last run left its link settled passes over later runs whole — no listing at all — while the
/// link's change notice and the catalog stay as they were: a shipper's round that commits (it rewrites the notice),
/// another connection's change to the catalog (an operator's pause) and a store without a notice (an older
/// shipper) each make the next run list again; and what is installed is still the source, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_lists_again_only_when_the_change_notice_or_the_catalog_changed() {
    let w = World::new();
    let log_dir = w.path("source");
    let (dir, next) = source(&log_dir, 10);
    let shipper = Shipper::new(&log_dir);
    shipper.round(&w).await;
    let (counting, mut applier) = counting_follower(&w, Some(LINK));
    let lists = |what: &str, r: &ApplyReport, listed: bool| {
        let (listings, _) = counting.take();
        assert_eq!(listings, u64::from(listed), "{what}: {r:#?}");
    };

    let first = run(&mut applier).await;
    assert_eq!(first.partitions[0].outcome, PartitionOutcome::Complete);
    lists("the first run", &first, true);
    for i in 0..3 {
        let idle = run(&mut applier).await;
        assert_eq!((idle.partitions.len(), idle.partitions_unchanged), (0, 1), "{idle:#?}");
        lists(&format!("idle run {i}"), &idle, false);
    }

    // A round that commits rewrites the notice: the next run lists and installs, the one after passes over.
    grow(&dir, next, 3);
    shipper.round(&w).await;
    let grown = run(&mut applier).await;
    assert_eq!(grown.partitions[0].installed.len(), 1, "{grown:#?}");
    lists("after a commit", &grown, true);
    let idle = run(&mut applier).await;
    lists("idle after the commit", &idle, false);

    // A round that commits nothing leaves the notice as it was.
    shipper.round(&w).await;
    let idle = run(&mut applier).await;
    lists("after a round with nothing to ship", &idle, false);

    // An operator pauses the link from another connection: seen at the next run, which lists; resumed, likewise.
    let mut operator = w.catalog();
    operator.pause_link(LINK).unwrap();
    let paused = run(&mut applier).await;
    assert_eq!(
        paused.link_skipped,
        Some(segmirror_applier::SkipReason::LinkPaused),
        "{paused:#?}"
    );
    lists("after a pause", &paused, true);
    operator.resume_link(LINK).unwrap();
    let resumed = run(&mut applier).await;
    assert_eq!(resumed.link_skipped, None, "{resumed:#?}");
    lists("after the resume", &resumed, true);
    let idle = run(&mut applier).await;
    lists("idle after the resume", &idle, false);

    // No notice in the store: every run lists.
    let notice = segmirror_transport::bucket::link_changes::link_changes_key(&KeyPrefix::root(), LINK);
    w.plain_store().delete(&notice).await.unwrap();
    for i in 0..2 {
        let r = run(&mut applier).await;
        lists(&format!("run {i} without a notice"), &r, true);
    }

    assert_eq!(
        std::fs::read(mirror_log(&w.mirror())).unwrap(),
        std::fs::read(dir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap()
    );
}

/// A follower given no link learns it from its first run, and reads that link's notice from then on: its runs are
/// passed over too once settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_a_named_link_passes_over_runs_once_it_knows_the_link() {
    let w = World::new();
    let log_dir = w.path("source");
    let (_dir, _next) = source(&log_dir, 5);
    Shipper::new(&log_dir).round(&w).await;
    let (counting, mut applier) = counting_follower(&w, None);
    let listings: Vec<u64> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            let r = run(&mut applier).await;
            assert_eq!(r.link.as_deref(), Some(LINK), "{r:#?}");
            v.push(counting.take().0);
        }
        v
    };
    assert_eq!(
        listings,
        [1, 1, 0, 0],
        "the second run reads the notice and settles; later ones pass over"
    );
}
