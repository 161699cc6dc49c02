//! Open-transaction detection and the abort cut at promotion, against writer-made mirrors (the real-broker tests
//! are `tests/tests/e2e_promote_producers.rs`).

use std::collections::BTreeMap;
use std::path::Path;

use segment_format::batch::ControlType;
use segment_format::closed_log::{self, SegmentClosing};
use segment_format::control::EndTxnMarker;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::file_record::FileRecord;
use segment_format::log::LogFile;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_index::{AbortedTxn, TxnIndex};
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};

use super::recorded_txns;
use super::recorded_txns::Recorded;
use super::tests::{config, fixture_recording, fixture_with, recorded_ends, target_state};
use super::txn_cut::{abort_markers, find_open_transactions};
use segment_format::partition_metadata::Uuid;

use super::*;

const TOPIC: &str = "orders";
const SOURCE_EPOCH: i32 = 3;
/// Producer with a transaction open from offset 0 to the end, across every segment.
const LONG_OPEN: i64 = 10;
/// Idempotent (not transactional) producer.
const IDEMPOTENT: i64 = 20;
/// Producer whose transactions are committed, then aborted.
const DECIDED: i64 = 30;
/// Producer whose transaction opens in the last segment.
const LATE_OPEN: i64 = 40;

/// What a source partition's producers did, and what promotion must find open at its end.
struct Written {
    partition: WrittenPartition,
    /// (producer id, producer epoch, first offset, records) of each transaction open at the end.
    open: Vec<(i64, i16, i64, u64)>,
}

struct Producer {
    id: i64,
    epoch: i16,
    sequence: i32,
}

fn send(w: &mut PartitionWriter, p: &mut Producer, records: i32, transactional: bool) -> i64 {
    let base = w.next_offset();
    let mut b = BatchBuilder::new(base)
        .partition_leader_epoch(SOURCE_EPOCH)
        .producer(p.id, p.epoch, p.sequence)
        .transactional(transactional);
    for i in 0..records {
        b = b.record(RecordSpec::new(i, 1_700_000_000_000 + base).with_value(vec![b'v'; 30]));
    }
    w.append(b).unwrap();
    p.sequence += records;
    base
}

