//! The tail feed over partitions written batch by batch while it runs: every
//! byte once and in order across rolls, seals that match the files, resume at
//! a boundary, refused resumes, and a sealed segment rewritten under the feed.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write as _};

use segment_format::index::DEFAULT_INDEX_INTERVAL_BYTES;
use segment_format::record::{BatchBuilder, RecordSpec};
use segmirror_transport::direct::payload::CompanionKind;

use super::seal::seal;
use super::*;
use crate::source::bound_hw::HighWatermark;
use crate::source::growing::{read_tail_into, ChunkContent, TailRead};
use crate::source::read::{read_partition, PartitionRead};

/// A fixed high watermark (or none) for every partition.
pub(super) struct FixedHw(pub(super) Option<i64>);

impl HighWatermarkSource for FixedHw {
    fn high_watermark(&self, _topic: &str, _partition: i32) -> Option<HighWatermark> {
        self.0.map(|offset| HighWatermark {
            offset,
            as_of: std::time::SystemTime::now(),
        })
    }
}

pub(super) fn batch_at(offset: i64, records: i32, i: usize) -> Vec<u8> {
    let specs = (0..records)
        .map(|r| {
            RecordSpec::new(r, 1_700_000_000_000 + i as i64)
                .with_value(vec![b'a' + (i % 26) as u8; 50 + (i * 37) % 900])
        })
        .collect::<Vec<_>>();
    BatchBuilder::new(offset)
        .partition_leader_epoch(1)
        .records(specs)
        .build()
}

pub(super) fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
}

pub(super) fn partition() -> PartitionRef {
    PartitionRef {
        topic: "events".into(),
        partition: 0,
        topic_id: [7; 16],
    }
}

pub(super) fn feed(dir: &Path, upto: UptoPolicy, hw: Option<i64>, max_chunk_bytes: u64) -> TailFeed {
    let mut config = TailFeedConfig::new(Arc::new(FixedHw(hw)));
    config.upto = upto;
    config.max_chunk_bytes = max_chunk_bytes;
    config.poll_interval = Duration::from_millis(5);
    TailFeed::new(
        vec![TailPartition {
            partition: partition(),
            dir: dir.to_path_buf(),
        }],
        config,
    )
}

/// The offset index of the `.log` at `path` at Kafka's default interval.
fn default_offset_index(path: &Path, base: i64) -> Vec<u8> {
    let mut builder = segment_format::index::OffsetIndexBuilder::new(base, DEFAULT_INDEX_INTERVAL_BYTES);
    for frame in segment_format::log::scan_frames(&std::fs::read(path).unwrap(), 0) {
        builder.push(&frame.unwrap().info).unwrap();
    }
    builder.to_bytes()
}

pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes).as_ref());
    out
}

