//! The feed tells the source's log start when retention deleted segments, once per move and again after a seek,
//! and skips a segment deleted before any of it was shipped.

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::direct::session::FeedItem;

use super::super::tests::{append, batch_at, feed, partition};
use super::super::*;
use super::exact_or_first;
use crate::source::bound_hw::UptoPolicy;

/// Writes segments of `per` one-record batches each; returns their base offsets.
fn three_segments(dir: &Path, per: i64) -> Vec<i64> {
    let mut bases = Vec::new();
    for seg in 0..3 {
        let base = seg * per;
        bases.push(base);
        let log = log_path(dir, base);
        std::fs::write(&log, b"").unwrap();
        for i in 0..per {
            append(&log, &batch_at(base + i, 1, (base + i) as usize));
        }
    }
    bases
}

fn delete_segment(dir: &Path, base: i64) {
    for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        let _ = std::fs::remove_file(dir.join(segment_file_name(base, kind)));
    }
}

async fn next(feed: &mut TailFeed) -> FeedItem {
    tokio::time::timeout(Duration::from_secs(30), feed.next_item())
        .await
        .expect("an item")
        .unwrap()
}

fn log_start_of(item: &FeedItem) -> Option<i64> {
    match item {
        FeedItem::LogStart(l) => {
            assert_eq!(l.partition, partition());
            Some(l.log_start_offset)
        }
        _ => None,
    }
}

#[tokio::test]
async fn tail_feed_sends_the_log_start_when_retention_deletes_segments() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek_positions(&[]).await.unwrap();
    // Segment 0 whole, its seal, segment 1 whole, its seal, segment 2 whole; no LogStart (base 0 deletes nothing).
    let mut kinds = Vec::new();
    for _ in 0..5 {
        let item = next(&mut feed).await;
        assert_eq!(log_start_of(&item), None, "{item:?}");
        kinds.push(matches!(item, FeedItem::Seal(_)));
    }
    assert_eq!(kinds, [false, true, false, true, false]);
    assert_eq!(
        feed.position(&partition()),
        Some((bases[2], std::fs::metadata(log_path(&dir, bases[2])).unwrap().len()))
    );

    delete_segment(&dir, bases[0]);
    assert_eq!(log_start_of(&next(&mut feed).await), Some(bases[1]));
    delete_segment(&dir, bases[1]);
    assert_eq!(log_start_of(&next(&mut feed).await), Some(bases[2]));
    // Once per move: new bytes come next, not the same LogStart again.
    append(&log_path(&dir, bases[2]), &batch_at(15, 1, 15));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.segment_base == bases[2]));
    // A new session tells it again, first.
    let (base, position) = feed.position(&partition()).unwrap();
    feed.seek_positions(&[Position {
        partition: partition(),
        segment_base: base,
        position,
    }])
    .await
    .unwrap();
    assert_eq!(log_start_of(&next(&mut feed).await), Some(bases[2]));
}

#[tokio::test]
async fn tail_feed_skips_a_segment_retention_deleted_before_any_of_it_was_shipped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek_positions(&[]).await.unwrap();
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.segment_base == bases[0]));
    assert!(matches!(next(&mut feed).await, FeedItem::Seal(s) if s.segment_base == bases[0]));
    assert_eq!(feed.position(&partition()), Some((bases[1], 0)));
    // Retention takes segments 0 and 1 before the feed read segment 1.
    delete_segment(&dir, bases[0]);
    delete_segment(&dir, bases[1]);
    // Both come, in either order (the log start is sent once two listings agree): the source's log start and
    // segment 2 from byte 0.
    let items = [next(&mut feed).await, next(&mut feed).await];
    assert_eq!(
        items.iter().filter_map(log_start_of).collect::<Vec<_>>(),
        vec![bases[2]]
    );
    let chunk = items.iter().find_map(|i| match i {
        FeedItem::Chunk(c) => Some(c),
        _ => None,
    });
    match chunk {
        Some(c) => {
            assert_eq!((c.segment_base, c.position), (bases[2], 0));
            assert_eq!(&c.bytes[..], &std::fs::read(log_path(&dir, bases[2])).unwrap()[..]);
        }
        None => panic!("expected segment {}'s bytes, got {items:?}", bases[2]),
    }
}

