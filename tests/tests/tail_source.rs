//! The source side of tail mode against a real Kafka 4.4 broker: discovery, reading the tail, the watcher and the
//! high watermarks.
//!
//! [`the_watcher_and_the_incremental_reader_follow_a_rolling_partition_exactly_once`]: a topic with 64 KiB segments
//! and size-based retention is produced to by a Python producer in many flushed steps while the test follows its
//! partition driven only by watcher events: on each event it re-lists the partition and continues every followed
//! segment with `read_tail`: one driver bounded by the high watermark from `replication-offset-checkpoint` (never
//! shipping a batch at or past it), one to the log end. The partition rolls and retention deletes its first
//! segments during the run. Then, for both: every batch was shipped exactly once (the
//! shipped batches' offsets are contiguous from 0 to the high watermark, no repeats), each chunk's CRC-32C is the
//! CRC of its bytes, the chunks of every segment still on disk concatenate to that segment's bytes, every deleted
//! segment was read to its end (through its `.deleted` name when retention took it before the checkpointed high
//! watermark let the bounded driver read its last batches), and the watcher reported rolls, deletions and
//! high-watermark changes.
//!
//! [`a_real_compaction_swap_is_reported_and_a_tail_on_the_old_file_is_told_so`]: compaction is switched on under a
//! tail that read a sealed segment; the broker's swap shows as `SegmentReplaced` (not as a deletion), the old
//! position gets `TailRead::Replaced`, and the new file reads from the start to exactly its bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use segment_format::log::scan_frames;
use segmirror_shipper::source::{
    prefix_crc32c, read_partition, read_tail, upto_bound, watch, CheckpointHighWatermarks, HighWatermarkSource,
    PartitionRead, TailOptions, TailPosition, TailRead, TopicFilter, UptoPolicy, WatchConfig, WatchEvent,
};
use segmirror_tests::*;

const TOPIC: &str = "tail-follow";
/// Python producer runs, each a few flushed steps: spread over seconds so the tail follows a growing log.
const PRODUCER_RUNS: usize = 8;
const STEPS_PER_RUN: usize = 6;
const RECORDS_PER_STEP: usize = 40;
const VALUE_BYTES: usize = 400;
/// Small segments and size-based retention: many rolls and deletions, a stable final state.
const SEGMENT_BYTES: u64 = 64 * 1024;
const RETENTION_BYTES: u64 = 256 * 1024;
/// Longest wait for the tail to reach the final high watermark after the producer stops (the broker checkpoints
/// high watermarks every second in the harness).
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);

/// One followed segment: where its tail stands and every byte shipped from it.
struct Followed {
    at: TailPosition,
    bytes: Vec<u8>,
    /// Gone from the partition's listing (retention renamed it `.deleted`). The tail goes on through the new name,
    /// the same file, until the segment is read to its end: a bounded driver may not have been allowed to read
    /// its last batches yet when retention took it, because the checkpointed high watermark lags the broker's.
    gone: bool,
    /// Nothing more to read: a gone segment read to its end, or whose file is removed too.
    finished: bool,
}

/// The test's tail driver for one partition.
struct Driver {
    dir: PathBuf,
    segments: BTreeMap<i64, Followed>,
    chunks: u64,
    /// Chunks read through a `.deleted` name.
    chunks_after_deletion: u64,
}

