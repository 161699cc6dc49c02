//! The feed reports where the source stands: first thing in a session, then only when a figure changed, and
//! again after a seek.

use segmirror_transport::direct::payload::Shipped;
use segmirror_transport::direct::session::FeedItem;

use super::super::tests::{append, batch_at, feed, partition};
use super::super::*;
use crate::source::bound_hw::UptoPolicy;

async fn next(feed: &mut TailFeed) -> FeedItem {
    tokio::time::timeout(Duration::from_secs(30), feed.next_item())
        .await
        .expect("an item")
        .unwrap()
}

/// A partition directory under `root` whose one segment holds five one-record batches: (directory, `.log`).
fn five_batches(root: &Path) -> (PathBuf, PathBuf) {
    let dir = root.join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let log = log_path(&dir, 0);
    std::fs::write(&log, b"").unwrap();
    for i in 0..5 {
        append(&log, &batch_at(i, 1, i as usize));
    }
    (dir, log)
}

#[tokio::test]
async fn tail_feed_reports_the_sources_log_end_high_watermark_and_active_size() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log) = five_batches(root.path());
    // Bound at 3: offsets 3 and 4 stay on the source, so after the chunk only a change makes an item.
    let mut feed = feed(&dir, UptoPolicy::HighWatermark, Some(3), MAX_FEED_CHUNK_BYTES);
    feed.config.progress_interval = Some(Duration::ZERO);
    feed.seek_positions(&[]).await.unwrap();
    let expect = |item: FeedItem, log_end: i64| match item {
        FeedItem::Progress(p) => {
            assert_eq!(p.partition, partition());
            assert_eq!(
                (
                    p.log_end_offset,
                    p.high_watermark,
                    p.active_segment_base,
                    p.active_segment_size
                ),
                (log_end, Some(3), 0, std::fs::metadata(&log).unwrap().len())
            );
            assert!(p.shipper_time_ms > 0);
        }
        other => panic!("expected a progress report, got {other:?}"),
    };
    expect(next(&mut feed).await, 5);
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.position == 0));
    // The source grows (above the bound): the next item is the report of it, not a repeat of the old one.
    append(&log, &batch_at(5, 1, 5));
    expect(next(&mut feed).await, 6);
    // A new session starts with a report, even unchanged.
    feed.seek_positions(&[]).await.unwrap();
    expect(next(&mut feed).await, 6);
}

/// A report says how far the feed has shipped: nothing before the first chunk, the chunk's end after it.
#[tokio::test]
async fn tail_feed_reports_how_far_it_has_shipped() {
    let root = tempfile::tempdir().unwrap();
    let (dir, log) = five_batches(root.path());
    let mut feed = feed(&dir, UptoPolicy::HighWatermark, Some(3), MAX_FEED_CHUNK_BYTES);
    feed.config.progress_interval = Some(Duration::ZERO);
    feed.seek_positions(&[]).await.unwrap();
    let shipped = |item: FeedItem| match item {
        FeedItem::Progress(p) => p.shipped,
        other => panic!("expected a progress report, got {other:?}"),
    };
    let nothing = Shipped {
        segment_base: 0,
        position: 0,
        end_offset: 0,
    };
    assert_eq!(shipped(next(&mut feed).await), Some(nothing));
    let chunk_end = match next(&mut feed).await {
        FeedItem::Chunk(c) => c.position + c.bytes.len() as u64,
        other => panic!("expected a chunk, got {other:?}"),
    };
    // The source grows: the report of it carries the position after the chunk (offsets 0..3, the bound).
    append(&log, &batch_at(5, 1, 5));
    let after = shipped(next(&mut feed).await);
    assert_eq!(
        after,
        Some(Shipped {
            segment_base: 0,
            position: chunk_end,
            end_offset: 3
        })
    );
}

/// A feed further behind than [`super::MAX_PROGRESS_SCAN_BYTES`] reports a lower bound of the log end: the scan stops
/// near the cap instead of reading and hashing the whole rest of the segment every second.
#[tokio::test]
async fn a_feed_far_behind_scans_at_most_the_cap_for_its_report() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let log = log_path(&dir, 0);
    std::fs::write(&log, b"").unwrap();
    // 8 batches of 1000 records of 790-byte values: ~0.8 MiB each, ~6.4 MiB in all.
    for k in 0..8 {
        append(&log, &batch_at(k * 1000, 1000, 20));
    }
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size > super::MAX_PROGRESS_SCAN_BYTES + (1 << 20), "{size} bytes");
    let mut feed = feed(&dir, UptoPolicy::HighWatermark, Some(8000), MAX_FEED_CHUNK_BYTES);
    feed.config.progress_interval = Some(Duration::ZERO);
    feed.seek_positions(&[]).await.unwrap();
    match next(&mut feed).await {
        FeedItem::Progress(p) => {
            assert!(
                (3000..8000).contains(&p.log_end_offset),
                "a lower bound from at most the cap's bytes, got {}",
                p.log_end_offset
            );
            assert_eq!(p.active_segment_size, size, "the bytes lag stays exact");
        }
        other => panic!("expected a progress report, got {other:?}"),
    }
}

/// A high watermark the test moves.
struct MovingHw(std::sync::atomic::AtomicI64);

impl HighWatermarkSource for MovingHw {
    fn high_watermark(&self, _topic: &str, _partition: i32) -> Option<crate::source::bound_hw::HighWatermark> {
        Some(crate::source::bound_hw::HighWatermark {
            offset: self.0.load(std::sync::atomic::Ordering::SeqCst),
            as_of: std::time::SystemTime::now(),
        })
    }
}

/// A log-end feed reports a moved high watermark within [`HIGH_WATERMARK_REPORT_INTERVAL`] whatever its lag
/// interval (what `segmirror serve` shows of its mirror waits for it); a feed bounded by the high watermark keeps
/// to the lag interval.
#[tokio::test]
async fn a_log_end_feed_reports_a_moved_high_watermark_soon() {
    for (upto, soon) in [(UptoPolicy::LogEnd, true), (UptoPolicy::HighWatermark, false)] {
        let root = tempfile::tempdir().unwrap();
        let (dir, _log) = five_batches(root.path());
        let hw = Arc::new(MovingHw(std::sync::atomic::AtomicI64::new(3)));
        let mut feed = feed(&dir, upto, Some(3), MAX_FEED_CHUNK_BYTES);
        feed.config.high_watermarks = hw.clone();
        feed.config.progress_interval = Some(Duration::from_secs(3600));
        feed.seek_positions(&[]).await.unwrap();
        assert!(matches!(next(&mut feed).await, FeedItem::Progress(p) if p.high_watermark == Some(3)));
        assert!(matches!(next(&mut feed).await, FeedItem::Chunk(_)));
        hw.0.store(5, std::sync::atomic::Ordering::SeqCst);
        let item = tokio::time::timeout(Duration::from_secs(2), feed.next_item()).await;
        match item {
            Ok(Ok(FeedItem::Progress(p))) if soon => assert_eq!(p.high_watermark, Some(5)),
            Ok(Ok(FeedItem::Chunk(_))) if !soon => {}
            Err(_) if !soon => {}
            other => panic!("{upto:?}: {other:?}"),
        }
    }
}