#[tokio::test]
async fn tail_feed_a_segment_deleted_after_part_of_it_was_shipped_diverges() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    // Chunks of one batch: segment 0 is shipped in pieces.
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 1);
    feed.seek_positions(&[]).await.unwrap();
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.segment_base == bases[0] && c.position == 0));
    delete_segment(&dir, bases[0]);
    let item = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match feed.next_item().await {
                Ok(FeedItem::LogStart(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .unwrap();
    assert!(matches!(item, Err(Error::Diverged { .. })), "{item:?}");
}

#[tokio::test]
async fn tail_feed_a_segment_replaced_before_any_of_it_was_shipped_is_read_afresh() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek_positions(&[]).await.unwrap();
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.segment_base == bases[0]));
    assert!(matches!(next(&mut feed).await, FeedItem::Seal(s) if s.segment_base == bases[0]));
    assert_eq!(feed.position(&partition()), Some((bases[1], 0)));
    // Another file renamed over segment 1 (another inode) before the feed read any of it.
    let path = log_path(&dir, bases[1]);
    let bytes = std::fs::read(&path).unwrap();
    let other = dir.join("segment.tmp");
    std::fs::write(&other, &bytes).unwrap();
    std::fs::rename(&other, &path).unwrap();
    match next(&mut feed).await {
        FeedItem::Chunk(c) => assert_eq!((c.segment_base, c.position, &c.bytes[..]), (bases[1], 0, &bytes[..])),
        other => panic!("expected segment {}'s bytes, got {other:?}", bases[1]),
    }
}

#[tokio::test]
async fn a_resume_into_a_segment_retention_deleted_skips_to_the_source_log_start() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    // The mirror acknowledged part of segment 1; retention then deleted segments 0 and 1 at the source.
    let partway = batch_at(bases[1], 1, bases[1] as usize).len() as u64;
    delete_segment(&dir, bases[0]);
    delete_segment(&dir, bases[1]);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    feed.seek_positions(&[Position {
        partition: partition(),
        segment_base: bases[1],
        position: partway,
    }])
    .await
    .unwrap();
    assert_eq!(feed.position(&partition()), Some((bases[2], 0)));
    // The LogStart first, then segment 2 from byte 0, whole.
    assert_eq!(log_start_of(&next(&mut feed).await), Some(bases[2]));
    match next(&mut feed).await {
        FeedItem::Chunk(c) => {
            assert_eq!((c.segment_base, c.position), (bases[2], 0));
            assert_eq!(
                c.bytes.len() as u64,
                std::fs::metadata(log_path(&dir, bases[2])).unwrap().len()
            );
        }
        other => panic!("expected the first chunk of segment {}, got {other:?}", bases[2]),
    }
}

#[tokio::test]
async fn a_resume_into_a_missing_segment_without_a_later_first_segment_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    // Segment 2 gone, segments 0 and 1 still there: a truncation, not retention.
    delete_segment(&dir, bases[2]);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    match feed
        .seek_positions(&[Position {
            partition: partition(),
            segment_base: bases[2],
            position: 0,
        }])
        .await
    {
        Err(Error::ResumeInvalid {
            segment_base, reason, ..
        }) => {
            assert_eq!(segment_base, bases[2]);
            assert!(reason.contains("no longer exists"), "{reason}");
        }
        other => panic!("expected ResumeInvalid, got {other:?}"),
    }
}

/// Writes the log dir's `log-start-offset-checkpoint` (the directory holding `partition_dir`) with one entry for the
/// test partition, as a broker does: a new file renamed over the old one.
fn write_checkpoint(partition_dir: &Path, offset: i64) {
    use segment_format::checkpoint::{OffsetCheckpoint, OffsetCheckpointEntry};
    let path = partition_dir.parent().unwrap().join("log-start-offset-checkpoint");
    OffsetCheckpoint {
        entries: vec![
            OffsetCheckpointEntry {
                topic: "other".into(),
                partition: 0,
                offset: 99,
            },
            OffsetCheckpointEntry {
                topic: partition().topic,
                partition: partition().partition,
                offset,
            },
        ],
    }
    .write(&path)
    .unwrap();
}

