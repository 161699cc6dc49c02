//! A session resumed after the cleaner rewrote what the mirror holds: the feed replaces the rewritten segments
//! (the one being appended to included) and continues after them; seeded from the applier's MirrorLayout it also
//! finds the rewrites made while no feed ran, and sends nothing when the layout equals the source.

use segment_format::log::scan_frames;
use segmirror_transport::direct::payload::LayoutSegment;
use segmirror_transport::direct::session::{ChunkFeed, FeedItem};

use super::super::tests::{append, batch_at, feed, partition};
use super::super::*;
use crate::source::bound_hw::UptoPolicy;

/// Four segments of five one-record batches at bases 0, 5, 10, 15; returns each `.log`'s size.
fn four_segments(dir: &Path) -> Vec<u64> {
    (0..4)
        .map(|seg| {
            let base = seg * 5;
            let log = log_path(dir, base);
            std::fs::write(&log, b"").unwrap();
            for i in 0..5 {
                append(&log, &batch_at(base + i, 1, (base + i) as usize));
            }
            std::fs::metadata(&log).unwrap().len()
        })
        .collect()
}

/// What a cleaner writes for `bases`: every other batch, renamed over the first one's `.log`; the others removed.
fn compact(dir: &Path, bases: &[i64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = 0usize;
    for base in bases {
        let bytes = std::fs::read(log_path(dir, *base)).unwrap();
        for frame in scan_frames(&bytes, 0) {
            let info = frame.unwrap().info;
            if n.is_multiple_of(2) {
                out.extend_from_slice(&bytes[info.position as usize..(info.position + info.size) as usize]);
            }
            n += 1;
        }
    }
    let cleaned = dir.join(format!("{:020}.log.cleaned", bases[0]));
    std::fs::write(&cleaned, &out).unwrap();
    std::fs::rename(&cleaned, log_path(dir, bases[0])).unwrap();
    for base in &bases[1..] {
        std::fs::remove_file(log_path(dir, *base)).unwrap();
    }
    out
}

/// Byte position after the first `n` batches of the `.log` at `base`.
fn after_batches(dir: &Path, base: i64, n: usize) -> u64 {
    let bytes = std::fs::read(log_path(dir, base)).unwrap();
    let info = scan_frames(&bytes, 0).nth(n - 1).unwrap().unwrap().info;
    info.position + info.size
}

async fn next(feed: &mut TailFeed) -> FeedItem {
    tokio::time::timeout(Duration::from_secs(30), feed.next_item())
        .await
        .expect("an item")
        .unwrap()
}

/// One whole replacement: (replaced bases, bytes, next base).
async fn replacement(feed: &mut TailFeed) -> (Vec<i64>, Vec<u8>, Option<i64>) {
    let mut bytes = Vec::new();
    loop {
        match next(feed).await {
            FeedItem::Replace(r) => {
                assert_eq!(r.position, bytes.len() as u64, "pieces in order");
                bytes.extend_from_slice(&r.bytes);
                if let Some(end) = r.end {
                    assert_eq!(
                        (end.final_size, end.log_sha256),
                        (bytes.len() as u64, super::super::tests::sha256(&bytes))
                    );
                    return (r.replaced_bases, bytes, end.next_base);
                }
            }
            other => panic!("expected a replacement piece, got {other:?}"),
        }
    }
}

fn at(base: i64, position: u64) -> Position {
    Position {
        partition: partition(),
        segment_base: base,
        position,
    }
}

fn layout(segments: &[(i64, u64)]) -> Option<Layouts> {
    Some(vec![(
        partition(),
        segments
            .iter()
            .map(|&(base, size)| LayoutSegment { base, size })
            .collect(),
    )])
}

#[tokio::test]
async fn a_feed_resumed_at_a_merged_away_segment_sends_the_covering_replacement_and_continues() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = four_segments(&dir);
    // The mirror: segment 0 sealed, segment 5 unsealed after two batches; then the cleaner merges 0 and 5.
    let position = after_batches(&dir, 5, 2);
    let merged = compact(&dir, &[0, 5]);

    // Without the layout a fresh feed cannot know which mirror segments 0 replaces: refused, naming the segment.
    let mut plain = feed(&dir, UptoPolicy::LogEnd, None, 700);
    let err = plain.seek_positions(&[at(5, position)]).await.expect_err("refused");
    assert!(err.to_string().contains("merged it into segment 0"), "{err}");

    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 700);
    feed.mirror_layout(layout(&[(0, sizes[0])]));
    feed.seek_positions(&[at(5, position)]).await.unwrap();
    // Nothing of segment 10 before the replacement, which goes in several pieces.
    let (replaced, bytes, next_base) = replacement(&mut feed).await;
    assert_eq!((replaced, bytes, next_base), (vec![0, 5], merged, Some(10)));
    // Then segment 10 from byte 0, its seal, and segment 15.
    let mut shipped = Vec::new();
    while shipped.len() < sizes[2] as usize {
        match next(&mut feed).await {
            FeedItem::Chunk(c) => {
                assert_eq!((c.segment_base, c.position), (10, shipped.len() as u64));
                shipped.extend_from_slice(&c.bytes);
            }
            other => panic!("expected segment 10's bytes, got {other:?}"),
        }
    }
    assert!(matches!(next(&mut feed).await, FeedItem::Seal(s) if s.segment_base == 10));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if (c.segment_base, c.position) == (15, 0)));
}