impl Driver {
    /// Re-read the partition (events are hints) and continue every followed segment up to `upto`.
    fn catch_up(&mut self, upto: Option<i64>) {
        let view = match read_partition(&self.dir).unwrap() {
            PartitionRead::View(v) => v,
            PartitionRead::Refused(f) => panic!("partition refused: {f:?}"),
        };
        let live: BTreeSet<i64> = view.segments.iter().map(|s| s.base_offset()).collect();
        for s in &view.segments {
            // A segment deleted before it was seen would be a gap, which the checks catch.
            if let std::collections::btree_map::Entry::Vacant(slot) = self.segments.entry(s.base_offset()) {
                // Deleted between the listing and now: nothing to follow.
                let Ok(at) = TailPosition::start(&s.files.log, s.base_offset()) else {
                    continue;
                };
                slot.insert(Followed {
                    at,
                    bytes: Vec::new(),
                    gone: false,
                    finished: false,
                });
            }
        }
        let options = TailOptions {
            upto,
            ..TailOptions::default()
        };
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        for (i, (base, f)) in self.segments.iter_mut().enumerate() {
            if f.finished {
                continue;
            }
            if !live.contains(base) && !f.gone {
                f.gone = true;
                follow_to_deleted(&mut f.at);
            }
            loop {
                match read_tail(&f.at, &options).unwrap() {
                    TailRead::Appended { chunk, next } => {
                        if chunk.is_empty() {
                            break;
                        }
                        if let (Some(bound), Some(last)) = (upto, chunk.last_offset) {
                            assert!(last < bound, "shipped offset {last} at or past the bound {bound}");
                        }
                        let bytes = read_range(&f.at.path, chunk.from, chunk.to);
                        assert_eq!(
                            crc32c::crc32c(&bytes),
                            chunk.crc32c,
                            "chunk CRC of {}",
                            f.at.path.display()
                        );
                        assert_eq!(chunk.from, f.bytes.len() as u64, "chunks are contiguous");
                        f.bytes.extend_from_slice(&bytes);
                        f.at = next;
                        self.chunks += 1;
                        self.chunks_after_deletion += u64::from(f.gone);
                    }
                    // Retention renamed it `.deleted` since the listing: go on under that name.
                    TailRead::Replaced { .. } if !f.gone => {
                        f.gone = true;
                        if !follow_to_deleted(&mut f.at) {
                            f.finished = true;
                            break;
                        }
                    }
                    // The `.deleted` file is removed too: what was read is all there is.
                    TailRead::Replaced { .. } => {
                        f.finished = true;
                        break;
                    }
                    other => panic!("segment {base}: {other:?}"),
                }
            }
            if f.gone && bases.get(i + 1) == Some(&f.at.next_offset) {
                f.finished = true;
            }
        }
    }

    /// One past the last offset shipped.
    fn shipped_end(&self) -> i64 {
        self.segments.values().map(|f| f.at.next_offset).max().unwrap_or(0)
    }
}

/// Points `at` to the `.deleted` name retention gave its file, if that name holds the same file. `false`: no
/// such file (already removed, or the path was not renamed but replaced).
fn follow_to_deleted(at: &mut TailPosition) -> bool {
    let deleted = deleted_name(&at.path);
    let same = std::fs::metadata(&deleted).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == at.inode);
    if same {
        at.path = deleted;
    }
    same
}

fn deleted_name(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.deleted", path.display()))
}

/// The file a segment followed at `path` is now at: `path`, or its `.deleted` name once retention took it after
/// the last read (the retention pass that follows the producer's last batch may come after the tail caught up).
fn current_name(path: &Path) -> PathBuf {
    if path.exists() {
        path.to_path_buf()
    } else {
        deleted_name(path)
    }
}

/// Bytes `[from, to)` of a segment just validated; retention may have renamed it `.deleted` meanwhile (same file).
fn read_range(path: &Path, from: u64, to: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(current_name(path)).unwrap();
    let mut buf = vec![0u8; (to - from) as usize];
    file.read_exact_at(&mut buf, from).unwrap();
    buf
}

