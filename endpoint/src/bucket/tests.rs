//! The remote read replica over a local-folder store the shipper's seed filled: reads equal the source's bytes, a
//! corrupted object is refused (that segment or partition only), the cache stays under its bound, and a new
//! manifest version is followed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use segment_format::batch::ControlType;
use segment_format::control::EndTxnMarker;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_shipper::bucket::seed::{self, HeldLeases, SeedConfig};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{Store, StoreUrl};

use super::{BucketConfig, BucketReplica};
use crate::replica::{Isolation, ReadError, Replica};

const LINK: &str = "east";
const TOPIC: &str = "orders";
const TS0: i64 = 1_700_000_000_000;

fn batch(i: i64) -> BatchBuilder {
    batch_at(0, i)
}

/// Batch `i` (its timestamps), at `base` (the writer assigns its own).
fn batch_at(base: i64, i: i64) -> BatchBuilder {
    BatchBuilder::new(base)
        .partition_leader_epoch(0)
        .record(
            RecordSpec::new(0, TS0 + i * 1000)
                .with_key(format!("k{i}"))
                .with_value(vec![b'v'; 300]),
        )
        .record(RecordSpec::new(1, TS0 + i * 1000 + 1).with_value(vec![b'w'; 20]))
}

struct World {
    tmp: tempfile::TempDir,
    store: Store,
    shipper: SeedConfig,
    held: HeldLeases,
}

impl World {
    /// A source partition of `batches` batches (two records each) in segments of `segment_bytes`, left as a running
    /// broker has it, and an empty local-folder bucket.
    fn new(batches: i64, segment_bytes: u64) -> World {
        World::with_topics(&[TOPIC], batches, segment_bytes)
    }

    /// Partition 0 of each of `topics`, each as [`World::new`] writes it.
    fn with_topics(topics: &[&str], batches: i64, segment_bytes: u64) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let log_dir = tmp.path().join("source");
        let mut written = Vec::new();
        for (n, topic) in topics.iter().enumerate() {
            let config = WriterConfig {
                segment_bytes,
                index_interval_bytes: 1024,
                running: true,
                fsync: false,
                topic_id: Some(Uuid([5 + n as u8; 16])),
                ..WriterConfig::default()
            };
            let mut w = PartitionWriter::create(&log_dir, topic, 0, 0, config).unwrap();
            w.become_leader(0);
            for i in 0..batches {
                w.append(batch(i)).unwrap();
            }
            written.push(w.close().unwrap());
        }
        let identity = LogDirIdentity {
            cluster_id: "test-cluster-id".into(),
            node_id: 1,
            directory_id: Uuid([9; 16]),
        };
        write_log_dir_files(&log_dir, &identity, &written, LogDirState::Running).unwrap();
        World::over(tmp)
    }

    /// An empty local-folder bucket and a shipper for the source written in `tmp/source`.
    fn over(tmp: tempfile::TempDir) -> World {
        let log_dir = tmp.path().join("source");
        let bucket = tmp.path().join("bucket");
        std::fs::create_dir_all(&bucket).unwrap();
        let store = Store::open(&StoreUrl::parse(bucket.to_str().unwrap()).unwrap(), &Default::default()).unwrap();
        let mut shipper = SeedConfig::new(vec![log_dir], LINK).unwrap();
        shipper.shipper_id = "test-shipper".into();
        World {
            tmp,
            store,
            shipper,
            held: HeldLeases::default(),
        }
    }

    fn source_dir(&self) -> PathBuf {
        self.tmp.path().join("source").join(format!("{TOPIC}-0"))
    }

    fn cache_dir(&self) -> PathBuf {
        self.tmp.path().join("cache")
    }

    /// One round of the continuous shipper.
    async fn ship(&self) {
        let report = seed::seed_round(&self.store, &self.shipper, &seed::NoProgress, Some(&self.held))
            .await
            .unwrap();
        assert!(report.is_complete(), "{report:#?}");
    }

    fn replica(&self, cache_size: u64) -> Arc<BucketReplica> {
        let config = BucketConfig {
            prefix: KeyPrefix::root(),
            link: LINK.into(),
            cache_dir: self.cache_dir(),
            cache_size,
        };
        Arc::new(BucketReplica::new(Arc::new(self.store.clone()), &config).unwrap())
    }

    /// The source's `.log` bytes, segment after segment.
    fn source_bytes(&self) -> Vec<u8> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.source_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs.iter().flat_map(|p| std::fs::read(p).unwrap()).collect()
    }

    /// The bucket's object keys (relative paths under the bucket folder) whose name ends with `suffix`.
    fn objects(&self, suffix: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.tmp.path().join("bucket"), &mut out);
        out.retain(|p| p.to_str().unwrap().ends_with(suffix));
        out.sort();
        out
    }
}