#[tokio::test]
async fn a_feed_resumed_in_a_segment_the_cleaner_rewrote_alone_replaces_it_and_continues() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    four_segments(&dir);
    // The mirror appends to 5 (three batches of it); the cleaner rewrites 5 alone: byte 3·batch is no boundary.
    let position = after_batches(&dir, 5, 3);
    let cleaned = compact(&dir, &[5]);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.mirror_layout(layout(&[(0, std::fs::metadata(log_path(&dir, 0)).unwrap().len())]));
    feed.seek_positions(&[at(5, position)]).await.unwrap();
    assert_eq!(replacement(&mut feed).await, (vec![5], cleaned, Some(10)));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if (c.segment_base, c.position) == (10, 0)));
}

#[tokio::test]
async fn a_feed_seeded_from_the_mirror_layout_sends_the_rewrites_made_while_it_was_down() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = four_segments(&dir);
    let mirror = [(0, sizes[0]), (5, sizes[1]), (10, sizes[2])];
    // While no feed ran: 0 cleaned alone, 5 and 10 merged.
    let zero = compact(&dir, &[0]);
    let merged = compact(&dir, &[5, 10]);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.mirror_layout(layout(&mirror));
    feed.seek_positions(&[at(15, sizes[3])]).await.unwrap();
    assert_eq!(replacement(&mut feed).await, (vec![0], zero, Some(5)));
    assert_eq!(replacement(&mut feed).await, (vec![5, 10], merged, Some(15)));
    // Once each: the active segment's new bytes come next.
    append(&log_path(&dir, 15), &batch_at(20, 1, 20));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if (c.segment_base, c.position) == (15, sizes[3])));

    // A layout equal to the source: nothing to replace.
    let sizes_now: Vec<(i64, u64)> = [0, 5]
        .iter()
        .map(|&b| (b, std::fs::metadata(log_path(&dir, b)).unwrap().len()))
        .collect();
    let end = std::fs::metadata(log_path(&dir, 15)).unwrap().len();
    let mut feed2 = super::super::tests::feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed2.mirror_layout(layout(&sizes_now));
    feed2.seek_positions(&[at(15, end)]).await.unwrap();
    append(&log_path(&dir, 15), &batch_at(21, 1, 21));
    assert!(matches!(next(&mut feed2).await, FeedItem::Chunk(c) if (c.segment_base, c.position) == (15, end)));
}

#[tokio::test]
async fn a_feed_resumed_at_a_sealed_segment_the_cleaner_rewrote_continues_after_it_and_replaces_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = four_segments(&dir);
    // The mirror sealed 5 (its last position); the cleaner rewrote it since.
    let cleaned = compact(&dir, &[5]);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.mirror_layout(layout(&[(0, sizes[0]), (5, sizes[1])]));
    feed.seek_positions(&[at(5, sizes[1])]).await.unwrap();
    let mut replaced = None;
    let mut next10 = false;
    while replaced.is_none() || !next10 {
        match next(&mut feed).await {
            FeedItem::Replace(r) if r.position == 0 && r.end.is_some() => {
                assert_eq!(r.bytes.as_ref(), &cleaned[..]);
                replaced = Some(r.replaced_bases);
            }
            FeedItem::Chunk(c) if c.segment_base == 10 => next10 |= c.position == 0 || next10,
            FeedItem::Seal(s) => assert_eq!(s.segment_base, 10),
            FeedItem::Chunk(c) if c.segment_base == 15 => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(replaced, Some(vec![5]));
}

#[tokio::test]
async fn a_segment_merged_away_while_the_feed_tails_it_is_covered_and_the_tail_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    four_segments(&dir);
    // Chunks of at most 700 bytes (a batch or two): the feed seals 0 and stops inside 5.
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 700);
    feed.seek_positions(&[]).await.unwrap();
    while feed.position(&partition()).is_none_or(|(b, p)| b != 5 || p == 0) {
        next(&mut feed).await;
    }
    let (_, position) = feed.position(&partition()).unwrap();
    assert!(position < std::fs::metadata(log_path(&dir, 5)).unwrap().len());
    let merged = compact(&dir, &[0, 5]);
    assert_eq!(replacement(&mut feed).await, (vec![0, 5], merged, Some(10)));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if (c.segment_base, c.position) == (10, 0)));
}

