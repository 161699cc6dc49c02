//! Shared helpers of the applier's integration tests: a hand-made shipper (until the real one replaces it in the
//! end-to-end tests), a store that counts its reads, source partitions, and tree comparisons.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};
use segment_format::checkpoint::{leader_epoch_checkpoint_path, LeaderEpochCheckpoint};
use segment_format::dir::{segment_file_name, PartitionDir, SegmentFileKind, PARTITION_METADATA_FILE};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::{check_segment, SegmentRole, Strictness, TailPolicy, VerifyOptions};
use segment_format::writer::{PartitionWriter, WriterConfig};
use segmirror_applier::{ApplyConfig, ApplyReport, NoProgress};
use segmirror_catalog::Catalog;
use segmirror_transport::manifest::{
    EpochStart, KeyPrefix, Manifest, ManifestFile, PartitionKey, SegmentFileName, SegmentRange, ShipperStamp,
    MANIFEST_FORMAT_V1,
};
use segmirror_transport::{Store, StoreUrl};

pub const LINK: &str = "east";
pub const CLUSTER: &str = "source-cluster";

/// An `ObjectStore` over a local folder that records every key it is asked to GET.
#[derive(Debug)]
pub struct CountingStore {
    inner: LocalFileSystem,
    gets: Mutex<Vec<String>>,
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

impl CountingStore {
    pub fn gets(&self) -> Vec<String> {
        self.gets.lock().unwrap().clone()
    }

    /// GETs of data objects (segment files), not manifests.
    pub fn data_gets(&self) -> Vec<String> {
        self.gets().into_iter().filter(|k| k.contains("/data/")).collect()
    }

    pub fn reset(&self) {
        self.gets.lock().unwrap().clear();
    }
}

#[async_trait::async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        if !options.head {
            self.gets.lock().unwrap().push(location.to_string());
        }
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

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A test world: a source log dir, a bucket, a mirror root and a catalog file, all under one temp dir.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub counting: Arc<CountingStore>,
    pub store: Store,
}

impl World {
    pub fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let bucket = tmp.path().join("bucket");
        std::fs::create_dir_all(&bucket).unwrap();
        let counting = Arc::new(CountingStore {
            inner: LocalFileSystem::new_with_prefix(&bucket).unwrap(),
            gets: Mutex::new(Vec::new()),
        });
        let store = Store::from_object_store(counting.clone(), bucket.display().to_string());
        World { tmp, counting, store }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    pub fn mirror(&self) -> PathBuf {
        self.path("mirror")
    }

    pub fn catalog_path(&self) -> PathBuf {
        self.path("catalog/catalog.sqlite")
    }

    pub fn catalog(&self) -> Catalog {
        Catalog::open(self.catalog_path()).unwrap()
    }

    pub fn config(&self) -> ApplyConfig {
        ApplyConfig::new(
            self.store.clone(),
            self.path("bucket").display().to_string(),
            self.mirror(),
        )
        .with_link(LINK)
    }

    /// One run with the default config.
    pub async fn apply(&self) -> ApplyReport {
        self.apply_with(self.config()).await
    }

    pub async fn apply_with(&self, config: ApplyConfig) -> ApplyReport {
        segmirror_applier::apply(&config, self.catalog(), &NoProgress)
            .await
            .unwrap()
    }

    /// Another store over the same bucket folder, as the CLI would open it.
    pub fn plain_store(&self) -> Store {
        let url = StoreUrl::parse(self.path("bucket").to_str().unwrap()).unwrap();
        Store::open(&url, &Default::default()).unwrap()
    }
}

