//! The leader-epoch comparison: `endOffsetFor`'s cases as a table, and the feed's verdict on source partitions
//! that truncated (same epoch, shorter), truncated and appended under a new epoch, or agree.

use std::path::{Path, PathBuf};

use segment_format::checkpoint::EpochEntry;
use segment_format::record::{BatchBuilder, RecordSpec};
use segmirror_transport::direct::payload::{LogEnd, Position, TruncateMode};
use segmirror_transport::direct::session::{ChunkFeed, FeedItem};

use super::super::tests::{append, feed, partition};
use super::super::{log_path, TailPartition, MAX_FEED_CHUNK_BYTES};
use super::*;

fn entry(epoch: i32, start_offset: i64) -> EpochEntry {
    EpochEntry { epoch, start_offset }
}

#[test]
fn end_offset_for_answers_as_kafka_does() {
    let epochs = [entry(0, 0), entry(2, 100), entry(5, 250)];
    let some = |epoch, end_offset| Some(EpochEndOffset { epoch, end_offset });
    // (requested, log end, answer)
    let cases: &[(&[EpochEntry], i32, i64, Option<EpochEndOffset>)] = &[
        // The latest epoch ends at the log end.
        (&epochs, 5, 400, some(5, 400)),
        // An older epoch ends where the next one starts.
        (&epochs, 2, 400, some(2, 250)),
        (&epochs, 0, 400, some(0, 100)),
        // An epoch the source never had: the largest one below it, ending where the next known one starts.
        (&epochs, 3, 400, some(2, 250)),
        (&epochs, 1, 400, some(0, 100)),
        // Below every known epoch (the source deleted its start): the requested epoch, ending at the first start.
        (&epochs[1..], 1, 400, some(1, 100)),
        // Above the latest, -1, or no history at all: undefined.
        (&epochs, 6, 400, None),
        (&epochs, -1, 400, None),
        (&[], 0, 400, None),
        // One epoch only: it is the latest.
        (&epochs[..1], 0, 7, some(0, 7)),
    ];
    for (i, (epochs, requested, log_end, answer)) in cases.iter().enumerate() {
        assert_eq!(
            end_offset_for(epochs, *requested, *log_end),
            *answer,
            "case {i}: epoch {requested} over {epochs:?}"
        );
    }
}

fn batch(offset: i64, records: i32, epoch: i32) -> Vec<u8> {
    let specs = (0..records)
        .map(|r| RecordSpec::new(r, 1_700_000_000_000 + offset).with_value(vec![b'x'; 60 + offset as usize]))
        .collect::<Vec<_>>();
    BatchBuilder::new(offset)
        .partition_leader_epoch(epoch)
        .records(specs)
        .build()
}

fn write_epochs(dir: &Path, entries: &[(i32, i64)]) {
    let mut text = format!("0\n{}\n", entries.len());
    for (epoch, start) in entries {
        text.push_str(&format!("{epoch} {start}\n"));
    }
    std::fs::write(dir.join("leader-epoch-checkpoint"), text).unwrap();
}

/// A source partition with one segment at 0: batches of 5 records at offsets 0, 5, .. with the given epochs;
/// returns the dir and the byte boundaries.
fn source(root: &Path, epochs: &[i32]) -> (PathBuf, Vec<u64>) {
    let dir = root.join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let log = log_path(&dir, 0);
    std::fs::write(&log, b"").unwrap();
    let mut boundaries = vec![0u64];
    for (i, epoch) in epochs.iter().enumerate() {
        let b = batch(i as i64 * 5, 5, *epoch);
        append(&log, &b);
        boundaries.push(boundaries.last().unwrap() + b.len() as u64);
    }
    (dir, boundaries)
}

fn target(dir: &Path) -> TailPartition {
    TailPartition {
        partition: partition(),
        dir: dir.to_path_buf(),
    }
}

fn resume(position: u64) -> Position {
    Position {
        partition: partition(),
        segment_base: 0,
        position,
    }
}