/// The offset after the last whole v2 batch in `bytes`.
fn next_offset(bytes: &[u8]) -> i64 {
    let mut pos = 0;
    let mut next = None;
    while pos + 27 <= bytes.len() {
        let base = i64::from_be_bytes(bytes[pos..pos + 8].try_into().unwrap());
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let delta = i32::from_be_bytes(bytes[pos + 23..pos + 27].try_into().unwrap());
        next = Some(base + i64::from(delta) + 1);
        pos += 12 + len;
    }
    next.expect("a whole batch")
}

async fn read_partition(
    replica: &Arc<BucketReplica>,
    topic: &'static str,
    offset: i64,
) -> Result<crate::replica::Records, ReadError> {
    let replica = replica.clone();
    tokio::task::spawn_blocking(move || replica.read(topic, 0, offset, 1000, Isolation::ReadUncommitted))
        .await
        .unwrap()
}

async fn read(
    replica: &Arc<BucketReplica>,
    offset: i64,
    max_bytes: usize,
) -> Result<crate::replica::Records, ReadError> {
    let replica = replica.clone();
    tokio::task::spawn_blocking(move || replica.read(TOPIC, 0, offset, max_bytes, Isolation::ReadUncommitted))
        .await
        .unwrap()
}

/// Every byte served from `from` to the high watermark, fetch after fetch.
async fn read_all(replica: &Arc<BucketReplica>, from: i64, max_bytes: usize, check: &dyn Fn()) -> Vec<u8> {
    let hw = replica.ends(TOPIC, 0).unwrap().high_watermark;
    let mut offset = from;
    let mut out = Vec::new();
    while offset < hw {
        let records = read(replica, offset, max_bytes).await.unwrap();
        assert!(!records.bytes.is_empty(), "nothing served at {offset} below {hw}");
        offset = next_offset(&records.bytes);
        out.extend_from_slice(&records.bytes);
        check();
    }
    out
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            total += dir_bytes(&e.path());
        } else {
            total += e.metadata().unwrap().len();
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_the_bucket_equal_the_source_bytes_at_the_source_offsets() {
    let w = World::new(60, 4096);
    w.ship().await;
    let replica = w.replica(64 << 20);
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.partitions, 1);
    let ends = replica.ends(TOPIC, 0).unwrap();
    assert_eq!((ends.log_start, ends.high_watermark, ends.last_stable), (0, 120, 120));
    assert_eq!(ends.leader_epoch, 0);
    let topics = replica.topics();
    assert_eq!(topics.len(), 1);
    assert_eq!(
        (topics[0].name.as_str(), topics[0].id, &topics[0].partitions[..]),
        (TOPIC, [5; 16], &[0][..])
    );

    let source = w.source_bytes();
    assert!(
        w.objects(".log").len() >= 4,
        "several segments: {:?}",
        w.objects(".log")
    );
    assert_eq!(read_all(&replica, 0, 1000, &|| {}).await, source);
    // An offset inside a batch returns that whole batch; the high watermark an empty answer; past it, out of range.
    let inside = read(&replica, 41, 1).await.unwrap();
    assert_eq!(i64::from_be_bytes(inside.bytes[..8].try_into().unwrap()), 40);
    assert!(read(&replica, 120, 1000).await.unwrap().bytes.is_empty());
    assert!(matches!(
        read(&replica, 121, 1000).await,
        Err(ReadError::OutOfRange { .. })
    ));

    // Lookups by time and epoch, answered from the manifests and the cached segment.
    let r = replica.clone();
    let (by_time, max) = tokio::task::spawn_blocking(move || {
        (
            r.offset_for_timestamp(TOPIC, 0, TS0 + 37 * 1000).unwrap(),
            r.max_timestamp(TOPIC, 0).unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(by_time, Some((74, TS0 + 37 * 1000)));
    assert_eq!(max, Some((119, TS0 + 59 * 1000 + 1)));
    assert_eq!(replica.epoch_end(TOPIC, 0, 0).unwrap(), (0, 120));
    assert!(matches!(replica.ends("nope", 0), Err(ReadError::UnknownPartition)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_object_is_refused_and_only_its_segment_answers_a_storage_error() {
    let w = World::new(60, 4096);
    w.ship().await;
    // Flip one byte of the second segment's `.log` object: same size, other digests.
    let logs = w.objects(".log");
    let victim = &logs[1];
    let mut bytes = std::fs::read(victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(victim, &bytes).unwrap();
    let second_base: i64 = victim.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    assert!(second_base > 0);

    let replica = w.replica(64 << 20);
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "the newest segment is sound: {report:?}");
    let refused = read(&replica, second_base, 1000).await;
    match refused {
        Err(ReadError::Storage(reason)) => assert!(reason.contains("sha256") || reason.contains("crc32c"), "{reason}"),
        other => panic!("expected a storage error, got {other:?}"),
    }
    // Nothing of it became visible in the cache, and the other segments keep being served.
    let cached = w.cache_dir().join(format!("{TOPIC}-0"));
    assert!(!cached
        .join(segment_file_name(second_base, SegmentFileKind::Log))
        .exists());
    assert!(!read(&replica, 0, 1000).await.unwrap().bytes.is_empty());
    assert!(!read(&replica, 119, 1000).await.unwrap().bytes.is_empty());
    // Refused again without downloading it again.
    assert!(matches!(
        read(&replica, second_base, 1000).await,
        Err(ReadError::Storage(_))
    ));

    // A corrupted newest segment: the partition's ends answer a storage error.
    let newest = logs.last().unwrap();
    let mut bytes = std::fs::read(newest).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(newest, &bytes).unwrap();
    let fresh = w.tmp.path().join("cache2");
    let config = BucketConfig {
        prefix: KeyPrefix::root(),
        link: LINK.into(),
        cache_dir: fresh,
        cache_size: 64 << 20,
    };
    let other = BucketReplica::new(Arc::new(w.store.clone()), &config).unwrap();
    let report = other.refresh().await.unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(matches!(other.ends(TOPIC, 0), Err(ReadError::Storage(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_stays_under_its_bound_while_every_segment_is_read() {
    let w = World::new(100, 4096);
    w.ship().await;
    let segments = w.objects(".log").len();
    assert!(segments >= 8, "{segments} segments");
    // Room for about three segments and their indexes.
    let bound = 3 * (4096 + 2 * 1024);
    let replica = w.replica(bound);
    replica.refresh().await.unwrap();
    let cache = w.cache_dir();
    let check = || {
        assert!(replica.cached_bytes() <= bound, "{} > {bound}", replica.cached_bytes());
        assert!(dir_bytes(&cache) <= bound, "on disk {} > {bound}", dir_bytes(&cache));
    };
    let served = read_all(&replica, 0, 1000, &check).await;
    assert_eq!(served, w.source_bytes());
    // And again from the start: evicted segments come back.
    let again = read_all(&replica, 0, 100_000, &check).await;
    assert_eq!(again, served);
    // The newest segment was evicted by the reads from the start; with nothing new, a refresh fetches nothing.
    let fetched = replica.fetched_bytes();
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(replica.fetched_bytes(), fetched);
    assert_eq!(replica.ends(TOPIC, 0).unwrap().last_stable, 200);

    // A segment larger than the whole cache is a storage error, not a cache over its bound.
    let tiny = {
        let config = BucketConfig {
            prefix: KeyPrefix::root(),
            link: LINK.into(),
            cache_dir: w.tmp.path().join("tiny"),
            cache_size: 1000,
        };
        Arc::new(BucketReplica::new(Arc::new(w.store.clone()), &config).unwrap())
    };
    let report = tiny.refresh().await.unwrap();
    assert!(!report.failures.is_empty());
    assert!(tiny.cached_bytes() <= 1000);
    assert!(matches!(read(&tiny, 0, 1000).await, Err(ReadError::Storage(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_manifest_version_is_followed_and_wakes_waiting_fetches() {
    let w = World::new(30, 1 << 20);
    w.ship().await;
    let replica = w.replica(64 << 20);
    replica.refresh().await.unwrap();
    assert_eq!(replica.ends(TOPIC, 0).unwrap().high_watermark, 60);
    let mut changes = replica.changes();
    changes.borrow_and_update();
    let first = read_all(&replica, 0, 1 << 20, &|| {}).await;
    let mut older = replica
        .partition(TOPIC, 0)
        .unwrap()
        .view
        .tail()
        .unwrap()
        .as_ref()
        .clone();

    // The source appends to its active segment; the shipper's next round commits a grown version.
    for round in 0..3 {
        let log = w.source_dir().join(segment_file_name(0, SegmentFileKind::Log));
        let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
        let start = 60 + round * 10;
        for i in 0..5 {
            f.write_all(&batch_at(start + 2 * i, start / 2 + i).build()).unwrap();
        }
        drop(f);
        let log_size = std::fs::metadata(w.source_dir().join(segment_file_name(0, SegmentFileKind::Log)))
            .unwrap()
            .len();
        w.ship().await;
        let fetched = replica.fetched_bytes();
        let report = replica.refresh().await.unwrap();
        // The grown version's new chunk is appended to the cached `.log`: far less than the whole segment again.
        let now = replica.fetched_bytes() - fetched;
        assert!(
            now > 0 && now < log_size / 2,
            "fetched {now} bytes for a grown .log of {log_size}"
        );
        assert!(report.failures.is_empty(), "{report:?}");
        assert!(!report.passed_over, "the shipper's commit rewrote the change notice");
        assert_eq!(report.manifests_read, 1);
        let hw = replica.ends(TOPIC, 0).unwrap().high_watermark;
        assert_eq!(hw, start + 10);
        assert!(changes.has_changed().unwrap(), "a waiting fetch is woken");
        changes.borrow_and_update();
        // The tail read from the cache, then everything, equal the source.
        let tail = read(&replica, start, 1 << 20).await.unwrap();
        assert_eq!(next_offset(&tail.bytes), hw);
        // A read still holding the older view is served by the newer cached version: nothing downloaded again.
        let before = replica.fetched_bytes();
        let pinned = replica.fetch(&format!("{TOPIC}-0"), &older).await.unwrap();
        drop(pinned);
        assert_eq!(
            replica.fetched_bytes(),
            before,
            "the older version is not fetched over the newer one"
        );
        older = replica
            .partition(TOPIC, 0)
            .unwrap()
            .view
            .tail()
            .unwrap()
            .as_ref()
            .clone();
    }
    let all = read_all(&replica, 0, 1 << 20, &|| {}).await;
    assert!(all.starts_with(&first));
    assert_eq!(all, w.source_bytes());
    // Nothing new: nothing listed (the change notice is as it was), nothing read, nobody woken.
    let report = replica.refresh().await.unwrap();
    assert!(report.passed_over, "{report:?}");
    assert_eq!((report.manifests_read, report.partitions), (0, 1), "{report:?}");
    assert!(!changes.has_changed().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_manifest_or_newest_segment_fails_its_partition_only() {
    const OTHER: &str = "audit";
    let w = World::with_topics(&[TOPIC, OTHER], 40, 4096);
    w.ship().await;
    let replica = w.replica(64 << 20);
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.partitions, 2);
    assert_eq!(replica.ends(OTHER, 0).unwrap().high_watermark, 80);

    // A manifest rewritten with garbage: refused, that partition answers a storage error, the other is served.
    let manifests = w.objects(".json");
    let newest = manifests
        .iter()
        .filter(|p| p.to_str().unwrap().contains(&format!("/{OTHER}/")) && p.to_str().unwrap().contains("/manifests/"))
        .max()
        .unwrap()
        .clone();
    let original = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, b"{\"format\": \"segmirror.manifest.v1\", \"link\": 1}").unwrap();
    // Written by a hand that leaves the change notice alone: the next refresh takes the bucket as the last listing
    // left it and keeps serving what it checked then (until the next full refresh, or a notice).
    let report = replica.refresh().await.unwrap();
    assert!(report.passed_over, "{report:?}");
    assert_eq!(replica.ends(OTHER, 0).unwrap().high_watermark, 80);
    segmirror_transport::bucket::link_changes::announce_or_warn(&w.store, &KeyPrefix::root(), LINK, "a hand").await;
    let report = replica.refresh().await.unwrap();
    assert!(!report.passed_over, "{report:?}");
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(report.failures[0].contains("manifest refused"), "{report:?}");
    assert!(matches!(replica.ends(OTHER, 0), Err(ReadError::Storage(_))));
    assert!(matches!(
        read_partition(&replica, OTHER, 0).await,
        Err(ReadError::Storage(_))
    ));
    assert_eq!(replica.ends(TOPIC, 0).unwrap().high_watermark, 80);
    assert!(!read(&replica, 0, 1000).await.unwrap().bytes.is_empty());
    // Refused once: not read again while it stays the same.
    let report = replica.refresh().await.unwrap();
    assert_eq!((report.manifests_read, report.failures.len()), (0, 1), "{report:?}");

    // Written back (a new listing entry): read again and served again.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&newest, &original).unwrap();
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(replica.ends(OTHER, 0).unwrap().high_watermark, 80);

    // The other partition's newest `.log` corrupted: a fresh replica refuses it, the first partition is served.
    let logs: Vec<PathBuf> = w
        .objects(".log")
        .into_iter()
        .filter(|p| p.to_str().unwrap().contains(&format!("/{OTHER}/")))
        .collect();
    let tail = logs.last().unwrap();
    let mut bytes = std::fs::read(tail).unwrap();
    bytes[20] ^= 0x01;
    std::fs::write(tail, &bytes).unwrap();
    let config = BucketConfig {
        prefix: KeyPrefix::root(),
        link: LINK.into(),
        cache_dir: w.tmp.path().join("cache2"),
        cache_size: 64 << 20,
    };
    let fresh = Arc::new(BucketReplica::new(Arc::new(w.store.clone()), &config).unwrap());
    let report = fresh.refresh().await.unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(matches!(fresh.ends(OTHER, 0), Err(ReadError::Storage(_))));
    assert_eq!(read_all(&fresh, 0, 1000, &|| {}).await, w.source_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_directory_it_did_not_create_is_refused_and_left_alone() {
    let w = World::new(4, 4096);
    let dir = w.cache_dir();
    std::fs::create_dir_all(dir.join("photos-1")).unwrap();
    std::fs::write(dir.join("photos-1").join("a.jpg"), b"x").unwrap();
    let config = BucketConfig {
        prefix: KeyPrefix::root(),
        link: LINK.into(),
        cache_dir: dir.clone(),
        cache_size: 1 << 20,
    };
    let refused = BucketReplica::new(Arc::new(w.store.clone()), &config).unwrap_err();
    assert!(refused.to_string().contains("not a segment cache"), "{refused}");
    assert!(dir.join("photos-1").join("a.jpg").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_an_open_transaction_and_lists_an_abort_recorded_a_segment_later() {
    read_committed_with_an_abort_segments_later(1).await;
}

/// The segments between the data and the marker are never fetched: only their `.txnindex` files are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_recorded_three_segments_after_its_data_is_listed() {
    read_committed_with_an_abort_segments_later(3).await;
}

/// Transaction A's data in one segment, its ABORT marker `rolls` segments later, transaction B open at the end.
async fn read_committed_with_an_abort_segments_later(rolls: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("source");
    let config = WriterConfig {
        segment_bytes: 4096,
        index_interval_bytes: 1024,
        running: true,
        fsync: false,
        topic_id: Some(Uuid([5; 16])),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(&log_dir, TOPIC, 0, 0, config).unwrap();
    w.become_leader(0);
    for i in 0..10 {
        w.append(batch(i)).unwrap();
    }
    // Transaction A (producer 7): four batches, then the segment rolls, then A aborts in the next segment.
    let txn = |pid: i64, seq: i32, i: i64| batch(i).producer(pid, 0, seq).transactional(true);
    let a_first = w.append(txn(7, 0, 100)).unwrap().first_offset;
    let a_segment = w.append(txn(7, 2, 101)).unwrap().segment_base_offset;
    w.append(txn(7, 4, 102)).unwrap();
    w.append(txn(7, 6, 103)).unwrap();
    let mut k = 0;
    for _ in 0..rolls {
        while !w.append(batch(200 + k)).unwrap().rolled {
            k += 1;
        }
        k += 1;
    }
    let abort = EndTxnMarker {
        control_type: ControlType::Abort,
        coordinator_epoch: 1,
    };
    let marker = w.append_end_txn_marker(7, 0, abort, TS0 + 300_000, 0).unwrap();
    assert!(
        marker.segment_base_offset > a_segment,
        "the abort is recorded segments after the data"
    );
    // Another segment after the marker's, so that the marker's is not the newest (always cached).
    let mut k = 0;
    while !w.append(batch(400 + k)).unwrap().rolled {
        k += 1;
    }
    // Transaction B (producer 8) still open at the end.
    let b_first = w.append(txn(8, 0, 500)).unwrap().first_offset;
    let written = w.close().unwrap();
    let identity = LogDirIdentity {
        cluster_id: "test-cluster-id".into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    write_log_dir_files(
        &log_dir,
        &identity,
        std::slice::from_ref(&written),
        LogDirState::Running,
    )
    .unwrap();
    let w = World::over(tmp);
    w.ship().await;
    let replica = w.replica(64 << 20);
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    let ends = replica.ends(TOPIC, 0).unwrap();
    assert_eq!(ends.high_watermark, written.log_end_offset);
    assert_eq!(ends.last_stable, b_first, "the open transaction bounds read_committed");

    let committed = |offset: i64| {
        let r = replica.clone();
        async move {
            tokio::task::spawn_blocking(move || r.read(TOPIC, 0, offset, 1 << 20, Isolation::ReadCommitted))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let at_a = committed(a_first).await;
    assert!(!at_a.bytes.is_empty());
    assert_eq!(
        at_a.aborted,
        [crate::replica::AbortedTxn {
            producer_id: 7,
            first_offset: a_first
        }]
    );
    // Nothing at or past the open transaction is served to read_committed; read_uncommitted reads it.
    let tail_base = *replica
        .partition(TOPIC, 0)
        .unwrap()
        .view
        .segments
        .keys()
        .next_back()
        .unwrap();
    let before_b = committed(tail_base).await;
    assert!(before_b.bytes.is_empty() || next_offset(&before_b.bytes) <= b_first);
    assert!(committed(b_first).await.bytes.is_empty());
    let uncommitted = read(&replica, b_first, 1 << 20).await.unwrap();
    assert_eq!(next_offset(&uncommitted.bytes), ends.high_watermark);
}

/// A segment whose last records compaction removed (the next segment starts well after its last batch): a fetch
/// in the gap is answered with the next segment's first batch, as a broker answers, so the consumer moves on.
#[tokio::test]
async fn a_fetch_in_a_compaction_gap_at_a_segment_end_gets_the_next_segments_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let log_dir = tmp.path().join("source");
    let config = WriterConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 1024,
        running: true,
        fsync: false,
        topic_id: Some(Uuid([5; 16])),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(&log_dir, TOPIC, 0, 0, config).unwrap();
    w.become_leader(0);
    for i in 0..3 {
        w.append(batch(i)).unwrap();
    }
    w.roll().unwrap();
    let after_gap = w.append_at(20, batch_at(20, 3)).unwrap();
    w.append(batch(4)).unwrap();
    let written = w.close().unwrap();
    let identity = LogDirIdentity {
        cluster_id: "test-cluster-id".into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    write_log_dir_files(
        &log_dir,
        &identity,
        std::slice::from_ref(&written),
        LogDirState::Running,
    )
    .unwrap();
    let w = World::over(tmp);
    w.ship().await;
    let replica = w.replica(64 << 20);
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    for offset in [6, 7, 19, 20] {
        let r = replica.clone();
        let got = tokio::task::spawn_blocking(move || r.read(TOPIC, 0, offset, 1 << 20, Isolation::ReadUncommitted))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("offset {offset}: {e}"));
        assert!(!got.bytes.is_empty(), "offset {offset}: nothing answered");
        let base = i64::from_be_bytes(got.bytes[..8].try_into().unwrap());
        assert_eq!(base, after_gap.first_offset, "offset {offset}: the batch after the gap");
    }
}

mod by_chunks;
