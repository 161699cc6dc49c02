//! The last segment's kept indexes sealed as the broker's roll does (`txn_cut::seal_kept_indexes`): what the check
//! of a rolled segment demands, what a full rebuild gives, and a fall back when the kept files cannot be trusted.

use std::path::{Path, PathBuf};

use segment_format::dir::{segment_file_name, SegmentFileKind, SegmentFiles};
use segment_format::index::{OffsetIndex, TimeIndex};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::{check_segment, TailPolicy, VerifyOptions};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};

use super::txn_cut::{rebuild_indexes, seal_kept_indexes};

const T0: i64 = 1_700_000_000_000;

/// One segment of `timestamps.len()` batches (one per timestamp, two records of 100 bytes), an index entry every
/// 300 bytes; `running`: left as a live broker's active segment (preallocated indexes, no roll entry).
fn segment(root: &Path, timestamps: &[i64], running: bool) -> WrittenPartition {
    let config = WriterConfig {
        index_interval_bytes: 300,
        running,
        fsync: false,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, "seal", 0, 0, config).unwrap();
    w.become_leader(0);
    for &ts in timestamps {
        let base = w.next_offset();
        let mut b = BatchBuilder::new(base);
        for i in 0..2 {
            b = b.record(RecordSpec::new(i, ts).with_value(vec![b'v'; 100]));
        }
        w.append(b).unwrap();
    }
    let written = w.close().unwrap();
    assert_eq!(written.segments.len(), 1);
    written
}

fn path(dir: &Path, kind: SegmentFileKind) -> PathBuf {
    dir.join(segment_file_name(0, kind))
}

fn read(dir: &Path, kind: SegmentFileKind) -> Vec<u8> {
    std::fs::read(path(dir, kind)).unwrap()
}

/// The segment checked as a rolled one: trimmed indexes, every entry right, the last time entry the max timestamp.
fn check_as_rolled(dir: &Path) {
    let files = SegmentFiles {
        base_offset: 0,
        log: path(dir, SegmentFileKind::Log),
        index: Some(path(dir, SegmentFileKind::Index)),
        time_index: Some(path(dir, SegmentFileKind::TimeIndex)),
        txn_index: None,
    };
    let check = check_segment(&files, None, TailPolicy::Sealed, &VerifyOptions::default()).unwrap();
    assert!(check.is_sound(), "{:?}", check.errors().collect::<Vec<_>>());
}

/// A copy of the segment's dir, indexes rebuilt from a walk (what promotion did before).
fn rebuilt(dir: &Path, into: &Path) -> PathBuf {
    let copy = into.join("rebuilt");
    std::fs::create_dir(&copy).unwrap();
    for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        std::fs::copy(path(dir, kind), path(&copy, kind)).unwrap();
    }
    rebuild_indexes(&copy, 0).unwrap();
    copy
}

#[test]
fn a_live_segments_indexes_are_trimmed_and_get_the_rolls_entry_from_the_batches_after_the_last_index_entry() {
    let root = tempfile::tempdir().unwrap();
    // Growing timestamps with a step back, and the largest in the very last batch (after the last index entry).
    let mut timestamps: Vec<i64> = (0..40).map(|i| T0 + i * 10).collect();
    timestamps[20] = T0;
    timestamps[39] = T0 + 10_000;
    let w = segment(root.path(), &timestamps, true);
    let kept = OffsetIndex::parse(&read(&w.dir, SegmentFileKind::Index));
    assert!(kept.layout.zero_tail > 0, "a live segment's index is preallocated");
    assert!(kept.entries.len() >= 10, "{} entries", kept.entries.len());
    let kept_times = TimeIndex::parse(&read(&w.dir, SegmentFileKind::TimeIndex));
    assert!(
        kept_times.entries.last().unwrap().timestamp < T0 + 10_000,
        "no roll entry yet"
    );
    let reference = rebuilt(&w.dir, root.path());

    assert!(seal_kept_indexes(&w.dir, 0, None).unwrap());

    // The offset index: the kept entries (the source's interval), trimmed.
    let index = read(&w.dir, SegmentFileKind::Index);
    assert_eq!(OffsetIndex::parse(&index).entries, kept.entries);
    assert_eq!(index.len(), kept.entries.len() * 8);
    // The time index: the kept entries and the roll's, which is the rebuild's last entry (the last batch's).
    let times = TimeIndex::parse(&read(&w.dir, SegmentFileKind::TimeIndex)).entries;
    assert_eq!(times[..times.len() - 1], kept_times.entries[..]);
    let rebuilt_times = TimeIndex::parse(&read(&reference, SegmentFileKind::TimeIndex)).entries;
    assert_eq!(times.last(), rebuilt_times.last());
    assert_eq!(times.last().unwrap().timestamp, T0 + 10_000);
    assert_eq!(i64::from(times.last().unwrap().relative_offset), w.log_end_offset - 1);
    check_as_rolled(&w.dir);
    check_as_rolled(&reference);

    // Sealing again changes nothing (a rerun after a crash finds the sealed files).
    let (index, time) = (
        read(&w.dir, SegmentFileKind::Index),
        read(&w.dir, SegmentFileKind::TimeIndex),
    );
    assert!(seal_kept_indexes(&w.dir, 0, None).unwrap());
    assert_eq!(read(&w.dir, SegmentFileKind::Index), index);
    assert_eq!(read(&w.dir, SegmentFileKind::TimeIndex), time);
}

