//! Claims and Rolls on the appender (feature bit 6): grants by leader epoch recorded durably (a reopened appender
//! still fences), and a mirror segment ended by a Roll where the source's file does not end, continued in the new
//! leader's layout, which `verify --strict` finds sound.

use segment_format::log::scan_frames;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segmirror_transport::direct::payload::Claim;
use segmirror_transport::direct::session::ChunkApplier;

use super::tests::{chunk, chunks_of, fixture, mirror_log, pref, seal_of};
use super::*;

fn claim(epoch: i32) -> Claim {
    Claim {
        partition: pref(),
        leader_epoch: epoch,
    }
}

fn refused(node: i32, epoch: i32) -> ClaimDecision {
    ClaimDecision::Refused {
        holder_node: node,
        holder_epoch: epoch,
    }
}

#[tokio::test]
async fn claims_are_granted_by_leader_epoch_and_the_fence_survives_a_restart() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    // Nothing of the partition yet: granted with no position.
    assert_eq!(
        a.claim(1, &claim(3)).await.unwrap(),
        ClaimDecision::Granted {
            durable: None,
            end_offset: 0,
            last_batch_crc: None
        }
    );
    let (base, bytes) = &f.segs[0];
    let chunks = chunks_of(*base, bytes, 2);
    a.apply_chunk(&chunks[0]).await.unwrap();
    let end = chunks[0].position + chunks[0].bytes.len() as u64;
    let last = scan_frames(&chunks[0].bytes, 0).last().unwrap().unwrap();
    let (next_offset, last_crc) = (last.info.last_offset + 1, last.stored_crc);
    // Same node, same epoch (a reconnect): granted at the durable end, with the mirror's end offset.
    match a.claim(1, &claim(3)).await.unwrap() {
        ClaimDecision::Granted {
            durable: Some(d),
            end_offset,
            last_batch_crc,
        } => {
            assert_eq!(
                (d.position.segment_base, d.position.position, d.sealed),
                (*base, end, false)
            );
            assert_eq!(end_offset, next_offset);
            // The CRC of the batch ending at the end offset, read off the mirror: the new holder's proof.
            assert_eq!(last_batch_crc, Some(last_crc));
        }
        other => panic!("{other:?}"),
    }
    // Another node at the same epoch, or below it: refused naming the holder.
    assert_eq!(a.claim(2, &claim(3)).await.unwrap(), refused(1, 3));
    assert_eq!(a.claim(2, &claim(2)).await.unwrap(), refused(1, 3));
    // A new leader.
    assert!(matches!(
        a.claim(2, &claim(4)).await.unwrap(),
        ClaimDecision::Granted { durable: Some(_), .. }
    ));
    assert_eq!(
        recorded_claim(&f.mirror, &pref()).unwrap(),
        Some(ClaimRecord {
            topic: pref().topic,
            partition: pref().partition,
            node: 2,
            epoch: 4
        })
    );
    // Restarted: the old leader is still fenced, the new one still granted.
    drop(a);
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    assert_eq!(a.claim(1, &claim(3)).await.unwrap(), refused(2, 4));
    assert!(matches!(
        a.claim(2, &claim(4)).await.unwrap(),
        ClaimDecision::Granted { .. }
    ));
    // A corrupt record is an error naming the file, never a grant.
    std::fs::write(claim_path(&f.mirror, &pref()), b"{").unwrap();
    let err = a.claim(3, &claim(9)).await.unwrap_err().to_string();
    assert!(err.contains("claims"), "{err}");
}

/// The mirror's segment 0 ends mid-way through the source's (the old leader shipped half of it, the new leader's
/// replica rolled there): Roll; the new leader's segment holds the rest of those batches, Roll again at the
/// source's next segment; from there the source's layout with ordinary seals. Every batch lands once, at its
/// offset, and `verify --deep --strict` finds nothing.
#[tokio::test]
async fn a_rolled_mirror_layout_segment_is_sound_and_the_next_follows_the_new_layout() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    let (base0, bytes0) = &f.segs[0];
    let frames: Vec<_> = scan_frames(bytes0, 0).map(|fr| fr.unwrap().info).collect();
    assert!(frames.len() >= 4, "enough batches to split");
    let cut = frames[frames.len() / 2];
    let cut_at = cut.position as usize;
    let cut_offset = cut.base_offset;
    a.apply_chunk(&chunk(*base0, bytes0, 0, cut_at)).await.unwrap();

    // A Roll must name the mirror's next offset; a wrong one is refused, nothing sealed.
    let roll = |base: i64, size: usize, next: i64| Roll {
        partition: pref(),
        segment_base: base,
        final_size: size as u64,
        next_offset: next,
        log_sha256: None,
    };
    let err = a
        .apply_roll(&roll(*base0, cut_at, cut_offset + 1))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("next offset"), "{err}");
    a.apply_roll(&roll(*base0, cut_at, cut_offset)).await.unwrap();
    // Rolled again (a resend after a cut): nothing happens.
    a.apply_roll(&roll(*base0, cut_at, cut_offset)).await.unwrap();

    // The new leader's segment: the rest of the source's segment 0, then rolled at the source's segment 1, with
    // the digest the shipper computed.
    let rest = &bytes0[cut_at..];
    for c in chunks_of(cut_offset, rest, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let (base1, _) = &f.segs[1];
    let digest: [u8; 32] = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(rest)).into();
    a.apply_roll(&Roll {
        log_sha256: Some(digest),
        ..roll(cut_offset, rest.len(), *base1)
    })
    .await
    .unwrap();
    // From here the source's own layout and seals.
    let last = f.segs.len() - 1;
    for (i, (base, bytes)) in f.segs.iter().enumerate().skip(1) {
        for c in chunks_of(*base, bytes, 3) {
            a.apply_chunk(&c).await.unwrap();
        }
        if i < last {
            a.apply_seal(&seal_of(&f.source, *base, bytes, false)).await.unwrap();
        }
    }

    // Every batch once, at its offset: the mirror's files concatenated are the source's.
    let mut mirror_bytes = std::fs::read(mirror_log(&f.mirror, *base0)).unwrap();
    assert_eq!(mirror_bytes.len(), cut_at);
    mirror_bytes.extend(std::fs::read(mirror_log(&f.mirror, cut_offset)).unwrap());
    let mut source_bytes = bytes0.clone();
    for (base, bytes) in &f.segs[1..] {
        mirror_bytes.extend(std::fs::read(mirror_log(&f.mirror, *base)).unwrap());
        source_bytes.extend(bytes);
    }
    assert_eq!(mirror_bytes, source_bytes);
    let mdir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
    for base in [*base0, cut_offset] {
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            assert!(mdir.join(segment_file_name(base, kind)).exists(), "{kind:?} of {base}");
        }
    }
    let report = verify_paths(
        std::slice::from_ref(&mdir),
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}
