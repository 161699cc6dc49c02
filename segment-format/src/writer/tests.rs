//! Tests of the writer against independent readers: the log scan, the deep
//! record walk, the index builders and the transaction tracker run over what was
//! written must give back what went in.

use std::collections::HashMap;
use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::sample::{
    write_bulk, write_sample, BulkOptions, ExpectedHeader, ExpectedRecord, Isolation, SampleOptions, TxnStatus,
    RETAINED_BASE_OFFSET, SHAPES,
};
use super::*;
use crate::batch::{parse_header, BatchInfo, Compression, ControlType, TimestampType};
use crate::checkpoint::{EpochEntry, LeaderEpochCheckpoint};
use crate::control::{decode_control_batch, EndTxnMarker};
use crate::dir::{segment_file_name, SegmentFileKind};
use crate::error::{Defect, Error};
use crate::index::{OffsetIndexBuilder, TimeIndexBuilder, DEFAULT_INDEX_INTERVAL_BYTES};
use crate::legacy;
use crate::log::LogFile;
use crate::partition_metadata::PartitionMetadata;
use crate::record::{for_each_record, BatchBuilder, DeepLimits, RecordSpec};
use crate::snapshot::{ProducerSnapshot, ProducerSnapshotEntry};
use crate::txn_index::{self, AbortedTxn, ClosedTransaction, TxnTracker};

fn quick() -> WriterConfig {
    WriterConfig {
        fsync: false,
        ..WriterConfig::default()
    }
}

/// One scanned segment.
#[derive(Debug)]
struct Scanned {
    base_offset: i64,
    size: u64,
    infos: Vec<BatchInfo>,
}

fn file(dir: &Path, base: i64, kind: SegmentFileKind) -> PathBuf {
    dir.join(segment_file_name(base, kind))
}

/// Base offsets of the `.log` files, in name order (= numeric order).
fn log_bases(dir: &Path) -> Vec<i64> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| n.trim_end_matches(".log").parse().unwrap())
        .collect()
}

fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    let mut v: Vec<i64> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".snapshot").map(|s| s.parse().unwrap()))
        .collect();
    v.sort();
    v
}

