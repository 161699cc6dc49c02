//! The feed notices a sealed segment it shipped being rewritten by a cleaner (alone, or merged with the next) and
//! ships the new version whole, once, as replacement pieces ending with its digest.

use segment_format::log::scan_frames;
use segmirror_transport::direct::session::FeedItem;

use super::super::tests::{append, batch_at, feed, partition, sha256};
use super::super::*;
use crate::source::bound_hw::UptoPolicy;

/// Segments of `per` one-record batches at bases 0, per, 2·per; returns the bases.
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

/// What a cleaner writes for `bases`: every other batch, in a new file renamed over the first one's `.log`; the
/// others' files removed.
fn compact(dir: &Path, bases: &[i64]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = 0usize;
    for base in bases {
        let bytes = std::fs::read(log_path(dir, *base)).unwrap();
        for frame in scan_frames(&bytes, 0) {
            let frame = frame.unwrap();
            let from = frame.info.position as usize;
            if n.is_multiple_of(2) {
                out.extend_from_slice(&bytes[from..from + frame.info.size as usize]);
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

async fn next(feed: &mut TailFeed) -> FeedItem {
    tokio::time::timeout(Duration::from_secs(30), feed.next_item())
        .await
        .expect("an item")
        .unwrap()
}

/// Collects replacement pieces until the last; returns (replaced bases, bytes, final size, digest).
async fn replacement(feed: &mut TailFeed) -> (Vec<i64>, Vec<u8>, u64, [u8; 32]) {
    let mut bytes = Vec::new();
    let mut bases = None;
    loop {
        match next(feed).await {
            FeedItem::Replace(r) => {
                assert_eq!(r.partition, partition());
                assert_eq!(r.position, bytes.len() as u64, "pieces in order");
                assert!(bases.as_ref().is_none_or(|b| *b == r.replaced_bases));
                bases = Some(r.replaced_bases.clone());
                bytes.extend_from_slice(&r.bytes);
                if let Some(end) = r.end {
                    return (r.replaced_bases, bytes, end.final_size, end.log_sha256);
                }
            }
            // The active segment's bytes may come first: a rewrite is acted on once two listings agree.
            FeedItem::Chunk(c) if bases.is_none() && c.segment_base == 10 => {}
            other => panic!("expected a replacement piece, got {other:?}"),
        }
    }
}

/// Ships the three segments: 0 and its seal, 1 and its seal, 2.
async fn shipped(dir: &Path, chunk: u64) -> TailFeed {
    let mut feed = feed(dir, UptoPolicy::LogEnd, None, chunk);
    feed.seek_positions(&[]).await.unwrap();
    let mut seals = 0;
    while seals < 2 || feed.position(&partition()).is_none_or(|(b, p)| b != 10 || p == 0) {
        if let FeedItem::Seal(_) = next(&mut feed).await {
            seals += 1;
        }
    }
    feed
}

#[tokio::test]
async fn tail_feed_ships_a_merge_of_sealed_segments_as_one_replacement() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    // Pieces of at most 600 bytes: the replacement travels in several.
    let mut feed = shipped(&dir, 600).await;
    let new = compact(&dir, &bases[..2]);
    let (replaced, bytes, size, sha) = replacement(&mut feed).await;
    assert_eq!(replaced, bases[..2].to_vec());
    assert_eq!(bytes, new);
    assert_eq!((size, sha), (new.len() as u64, sha256(&new)));
    // Once: the active segment goes on next.
    append(&log_path(&dir, bases[2]), &batch_at(15, 1, 15));
    assert!(matches!(next(&mut feed).await, FeedItem::Chunk(c) if c.segment_base == bases[2]));
}

#[tokio::test]
async fn tail_feed_ships_a_single_rewritten_segment_and_follows_a_second_rewrite() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let bases = three_segments(&dir, 5);
    let mut feed = shipped(&dir, MAX_FEED_CHUNK_BYTES).await;
    let new = compact(&dir, &bases[1..2]);
    let (replaced, bytes, _, sha) = replacement(&mut feed).await;
    assert_eq!(replaced, vec![bases[1]]);
    assert_eq!((bytes, sha), (new.clone(), sha256(&new)));
    // Cleaned again, now merged with segment 0: the remembered version of 1 is the new one.
    let merged = compact(&dir, &bases[..2]);
    let (replaced, bytes, _, _) = replacement(&mut feed).await;
    assert_eq!(replaced, bases[..2].to_vec());
    assert_eq!(bytes, merged);
}
