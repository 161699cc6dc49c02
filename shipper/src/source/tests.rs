//! The source API as a tail driver uses it: discover once, read a partition,
//! bound its active segment again and again while the broker appends, see a
//! roll in a fresh listing, and get a typed outcome (never a panic) for files
//! that vanish or are swapped between two looks.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::VerifyOptions;
use segment_format::writer::{
    write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig, WrittenPartition,
};

use super::*;

/// `index.interval.bytes` of the partitions written here and of rebuilt indexes.
const INDEX_INTERVAL: u64 = 512;

fn options() -> PrepareOptions {
    PrepareOptions {
        verify: VerifyOptions::default(),
        index_interval_bytes: INDEX_INTERVAL,
        staging_dir: None,
    }
}

fn batch(i: usize) -> BatchBuilder {
    BatchBuilder::new(0).record(RecordSpec::new(0, 1_700_000_000_000 + i as i64).with_value(vec![b'v'; 200]))
}

/// A running broker's partition `topic-0` of `batches` one-record batches in
/// one active segment, in a log dir with its `meta.properties`.
fn running_partition(log_dir: &Path, topic: &str, batches: usize) -> WrittenPartition {
    let config = WriterConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: INDEX_INTERVAL,
        running: true,
        fsync: false,
        topic_id: Some(Uuid([5; 16])),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, topic, 0, 0, config).unwrap();
    for i in 0..batches {
        w.append(batch(i)).unwrap();
    }
    w.close().unwrap()
}

fn finish_log_dir(log_dir: &Path, partitions: &[WrittenPartition]) {
    let identity = LogDirIdentity {
        cluster_id: "source-cluster".into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    write_log_dir_files(log_dir, &identity, partitions, LogDirState::Running).unwrap();
}

/// Append the batch at `offset` (and, if `partial`, half of the next one, as a
/// broker in the middle of a write leaves it); the complete batch's length.
fn append(log: &Path, offset: i64, partial: bool) -> u64 {
    let mut whole = batch(offset as usize);
    whole.base_offset = offset;
    let whole = whole.build();
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    f.write_all(&whole).unwrap();
    if partial {
        let mut next = batch(0);
        next.base_offset = offset + 1;
        let next = next.build();
        f.write_all(&next[..next.len() / 2]).unwrap();
    }
    whole.len() as u64
}

fn view_of(dir: &Path) -> PartitionView {
    match read_partition(dir).unwrap() {
        PartitionRead::View(v) => v,
        PartitionRead::Refused(findings) => panic!("refused: {findings:?}"),
    }
}

fn ready(outcome: Outcome) -> Box<Prepared> {
    match outcome {
        Outcome::Ready(p) => p,
        other => panic!("not ready: {other:?}"),
    }
}

fn log_of(view: &SegmentView) -> PathBuf {
    view.files.log.clone()
}

#[test]
fn discovery_selects_by_pattern_and_reads_the_partition() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let orders = running_partition(&log_dir, "orders", 3);
    let audit = running_partition(&log_dir, "audit", 2);
    finish_log_dir(&log_dir, &[orders.clone(), audit]);

    let found = discover(std::slice::from_ref(&log_dir), &TopicFilter::new("ord.*").unwrap());
    assert_eq!(found.not_selected, 1);
    assert!(found.failed.is_empty() && found.log_dir_errors.is_empty(), "{found:?}");
    let [source] = found.sources.as_slice() else {
        panic!("{found:?}")
    };
    assert_eq!((source.topic.as_str(), source.partition), ("orders", 0));
    assert_eq!(source.cluster_id, "source-cluster");
    assert_eq!(source.topic_id, orders.topic_id);

    let view = view_of(&source.dir);
    assert_eq!(view.segments.len(), 1);
    let active = view.active().unwrap();
    assert!(!active.is_sealed());
    assert_eq!(view.log_start_offset(source.log_start_checkpoint), 0);
    assert_eq!(view.epochs, orders.epochs);
}

#[test]
fn discovery_of_many_partitions_keeps_partition_order_and_every_outcome() {
    // More partitions than discovery opens at once, with every kind of outcome among them: shipped, skipped for
    // want of a topic id, failed on a corrupt `partition.metadata`, failed for being in two log dirs.
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("a"), dir.path().join("b"));
    let topics: Vec<String> = (0..40).map(|i| format!("t{i:02}")).collect();
    let mut written = Vec::new();
    for topic in &topics {
        written.push(running_partition(&first, topic, 1));
    }
    finish_log_dir(&first, &written);
    let twice = running_partition(&second, "t07", 1);
    finish_log_dir(&second, &[twice]);
    std::fs::remove_file(first.join("t03-0/partition.metadata")).unwrap();
    std::fs::write(
        first.join("t11-0/partition.metadata"),
        b"version: 9\ntopic_id: nonsense\n",
    )
    .unwrap();

    let found = discover(&[first.clone(), second.clone()], &TopicFilter::all());
    let shipped: Vec<&str> = found.sources.iter().map(|s| s.topic.as_str()).collect();
    let expected: Vec<&str> = topics
        .iter()
        .map(String::as_str)
        .filter(|t| !["t03", "t07", "t11"].contains(t))
        .collect();
    assert_eq!(shipped, expected);
    assert!(found
        .sources
        .iter()
        .all(|s| s.topic_id == Uuid([5; 16]) && s.segments == 1 && s.log_bytes > 0));
    let skipped: Vec<(&str, &SkipReason)> = found.skipped.iter().map(|s| (s.topic.as_str(), &s.reason)).collect();
    assert_eq!(skipped, [("t03", &SkipReason::NoTopicId)]);
    let failed: Vec<&str> = found.failed.iter().map(|f| f.topic.as_str()).collect();
    assert_eq!(failed, ["t07", "t11"], "{:?}", found.failed);
    assert!(matches!(&found.failed[0].problem, Unusable::Source(m) if m.contains("more than one log dir")));
    assert!(matches!(&found.failed[1].problem, Unusable::Corrupt(_)));
}