fn mtime_ms(path: &Path) -> i64 {
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    i64::try_from(modified.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// What the hand-made shipper shipped for one segment version.
#[derive(Debug, Clone)]
pub struct Shipped {
    pub key: String,
    pub manifest: Manifest,
}

/// Ship every segment of a source partition directory the way the design says the shipper does: data objects
/// first, the manifest last; every segment but the newest sealed, the newest shipped up to its last batch. The
/// producer snapshot at a segment's base goes with the segment; the epochs are those of the source's
/// `leader-epoch-checkpoint` in force in `[base, next)`.
pub async fn ship_partition_dir(store: &Store, prefix: &KeyPrefix, link: &str, dir: &Path) -> Vec<Shipped> {
    ship_partition_dir_sealing(store, prefix, link, dir, false).await
}

/// As [`ship_partition_dir`]; with `seal_last` the newest segment is shipped sealed too (the source rolled past it).
pub async fn ship_partition_dir_sealing(
    store: &Store,
    prefix: &KeyPrefix,
    link: &str,
    dir: &Path,
    seal_last: bool,
) -> Vec<Shipped> {
    let pd = PartitionDir::open(dir).unwrap();
    let topic_id = PartitionMetadata::read(&dir.join(PARTITION_METADATA_FILE))
        .unwrap()
        .topic_id;
    let epochs = LeaderEpochCheckpoint::read(&leader_epoch_checkpoint_path(dir))
        .map(|c| c.entries)
        .unwrap_or_default();
    let pk = PartitionKey::new(prefix.clone(), link, &pd.name.topic, pd.name.partition).unwrap();
    let log_start = pd.segments.first().map_or(0, |s| s.base_offset);
    let mut shipped = Vec::new();
    for (i, seg) in pd.segments.iter().enumerate() {
        let base = seg.base_offset;
        let next_base = pd.segments.get(i + 1).map(|s| s.base_offset);
        let check = check_segment(
            seg,
            next_base,
            TailPolicy::for_segment(SegmentRole::with_next(next_base), Strictness::Lenient),
            &VerifyOptions::default(),
        )
        .unwrap();
        assert!(
            check.is_sound(),
            "source segment {base} of {} is not sound: {:?}",
            dir.display(),
            check.findings
        );
        let summary = check.summary;
        let next = next_base.unwrap_or(summary.last_offset.map_or(base, |l| l + 1));
        let range = SegmentRange::new(base, next).unwrap();
        let mut paths = vec![
            (SegmentFileKind::Log, seg.log.clone()),
            (SegmentFileKind::Index, seg.index.clone().unwrap()),
            (SegmentFileKind::TimeIndex, seg.time_index.clone().unwrap()),
        ];
        if let Some(txn) = &seg.txn_index {
            paths.push((SegmentFileKind::TxnIndex, txn.clone()));
        }
        let snapshot = dir.join(segment_file_name(base, SegmentFileKind::Snapshot));
        if snapshot.exists() {
            paths.push((SegmentFileKind::Snapshot, snapshot));
        }
        let mut files = Vec::new();
        for (kind, path) in paths {
            let name = SegmentFileName::new(base, kind);
            let key = pk.data_key(&topic_id, range, name).unwrap();
            let put = store.put_file(&key, &path).await.unwrap();
            files.push(ManifestFile {
                name,
                key,
                size: put.digest.size,
                crc32c: put.digest.crc32c,
                sha256: put.digest.sha256,
                mtime_ms: mtime_ms(&path),
            });
        }
        let in_force = epochs.iter().rfind(|e| e.start_offset <= base);
        let inside = epochs.iter().filter(|e| e.start_offset > base && e.start_offset < next);
        let manifest = Manifest {
            format: MANIFEST_FORMAT_V1.to_string(),
            link: link.to_string(),
            topic: pd.name.topic.clone(),
            partition: pd.name.partition,
            source_topic_id: topic_id,
            source_cluster_id: CLUSTER.to_string(),
            base_offset: base,
            first_offset: summary.first_offset,
            last_offset: summary.last_offset,
            next_offset: next,
            batches: summary.batches,
            records: summary.records,
            max_timestamp: summary.max_timestamp.unwrap_or(-1),
            sealed: next_base.is_some() || seal_last,
            epochs: in_force
                .into_iter()
                .chain(inside)
                .map(|e| EpochStart {
                    epoch: e.epoch,
                    start_offset: e.start_offset,
                })
                .collect(),
            log_start_offset: log_start,
            files,
            end_snapshot: None,
            log_chunks: Vec::new(),
            shipper: ShipperStamp {
                id: "test-shipper".into(),
                lease_epoch: 1,
            },
            created_at_ms: 1_700_000_000_000,
        };
        manifest.validate().unwrap();
        let key = pk.manifest_key(&topic_id, base).unwrap();
        store.put_bytes(&key, manifest.to_json()).await.unwrap();
        shipped.push(Shipped { key, manifest });
    }
    shipped
}

/// Write a manifest back (after a test edited it).
pub async fn put_manifest(store: &Store, shipped: &Shipped) {
    store.put_bytes(&shipped.key, shipped.manifest.to_json()).await.unwrap();
}

/// A small partition: `batches` batches of 3 records each, in leader epoch 1 (then 2 from batch 10), rolled at
/// `segment_bytes`. Deterministic: the same arguments write the same bytes, and a longer run's first segments equal
/// a shorter run's.
pub fn write_partition(log_dir: &Path, topic: &str, topic_id: Uuid, batches: i64, segment_bytes: u64) -> PathBuf {
    let config = WriterConfig {
        segment_bytes,
        index_interval_bytes: 256,
        fsync: false,
        topic_id: Some(topic_id),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, topic, 0, 0, config).unwrap();
    w.become_leader(1);
    for i in 0..batches {
        if i == 10 {
            w.become_leader(2);
        }
        let epoch = if i < 10 { 1 } else { 2 };
        let ts = 1_700_000_000_000 + i * 1_000;
        let batch = BatchBuilder::new(0)
            .partition_leader_epoch(epoch)
            .records((0..3).map(|r| {
                RecordSpec::new(r, ts + i64::from(r))
                    .with_key(format!("k{i}-{r}"))
                    .with_value(vec![b'v'; 100])
            }));
        w.append(batch).unwrap();
    }
    w.close().unwrap().dir
}

/// Every file under `dir` (recursively) with its bytes, by path relative to `dir`; a mirror's lock file (which
/// names the last run that held it) is the applier's, not content, and is left out. A file or directory that
/// vanishes between the listing and the read (a running follower renaming its staged files in) is left out too:
/// tests poll a live mirror with this until it matches, and a stopped mirror has no such files.
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => panic!("listing {}: {e}", dir.display()),
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .is_some_and(|n| n == segmirror_applier::mirror::APPLY_LOCK_FILE)
            {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        out.insert(rel, bytes);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => panic!("reading {}: {e}", path.display()),
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out
}

/// The files a mirror of `source` must hold byte for byte: every segment file, the producer snapshots taken at
/// segment bases (the shutdown snapshot at the log end offset is not a segment's and is not shipped),
/// `leader-epoch-checkpoint` and `partition.metadata`.
pub fn expected_mirror_files(source: &Path) -> BTreeMap<String, Vec<u8>> {
    let pd = PartitionDir::open(source).unwrap();
    let bases: Vec<i64> = pd.segments.iter().map(|s| s.base_offset).collect();
    tree(source)
        .into_iter()
        .filter(|(name, _)| match name.rsplit_once('.') {
            Some((offset, "snapshot")) => offset.parse::<i64>().is_ok_and(|o| bases.contains(&o)),
            Some((_, "log" | "index" | "timeindex" | "txnindex")) => true,
            _ => name == "leader-epoch-checkpoint" || name == PARTITION_METADATA_FILE,
        })
        .collect()
}

/// Assert `mirror` holds exactly the expected files of `source`.
pub fn assert_mirrors(source: &Path, mirror: &Path) {
    let expected = expected_mirror_files(source);
    let actual = tree(mirror);
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&actual), names(&expected), "files of {}", mirror.display());
    for (name, bytes) in &expected {
        assert!(
            actual.get(name) == Some(bytes),
            "{name} differs between {} and {}",
            source.display(),
            mirror.display()
        );
    }
}
