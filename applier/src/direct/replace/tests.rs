//! Replacements of sealed mirror segments: validated completely, installed atomically (several merged into one),
//! refused with nothing changed when corrupt or out of range, and recoverable after a crash on either side of the
//! commit point.

use std::collections::BTreeMap;

use bytes::Bytes;
use segment_format::log::scan_frames;
use segmirror_transport::direct::payload::{Companion, CompanionKind, PartitionRef};

use super::super::tests::{chunks_of, fixture, mirror_log, seal_of, Fixture};
use super::*;

/// Tails the fixture, sealing all but the last segment; returns the partition.
async fn tail_all(f: &Fixture, a: &mut TailAppender) -> PartitionRef {
    let last = f.segs.len() - 1;
    let mut partition = None;
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        for c in chunks_of(*base, bytes, 2) {
            a.apply_chunk(&c).await.unwrap();
        }
        let seal = seal_of(&f.source, *base, bytes, true);
        partition = Some(seal.partition.clone());
        if i < last {
            a.apply_seal(&seal).await.unwrap();
        }
    }
    partition.unwrap()
}

/// Every other batch of the given segments, concatenated: what a cleaner merging them could write.
pub(in crate::direct) fn compacted(segs: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut n = 0usize;
    for (_, bytes) in segs {
        for frame in scan_frames(bytes, 0) {
            let frame = frame.unwrap();
            let from = frame.info.position as usize;
            let to = from + frame.info.size as usize;
            if n.is_multiple_of(2) {
                out.extend_from_slice(&bytes[from..to]);
            }
            n += 1;
        }
    }
    out
}

/// The seal of `bytes` replacing `bases`: the offset index inline, the time index as a digest (rebuilt).
pub(in crate::direct) fn replace_seal(partition: &PartitionRef, bases: &[i64], bytes: &[u8]) -> ReplaceSeal {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("r.log");
    std::fs::write(&path, bytes).unwrap();
    let companion = |kind: CompanionKind, inline: bool| {
        let b = rebuild_index(&path, bases[0], kind).unwrap();
        Companion {
            kind,
            size: b.len() as u64,
            sha256: sha256(&b),
            inline: inline.then(|| Bytes::from(b)),
            index_interval: None,
        }
    };
    ReplaceSeal {
        partition: partition.clone(),
        replaced_bases: bases.to_vec(),
        final_size: bytes.len() as u64,
        log_sha256: sha256(bytes),
        companions: vec![
            companion(CompanionKind::OffsetIndex, true),
            companion(CompanionKind::TimeIndex, false),
        ],
        next_base: None,
    }
}

async fn stage(a: &mut TailAppender, p: &PartitionRef, base: i64, bytes: &[u8]) {
    // In two pieces, as chunks would arrive.
    let half = bytes.len() / 2;
    a.stage_replacement(p, base, 0, bytes[..half].to_vec()).await.unwrap();
    a.stage_replacement(p, base, half as u64, bytes[half..].to_vec())
        .await
        .unwrap();
}

/// Every file of a directory with its bytes.
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

fn pdir(f: &Fixture) -> PathBuf {
    mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf()
}

#[tokio::test]
async fn tail_replace_merges_sealed_segments_atomically_after_validation() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let new = compacted(&f.segs[..2]);
    stage(&mut a, &p, bases[0], &new).await;
    let seal = replace_seal(&p, &bases[..2], &new);
    a.install_replacement(&seal).await.unwrap();

    let dir = pdir(&f);
    assert_eq!(std::fs::read(mirror_log(&f.mirror, bases[0])).unwrap(), new);
    let index = std::fs::read(dir.join(segment_file_name(bases[0], SegmentFileKind::Index))).unwrap();
    assert_eq!(Some(&index[..]), seal.companions[0].inline.as_deref());
    let time = std::fs::read(dir.join(segment_file_name(bases[0], SegmentFileKind::TimeIndex))).unwrap();
    assert_eq!(sha256(&time), seal.companions[1].sha256);
    for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        assert!(
            !dir.join(segment_file_name(bases[1], kind)).exists(),
            "{kind:?} of the merged segment gone"
        );
    }
    for (base, bytes) in &f.segs[2..] {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base} untouched"
        );
    }
    assert!(!contents(&dir).keys().any(|n| n.ends_with(".swap")), "no .swap left");
    assert!(!crate::mirror::replace_journal_file(&f.mirror, "orders-2").exists());
    // The tail goes on where it was.
    let (last_base, last_bytes) = f.segs.last().unwrap();
    let d = a.durable_positions().await.unwrap();
    assert_eq!(
        (d[0].position.segment_base, d[0].position.position),
        (*last_base, last_bytes.len() as u64)
    );
}