/// A partition dir with one segment at 0 holding `n` batches; returns the
/// dir, the log path, the batch boundaries and the next offset.
fn written(root: &Path, n: usize) -> (PathBuf, PathBuf, Vec<u64>, i64) {
    let dir = root.join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let log = log_path(&dir, 0);
    std::fs::write(&log, b"").unwrap();
    let mut boundaries = vec![0u64];
    let mut offset = 0i64;
    for i in 0..n {
        let b = batch_at(offset, 2, i);
        offset += 2;
        append(&log, &b);
        boundaries.push(boundaries.last().unwrap() + b.len() as u64);
    }
    (dir, log, boundaries, offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_once_in_order_across_rolls_with_matching_seals() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 3000);
    feed.seek(&[]).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let runner = tokio::spawn(async move {
        loop {
            match feed.next().await {
                Ok(item) => {
                    if tx.send(Ok(item)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });

    // Three segments: 0, then rolls at the offsets reached; the last stays active.
    let mut bases = vec![0i64];
    let mut indexes = BTreeMap::new();
    let mut offset = 0i64;
    std::fs::write(log_path(&dir, 0), b"").unwrap();
    for seg in 0..3 {
        let log = log_path(&dir, *bases.last().unwrap());
        for i in 0..25usize {
            let b = batch_at(offset, 1 + (i % 3) as i32, i + seg * 100);
            offset += 1 + (i % 3) as i64;
            if i % 4 == 0 {
                // Written in two halves with the feed running in between.
                let (a, rest) = b.split_at(b.len() / 2);
                append(&log, a);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                append(&log, rest);
            } else {
                append(&log, &b);
            }
            if i % 5 == 0 {
                tokio::task::yield_now().await;
            }
        }
        if seg < 2 {
            // Companions of the sealed segment and the snapshot at the next base.
            let base = *bases.last().unwrap();
            // The offset index a broker at the default interval writes (one no interval rebuilds travels inline).
            let index = default_offset_index(&log, base);
            assert!(!index.is_empty());
            std::fs::write(dir.join(segment_file_name(base, SegmentFileKind::Index)), &index).unwrap();
            indexes.insert(base, index);
            std::fs::write(
                dir.join(segment_file_name(base, SegmentFileKind::TxnIndex)),
                vec![2u8; 40],
            )
            .unwrap();
            std::fs::write(dir.join(format!("{offset:020}.snapshot")), vec![3u8; 33]).unwrap();
            std::fs::write(log_path(&dir, offset), b"").unwrap();
            bases.push(offset);
        }
    }
    let files: BTreeMap<i64, Vec<u8>> = bases
        .iter()
        .map(|&b| (b, std::fs::read(log_path(&dir, b)).unwrap()))
        .collect();
    let last = *bases.last().unwrap();
    let last_len = files[&last].len() as u64;

    let mut shipped: BTreeMap<i64, Vec<u8>> = BTreeMap::new();
    let mut seals = Vec::new();
    let mut order = Vec::new();
    while shipped.get(&last).map_or(0, |b| b.len() as u64) < last_len {
        let item = rx.recv().await.unwrap().unwrap();
        match item {
            FeedItem::Chunk(c) => {
                assert_eq!(c.partition, partition());
                let seg = shipped.entry(c.segment_base).or_default();
                assert_eq!(
                    c.position,
                    seg.len() as u64,
                    "chunk of {} not contiguous",
                    c.segment_base
                );
                assert!(!c.bytes.is_empty());
                seg.extend_from_slice(&c.bytes);
                order.push(c.segment_base);
            }
            FeedItem::Seal(s) => {
                assert_eq!(s.final_size, shipped[&s.segment_base].len() as u64);
                order.push(s.segment_base);
                seals.push(s);
            }
            FeedItem::LogStart(l) => panic!("no segment was deleted, yet {l:?}"),
            FeedItem::Replace(r) => panic!("no segment was rewritten, yet {r:?}"),
            FeedItem::Progress(p) => panic!("progress reports are off by default, yet {p:?}"),
            other @ (FeedItem::Claim(_) | FeedItem::Roll(_)) => panic!("a single-broker feed, yet {other:?}"),
            FeedItem::Truncate(t) => panic!("no log ends were given, yet {t:?}"),
        }
    }
    runner.abort();
    assert_eq!(&shipped, &files, "every byte once, in order");
    // Segments in order: each sealed before the next starts.
    assert!(order.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(
        seals.iter().map(|s| s.segment_base).collect::<Vec<_>>(),
        bases[..2].to_vec()
    );
    for s in &seals {
        assert_eq!(s.log_sha256, sha256(&files[&s.segment_base]));
        let kinds: Vec<_> = s
            .companions
            .iter()
            .map(|c| (c.kind, c.size, c.inline.is_some()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (CompanionKind::OffsetIndex, indexes[&s.segment_base].len() as u64, false),
                (CompanionKind::TxnIndex, 40, true),
            ]
        );
        assert_eq!(s.companions[0].sha256, sha256(&indexes[&s.segment_base]));
        assert_eq!(s.companions[0].index_interval, None, "Kafka's default goes unnamed");
    }
}

#[tokio::test]
async fn seek_to_a_mid_segment_boundary_resumes_there() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log, boundaries, _) = written(root.path(), 10);
    let file = std::fs::read(&log).unwrap();
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    let resume = Position {
        partition: partition(),
        segment_base: 0,
        position: boundaries[4],
    };
    feed.seek(std::slice::from_ref(&resume)).await.unwrap();
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => {
            assert_eq!((c.segment_base, c.position), (0, boundaries[4]));
            assert_eq!(&c.bytes[..], &file[boundaries[4] as usize..]);
        }
        other => panic!("expected a chunk, got {other:?}"),
    }
    assert_eq!(feed.position(&partition()), Some((0, file.len() as u64)));
}

/// A partition asked for before the broker created its directory (a topic being created as the feed starts) is
/// waited for, and shipped from byte 0 once it appears; it is not taken as a deleted partition and dropped.
#[tokio::test]
async fn a_partition_whose_directory_appears_later_is_waited_for_and_shipped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek(&[]).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(200), feed.next()).await;
    assert!(waited.is_err(), "nothing to ship yet, got {waited:?}");
    let (_, log, _, _) = written(root.path(), 3);
    let file = std::fs::read(&log).unwrap();
    match tokio::time::timeout(Duration::from_secs(10), feed.next()).await {
        Ok(Ok(FeedItem::Chunk(c))) => {
            assert_eq!((c.segment_base, c.position), (0, 0));
            assert_eq!(&c.bytes[..], &file[..]);
        }
        other => panic!("expected the new partition's first chunk, got {other:?}"),
    }
}

