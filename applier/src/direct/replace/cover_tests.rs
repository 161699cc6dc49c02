//! A replacement covering the segment the tail appends to (the source rolled it and its cleaner merged it into
//! an earlier segment while the link was down): installed sealed at the source's next segment base, after which the
//! next segment follows; hostile ones refused naming the partition and offsets, with nothing changed.

use std::collections::BTreeMap;

use segment_format::log::scan_frames;
use segmirror_transport::direct::payload::PartitionRef;

use super::super::tests::{chunks_of, fixture, mirror_log, seal_of, Fixture};
use super::tests::{compacted, replace_seal};
use super::*;

/// Tails segment 0 sealed and the first `batches` batches of segment 1 (unsealed); returns the partition and the
/// byte position reached in segment 1.
async fn tail_into_second(f: &Fixture, a: &mut TailAppender, batches: usize) -> (PartitionRef, u64) {
    let (b0, s0) = &f.segs[0];
    for c in chunks_of(*b0, s0, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let seal = seal_of(&f.source, *b0, s0, true);
    a.apply_seal(&seal).await.unwrap();
    let (b1, s1) = &f.segs[1];
    let mut at = 0;
    for c in chunks_of(*b1, s1, 1).into_iter().take(batches) {
        at = c.position + c.bytes.len() as u64;
        a.apply_chunk(&c).await.unwrap();
    }
    (seal.partition, at)
}

fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

async fn stage(a: &mut TailAppender, p: &PartitionRef, base: i64, bytes: &[u8]) {
    a.stage_replacement(p, base, 0, bytes.to_vec()).await.unwrap();
}

/// The offset after the last batch of `bytes`.
fn end_offset(bytes: &[u8]) -> i64 {
    scan_frames(bytes, 0).last().unwrap().unwrap().info.last_offset + 1
}

#[tokio::test]
async fn tail_replace_covering_the_tailed_segment_installs_it_sealed_and_the_next_segment_follows() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (p, _) = tail_into_second(&f, &mut a, 2).await;
    let (b0, b1, b2) = (f.segs[0].0, f.segs[1].0, f.segs[2].0);
    // The source's whole segments 0 and 1 (more than the mirror holds of 1), merged by its cleaner.
    let merged = compacted(&f.segs[..2]);
    stage(&mut a, &p, b0, &merged).await;
    let seal = ReplaceSeal {
        next_base: Some(b2),
        ..replace_seal(&p, &[b0, b1], &merged)
    };
    a.install_replacement(&seal).await.unwrap();

    assert_eq!(std::fs::read(mirror_log(&f.mirror, b0)).unwrap(), merged);
    let dir = mirror_log(&f.mirror, b0).parent().unwrap().to_path_buf();
    for kind in [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
    ] {
        assert!(
            !dir.join(segment_file_name(b1, kind)).exists(),
            "{kind:?} of the tailed segment gone"
        );
    }
    let d = a.durable_positions().await.unwrap();
    assert_eq!(
        (d[0].position.segment_base, d[0].position.position, d[0].sealed),
        (b0, merged.len() as u64, true)
    );
    // The layout the next session sends lists it.
    let layout = a.mirror_layout().await.unwrap();
    assert_eq!(
        layout[0].1,
        vec![LayoutSegment {
            base: b0,
            size: merged.len() as u64
        }]
    );
    // The next segment follows from byte 0, and seals.
    let (_, s2) = &f.segs[2];
    for c in chunks_of(b2, s2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, b2, s2, false)).await.unwrap();
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, b2)).unwrap(), s2);
}

#[tokio::test]
async fn tail_replace_of_the_tailed_segment_alone_ends_at_the_next_base() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (p, _) = tail_into_second(&f, &mut a, 1).await;
    let (b1, b2) = (f.segs[1].0, f.segs[2].0);
    let cleaned = compacted(&f.segs[1..2]);
    stage(&mut a, &p, b1, &cleaned).await;
    let seal = ReplaceSeal {
        next_base: Some(b2),
        ..replace_seal(&p, &[b1], &cleaned)
    };
    a.install_replacement(&seal).await.unwrap();
    let d = a.durable_positions().await.unwrap();
    assert_eq!((d[0].position.segment_base, d[0].sealed), (b1, true));
    // Offsets continue at the next base, even though the cleaned file ends below it.
    assert!(end_offset(&cleaned) <= b2);
    let (_, s2) = &f.segs[2];
    for c in chunks_of(b2, s2, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
}

