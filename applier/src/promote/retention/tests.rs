//! Unit tests of the target retention's prediction of what it would delete.

use super::*;

fn seg(base: i64, end: i64, ts: Option<i64>, bytes: u64) -> SegmentAge {
    SegmentAge {
        base_offset: base,
        end_offset: end,
        max_timestamp: ts,
        bytes,
    }
}

fn policy(ms: Option<i64>, bytes: Option<u64>, deletes: bool) -> TopicRetention {
    TopicRetention {
        retention_ms: ms,
        retention_bytes: bytes,
        deletes,
        source: String::new(),
    }
}

const NOW: i64 = 1_000_000;

#[test]
fn time_deletes_the_expired_prefix_only() {
    let segments = [
        seg(0, 10, Some(1000), 100),
        seg(10, 20, Some(NOW - 5000), 100),
        seg(20, 30, Some(2000), 100), // older again, but behind a kept segment: stays
        seg(30, 35, Some(NOW), 50),
    ];
    let doomed = predict(&policy(Some(10_000), None, true), &segments, NOW);
    assert_eq!(doomed.len(), 1);
    assert_eq!(
        (doomed[0].base_offset, doomed[0].reason),
        (0, DeleteReason::RetentionMs)
    );
    // Exactly at the limit stays (Kafka's test is strictly greater).
    assert!(predict(&policy(Some(NOW - 1000), None, true), &segments, NOW).is_empty());
    // Unlimited and compact-only keep everything.
    assert!(predict(&policy(None, None, true), &segments, NOW).is_empty());
    assert!(predict(&policy(Some(1), Some(0), false), &segments, NOW).is_empty());
}

#[test]
fn everything_expired_goes_including_the_active_segment_but_not_an_empty_last_one() {
    let all = [seg(0, 10, Some(1), 100), seg(10, 20, Some(2), 100)];
    assert_eq!(predict(&policy(Some(10), None, true), &all, NOW).len(), 2);
    let empty_last = [seg(0, 10, Some(1), 100), seg(10, 10, None, 0)];
    assert_eq!(predict(&policy(Some(10), None, true), &empty_last, NOW).len(), 1);
    // No timestamp: dated by mtime (the copy), so it and everything after it stay.
    let undated = [seg(0, 10, None, 100), seg(10, 20, Some(1), 100)];
    assert!(predict(&policy(Some(10), None, true), &undated, NOW).is_empty());
}

#[test]
fn size_deletes_while_the_log_stays_at_or_above_the_limit() {
    let segments = [
        seg(0, 10, Some(NOW), 100),
        seg(10, 20, Some(NOW), 100),
        seg(20, 30, Some(NOW), 100),
    ];
    let doomed = predict(&policy(None, Some(150), true), &segments, NOW);
    assert_eq!(doomed.len(), 1, "{doomed:?}");
    assert_eq!(doomed[0].reason, DeleteReason::RetentionBytes);
    assert_eq!(predict(&policy(None, Some(100), true), &segments, NOW).len(), 2);
    assert!(predict(&policy(None, Some(301), true), &segments, NOW).is_empty());
    // The longer prefix of the two passes wins.
    let mixed = [
        seg(0, 10, Some(1), 100),
        seg(10, 20, Some(2), 100),
        seg(20, 30, Some(NOW), 100),
    ];
    let doomed = predict(&policy(Some(10), Some(150), true), &mixed, NOW);
    let reasons: Vec<_> = doomed.iter().map(|d| d.reason).collect();
    assert_eq!(reasons, [DeleteReason::RetentionBytes, DeleteReason::RetentionMs]);
}

#[test]
fn the_newest_timestamp_of_a_segment_comes_from_every_frame_that_has_one() {
    use segment_format::batch::TimestampType;
    use segment_format::legacy::encode_message;
    use segment_format::record::{BatchBuilder, RecordSpec};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let frames = [
        encode_message(0, 0, 0, TimestampType::CreateTime, None, Some(b"v0")),
        encode_message(1, 1, 9_000, TimestampType::CreateTime, None, Some(b"v1")),
        BatchBuilder::new(2)
            .record(RecordSpec::new(0, 5_000).with_value("a"))
            .record(RecordSpec::new(1, 7_000).with_value("b"))
            .build(),
    ];
    std::fs::write(&path, frames.concat()).unwrap();
    assert_eq!(
        max_timestamp(&path, 0).unwrap(),
        (Some(9_000), frames.concat().len() as u64)
    );
    // Magic 0 only: no timestamp at all.
    std::fs::write(&path, &frames[0]).unwrap();
    assert_eq!(max_timestamp(&path, 0).unwrap().0, None);
    // A frame that does not fit the file is an error naming it.
    let mut cut = frames.concat();
    cut.truncate(cut.len() - 1);
    std::fs::write(&path, &cut).unwrap();
    let err = max_timestamp(&path, 0).unwrap_err().to_string();
    assert!(
        err.contains("00000000000000000000.log") && err.contains("does not fit"),
        "{err}"
    );
}