#[tokio::test]
async fn high_watermark_bounds_what_ships() {
    let root = tempfile::tempdir().unwrap();
    // Batches of 2 records: offsets [0,2), [2,4), ...; a high watermark of 7 admits 3 batches.
    let (dir, _log, boundaries, _) = written(root.path(), 6);
    let mut feed = feed(&dir, UptoPolicy::HighWatermark, Some(7), MAX_FEED_CHUNK_BYTES);
    feed.seek(&[]).await.unwrap();
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => assert_eq!((c.position, c.bytes.len() as u64), (0, boundaries[3])),
        other => panic!("expected a chunk, got {other:?}"),
    }
    assert_eq!(feed.position(&partition()), Some((0, boundaries[3])));
}

#[tokio::test]
async fn seek_to_a_deleted_segment_or_a_non_boundary_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let (dir, _log, boundaries, _) = written(root.path(), 5);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    let at = |segment_base, position| Position {
        partition: partition(),
        segment_base,
        position,
    };
    match feed.seek_positions(&[at(500, 0)]).await {
        Err(Error::ResumeInvalid {
            partition,
            segment_base: 500,
            position: 0,
            reason,
        }) => {
            assert_eq!(partition, "events-0");
            assert!(reason.contains("no longer exists"), "{reason}");
        }
        other => panic!("expected ResumeInvalid, got {other:?}"),
    }
    let inside = boundaries[2] + 5;
    match feed.seek_positions(&[at(0, inside)]).await {
        Err(Error::ResumeInvalid { position, reason, .. }) => {
            assert_eq!(position, inside);
            assert!(reason.contains("not a batch boundary"), "{reason}");
        }
        other => panic!("expected ResumeInvalid, got {other:?}"),
    }
    let beyond = boundaries[5] + 10;
    assert!(matches!(
        feed.seek_positions(&[at(0, beyond)]).await,
        Err(Error::ResumeInvalid { .. })
    ));
    // Through the ChunkFeed trait (a session's Resume): the partition is refused for the session, naming why, and
    // the seek goes on; nothing of it ships.
    feed.seek(&[at(500, 0)]).await.expect("refused, not failed");
    assert!(feed
        .refused_resume(&partition())
        .is_some_and(|r| r.contains("no longer exists")));
    let next = tokio::time::timeout(Duration::from_millis(300), feed.next()).await;
    assert!(next.is_err(), "the refused partition shipped {next:?}");
}

