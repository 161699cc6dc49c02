//! Which handed-over segments are left unwalked, and that the promoted bytes are the same either way.

use std::path::{Path, PathBuf};

use segment_format::batch::parse_header;
use segment_format::checkpoint::EpochEntry;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};

use super::*;
use crate::promote::build::{hand_over_segment, HandedOver, KillSwitch};
use crate::promote::tests::{fixture_with, target_state};
use crate::promote::{promote, Handover, PromoteRequest};

const TOPIC: &str = "orders";
const SOURCE_ID: Uuid = Uuid([1; 16]);
/// The fixture's target leads in epoch 2 (`promote::tests`).
const TARGET: i32 = 2;

/// A partition led in `epochs` (epoch, batches of 3 records) in turn, in segments of `segment_bytes`, with an index
/// entry every 200 bytes.
fn partition(root: &Path, p: i32, epochs: &[(i32, usize)], segment_bytes: u64) -> WrittenPartition {
    let config = WriterConfig {
        segment_bytes,
        index_interval_bytes: 200,
        fsync: false,
        topic_id: Some(SOURCE_ID),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, TOPIC, p, 0, config).unwrap();
    for &(epoch, batches) in epochs {
        w.become_leader(epoch);
        for _ in 0..batches {
            let base = w.next_offset();
            let mut b = BatchBuilder::new(base).partition_leader_epoch(epoch);
            for i in 0..3 {
                b = b.record(RecordSpec::new(i, 1_700_000_000_000 + base).with_value(vec![b'v'; 40]));
            }
            w.append(b).unwrap();
        }
    }
    w.close().unwrap()
}

fn epochs_of(log: &[u8]) -> Vec<i32> {
    scan_frames(log, 0)
        .map(|f| {
            let f = f.unwrap();
            assert!(f.crc_matches(), "the batch CRC still holds");
            parse_header(f.bytes).unwrap().partition_leader_epoch
        })
        .collect()
}

fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(segment_file_name(base, SegmentFileKind::Log))
}

#[test]
fn a_segment_lies_in_one_epoch_only_when_no_epoch_starts_inside_it() {
    let epochs = MirrorEpochs(Some(LeaderEpochCheckpoint::new(vec![
        EpochEntry {
            epoch: 2,
            start_offset: 10,
        },
        EpochEntry {
            epoch: 5,
            start_offset: 20,
        },
    ])));
    assert_eq!(
        epochs.single_epoch(10, 20),
        Some(2),
        "an epoch starting at the next segment's base"
    );
    assert_eq!(epochs.single_epoch(12, 15), Some(2));
    assert_eq!(epochs.single_epoch(10, 21), None, "epoch 5 starts at 20, inside");
    assert_eq!(epochs.single_epoch(20, 1000), Some(5));
    assert_eq!(epochs.single_epoch(0, 5), None, "no epoch known below the first entry");
    assert_eq!(MirrorEpochs::default().single_epoch(10, 20), None);
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(MirrorEpochs::read(dir.path()).single_epoch(0, 1), None, "no checkpoint");
    std::fs::write(leader_epoch_checkpoint_path(dir.path()), "0\n2\n5 0\n2 10\n").unwrap();
    assert_eq!(
        MirrorEpochs::read(dir.path()).single_epoch(12, 15),
        None,
        "epochs going down break Kafka's invariants: nothing is trusted"
    );
    std::fs::write(leader_epoch_checkpoint_path(dir.path()), "0\n2\n2 0\n5 10\n").unwrap();
    assert_eq!(MirrorEpochs::read(dir.path()).single_epoch(0, 10), Some(2));
}