/// Read a partition back with the scan and the deep walks, resolving
/// transactions from the markers found.
fn read_partition(dir: &Path) -> (Vec<Scanned>, Vec<ExpectedRecord>) {
    let limits = DeepLimits::default();
    let mut segments = Vec::new();
    let mut records: Vec<ExpectedRecord> = Vec::new();
    let mut pending: HashMap<i64, Vec<usize>> = HashMap::new();
    for base in log_bases(dir) {
        let mut log = LogFile::open(file(dir, base, SegmentFileKind::Log)).unwrap();
        let mut infos = Vec::new();
        let summary = log
            .scan(|f| {
                assert!(f.crc_matches(), "CRC at {}", f.info.position);
                infos.push(f.info);
                if f.info.magic < 2 {
                    legacy::for_each_message(f.bytes, &limits, |m| {
                        records.push(ExpectedRecord {
                            offset: m.offset,
                            timestamp: m.timestamp,
                            timestamp_type: m.timestamp_type,
                            key: m.key.map(<[u8]>::to_vec),
                            value: m.value.map(<[u8]>::to_vec),
                            headers: Vec::new(),
                            producer_id: -1,
                            transaction: TxnStatus::None,
                            magic: m.magic,
                        });
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                    return ControlFlow::Continue(());
                }
                let h = parse_header(f.bytes).unwrap();
                if h.is_control() {
                    let marker = decode_control_batch(f.bytes, &h, &limits).unwrap().unwrap();
                    let status = match marker.control_type {
                        ControlType::Commit => TxnStatus::Committed,
                        ControlType::Abort => TxnStatus::Aborted,
                        other => panic!("unexpected control type {other:?}"),
                    };
                    for i in pending.remove(&h.producer_id).unwrap_or_default() {
                        records[i].transaction = status;
                    }
                    return ControlFlow::Continue(());
                }
                for_each_record(f.bytes, &h, &limits, |r| {
                    if h.is_transactional() {
                        pending.entry(h.producer_id).or_default().push(records.len());
                    }
                    records.push(ExpectedRecord {
                        offset: r.offset,
                        timestamp: r.timestamp,
                        timestamp_type: Some(h.attributes.timestamp_type()),
                        key: r.key.map(<[u8]>::to_vec),
                        value: r.value.map(<[u8]>::to_vec),
                        headers: r
                            .headers()
                            .map(|x| ExpectedHeader {
                                key: x.key.to_string(),
                                value: x.value.map(<[u8]>::to_vec),
                            })
                            .collect(),
                        producer_id: h.producer_id,
                        transaction: if h.is_transactional() {
                            TxnStatus::Open
                        } else {
                            TxnStatus::None
                        },
                        magic: 2,
                    });
                    ControlFlow::Continue(())
                })
                .unwrap();
                ControlFlow::Continue(())
            })
            .unwrap();
        assert_eq!(summary.end, log.len(), "no bytes after the last batch");
        segments.push(Scanned {
            base_offset: base,
            size: log.len(),
            infos,
        });
    }
    (segments, records)
}

/// The index, time index and transaction index files a rebuild over the
/// written log produces, compared with the files. `running` segments are
/// compared up to their zero tail.
fn assert_indexes_match_rebuild(dir: &Path, segments: &[Scanned], config: &WriterConfig, running: bool) {
    let mut tracker = TxnTracker::new();
    for (i, seg) in segments.iter().enumerate() {
        let active = i + 1 == segments.len();
        let mut oi = OffsetIndexBuilder::new(seg.base_offset, config.index_interval_bytes);
        let mut ti = TimeIndexBuilder::new(seg.base_offset, config.index_interval_bytes);
        let mut aborted: Vec<AbortedTxn> = Vec::new();
        for b in &seg.infos {
            oi.push(b).unwrap();
            ti.push(b).unwrap();
            aborted.extend(tracker.on_batch(b));
        }
        let index = fs::read(file(dir, seg.base_offset, SegmentFileKind::Index)).unwrap();
        let time = fs::read(file(dir, seg.base_offset, SegmentFileKind::TimeIndex)).unwrap();
        if running && active {
            assert_eq!(index.len() as u64, config.offset_index_file_bytes());
            assert_eq!(time.len() as u64, config.time_index_file_bytes());
            let (head, tail) = index.split_at(oi.to_bytes().len());
            assert_eq!(head, oi.to_bytes());
            assert!(tail.iter().all(|&b| b == 0), "zero tail");
            let (head, tail) = time.split_at(ti.to_bytes().len());
            assert_eq!(head, ti.to_bytes());
            assert!(tail.iter().all(|&b| b == 0), "zero tail");
        } else {
            ti.seal();
            assert_eq!(index, oi.to_bytes(), "offset index of segment {}", seg.base_offset);
            assert_eq!(time, ti.to_bytes(), "time index of segment {}", seg.base_offset);
        }
        let txn_path = file(dir, seg.base_offset, SegmentFileKind::TxnIndex);
        if aborted.is_empty() {
            assert!(
                !txn_path.exists(),
                "txnindex only for segments with aborted transactions"
            );
        } else {
            assert_eq!(fs::read(txn_path).unwrap(), txn_index::serialize(&aborted));
        }
    }
}

fn sample_options() -> SampleOptions {
    SampleOptions {
        seed: 42,
        fsync: false,
        ..SampleOptions::default()
    }
}

#[test]
fn sample_reads_back_shape_by_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let options = sample_options();
    let manifest = write_sample(tmp.path(), &options).unwrap();
    assert_eq!(manifest.partitions.len(), SHAPES.len());
    let config = WriterConfig {
        segment_bytes: options.segment_bytes,
        ..quick()
    };
    for p in &manifest.partitions {
        let dir = &p.written.dir;
        let (segments, records) = read_partition(dir);
        assert_eq!(records, p.records, "records of {}", p.shape);
        assert_eq!(p.data_records as usize, records.len());
        assert!(segments.len() >= 3, "{} has {} segments", p.shape, segments.len());
        let bases: Vec<i64> = p.written.segments.iter().map(|s| s.base_offset).collect();
        assert_eq!(bases, log_bases(dir));
        for (s, summary) in segments.iter().zip(&p.written.segments) {
            assert!(s.size <= options.segment_bytes);
            assert_eq!(s.size, summary.size);
            assert!(s.infos.iter().all(|b| b.base_offset >= s.base_offset));
        }
        assert_indexes_match_rebuild(dir, &segments, &config, false);
        // Snapshots at every rolled base offset and at the log end offset.
        let mut expected: Vec<i64> = bases[1..].to_vec();
        expected.push(p.written.log_end_offset);
        assert_eq!(snapshot_offsets(dir), expected, "{}", p.shape);
        for &o in &expected {
            ProducerSnapshot::read(&file(dir, o, SegmentFileKind::Snapshot)).unwrap();
        }
        let meta = PartitionMetadata::read(&dir.join("partition.metadata")).unwrap();
        assert_eq!(meta.topic_id, p.written.topic_id);
        let epochs = LeaderEpochCheckpoint::read(&dir.join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(epochs.entries, p.written.epochs);
    }
    let shape = |s: &str| manifest.partitions.iter().find(|p| p.shape == s).unwrap();
    // Every codec is present where asked.
    for (name, codec) in [
        ("codec-gzip", 1),
        ("codec-snappy", 2),
        ("codec-lz4", 3),
        ("codec-zstd", 4),
    ] {
        let dir = &shape(name).written.dir;
        let log = fs::read(file(dir, 0, SegmentFileKind::Log)).unwrap();
        assert_eq!(parse_header(&log).unwrap().attributes.codec_id(), codec);
    }
    // Transactions: both outcomes, a txnindex somewhere, LSO-visible records differ.
    let txn = shape("transactions");
    assert!(txn.records.iter().any(|r| r.transaction == TxnStatus::Aborted));
    assert!(txn.records.iter().any(|r| r.transaction == TxnStatus::Committed));
    assert!(txn.written.segments.iter().any(|s| s.aborted_transactions > 0));
    assert!(
        txn.consumer_records(Isolation::ReadCommitted).count()
            < txn.consumer_records(Isolation::ReadUncommitted).count()
    );
    // Compaction: gaps between batches and inside them, empty batches.
    let compacted = shape("compacted");
    let offsets: Vec<i64> = compacted.records.iter().map(|r| r.offset).collect();
    assert!(offsets.windows(2).any(|w| w[1] > w[0] + 1));
    let (segs, _) = read_partition(&compacted.written.dir);
    assert!(segs.iter().flat_map(|s| &s.infos).any(|b| b.records_count == 0));
    assert!(compacted.records.iter().any(|r| r.value.is_none()));
    // Retention: first segment above 0, log start offset raised.
    let retained = shape("retained");
    assert_eq!(retained.written.segments[0].base_offset, RETAINED_BASE_OFFSET);
    assert!(retained.written.log_start_offset > RETAINED_BASE_OFFSET);
    assert!(retained.consumer_records(Isolation::ReadUncommitted).count() < retained.records.len());
    // LogAppendTime, and legacy magics.
    assert!(shape("log-append-time")
        .records
        .iter()
        .all(|r| r.timestamp_type == Some(TimestampType::LogAppendTime)));
    let magics: Vec<i8> = shape("legacy").records.iter().map(|r| r.magic).collect();
    assert!(magics.contains(&0) && magics.contains(&1) && magics.contains(&2));
    assert!(shape("codec-none").records.iter().any(|r| r.key.is_none()));
    assert!(shape("codec-none").records.iter().any(|r| !r.headers.is_empty()));
    // The log dir files.
    let ckpt = crate::checkpoint::OffsetCheckpoint::read(&tmp.path().join("recovery-point-offset-checkpoint")).unwrap();
    assert_eq!(ckpt.entries.len(), SHAPES.len());
    assert!(tmp.path().join(".kafka_cleanshutdown").exists());
}

#[test]
fn sample_is_deterministic_from_the_seed() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let ma = write_sample(a.path(), &sample_options()).unwrap();
    let mb = write_sample(b.path(), &sample_options()).unwrap();
    assert_eq!(ma.cluster_id, mb.cluster_id);
    for (pa, pb) in ma.partitions.iter().zip(&mb.partitions) {
        assert_eq!(pa.records, pb.records);
        assert_eq!(pa.written.topic_id, pb.written.topic_id);
        for base in log_bases(&pa.written.dir) {
            for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
                assert_eq!(
                    fs::read(file(&pa.written.dir, base, kind)).unwrap(),
                    fs::read(file(&pb.written.dir, base, kind)).unwrap()
                );
            }
        }
    }
    let c = tempfile::tempdir().unwrap();
    let mc = write_sample(
        c.path(),
        &SampleOptions {
            seed: 43,
            ..sample_options()
        },
    )
    .unwrap();
    assert_ne!(ma.partitions[0].records, mc.partitions[0].records);
}