#[tokio::test]
async fn a_sealed_segment_rewritten_under_the_feed_diverges() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log, boundaries, next) = written(root.path(), 8);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek(&[]).await.unwrap();
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => assert_eq!(c.bytes.len() as u64, boundaries[8]),
        other => panic!("expected a chunk, got {other:?}"),
    }
    // A byte inside the first batch changes in place (same inode, same length;
    // the tripwire on the last batch cannot see it), then the segment rolls.
    let mut f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.seek(SeekFrom::Start(boundaries[1] - 3)).unwrap();
    f.write_all(b"X").unwrap();
    drop(f);
    std::fs::write(log_path(&dir, next), b"").unwrap();
    match feed.next_item().await {
        Err(Error::Diverged {
            partition,
            segment_base: 0,
            position,
            reason,
        }) => {
            assert_eq!(partition, "events-0");
            assert_eq!(position, boundaries[8]);
            assert!(reason.contains("CRC-32C"), "{reason}");
        }
        other => panic!("expected Diverged, got {other:?}"),
    }
}

/// A segment shipped from byte 0 by this feed seals from its running digest, without reading the file again, and
/// the seal is the one the full read gives: the file's SHA-256, the broker's index at Kafka's default interval
/// unnamed. A copy of the state (a resumed segment) seals through the full read, to the same seal.
#[tokio::test]
async fn a_segment_shipped_from_byte_0_seals_from_its_running_digest_as_the_full_read_would() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log, boundaries, next) = written(root.path(), 40);
    let index = default_offset_index(&log, 0);
    let times = {
        let mut t = segment_format::index::TimeIndexBuilder::new(0, DEFAULT_INDEX_INTERVAL_BYTES);
        for frame in segment_format::log::scan_frames(&std::fs::read(&log).unwrap(), 0) {
            t.push(&frame.unwrap().info).unwrap();
        }
        t.seal();
        t.to_bytes()
    };
    assert!(!index.is_empty() && !times.is_empty());
    std::fs::write(dir.join(segment_file_name(0, SegmentFileKind::Index)), &index).unwrap();
    std::fs::write(dir.join(segment_file_name(0, SegmentFileKind::TimeIndex)), &times).unwrap();
    std::fs::write(log_path(&dir, next), b"").unwrap();
    let file = std::fs::read(&log).unwrap();

    // Shipped from byte 0 in several chunks: the running digest.
    let mut fresh = feed(&dir, UptoPolicy::LogEnd, None, 3000);
    fresh.seek(&[]).await.unwrap();
    let fast = loop {
        match fresh.next_item().await.unwrap() {
            FeedItem::Chunk(c) => assert!(c.bytes.len() <= 3000, "chunks of at most the limit"),
            FeedItem::Seal(s) => break s,
            other => panic!("expected chunks then a seal, got {other:?}"),
        }
    };
    assert_eq!(fresh.parts[0].running_seals, 1, "sealed from the running digest");
    assert_eq!(fast.final_size, file.len() as u64);
    assert_eq!(fast.log_sha256, sha256(&file));

    // Resumed mid-segment (a new session): no running digest, the full read; the same seal.
    let mut resumed = feed(&dir, UptoPolicy::LogEnd, None, 3000);
    resumed
        .seek(&[Position {
            partition: partition(),
            segment_base: 0,
            position: boundaries[20],
        }])
        .await
        .unwrap();
    let slow = loop {
        match resumed.next_item().await.unwrap() {
            FeedItem::Chunk(_) => {}
            FeedItem::Seal(s) => break s,
            other => panic!("expected chunks then a seal, got {other:?}"),
        }
    };
    assert_eq!(resumed.parts[0].running_seals, 0, "sealed from the file");
    assert_eq!(fast, slow);
    let kinds: Vec<_> = fast
        .companions
        .iter()
        .map(|c| (c.kind, c.size, c.index_interval))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (CompanionKind::OffsetIndex, index.len() as u64, None),
            (CompanionKind::TimeIndex, times.len() as u64, None),
        ]
    );
    assert_eq!(fast.companions[0].sha256, sha256(&index));
    assert_eq!(fast.companions[1].sha256, sha256(&times));
}