#[test]
fn a_source_shorter_in_the_mirrors_epoch_is_a_truncation_at_its_end() {
    // The mirror holds 6 batches of epoch 1 (offsets 0..30); the source kept 4 (0..20).
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1; 4]);
    write_epochs(&dir, &[(1, 0)]);
    let end = LogEnd {
        end_offset: 30,
        last_epoch: 1,
    };
    let mirror_size = boundaries[4] + 2 * (boundaries[1]);
    match compare(&target(&dir), &resume(mirror_size), end, UptoPolicy::LogEnd).unwrap() {
        Verdict::Diverged { truncate, at } => {
            assert_eq!(
                (truncate.truncate_to, truncate.segment_base, truncate.position),
                (20, 0, boundaries[4])
            );
            assert_eq!(truncate.mode, TruncateMode::LogEnd);
            assert_eq!((truncate.mirror_end_offset, truncate.mirror_epoch), (30, 1));
            assert_eq!((truncate.source_epoch, truncate.source_end_offset), (1, 20));
            assert_eq!((at.position, at.next_offset), (boundaries[4], 20));
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[test]
fn a_new_epoch_after_a_truncation_cuts_where_it_starts() {
    // Source: epoch 1 for offsets 0..15, then epoch 3 from 15 (the batches the mirror has at 15..30 were dropped
    // and others written). The mirror ends at 30 in epoch 1.
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1, 1, 1, 3, 3, 3, 3]);
    write_epochs(&dir, &[(1, 0), (3, 15)]);
    let end = LogEnd {
        end_offset: 30,
        last_epoch: 1,
    };
    match compare(&target(&dir), &resume(boundaries[6]), end, UptoPolicy::LogEnd).unwrap() {
        Verdict::Diverged { truncate, .. } => {
            assert_eq!((truncate.truncate_to, truncate.position), (15, boundaries[3]));
            assert_eq!((truncate.source_epoch, truncate.source_end_offset), (1, 15));
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    // An epoch the source never had (2): the largest below it (1) ends at 15 as well.
    let end = LogEnd {
        end_offset: 30,
        last_epoch: 2,
    };
    match compare(&target(&dir), &resume(boundaries[6]), end, UptoPolicy::HighWatermark).unwrap() {
        Verdict::Diverged { truncate, .. } => {
            assert_eq!(truncate.truncate_to, 15);
            assert_eq!(truncate.mode, TruncateMode::HighWatermark);
            assert_eq!(truncate.source_epoch, 1);
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[test]
fn a_source_that_holds_the_mirrors_end_agrees_and_an_unanswerable_epoch_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1, 1, 1, 1, 2, 2]);
    write_epochs(&dir, &[(1, 0), (2, 20)]);
    for (end_offset, last_epoch, position) in [(20, 1, boundaries[4]), (30, 2, boundaries[6]), (10, 1, boundaries[2])] {
        let end = LogEnd { end_offset, last_epoch };
        assert!(
            matches!(
                compare(&target(&dir), &resume(position), end, UptoPolicy::LogEnd).unwrap(),
                Verdict::Agrees
            ),
            "mirror end {end_offset} epoch {last_epoch}"
        );
    }
    // No epoch in the mirror: nothing to compare.
    let none = LogEnd {
        end_offset: 100,
        last_epoch: -1,
    };
    assert!(matches!(
        compare(&target(&dir), &resume(0), none, UptoPolicy::LogEnd).unwrap(),
        Verdict::Agrees
    ));
    // An epoch above the source's latest: no answer, refused naming the mirror's end and epoch.
    let above = LogEnd {
        end_offset: 30,
        last_epoch: 7,
    };
    match compare(&target(&dir), &resume(boundaries[6]), above, UptoPolicy::LogEnd) {
        Err(Error::ResumeInvalid { partition, reason, .. }) => {
            assert_eq!(partition, "events-0");
            assert!(reason.contains("offset 30") && reason.contains("epoch 7"), "{reason}");
        }
        other => panic!("expected ResumeInvalid, got {other:?}"),
    }
}

#[tokio::test]
async fn the_feed_sends_the_truncate_first_then_continues_at_the_cut() {
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1, 1, 1, 3, 3]);
    write_epochs(&dir, &[(1, 0), (3, 15)]);
    let file = std::fs::read(log_path(&dir, 0)).unwrap();
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    // The mirror holds 5 batches of epoch 1 (0..25): more than the source's epoch 1.
    let mirror = resume(boundaries[3] + 2 * boundaries[1]);
    let end = LogEnd {
        end_offset: 25,
        last_epoch: 1,
    };
    feed.log_ends(true, &[(mirror.clone(), end)]);
    feed.seek(std::slice::from_ref(&mirror)).await.unwrap();
    match feed.next().await.unwrap() {
        FeedItem::Truncate(t) => assert_eq!((t.truncate_to, t.segment_base, t.position), (15, 0, boundaries[3])),
        other => panic!("expected a Truncate, got {other:?}"),
    }
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => {
            assert_eq!((c.segment_base, c.position), (0, boundaries[3]));
            assert_eq!(&c.bytes[..], &file[boundaries[3] as usize..]);
        }
        other => panic!("expected a chunk from the cut, got {other:?}"),
    }
}

