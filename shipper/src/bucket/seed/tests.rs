//! Seeding log dirs written by `segment_format::writer` into a local folder
//! store, read back through the bucket contract.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions,
    PutPayload, PutResult,
};
use segment_format::dir::{segment_file_name, SegmentFileKind, SegmentFiles};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::{check_segment, Depth, SegmentRole, Strictness, TailPolicy, VerifyOptions};
use segment_format::writer::sample::{write_sample, SampleOptions};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segment_format::Defect;
use segmirror_transport::manifest::{KeyPrefix, Lease, Manifest, ObjectKey, PartitionKey, MAX_MANIFEST_BYTES};

use super::*;
use segmirror_transport::bucket::audit::{audit_store, AuditOptions};
use segmirror_transport::bucket::link_changes::LINK_CHANGES_FILE;
use segmirror_transport::digest::digest_of;
use segmirror_transport::{Store, StoreUrl};

pub(super) const LINK: &str = "east";
/// `index.interval.bytes` of the partitions written here: small enough for
/// several index entries per 4 KiB segment.
const INDEX_INTERVAL: u64 = 512;

pub(super) fn local_store(root: &Path) -> Store {
    Store::open(
        &StoreUrl::Local {
            root: root.to_path_buf(),
        },
        &Default::default(),
    )
    .unwrap()
}

pub(super) fn config(log_dir: &Path) -> SeedConfig {
    let mut c = SeedConfig::new(vec![log_dir.to_path_buf()], LINK).unwrap();
    c.shipper_id = "test-shipper".into();
    c.index_interval_bytes = INDEX_INTERVAL;
    c
}

fn sample(log_dir: &Path, running: bool) -> segment_format::writer::sample::Manifest {
    write_sample(
        log_dir,
        &SampleOptions {
            running,
            fsync: false,
            ..Default::default()
        },
    )
    .unwrap()
}

pub(super) fn topic_id(n: u8) -> Uuid {
    Uuid([n; 16])
}

/// One partition of `batches` batches of ~300 bytes in 4 KiB segments (so
/// several segments), two leader epochs.
pub(super) fn write_partition(log_dir: &Path, topic: &str, batches: usize, running: bool, id: Uuid) -> PartitionWriter {
    let config = WriterConfig {
        segment_bytes: 4096,
        index_interval_bytes: INDEX_INTERVAL,
        running,
        fsync: false,
        topic_id: Some(id),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, topic, 0, 0, config).unwrap();
    for i in 0..batches {
        w.append(batch(0, i)).unwrap();
    }
    w
}

pub(super) fn batch(base: i64, i: usize) -> BatchBuilder {
    let ts = 1_700_000_000_000 + i as i64 * 1000;
    BatchBuilder::new(base)
        .partition_leader_epoch(if i < 10 { 0 } else { 3 })
        .record(
            RecordSpec::new(0, ts)
                .with_key(format!("k{i}"))
                .with_value(vec![b'v'; 250]),
        )
        .record(RecordSpec::new(1, ts + 1).with_value(vec![b'w'; 10]))
}

pub(super) fn finish_log_dir(log_dir: &Path, partitions: &[segment_format::writer::WrittenPartition], running: bool) {
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
    write_log_dir_files(log_dir, &identity, partitions, state).unwrap();
}

/// The valid manifests of a partition's lineage, by base offset.
pub(super) async fn manifests(store: &Store, topic: &str, partition: i32, id: Uuid) -> Vec<Manifest> {
    let key = PartitionKey::new(KeyPrefix::root(), LINK, topic, partition).unwrap();
    let mut out = Vec::new();
    for object in store.list(&key.manifests_dir(&id)).await.unwrap() {
        let bytes = store.get_bytes(&object.key, MAX_MANIFEST_BYTES).await.unwrap();
        let m = Manifest::from_json(&object.key, &bytes).unwrap();
        m.validate().unwrap();
        m.check_location(&KeyPrefix::root(), &object.key).unwrap();
        out.push(m);
    }
    out.sort_by_key(|m| m.base_offset);
    out
}

pub(super) async fn object(store: &Store, key: &str) -> Vec<u8> {
    store.get_bytes(key, 1 << 30).await.unwrap().to_vec()
}