/// The running digest is not trusted for a file changed after its last chunk was read: a segment truncated and
/// written again to the same length (same inode, the last batch as before) takes the full read and diverges.
#[tokio::test]
async fn a_segment_rewritten_to_the_same_length_after_shipping_is_not_sealed_from_the_running_digest() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log, boundaries, next) = written(root.path(), 8);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek(&[]).await.unwrap();
    match feed.next_item().await.unwrap() {
        FeedItem::Chunk(c) => assert_eq!(c.bytes.len() as u64, boundaries[8]),
        other => panic!("expected a chunk, got {other:?}"),
    }
    assert!(feed.parts[0].running.covers(0, boundaries[8]));
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[(boundaries[2] - 5) as usize] ^= 0x55;
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(boundaries[1]).unwrap();
    drop(f);
    // Past the timestamp granularity of file systems without fine-grained timestamps.
    std::thread::sleep(Duration::from_millis(20));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(&bytes[boundaries[1] as usize..]).unwrap();
    drop(f);
    std::fs::write(log_path(&dir, next), b"").unwrap();
    match feed.next_item().await {
        Err(Error::Diverged { reason, .. }) => assert!(reason.contains("CRC-32C"), "{reason}"),
        other => panic!("expected Diverged, got {other:?}"),
    }
}

#[tokio::test]
async fn a_truncated_segment_diverges() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log, boundaries, _) = written(root.path(), 4);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek(&[]).await.unwrap();
    feed.next().await.unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(boundaries[2]).unwrap();
    drop(f);
    assert!(matches!(feed.next_item().await, Err(Error::Diverged { .. })));
}

/// Two partitions with data: a held one is passed over and what it gathers meanwhile goes as one chunk when it is
/// released; a new session (seek) holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_partition_is_passed_over_and_ships_what_it_gathered_as_one_chunk_when_released() {
    let root = tempfile::tempdir().unwrap();
    let (dir0, log0, boundaries0, offset0) = written(root.path(), 3);
    let dir1 = root.path().join("events-1");
    std::fs::create_dir_all(&dir1).unwrap();
    append(&log_path(&dir1, 0), &batch_at(0, 2, 0));
    let p1 = PartitionRef {
        partition: 1,
        ..partition()
    };
    let mut config = TailFeedConfig::new(Arc::new(FixedHw(None)));
    config.upto = UptoPolicy::LogEnd;
    config.poll_interval = Duration::from_millis(5);
    let targets = vec![
        TailPartition {
            partition: partition(),
            dir: dir0.clone(),
        },
        TailPartition {
            partition: p1.clone(),
            dir: dir1.clone(),
        },
    ];
    let mut feed = TailFeed::new(targets, config);
    assert_eq!(feed.max_unacked_per_partition(), Some(MAX_UNACKED_PER_PARTITION));
    feed.seek(&[]).await.unwrap();
    let chunk_of = |item: FeedItem| match item {
        FeedItem::Chunk(c) => c,
        other => panic!("expected a chunk, got {other:?}"),
    };

    // Partition 0 comes first in the round, but it is held: partition 1's chunk comes.
    feed.hold(&partition(), true);
    assert_eq!(chunk_of(feed.next().await.unwrap()).partition, p1);
    // While held, partition 0 grows; released, everything it holds goes as one chunk.
    let more = batch_at(offset0, 2, 3);
    append(&log0, &more);
    feed.hold(&partition(), false);
    let c = chunk_of(feed.next().await.unwrap());
    assert_eq!(c.partition, partition());
    assert_eq!(
        (c.position, c.bytes.len() as u64),
        (0, boundaries0[3] + more.len() as u64)
    );

    // A new session starts with nothing held.
    feed.hold(&partition(), true);
    feed.hold(&p1, true);
    feed.seek(&[]).await.unwrap();
    assert!(feed.held.is_empty(), "{:?}", feed.held);
}

