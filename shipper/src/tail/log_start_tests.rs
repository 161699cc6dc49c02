//! The feed tells the source's log start when retention deleted segments, once per move and again after a seek,
//! and skips a segment deleted before any of it was shipped.

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::direct::session::FeedItem;

use super::super::tests::{append, batch_at, feed, partition};
use super::super::*;
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