#[test]
fn running_sample_leaves_preallocated_indexes() {
    let tmp = tempfile::tempdir().unwrap();
    let options = SampleOptions {
        running: true,
        ..sample_options()
    };
    let manifest = write_sample(tmp.path(), &options).unwrap();
    let config = WriterConfig {
        segment_bytes: options.segment_bytes,
        ..quick()
    };
    for p in &manifest.partitions {
        let dir = &p.written.dir;
        let (segments, records) = read_partition(dir);
        assert_eq!(records, p.records);
        assert_indexes_match_rebuild(dir, &segments, &config, true);
        let bases = log_bases(dir);
        // No shutdown snapshot: only the roll snapshots.
        assert_eq!(snapshot_offsets(dir), bases[1..].to_vec());
        let active = bases.last().copied().unwrap();
        assert_eq!(p.written.recovery_point, active);
        assert_eq!(
            fs::metadata(file(dir, active, SegmentFileKind::Index)).unwrap().len(),
            10 * 1024 * 1024
        );
        assert_eq!(
            fs::metadata(file(dir, active, SegmentFileKind::TimeIndex))
                .unwrap()
                .len(),
            10_485_756
        );
    }
    assert!(tmp.path().join(".lock").exists());
    assert!(!tmp.path().join(".kafka_cleanshutdown").exists());
}

fn batch(count: i32, ts: i64) -> BatchBuilder {
    BatchBuilder::new(0).records((0..count).map(|k| RecordSpec::new(k, ts + i64::from(k)).with_value(vec![b'v'; 100])))
}

#[test]
fn rolls_like_a_broker() {
    let tmp = tempfile::tempdir().unwrap();
    let config = WriterConfig {
        segment_bytes: 1000,
        index_interval_bytes: 200,
        ..quick()
    };
    let mut w = PartitionWriter::create(tmp.path(), "roll", 0, 0, config.clone()).unwrap();
    let mut sizes = Vec::new();
    for i in 0..10 {
        let info = w.append(batch(2, 1_000 + i)).unwrap();
        sizes.push(info.size);
        assert_eq!(info.first_offset, i * 2);
    }
    let batch_size = sizes[0];
    // A batch larger than a segment is refused.
    let big = BatchBuilder::new(0).record(RecordSpec::new(0, 1).with_value(vec![0u8; 2000]));
    let err = w.append(big).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                defect: Defect::BadLength { .. },
                ..
            }
        ),
        "{err}"
    );
    // A gap append that must roll starts the new segment at the batch's offset.
    let mut gap_base = None;
    while gap_base.is_none() {
        let next = w.next_offset() + 5;
        let info = w.append_at(next, batch(2, 2_000)).unwrap();
        if info.rolled {
            gap_base = Some(info.segment_base_offset);
            assert_eq!(info.segment_base_offset, next);
        }
    }
    // Offsets that cannot be expressed relative to the base offset roll too.
    let far = w.next_offset() + i64::from(i32::MAX) + 7;
    let info = w.append_at(far, batch(1, 3_000)).unwrap();
    assert!(info.rolled && info.segment_base_offset == far);
    // segment.ms: a batch more than 7 days after the segment's first one rolls.
    let info = w.append(batch(1, 3_000)).unwrap();
    assert!(!info.rolled);
    let info = w.append(batch(1, 3_001 + DEFAULT_SEGMENT_MS)).unwrap();
    assert!(info.rolled);
    // An explicit roll, then close with an empty active segment.
    w.roll().unwrap();
    w.roll().unwrap();
    let leo = w.next_offset();
    let written = w.close().unwrap();
    let dir = &written.dir;
    let bases = log_bases(dir);
    assert_eq!(
        bases,
        written.segments.iter().map(|s| s.base_offset).collect::<Vec<_>>()
    );
    assert_eq!(bases.last(), Some(&leo));
    let (segments, _) = read_partition(dir);
    for s in &segments {
        assert!(s.size <= 1000);
        if let Some(first) = s.infos.first() {
            assert!(first.base_offset >= s.base_offset);
        }
    }
    // Segments before the gap hold as many whole batches as fit.
    assert_eq!(segments[0].size, 1000 / batch_size * batch_size);
    assert_indexes_match_rebuild(dir, &segments, &config, false);
    // The empty last segment has empty indexes and no snapshot beyond its base.
    assert_eq!(fs::metadata(file(dir, leo, SegmentFileKind::Index)).unwrap().len(), 0);
    assert_eq!(snapshot_offsets(dir).last(), Some(&leo));
    assert_eq!(snapshot_offsets(dir), bases[1..].to_vec());
}

#[test]
fn full_indexes_roll() {
    let tmp = tempfile::tempdir().unwrap();
    // Two time-index slots: full after one entry; three offset-index slots.
    let config = WriterConfig {
        segment_index_bytes: 24,
        index_interval_bytes: 1,
        ..quick()
    };
    let mut w = PartitionWriter::create(tmp.path(), "full", 0, 0, config.clone()).unwrap();
    let mut rolled = Vec::new();
    for i in 0..6 {
        rolled.push(w.append(batch(1, 100 + i)).unwrap().rolled);
    }
    // Entries are added from the second batch of a segment on; the first entry fills the time index.
    assert_eq!(rolled, vec![false, false, true, false, true, false]);
    let written = w.close().unwrap();
    let (segments, _) = read_partition(&written.dir);
    assert_indexes_match_rebuild(&written.dir, &segments, &config, false);
}