#[tokio::test]
async fn tail_replace_corrupt_or_out_of_range_replacements_are_refused_with_nothing_changed() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let dir = pdir(&f);
    let before = contents(&dir);

    // A flipped byte inside a batch (the digests made to match it): the batch CRC refuses it.
    let mut corrupt = compacted(&f.segs[..2]);
    let at = corrupt.len() / 3;
    corrupt[at] ^= 0x55;
    stage(&mut a, &p, bases[0], &corrupt).await;
    let err = a.install_replacement(&replace_seal(&p, &bases[..2], &corrupt)).await;
    assert!(err.is_err());
    assert_eq!(contents(&dir), before, "nothing changed after a corrupt replacement");

    // Digest not the staged bytes.
    let good = compacted(&f.segs[..2]);
    stage(&mut a, &p, bases[0], &good).await;
    let mut seal = replace_seal(&p, &bases[..2], &good);
    seal.log_sha256[0] ^= 1;
    assert!(a.install_replacement(&seal).await.is_err());
    assert_eq!(contents(&dir), before);

    // Segment 0 alone replaced by bytes reaching into segment 1's offsets.
    stage(&mut a, &p, bases[0], &good).await;
    assert!(a
        .install_replacement(&replace_seal(&p, &bases[..1], &good))
        .await
        .is_err());
    assert_eq!(contents(&dir), before);

    // Not contiguous: segments 0 and 2 without 1.
    let two = compacted(&[f.segs[0].clone()]);
    stage(&mut a, &p, bases[0], &two).await;
    assert!(a
        .install_replacement(&replace_seal(&p, &[bases[0], bases[2]], &two))
        .await
        .is_err());
    assert_eq!(contents(&dir), before);

    // The segment being tailed.
    let last = f.segs.len() - 1;
    let tail = compacted(&f.segs[last..]);
    stage(&mut a, &p, bases[last], &tail).await;
    assert!(a
        .install_replacement(&replace_seal(&p, &bases[last..], &tail))
        .await
        .is_err());
    assert_eq!(contents(&dir), before);

    // Pieces out of order are refused when staged.
    assert!(a.stage_replacement(&p, bases[0], 7, b"xx".to_vec()).await.is_err());
}

