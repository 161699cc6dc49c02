//! The mirror's end translated into a replica rolled at other offsets, on segments written batch by batch: at a
//! boundary of the replica, inside one of its segments, at and beyond its end, below its first segment, and
//! replicas whose batches do not line up (divergence errors naming both sides).

use std::path::Path;

use segment_format::batch::parse_header;

use super::*;
use crate::direct::tests::batch_at;

/// A replica: segments given as lists of (first offset, records per batch); returns the segments and every batch's
/// bytes by its first offset.
fn replica(dir: &Path, layout: &[&[(i64, i32)]]) -> (Vec<ReplicaSegment>, Vec<(i64, Vec<u8>)>) {
    std::fs::create_dir_all(dir).unwrap();
    let mut segments = Vec::new();
    let mut batches = Vec::new();
    for seg in layout {
        let base = seg[0].0;
        let log = dir.join(format!("{base:020}.log"));
        let mut bytes = Vec::new();
        for &(offset, records) in *seg {
            // The same offset gives the same batch in every replica (content derived from the offset).
            let b = batch_at(offset, records, offset as usize);
            bytes.extend_from_slice(&b);
            batches.push((offset, b));
        }
        std::fs::write(&log, &bytes).unwrap();
        segments.push(ReplicaSegment { base_offset: base, log });
    }
    (segments, batches)
}

fn size_of(batches: &[(i64, Vec<u8>)], from: i64, to: i64) -> u64 {
    batches
        .iter()
        .filter(|(o, _)| *o >= from && *o < to)
        .map(|(_, b)| b.len() as u64)
        .sum()
}

fn crc_of(batches: &[(i64, Vec<u8>)], offset: i64) -> u32 {
    let (_, b) = batches.iter().find(|(o, _)| *o == offset).unwrap();
    parse_header(b).unwrap().crc
}

fn mirror(segment_base: i64, position: u64, end_offset: i64) -> MirrorEnd {
    MirrorEnd {
        segment_base,
        position,
        end_offset,
        last_batch_crc: None,
    }
}

/// This broker rolled at 6 and 10; the mirror (another broker's layout) has segments at 0 and 4.
const HERE: &[&[(i64, i32)]] = &[&[(0, 2), (2, 2), (4, 2)], &[(6, 2), (8, 2)], &[(10, 2)]];

#[test]
fn inside_a_replica_segment_the_mirror_segment_continues_with_the_replica_bytes_then_rolls() {
    let root = tempfile::tempdir().unwrap();
    let (segments, batches) = replica(root.path(), HERE);
    // The mirror's segment 4 holds the batches 4-5 and 6-7; it ends at 8.
    let d = size_of(&batches, 4, 8);
    let mut end = mirror(4, d, 8);
    end.last_batch_crc = Some(crc_of(&batches, 6));
    let h = handover("t-0", &segments, end).unwrap();
    let p = size_of(&batches, 6, 8);
    let t = Translation {
        mirror_base: 4,
        mirror_position: d,
        replica_base: 6,
        replica_position: p,
    };
    assert_eq!(h, Handover::Translate(t));
    // Shipping segment 6 to its end: the mirror's segment 4 ends at d + the rest of segment 6.
    let seg6 = std::fs::metadata(&segments[1].log).unwrap().len();
    assert_eq!(t.final_size(seg6), Some(d + seg6 - p));
    assert_eq!(t.mirror_position_of(p), Some(d));
    assert_eq!(t.mirror_position_of(p - 1), None, "before the translation starts");
    // The mirror segment so built is whole batches of contiguous offsets 4..=9: the other broker's bytes up to d,
    // this broker's from p.
    let theirs: Vec<u8> = batches
        .iter()
        .filter(|(o, _)| (4..8).contains(o))
        .flat_map(|(_, b)| b.clone())
        .collect();
    let mut built = theirs[..d as usize].to_vec();
    built.extend_from_slice(&std::fs::read(&segments[1].log).unwrap()[p as usize..]);
    assert_eq!(built.len() as u64, t.final_size(seg6).unwrap());
    let mut at = 0usize;
    let mut next = 4i64;
    while at < built.len() {
        let h = parse_header(&built[at..]).unwrap();
        assert_eq!(h.base_offset, next);
        next = h.next_offset();
        at += h.size_in_bytes();
    }
    assert_eq!((at, next), (built.len(), 10));
}