/// A session drops `next` whenever a frame arrives. The step that call started keeps running on the blocking pool
/// and is awaited again by the next call: however often `next` is dropped, one step runs at a time, and its result
/// is taken once (the first chunk, at byte 0, exactly once).
#[test]
fn a_dropped_next_leaves_its_step_running_and_starts_no_other() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let (dir, _log, boundaries, _) = written(root.path(), 5);
    rt.block_on(async {
        let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 1 << 20);
        feed.seek(&[]).await.unwrap();
        // The only blocking thread is busy until released: a step started now cannot run yet.
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let blocker = tokio::task::spawn_blocking(move || blocked.recv());
        for _ in 0..50 {
            let polled = tokio::time::timeout(Duration::ZERO, feed.next()).await;
            assert!(polled.is_err(), "the step cannot have run: {polled:?}");
        }
        assert_eq!(feed.steps_started, 1, "a dropped next started another step");
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        match feed.next().await.unwrap() {
            FeedItem::Chunk(c) => {
                assert_eq!((c.segment_base, c.position), (0, 0));
                assert_eq!(c.bytes.len() as u64, *boundaries.last().unwrap());
            }
            other => panic!("expected the first chunk, got {other:?}"),
        }
        assert_eq!(feed.position(&partition()), Some((0, *boundaries.last().unwrap())));
    });
}

/// Leadership set by the test; every set moves the change counter.
pub(super) struct SetLeadership {
    pub(super) led: std::sync::Mutex<BTreeMap<i32, i32>>,
    pub(super) changes: tokio::sync::watch::Sender<u64>,
}

impl SetLeadership {
    pub(super) fn set(&self, partition: i32, epoch: Option<i32>) {
        let mut led = self.led.lock().unwrap();
        match epoch {
            Some(e) => led.insert(partition, e),
            None => led.remove(&partition),
        };
        self.changes.send_modify(|n| *n += 1);
    }
}

impl crate::source::leadership::LeadershipSource for SetLeadership {
    fn node_id(&self) -> i32 {
        1
    }
    fn led_epoch(&self, _topic: &str, partition: i32) -> Option<i32> {
        self.led.lock().unwrap().get(&partition).copied()
    }
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changes.subscribe())
    }
}

/// With a leadership source only led partitions ship; one whose leadership is lost ships nothing more, and one
/// that becomes led wakes the feed (the poll interval is an hour: only the change can wake it) and ships what it
/// holds from where it stood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_led_partitions_ship_and_a_leadership_change_wakes_the_feed() {
    let root = tempfile::tempdir().unwrap();
    let (dir0, log0, boundaries0, offset0) = written(root.path(), 3);
    let dir1 = root.path().join("events-1");
    std::fs::create_dir_all(&dir1).unwrap();
    let first1 = batch_at(0, 2, 0);
    append(&log_path(&dir1, 0), &first1);
    let p1 = PartitionRef {
        partition: 1,
        ..partition()
    };
    let leadership = Arc::new(SetLeadership {
        led: std::sync::Mutex::new(BTreeMap::from([(1, 4)])),
        changes: tokio::sync::watch::channel(0).0,
    });
    let mut config = TailFeedConfig::new(Arc::new(FixedHw(None)));
    config.upto = UptoPolicy::LogEnd;
    config.poll_interval = Duration::from_secs(3600);
    config.leadership = Some(leadership.clone());
    let targets = vec![
        TailPartition {
            partition: partition(),
            dir: dir0.clone(),
        },
        TailPartition {
            partition: p1.clone(),
            dir: dir1.clone(),
        },
    ];
    let mut feed = TailFeed::new(targets, config);
    feed.seek(&[]).await.unwrap();
    let chunk_of = |item: FeedItem| match item {
        FeedItem::Chunk(c) => c,
        other => panic!("expected a chunk, got {other:?}"),
    };
    assert!(!feed.leads(&partition()) && feed.leads(&p1));
    // Only partition 1 is led: it is claimed at its epoch, and once granted (nothing in the mirror yet) its chunk
    // comes; partition 0's bytes stay.
    claim_granted(&mut feed, &p1, 4).await;
    let c = chunk_of(feed.next().await.unwrap());
    assert_eq!(
        (c.partition.clone(), c.position, c.bytes.len()),
        (p1.clone(), 0, first1.len())
    );
    assert_eq!(feed.position(&partition()), None, "nothing of partition 0 read");

    // Leadership moves: partition 0 comes to this broker, partition 1 goes. Partition 1 grows but ships nothing.
    leadership.set(1, None);
    append(&log_path(&dir1, 0), &batch_at(2, 2, 1));
    let waiting = tokio::spawn(async move {
        let item = feed.next().await.unwrap();
        (feed, item)
    });
    leadership.set(0, Some(5));
    let (mut feed, item) = waiting.await.unwrap();
    assert_eq!(
        item,
        FeedItem::Claim(segmirror_transport::direct::payload::Claim {
            partition: partition(),
            leader_epoch: 5
        })
    );
    grant(&mut feed, &partition(), None);
    let c = chunk_of(feed.next().await.unwrap());
    assert_eq!(
        (c.partition.clone(), c.position, c.bytes.len() as u64),
        (partition(), 0, boundaries0[3])
    );
    // Partition 0 grows: it ships; partition 1's new batch still does not.
    let more = batch_at(offset0, 2, 3);
    append(&log0, &more);
    let c = chunk_of(feed.next().await.unwrap());
    assert_eq!((c.partition.clone(), c.position), (partition(), boundaries0[3]));
    assert_eq!(
        feed.position(&p1),
        Some((0, first1.len() as u64)),
        "partition 1 not read since its leadership went"
    );
}