#[test]
fn the_exact_log_start_is_told_only_inside_what_was_shipped_and_never_below_the_first_segment() {
    // No entry, or an entry at or below the first segment's base (a broker writes none there; a stale one):
    // the first segment's base.
    assert_eq!(exact_or_first(5, None, Some(100)), 5);
    assert_eq!(exact_or_first(5, Some(3), Some(100)), 5);
    assert_eq!(exact_or_first(5, Some(5), Some(100)), 5);
    // Inside the first segment and shipped: exactly the entry.
    assert_eq!(exact_or_first(5, Some(7), Some(7)), 7);
    assert_eq!(exact_or_first(5, Some(7), Some(100)), 7);
    // Not shipped up to it yet, or nothing shipped: the first segment's base until then.
    assert_eq!(exact_or_first(5, Some(7), Some(6)), 5);
    assert_eq!(exact_or_first(5, Some(7), None), 5);
}

#[tokio::test]
async fn tail_feed_sends_the_checkpointed_log_start_inside_a_segment_once_shipped_up_to_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    // DeleteRecords moved the log start to 7, inside segment 5: no file deleted, only the checkpoint says it.
    write_checkpoint(&dir, 7);
    // One batch (one offset) per chunk: the feed's next offset is the number of chunks shipped.
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 1);
    feed.seek_positions(&[]).await.unwrap();
    let mut chunks = 0;
    let told = loop {
        match next(&mut feed).await {
            FeedItem::Chunk(c) => {
                assert!(c.segment_base <= bases[1]);
                chunks += 1;
            }
            FeedItem::Seal(_) => {}
            other => break log_start_of(&other).expect("a chunk, a seal or the LogStart"),
        }
    };
    // Not before offset 6 was shipped (the applier must hold what the log start keeps), and then exactly 7.
    assert_eq!((told, chunks), (7, 7));
    // Once: the rest of the log comes next, with no LogStart.
    let mut rest = 0;
    while rest < 8 {
        let item = next(&mut feed).await;
        assert_eq!(log_start_of(&item), None, "{item:?}");
        if matches!(item, FeedItem::Chunk(_)) {
            rest += 1;
        }
    }
    // A later DeleteRecords into the last segment (the checkpoint rewritten): told again, exactly.
    write_checkpoint(&dir, 12);
    assert_eq!(log_start_of(&next(&mut feed).await), Some(12));
    // A stale, lower entry never takes it back.
    write_checkpoint(&dir, 8);
    append(&log_path(&dir, bases[2]), &batch_at(15, 1, 15));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.segment_base == bases[2]));
    // A new session tells it again, first.
    write_checkpoint(&dir, 12);
    let (base, position) = feed.position(&partition()).unwrap();
    feed.seek_positions(&[Position {
        partition: partition(),
        segment_base: base,
        position,
    }])
    .await
    .unwrap();
    assert_eq!(log_start_of(&next(&mut feed).await), Some(12));
}

#[tokio::test]
async fn tail_feed_resuming_below_the_checkpointed_log_start_tells_the_first_segment_until_it_ships_past_it() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    // Retention deleted segment 0 and DeleteRecords moved the log start to 12, inside segment 10.
    delete_segment(&dir, bases[0]);
    write_checkpoint(&dir, 12);
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, 1);
    // The mirror holds segment 5 up to offset 6 (two one-record batches).
    let partway = (batch_at(5, 1, 5).len() + batch_at(6, 1, 6).len()) as u64;
    feed.seek_positions(&[Position {
        partition: partition(),
        segment_base: bases[1],
        position: partway,
    }])
    .await
    .unwrap();
    let mut told = Vec::new();
    let mut chunks = 0;
    while chunks < 8 {
        match next(&mut feed).await {
            FeedItem::Chunk(_) => chunks += 1,
            FeedItem::Seal(_) => {}
            other => told.push((log_start_of(&other).expect("a LogStart"), chunks)),
        }
    }
    // The first segment's base after the second listing, then 12 once offsets 7 to 11 (five chunks) were shipped.
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!(told[0].0, bases[1]);
    assert_eq!(told[1], (12, 5));
}