#[test]
fn rejects_what_a_broker_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "reject", 0, 10, quick()).unwrap();
    assert_eq!(w.next_offset(), 10);
    let first_size = w.append(batch(3, 5)).unwrap().size;
    // Below the log end offset: the error names where the batch would have gone.
    let err = w.append_at(12, batch(1, 5)).unwrap_err();
    match err {
        Error::Corrupt {
            position,
            offset,
            defect: Defect::OffsetOutOfOrder { previous, found },
            ..
        } => {
            assert_eq!((previous, found, offset), (12, 12, Some(12)));
            assert_eq!(position, first_size);
        }
        other => panic!("{other}"),
    }
    // A flipped bit.
    let mut bytes = BatchBuilder::new(13).record(RecordSpec::new(0, 1)).build();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let err = w.append_raw(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                defect: Defect::CrcMismatch { .. },
                ..
            }
        ),
        "{err}"
    );
    // Trailing bytes after the frame, and nothing at all.
    let mut two = BatchBuilder::new(13).record(RecordSpec::new(0, 1)).build();
    two.push(0);
    assert!(matches!(
        w.append_raw(&two).unwrap_err(),
        Error::Corrupt {
            defect: Defect::TrailingBytes { bytes: 1 },
            ..
        }
    ));
    assert!(w.append_raw(&[]).unwrap_err().is_incomplete());
    // A non-transactional batch while the producer's transaction is open.
    w.append(batch(1, 5).producer(7, 0, 0).transactional(true)).unwrap();
    let err = w.append(batch(1, 5).producer(7, 0, 1)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                defect: Defect::Other { .. },
                ..
            }
        ),
        "{err}"
    );
    // A control batch that is not an end-transaction marker.
    let leader_change = BatchBuilder::new(0)
        .producer(7, 0, -1)
        .transactional(true)
        .control(true)
        .record(RecordSpec::new(0, 1).with_key(vec![0, 0, 0, 2]).with_value(vec![0; 6]));
    let err = w.append(leader_change).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                defect: Defect::Control { .. },
                ..
            }
        ),
        "{err}"
    );
    // The last possible offset cannot be followed by a log end offset.
    let err = w.append_at(i64::MAX, batch(1, 5)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt {
                defect: Defect::OffsetOverflow { .. },
                ..
            }
        ),
        "{err}"
    );
    // Nothing of the refused appends was written.
    assert_eq!(w.next_offset(), 14);
    let written = w.close().unwrap();
    let (segments, records) = read_partition(&written.dir);
    assert_eq!(segments.len(), 1);
    assert_eq!(records.len(), 4);
    // Bad names and configs.
    assert!(matches!(
        PartitionWriter::create(tmp.path(), "bad topic", 0, 0, quick()).unwrap_err(),
        Error::BadName { .. }
    ));
    let bad = WriterConfig {
        segment_bytes: 0,
        ..quick()
    };
    assert!(PartitionWriter::create(tmp.path(), "ok", 0, 0, bad).is_err());
    // The partition directory must be new.
    assert!(PartitionWriter::create(tmp.path(), "reject", 0, 0, quick()).is_err());
}

#[test]
fn transaction_index_and_last_stable_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let config = WriterConfig {
        segment_bytes: 600,
        ..quick()
    };
    let mut w = PartitionWriter::create(tmp.path(), "txn", 0, 0, config).unwrap();
    let marker = |t| EndTxnMarker {
        control_type: t,
        coordinator_epoch: 4,
    };
    let txn = |pid, seq| batch(1, 50).producer(pid, 0, seq).transactional(true);
    w.append(txn(1, 0)).unwrap(); // 0: A opens
    w.append(txn(2, 0)).unwrap(); // 1: B opens
    w.append(txn(1, 1)).unwrap(); // 2
    let a = w
        .append_end_txn_marker(1, 0, marker(ControlType::Abort), 60, 0)
        .unwrap(); // 3: A aborts, B open at 1
    w.append(batch(2, 70)).unwrap(); // 4-5 plain
    let b = w
        .append_end_txn_marker(2, 0, marker(ControlType::Abort), 80, 0)
        .unwrap(); // 6: B aborts
    let c = w
        .append_end_txn_marker(2, 0, marker(ControlType::Abort), 81, 0)
        .unwrap(); // 7: no data: no entry
    w.append(txn(3, 0)).unwrap(); // 8
    w.append_end_txn_marker(3, 0, marker(ControlType::Commit), 90, 0)
        .unwrap(); // 9: commit: no entry
    let written = w.close().unwrap();
    let dir = &written.dir;
    let entries_of = |base: i64| {
        fs::read(file(dir, base, SegmentFileKind::TxnIndex))
            .map(|b| txn_index::TxnIndex::parse(&b).entries)
            .unwrap_or_default()
    };
    let mut all = Vec::new();
    for s in &written.segments {
        all.extend(entries_of(s.base_offset));
    }
    assert_eq!(all, vec![AbortedTxn::new(1, 0, 3, 1), AbortedTxn::new(2, 1, 6, 7)]);
    // Each entry is in the index of the segment holding its marker.
    assert_eq!(entries_of(a.segment_base_offset)[0].last_offset, 3);
    assert!(entries_of(b.segment_base_offset).iter().any(|e| e.last_offset == 6));
    assert!(entries_of(c.segment_base_offset).iter().all(|e| e.last_offset != 7));
    let (segments, records) = read_partition(dir);
    assert_indexes_match_rebuild(
        dir,
        &segments,
        &WriterConfig {
            segment_bytes: 600,
            ..quick()
        },
        false,
    );
    let statuses: Vec<TxnStatus> = records.iter().map(|r| r.transaction).collect();
    use TxnStatus::*;
    assert_eq!(statuses, vec![Aborted, Aborted, Aborted, None, None, Committed]);
}

