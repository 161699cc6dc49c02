//! The feed of one broker of several: it claims what its broker leads, continues a grant mid-segment of its own
//! replica (translated into the mirror's segment, then a Roll), rolls first when the mirror ends where this replica
//! rolled, follows its own layout when the layouts agree, and stops at a revoke until led at a higher epoch.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use segmirror_transport::direct::payload::{Claim, ClaimResult, ClaimVerdict, ClaimedAt, Revoke};
use segmirror_transport::direct::session::{ChunkFeed, FeedItem};

use crate::direct::tests::{append, batch_at, grant, partition, FixedHw, SetLeadership};
use crate::direct::{TailFeed, TailFeedConfig, TailPartition};
use crate::source::bound_hw::UptoPolicy;

/// This broker's replica: segments at 0 (0-1, 2-3, 4-5), 6 (6-7, 8-9) and 10 (10-11); each batch's content derives
/// from its offset, so another broker's replica holds the same bytes for it. Returns every batch by offset.
fn replica(dir: &Path) -> BTreeMap<i64, Vec<u8>> {
    std::fs::create_dir_all(dir).unwrap();
    let mut batches = BTreeMap::new();
    for seg in [&[0i64, 2, 4][..], &[6, 8], &[10]] {
        let log = dir.join(format!("{:020}.log", seg[0]));
        for &offset in seg {
            let b = batch_at(offset, 2, offset as usize);
            append(&log, &b);
            batches.insert(offset, b);
        }
    }
    batches
}

fn size(batches: &BTreeMap<i64, Vec<u8>>, from: i64, to: i64) -> u64 {
    batches.range(from..to).map(|(_, b)| b.len() as u64).sum()
}

fn bytes(batches: &BTreeMap<i64, Vec<u8>>, from: i64, to: i64) -> Vec<u8> {
    batches.range(from..to).flat_map(|(_, b)| b.clone()).collect()
}

fn cluster_feed(dir: &Path, epoch: i32) -> (TailFeed, Arc<SetLeadership>) {
    let leadership = Arc::new(SetLeadership {
        led: std::sync::Mutex::new(BTreeMap::from([(0, epoch)])),
        changes: tokio::sync::watch::channel(0).0,
    });
    let mut config = TailFeedConfig::new(Arc::new(FixedHw(None)));
    config.upto = UptoPolicy::LogEnd;
    config.poll_interval = Duration::from_millis(5);
    config.leadership = Some(leadership.clone());
    let feed = TailFeed::new(
        vec![TailPartition {
            partition: partition(),
            dir: dir.to_path_buf(),
        }],
        config,
    );
    (feed, leadership)
}

async fn claimed(feed: &mut TailFeed, epoch: i32) {
    assert_eq!(
        feed.next().await.unwrap(),
        FeedItem::Claim(Claim {
            partition: partition(),
            leader_epoch: epoch
        })
    );
}

/// The mirror's segment 4 (written from another broker that rolled at 4) holds 4-5 and 6-7 and ends at 8: this
/// broker continues it with the rest of its segment 6 (8-9) at the mirror's position, rolls it there, and goes on
/// with its own segment 10.
#[tokio::test]
async fn a_grant_mid_segment_continues_the_mirror_segment_then_rolls_it_and_follows_this_layout() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    let batches = replica(&dir);
    let (mut feed, _leadership) = cluster_feed(&dir, 3);
    feed.seek(&[]).await.unwrap();
    claimed(&mut feed, 3).await;
    let d = size(&batches, 4, 8);
    grant(
        &mut feed,
        &partition(),
        Some(ClaimedAt {
            segment_base: 4,
            position: d,
            end_offset: 8,
            last_batch_crc: None,
        }),
    );
    let mut mirror4 = bytes(&batches, 4, 8);
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => {
            assert_eq!(
                (c.segment_base, c.position),
                (4, d),
                "addressed to the mirror's segment"
            );
            assert_eq!(
                c.bytes.as_ref(),
                bytes(&batches, 8, 10).as_slice(),
                "this replica's batches from 8 on"
            );
            mirror4.extend_from_slice(&c.bytes);
        }
        other => panic!("expected a chunk, got {other:?}"),
    }
    match feed.next().await.unwrap() {
        FeedItem::Roll(r) => {
            assert_eq!(
                (r.segment_base, r.final_size, r.next_offset),
                (4, mirror4.len() as u64, 10)
            );
            assert_eq!(r.log_sha256, None);
        }
        other => panic!("expected a roll, got {other:?}"),
    }
    // The mirror's segment 4 is whole contiguous batches 4..=9.
    assert_eq!(mirror4, bytes(&batches, 4, 10));
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => {
            assert_eq!((c.segment_base, c.position), (10, 0));
            assert_eq!(c.bytes.as_ref(), bytes(&batches, 10, 12).as_slice());
        }
        other => panic!("expected this broker's own segment 10, got {other:?}"),
    }
}