/// Every batch shipped exactly once: offsets contiguous from 0 to `total` across all segments read; deleted
/// segments read to their end; the ones on disk equal what was shipped, byte for byte. Returns the batch count.
fn check_exactly_once(driver: &Driver, total: i64) -> usize {
    // Every batch exactly once: offsets contiguous from 0 to the high watermark across all segments read.
    let mut next = 0i64;
    let mut batches = 0;
    for (base, f) in &driver.segments {
        for frame in scan_frames(&f.bytes, 0) {
            let frame = frame.unwrap();
            assert!(frame.crc_matches());
            assert_eq!(frame.info.base_offset, next, "segment {base}: a gap or a repeat");
            next = frame.info.last_offset + 1;
            batches += 1;
        }
    }
    assert_eq!(next, total, "shipped up to the high watermark");
    // Deleted segments were read to their end; the ones on disk equal what was shipped, byte for byte.
    let bases: Vec<i64> = driver.segments.keys().copied().collect();
    let mut compared = 0;
    for (i, (base, f)) in driver.segments.iter().enumerate() {
        if f.gone {
            assert_eq!(
                Some(&f.at.next_offset),
                bases.get(i + 1),
                "deleted segment {base} read to its end"
            );
        } else {
            let path = current_name(&f.at.path);
            assert_eq!(
                prefix_crc32c(&path, f.at.position).unwrap(),
                Some(f.at.prefix_crc32c),
                "segment {base}: the chunks' combined CRC is the file's"
            );
            let on_disk = std::fs::read(&path).unwrap();
            assert!(
                on_disk == f.bytes,
                "segment {base}: {} bytes on disk, {} shipped",
                on_disk.len(),
                f.bytes.len()
            );
            compared += 1;
        }
    }
    assert!(
        driver.segments.values().any(|f| f.gone),
        "retention deleted no segment during the run"
    );
    assert!(compared >= 2, "only {compared} segments left to compare");
    assert!(driver.segments.first_key_value().map(|(b, _)| *b) == Some(0));
    batches
}

