//! An incremental replay must equal a full replay of what is on disk, after appends, a cut frame completed later,
//! rolls, cleaning (a segment replaced under a new inode) and retention (the first segment deleted).

use std::io::Write;

use super::*;
use crate::batch::Compression;
use crate::consumer_offsets::tests::{batch, commit, marker, partition_dir, plain, tombstone};
use crate::consumer_offsets::{read_log_dir, OffsetsFilter};

fn full(root: &Path) -> BTreeMap<OffsetCommitKey, CommittedOffset> {
    read_log_dir(root, &OffsetsFilter::default()).unwrap().offsets
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

fn refresh(inc: &mut IncrementalOffsets, root: &Path) -> RefreshStats {
    inc.refresh(&[root.to_path_buf()], &OffsetsFilter::default()).unwrap()
}

#[test]
fn appends_and_a_completed_cut_frame_are_read_once_and_equal_a_full_replay() {
    let root = tempfile::tempdir().unwrap();
    let dir = partition_dir(root.path(), 0, &[(0, vec![plain(0, &[commit("g", "t", 0, 10, 3)])])]);
    let log = dir.join(format!("{:020}.log", 0));
    let mut inc = IncrementalOffsets::default();
    let first = refresh(&mut inc, root.path());
    assert_eq!(first.replayed_from_start, 1);
    assert_eq!(inc.offsets(), full(root.path()));

    // A transactional commit, then half of the batch that commits it: pending, and the cut frame tolerated.
    let txn = batch(1, &[commit("g", "t", 1, 7, 3)], Some(42), Compression::None);
    let commit_marker = marker(2, 42, true);
    let cut = commit_marker.len() / 2;
    append(&log, &txn);
    append(&log, &commit_marker[..cut]);
    let second = refresh(&mut inc, root.path());
    assert_eq!((second.continued, second.replayed_from_start), (1, 0));
    assert_eq!(
        second.bytes_scanned,
        txn.len() as u64,
        "only the appended complete frame is read"
    );
    assert_eq!(inc.offsets(), full(root.path()));
    assert!(
        inc.offsets().keys().all(|k| k.partition == 0),
        "the open transaction does not count yet"
    );

    // The rest of the marker arrives, and a plain commit replaces the first offset.
    append(&log, &commit_marker[cut..]);
    let later = plain(3, &[commit("g", "t", 0, 25, 3)]);
    append(&log, &later);
    let third = refresh(&mut inc, root.path());
    assert_eq!(third.bytes_scanned, (commit_marker.len() + later.len()) as u64);
    let offsets = inc.offsets();
    assert_eq!(offsets, full(root.path()));
    let got: Vec<(i32, i64)> = offsets.iter().map(|(k, v)| (k.partition, v.offset)).collect();
    assert_eq!(got, [(0, 25), (1, 7)]);
}

#[test]
fn a_roll_continues_and_cleaning_or_retention_start_the_partition_over() {
    let root = tempfile::tempdir().unwrap();
    let dir = partition_dir(
        root.path(),
        3,
        &[(
            0,
            vec![plain(0, &[commit("g", "t", 0, 1, 3), commit("h", "t", 0, 2, 3)])],
        )],
    );
    let mut inc = IncrementalOffsets::default();
    refresh(&mut inc, root.path());

    // Roll: a new segment after the first.
    std::fs::write(
        dir.join(format!("{:020}.log", 2)),
        plain(2, &[commit("g", "t", 0, 5, 3), tombstone("h", "t", 0)]),
    )
    .unwrap();
    let rolled = refresh(&mut inc, root.path());
    assert_eq!((rolled.continued, rolled.replayed_from_start), (1, 0));
    assert_eq!(inc.offsets(), full(root.path()));
    assert_eq!(inc.offsets().len(), 1, "the tombstone in the new segment deleted h");

    // Cleaning: the first segment rewritten (new inode) with a commit the old one did not have: only a replay
    // from the start can see it.
    let cleaned = dir.join("cleaned.tmp");
    std::fs::write(&cleaned, plain(0, &[commit("k", "t", 0, 9, 3)])).unwrap();
    std::fs::rename(&cleaned, dir.join(format!("{:020}.log", 0))).unwrap();
    let after_clean = refresh(&mut inc, root.path());
    assert_eq!(after_clean.replayed_from_start, 1);
    assert_eq!(inc.offsets(), full(root.path()));
    assert!(inc.offsets().keys().any(|k| k.group == "k"));

    // Retention: the first segment deleted.
    std::fs::remove_file(dir.join(format!("{:020}.log", 0))).unwrap();
    let after_delete = refresh(&mut inc, root.path());
    assert_eq!(after_delete.replayed_from_start, 1);
    assert_eq!(inc.offsets(), full(root.path()));
    assert!(!inc.offsets().keys().any(|k| k.group == "k"));

    // A partition directory removed takes its offsets with it.
    std::fs::remove_dir_all(&dir).unwrap();
    refresh(&mut inc, root.path());
    assert!(inc.offsets().is_empty());
}

#[test]
fn a_corrupt_append_is_an_error_and_the_next_refresh_starts_over() {
    let root = tempfile::tempdir().unwrap();
    let dir = partition_dir(root.path(), 0, &[(0, vec![plain(0, &[commit("g", "t", 0, 1, 3)])])]);
    let log = dir.join(format!("{:020}.log", 0));
    let mut inc = IncrementalOffsets::default();
    refresh(&mut inc, root.path());
    let mut bad = plain(1, &[commit("g", "t", 0, 2, 3)]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    append(&log, &bad);
    // A CRC mismatch is corruption even at the end of the newest segment; the error names the file.
    let err = inc
        .refresh(&[root.path().to_path_buf()], &OffsetsFilter::default())
        .unwrap_err();
    assert!(err.to_string().contains("00000000000000000000.log"), "{err}");
    assert!(inc.partitions.is_empty(), "nothing half-applied is kept");
}