#[test]
fn confirm_reads_the_first_and_last_batches_and_refuses_any_other_epoch() {
    let dir = tempfile::tempdir().unwrap();
    // One big segment each: all in epoch 2; epoch 2 then 5; epoch 5 then nothing.
    let same = partition(dir.path(), 0, &[(TARGET, 40)], 1 << 20);
    let mixed = partition(dir.path(), 1, &[(TARGET, 20), (5, 20)], 1 << 20);
    for w in [&same, &mixed] {
        assert_eq!(w.segments.len(), 1);
        let index = std::fs::metadata(w.dir.join(segment_file_name(0, SegmentFileKind::Index))).unwrap();
        assert!(index.len() >= 8 * 10, "the index has entries: {}", index.len());
    }
    let index = |w: &WrittenPartition| w.dir.join(segment_file_name(0, SegmentFileKind::Index));
    let confirmed = confirm(&log_path(&same.dir, 0), &index(&same), 0, TARGET).unwrap();
    assert_eq!(
        confirmed,
        Some(Settled {
            size: same.segments[0].size,
            last_offset: Some(119)
        })
    );
    assert_eq!(confirm(&log_path(&same.dir, 0), &index(&same), 0, 3).unwrap(), None);
    assert_eq!(
        confirm(&log_path(&mixed.dir, 0), &index(&mixed), 0, TARGET).unwrap(),
        None
    );
    assert_eq!(confirm(&log_path(&mixed.dir, 0), &index(&mixed), 0, 5).unwrap(), None);
    // Without an index the whole file is walked (read only), with the same answer.
    let missing = dir.path().join("none.index");
    assert_eq!(
        confirm(&log_path(&same.dir, 0), &missing, 0, TARGET).unwrap(),
        confirmed
    );
    // An index entry pointing at no batch boundary is not trusted.
    let bad = dir.path().join("bad.index");
    std::fs::write(&bad, [0, 0, 0, 9, 0, 0, 0, 7]).unwrap();
    assert_eq!(confirm(&log_path(&same.dir, 0), &bad, 0, TARGET).unwrap(), None);
    // A missing `.log` is an error naming it.
    let err = confirm(&dir.path().join("gone.log"), &missing, 0, TARGET).unwrap_err();
    assert!(err.to_string().contains("gone.log"), "{err}");
}

/// `hand_over_segment` on segment 0 of `w` moved into a fresh `building`: what it did, and the moved `.log`.
fn hand_over(w: &WrittenPartition, settled: bool) -> (HandedOver, Vec<u8>, tempfile::TempDir) {
    let building = tempfile::tempdir().unwrap();
    let done = hand_over_segment(
        &w.dir,
        building.path(),
        0,
        TARGET,
        settled,
        false,
        KillSwitch::default(),
    )
    .unwrap();
    let log = std::fs::read(log_path(building.path(), 0)).unwrap();
    (done, log, building)
}

#[test]
fn a_settled_segment_is_moved_byte_for_byte_and_a_mixed_one_restamped_whatever_the_checkpoint_says() {
    let dir = tempfile::tempdir().unwrap();
    let same = partition(dir.path(), 0, &[(TARGET, 40)], 1 << 20);
    let before = std::fs::read(log_path(&same.dir, 0)).unwrap();
    let (done, after, _b) = hand_over(&same, true);
    assert_eq!(
        done,
        HandedOver {
            size: before.len() as u64,
            restamped: 0,
            last_offset: Some(119),
            walked: false
        }
    );
    assert_eq!(after, before, "a skipped segment is byte-identical");

    // A checkpoint that claims epoch 2 for a segment holding epoch 5 too (say, bytes a tail appended): the last
    // batch gives it away, and every batch is restamped.
    let mixed = partition(dir.path(), 1, &[(TARGET, 20), (5, 20)], 1 << 20);
    let before = std::fs::read(log_path(&mixed.dir, 0)).unwrap();
    assert_eq!(epochs_of(&before).iter().filter(|e| **e == 5).count(), 20);
    let (done, after, _b) = hand_over(&mixed, true);
    assert_eq!((done.walked, done.restamped, done.last_offset), (true, 20, Some(119)));
    assert_eq!(epochs_of(&after), vec![TARGET; 40]);
    assert_eq!(after.len(), before.len());

    // Not settled: walked, even when nothing needs a write.
    let again = partition(dir.path(), 2, &[(TARGET, 5)], 1 << 20);
    let (done, _, _b) = hand_over(&again, false);
    assert_eq!((done.walked, done.restamped), (true, 0));
}