#[tokio::test]
async fn in_high_watermark_mode_the_partition_stops_after_saying_so() {
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1, 1, 1, 3, 3]);
    write_epochs(&dir, &[(1, 0), (3, 15)]);
    let mut feed = feed(&dir, UptoPolicy::HighWatermark, Some(25), MAX_FEED_CHUNK_BYTES);
    let mirror = resume(boundaries[3] + 2 * boundaries[1]);
    let end = LogEnd {
        end_offset: 25,
        last_epoch: 1,
    };
    feed.log_ends(true, &[(mirror.clone(), end)]);
    feed.seek(std::slice::from_ref(&mirror)).await.unwrap();
    match feed.next().await.unwrap() {
        FeedItem::Truncate(t) => {
            assert_eq!(t.mode, TruncateMode::HighWatermark);
            assert_eq!(t.truncate_to, 15);
        }
        other => panic!("expected a Truncate, got {other:?}"),
    }
    // Nothing more of it ships, though the source has batches below the high watermark after the cut.
    let next = tokio::time::timeout(std::time::Duration::from_millis(300), feed.next()).await;
    assert!(next.is_err(), "the stopped partition shipped {next:?}");
}

#[tokio::test]
async fn a_divergence_while_streaming_ends_the_session_when_truncation_was_agreed() {
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1, 1, 1, 1]);
    write_epochs(&dir, &[(1, 0)]);
    let log = log_path(&dir, 0);
    for agreed in [true, false] {
        let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
        feed.log_ends(agreed, &[]);
        feed.seek(&[]).await.unwrap();
        assert!(matches!(feed.next().await.unwrap(), FeedItem::Chunk(_)));
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_len(boundaries[2]).unwrap();
        drop(f);
        let e = feed.next().await.expect_err("diverged");
        if agreed {
            assert!(
                matches!(&e, segmirror_transport::direct::DirectError::SourceDiverged { partition, .. } if partition == "events-0"),
                "{e:?}"
            );
            assert_eq!(e.class(), segmirror_transport::direct::ErrorClass::Transient);
        } else {
            assert_eq!(e.class(), segmirror_transport::direct::ErrorClass::Local, "{e:?}");
        }
        // Restore for the next round.
        std::fs::remove_file(&log).unwrap();
        let (_, again) = source(root.path(), &[1, 1, 1, 1]);
        assert_eq!(again, boundaries);
    }
}

#[tokio::test]
async fn a_same_epoch_divergence_at_the_mirrors_position_refuses_the_partition_instead_of_a_truncate() {
    // The mirror's Resume sits at the source's end (byte for byte as long), but says its bytes end at offset 30 in
    // the source's latest epoch, where the source's epoch 1 ends at 20: no point below the mirror's position
    // provably agrees. The feed used to yield a Truncate to exactly the Resume position, which the session took
    // for a feed bug ("only back from what was sent") and which ended the shipper process.
    let root = tempfile::tempdir().unwrap();
    let (dir, boundaries) = source(root.path(), &[1; 4]);
    write_epochs(&dir, &[(1, 0)]);
    let end = LogEnd {
        end_offset: 30,
        last_epoch: 1,
    };
    for position in [boundaries[4], boundaries[3] + 1] {
        match compare(&target(&dir), &resume(position), end, UptoPolicy::LogEnd) {
            Err(Error::ResumeInvalid { reason, .. }) => {
                assert!(
                    reason.contains("offset 30") && reason.contains("ends at offset 20"),
                    "{reason}"
                )
            }
            other => panic!("position {position}: expected ResumeInvalid, got {other:?}"),
        }
    }
    // The mirror's position is before the source's end (2 batches shorter in bytes): a Truncate would have to go
    // forward, beyond the position: refused too.
    match compare(&target(&dir), &resume(boundaries[2]), end, UptoPolicy::LogEnd) {
        Err(Error::ResumeInvalid { .. }) => {}
        other => panic!("expected ResumeInvalid, got {other:?}"),
    }
    // Through the session's seek: the partition is refused, nothing of it ships, and the seek does not fail.
    let mut feed = feed(&dir, UptoPolicy::LogEnd, None, MAX_FEED_CHUNK_BYTES);
    let mirror = resume(boundaries[4]);
    feed.log_ends(true, &[(mirror.clone(), end)]);
    feed.seek(std::slice::from_ref(&mirror))
        .await
        .expect("the partition is refused, the seek goes on");
    assert!(feed
        .refused_resume(&partition())
        .is_some_and(|r| r.contains("no truncation point is provable")));
    let next = tokio::time::timeout(std::time::Duration::from_millis(300), feed.next()).await;
    assert!(next.is_err(), "the refused partition shipped {next:?}");
    // A true divergence (the mirror longer than the source in the same epoch) still truncates.
    let mirror = resume(boundaries[4] + 2 * boundaries[1]);
    match compare(&target(&dir), &mirror, end, UptoPolicy::LogEnd).unwrap() {
        Verdict::Diverged { truncate, .. } => {
            assert_eq!((truncate.truncate_to, truncate.position), (20, boundaries[4]))
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}