#[test]
fn metadata_dir_follows_the_broker_config() {
    let log_dir = Path::new("/data/kafka");
    let mut props = BTreeMap::new();
    assert_eq!(metadata_dir(log_dir, &props), log_dir.join(METADATA_DIR));
    props.insert("log.dirs".to_string(), " /a , /b".to_string());
    assert_eq!(metadata_dir(log_dir, &props), Path::new("/a").join(METADATA_DIR));
    props.insert("metadata.log.dir".to_string(), "/meta".to_string());
    assert_eq!(metadata_dir(log_dir, &props), Path::new("/meta").join(METADATA_DIR));
}

#[test]
fn a_segments_newest_timestamp_comes_from_its_indexes_and_the_batches_after_the_time_index_last_entry() {
    use segment_format::record::{BatchBuilder, RecordSpec};
    use segment_format::writer::{PartitionWriter, WriterConfig};
    const T0: i64 = 1_700_000_000_000;
    // (timestamps per batch, left running): the newest in the last batch of a live segment (no roll entry), the
    // newest early in a closed one, growing timestamps in a live one.
    let mut newest_last: Vec<i64> = (0..40).map(|i| T0 + i).collect();
    newest_last[39] = T0 + 90_000;
    let mut newest_early: Vec<i64> = (0..40).map(|i| T0 + i).collect();
    newest_early[2] = T0 + 50_000;
    let growing: Vec<i64> = (0..40).map(|i| T0 + i * 7).collect();
    for (timestamps, running) in [(newest_last, true), (newest_early, false), (growing, true)] {
        let root = tempfile::tempdir().unwrap();
        let config = WriterConfig {
            index_interval_bytes: 300,
            running,
            fsync: false,
            ..WriterConfig::default()
        };
        let mut w = PartitionWriter::create(root.path(), "ages", 0, 0, config).unwrap();
        w.become_leader(0);
        for &ts in &timestamps {
            let base = w.next_offset();
            w.append(BatchBuilder::new(base).record(RecordSpec::new(0, ts).with_value(vec![b'v'; 150])))
                .unwrap();
        }
        let w = w.close().unwrap();
        let path = w.dir.join(segment_file_name(0, SegmentFileKind::Log));
        let walked = max_timestamp(&path, 0).unwrap();
        assert_eq!(walked.0, timestamps.iter().max().copied());
        let indexed = indexed_max_timestamp(&w.dir, 0, &path).unwrap();
        assert_eq!(indexed, Some(walked), "running {running}");
        assert_eq!(
            segment_ages(&w.dir, &[0], w.log_end_offset).unwrap()[0].max_timestamp,
            walked.0
        );

        // The indexed reading does not read the batches before the time index's last entry: a broken first frame
        // fails the walk, not it.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(max_timestamp(&path, 0).is_err());
        assert_eq!(
            indexed_max_timestamp(&w.dir, 0, &path).unwrap(),
            Some(walked),
            "running {running}"
        );
    }

    // An offset index that does not point at its batches, or no time index: the indexes cannot say.
    let root = tempfile::tempdir().unwrap();
    let config = WriterConfig {
        index_interval_bytes: 300,
        fsync: false,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root.path(), "ages", 0, 0, config).unwrap();
    w.become_leader(0);
    for i in 0..40 {
        let base = w.next_offset();
        w.append(BatchBuilder::new(base).record(RecordSpec::new(0, T0 + i).with_value(vec![b'v'; 150])))
            .unwrap();
    }
    let w = w.close().unwrap();
    let path = w.dir.join(segment_file_name(0, SegmentFileKind::Log));
    let index = w.dir.join(segment_file_name(0, SegmentFileKind::Index));
    let kept = std::fs::read(&index).unwrap();
    let mut entries = OffsetIndex::parse(&kept).entries;
    assert!(entries.len() > 5);
    for e in &mut entries {
        e.position += 1;
    }
    std::fs::write(&index, segment_format::index::serialize_offset_index(&entries)).unwrap();
    assert_eq!(indexed_max_timestamp(&w.dir, 0, &path).unwrap(), None);
    std::fs::write(&index, &kept).unwrap();
    assert!(indexed_max_timestamp(&w.dir, 0, &path).unwrap().is_some());
    let time_index = w.dir.join(segment_file_name(0, SegmentFileKind::TimeIndex));
    let mut torn = std::fs::read(&time_index).unwrap();
    torn.truncate(torn.len() - 3);
    std::fs::write(&time_index, torn).unwrap();
    assert_eq!(
        indexed_max_timestamp(&w.dir, 0, &path).unwrap(),
        None,
        "a torn time index"
    );
    std::fs::remove_file(w.dir.join(segment_file_name(0, SegmentFileKind::TimeIndex))).unwrap();
    assert_eq!(indexed_max_timestamp(&w.dir, 0, &path).unwrap(), None);
    assert_eq!(
        segment_ages(&w.dir, &[0], w.log_end_offset).unwrap()[0].max_timestamp,
        Some(T0 + 39)
    );
}