/// What lies after `cut_offset` in the segments `bases` of `dir`, as a consistent cut's search notes it.
fn after_cut(dir: &Path, bases: &[i64], cut_offset: i64) -> super::consistent_cut::AfterCut {
    let mut after = super::consistent_cut::AfterCut::default();
    for (i, b) in bases.iter().enumerate() {
        if i == 1 {
            after.leave_cut_segment();
        }
        LogFile::open(dir.join(segment_file_name(*b, SegmentFileKind::Log)))
            .unwrap()
            .scan(|f| {
                if f.info.base_offset >= cut_offset {
                    after.note(&f.info);
                }
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
    }
    after
}

/// A source partition of one topic whose offset index has an entry every `index_interval_bytes`.
fn indexed_writer(root: &Path, segment_bytes: u64, index_interval_bytes: u64) -> PartitionWriter {
    let cfg = WriterConfig {
        segment_bytes,
        index_interval_bytes,
        ..config(Uuid([1; 16]))
    };
    let mut w = PartitionWriter::create(root, TOPIC, 0, 0, cfg).unwrap();
    w.become_leader(SOURCE_EPOCH);
    w
}

fn end(w: &mut PartitionWriter, p: &Producer, control_type: ControlType, coordinator_epoch: i32) {
    let marker = EndTxnMarker {
        control_type,
        coordinator_epoch,
    };
    w.append_end_txn_marker(p.id, p.epoch, marker, 1_700_000_000_000, SOURCE_EPOCH)
        .unwrap();
}

/// A source partition's writer (leading in [`SOURCE_EPOCH`]) and its long-running transactional producer and its
/// idempotent one.
fn source_writer(root: &Path, partition: i32, segment_bytes: u64) -> (PartitionWriter, Producer, Producer) {
    let cfg = WriterConfig {
        segment_bytes,
        ..config(Uuid([1; 16]))
    };
    let mut w = PartitionWriter::create(root, TOPIC, partition, 0, cfg).unwrap();
    w.become_leader(SOURCE_EPOCH);
    let long = Producer {
        id: LONG_OPEN,
        epoch: 2,
        sequence: 0,
    };
    let idem = Producer {
        id: IDEMPOTENT,
        epoch: 0,
        sequence: 0,
    };
    (w, long, idem)
}

/// A source partition with decided transactions, idempotent writes and two transactions open at its end: one from
/// offset 0 (so in every producer snapshot) and one opened after the last snapshot a roll took.
fn write_transactions(root: &Path, partition: i32, segment_bytes: u64) -> Written {
    let (mut w, mut long, mut idem) = source_writer(root, partition, segment_bytes);
    let mut decided = Producer {
        id: DECIDED,
        epoch: 5,
        sequence: 0,
    };
    let long_first = send(&mut w, &mut long, 2, true);
    let mut long_records = 2u64;
    for round in 0..6 {
        send(&mut w, &mut idem, 3, false);
        send(&mut w, &mut decided, 2, true);
        let control = if round % 2 == 0 {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        end(&mut w, &decided, control, 7);
        send(&mut w, &mut long, 1, true);
        long_records += 1;
    }
    let mut late = Producer {
        id: LATE_OPEN,
        epoch: 1,
        sequence: 0,
    };
    let late_first = send(&mut w, &mut late, 3, true);
    send(&mut w, &mut idem, 1, false);
    send(&mut w, &mut late, 2, true);
    Written {
        partition: w.close().unwrap(),
        open: vec![(LONG_OPEN, 2, long_first, long_records), (LATE_OPEN, 1, late_first, 5)],
    }
}

fn expected_cut(written: &Written) -> Vec<CutTransaction> {
    written
        .open
        .iter()
        .zip(written.partition.log_end_offset..)
        .map(
            |(&(producer_id, producer_epoch, first_offset, records), marker_offset)| {
                let (batches, bytes) = open_batches(&written.partition, producer_id, first_offset);
                CutTransaction {
                    producer_id,
                    producer_epoch,
                    coordinator_epoch: super::txn_cut::MARKER_COORDINATOR_EPOCH,
                    first_offset,
                    records,
                    batches,
                    bytes,
                    marker_offset,
                }
            },
        )
        .collect()
}

/// Batches and bytes of `producer_id`'s data from `first_offset` on (its transaction stays open to the end).
fn open_batches(w: &WrittenPartition, producer_id: i64, first_offset: i64) -> (u64, u64) {
    let (mut batches, mut bytes) = (0, 0);
    for s in &w.segments {
        LogFile::open(w.dir.join(segment_file_name(s.base_offset, SegmentFileKind::Log)))
            .unwrap()
            .scan(|f| {
                let i = &f.info;
                if i.producer_id == producer_id && !i.is_control && i.base_offset >= first_offset {
                    batches += 1;
                    bytes += i.size;
                }
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
    }
    assert!(batches > 0);
    (batches, bytes)
}

fn bases(w: &WrittenPartition) -> Vec<i64> {
    w.segments.iter().map(|s| s.base_offset).collect()
}

#[test]
fn open_transactions_are_found_from_any_snapshot_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_transactions(dir.path(), 0, 700);
    let w = &written.partition;
    assert!(w.segments.len() >= 4, "several segments: {:?}", bases(w));
    assert!(w.snapshots.len() >= 3, "{:?}", w.snapshots);
    let pdir = &w.dir;
    let want = expected_cut(&written);
    // Every snapshot (the newest is at the log end, as a clean shutdown leaves it), only the oldest, none.
    let oldest = w.snapshots[..1].to_vec();
    let without_end: Vec<i64> = w.snapshots.iter().copied().filter(|o| *o < w.log_end_offset).collect();
    for snapshots in [w.snapshots.clone(), without_end, oldest, Vec::new()] {
        let got = find_open_transactions(pdir, &bases(w), &snapshots, w.log_end_offset).unwrap();
        assert_eq!(got, want, "starting from snapshots {snapshots:?}");
    }
    // The newest snapshot says the long transaction is open; it is the one the detection starts from.
    let newest = ProducerSnapshot::read(&pdir.join(segment_file_name(
        *w.snapshots.last().unwrap(),
        SegmentFileKind::Snapshot,
    )))
    .unwrap();
    assert!(newest.open_transactions().any(|(p, _)| p == LONG_OPEN));
    // A corrupt newest snapshot is skipped, as the broker skips it.
    let newest_path = pdir.join(segment_file_name(w.log_end_offset, SegmentFileKind::Snapshot));
    std::fs::write(&newest_path, b"\x00\x01garbage").unwrap();
    let got = find_open_transactions(pdir, &bases(w), &w.snapshots, w.log_end_offset).unwrap();
    assert_eq!(got, want);
}

#[test]
fn nothing_is_open_when_every_transaction_ended() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(dir.path(), TOPIC, 0, 0, config(Uuid([1; 16]))).unwrap();
    w.become_leader(SOURCE_EPOCH);
    let mut p = Producer {
        id: 5,
        epoch: 0,
        sequence: 0,
    };
    send(&mut w, &mut p, 2, true);
    end(&mut w, &p, ControlType::Abort, 1);
    send(&mut w, &mut p, 2, false);
    let w = w.close().unwrap();
    let got = find_open_transactions(&w.dir, &bases(&w), &[], w.log_end_offset).unwrap();
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn abort_markers_and_index_entries_are_what_a_coordinator_and_broker_write() {
    let cut = vec![
        CutTransaction {
            producer_id: 10,
            producer_epoch: 2,
            coordinator_epoch: 4,
            first_offset: 3,
            records: 9,
            batches: 3,
            bytes: 300,
            marker_offset: 100,
        },
        CutTransaction {
            producer_id: 40,
            producer_epoch: 1,
            coordinator_epoch: 0,
            first_offset: 80,
            records: 5,
            batches: 1,
            bytes: 100,
            marker_offset: 101,
        },
    ];
    let (bytes, entries) = abort_markers(&cut, 6, 1_800_000_000_000);
    // The second transaction is still open when the first is aborted: the first entry's LSO is its first offset.
    assert_eq!(
        entries,
        vec![AbortedTxn::new(10, 3, 100, 80), AbortedTxn::new(40, 80, 101, 102)]
    );
    let frames: Vec<_> = segment_format::log::scan_frames(&bytes, 0)
        .map(|f| f.unwrap())
        .collect();
    assert_eq!(frames.len(), 2);
    for (frame, c) in frames.iter().zip(&cut) {
        assert!(frame.crc_matches());
        let i = frame.info;
        assert_eq!(
            (i.base_offset, i.last_offset, i.records_count),
            (c.marker_offset, c.marker_offset, 1)
        );
        assert_eq!((i.producer_id, i.producer_epoch), (c.producer_id, c.producer_epoch));
        assert_eq!(i.partition_leader_epoch, 6);
        assert!(i.is_transactional && i.is_control);
        assert_eq!(i.control, Some(ControlType::Abort));
        let header = segment_format::batch::parse_header(frame.bytes).unwrap();
        let record = segment_format::control::decode_control_batch(
            frame.bytes,
            &header,
            &segment_format::record::DeepLimits::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            record.marker,
            Some(EndTxnMarker {
                control_type: ControlType::Abort,
                coordinator_epoch: c.coordinator_epoch
            })
        );
    }
    assert_eq!(abort_markers(&[], 6, 0), (Vec::new(), Vec::new()));
}

/// Partition 0: several segments; partition 1: one segment. Both end with two open transactions.
fn txn_fixture() -> (super::tests::Fixture, Vec<Vec<CutTransaction>>) {
    let wants = std::cell::RefCell::new(Vec::new());
    let f = fixture_with(
        |root, partition| {
            let segment_bytes = if partition == 0 { 700 } else { 1 << 20 };
            let written = write_transactions(root, partition, segment_bytes);
            wants.borrow_mut().push(expected_cut(&written));
            written.partition
        },
        [0, 0],
    );
    assert!(f.written[0].segments.len() >= 4);
    assert_eq!(f.written[1].segments.len(), 1);
    (f, wants.into_inner())
}

#[test]
fn promotion_aborts_open_transactions_and_starts_producer_state_empty_after_them() {
    let (mut f, wants) = txn_fixture();
    let report = f.promote().unwrap();
    for (w, want) in f.written.iter().zip(&wants) {
        let p = report.partitions.iter().find(|p| p.partition == w.partition).unwrap();
        assert_eq!(&p.transactions_aborted, want);
        let end = w.log_end_offset + want.len() as i64;
        assert_eq!(p.log_end_offset, Some(end));
        let dst = f.target.join(format!("{TOPIC}-{}", w.partition));
        // The markers end the last mirror segment, whose txnindex gained their entries.
        let last = w.segments.last().unwrap().base_offset;
        let mut log = LogFile::open(dst.join(segment_file_name(last, SegmentFileKind::Log))).unwrap();
        let mut tail = Vec::new();
        log.scan(|frame| {
            tail.push(frame.info);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        let markers = &tail[tail.len() - want.len()..];
        for (m, c) in markers.iter().zip(want) {
            assert_eq!(
                (m.base_offset, m.producer_id, m.control),
                (c.marker_offset, c.producer_id, Some(ControlType::Abort))
            );
        }
        let txn =
            TxnIndex::parse(&std::fs::read(dst.join(segment_file_name(last, SegmentFileKind::TxnIndex))).unwrap());
        let (_, entries) = abort_markers(want, TARGET_EPOCH_OF_FIXTURE, 0);
        assert!(txn.entries.ends_with(&entries), "{:?}", txn.entries);
        // An empty active segment and an empty snapshot at the new end; no snapshot of the source's.
        let snapshots: Vec<String> = std::fs::read_dir(&dst)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".snapshot"))
            .collect();
        assert_eq!(snapshots, vec![segment_file_name(end, SegmentFileKind::Snapshot)]);
        assert!(ProducerSnapshot::read(&dst.join(&snapshots[0]))
            .unwrap()
            .entries
            .is_empty());
        assert_eq!(
            std::fs::metadata(dst.join(segment_file_name(end, SegmentFileKind::Log)))
                .unwrap()
                .len(),
            0
        );
        // The catalog says what was cut.
        let key = segmirror_catalog::PartitionKey::new("l", TOPIC, w.partition);
        let events = f
            .catalog
            .events(Some(segmirror_catalog::Subject::Partition(&key)), 100)
            .unwrap();
        for c in want {
            assert!(
                events.iter().any(|e| e
                    .detail
                    .contains(&format!("producer id {} (epoch {})", c.producer_id, c.producer_epoch))
                    && e.detail.contains(&format!("{} record(s)", c.records))),
                "{events:?}"
            );
        }
    }
    // A broker would load it as sound: strict, deep, txnindex entries matching the markers.
    let verified = verify_paths(
        &[f.target.clone()],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    assert!(verified.io_errors.is_empty(), "{:?}", verified.io_errors);
    assert!(verified.findings.is_empty(), "{:#?}", verified.findings);
}

/// The leader epoch the fixture's target partitions last led in (promotion restamps to it).
const TARGET_EPOCH_OF_FIXTURE: i32 = 2;

/// The target's files with what depends on the promotion time left out: the markers' timestamps (in their `.log`
/// batches and in the sealed time index). Each `.log` becomes its frames' offsets, producers and types.
fn timeless_state(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let (files, checkpoints) = super::tests::target_state(dir);
    let mut out: Vec<(std::path::PathBuf, String)> = files
        .into_iter()
        .map(|(name, bytes)| {
            let text = match name.extension().and_then(|e| e.to_str()) {
                Some("log") => format!(
                    "{:?}",
                    segment_format::log::scan_frames(&bytes, 0)
                        .map(|f| {
                            let i = f.unwrap().info;
                            (i.base_offset, i.last_offset, i.producer_id, i.producer_epoch, i.control)
                        })
                        .collect::<Vec<_>>()
                ),
                Some("timeindex") => format!("{} bytes", bytes.len()),
                _ => format!("{bytes:?}"),
            };
            (name, text)
        })
        .collect();
    out.push(("checkpoints".into(), format!("{checkpoints:?}")));
    out
}

#[test]
fn a_crash_at_any_step_of_a_cut_is_finished_with_the_journaled_cut() {
    let reference = {
        let (mut f, _) = txn_fixture();
        f.promote().unwrap();
        timeless_state(&f.target)
    };
    let steps = {
        let (mut f, _) = txn_fixture();
        let mut seen = Vec::new();
        promote_with(&f.promote_request(), &mut f.catalog, &mut |s| seen.push(s)).unwrap();
        seen
    };
    for crash_at in &steps {
        let (mut f, wants) = txn_fixture();
        let request = f.promote_request();
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            promote_with(&request, &mut f.catalog, &mut |s| {
                if &s == crash_at {
                    panic!("crash at {s:?}");
                }
            })
        }));
        assert!(crashed.is_err(), "the hook fired at {crash_at:?}");
        if *crash_at == Step::Journaled {
            // A crash while building partition 0 leaves a partial copy with a marker already appended.
            let partial = f.target.join(PROMOTION_DIR).join(format!("{TOPIC}-0.building"));
            std::fs::create_dir_all(&partial).unwrap();
            std::fs::write(partial.join(segment_file_name(0, SegmentFileKind::Log)), b"partial").unwrap();
        }
        let report = f.promote().unwrap();
        for (p, want) in report.partitions.iter().zip(&wants) {
            assert_eq!(p.outcome, Outcome::Resumed, "crash at {crash_at:?}");
            assert_eq!(&p.transactions_aborted, want, "crash at {crash_at:?}");
        }
        // One marker per cut transaction, never two, and the same files as an uninterrupted promotion.
        assert_eq!(timeless_state(&f.target), reference, "crash at {crash_at:?}");
    }
}

#[test]
fn the_log_end_snapshot_and_the_scan_find_the_same_open_transactions() {
    // One segment (no roll, so the only snapshots are the empty one at its base, if any, and the clean shutdown's
    // at the log end) and several segments; with every transaction decided, and with two left open.
    for segment_bytes in [1 << 20, 700] {
        let dir = tempfile::tempdir().unwrap();
        let written = write_transactions(dir.path(), 0, segment_bytes);
        let w = &written.partition;
        assert!(
            w.snapshots.contains(&w.log_end_offset),
            "a clean shutdown leaves the log-end snapshot: {:?}",
            w.snapshots
        );
        let without_end: Vec<i64> = w.snapshots.iter().copied().filter(|o| *o < w.log_end_offset).collect();
        let with_end = find_open_transactions(&w.dir, &bases(w), &w.snapshots, w.log_end_offset).unwrap();
        let scanned = find_open_transactions(&w.dir, &bases(w), &without_end, w.log_end_offset).unwrap();
        assert_eq!(with_end, scanned, "segment bytes {segment_bytes}");
        assert_eq!(with_end, expected_cut(&written));
        assert_eq!(with_end.len(), 2);
    }

    let dir = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(dir.path(), TOPIC, 0, 0, config(Uuid([1; 16]))).unwrap();
    w.become_leader(SOURCE_EPOCH);
    let mut p = Producer {
        id: 5,
        epoch: 0,
        sequence: 0,
    };
    send(&mut w, &mut p, 2, true);
    end(&mut w, &p, ControlType::Commit, 1);
    send(&mut w, &mut p, 2, true);
    end(&mut w, &p, ControlType::Abort, 1);
    let w = w.close().unwrap();
    assert!(w.snapshots.contains(&w.log_end_offset));
    let with_end = find_open_transactions(&w.dir, &bases(&w), &w.snapshots, w.log_end_offset).unwrap();
    let scanned = find_open_transactions(&w.dir, &bases(&w), &[], w.log_end_offset).unwrap();
    assert_eq!(with_end, scanned);
    assert!(with_end.is_empty(), "{with_end:?}");
}

/// Every frame of the promoted partition `dir`'s `.log`s, in offset order.
fn promoted_frames(dir: &Path) -> Vec<segment_format::batch::BatchInfo> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let mut frames = Vec::new();
    for log in logs {
        LogFile::open(&log)
            .unwrap()
            .scan(|f| {
                frames.push(f.info);
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
    }
    frames
}

/// `--consistent-cut`: each partition ends before its first batch newer than T (the fixture stamps every record
/// of a batch with `1_700_000_000_000 + base offset`), the transactions open at the cut are aborted there, the
/// report says what was left behind, and the result is a log a broker loads (strict, deep verify). By copy, and by
/// rename (the cut segment copied, the segments after it left in the mirror).
#[test]
fn a_consistent_cut_ends_every_partition_before_its_first_batch_newer_than_t() {
    for handover in [Handover::Copy, Handover::Rename] {
        let (mut f, _) = txn_fixture();
        // Inside partition 0's segments and partition 1's single segment; the long transaction is open there.
        let t = 1_700_000_000_000 + f.written[0].log_end_offset / 2;
        let mirror_frames: Vec<Vec<segment_format::batch::BatchInfo>> =
            f.written.iter().map(|w| promoted_frames(&w.dir)).collect();
        let request = PromoteRequest {
            consistent_cut: Some(t),
            handover,
            ..f.promote_request()
        };
        let report = promote(&request, &mut f.catalog).unwrap();
        for (w, before) in f.written.iter().zip(&mirror_frames) {
            let p = report.partitions.iter().find(|p| p.partition == w.partition).unwrap();
            let first_left = before.iter().position(|i| i.max_timestamp > t).unwrap();
            let cut_offset = before[first_left].base_offset;
            let left = &before[first_left..];
            let c = p.consistent_cut.as_ref().expect("a cut");
            assert_eq!(c.timestamp_ms, t);
            assert_eq!(
                (c.cut_offset, c.mirror_end_offset),
                (cut_offset, w.log_end_offset),
                "{handover:?}"
            );
            assert_eq!(c.left_offsets, w.log_end_offset - cut_offset);
            assert_eq!(c.left_batches, left.len() as u64);
            assert_eq!(c.left_bytes, left.iter().map(|i| i.size).sum::<u64>());
            assert_eq!(
                (c.first_left_offset, c.first_left_timestamp),
                (cut_offset, before[first_left].max_timestamp)
            );
            assert_eq!(p.mirror_end_offset, Some(w.log_end_offset));
            // The transactions open at the cut (found independently: data without a marker before the cut).
            let mut open: BTreeMap<i64, i64> = BTreeMap::new();
            for i in &before[..first_left] {
                if i.is_control {
                    open.remove(&i.producer_id);
                } else if i.is_transactional {
                    open.entry(i.producer_id).or_insert(i.base_offset);
                }
            }
            assert!(open.contains_key(&LONG_OPEN), "{open:?}");
            let aborted: BTreeMap<i64, i64> = p
                .transactions_aborted
                .iter()
                .map(|c| (c.producer_id, c.first_offset))
                .collect();
            assert_eq!(aborted, open, "{handover:?}");
            for (k, c) in p.transactions_aborted.iter().enumerate() {
                assert_eq!(c.marker_offset, cut_offset + k as i64);
            }
            assert_eq!(p.log_end_offset, Some(cut_offset + open.len() as i64));
            // The target: the mirror's frames up to the cut, then the markers; no data newer than T.
            let dst = f.target.join(format!("{TOPIC}-{}", w.partition));
            let promoted = promoted_frames(&dst);
            let (data, markers) = promoted.split_at(first_left);
            let offsets = |v: &[segment_format::batch::BatchInfo]| -> Vec<(i64, i64)> {
                v.iter().map(|i| (i.base_offset, i.last_offset)).collect()
            };
            assert_eq!(offsets(data), offsets(&before[..first_left]));
            assert!(data.iter().all(|i| i.max_timestamp <= t));
            assert_eq!(markers.len(), open.len());
            assert!(markers.iter().all(|i| i.control == Some(ControlType::Abort)));
            // The catalog says what was left behind.
            let key = segmirror_catalog::PartitionKey::new("l", TOPIC, w.partition);
            let events = f
                .catalog
                .events(Some(segmirror_catalog::Subject::Partition(&key)), 100)
                .unwrap();
            let said = format!(
                "promoted up to offset {cut_offset} of the mirror's {}",
                w.log_end_offset
            );
            assert!(events.iter().any(|e| e.detail.contains(&said)), "{events:?}");
        }
        let verified = verify_paths(
            &[f.target.clone()],
            &VerifyOptions {
                depth: Depth::Deep,
                strictness: Strictness::Strict,
            },
            &NoProgress,
        );
        assert!(verified.io_errors.is_empty(), "{handover:?}: {:?}", verified.io_errors);
        assert!(verified.findings.is_empty(), "{handover:?}: {:#?}", verified.findings);
        if handover == Handover::Rename {
            // What was left behind stays in the mirror, whole: partition 0's last segment was not taken.
            let w = &f.written[0];
            let last = w.segments.last().unwrap().base_offset;
            assert!(w.dir.join(segment_file_name(last, SegmentFileKind::Log)).exists());
        }
    }
}

#[test]
fn a_scan_from_a_snapshot_starts_at_the_offset_index_entry_below_it_and_only_where_that_entry_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = indexed_writer(dir.path(), 1 << 20, 200);
    let mut decided = Producer {
        id: DECIDED,
        epoch: 0,
        sequence: 0,
    };
    for _ in 0..40 {
        send(&mut w, &mut decided, 2, true);
        end(&mut w, &decided, ControlType::Commit, 1);
    }
    let mut late = Producer {
        id: LATE_OPEN,
        epoch: 0,
        sequence: 0,
    };
    let first = send(&mut w, &mut late, 3, true);
    let mut idempotent = Producer {
        id: IDEMPOTENT,
        epoch: 0,
        sequence: 0,
    };
    for _ in 0..5 {
        send(&mut w, &mut idempotent, 2, false);
    }
    let w = w.close().unwrap();
    assert_eq!(w.segments.len(), 1, "one segment: the scan starts inside it");
    assert!(w.snapshots.contains(&w.log_end_offset));
    let expected = find_open_transactions(&w.dir, &bases(&w), &w.snapshots, w.log_end_offset).unwrap();
    assert_eq!(
        expected
            .iter()
            .map(|c| (c.producer_id, c.first_offset))
            .collect::<Vec<_>>(),
        [(LATE_OPEN, first)]
    );

    // Break the third frame's length: a scan from the segment's start fails there.
    let log = w.dir.join(segment_file_name(0, SegmentFileKind::Log));
    let mut positions = Vec::new();
    LogFile::open(&log)
        .unwrap()
        .scan(|f| {
            positions.push(f.info.position);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let at = usize::try_from(positions[2]).unwrap() + 8;
    bytes[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    std::fs::write(&log, &bytes).unwrap();
    assert!(
        find_open_transactions(&w.dir, &bases(&w), &[], w.log_end_offset).is_err(),
        "without a snapshot the whole segment is read, broken frame included"
    );
    // From the log-end snapshot: the transaction open there starts near the end, and the read starts at the
    // index entry below it, past the broken frame.
    let got = find_open_transactions(&w.dir, &bases(&w), &w.snapshots, w.log_end_offset).unwrap();
    assert_eq!(got, expected);

    // An index whose entries do not point at their batches is not trusted: the whole segment is read again.
    let index = w.dir.join(segment_file_name(0, SegmentFileKind::Index));
    let mut entries = segment_format::index::OffsetIndex::parse(&std::fs::read(&index).unwrap()).entries;
    assert!(entries.len() > 5, "{} entries", entries.len());
    for e in &mut entries {
        e.position += 1;
    }
    std::fs::write(&index, segment_format::index::serialize_offset_index(&entries)).unwrap();
    assert!(find_open_transactions(&w.dir, &bases(&w), &w.snapshots, w.log_end_offset).is_err());
}

/// A source partition like [`write_transactions`]'s whose transactions are all decided by its end: the long one is
/// committed after the last round, the late one aborted, and idempotent writes follow.
fn write_decided(root: &Path, partition: i32, segment_bytes: u64) -> WrittenPartition {
    let (mut w, mut long, mut idem) = source_writer(root, partition, segment_bytes);
    let mut late = Producer {
        id: LATE_OPEN,
        epoch: 1,
        sequence: 0,
    };
    send(&mut w, &mut long, 2, true);
    for _ in 0..6 {
        send(&mut w, &mut idem, 3, false);
        send(&mut w, &mut long, 1, true);
    }
    end(&mut w, &long, ControlType::Commit, 7);
    send(&mut w, &mut late, 3, true);
    end(&mut w, &late, ControlType::Abort, 7);
    for _ in 0..4 {
        send(&mut w, &mut idem, 3, false);
    }
    w.close().unwrap()
}

/// The installs' records give exactly the open transactions the walk finds (first offsets, epochs, counts), from
/// whichever snapshot the walk starts (every one, none at the log end as on a live broker, only the oldest, none):
/// with every segment recorded, always, even when the starting snapshot already holds a transaction open that is
/// still open at the end (counted from the records before the snapshot); not when that transaction began before
/// the mirror's first segment. With any segment's record missing or describing another version they answer
/// nothing.
#[test]
fn recorded_transaction_ends_give_the_walks_open_transactions_wherever_they_can_tell() {
    let dir = tempfile::tempdir().unwrap();
    let open_at_end = write_transactions(&dir.path().join("open"), 0, 700).partition;
    let decided = write_decided(&dir.path().join("decided"), 0, 700);
    let decided_one_segment = write_decided(&dir.path().join("one"), 0, 1 << 20);
    let (mut aborted_from_records, mut walked_instead) = (0, 0);
    for w in [&open_at_end, &decided, &decided_one_segment] {
        let recorded = recorded_ends(w);
        let without_end: Vec<i64> = w.snapshots.iter().copied().filter(|o| *o < w.log_end_offset).collect();
        for snapshots in [w.snapshots.clone(), without_end, w.snapshots[..1].to_vec(), Vec::new()] {
            let walked = find_open_transactions(&w.dir, &bases(w), &snapshots, w.log_end_offset).unwrap();
            let from_records = recorded_txns::open_at_end(&w.dir, &recorded, &bases(w), &snapshots, w.log_end_offset);
            let context = format!("{:?} from snapshots {snapshots:?}: walked {walked:?}", w.dir);
            match &from_records {
                Some(cut) => assert_eq!(cut, &walked, "{context}"),
                None => assert!(!walked.is_empty() && !snapshots.is_empty(), "{context}"),
            }
            match &from_records {
                Some(cut) if !cut.is_empty() => aborted_from_records += 1,
                None => walked_instead += 1,
                _ => {}
            }
            // Without one segment's record, or with a record of a shorter version, nothing is known.
            let read_from = snapshots
                .iter()
                .copied()
                .filter(|s| *s < w.log_end_offset)
                .max()
                .unwrap_or(0);
            let last_base = *bases(w).last().unwrap();
            if read_from <= last_base && snapshots.last() != Some(&w.log_end_offset) {
                let mut missing = recorded.clone();
                missing.remove(&last_base);
                assert_eq!(
                    recorded_txns::open_at_end(&w.dir, &missing, &bases(w), &snapshots, w.log_end_offset),
                    None
                );
                let mut shorter = recorded.clone();
                shorter.get_mut(&last_base).unwrap().0 -= 1;
                assert_eq!(
                    recorded_txns::open_at_end(&w.dir, &shorter, &bases(w), &snapshots, w.log_end_offset),
                    None
                );
                // A record written before runs were kept says which producers are open, not where they began.
                let without_runs: Recorded = recorded
                    .iter()
                    .map(|(base, (next, ends))| (*base, (*next, ends.as_ref().map(|e| e.without_runs()))))
                    .collect();
                let answer = recorded_txns::open_at_end(&w.dir, &without_runs, &bases(w), &snapshots, w.log_end_offset);
                assert_eq!(answer.is_some(), walked.is_empty(), "{context}");
            }
        }
    }
    assert!(decided.segments.len() >= 4, "{:?}", bases(&decided));
    // With every segment recorded the records tell all, from every starting snapshot: a transaction the snapshot
    // holds open is counted from the records of the segments before it.
    assert!(
        aborted_from_records > 0 && walked_instead == 0,
        "{aborted_from_records} {walked_instead}"
    );
    // Retention took the start of the transaction open across the second segment's base: the mirror from there on,
    // its snapshot holding it open. The records cannot count what is gone; the walk decides.
    let w = &open_at_end;
    let from_second = bases(w)[1..].to_vec();
    let snapshot = vec![from_second[0]];
    assert!(w.snapshots.contains(&snapshot[0]), "{:?}", w.snapshots);
    let walked = find_open_transactions(&w.dir, &from_second, &snapshot, w.log_end_offset).unwrap();
    assert!(walked.iter().any(|c| c.first_offset < from_second[0]), "{walked:?}");
    let recorded = recorded_ends(w);
    assert_eq!(
        recorded_txns::open_at_end(&w.dir, &recorded, &from_second, &snapshot, w.log_end_offset),
        None
    );
}

/// A consistent cut inside a segment: the records folded up to that segment and a walk of its batches below the cut
/// give exactly what the walk from the start finds, at every batch boundary inside every segment and from every
/// starting snapshot; a segment whose record names no transactional producer is not walked at all. And where no
/// marker follows the cut, the transactions open at the end and the batches after the cut alone give the same.
#[test]
fn a_cut_inside_a_segment_needs_the_records_and_that_segment_below_the_cut_only() {
    let dir = tempfile::tempdir().unwrap();
    let open_at_end = write_transactions(&dir.path().join("open"), 0, 700).partition;
    let decided = write_decided(&dir.path().join("decided"), 0, 700);
    let (mut from_records, mut quiet, mut from_the_end, mut read_back, mut cuts_tried) = (0, 0, 0, 0, 0);
    let (mut by_closed, mut by_record, mut by_record_later) = (0, 0, 0);
    let (mut by_closed_log, mut marker_after) = (0, 0);
    let (mut by_segment_log, mut not_last_in_segment) = (0, 0);
    for w in [&open_at_end, &decided] {
        let recorded = recorded_ends(w);
        let all = bases(w);
        let closed = last_closed(w);
        let logged = every_closed(w);
        // Every segment's log of every marker, as an install writes it, and as a tail appender's seal writes it
        // from its closed log (the transactions begun in the segment only); the records say they keep one.
        let segment_logs = segment_logs(w);
        let with_logs = with_segment_logs(&recorded, &segment_logs);
        for (i, base) in all.iter().enumerate() {
            let end = all.get(i + 1).copied().unwrap_or(w.log_end_offset);
            let mut cuts = Vec::new();
            LogFile::open(w.dir.join(segment_file_name(*base, SegmentFileKind::Log)))
                .unwrap()
                .scan(|f| {
                    if f.info.position > 0 {
                        cuts.push(f.info.base_offset);
                    }
                    std::ops::ControlFlow::Continue(())
                })
                .unwrap();
            let segments = all[..=i].to_vec();
            for cut_offset in cuts {
                for snapshots in [w.snapshots.clone(), Vec::new()] {
                    let snapshots: Vec<i64> = snapshots.into_iter().filter(|o| *o <= cut_offset).collect();
                    let walked = find_open_transactions(&w.dir, &segments, &snapshots, cut_offset).unwrap();
                    let cut = recorded_txns::CutInside {
                        base: *base,
                        end,
                        cut_offset,
                    };
                    let answer = recorded_txns::open_at_cut(&w.dir, &recorded, &segments, &snapshots, cut).unwrap();
                    if let Some(found) = answer {
                        assert_eq!(found, walked, "{:?} cut at {cut_offset} from {snapshots:?}", w.dir);
                        from_records += 1;
                    }
                    // From the end: the transactions open there and the batches after the cut alone.
                    let at_end =
                        recorded_txns::open_at(&w.dir, &recorded, &all, &w.snapshots, w.log_end_offset).unwrap();
                    let after = after_cut(&w.dir, &all[i..], cut_offset);
                    if let Some(found) = recorded_txns::open_at_cut_from_end(&at_end, &after, cut_offset) {
                        assert_eq!(found, walked, "{:?} cut at {cut_offset}, from the end", w.dir);
                        from_the_end += 1;
                    }
                    // And where a marker follows the cut: those producers read backwards from the cut (the records
                    // without their closings, as written before them, which would decide some).
                    let back = recorded_txns::open_at_cut_reading_back(
                        &w.dir,
                        &without_closings(&recorded),
                        &segments,
                        &snapshots,
                        cut,
                        recorded_txns::FromEnd {
                            at_end: &at_end,
                            closed: &[],
                            closed_log: None,
                            segment_log: None,
                            after: &after,
                        },
                    )
                    .unwrap();
                    if let Some(found) = back {
                        assert_eq!(found, walked, "{:?} cut at {cut_offset}, read back from it", w.dir);
                        read_back += 1;
                    }
                    // Or decided by each producer's last closed transaction, as a tail appender keeps it, or by the
                    // segment's record of each producer's last marker in it: where either decides every producer a
                    // marker follows, nothing before the cut is read (garbage there changes nothing).
                    let undecided: std::collections::BTreeSet<i64> = after
                        .producers
                        .iter()
                        .filter(|(_, a)| a.marker)
                        .map(|(p, _)| *p)
                        .collect();
                    let mut left_by_closed = undecided.clone();
                    recorded_txns::decided_by_closed(&closed, &after, &mut left_by_closed, 0, cut_offset);
                    let mut left_by_record = undecided.clone();
                    let at_base = recorded_txns::open_at(&w.dir, &recorded, &segments, &snapshots, *base);
                    if let Some(at_base) = &at_base {
                        recorded_txns::decided_by_record(&recorded, cut, at_base, &after, &mut left_by_record, 0, None);
                    }
                    let told_by_closed = !undecided.is_empty() && left_by_closed.is_empty();
                    let told_by_record = !undecided.is_empty() && at_base.is_some() && left_by_record.is_empty();
                    // Some of them by a first marker after the cut in a later segment.
                    let later = undecided
                        .iter()
                        .any(|p| after.producers[p].first_marker.is_some_and(|m| m >= end));
                    // Every transaction closed, as a closed log holds them: every producer a marker follows is
                    // decided by its first marker after the cut, and nothing before the cut is read.
                    let mut left_by_log = undecided.clone();
                    recorded_txns::decided_by_closed(&logged, &after, &mut left_by_log, 0, cut_offset);
                    assert!(
                        left_by_log.is_empty(),
                        "{:?} cut at {cut_offset}: {left_by_log:?}",
                        w.dir
                    );
                    let told_by_log = !undecided.is_empty();
                    by_closed_log += usize::from(told_by_log);
                    marker_after += usize::from(undecided.iter().any(|p| {
                        let a = &after.producers[p];
                        a.first_marker != a.last_marker
                    }));
                    let read_log: &dyn Fn() -> Result<Vec<segment_format::txn_index::ClosedTransaction>> =
                        &|| Ok(logged.clone());
                    // The segment's log decides every producer whose first marker after the cut lies in the
                    // segment, and the record the others: every one, nothing before the cut read.
                    let mut left_by_segment_log = undecided.clone();
                    if let Some(at_base) = &at_base {
                        let log = Some(&segment_logs[base][..]);
                        recorded_txns::decided_by_record(
                            &with_logs,
                            cut,
                            at_base,
                            &after,
                            &mut left_by_segment_log,
                            0,
                            log,
                        );
                        assert!(
                            left_by_segment_log.is_empty(),
                            "{:?} cut at {cut_offset}: {left_by_segment_log:?}",
                            w.dir
                        );
                    }
                    let told_by_segment_log = !undecided.is_empty() && at_base.is_some();
                    by_segment_log += usize::from(told_by_segment_log);
                    // Of them, cuts with a producer whose first marker after the cut is not its last in the segment:
                    // what only the segment's log tells.
                    not_last_in_segment += usize::from(
                        told_by_segment_log
                            && undecided.iter().any(|p| {
                                let m = after.producers[p].first_marker;
                                m.is_some_and(|m| {
                                    m < end
                                        && recorded[base]
                                            .1
                                            .as_ref()
                                            .and_then(|e| e.closings.as_ref())
                                            .is_none_or(|c| c.get(p).is_none_or(|c| c.marker_offset != m))
                                })
                            }),
                    );
                    let read_segment_log: &dyn Fn(i64, FileRecord) -> Result<Vec<SegmentClosing>> =
                        &|base, _| Ok(segment_logs[&base].clone());
                    let converted = closed_log::segment_closings_from(&logged, *base, end);
                    let read_converted: &dyn Fn(i64, FileRecord) -> Result<Vec<SegmentClosing>> =
                        &|_, _| Ok(converted.clone());
                    let cases = [
                        (&closed[..], None, None, &recorded, told_by_closed),
                        (&[][..], None, None, &recorded, told_by_record),
                        (&[][..], Some(read_log), None, &recorded, told_by_log),
                        (&[][..], None, Some(read_segment_log), &with_logs, told_by_segment_log),
                        (&[][..], None, Some(read_converted), &with_logs, false),
                    ];
                    for (kept_closed, closed_log, segment_log, recorded, blind) in cases {
                        let log = w.dir.join(segment_file_name(*base, SegmentFileKind::Log));
                        let kept = std::fs::read(&log).unwrap();
                        if blind {
                            let cut_at = cut_position(&log, cut_offset);
                            let mut garbage = kept.clone();
                            garbage[..cut_at].fill(0xFF);
                            std::fs::write(&log, garbage).unwrap();
                        }
                        let back = recorded_txns::open_at_cut_reading_back(
                            &w.dir,
                            recorded,
                            &segments,
                            &snapshots,
                            cut,
                            recorded_txns::FromEnd {
                                at_end: &at_end,
                                closed: kept_closed,
                                closed_log,
                                segment_log,
                                after: &after,
                            },
                        );
                        if blind {
                            std::fs::write(&log, &kept).unwrap();
                        }
                        let found = back.unwrap().expect("told");
                        assert_eq!(
                            found,
                            walked,
                            "{:?} cut at {cut_offset}, closed transactions {}, closed log {}, segment log {}",
                            w.dir,
                            kept_closed.len(),
                            closed_log.is_some(),
                            segment_log.is_some()
                        );
                    }
                    by_closed += usize::from(told_by_closed);
                    by_record += usize::from(told_by_record);
                    by_record_later += usize::from(told_by_record && later);
                    cuts_tried += 1;
                    // A segment whose record names no transactional producer is not read: garbage in its place
                    // (which a walk refuses) changes nothing.
                    let mut without_txns = recorded.clone();
                    without_txns.insert(*base, (end, Some(segment_format::txn_ends::TxnEnds::default())));
                    let log = w.dir.join(segment_file_name(*base, SegmentFileKind::Log));
                    let kept = std::fs::read(&log).unwrap();
                    std::fs::write(&log, [0xFF; 100]).unwrap();
                    let blind = recorded_txns::open_at_cut(&w.dir, &without_txns, &segments, &snapshots, cut);
                    std::fs::write(&log, kept).unwrap();
                    if let Ok(Some(_)) = blind {
                        quiet += 1;
                    }
                }
            }
        }
    }
    assert!(
        from_records > 20 && quiet > 20 && from_the_end > 5,
        "{from_records} {quiet} {from_the_end}"
    );
    // Every cut is told by the end, the batches after it and a reading back from it.
    assert_eq!(read_back, cuts_tried);
    // Among them producers with two markers or more after the cut: what only a closed log tells.
    assert!(by_closed_log > 20 && marker_after > 5, "{by_closed_log} {marker_after}");
    assert!(
        by_segment_log > 20 && not_last_in_segment >= 2,
        "{by_segment_log} {not_last_in_segment}"
    );
    assert!(
        by_closed > 5 && by_record > 5 && by_record_later > 5,
        "cuts told without reading back: {by_closed} by the closed transactions, {by_record} by the records \
         ({by_record_later} with a producer's first marker after the cut in a later segment)"
    );
}

/// Each segment's log of every marker (`segment_log`), by base, as an install writes it.
fn segment_logs(w: &WrittenPartition) -> BTreeMap<i64, Vec<SegmentClosing>> {
    let all = bases(w);
    all.iter()
        .enumerate()
        .map(|(i, base)| {
            let next = all.get(i + 1).copied().unwrap_or(w.log_end_offset);
            let log = w.dir.join(segment_file_name(*base, SegmentFileKind::Log));
            (*base, segment_format::txn_ends::logged_of_log(&log, next).unwrap().1)
        })
        .collect()
}

/// `recorded` with each segment's record saying it keeps a log of `logs`' entries (the reader in these tests takes
/// the entries from `logs`, not from a file).
fn with_segment_logs(recorded: &Recorded, logs: &BTreeMap<i64, Vec<SegmentClosing>>) -> Recorded {
    recorded
        .iter()
        .map(|(base, (next, ends))| {
            let ends = ends.as_ref().map(|e| segment_format::txn_ends::TxnEnds {
                log: Some(FileRecord::of(
                    &closed_log::serialize_segment(&logs[base]),
                    logs[base].len(),
                )),
                ..e.clone()
            });
            (*base, (*next, ends))
        })
        .collect()
}

/// `recorded` as written before closings were recorded.
fn without_closings(recorded: &Recorded) -> Recorded {
    recorded
        .iter()
        .map(|(base, (next, ends))| (*base, (*next, ends.as_ref().map(|e| e.without_closings()))))
        .collect()
}

/// Every transaction closed by a marker in `w`, in marker order, as a tail appender that appended all of it sees
/// them close (its closed log, `direct::Kept::closed_log`, holds those of its active segment).
fn every_closed(w: &WrittenPartition) -> Vec<segment_format::txn_index::ClosedTransaction> {
    let mut tracker = segment_format::txn_index::TxnTracker::new();
    let mut closed = Vec::new();
    for base in bases(w) {
        LogFile::open(w.dir.join(segment_file_name(base, SegmentFileKind::Log)))
            .unwrap()
            .scan(|f| {
                closed.extend(tracker.on_batch_closing(&f.info).1);
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
    }
    closed
}

/// Each producer's last transaction closed by a marker in `w`, as a tail appender that appended all of it keeps
/// them (`direct::Kept::closed`, without its bound).
fn last_closed(w: &WrittenPartition) -> Vec<segment_format::txn_index::ClosedTransaction> {
    let last: BTreeMap<i64, segment_format::txn_index::ClosedTransaction> =
        every_closed(w).into_iter().map(|c| (c.producer_id, c)).collect();
    let mut closed: Vec<_> = last.into_values().collect();
    closed.sort_by_key(|c| c.marker_offset);
    closed
}

/// The position of the batch at `offset` in the segment file `log`.
fn cut_position(log: &Path, offset: i64) -> usize {
    let mut at = None;
    LogFile::open(log)
        .unwrap()
        .scan(|f| {
            if f.info.base_offset == offset {
                at = Some(f.info.position as usize);
                return std::ops::ControlFlow::Break(());
            }
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    at.unwrap()
}

/// A bucket-fed mirror of a live broker (no log-end snapshot) whose transactions all ended: promotion takes "none
/// open" from the installs' records instead of reading the segments, and leaves the same log dir as the walk.
#[test]
fn a_promotion_trusting_the_recorded_transaction_ends_leaves_what_the_walk_leaves() {
    let live = |root: &Path, partition: i32| {
        let w = write_decided(root, partition, if partition == 0 { 700 } else { 1 << 20 });
        // A running broker has written no snapshot at its log end.
        std::fs::remove_file(
            w.dir
                .join(segment_file_name(w.log_end_offset, SegmentFileKind::Snapshot)),
        )
        .unwrap();
        WrittenPartition {
            snapshots: w.snapshots.iter().copied().filter(|o| *o < w.log_end_offset).collect(),
            ..w
        }
    };
    let mut promoted = Vec::new();
    for recorded in [true, false] {
        let mut f = fixture_recording(live, [0, 0], recorded);
        let report = f.promote().unwrap();
        assert!(report.partitions.iter().all(|p| p.transactions_aborted.is_empty()));
        let used = super::tail_kept::used::under(&f.mirror);
        assert_eq!(used.contains(&"recorded-transactions"), recorded, "{used:?}");
        promoted.push(target_state(&f.target));
    }
    assert!(promoted[0] == promoted[1], "the same files and checkpoints either way");
}

/// A bucket-fed mirror of a live broker with transactions open at its end and no snapshot the walk would start
/// from: promotion aborts them from the installs' records (one transaction spans every segment), appends the markers
/// to the handed-over last segment, and leaves the same log dir as the walk does; a crash at any step of it, then a
/// rerun, leaves that log dir too (the rerun cuts the handed-over segment back to its planned size).
#[test]
fn open_transactions_of_a_bucket_fed_mirror_are_aborted_from_the_records_in_the_handed_over_segment() {
    let live_open = |root: &Path, partition: i32| {
        let w = write_transactions(root, partition, if partition == 0 { 700 } else { 1 << 20 }).partition;
        for offset in &w.snapshots {
            std::fs::remove_file(w.dir.join(segment_file_name(*offset, SegmentFileKind::Snapshot))).unwrap();
        }
        WrittenPartition {
            snapshots: Vec::new(),
            ..w
        }
    };
    let rename = |f: &super::tests::Fixture| PromoteRequest {
        mirror_root: f.mirror.clone(),
        log_dir: f.target.clone(),
        handover: Handover::Rename,
        ..PromoteRequest::default()
    };
    super::plan::FIXED_NOW_MS.with(|t| t.set(Some(1_800_000_000_000)));
    let mut reference = None;
    let mut steps = Vec::new();
    for recorded in [true, false] {
        let mut f = fixture_recording(live_open, [0, 0], recorded);
        assert!(f.written[0].segments.len() >= 3, "{:?}", f.written[0].segments);
        let report = promote_with(&rename(&f), &mut f.catalog, &mut |s| steps.push(s)).unwrap();
        for p in &report.partitions {
            assert_eq!(p.transactions_aborted.len(), 2, "{p:?}");
            assert!(p.handed_over, "{p:?}");
        }
        let used = super::tail_kept::used::under(&f.mirror);
        assert_eq!(used.contains(&"recorded-transactions"), recorded, "{used:?}");
        let state = target_state(&f.target);
        match &reference {
            None => reference = Some(state),
            Some(r) => assert!(r == &state, "the same files and checkpoints either way"),
        }
    }
    let reference = reference.unwrap();
    steps.dedup();
    assert!(steps.iter().any(|s| matches!(s, journal::Step::Built(_))), "{steps:?}");
    for crash_at in steps {
        let mut f = fixture_recording(live_open, [0, 0], true);
        let request = rename(&f);
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            promote_with(&request, &mut f.catalog, &mut |s| {
                if s == crash_at {
                    panic!("crash at {s:?}");
                }
            })
        }));
        assert!(crashed.is_err(), "the hook fired at {crash_at:?}");
        promote(&request, &mut f.catalog).unwrap();
        assert!(target_state(&f.target) == reference, "crash at {crash_at:?}");
    }
    super::plan::FIXED_NOW_MS.with(|t| t.set(None));
}

/// Reading back from a cut inside a large, densely indexed segment (an index entry every 256 bytes, some 300 KiB
/// of batches): the chunks grow from a few KiB at the cut to MiBs further back, and whatever the cut, a producer
/// whose transaction began far back, one whose last marker lies far back and one deciding transactions often are
/// found open or closed exactly as the walk from the segment's base finds them.
#[test]
fn reading_back_in_growing_chunks_finds_what_the_walk_finds() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = indexed_writer(dir.path(), 64 << 20, 256);
    let [mut long, mut idem, mut decided, mut late] = [(LONG_OPEN, 2), (IDEMPOTENT, 0), (DECIDED, 5), (LATE_OPEN, 1)]
        .map(|(id, epoch)| Producer { id, epoch, sequence: 0 });
    // LATE_OPEN commits once at the start: its marker lies far back from every later cut.
    send(&mut w, &mut late, 1, true);
    end(&mut w, &late, ControlType::Commit, 7);
    // LONG_OPEN's transaction spans almost the whole segment; DECIDED decides one every ten rounds.
    send(&mut w, &mut long, 1, true);
    for round in 0..2_000 {
        send(&mut w, &mut idem, 3, false);
        if round % 10 == 0 {
            send(&mut w, &mut decided, 1, true);
        }
        if round % 10 == 5 {
            end(&mut w, &decided, ControlType::Abort, 7);
        }
        if round % 400 == 0 {
            send(&mut w, &mut long, 1, true);
        }
    }
    end(&mut w, &long, ControlType::Commit, 7);
    send(&mut w, &mut late, 1, true);
    end(&mut w, &late, ControlType::Commit, 7);
    let written = w.close().unwrap();
    assert_eq!(bases(&written), [0], "one segment");
    let log = written.dir.join(segment_file_name(0, SegmentFileKind::Log));
    assert!(std::fs::metadata(&log).unwrap().len() > 256 << 10);
    let recorded = recorded_ends(&written);
    let all = bases(&written);
    let at_end = recorded_txns::open_at(
        &written.dir,
        &recorded,
        &all,
        &written.snapshots,
        written.log_end_offset,
    )
    .unwrap();
    let mut cuts = Vec::new();
    LogFile::open(&log)
        .unwrap()
        .scan(|f| {
            cuts.push(f.info.base_offset);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    let mut read_back = 0;
    for cut_offset in cuts.into_iter().skip(1).step_by(97) {
        let walked = find_open_transactions(&written.dir, &all, &[], cut_offset).unwrap();
        let after = after_cut(&written.dir, &all, cut_offset);
        let cut = recorded_txns::CutInside {
            base: 0,
            end: written.log_end_offset,
            cut_offset,
        };
        // Records without closings (as written before them): the producers a marker follows are read back.
        let back = recorded_txns::open_at_cut_reading_back(
            &written.dir,
            &without_closings(&recorded),
            &all,
            &[],
            cut,
            recorded_txns::FromEnd {
                at_end: &at_end,
                closed: &[],
                closed_log: None,
                segment_log: None,
                after: &after,
            },
        )
        .unwrap();
        assert_eq!(back.as_ref(), Some(&walked), "cut at {cut_offset}");
        read_back += 1;
    }
    assert!(read_back > 20, "{read_back} cuts");
    assert!(super::tail_kept::used::under(&written.dir).contains(&"read-back"));
}