/// The applier's grant of `partition`, `durable` as its ClaimResult carries it.
pub(super) fn grant(
    feed: &mut TailFeed,
    partition: &PartitionRef,
    durable: Option<segmirror_transport::direct::payload::ClaimedAt>,
) {
    use segmirror_transport::direct::payload::{ClaimResult, ClaimVerdict};
    feed.claim_result(&ClaimResult {
        partition: partition.clone(),
        verdict: ClaimVerdict::Granted { durable },
    });
}

/// The feed's next item is the claim of `partition` at `epoch`; the applier grants it with nothing durable.
pub(super) async fn claim_granted(feed: &mut TailFeed, partition: &PartitionRef, epoch: i32) {
    match feed.next().await.unwrap() {
        FeedItem::Claim(c) => assert_eq!((&c.partition, c.leader_epoch), (partition, epoch)),
        other => panic!("expected a claim, got {other:?}"),
    }
    grant(feed, partition, None);
}

/// The cleaner deleting a sealed segment's companion between the listing and the seal (seen in
/// e2e_tail_processes: `ship` exited with `….timeindex: No such file or directory`) is a source that changed, which
/// the feed lists again, not an error that ends the process; an unreadable companion of another kind still is one.
#[test]
fn a_companion_deleted_between_the_listing_and_the_seal_is_a_changed_source() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log, _, next) = written(root.path(), 6);
    let index = default_offset_index(&log, 0);
    std::fs::write(dir.join(segment_file_name(0, SegmentFileKind::Index)), &index).unwrap();
    let time_index = dir.join(segment_file_name(0, SegmentFileKind::TimeIndex));
    std::fs::write(&time_index, b"").unwrap();
    std::fs::write(log_path(&dir, next), b"").unwrap();
    let PartitionRead::View(view) = read_partition(&dir).unwrap() else {
        panic!("the partition is readable")
    };
    let segment = view.segments.iter().find(|s| s.base_offset() == 0).unwrap();
    assert!(segment.files.time_index.is_some(), "listed with its time index");
    let start = TailPosition::start(&log, 0).unwrap();
    let mut content = ChunkContent::default();
    let TailRead::Appended { next: end, .. } = read_tail_into(&start, &TailOptions::default(), &mut content).unwrap()
    else {
        panic!("the segment's batches are read")
    };
    assert_eq!(end.position, std::fs::metadata(&log).unwrap().len());
    assert!(
        seal(&partition(), &end, segment, None).is_ok(),
        "sealed while its files are there"
    );

    std::fs::remove_file(&time_index).unwrap();
    let gone = seal(&partition(), &end, segment, None).unwrap_err();
    assert!(gone.to_string().contains(".timeindex"), "names the file: {gone}");
    assert!(
        gone.is_source_changed(),
        "a deleted companion is a changed source: {gone:?}"
    );

    // A companion that is there but not a regular file is not something a listing again mends.
    std::fs::create_dir(&time_index).unwrap();
    let odd = seal(&partition(), &end, segment, None).unwrap_err();
    assert!(
        !odd.is_source_changed(),
        "a directory in a companion's place is an error: {odd:?}"
    );
}