#[test]
fn at_a_replica_boundary_the_mirror_segment_rolls_first_or_is_aligned_when_empty() {
    let root = tempfile::tempdir().unwrap();
    let (segments, batches) = replica(root.path(), HERE);
    // The mirror's segment 4 holds 4-5: O = 6 starts this broker's segment 6.
    let d = size_of(&batches, 4, 6);
    let mut end = mirror(4, d, 6);
    end.last_batch_crc = Some(crc_of(&batches, 4));
    assert_eq!(
        handover("t-0", &segments, end).unwrap(),
        Handover::RollFirst {
            mirror_base: 4,
            final_size: d,
            next_base: 6
        }
    );
    // The mirror already rolled at 6 (an empty segment 6): the layouts agree from here.
    assert_eq!(
        handover("t-0", &segments, mirror(6, 0, 6)).unwrap(),
        Handover::Aligned { base: 6, position: 0 }
    );
    // Same base and size mid-segment: aligned too.
    let d = size_of(&batches, 6, 8);
    assert_eq!(
        handover("t-0", &segments, mirror(6, d, 8)).unwrap(),
        Handover::Aligned { base: 6, position: d }
    );
}

#[test]
fn at_the_replica_end_it_continues_there_and_beyond_it_waits() {
    let root = tempfile::tempdir().unwrap();
    let (segments, batches) = replica(root.path(), HERE);
    let seg10 = size_of(&batches, 10, 12);
    // The mirror ends where this replica ends (12): continue at the end of the active segment when it grows.
    assert_eq!(
        handover("t-0", &segments, mirror(8, size_of(&batches, 8, 12), 12)).unwrap(),
        Handover::Translate(Translation {
            mirror_base: 8,
            mirror_position: size_of(&batches, 8, 12),
            replica_base: 10,
            replica_position: seg10,
        })
    );
    // The mirror is ahead of this replica: wait for it.
    assert_eq!(
        handover("t-0", &segments, mirror(8, 999, 14)).unwrap(),
        Handover::Wait { replica_end: 12 }
    );
    // A batch being appended (incomplete at the file's end) is not there yet.
    let next = batch_at(12, 2, 12);
    let mut f = std::fs::OpenOptions::new().append(true).open(&segments[2].log).unwrap();
    std::io::Write::write_all(&mut f, &next[..next.len() - 3]).unwrap();
    assert_eq!(
        handover("t-0", &segments, mirror(8, 999, 14)).unwrap(),
        Handover::Wait { replica_end: 12 }
    );
    // No segments at all: wait.
    assert_eq!(
        handover("t-0", &[], mirror(0, 0, 4)).unwrap(),
        Handover::Wait { replica_end: 0 }
    );
}

#[test]
fn below_the_replica_log_start_is_the_log_start_path() {
    let root = tempfile::tempdir().unwrap();
    let (segments, _) = replica(root.path(), &HERE[1..]);
    assert_eq!(
        handover("t-0", &segments, mirror(0, 100, 4)).unwrap(),
        Handover::BelowLogStart { log_start: 6 }
    );
}

#[test]
fn a_replica_whose_batches_do_not_line_up_with_the_mirror_end_diverged() {
    let root = tempfile::tempdir().unwrap();
    // Batches of 3 records: 0-2, 3-5, 6-8. The mirror ends at 4: inside this replica's batch 3-5.
    let (segments, _) = replica(&root.path().join("a"), &[&[(0, 3), (3, 3), (6, 3)]]);
    let err = handover("t-0", &segments, mirror(0, 123, 4)).unwrap_err().to_string();
    assert!(
        err.contains("t-0") && err.contains("ends at offset 4") && err.contains("3..=5") && err.contains("byte 123"),
        "{err}"
    );
    // A gap at the end offset (offsets 2-3 missing here).
    let (segments, _) = replica(&root.path().join("b"), &[&[(0, 2), (4, 2)]]);
    let err = handover("t-0", &segments, mirror(0, 50, 2)).unwrap_err().to_string();
    assert!(err.contains("4..=5") && err.contains("ends at offset 2"), "{err}");
    // The batch before O is not the mirror's last batch (another CRC): diverged, naming both CRCs.
    let (segments, batches) = replica(&root.path().join("c"), HERE);
    let mut end = mirror(4, size_of(&batches, 4, 8), 8);
    let here = crc_of(&batches, 6);
    end.last_batch_crc = Some(here ^ 1);
    let err = handover("t-0", &segments, end).unwrap_err().to_string();
    assert!(
        err.contains(&format!("{here:#010x}")) && err.contains(&format!("{:#010x}", here ^ 1)) && err.contains("6..=7"),
        "{err}"
    );
    // The replica's segment ends at O but its successor starts later.
    let (segments, _) = replica(&root.path().join("d"), &[&[(0, 2)], &[(4, 2)]]);
    let err = handover("t-0", &segments, mirror(0, 10, 2)).unwrap_err().to_string();
    assert!(err.contains("4..=5") || err.contains("successor starts at 4"), "{err}");
    // Not a batch where one should be: named with the segment.
    let dir = root.path().join("e");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("00000000000000000000.log");
    std::fs::write(&log, vec![0u8; 200]).unwrap();
    let err = handover("t-0", &[ReplicaSegment { base_offset: 0, log }], mirror(0, 0, 2))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a batch header at byte 0"), "{err}");
}