fn file(m: &Manifest, kind: SegmentFileKind) -> &segmirror_transport::manifest::ManifestFile {
    m.file(kind).unwrap_or_else(|| panic!("no {kind:?} in {m:?}"))
}

/// Records every put and can inject a lease when a partition's second segment starts uploading.
pub(super) struct RecordingStore {
    inner: Arc<dyn ObjectStore>,
    puts: Mutex<Vec<String>>,
    gets: Mutex<Vec<String>>,
    manifests_committed: AtomicU64,
    fence_after_first_commit: AtomicBool,
}

impl RecordingStore {
    fn new(root: &Path) -> Arc<Self> {
        std::fs::create_dir_all(root).unwrap();
        Arc::new(RecordingStore {
            inner: Arc::new(LocalFileSystem::new_with_prefix(root).unwrap()),
            puts: Mutex::new(Vec::new()),
            gets: Mutex::new(Vec::new()),
            manifests_committed: AtomicU64::new(0),
            fence_after_first_commit: AtomicBool::new(false),
        })
    }

    pub(super) fn puts(&self) -> Vec<String> {
        self.puts.lock().unwrap().clone()
    }

    /// Keys read since the last [`RecordingStore::clear`].
    pub(super) fn gets(&self) -> Vec<String> {
        self.gets.lock().unwrap().clone()
    }

    pub(super) fn clear(&self) {
        self.puts.lock().unwrap().clear();
        self.gets.lock().unwrap().clear();
    }

    /// Before a data put that follows a manifest commit, another shipper takes lease epoch 99.
    async fn maybe_fence(&self, key: &str) {
        if self.manifests_committed.load(Ordering::SeqCst) >= 1
            && key.contains("/data/")
            && self.fence_after_first_commit.swap(false, Ordering::SeqCst)
        {
            let parsed = ObjectKey::parse(&KeyPrefix::root(), key).unwrap();
            let lease_key = parsed.partition.lease_key(99);
            let lease = Lease::new("usurper", 99, 0);
            self.inner
                .put_opts(
                    &ObjectPath::from(lease_key),
                    PutPayload::from(lease.to_json()),
                    PutOptions::default(),
                )
                .await
                .unwrap();
        }
    }
}

impl fmt::Debug for RecordingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecordingStore")
    }
}

impl fmt::Display for RecordingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RecordingStore")
    }
}