/// Partition 0 led in epoch 2 only (every segment settled); partition 1 in epoch 2 then 5 (a segment straddles the
/// change): a rename handover leaves the log dir a copy leaves, restamping exactly the batches of epoch 5.
#[test]
fn a_handover_skipping_settled_segments_leaves_the_same_log_dir_as_a_copy() {
    let write = |root: &Path, p: i32| match p {
        0 => partition(root, p, &[(TARGET, 14)], 600),
        _ => partition(root, p, &[(TARGET, 7), (5, 7)], 600),
    };
    let (reference, copied) = {
        let mut f = fixture_with(write, [0, 0]);
        let report = f.promote().unwrap();
        (target_state(&f.target), report)
    };
    let mut f = fixture_with(write, [0, 0]);
    assert!(f.written.iter().all(|w| w.segments.len() >= 4), "several segments");
    // The mirror's checkpoints say what the segments hold: partition 0's are all settled, partition 1's first is.
    let (zero, one) = (&f.written[0], &f.written[1]);
    let settled = |w: &WrittenPartition, i: usize| {
        let end = w.segments.get(i + 1).map_or(w.log_end_offset, |s| s.base_offset);
        MirrorEpochs::read(&w.dir).single_epoch(w.segments[i].base_offset, end) == Some(TARGET)
    };
    assert!((0..zero.segments.len()).all(|i| settled(zero, i)));
    assert!(settled(one, 0) && !settled(one, one.segments.len() - 1));
    let request = PromoteRequest {
        handover: Handover::Rename,
        ..f.promote_request()
    };
    let report = promote(&request, &mut f.catalog).unwrap();
    assert!(report.partitions.iter().all(|p| p.handed_over));
    assert_eq!(target_state(&f.target), reference);
    let restamped: Vec<u64> = report.partitions.iter().map(|p| p.batches_restamped).collect();
    let by_copy: Vec<u64> = copied.partitions.iter().map(|p| p.batches_restamped).collect();
    assert_eq!(restamped, by_copy);
    assert_eq!(restamped, vec![0, 7]);
}

#[test]
fn the_last_segment_keeps_the_mirrors_indexes_sealed_by_copy_and_by_rename() {
    use segment_format::index::{OffsetIndex, TimeIndex};
    for handover in [Handover::Copy, Handover::Rename] {
        // One segment per partition: the last is the whole partition, with an index entry every 200 bytes (a
        // rebuild would use Kafka's default 4096 and keep one or two).
        let write = |root: &Path, p: i32| partition(root, p, &[(TARGET, 30)], 1 << 20);
        let mut f = fixture_with(write, [0, 0]);
        let mirror_dir = f.written[0].dir.clone();
        let read = |dir: &Path, kind| std::fs::read(dir.join(segment_file_name(0, kind))).unwrap();
        let kept = OffsetIndex::parse(&read(&mirror_dir, SegmentFileKind::Index)).entries;
        let kept_times = TimeIndex::parse(&read(&mirror_dir, SegmentFileKind::TimeIndex)).entries;
        assert!(kept.len() > 10, "{handover:?}: {} entries", kept.len());
        let request = PromoteRequest {
            handover,
            ..f.promote_request()
        };
        let report = promote(&request, &mut f.catalog).unwrap();
        assert_eq!(report.partitions.len(), 2);
        let promoted = f.target.join(mirror_dir.file_name().unwrap());
        assert_eq!(
            OffsetIndex::parse(&read(&promoted, SegmentFileKind::Index)).entries,
            kept,
            "{handover:?}"
        );
        let times = TimeIndex::parse(&read(&promoted, SegmentFileKind::TimeIndex)).entries;
        assert_eq!(times[..kept_times.len()], kept_times[..], "{handover:?}");
        // The segment is no longer active: its last time entry is the max timestamp (the last batch's).
        assert_eq!(
            i64::from(times.last().unwrap().relative_offset),
            f.written[0].log_end_offset - 1,
            "{handover:?}"
        );
    }
}