#[tokio::test]
async fn tail_replace_hostile_replacements_of_the_tailed_segment_are_refused_with_nothing_changed() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (p, _) = tail_into_second(&f, &mut a, 3).await;
    let (b0, b1, b2) = (f.segs[0].0, f.segs[1].0, f.segs[2].0);
    let dir = mirror_log(&f.mirror, b0).parent().unwrap().to_path_buf();
    let before = contents(&dir);
    let positions = a.durable_positions().await.unwrap();
    let merged = compacted(&f.segs[..2]);
    // What the mirror holds of segment 1 ends here.
    let mirror_end = end_offset(&std::fs::read(mirror_log(&f.mirror, b1)).unwrap());

    // (replaced bases, next base, bytes, what the refusal says)
    type Case<'a> = (Vec<i64>, Option<i64>, &'a [u8], &'a str);
    let cases: Vec<Case> = vec![
        // No next segment base (a shipper without the MirrorLayout feature).
        (vec![b0, b1], None, &merged, "must name the source's next segment base"),
        // A next base below what the mirror holds of the tailed segment.
        (
            vec![b0, b1],
            Some(mirror_end - 1),
            &merged,
            "below the mirror's end offset",
        ),
        // The replaced set is not the mirror's segments there.
        (
            vec![b0, b1 + 1],
            Some(b2),
            &merged,
            "the mirror's segments in that range are",
        ),
        // Batches below the first replaced base.
        (vec![b1], Some(b2), &merged, "below the first replaced base"),
    ];
    for (bases, next_base, bytes, expected) in cases {
        stage(&mut a, &p, bases[0], bytes).await;
        // Companions built for base 0 (what the bytes hold); the checks above them refuse first.
        let seal = ReplaceSeal {
            replaced_bases: bases.clone(),
            next_base,
            ..replace_seal(&p, &[b0], bytes)
        };
        let err = a.install_replacement(&seal).await.expect_err("refused").to_string();
        assert!(err.contains(expected), "{bases:?} {next_base:?}: {err}");
        assert!(
            err.contains("orders-2") && err.contains(&format!("segment {}", bases[0])),
            "{err}"
        );
        assert_eq!(contents(&dir), before, "nothing changed: {bases:?} {next_base:?}");
        assert_eq!(a.durable_positions().await.unwrap(), positions);
    }
}

#[tokio::test]
async fn tail_replace_of_the_last_sealed_segment_merged_with_unreceived_ones_reaches_the_next_base() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    // Segment 0 sealed, nothing of 1 received yet: the source merged 0 and 1 meanwhile.
    let (b0, s0) = &f.segs[0];
    for c in chunks_of(*b0, s0, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let seal0 = seal_of(&f.source, *b0, s0, true);
    a.apply_seal(&seal0).await.unwrap();
    let p = seal0.partition.clone();
    let (b2, s2) = (f.segs[2].0, &f.segs[2].1);
    let merged = compacted(&f.segs[..2]);
    // Without the next base it reaches beyond the mirror's end: refused.
    stage(&mut a, &p, *b0, &merged).await;
    let err = a
        .install_replacement(&replace_seal(&p, &[*b0], &merged))
        .await
        .expect_err("beyond the end");
    assert!(err.to_string().contains("reaches the next segment's base"), "{err}");
    // With it: installed, and segment 2 follows.
    stage(&mut a, &p, *b0, &merged).await;
    let seal = ReplaceSeal {
        next_base: Some(b2),
        ..replace_seal(&p, &[*b0], &merged)
    };
    a.install_replacement(&seal).await.unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *b0)).unwrap(), merged);
    for c in chunks_of(b2, s2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
}