#[tokio::test]
async fn a_segment_merged_into_the_covering_one_while_its_replacement_waits_moves_the_wait_on() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = four_segments(&dir);
    // The mirror: 0 sealed, 5 unsealed after two batches; the cleaner merged 0 and 5 (the resume waits at 10).
    let position = after_batches(&dir, 5, 2);
    compact(&dir, &[0, 5]);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.mirror_layout(layout(&[(0, sizes[0])]));
    feed.seek_positions(&[at(5, position)]).await.unwrap();
    // Before the replacement's first step is confirmed, the cleaner merges 10 into 0 as well: 0 now covers the
    // position the tail waits at.
    let merged = compact(&dir, &[0, 10]);
    assert_eq!(replacement(&mut feed).await, (vec![0, 5], merged, Some(15)));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if (c.segment_base, c.position) == (15, 0)));
}

/// A feed over two partitions, `events-0` (the one the positions below name) and `other-0`, each with four
/// segments of five one-record batches that no cleaner touched; returns the feed, `events-0`'s sizes and
/// `other-0`'s partition.
fn two_partitions(root: &Path) -> (TailFeed, Vec<u64>, PartitionRef) {
    let dir = root.join("events-0");
    let other_dir = root.join("other-0");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&other_dir).unwrap();
    let sizes = four_segments(&dir);
    four_segments(&other_dir);
    let other = PartitionRef {
        topic: "other".into(),
        partition: 0,
        topic_id: [9; 16],
    };
    let mut config = TailFeedConfig::new(Arc::new(super::super::tests::FixedHw(None)));
    config.upto = UptoPolicy::LogEnd;
    config.poll_interval = Duration::from_millis(5);
    let feed = TailFeed::new(
        vec![
            TailPartition {
                partition: partition(),
                dir,
            },
            TailPartition {
                partition: other.clone(),
                dir: other_dir,
            },
        ],
        config,
    );
    (feed, sizes, other)
}

/// Items until none comes for a while: (partition, item).
async fn drain(feed: &mut TailFeed) -> Vec<FeedItem> {
    let mut items = Vec::new();
    while let Ok(item) = tokio::time::timeout(Duration::from_millis(300), feed.next_item()).await {
        items.push(item.unwrap());
    }
    items
}

/// A position in `events-0` (its directory, its segments' sizes).
type PositionIn = fn(&Path, &[u64]) -> Position;

#[tokio::test]
async fn impossible_resume_positions_are_refused_for_the_partition_and_the_others_go_on() {
    // Positions no mirror can hold in segments no cleaner touched: beyond a sealed segment's end, inside one of
    // its batches, beyond the active segment's end, a segment the source never had.
    let cases: [(&str, PositionIn, &str); 4] = [
        (
            "beyond a sealed segment's end",
            |_, sizes| at(5, sizes[1] + 100),
            "did not rewrite",
        ),
        (
            "inside a batch of a sealed segment",
            |dir, _| at(5, after_batches(dir, 5, 1) + 7),
            "did not rewrite",
        ),
        (
            "beyond the active segment's end",
            |_, sizes| at(15, sizes[3] + 100),
            "whole batches only up to",
        ),
        (
            "a segment the source never had",
            |_, _| at(1_000, 0),
            "no longer exists",
        ),
    ];
    for (case, position, why) in cases {
        let root = tempfile::tempdir().unwrap();
        let (mut feed, sizes, other) = two_partitions(root.path());
        let position = position(&root.path().join("events-0"), &sizes);
        ChunkFeed::seek(&mut feed, std::slice::from_ref(&position))
            .await
            .unwrap_or_else(|e| panic!("{case}: the seek failed instead of refusing the partition: {e}"));
        let reason = feed
            .refused_resume(&partition())
            .unwrap_or_else(|| panic!("{case}: not refused"));
        assert!(reason.contains(why) && reason.contains("events-0"), "{case}: {reason}");
        assert_eq!(feed.refused_resume(&other), None, "{case}");
        // Nothing of the refused partition ships (not the rest of the segment, not the next one); the other
        // partition ships its three sealed segments.
        let items = drain(&mut feed).await;
        assert!(
            items.iter().all(|i| i.partition() == &other),
            "{case}: the refused partition shipped {:?}",
            items.iter().find(|i| i.partition() != &other)
        );
        let seals = items.iter().filter(|i| matches!(i, FeedItem::Seal(_))).count();
        assert_eq!(seals, 3, "{case}: the other partition's sealed segments");
        // The next session's Resume is checked again: a provable position ships from there.
        ChunkFeed::seek(&mut feed, &[at(5, sizes[1])]).await.unwrap();
        assert_eq!(feed.refused_resume(&partition()), None, "{case}");
        let items = drain(&mut feed).await;
        let first = items.iter().find(|i| i.partition() == &partition());
        assert!(
            matches!(first, Some(FeedItem::Seal(s)) if s.segment_base == 5 && s.final_size == sizes[1]),
            "{case}: after a provable Resume, {first:?}"
        );
    }
}