#[test]
fn the_active_prefix_grows_between_two_bounds_and_never_includes_a_partial_batch() {
    let dir = tempfile::tempdir().unwrap();
    let w = running_partition(dir.path(), "orders", 3);
    let view = view_of(&w.dir);
    let active = view.active().unwrap();
    let log = log_of(active);

    let first = ready(bound_active(&active.files, active.snapshot.as_deref(), &options()).unwrap());
    assert!(!first.sealed);
    assert_eq!((first.range.base(), first.range.next()), (0, 3));
    assert_eq!(first.log_len(), std::fs::metadata(&log).unwrap().len());
    assert_eq!(first.excluded_tail, 0);

    // The broker appends one batch and is halfway through the next.
    let added = append(&log, 3, true);
    let second = ready(bound_active(&active.files, active.snapshot.as_deref(), &options()).unwrap());
    assert_eq!((second.range.base(), second.range.next()), (0, 4));
    assert_eq!(second.log_len(), first.log_len() + added);
    assert!(second.excluded_tail > 0, "the partial batch is left out");
    assert_eq!(second.stats.records, 4);
    // The guard is the CRC-32C of exactly the bounded prefix.
    let bytes = std::fs::read(&log).unwrap();
    let prefix = &bytes[..usize::try_from(second.log_len()).unwrap()];
    assert_eq!(second.guard, SourceGuard::LogCrc32c(crc32c::crc32c(prefix)));
    // Indexes are rebuilt for the prefix (the broker's are preallocated), in memory: their path names no file, so
    // nothing can read the broker's preallocated index in their place.
    for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        let f = second.files.iter().find(|f| f.kind == kind).unwrap();
        let bytes = f.rebuilt.as_ref().expect("rebuilt in memory");
        assert_eq!(bytes.len() as u64, f.len);
        assert!(!f.path.exists(), "{}", f.path.display());
    }
    // The first bound's rebuilt files are its own: the shorter prefix's indexes.
    let index_of = |p: &Prepared| p.files.iter().find(|f| f.kind == SegmentFileKind::Index).unwrap().len;
    assert!(index_of(&first) <= index_of(&second));
    assert!(first.files.iter().all(|f| f.rebuilt.is_some() != f.path.exists()));
}

/// The active segment is read once: the indexes and the prefix CRC-32C built from the check's own scan are exactly
/// those a separate rebuild scan of the prefix (the path before) makes, and a batch with a bad CRC is still refused,
/// naming the file and the CRC's position.
#[test]
fn the_active_segment_is_checked_and_indexed_in_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let w = running_partition(dir.path(), "orders", 300);
    let view = view_of(&w.dir);
    let active = view.active().unwrap();
    let log = log_of(active);
    append(&log, 300, true);
    let file_len = std::fs::metadata(&log).unwrap().len();

    let prepared = ready(bound_active(&active.files, None, &options()).unwrap());
    let prefix = prepared.log_len();
    assert!(prefix < file_len, "the partial batch is left out");
    assert_eq!(prepared.log_bytes_scanned, file_len, "one pass over the .log");
    let separate = rebuild::rebuild(&log, 0, prefix, INDEX_INTERVAL).unwrap().unwrap();
    assert_eq!((separate.batches, separate.end), (301, prefix));
    assert_eq!(prepared.guard, SourceGuard::LogCrc32c(separate.crc32c));
    let staged = |kind| {
        prepared
            .files
            .iter()
            .find(|f| f.kind == kind)
            .unwrap()
            .rebuilt
            .clone()
            .unwrap()
            .to_vec()
    };
    assert_eq!(staged(SegmentFileKind::Index), separate.offset_index);
    assert_eq!(staged(SegmentFileKind::TimeIndex), separate.time_index);
    assert!(
        separate.offset_index.len() > 8 * 10,
        "entries every {INDEX_INTERVAL} bytes"
    );

    // One value byte of batch 150 flipped: refused, the finding names the file and the batch's CRC field.
    let mut bytes = std::fs::read(&log).unwrap();
    let frames: Vec<_> = segment_format::log::scan_frames(&bytes, 0)
        .map_while(Result::ok)
        .map(|f| (f.info.position, f.info.size))
        .collect();
    let (position, size) = frames[150];
    bytes[(position + size - 3) as usize] ^= 0x20;
    std::fs::write(&log, &bytes).unwrap();
    let Outcome::Refused(findings) = bound_active(&active.files, None, &options()).unwrap() else {
        panic!("a corrupt batch was not refused")
    };
    let crc = findings
        .iter()
        .find(|f| matches!(f.defect, segment_format::Defect::CrcMismatch { .. }))
        .unwrap_or_else(|| panic!("{findings:?}"));
    assert_eq!(crc.path, log);
    assert_eq!(crc.position, Some(position + segment_format::batch::CRC_OFFSET as u64));
    assert_eq!(crc.offset, Some(150));
}