#[test]
fn snapshot_contents_follow_producer_state_manager() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "snap", 0, 100, quick()).unwrap();
    w.append(batch(3, 1_000).producer(5, 2, 10)).unwrap(); // 100-102, seq 10..12
    w.append(batch(2, 1_010).producer(6, 0, 0).transactional(true)).unwrap(); // 103-104
    w.roll().unwrap(); // snapshot at 105
    w.append(batch(1, 1_020).producer(5, 2, 13)).unwrap(); // 105
    w.append_end_txn_marker(
        6,
        0,
        EndTxnMarker {
            control_type: ControlType::Commit,
            coordinator_epoch: 9,
        },
        1_030,
        0,
    )
    .unwrap(); // 106
    w.append(batch(2, 1_040).producer(7, 0, 0).transactional(true)).unwrap(); // 107-108, left open
                                                                              // An empty control batch of an unknown producer gets an empty entry.
    let empty_control = BatchBuilder::new(0)
        .producer(8, 1, -1)
        .transactional(true)
        .control(true);
    w.append(empty_control).unwrap(); // 109
    let written = w.close().unwrap();
    assert_eq!(written.snapshots, vec![105, 110]);
    let read = |o| ProducerSnapshot::read(&file(&written.dir, o, SegmentFileKind::Snapshot)).unwrap();
    let e5 = |last_seq, last_offset, delta, ts| ProducerSnapshotEntry {
        producer_id: 5,
        epoch: 2,
        last_sequence: last_seq,
        last_offset,
        offset_delta: delta,
        timestamp: ts,
        coordinator_epoch: -1,
        current_txn_first_offset: -1,
    };
    // Java HashMap order of keys 5, 6 (and 7, 8): their own buckets, ascending.
    assert_eq!(
        read(105).entries,
        vec![
            e5(12, 102, 2, 1_002),
            ProducerSnapshotEntry {
                producer_id: 6,
                epoch: 0,
                last_sequence: 1,
                last_offset: 104,
                offset_delta: 1,
                timestamp: 1_011,
                coordinator_epoch: -1,
                current_txn_first_offset: 103,
            }
        ]
    );
    assert_eq!(
        read(110).entries,
        vec![
            e5(13, 105, 0, 1_020),
            ProducerSnapshotEntry {
                producer_id: 6,
                epoch: 0,
                last_sequence: 1,
                last_offset: 104,
                offset_delta: 1,
                timestamp: 1_030,
                coordinator_epoch: 9,
                current_txn_first_offset: -1,
            },
            ProducerSnapshotEntry {
                producer_id: 7,
                epoch: 0,
                last_sequence: 1,
                last_offset: 108,
                offset_delta: 1,
                timestamp: 1_041,
                coordinator_epoch: -1,
                current_txn_first_offset: 107,
            },
            ProducerSnapshotEntry {
                producer_id: 8,
                epoch: -1,
                last_sequence: -1,
                last_offset: -1,
                offset_delta: 0,
                timestamp: -1,
                coordinator_epoch: -1,
                current_txn_first_offset: -1,
            },
        ]
    );
    // Byte layout: version 1, CRC-32C over [6, end), count, entries.
    let bytes = fs::read(file(&written.dir, 105, SegmentFileKind::Snapshot)).unwrap();
    assert_eq!(&bytes[0..2], &[0, 1]);
    assert_eq!(&bytes[2..6], &crc32c::crc32c(&bytes[6..]).to_be_bytes());
    assert_eq!(&bytes[6..10], &2i32.to_be_bytes());
    assert_eq!(bytes.len(), 10 + 2 * 46);
}

#[test]
fn epoch_checkpoint_follows_assign_and_legacy_clears_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "epochs", 0, 0, quick()).unwrap();
    for epoch in [0, 0, 2, 2, 5] {
        w.append(batch(2, 10).partition_leader_epoch(epoch)).unwrap();
    }
    w.become_leader(6);
    let written = w.close().unwrap();
    let text = fs::read_to_string(written.dir.join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(text, "0\n4\n0 0\n2 4\n5 8\n6 10\n");
    let entries: Vec<(i32, i64)> = written.epochs.iter().map(|e| (e.epoch, e.start_offset)).collect();
    assert_eq!(entries, vec![(0, 0), (2, 4), (5, 8), (6, 10)]);

    let mut w = PartitionWriter::create(tmp.path(), "epochs", 1, 0, quick()).unwrap();
    w.append(batch(1, 10).partition_leader_epoch(3)).unwrap();
    let frame = legacy::encode_message(1, 1, 20, TimestampType::CreateTime, None, Some(b"x"));
    w.append_raw(&frame).unwrap();
    w.append(batch(1, 30).partition_leader_epoch(4)).unwrap();
    let written = w.close().unwrap();
    assert_eq!(
        written.epochs,
        vec![EpochEntry {
            epoch: 4,
            start_offset: 2
        }]
    );
}

#[test]
fn gaps_and_empty_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "gaps", 0, 0, quick()).unwrap();
    // Record offset deltas with holes and a lastOffsetDelta past the last record.
    let holes = BatchBuilder::new(0)
        .record(RecordSpec::new(1, 5).with_key("a"))
        .record(RecordSpec::new(4, 6).with_key("b"))
        .last_offset_delta(6);
    let info = w.append(holes).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 6));
    let empty = BatchBuilder::new(0)
        .producer(1, 0, 0)
        .last_offset_delta(3)
        .max_timestamp(7);
    let info = w.append_at(20, empty).unwrap();
    assert_eq!((info.first_offset, info.last_offset, w.next_offset()), (20, 23, 24));
    let written = w.close().unwrap();
    let (segments, records) = read_partition(&written.dir);
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![1, 4]);
    assert_eq!(segments[0].infos[1].records_count, 0);
    assert_eq!(written.log_end_offset, 24);
    let snap = ProducerSnapshot::read(&file(&written.dir, 24, SegmentFileKind::Snapshot)).unwrap();
    assert_eq!((snap.entries[0].last_sequence, snap.entries[0].last_offset), (3, 23));
}