#[tokio::test]
async fn tail_replace_a_crash_before_the_journal_discards_and_after_it_completes() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let dir = pdir(&f);
    let before = contents(&dir);
    let new = compacted(&f.segs[..2]);
    let seal = replace_seal(&p, &bases[..2], &new);
    let log_name = segment_file_name(bases[0], SegmentFileKind::Log);
    let index_name = segment_file_name(bases[0], SegmentFileKind::Index);

    // Crash after step 1 (the `.swap` files written), before the journal: the next session start removes them.
    std::fs::write(dir.join(swap_name(&log_name)), &new).unwrap();
    std::fs::write(
        dir.join(swap_name(&index_name)),
        seal.companions[0].inline.as_deref().unwrap(),
    )
    .unwrap();
    let mut again = TailAppender::open(&f.mirror).unwrap();
    again.durable_positions().await.unwrap();
    assert_eq!(
        contents(&dir),
        before,
        "an uncommitted replacement leaves the old segments"
    );

    // Crash after the journal and the first unlink: the next session start completes the install.
    std::fs::write(dir.join(swap_name(&log_name)), &new).unwrap();
    std::fs::write(
        dir.join(swap_name(&index_name)),
        seal.companions[0].inline.as_deref().unwrap(),
    )
    .unwrap();
    let seg1: Vec<String> = before
        .keys()
        .filter(|n| n.starts_with(&format!("{:020}.", bases[1])))
        .cloned()
        .collect();
    let mut delete: Vec<String> = seg1.clone();
    delete.push(segment_file_name(bases[0], SegmentFileKind::TimeIndex));
    delete.sort();
    let journal = Journal {
        topic: p.topic.clone(),
        partition: p.partition,
        delete,
        install: vec![log_name.clone(), index_name.clone()],
        record: None,
        catalog: None,
    };
    let jpath = crate::mirror::replace_journal_file(&f.mirror, &format!("{}-{}", p.topic, p.partition));
    std::fs::create_dir_all(jpath.parent().unwrap()).unwrap();
    std::fs::write(&jpath, serde_json::to_vec(&journal).unwrap()).unwrap();
    std::fs::remove_file(dir.join(&seg1[0])).unwrap();
    let mut again = TailAppender::open(&f.mirror).unwrap();
    again.durable_positions().await.unwrap();
    assert_eq!(std::fs::read(dir.join(&log_name)).unwrap(), new);
    assert_eq!(
        Some(&std::fs::read(dir.join(&index_name)).unwrap()[..]),
        seal.companions[0].inline.as_deref()
    );
    for name in &seg1 {
        assert!(!dir.join(name).exists(), "{name} deleted");
    }
    assert!(!jpath.exists(), "journal removed once done");
    assert!(!contents(&dir).keys().any(|n| n.ends_with(".swap")));
    for (base, bytes) in &f.segs[2..] {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base} untouched"
        );
    }
}

#[tokio::test]
async fn tail_replace_of_the_last_sealed_segment_moves_the_recorded_size_with_it() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let last = f.segs.len() - 1;
    let (base, bytes) = &f.segs[last];
    a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
    let new = compacted(&f.segs[last..]);
    stage(&mut a, &p, *base, &new).await;
    a.install_replacement(&replace_seal(&p, &[*base], &new)).await.unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base)).unwrap(), new);
    // A restarted appender finds the state and the file in agreement.
    let mut again = TailAppender::open(&f.mirror).unwrap();
    let d = again.durable_positions().await.unwrap();
    assert_eq!(
        (d[0].position.segment_base, d[0].position.position, d[0].sealed),
        (*base, new.len() as u64, true)
    );
}

/// Seen in e2e_tail_processes (pull, compaction): the applier was killed inside a seal's `write_atomically` of a
/// companion (`<base>.index.tmp` written, not yet renamed), and the seal was never redone (a replacement covered
/// the segment after the restart); `promote` then refused the mirror for the stray file. The next session start
/// removes such staging files, whatever else it finds.
#[tokio::test]
async fn tail_session_start_removes_the_staging_files_of_an_interrupted_atomic_rewrite() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    tail_all(&f, &mut a).await;
    drop(a);
    let dir = pdir(&f);
    let before = contents(&dir);
    let base = f.segs[1].0;
    for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        let name = segment_file_name(base, kind);
        std::fs::write(dir.join(format!("{name}.tmp")), b"half a companion").unwrap();
    }
    std::fs::write(dir.join("leader-epoch-checkpoint.tmp"), b"0\n").unwrap();
    assert_ne!(contents(&dir), before);
    let mut again = TailAppender::open(&f.mirror).unwrap();
    again.durable_positions().await.unwrap();
    assert_eq!(
        contents(&dir),
        before,
        "the staging files are gone, nothing else changed"
    );
}

/// A later piece of a replacement whose first piece never came (the fuzzer's finding: it used to end the session
/// as this side's I/O failure, which stops the link) is the peer's order: refused as such, nothing staged.
#[tokio::test]
async fn tail_replace_a_later_piece_with_nothing_staged_is_the_peers_fault() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let (base, bytes) = &f.segs[0];
    let e = a
        .stage_replacement(&p, *base, 10, bytes[10..20].to_vec())
        .await
        .unwrap_err();
    assert!(matches!(e, DirectError::PeerData { .. }), "{e:?}");
    assert!(e.to_string().contains("nothing of the replacement is staged"), "{e}");
}