fn produce_plan(run: usize) -> ProducePlan {
    let mut plan = ProducePlan::new(TOPIC)
        .config("enable.idempotence", "true")
        .config("linger.ms", "2")
        .config("batch.size", "8192");
    for step in 0..STEPS_PER_RUN {
        let records = (0..RECORDS_PER_STEP)
            .map(|i| OutRecord {
                partition: Some(0),
                key: Some(format!("k{run}-{step}-{i}").into_bytes()),
                value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        plan = plan.step(ProduceStep::Send(records));
    }
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_and_the_incremental_reader_follow_a_rolling_partition_exactly_once() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("tail-source")).unwrap();
    let bootstrap = broker.bootstrap();
    let spec = TopicSpec::new(TOPIC, 1)
        .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
        .config("retention.bytes", RETENTION_BYTES)
        .config("retention.ms", -1);
    admin(&bootstrap, &[spec], &[]).unwrap();
    let log_dir = broker.log_dir().to_path_buf();
    let dir = broker.partition_dir(TOPIC, 0);

    let config = WatchConfig::new(vec![log_dir.clone()], TopicFilter::new(TOPIC).unwrap());
    let (_watcher, mut events) = watch(config).await.unwrap();
    let hws = CheckpointHighWatermarks::new(vec![log_dir.clone()]);
    // One driver bounded by the high watermark (the default), one shipping to the log end (`--upto log-end`).
    let new_driver = || Driver {
        dir: dir.clone(),
        segments: BTreeMap::new(),
        chunks: 0,
        chunks_after_deletion: 0,
    };
    let (mut driver, mut log_end) = (new_driver(), new_driver());

    let producer = std::thread::spawn(move || {
        let mut total = 0usize;
        for run in 0..PRODUCER_RUNS {
            total += python_produce(&bootstrap, &produce_plan(run)).unwrap().len();
        }
        total
    });

    let mut kinds: BTreeSet<&'static str> = BTreeSet::new();
    let mut note = |e: &WatchEvent| {
        kinds.insert(match e {
            WatchEvent::PartitionAppeared { .. } => "appeared",
            WatchEvent::ActiveGrew { .. } => "grew",
            WatchEvent::Rolled { .. } => "rolled",
            WatchEvent::SegmentDeleted { .. } => "deleted",
            WatchEvent::LogStartMoved { .. } => "log-start-moved",
            WatchEvent::HighWatermarksChanged { .. } => "hw",
            WatchEvent::LogStartsChanged { .. } => "log-starts",
            WatchEvent::ActiveShrank { .. } => "shrank",
            WatchEvent::SegmentReplaced { .. } => "replaced",
            WatchEvent::PartitionGone { .. } => "gone",
            WatchEvent::Unreadable { .. } => "unreadable",
        });
    };
    // Follow while the producer runs, driven by the watcher's events.
    while !producer.is_finished() {
        match tokio::time::timeout(Duration::from_secs(2), events.recv()).await {
            Ok(Some(e)) => {
                note(&e);
                if matches!(e, WatchEvent::HighWatermarksChanged { .. }) {
                    hws.reload().unwrap();
                }
            }
            Ok(None) => panic!("the watcher stopped"),
            Err(_) => {} // quiet for a while: look anyway
        }
        let upto = upto_bound(UptoPolicy::HighWatermark, &hws, TOPIC, 0).upto();
        tokio::task::block_in_place(|| {
            driver.catch_up(upto);
            log_end.catch_up(upto_bound(UptoPolicy::LogEnd, &hws, TOPIC, 0).upto());
        });
    }
    let total = producer.join().unwrap() as i64;
    assert_eq!(total as usize, PRODUCER_RUNS * STEPS_PER_RUN * RECORDS_PER_STEP);
    // Catch up to the final high watermark (the broker checkpoints it every second in the harness).
    let end = Instant::now() + CATCH_UP_TIMEOUT;
    while driver.shipped_end() < total || log_end.shipped_end() < total {
        assert!(
            Instant::now() < end,
            "tail at {} of {total} (high watermark {:?})",
            driver.shipped_end(),
            hws.high_watermark(TOPIC, 0)
        );
        match tokio::time::timeout(Duration::from_secs(2), events.recv()).await {
            Ok(Some(e)) => note(&e),
            Ok(None) => panic!("the watcher stopped"),
            Err(_) => {}
        }
        hws.reload().unwrap();
        let upto = upto_bound(UptoPolicy::HighWatermark, &hws, TOPIC, 0).upto();
        tokio::task::block_in_place(|| {
            driver.catch_up(upto);
            log_end.catch_up(None);
        });
    }
    assert_eq!(hws.high_watermark(TOPIC, 0).map(|h| h.offset), Some(total));

    let batches = check_exactly_once(&driver, total);
    let batches_log_end = check_exactly_once(&log_end, total);
    assert_eq!(batches, batches_log_end);
    for kind in ["appeared", "grew", "rolled", "deleted", "log-start-moved", "hw"] {
        assert!(kinds.contains(kind), "no {kind} event; seen {kinds:?}");
    }
    eprintln!(
        "followed {} segments, {batches} batches: {} chunks bounded by the high watermark, {} to the log end \
         ({} and {} read after retention renamed the segment)",
        driver.segments.len(),
        driver.chunks,
        log_end.chunks,
        driver.chunks_after_deletion,
        log_end.chunks_after_deletion
    );
    broker.stop().unwrap();
}

/// A real compaction swap: the watcher reports the sealed segment replaced, a tail position taken on the old file
/// gets the typed `Replaced` outcome (never the new file's bytes as if they continued the old ones), and the new
/// file reads from the start as a sound segment with the gaps compaction leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_compaction_swap_is_reported_and_a_tail_on_the_old_file_is_told_so() {
    const COMPACTED: &str = "tail-compact";
    let mut broker = KafkaBroker::start(BrokerConfig::new("tail-compact")).unwrap();
    let bootstrap = broker.bootstrap();
    // Compaction off while the data is written and read, on afterwards: the swap happens under the tail.
    let spec = TopicSpec::new(COMPACTED, 1)
        .config(broker.install().segment_bytes_config(), 24 * 1024)
        .config("cleanup.policy", "delete")
        .config("retention.ms", -1)
        .config("min.cleanable.dirty.ratio", "0.01");
    admin(&bootstrap, &[spec], &[]).unwrap();
    let log_dir = broker.log_dir().to_path_buf();
    let dir = broker.partition_dir(COMPACTED, 0);
    let config = WatchConfig::new(vec![log_dir.clone()], TopicFilter::new(COMPACTED).unwrap());
    let (_watcher, mut events) = watch(config).await.unwrap();
    for round in 0..3 {
        let mut plan = ProducePlan::new(COMPACTED)
            .config("linger.ms", "2")
            .config("batch.size", "4096");
        // Every other key of the first round is written once only, so the first segment keeps records after
        // cleaning. When every key of the first round came again in the second, the cleaner emptied the first
        // segment and `00000000000000000000.log` was gone by the time the test read it again (seen in CI).
        let records = (0..50)
            .map(|i| OutRecord {
                partition: Some(0),
                key: Some(if round == 0 && i % 2 == 0 {
                    format!("first-only-{i}").into_bytes()
                } else {
                    format!("key-{i}").into_bytes()
                }),
                value: Some(vec![b'a' + round as u8; 400]),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        plan = plan.step(ProduceStep::Send(records));
        python_produce(&bootstrap, &plan).unwrap();
    }
    // Read the first (sealed) segment to its end.
    let first = seg_path(&dir, 0);
    let mut at = TailPosition::start(&first, 0).unwrap();
    let old_len = std::fs::metadata(&first).unwrap().len();
    while at.position < old_len {
        match read_tail(&at, &TailOptions::default()).unwrap() {
            TailRead::Appended { next, .. } => at = next,
            other => panic!("{other:?}"),
        }
    }
    broker
        .tools()
        .alter_topic_config(COMPACTED, &[("cleanup.policy", "compact")])
        .unwrap();
    let seen = tokio::time::timeout(CATCH_UP_TIMEOUT, async {
        let mut seen = Vec::new();
        while let Some(e) = events.recv().await {
            let hit = matches!(&e, WatchEvent::SegmentReplaced { base_offset: 0, .. });
            seen.push(e);
            if hit {
                return seen;
            }
        }
        panic!("the watcher stopped; seen {seen:?}");
    })
    .await
    .expect("no SegmentReplaced for segment 0 after compaction was enabled");
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, WatchEvent::SegmentDeleted { base_offset: 0, .. })),
        "{seen:?}"
    );
    // The old position is on a file that is gone: typed, whatever the new file's length.
    assert!(matches!(
        read_tail(&at, &TailOptions::default()).unwrap(),
        TailRead::Replaced { .. }
    ));
    // The new file reads from the start: compaction's offset gaps are fine, every byte once.
    let mut at = start_after_swap(&first).await;
    let mut bytes = Vec::new();
    loop {
        match read_tail(&at, &TailOptions::default()).unwrap() {
            TailRead::Appended { chunk, next } if !chunk.is_empty() => {
                bytes.extend(read_range(&first, chunk.from, chunk.to));
                at = next;
            }
            TailRead::Appended { .. } => break,
            // A later cleaning pass swapped it again: start over on the newest file.
            TailRead::Replaced { .. } => {
                at = start_after_swap(&first).await;
                bytes.clear();
            }
            other => panic!("{other:?}"),
        }
    }
    let on_disk = std::fs::read(&first).unwrap();
    assert!(
        bytes == on_disk,
        "{} bytes read, {} on disk",
        bytes.len(),
        on_disk.len()
    );
    broker.stop().unwrap();
}

/// A tail position at the start of `path` once the cleaner's swap has put a file there. Kafka renames the old
/// segment `.deleted` before it renames the `.swap` file into its place, so for a moment (longer on a loaded
/// machine, seen in a CI run) no file has the name.
async fn start_after_swap(path: &Path) -> TailPosition {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match TailPosition::start(path, 0) {
            Ok(at) => return at,
            Err(e) if Instant::now() < end && !path.exists() => {
                eprintln!("{} not there yet ({e}): the swap is under way", path.display());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

fn seg_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}