#[test]
fn legacy_wrappers_are_placed_by_their_first_inner_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "legacy", 0, 0, quick()).unwrap();
    let inner = |o: i64| legacy::LegacySpec {
        offset: o,
        timestamp: 100 + o,
        key: None,
        value: Some(vec![b'x'; 10]),
    };
    let wrapper = legacy::encode_wrapper(
        1,
        Compression::Gzip,
        TimestampType::CreateTime,
        0,
        &[inner(0), inner(1)],
    );
    let info = w.append_raw(&wrapper).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 1));
    // A wrapper whose last offset is new but whose first overlaps is refused.
    let overlap = legacy::encode_wrapper(
        1,
        Compression::Gzip,
        TimestampType::CreateTime,
        0,
        &[inner(1), inner(2)],
    );
    assert!(w.append_raw(&overlap).is_err());
    let written = w.close().unwrap();
    assert_eq!(written.log_end_offset, 2);
    assert_eq!(read_partition(&written.dir).1.len(), 2);
}

#[test]
fn bulk_writes_the_size_asked_and_regenerates() {
    let tmp = tempfile::tempdir().unwrap();
    let options = BulkOptions {
        seed: 9,
        total_bytes: 600 * 1024,
        partitions: 3,
        segment_bytes: 64 * 1024,
        fsync: false,
        threads: 2,
        ..BulkOptions::default()
    };
    let progressed = std::sync::atomic::AtomicU64::new(0);
    let manifest = write_bulk(tmp.path(), &options, &|n| {
        progressed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    let layout = manifest.bulk.clone().unwrap();
    assert_eq!(manifest.partitions.len(), 3);
    assert!(manifest.total_log_bytes() >= options.total_bytes);
    assert!(manifest.total_log_bytes() < options.total_bytes + 3 * 20 * 1024);
    assert_eq!(progressed.into_inner(), manifest.total_log_bytes());
    for p in &manifest.partitions {
        let (segments, records) = read_partition(&p.written.dir);
        assert!(segments.len() >= 3);
        assert_eq!(records.len() as u64, p.data_records);
        for r in &records {
            assert_eq!(r, &layout.record(p.written.partition, r.offset));
        }
        let batch_size = segments[0].infos[0].size;
        assert!((15 * 1024..17 * 1024).contains(&batch_size), "{batch_size}");
        assert_indexes_match_rebuild(
            &p.written.dir,
            &segments,
            &WriterConfig {
                segment_bytes: options.segment_bytes,
                ..quick()
            },
            false,
        );
    }
}

/// `records_per_batch` and `value_bytes` make the ~1 KiB one-record batches of the many-small-partitions benchmark.
/// The batches of the partition `dir`, the transactions their markers closed as a tracker sees them, and how many
/// it holds open at the end.
fn closed_transactions(dir: &Path) -> (Vec<BatchInfo>, Vec<ClosedTransaction>, usize) {
    let (segments, _) = read_partition(dir);
    let infos: Vec<BatchInfo> = segments.iter().flat_map(|s| s.infos.iter().cloned()).collect();
    let mut tracker = TxnTracker::new();
    let closed = infos.iter().filter_map(|i| tracker.on_batch_closing(i).1).collect();
    (infos, closed, tracker.open_tallied().count())
}

#[test]
fn bulk_writes_small_batches_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let options = BulkOptions {
        seed: 3,
        total_bytes: 64 * 1024,
        partitions: 2,
        fsync: false,
        threads: 1,
        records_per_batch: 1,
        value_bytes: 860,
        ..BulkOptions::default()
    };
    let manifest = write_bulk(tmp.path(), &options, &|_| {}).unwrap();
    let layout = manifest.bulk.clone().unwrap();
    assert_eq!(layout.records_per_batch, 1);
    for p in &manifest.partitions {
        let (segments, records) = read_partition(&p.written.dir);
        let infos: Vec<_> = segments.iter().flat_map(|s| s.infos.iter()).collect();
        assert_eq!(infos.len() as u64, p.data_records, "one record per batch");
        assert!(infos.len() > 25, "{} batches", infos.len());
        let plain = infos.iter().find(|i| i.records_count == 1).unwrap();
        assert!((900..1000).contains(&plain.size), "{}", plain.size);
        for r in &records {
            assert_eq!(r, &layout.record(p.written.partition, r.offset));
        }
    }
    // A source caught mid-transaction: the last four batches of each partition are one producer's open
    // transaction, and the data before it is unchanged.
    let open_dir = tmp.path().join("open");
    let open = write_bulk(
        &open_dir,
        &BulkOptions {
            open_transaction: true,
            ..options.clone()
        },
        &|_| {},
    )
    .unwrap();
    for (p, plain) in open.partitions.iter().zip(&manifest.partitions) {
        let (segments, _) = read_partition(&p.written.dir);
        let mut tracker = TxnTracker::new();
        for info in segments.iter().flat_map(|s| s.infos.iter()) {
            tracker.on_batch(info);
        }
        let txns: Vec<_> = tracker.open_tallied().collect();
        assert_eq!(txns.len(), 1, "{txns:?}");
        assert_eq!(txns[0].producer_id, 9000 + i64::from(p.written.partition));
        assert_eq!(txns[0].first_offset, plain.written.log_end_offset);
        assert_eq!(txns[0].tally.map(|t| t.batches), Some(4));
        assert_eq!(p.data_batches, plain.data_batches + 4);
    }
    // Committed: the same transaction, then its COMMIT marker one ms after its last batch.
    let committed = write_bulk(
        &tmp.path().join("committed"),
        &BulkOptions {
            open_transaction: true,
            commit_transaction: true,
            ..options.clone()
        },
        &|_| {},
    )
    .unwrap();
    for (p, plain) in committed.partitions.iter().zip(&manifest.partitions) {
        let (infos, closed, still_open) = closed_transactions(&p.written.dir);
        assert_eq!(still_open, 0);
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert_eq!(closed[0].first_offset, Some(plain.written.log_end_offset));
        let (data, marker) = (infos[infos.len() - 2], infos[infos.len() - 1]);
        assert_eq!(marker.control, Some(ControlType::Commit));
        assert_eq!(
            (marker.base_offset, marker.max_timestamp),
            (data.last_offset + 1, data.max_timestamp + 1)
        );
        assert_eq!(p.control_batches, 1);
    }
    // Committed again: one more transaction of the producer and its commit, then two plain batches.
    let again = write_bulk(
        &tmp.path().join("again"),
        &BulkOptions {
            open_transaction: true,
            commit_transaction: true,
            commit_again: true,
            ..options.clone()
        },
        &|_| {},
    )
    .unwrap();
    for (p, plain) in again.partitions.iter().zip(&manifest.partitions) {
        let (infos, closed, _) = closed_transactions(&p.written.dir);
        let shape: Vec<_> = closed
            .iter()
            .map(|c| (c.producer_id, c.first_offset, c.tally.map(|t| t.batches)))
            .collect();
        let (producer, first) = (9000 + i64::from(p.written.partition), plain.written.log_end_offset);
        let second = closed[0].marker_offset + 1;
        assert_eq!(
            shape,
            [(producer, Some(first), Some(4)), (producer, Some(second), Some(1))]
        );
        assert!(infos[infos.len() - 2..]
            .iter()
            .all(|i| i.producer_id < 0 && !i.is_control));
        assert_eq!((p.control_batches, p.data_batches), (2, plain.data_batches + 7));
    }
    let zero = BulkOptions {
        records_per_batch: 0,
        ..options
    };
    let err = write_bulk(&tmp.path().join("zero"), &zero, &|_| {}).unwrap_err();
    assert!(err.to_string().contains("records per batch"), "{err}");
}

/// One step of a random partition history.
#[derive(Debug, Clone)]
enum Step {
    Data {
        gap: i64,
        codec: u8,
        deltas: Vec<i32>,
        extra_delta: i32,
        lat: bool,
        producer: Option<usize>,
        epoch: i32,
    },
    End {
        producer: usize,
        commit: bool,
    },
    Roll,
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            prop_oneof![3 => Just(0i64), 1 => 1i64..50],
            0u8..5,
            proptest::collection::vec(1i32..4, 0..12),
            0i32..3,
            any::<bool>(),
            proptest::option::of(0usize..3),
            0i32..4,
        )
            .prop_map(|(gap, codec, deltas, extra_delta, lat, producer, epoch)| Step::Data {
                gap,
                codec,
                deltas,
                extra_delta,
                lat,
                producer,
                epoch,
            }),
        2 => (0usize..3, any::<bool>()).prop_map(|(producer, commit)| Step::End { producer, commit }),
        1 => Just(Step::Roll),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random histories (codecs, record counts, gaps, empty batches, idempotent
    /// and transactional producers, rolls) read back record for record, with
    /// indexes equal to a rebuild and segments within `segment.bytes`.
    #[test]
    fn random_histories_round_trip(
        steps in proptest::collection::vec(arb_step(), 1..60),
        base in prop_oneof![Just(0i64), 1i64..1_000_000],
        segment_bytes in 400u64..4000,
        interval in prop_oneof![Just(DEFAULT_INDEX_INTERVAL_BYTES), 1u64..600],
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let config = WriterConfig { segment_bytes, index_interval_bytes: interval, ..quick() };
        let mut w = PartitionWriter::create(tmp.path(), "prop", 0, base, config.clone()).unwrap();
        let mut expected: Vec<(i64, Option<Vec<u8>>, TxnStatus)> = Vec::new();
        let mut pending: HashMap<i64, Vec<usize>> = HashMap::new();
        let mut seqs = [0i32; 3];
        let mut ts = 1_000i64;
        for (i, step) in steps.iter().enumerate() {
            ts += 3;
            match step {
                Step::Data { gap, codec, deltas, extra_delta, lat, producer, epoch } => {
                    let mut d = -1;
                    let specs: Vec<RecordSpec> = deltas.iter().map(|g| {
                        d += g;
                        RecordSpec::new(d, ts).with_value(format!("{i}-{d}").into_bytes())
                    }).collect();
                    let empty = specs.is_empty();
                    let codec = if empty { Compression::None } else { Compression::from_id(*codec).unwrap() };
                    let mut b = BatchBuilder::new(0)
                        .compression(codec)
                        .partition_leader_epoch(*epoch)
                        .last_offset_delta(d.max(0) + extra_delta)
                        .max_timestamp(ts)
                        .records(specs.clone());
                    if *lat && !empty {
                        b = b.log_append_time(ts + 1);
                        b.max_timestamp = None;
                    }
                    let mut txn = false;
                    if let Some(p) = producer {
                        let pid = 100 + *p as i64;
                        txn = *p != 2; // producers 0 and 1 are transactional, 2 idempotent
                        let count = d.max(0) + extra_delta + 1;
                        b = b.producer(pid, 0, seqs[*p]).transactional(txn);
                        seqs[*p] = crate::batch::increment_sequence(seqs[*p], count);
                    }
                    let at = w.next_offset() + gap;
                    w.append_at(at, b).unwrap();
                    for s in specs {
                        if txn {
                            pending.entry(100 + producer.unwrap_or(0) as i64).or_default().push(expected.len());
                        }
                        let status = if txn { TxnStatus::Open } else { TxnStatus::None };
                        expected.push((at + i64::from(s.offset_delta), s.value, status));
                    }
                }
                Step::End { producer, commit } => {
                    if *producer == 2 {
                        continue;
                    }
                    let pid = 100 + *producer as i64;
                    let t = if *commit { ControlType::Commit } else { ControlType::Abort };
                    w.append_end_txn_marker(pid, 0, EndTxnMarker { control_type: t, coordinator_epoch: 1 }, ts, 0).unwrap();
                    let status = if *commit { TxnStatus::Committed } else { TxnStatus::Aborted };
                    for i in pending.remove(&pid).unwrap_or_default() {
                        expected[i].2 = status;
                    }
                }
                Step::Roll => w.roll().unwrap(),
            }
        }
        let written = w.close().unwrap();
        let (segments, records) = read_partition(&written.dir);
        let got: Vec<(i64, Option<Vec<u8>>, TxnStatus)> =
            records.into_iter().map(|r| (r.offset, r.value, r.transaction)).collect();
        prop_assert_eq!(got, expected);
        for s in &segments {
            prop_assert!(s.size <= segment_bytes);
        }
        prop_assert_eq!(segments[0].base_offset, base);
        assert_indexes_match_rebuild(&written.dir, &segments, &config, false);
        let bases: Vec<i64> = segments.iter().map(|s| s.base_offset).collect();
        let mut snaps = bases[1..].to_vec();
        if written.log_end_offset > *bases.last().unwrap() || bases.len() == 1 && written.log_end_offset > base {
            snaps.push(written.log_end_offset);
        }
        snaps.dedup();
        prop_assert_eq!(snapshot_offsets(&written.dir), snaps);
    }
}

#[test]
fn verify_engine_finds_the_sample_sound() {
    use crate::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
    for running in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let options = SampleOptions {
            running,
            ..sample_options()
        };
        write_sample(tmp.path(), &options).unwrap();
        let report = verify_paths(
            &[tmp.path().to_path_buf()],
            &VerifyOptions {
                depth: Depth::Deep,
                strictness: Strictness::Strict,
            },
            &NoProgress,
        );
        assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
        assert_eq!(report.findings, vec![], "running: {running}");
        assert_eq!(report.partitions.len(), SHAPES.len());
    }
}