#[test]
fn a_roll_between_two_reads_seals_the_segment_that_was_active() {
    let dir = tempfile::tempdir().unwrap();
    let w = running_partition(dir.path(), "orders", 4);
    let before = view_of(&w.dir);
    let was_active = before.active().unwrap().clone();
    let first = ready(bound_active(&was_active.files, None, &options()).unwrap());
    assert_eq!(first.range.next(), 4);

    // The broker rolls: it trims the old segment's indexes (to what a clean
    // roll leaves, which is what the rebuild produces) and opens `4.log`.
    let log = log_of(&was_active);
    let len = std::fs::metadata(&log).unwrap().len();
    let rebuilt = rebuild::rebuild(&log, 0, len, INDEX_INTERVAL).unwrap().unwrap();
    std::fs::write(was_active.files.index.as_ref().unwrap(), &rebuilt.offset_index).unwrap();
    std::fs::write(was_active.files.time_index.as_ref().unwrap(), &rebuilt.time_index).unwrap();
    let new_log = w.dir.join(segment_file_name(4, SegmentFileKind::Log));
    std::fs::File::create(&new_log).unwrap();
    append(&new_log, 4, false);

    let after = view_of(&w.dir);
    assert_eq!(after.segments.len(), 2);
    let sealed = &after.segments[0];
    assert_eq!(sealed.base_offset(), 0);
    assert_eq!(sealed.next_base, Some(4));
    let whole = ready(bound_sealed(&sealed.files, 4, sealed.snapshot.as_deref(), &options()).unwrap());
    assert!(whole.sealed);
    assert_eq!((whole.range.base(), whole.range.next()), (0, 4));
    assert_eq!(
        whole.log_len(),
        first.log_len(),
        "the prefix shipped while active was the whole segment"
    );
    assert!(matches!(whole.guard, SourceGuard::Stamps(_)));

    let active = after.active().unwrap();
    assert_eq!(active.base_offset(), 4);
    let tail = ready(bound_active(&active.files, None, &options()).unwrap());
    assert_eq!((tail.range.base(), tail.range.next()), (4, 5));
}

#[test]
fn files_that_vanish_or_are_swapped_are_a_typed_change_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let w = running_partition(dir.path(), "orders", 3);
    let view = view_of(&w.dir);
    let active = view.active().unwrap();
    let log = log_of(active);

    // A sealed-looking bound, then the file is swapped in under the same name
    // (as compaction does): the stamps taken before no longer match.
    let len = std::fs::metadata(&log).unwrap().len();
    let rebuilt = rebuild::rebuild(&log, 0, len, INDEX_INTERVAL).unwrap().unwrap();
    std::fs::write(active.files.index.as_ref().unwrap(), &rebuilt.offset_index).unwrap();
    std::fs::write(active.files.time_index.as_ref().unwrap(), &rebuilt.time_index).unwrap();
    let sealed = ready(bound_sealed(&active.files, 3, None, &options()).unwrap());
    let SourceGuard::Stamps(before) = &sealed.guard else {
        panic!("{:?}", sealed.guard)
    };
    assert_eq!(&stamps(&active.files, None), before, "nothing changed yet");
    let swapped = w.dir.join("swap.tmp");
    std::fs::copy(&log, &swapped).unwrap();
    std::fs::rename(&swapped, &log).unwrap();
    let after = stamps(&active.files, None);
    assert_ne!(&after, before, "a rename over the file is a change");
    assert!(!before.log_shrank_or_replaced(&before.clone()));
    assert!(before.log_shrank_or_replaced(&after), "another inode");

    // The `.log` vanishes between the listing and the bound (retention, or a
    // follower's truncation deleting the segment): a change naming the file.
    std::fs::remove_file(&log).unwrap();
    for outcome in [
        bound_active(&active.files, None, &options()).unwrap(),
        bound_sealed(&active.files, 3, None, &options()).unwrap(),
    ] {
        match outcome {
            Outcome::Changed(reason) => assert!(reason.contains(log.to_str().unwrap()), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(before.log_shrank_or_replaced(&stamps(&active.files, None)), "vanished");
    // The partition, listed again, has no segment left.
    assert!(view_of(&w.dir).segments.is_empty());
}

#[test]
fn a_partition_directory_that_vanished_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("orders-0");
    let e = read_partition(&gone).unwrap_err();
    assert!(e.to_string().contains(gone.to_str().unwrap()), "{e}");
}