#[async_trait::async_trait]
impl ObjectStore for RecordingStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let key = location.to_string();
        self.maybe_fence(&key).await;
        self.puts.lock().unwrap().push(key.clone());
        let result = self.inner.put_opts(location, payload, opts).await;
        if key.contains("/manifests/") && result.is_ok() {
            self.manifests_committed.fetch_add(1, Ordering::SeqCst);
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.puts.lock().unwrap().push(location.to_string());
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        self.gets.lock().unwrap().push(location.to_string());
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

pub(super) fn recording(dir: &Path) -> (Arc<RecordingStore>, Store) {
    let rec = RecordingStore::new(&dir.join("bucket"));
    let store = Store::from_object_store(rec.clone(), "recording");
    (rec, store)
}

#[derive(Default)]
struct CountingProgress {
    started: Mutex<Option<(u64, u64)>>,
    bytes: AtomicU64,
    segments: AtomicU64,
}

impl Progress for CountingProgress {
    fn planned(&self, segments: u64, bytes: u64) {
        *self.started.lock().unwrap() = Some((bytes, segments));
    }

    fn advance(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    fn segment_done(&self) {
        self.segments.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_selected_partition_is_shipped_with_valid_manifests() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let written = sample(&log_dir, false);
    let store = local_store(&dir.path().join("bucket"));
    let progress = CountingProgress::default();
    let mut c = config(&log_dir);
    // The sample partitions use Kafka's default interval.
    c.index_interval_bytes = segment_format::index::DEFAULT_INDEX_INTERVAL_BYTES;
    let report = seed(&store, &c, &progress).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    assert_eq!(report.partitions.len(), written.partitions.len());
    let total_segments: u64 = written.partitions.iter().map(|p| p.written.segments.len() as u64).sum();
    let total_bytes: u64 = written.partitions.iter().map(|p| p.written.log_bytes()).sum();
    assert_eq!(report.segments_shipped(), total_segments);
    assert_eq!(*progress.started.lock().unwrap(), Some((total_bytes, total_segments)));
    assert_eq!(progress.segments.load(Ordering::SeqCst), total_segments);
    assert_eq!(progress.bytes.load(Ordering::SeqCst), total_bytes);

    for p in &written.partitions {
        let w = &p.written;
        let ms = manifests(&store, &w.topic, w.partition, w.topic_id).await;
        assert_eq!(ms.len(), w.segments.len(), "{}", p.shape);
        let r = report.partition(&w.topic, w.partition).unwrap();
        assert_eq!(r.status, PartitionStatus::Complete);
        assert_eq!(r.shipped_through, Some(w.log_end_offset));
        assert_eq!(r.source_topic_id, Some(w.topic_id.to_string()));
        for (i, (m, s)) in ms.iter().zip(&w.segments).enumerate() {
            let newest = i + 1 == ms.len();
            assert_eq!(m.base_offset, s.base_offset);
            assert_eq!(m.sealed, !newest, "{} segment {i}", p.shape);
            let next = ms.get(i + 1).map_or(w.log_end_offset, |n| n.base_offset);
            assert_eq!(m.next_offset, next, "offsets chain exactly");
            assert_eq!(m.last_offset, s.last_offset);
            assert_eq!(m.batches, s.batches);
            assert_eq!(m.source_cluster_id, written.cluster_id);
            assert_eq!(m.link, LINK);
            assert_eq!(m.shipper.id, "test-shipper");
            assert_eq!(m.log_start_offset, w.log_start_offset);
            assert!(!m.epochs.is_empty() || w.epochs.is_empty());
            // Every shipped file is the source file, byte for byte (a cleanly shut
            // down active segment's indexes are exactly what the rebuild makes).
            for f in &m.files {
                let source = std::fs::read(w.dir.join(segment_file_name(m.base_offset, f.name.kind))).unwrap();
                let shipped = object(&store, &f.key).await;
                assert!(shipped == source, "{} {}", p.shape, f.name);
                let d = digest_of(&shipped);
                assert_eq!((d.size, d.crc32c, d.sha256), (f.size, f.crc32c, f.sha256));
                let mtime = crate::source::guard::mtime_ms(&w.dir.join(f.name.to_string())).unwrap();
                assert_eq!(f.mtime_ms, mtime, "{}", f.name);
            }
            let has_snapshot = w.snapshots.contains(&m.base_offset);
            assert_eq!(m.file(SegmentFileKind::Snapshot).is_some(), has_snapshot, "{}", p.shape);
        }
    }
    // The auditor agrees, hashes included.
    let audit = audit_store(&store, &KeyPrefix::root(), &AuditOptions::default())
        .await
        .unwrap();
    assert!(audit.is_sound(), "{:#?}", audit.findings);
    assert_eq!(
        audit
            .of(segmirror_transport::bucket::audit::Check::OrphanObject)
            .count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_topics_and_dead_directories_are_never_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let mut parts = Vec::new();
    for (topic, id) in [
        ("__consumer_offsets", 1),
        ("__transaction_state", 2),
        ("orders", 3),
        ("no-id", 4),
    ] {
        parts.push(
            write_partition(&log_dir, topic, 5, false, topic_id(id))
                .close()
                .unwrap(),
        );
    }
    std::fs::remove_file(log_dir.join("no-id-0").join("partition.metadata")).unwrap();
    // A directory scheduled for deletion and a future replica of `orders`.
    for suffix in ["orders-0.0123456789abcdef-delete", "orders-0.fedcba9876543210-future"] {
        let copy = log_dir.join(suffix);
        std::fs::create_dir(&copy).unwrap();
        for entry in std::fs::read_dir(log_dir.join("orders-0")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    finish_log_dir(&log_dir, &parts, false);
    let store = local_store(&dir.path().join("bucket"));
    let report = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    let shipped: Vec<String> = report.partitions.iter().map(|p| p.name()).collect();
    assert_eq!(shipped, vec!["orders-0"]);
    let reasons: Vec<(String, SkipReason)> = report
        .skipped
        .iter()
        .map(|s| (format!("{}-{}", s.topic, s.partition), s.reason.clone()))
        .collect();
    for expected in [
        ("__consumer_offsets-0".to_string(), SkipReason::Internal),
        ("__transaction_state-0".to_string(), SkipReason::Internal),
        ("no-id-0".to_string(), SkipReason::NoTopicId),
        ("orders-0".to_string(), SkipReason::NotLive { kind: "delete".into() }),
        ("orders-0".to_string(), SkipReason::NotLive { kind: "future".into() }),
    ] {
        assert!(reasons.contains(&expected), "{expected:?} not in {reasons:?}");
    }
    // Even a pattern naming them does not ship internal topics.
    let mut c = config(&log_dir);
    c.topics = TopicFilter::new("__consumer_offsets, __.*").unwrap();
    let again = seed(&store, &c, &NoProgress).await.unwrap();
    assert!(again.partitions.is_empty(), "{again:#?}");
    let keys: Vec<String> = store.list("").await.unwrap().into_iter().map(|o| o.key).collect();
    assert!(
        keys.iter()
            .all(|k| k.starts_with("east/orders/0/") || k == "east/link@changes.json"),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_pattern_selects_whole_names() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let written = sample(&log_dir, false);
    let store = local_store(&dir.path().join("bucket"));
    let mut c = config(&log_dir);
    c.topics = TopicFilter::new("sample-codecs, sample-legacy.*, codecs").unwrap();
    let report = seed(&store, &c, &NoProgress).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    let mut names: Vec<String> = report.partitions.iter().map(|p| p.name()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "sample-codecs-0",
            "sample-codecs-1",
            "sample-codecs-2",
            "sample-codecs-3",
            "sample-codecs-4",
            "sample-legacy-0"
        ]
    );
    assert_eq!(report.not_selected, written.partitions.len() as u64 - 6);
    let topics: std::collections::BTreeSet<String> = store
        .list(LINK)
        .await
        .unwrap()
        .iter()
        .filter(|o| !o.key.ends_with(LINK_CHANGES_FILE))
        .map(|o| o.key.split('/').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(
        topics.into_iter().collect::<Vec<_>>(),
        vec!["sample-codecs", "sample-legacy"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_ships_nothing_new_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    sample(&log_dir, true);
    let (rec, store) = recording(dir.path());
    let first = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(first.is_complete(), "{first:#?}");
    assert!(!rec.puts().is_empty());
    // Shipped from a running broker's files, the bucket still verifies deeply.
    let deep = AuditOptions {
        deep: true,
        ..AuditOptions::default()
    };
    let audit = audit_store(&store, &KeyPrefix::root(), &deep).await.unwrap();
    assert!(audit.is_sound(), "{:#?}", audit.findings);
    rec.clear();
    let second = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(second.is_complete(), "{second:#?}");
    assert_eq!(
        rec.puts(),
        Vec::<String>::new(),
        "a rerun with nothing new writes nothing, not even a lease"
    );
    assert_eq!(second.segments_shipped(), 0);
    assert_eq!(second.segments_already_shipped(), first.segments_shipped());
    assert!(second.partitions.iter().all(|p| p.lease_epoch.is_none()));
}

/// Append a complete batch at `offset` to a `.log` behind the writer's back, as a broker would.
pub(super) fn append_batch(log: &Path, offset: i64, i: usize) -> u64 {
    let bytes = batch(offset, i).build();
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    f.write_all(&bytes).unwrap();
    bytes.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_active_segment_alone_is_reshipped_to_new_keys() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let (rec, store) = recording(dir.path());
    let first = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(first.is_complete(), "{first:#?}");
    let before = manifests(&store, "orders", 0, w.topic_id).await;
    let active_before = before.last().unwrap().clone();
    assert!(!active_before.sealed);
    assert_eq!(active_before.next_offset, w.log_end_offset);

    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    append_batch(&log, w.log_end_offset, 31);
    rec.clear();
    let second = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(second.is_complete(), "{second:#?}");
    let r = second.partition("orders", 0).unwrap();
    assert_eq!(
        (r.segments_shipped, r.segments_already_shipped),
        (1, before.len() as u64 - 1)
    );
    assert_eq!(r.shipped_through, Some(w.log_end_offset + 2));
    let after = manifests(&store, "orders", 0, w.topic_id).await;
    assert_eq!(
        after[..after.len() - 1],
        before[..before.len() - 1],
        "sealed manifests untouched"
    );
    let active_after = after.last().unwrap();
    assert_eq!(active_after.next_offset, w.log_end_offset + 2);
    assert_eq!(active_after.base_offset, active_before.base_offset);
    // Only the active segment's new version, its manifest and a lease were written.
    let puts = rec.puts();
    let pk = PartitionKey::new(KeyPrefix::root(), LINK, "orders", 0).unwrap();
    let range = active_after.range().unwrap();
    for key in &puts {
        assert!(
            key.starts_with(&pk.data_dir(&w.topic_id, range))
                || key == &pk.manifest_key(&w.topic_id, active_after.base_offset).unwrap()
                || key.starts_with(&pk.lease_dir())
                || key.ends_with(LINK_CHANGES_FILE),
            "unexpected put {key}"
        );
    }
    // The old version's objects are still there, unchanged: nothing was overwritten.
    for f in &active_before.files {
        assert_eq!(digest_of(&object(&store, &f.key).await).sha256, f.sha256);
        assert!(!active_after.files.iter().any(|g| g.key == f.key));
    }
    // The grown version is chunked (v2): the old version's `.log` object is referenced as its first chunk, and
    // only the appended batch was uploaded, as a chunk of its own. Together they are the source's `.log`.
    assert!(active_after.is_chunked(), "{active_after:#?}");
    let old_log = file(&active_before, SegmentFileKind::Log);
    let chunks = &active_after.log_chunks;
    assert_eq!(chunks.len(), 2, "{chunks:#?}");
    assert_eq!(
        (chunks[0].key.as_str(), chunks[0].to),
        (old_log.key.as_str(), old_log.size)
    );
    let source_log = std::fs::read(&log).unwrap();
    assert_eq!(chunks[1].size(), source_log.len() as u64 - old_log.size);
    assert_eq!(r.bytes_uploaded - chunks[1].size(), {
        // Besides the new bytes only the (rebuilt) index files of the new version went up.
        active_after
            .files
            .iter()
            .filter(|f| f.name.kind != SegmentFileKind::Log)
            .map(|f| f.size)
            .sum::<u64>()
    });
    let mut assembled = Vec::new();
    for c in chunks {
        assembled.extend(object(&store, &c.key).await);
    }
    assert_eq!(assembled, source_log);
    assert_eq!(
        digest_of(&assembled).sha256,
        file(active_after, SegmentFileKind::Log).sha256
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipped_active_segment_that_got_sealed_is_recommitted_without_reupload() {
    let dir = tempfile::tempdir().unwrap();
    // The same partition twice: running, then after the broker rolled it.
    let running_dir = dir.path().join("running");
    let w = write_partition(&running_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&running_dir, std::slice::from_ref(&w), true);
    let rolled_dir = dir.path().join("rolled");
    let mut writer = write_partition(&rolled_dir, "orders", 30, false, topic_id(7));
    writer.roll().unwrap();
    let rolled = writer.close().unwrap();
    finish_log_dir(&rolled_dir, std::slice::from_ref(&rolled), false);

    let (rec, store) = recording(dir.path());
    assert!(seed(&store, &config(&running_dir), &NoProgress)
        .await
        .unwrap()
        .is_complete());
    let before = manifests(&store, "orders", 0, w.topic_id).await;
    rec.clear();
    let report = seed(&store, &config(&rolled_dir), &NoProgress).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    let after = manifests(&store, "orders", 0, w.topic_id).await;
    assert_eq!(after.len(), before.len() + 1, "one new (empty) active segment");
    let old_active = before.last().unwrap();
    let sealed = &after[before.len() - 1];
    assert!(sealed.sealed && !old_active.sealed);
    assert_eq!(sealed.range(), old_active.range());
    for f in &old_active.files {
        assert!(
            sealed.files.iter().any(|g| g.key == f.key && g.sha256 == f.sha256),
            "{} reused",
            f.name
        );
    }
    // The data of the re-committed segment was not uploaded again.
    let old_dir = PartitionKey::new(KeyPrefix::root(), LINK, "orders", 0)
        .unwrap()
        .data_dir(&w.topic_id, old_active.range().unwrap());
    let reuploaded: Vec<String> = rec
        .puts()
        .into_iter()
        .filter(|k| k.starts_with(&old_dir) && !k.ends_with(".snapshot"))
        .collect();
    assert!(reuploaded.is_empty(), "{reuploaded:?}");
    // The new empty active segment: next == base, an empty .log.
    let empty = after.last().unwrap();
    assert_eq!(empty.base_offset, rolled.log_end_offset);
    assert_eq!(
        (empty.next_offset, empty.batches, empty.first_offset),
        (empty.base_offset, 0, None)
    );
    assert_eq!(file(empty, SegmentFileKind::Log).size, 0);
    assert!(!empty.sealed);
    let audit = audit_store(&store, &KeyPrefix::root(), &AuditOptions::default())
        .await
        .unwrap();
    assert!(audit.is_sound(), "{:#?}", audit.findings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_source_segment_is_refused_while_other_partitions_ship() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let written = sample(&log_dir, false);
    let victim = &written.partition("sample-codecs", 0).unwrap().written;
    assert!(victim.segments.len() > 2);
    let second = &victim.segments[1];
    let log = victim
        .dir
        .join(segment_file_name(second.base_offset, SegmentFileKind::Log));
    let mut bytes = std::fs::read(&log).unwrap();
    // The last byte of the first batch: record data under the CRC.
    let first_len = i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize + 12;
    bytes[first_len - 1] ^= 0x5a;
    std::fs::write(&log, &bytes).unwrap();

    let store = local_store(&dir.path().join("bucket"));
    let report = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(report.has_refusals() && !report.has_failures(), "{report:#?}");
    let r = report.partition("sample-codecs", 0).unwrap();
    match &r.status {
        PartitionStatus::Refused { base_offset, findings } => {
            assert_eq!(*base_offset, Some(second.base_offset));
            assert!(
                findings
                    .iter()
                    .any(|f| matches!(f.defect, Defect::CrcMismatch { .. }) && f.path == log),
                "{findings:#?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The segment before it shipped, nothing from it on.
    assert_eq!((r.segments_shipped, r.shipped_through), (1, Some(second.base_offset)));
    let ms = manifests(&store, "sample-codecs", 0, victim.topic_id).await;
    assert_eq!(
        ms.iter().map(|m| m.base_offset).collect::<Vec<_>>(),
        vec![victim.segments[0].base_offset]
    );
    for p in report.partitions.iter().filter(|p| p.name() != "sample-codecs-0") {
        assert_eq!(p.status, PartitionStatus::Complete, "{}", p.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_batch_at_the_active_tail_is_not_shipped() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let complete = std::fs::metadata(&log).unwrap().len();
    let partial = batch(w.log_end_offset, 40).build();
    let cut = partial.len() / 2;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(&partial[..cut])
        .unwrap();

    let store = local_store(&dir.path().join("bucket"));
    let report = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    let r = report.partition("orders", 0).unwrap();
    assert_eq!(r.excluded_tail_bytes, cut as u64);
    let m = manifests(&store, "orders", 0, w.topic_id).await.pop().unwrap();
    assert_eq!((m.next_offset, m.last_offset), (w.log_end_offset, active.last_offset));
    let shipped = object(&store, &file(&m, SegmentFileKind::Log).key).await;
    assert_eq!(shipped.len() as u64, complete);
    assert!(shipped[..] == std::fs::read(&log).unwrap()[..complete as usize]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_indexes_of_the_active_prefix_are_what_a_clean_shutdown_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let running_dir = dir.path().join("running");
    let w = write_partition(&running_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&running_dir, std::slice::from_ref(&w), true);
    let active = w.segments.last().unwrap();
    let source_index = w
        .dir
        .join(segment_file_name(active.base_offset, SegmentFileKind::Index));
    assert!(
        std::fs::metadata(&source_index).unwrap().len() > 8 * active.offset_index_entries as u64,
        "the running source index is preallocated"
    );
    let store = local_store(&dir.path().join("bucket"));
    assert!(seed(&store, &config(&running_dir), &NoProgress)
        .await
        .unwrap()
        .is_complete());
    let m = manifests(&store, "orders", 0, w.topic_id).await.pop().unwrap();

    // Download the shipped version and verify it as a sealed segment.
    let staged = dir.path().join("staged");
    std::fs::create_dir(&staged).unwrap();
    for f in &m.files {
        store
            .get_to_file(&f.key, &staged.join(f.name.to_string()), f.size, &f.sha256)
            .await
            .unwrap();
    }
    let name = |kind| staged.join(segment_file_name(m.base_offset, kind));
    let segment = SegmentFiles {
        base_offset: m.base_offset,
        log: name(SegmentFileKind::Log),
        index: Some(name(SegmentFileKind::Index)),
        time_index: Some(name(SegmentFileKind::TimeIndex)),
        txn_index: None,
    };
    for role in [SegmentRole::Sealed, SegmentRole::Newest] {
        let check = check_segment(
            &segment,
            Some(m.next_offset),
            TailPolicy::for_segment(role, Strictness::Strict),
            &VerifyOptions {
                depth: Depth::Deep,
                strictness: Strictness::Strict,
            },
        )
        .unwrap();
        assert!(check.is_sound(), "{:#?}", check.findings);
        assert_eq!(check.summary.batches, m.batches);
    }
    // Byte for byte what the same partition looks like after a clean shutdown.
    let clean_dir = dir.path().join("clean");
    let clean = write_partition(&clean_dir, "orders", 30, false, topic_id(7))
        .close()
        .unwrap();
    for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        let expected = std::fs::read(clean.dir.join(segment_file_name(m.base_offset, kind))).unwrap();
        assert!(!expected.is_empty());
        assert_eq!(std::fs::read(name(kind)).unwrap(), expected, "{kind:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_lease_stops_the_shipper_at_its_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, false, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), false);
    assert!(w.segments.len() >= 3);
    let (rec, store) = recording(dir.path());
    rec.fence_after_first_commit.store(true, Ordering::SeqCst);
    let report = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    let r = report.partition("orders", 0).unwrap();
    assert!(
        matches!(
            &r.status,
            PartitionStatus::Failed {
                kind: FailureKind::Fenced,
                ..
            }
        ),
        "{r:#?}"
    );
    assert!(report.has_failures());
    assert_eq!(
        r.segments_shipped, 1,
        "the commit before the newer lease stands, none after it"
    );
    assert_eq!(r.lease_epoch, Some(1));
    let ms = manifests(&store, "orders", 0, w.topic_id).await;
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].shipper.lease_epoch, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_in_two_log_dirs_and_an_unusable_log_dir_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    for d in [&a, &b] {
        let w = write_partition(d, "orders", 3, false, topic_id(7)).close().unwrap();
        finish_log_dir(d, &[w], false);
    }
    let empty = dir.path().join("not-kafka");
    std::fs::create_dir(&empty).unwrap();
    let store = local_store(&dir.path().join("bucket"));
    let mut c = config(&a);
    c.log_dirs = vec![a.clone(), b.clone(), empty.clone(), dir.path().join("missing")];
    let report = seed(&store, &c, &NoProgress).await.unwrap();
    assert_eq!(report.log_dir_errors.len(), 2, "{:?}", report.log_dir_errors);
    let r = report.partition("orders", 0).unwrap();
    assert!(
        matches!(
            &r.status,
            PartitionStatus::Failed {
                kind: FailureKind::Source,
                ..
            }
        ),
        "{r:#?}"
    );
    assert!(store.list("").await.unwrap().is_empty());
}

#[test]
fn settings_are_validated() {
    let dirs = vec![PathBuf::from("/tmp")];
    assert!(matches!(
        SeedConfig::new(dirs.clone(), "bad/link"),
        Err(Error::InvalidSetting { setting: "link", .. })
    ));
    assert!(matches!(
        SeedConfig::new(vec![], "ok"),
        Err(Error::InvalidSetting {
            setting: "log dirs",
            ..
        })
    ));
    let mut c = SeedConfig::new(dirs, "ok").unwrap();
    c.shipper_id = "tab\there".into();
    assert!(matches!(
        c.validate(),
        Err(Error::InvalidSetting {
            setting: "shipper id",
            ..
        })
    ));
    let id = default_shipper_id();
    c.shipper_id = id.clone();
    c.validate().unwrap();
    assert!(id.starts_with("segmirror-seed@"), "{id}");
}