#[tokio::test]
async fn a_grant_where_this_replica_rolled_rolls_first_and_agreeing_layouts_continue_as_usual() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    let batches = replica(&dir);
    // The mirror's segment 4 holds 4-5 only: it ends at 6, where this broker rolled.
    let (mut feed, _l) = cluster_feed(&dir, 3);
    feed.seek(&[]).await.unwrap();
    claimed(&mut feed, 3).await;
    let d = size(&batches, 4, 6);
    grant(
        &mut feed,
        &partition(),
        Some(ClaimedAt {
            segment_base: 4,
            position: d,
            end_offset: 6,
            last_batch_crc: None,
        }),
    );
    match feed.next().await.unwrap() {
        FeedItem::Roll(r) => assert_eq!((r.segment_base, r.final_size, r.next_offset), (4, d, 6)),
        other => panic!("expected a roll first, got {other:?}"),
    }
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => assert_eq!(
            (c.segment_base, c.position, c.bytes.len() as u64),
            (6, 0, size(&batches, 6, 10))
        ),
        other => panic!("expected segment 6 from byte 0, got {other:?}"),
    }
    // The next segment seals as usual (its layout is this broker's).
    assert!(matches!(feed.next().await.unwrap(), FeedItem::Seal(s) if s.segment_base == 6));

    // A mirror whose segment is this broker's segment 6 up to 8: aligned, an ordinary continuation.
    let (mut feed, _l) = cluster_feed(&dir, 3);
    feed.seek(&[]).await.unwrap();
    claimed(&mut feed, 3).await;
    let d = size(&batches, 6, 8);
    grant(
        &mut feed,
        &partition(),
        Some(ClaimedAt {
            segment_base: 6,
            position: d,
            end_offset: 8,
            last_batch_crc: None,
        }),
    );
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => assert_eq!((c.segment_base, c.position), (6, d)),
        other => panic!("expected a chunk, got {other:?}"),
    }
    assert!(matches!(feed.next().await.unwrap(), FeedItem::Seal(s) if s.segment_base == 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_refused_partition_is_claimed_again_only_at_a_higher_epoch() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    let batches = replica(&dir);
    let (mut feed, leadership) = cluster_feed(&dir, 3);
    feed.seek(&[]).await.unwrap();
    claimed(&mut feed, 3).await;
    grant(&mut feed, &partition(), None);
    match feed.next().await.unwrap() {
        FeedItem::Chunk(c) => assert_eq!((c.segment_base, c.position), (0, 0)),
        other => panic!("expected the first segment from byte 0, got {other:?}"),
    }
    // Another node holds it now (this broker still believes it leads at 3): nothing more of it, no claim at 3.
    feed.revoked(&Revoke {
        partition: partition(),
        holder_node: 2,
        holder_epoch: 4,
    });
    let waiting = tokio::spawn(async move {
        let item = feed.next().await.unwrap();
        (feed, item)
    });
    // Led again at a higher epoch: the first thing is a claim at it.
    leadership.set(0, Some(5));
    let (mut feed, item) = waiting.await.unwrap();
    assert_eq!(
        item,
        FeedItem::Claim(Claim {
            partition: partition(),
            leader_epoch: 5
        })
    );
    // Refused (the applier has granted 6 to another node meanwhile): nothing until a higher epoch again.
    feed.claim_result(&ClaimResult {
        partition: partition(),
        verdict: ClaimVerdict::Refused {
            holder_node: 2,
            holder_epoch: 6,
        },
    });
    let waiting = tokio::spawn(async move {
        let item = feed.next().await.unwrap();
        (feed, item)
    });
    leadership.set(0, Some(7));
    let (mut feed, item) = waiting.await.unwrap();
    assert_eq!(
        item,
        FeedItem::Claim(Claim {
            partition: partition(),
            leader_epoch: 7
        })
    );
    // Granted where the other node left the mirror (it ended at 6, in its segment 4): roll it, go on at 6.
    let d = size(&batches, 4, 6);
    grant(
        &mut feed,
        &partition(),
        Some(ClaimedAt {
            segment_base: 4,
            position: d,
            end_offset: 6,
            last_batch_crc: None,
        }),
    );
    assert!(matches!(feed.next().await.unwrap(), FeedItem::Roll(r) if r.segment_base == 4 && r.next_offset == 6));
}

/// A replica whose batches do not line up with the mirror's end: the feed fails naming the divergence, it never
/// ships a guess.
#[tokio::test]
async fn a_grant_this_replica_cannot_continue_is_a_divergence() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    replica(&dir);
    let (mut feed, _l) = cluster_feed(&dir, 3);
    feed.seek(&[]).await.unwrap();
    claimed(&mut feed, 3).await;
    grant(
        &mut feed,
        &partition(),
        Some(ClaimedAt {
            segment_base: 4,
            position: 77,
            end_offset: 7,
            last_batch_crc: None,
        }),
    );
    let err = feed.next().await.unwrap_err().to_string();
    assert!(err.contains("ends at offset 7") && err.contains("6..=7"), "{err}");
}

/// The grant names the CRC of the mirror's last batch: the replica's batch ending there must carry it. The same
/// batch continues; another batch at the same offsets (a different CRC) is a divergence naming both CRCs, and
/// nothing of the partition is shipped.
#[tokio::test]
async fn a_grant_whose_last_batch_crc_differs_from_the_replicas_is_refused_naming_both() {
    let crc = |b: &[u8]| segment_format::batch::parse_header(b).unwrap().crc;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    let batches = replica(&dir);
    let here = crc(&batches[&6]);
    for (mirror_crc, same) in [(here, true), (here ^ 0x5a5a, false)] {
        let (mut feed, _l) = cluster_feed(&dir, 3);
        feed.seek(&[]).await.unwrap();
        claimed(&mut feed, 3).await;
        grant(
            &mut feed,
            &partition(),
            Some(ClaimedAt {
                segment_base: 4,
                position: size(&batches, 4, 8),
                end_offset: 8,
                last_batch_crc: Some(mirror_crc),
            }),
        );
        let next = feed.next().await;
        if same {
            match next.unwrap() {
                FeedItem::Chunk(c) => assert_eq!(c.bytes.as_ref(), bytes(&batches, 8, 10).as_slice()),
                other => panic!("expected this replica's batches from 8 on, got {other:?}"),
            }
        } else {
            let err = next.unwrap_err().to_string();
            assert!(
                err.contains(&format!("{here:#010x}")) && err.contains(&format!("{mirror_crc:#010x}")),
                "{err}"
            );
        }
    }
}