/// A running broker writes the roll snapshot in place: the newest one may be empty for a moment. Plain verify calls
/// that a live-state warning, --strict an error; an unreadable older snapshot is an error either way.
#[test]
fn an_empty_newest_snapshot_is_a_live_state_only_without_strict() {
    use crate::report::Severity;
    use crate::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "snap", 0, 0, quick()).unwrap();
    for i in 0..3 {
        w.append(batch(2, 1_000 + i)).unwrap();
        w.roll().unwrap();
    }
    let written = w.close().unwrap();
    let dir = written.dir.clone();
    let snaps = snapshot_offsets(&dir);
    assert_eq!(snaps, vec![2, 4, 6]);
    let verify = |strict: bool| {
        let report = verify_paths(
            std::slice::from_ref(&dir),
            &VerifyOptions {
                depth: Depth::Deep,
                strictness: if strict {
                    Strictness::Strict
                } else {
                    Strictness::Lenient
                },
            },
            &NoProgress,
        );
        assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
        report
            .findings
            .into_iter()
            .map(|f| {
                (
                    f.severity,
                    f.path.file_name().unwrap().to_string_lossy().into_owned(),
                    f.defect.to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    fs::write(file(&dir, 6, SegmentFileKind::Snapshot), b"").unwrap();
    let plain = verify(false);
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(
        (plain[0].0, plain[0].1.as_str()),
        (Severity::Warning, "00000000000000000006.snapshot")
    );
    assert!(plain[0].2.contains("a broker mid-write leaves this"), "{}", plain[0].2);
    let strict = verify(true);
    assert_eq!(strict.len(), 1, "{strict:?}");
    assert_eq!(
        (strict[0].0, strict[0].1.as_str()),
        (Severity::Error, "00000000000000000006.snapshot")
    );
    // Full length with a bad CRC: not what a write in progress leaves.
    let mut bad = fs::read(file(&dir, 2, SegmentFileKind::Snapshot)).unwrap();
    bad[3] ^= 0xff;
    fs::write(file(&dir, 6, SegmentFileKind::Snapshot), &bad).unwrap();
    let bad_crc = verify(false);
    assert_eq!(bad_crc.len(), 1, "{bad_crc:?}");
    assert_eq!(bad_crc[0].0, Severity::Error);
    // Not the newest: nothing a running broker leaves.
    fs::copy(
        file(&dir, 2, SegmentFileKind::Snapshot),
        file(&dir, 6, SegmentFileKind::Snapshot),
    )
    .unwrap();
    fs::write(file(&dir, 4, SegmentFileKind::Snapshot), b"").unwrap();
    let older = verify(false);
    assert_eq!(older.len(), 1, "{older:?}");
    assert_eq!(
        (older[0].0, older[0].1.as_str()),
        (Severity::Error, "00000000000000000004.snapshot")
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Hostile frames (random bytes, valid batches with bytes flipped or cut)
    /// are refused or accepted, never a panic, and a refusal writes nothing.
    #[test]
    fn append_raw_never_panics(
        noise in proptest::collection::vec(any::<u8>(), 0..200),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        control in any::<bool>(),
        magic in 0i8..3,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = PartitionWriter::create(tmp.path(), "hostile", 0, 0, quick()).unwrap();
        let _ = w.append_raw(&noise);
        let start = w.next_offset();
        let mut frame = match magic {
            0 | 1 => legacy::encode_wrapper(magic, Compression::Gzip, TimestampType::CreateTime, 0, &[
                legacy::LegacySpec { offset: start, timestamp: 1, key: None, value: Some(b"a".to_vec()) },
                legacy::LegacySpec { offset: start + 1, timestamp: 2, key: None, value: None },
            ]),
            _ => BatchBuilder::new(start)
                .producer(1, 0, -1)
                .transactional(control)
                .control(control)
                .record(RecordSpec::new(0, 1).with_key(vec![0, 0, 0, 0]).with_value(vec![0; 6]))
                .build(),
        };
        for (at, byte) in flips {
            let i = at.index(frame.len());
            frame[i] ^= byte;
        }
        if control {
            frame.truncate(cut.index(frame.len() + 1));
        }
        let before = w.next_offset();
        if w.append_raw(&frame).is_err() {
            prop_assert_eq!(w.next_offset(), before);
        }
        let written = w.close().unwrap();
        let (_, records) = read_partition(&written.dir);
        prop_assert!(records.iter().all(|r| r.offset < written.log_end_offset));
    }
}

/// Every file of a partition directory except `partition.metadata`, by name.
fn partition_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn replaying_the_sample_gives_identical_files() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    let options = sample_options();
    let manifest = write_sample(src.path(), &options).unwrap();
    for p in &manifest.partitions {
        let config = WriterConfig {
            segment_bytes: options.segment_bytes,
            ..quick()
        };
        let mut replayed = replay_partition(&p.written.dir, dst.path(), config).unwrap();
        replayed.dir = p.written.dir.clone();
        // The log start offset is not in the partition directory.
        replayed.log_start_offset = p.written.log_start_offset;
        assert_eq!(replayed, p.written, "{}", p.shape);
        assert_eq!(
            partition_files(&p.written.dir),
            partition_files(&dst.path().join(p.written.dir.file_name().unwrap())),
            "{}",
            p.shape
        );
    }
}