#[test]
fn a_max_timestamp_early_in_the_segment_is_found_from_the_time_index_and_read_from_its_batch_on() {
    let root = tempfile::tempdir().unwrap();
    // The largest timestamp in batch 3; later batches are older. The time index's last entry names batch 3, so the
    // scan starts at the offset index's entry at or below it and must not append anything.
    let mut timestamps: Vec<i64> = (0..40).map(|i| T0 + i).collect();
    timestamps[3] = T0 + 50_000;
    let w = segment(root.path(), &timestamps, true);
    let kept_times = TimeIndex::parse(&read(&w.dir, SegmentFileKind::TimeIndex));
    assert_eq!(kept_times.entries.last().unwrap().timestamp, T0 + 50_000);

    assert!(seal_kept_indexes(&w.dir, 0, None).unwrap());
    assert_eq!(
        TimeIndex::parse(&read(&w.dir, SegmentFileKind::TimeIndex)).entries,
        kept_times.entries,
        "no entry above the max"
    );
    check_as_rolled(&w.dir);
    let reference = rebuilt(&w.dir, root.path());
    assert_eq!(
        TimeIndex::parse(&read(&w.dir, SegmentFileKind::TimeIndex))
            .entries
            .last(),
        TimeIndex::parse(&read(&reference, SegmentFileKind::TimeIndex))
            .entries
            .last()
    );
}

#[test]
fn a_rolled_segment_is_left_byte_for_byte() {
    let root = tempfile::tempdir().unwrap();
    let timestamps: Vec<i64> = (0..30).map(|i| T0 + i).collect();
    let w = segment(root.path(), &timestamps, false);
    let (index, time) = (
        read(&w.dir, SegmentFileKind::Index),
        read(&w.dir, SegmentFileKind::TimeIndex),
    );
    assert!(seal_kept_indexes(&w.dir, 0, None).unwrap());
    assert_eq!(read(&w.dir, SegmentFileKind::Index), index);
    assert_eq!(read(&w.dir, SegmentFileKind::TimeIndex), time);
    check_as_rolled(&w.dir);
}

#[test]
fn kept_indexes_that_do_not_describe_the_log_are_not_used_and_not_touched() {
    let root = tempfile::tempdir().unwrap();
    let timestamps: Vec<i64> = (0..30).map(|i| T0 + i).collect();
    let w = segment(root.path(), &timestamps, true);
    let log_len = std::fs::metadata(path(&w.dir, SegmentFileKind::Log)).unwrap().len();
    let kept = OffsetIndex::parse(&read(&w.dir, SegmentFileKind::Index)).entries;
    let last = *kept.last().unwrap();
    let rewrite_last = |position: i32| {
        let mut entries = kept.clone();
        entries.last_mut().unwrap().position = position;
        std::fs::write(
            path(&w.dir, SegmentFileKind::Index),
            segment_format::index::serialize_offset_index(&entries),
        )
        .unwrap();
    };
    type Breakage<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let cases: [Breakage<'_>; 4] = [
        ("an entry past the end", Box::new(|| rewrite_last(log_len as i32 + 10))),
        ("an entry inside a batch", Box::new(|| rewrite_last(last.position + 1))),
        (
            "an entry at another batch",
            Box::new(|| rewrite_last(kept[kept.len() - 2].position)),
        ),
        (
            "a partial slot",
            Box::new(|| {
                let mut bytes = segment_format::index::serialize_offset_index(&kept);
                bytes.push(0);
                std::fs::write(path(&w.dir, SegmentFileKind::Index), bytes).unwrap();
            }),
        ),
    ];
    for (what, break_it) in cases {
        break_it();
        let (index, time) = (
            read(&w.dir, SegmentFileKind::Index),
            read(&w.dir, SegmentFileKind::TimeIndex),
        );
        assert!(!seal_kept_indexes(&w.dir, 0, None).unwrap(), "{what}: refused");
        assert_eq!(read(&w.dir, SegmentFileKind::Index), index, "{what}: untouched");
        assert_eq!(read(&w.dir, SegmentFileKind::TimeIndex), time, "{what}: untouched");
    }
    std::fs::remove_file(path(&w.dir, SegmentFileKind::TimeIndex)).unwrap();
    assert!(!seal_kept_indexes(&w.dir, 0, None).unwrap(), "a missing time index");
}
