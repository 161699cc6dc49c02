//! Partitions written by the byte-exact writer (several segments, transactions with aborts and an open one,
//! compressed batches, a running broker's preallocated indexes), read back through every function.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use segment_format::batch::{Compression, ControlType};
use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint};
use segment_format::control::EndTxnMarker;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::txn_index::TxnIndex;
use segment_format::writer::{AppendInfo, PartitionWriter, WriterConfig};

use super::*;
use crate::replica::AbortedTxn;

/// One batch as written: where it landed and its bytes as on disk.
#[derive(Debug, Clone)]
struct Written {
    info: AppendInfo,
    bytes: Vec<u8>,
    /// `(offset, timestamp)` of each record.
    records: Vec<(i64, i64)>,
}

/// A written partition and what went into it.
struct Partition {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    batches: Vec<Written>,
    /// Aborted transactions `(producer, first offset)` in marker order.
    aborted: Vec<AbortedTxn>,
    /// First offset of the transaction left open at the end.
    open_from: Option<i64>,
    end: i64,
}

impl Partition {
    fn segments(&self) -> Vec<i64> {
        Listing::of(&self.dir).unwrap().segments
    }

    fn file(&self, base: i64, kind: SegmentFileKind) -> PathBuf {
        self.dir.join(segment_file_name(base, kind))
    }

    /// The bytes of batches `range` of [`Partition::batches`], concatenated.
    fn bytes_of(&self, range: std::ops::Range<usize>) -> Vec<u8> {
        self.batches[range].iter().flat_map(|b| b.bytes.clone()).collect()
    }

    /// Index of the batch holding `offset`.
    fn batch_holding(&self, offset: i64) -> usize {
        self.batches.iter().position(|b| b.info.last_offset >= offset).unwrap()
    }
}

fn marker(t: ControlType) -> EndTxnMarker {
    EndTxnMarker {
        control_type: t,
        coordinator_epoch: 3,
    }
}

/// What to append.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `n` records (timestamps from `ts`, 10 ms apart), compressed with `codec`.
    Plain { n: i32, ts: i64, codec: Compression },
    /// `n` transactional records of `producer`.
    Txn { producer: i64, n: i32, ts: i64 },
    /// The end marker of `producer`'s transaction.
    End { producer: i64, abort: bool, ts: i64 },
    /// Records whose timestamps go `ts`, `ts + 500`, `ts + 100`: the largest is the second record.
    Unordered { ts: i64 },
}

fn records(n: i32, ts: i64) -> Vec<RecordSpec> {
    (0..n)
        .map(|i| {
            RecordSpec::new(i, ts + 10 * i64::from(i))
                .with_key(format!("k{i}"))
                .with_value(vec![b'v'; 40])
        })
        .collect()
}

fn write(config: WriterConfig, base: i64, ops: &[Op]) -> Partition {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "t", 0, base, config).unwrap();
    let mut seqs: HashMap<i64, i32> = HashMap::new();
    let mut open: HashMap<i64, i64> = HashMap::new();
    let mut aborted = Vec::new();
    let mut appended = Vec::new();
    for op in ops {
        let (info, recs) = match *op {
            Op::Plain { n, ts, codec } => {
                let specs = records(n, ts);
                let info = w
                    .append(BatchBuilder::new(0).compression(codec).records(specs.clone()))
                    .unwrap();
                (info, specs)
            }
            Op::Txn { producer, n, ts } => {
                let seq = seqs.entry(producer).or_insert(0);
                let specs = records(n, ts);
                let b = BatchBuilder::new(0)
                    .producer(producer, 0, *seq)
                    .transactional(true)
                    .records(specs.clone());
                *seq += n;
                let info = w.append(b).unwrap();
                open.entry(producer).or_insert(info.first_offset);
                (info, specs)
            }
            Op::End { producer, abort, ts } => {
                let t = if abort { ControlType::Abort } else { ControlType::Commit };
                let info = w.append_end_txn_marker(producer, 0, marker(t), ts, 0).unwrap();
                if let Some(first) = open.remove(&producer) {
                    if abort {
                        aborted.push(AbortedTxn {
                            producer_id: producer,
                            first_offset: first,
                        });
                    }
                }
                (info, vec![RecordSpec::new(0, ts)])
            }
            Op::Unordered { ts } => {
                let specs = vec![
                    RecordSpec::new(0, ts).with_value(vec![1; 30]),
                    RecordSpec::new(1, ts + 500).with_value(vec![2; 30]),
                    RecordSpec::new(2, ts + 100).with_value(vec![3; 30]),
                ];
                let info = w.append(BatchBuilder::new(0).records(specs.clone())).unwrap();
                (info, specs)
            }
        };
        let recs = recs
            .iter()
            .map(|r| (info.first_offset + i64::from(r.offset_delta), r.timestamp))
            .collect();
        appended.push((info, recs));
    }
    let end = w.next_offset();
    let written = w.close().unwrap();
    let dir = written.dir.clone();
    let batches = appended
        .into_iter()
        .map(|(info, records)| {
            let log = fs::read(dir.join(segment_file_name(info.segment_base_offset, SegmentFileKind::Log))).unwrap();
            let bytes = log[info.position as usize..(info.position + info.size) as usize].to_vec();
            Written { info, bytes, records }
        })
        .collect();
    Partition {
        _tmp: tmp,
        dir,
        batches,
        aborted,
        open_from: open.values().min().copied(),
        end,
    }
}

fn config(running: bool) -> WriterConfig {
    WriterConfig {
        segment_bytes: 1500,
        index_interval_bytes: 150,
        running,
        fsync: false,
        ..WriterConfig::default()
    }
}

/// Several segments: two aborted transactions (one across a segment boundary), a committed one, plain and
/// compressed batches, and producer 9's transaction open at the end.
fn mixed_ops() -> Vec<Op> {
    let plain = |n, ts| Op::Plain {
        n,
        ts,
        codec: Compression::None,
    };
    let mut ops = vec![
        Op::Txn {
            producer: 1,
            n: 3,
            ts: 1_000,
        },
        plain(2, 1_100),
        Op::Txn {
            producer: 2,
            n: 2,
            ts: 1_200,
        },
        Op::Txn {
            producer: 1,
            n: 2,
            ts: 1_300,
        },
        Op::End {
            producer: 1,
            abort: true,
            ts: 1_400,
        },
        Op::Plain {
            n: 5,
            ts: 1_500,
            codec: Compression::Zstd,
        },
        Op::End {
            producer: 2,
            abort: false,
            ts: 1_600,
        },
        Op::Txn {
            producer: 3,
            n: 2,
            ts: 1_700,
        },
    ];
    for k in 0..12 {
        ops.push(plain(3, 2_000 + 100 * k));
    }
    ops.push(Op::Unordered { ts: 4_000 });
    ops.push(Op::End {
        producer: 3,
        abort: true,
        ts: 4_100,
    });
    for k in 0..6 {
        ops.push(Op::Plain {
            n: 4,
            ts: 5_000 + 100 * k,
            codec: Compression::Gzip,
        });
    }
    ops.push(Op::Txn {
        producer: 9,
        n: 2,
        ts: 6_000,
    });
    ops.push(plain(2, 6_100));
    ops
}

/// The batch of producer 3's abort in [`mixed_ops`].
const ABORT3: usize = 21;

fn read_all(p: &Partition, offset: i64, upper: i64, max_bytes: usize) -> (Vec<u8>, Fetched) {
    let mut out = Vec::new();
    let fetched = read_batches(&p.dir, offset, upper, max_bytes, &mut out).unwrap();
    assert_eq!(fetched.bytes, out.len());
    (out, fetched)
}

#[test]
fn the_scenario_spans_segments_with_preallocated_indexes() {
    let p = write(config(true), 0, &mixed_ops());
    assert!(p.segments().len() >= 4, "{:?}", p.segments());
    let active = *p.segments().last().unwrap();
    // A running broker's active index: preallocated, ending in zero slots.
    let index = fs::read(p.file(active, SegmentFileKind::Index)).unwrap();
    assert!(index.len() > 1000 && index.ends_with(&[0; 16]), "{}", index.len());
}

#[test]
fn reads_everything_across_segments() {
    for running in [false, true] {
        let p = write(config(running), 0, &mixed_ops());
        let (out, fetched) = read_all(&p, 0, p.end, 1 << 20);
        assert_eq!(out, p.bytes_of(0..p.batches.len()), "running {running}");
        assert_eq!(fetched.batches, p.batches.len());
        assert_eq!(fetched.next_offset, Some(p.end));
    }
}

#[test]
fn upper_in_the_middle_of_the_active_segment() {
    let p = write(config(true), 0, &mixed_ops());
    let active = *p.segments().last().unwrap();
    let in_active: Vec<usize> = (0..p.batches.len())
        .filter(|&i| p.batches[i].info.segment_base_offset == active)
        .collect();
    assert!(in_active.len() >= 2, "{in_active:?}");
    let cut = in_active[1];
    let upper = p.batches[cut].info.first_offset;
    let (out, fetched) = read_all(&p, 0, upper, 1 << 20);
    assert_eq!(out, p.bytes_of(0..cut));
    assert_eq!(fetched.next_offset, Some(upper));
    // From inside the active segment, up to the same bound.
    let from = p.batches[in_active[0]].info.first_offset;
    let (out, _) = read_all(&p, from, upper, 1 << 20);
    assert_eq!(out, p.bytes_of(in_active[0]..cut));
    // At the bound: nothing, without touching the files.
    let (out, fetched) = read_all(&p, upper, upper, 1 << 20);
    assert!(out.is_empty());
    assert_eq!(fetched, Fetched::default());
}

#[test]
fn max_bytes_keeps_whole_batches_and_always_the_first() {
    let p = write(config(false), 0, &mixed_ops());
    let first = &p.batches[0];
    let (out, fetched) = read_all(&p, 0, p.end, 10);
    assert_eq!(out, first.bytes, "a first batch larger than max_bytes comes whole");
    assert_eq!(fetched.next_offset, Some(first.info.last_offset + 1));
    // Room for two and a half batches: two.
    let two = (first.info.size + p.batches[1].info.size) as usize;
    let (out, _) = read_all(&p, 0, p.end, two + p.batches[2].info.size as usize / 2);
    assert_eq!(out, p.bytes_of(0..2));
    let (out, _) = read_all(&p, 0, p.end, two);
    assert_eq!(out, p.bytes_of(0..2));
    // The budget counts across segments.
    let total: usize = p.batches.iter().map(|b| b.bytes.len()).sum();
    let (out, _) = read_all(&p, 0, p.end, total - 1);
    assert_eq!(out, p.bytes_of(0..p.batches.len() - 1));
}

#[test]
fn offsets_inside_batches_and_in_later_segments() {
    let p = write(config(true), 0, &mixed_ops());
    for (i, b) in p.batches.iter().enumerate() {
        for offset in [b.info.first_offset, b.info.last_offset] {
            let (out, fetched) = read_all(&p, offset, p.end, 1);
            assert_eq!(out, b.bytes, "offset {offset}");
            assert_eq!(fetched.batches, 1);
            let (out, _) = read_all(&p, offset, p.end, 1 << 20);
            assert_eq!(out, p.bytes_of(i..p.batches.len()), "offset {offset}");
        }
    }
    let later = p.segments()[2];
    let (out, _) = read_all(&p, later, p.end, 1);
    assert_eq!(out, p.batches[p.batch_holding(later)].bytes);
    assert_eq!(p.batches[p.batch_holding(later)].info.segment_base_offset, later);
}

#[test]
fn missing_or_wrong_indexes_only_cost_a_longer_walk() {
    let p = write(config(true), 0, &mixed_ops());
    let expect: Vec<_> = p
        .batches
        .iter()
        .map(|b| read_all(&p, b.info.last_offset, p.end, 1 << 20).0)
        .collect();
    let segments = p.segments();
    // Entries pointing past the end of the .log and at the middle of a batch.
    let bogus: Vec<u8> = [(1i32, 7i32), (2, 100_000)]
        .iter()
        .flat_map(|&(rel, pos)| [rel.to_be_bytes(), pos.to_be_bytes()].concat())
        .collect();
    fs::write(p.file(segments[0], SegmentFileKind::Index), bogus).unwrap();
    fs::remove_file(p.file(segments[1], SegmentFileKind::Index)).unwrap();
    fs::write(p.file(*segments.last().unwrap(), SegmentFileKind::Index), [0u8; 4096]).unwrap();
    for (b, expected) in p.batches.iter().zip(&expect) {
        assert_eq!(&read_all(&p, b.info.last_offset, p.end, 1 << 20).0, expected);
    }
}

#[test]
fn an_offset_below_the_first_segment_is_not_found() {
    let p = write(config(false), 100, &mixed_ops());
    let mut out = Vec::new();
    let err = read_batches(&p.dir, 99, p.end, 1000, &mut out).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    assert!(out.is_empty());
    assert_eq!(log_start(&p.dir).unwrap(), Some(100));
    // Retention deletes the first segment.
    let first = p.segments()[0];
    fs::remove_file(p.file(first, SegmentFileKind::Log)).unwrap();
    let second = p.segments()[0];
    assert_eq!(log_start(&p.dir).unwrap(), Some(second));
    let err = read_batches(&p.dir, first, p.end, 1000, &mut out).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn bytes_past_upper_are_never_trusted() {
    let p = write(config(false), 0, &mixed_ops());
    let last = *p.segments().last().unwrap();
    let log = p.file(last, SegmentFileKind::Log);
    // A batch being appended: half a header, then garbage past the bound.
    let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, &[0xff; 30]).unwrap();
    let (out, fetched) = read_all(&p, 0, p.end, 1 << 20);
    assert_eq!(out, p.bytes_of(0..p.batches.len()));
    assert_eq!(fetched.next_offset, Some(p.end));
    let mut txns = OpenTransactions::new();
    assert_eq!(txns.advance(&p.dir, p.end).unwrap(), p.open_from.unwrap());
}

#[test]
fn aborted_transactions_match_the_writer() {
    let p = write(config(true), 0, &mixed_ops());
    assert_eq!(p.aborted.len(), 2);
    let all = aborted_between(&p.dir, 0, p.end).unwrap();
    assert_eq!(all, p.aborted);
    // And what the .txnindex files hold (Kafka's list).
    let from_files: Vec<AbortedTxn> = p
        .segments()
        .iter()
        .flat_map(|&b| {
            let bytes = fs::read(p.file(b, SegmentFileKind::TxnIndex)).unwrap_or_default();
            TxnIndex::parse(&bytes).entries
        })
        .map(|e| AbortedTxn {
            producer_id: e.producer_id,
            first_offset: e.first_offset,
        })
        .collect();
    assert_eq!(all, from_files);
    // A range before the first abort's data: none; a range holding only the second transaction's data: that one.
    let first_marker = p.batches[4].info.first_offset;
    let second = p.aborted[1];
    assert_eq!(
        aborted_between(&p.dir, first_marker + 1, second.first_offset).unwrap(),
        vec![]
    );
    assert_eq!(
        aborted_between(&p.dir, first_marker + 1, second.first_offset + 1).unwrap(),
        vec![second]
    );
    // Fetching from after the first abort's marker: only the second.
    assert_eq!(aborted_between(&p.dir, first_marker + 1, p.end).unwrap(), vec![second]);
    assert_eq!(aborted_between(&p.dir, first_marker, p.end).unwrap(), p.aborted);
}

#[test]
fn last_stable_offset_follows_open_transactions() {
    let p = write(config(true), 0, &mixed_ops());
    let mut txns = OpenTransactions::new();
    // Producer 1 opens at 0: stable up to 0 until its abort.
    let abort1 = p.batches[4].info.first_offset;
    assert_eq!(txns.advance(&p.dir, abort1).unwrap(), 0);
    // After it, producer 2 (opened at batch 2) is still open until its commit.
    let p2_first = p.batches[2].info.first_offset;
    assert_eq!(txns.advance(&p.dir, abort1 + 1).unwrap(), p2_first);
    let commit2 = p.batches[6].info.first_offset;
    assert_eq!(txns.advance(&p.dir, commit2).unwrap(), p2_first);
    // After the commit: producer 3 is open from batch 7.
    let p3_first = p.batches[7].info.first_offset;
    assert_eq!(txns.advance(&p.dir, commit2 + 1).unwrap(), commit2 + 1);
    assert_eq!(txns.advance(&p.dir, p3_first + 2).unwrap(), p3_first);
    // At the end: producer 9 is open.
    assert_eq!(txns.advance(&p.dir, p.end).unwrap(), p.open_from.unwrap());
    // A bound below where it stopped (a truncation): it starts again and agrees with a fresh tracker.
    assert_eq!(txns.advance(&p.dir, commit2 + 1).unwrap(), commit2 + 1);
    let mut fresh = OpenTransactions::new();
    assert_eq!(fresh.advance(&p.dir, commit2 + 1).unwrap(), commit2 + 1);
    assert_eq!(txns.advance(&p.dir, p.end).unwrap(), p.open_from.unwrap());
}

#[test]
fn last_stable_offset_starts_from_a_snapshot_after_retention() {
    let p = write(config(false), 0, &mixed_ops());
    let segments = p.segments();
    // Producer 3 opened in an early segment and aborts later; delete the segments before its abort's, leaving
    // only the snapshot at the base of the segment holding the abort to say the transaction is open.
    let abort_offset = p.batches[ABORT3].info.first_offset;
    let p3_first = p.aborted[1].first_offset;
    let keep_from = *segments.iter().rfind(|&&b| b <= abort_offset).unwrap();
    assert!(keep_from > p3_first, "the transaction must start in a deleted segment");
    let mut txns = OpenTransactions::new();
    assert_eq!(txns.advance(&p.dir, abort_offset).unwrap(), p3_first);
    for &b in segments.iter().filter(|&&b| b < keep_from) {
        for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            let _ = fs::remove_file(p.file(b, kind));
        }
        let _ = fs::remove_file(p.file(b, SegmentFileKind::Snapshot));
    }
    assert!(p.file(keep_from, SegmentFileKind::Snapshot).exists());
    // The old tracker was past the deleted segments: it goes on; a new one starts from the snapshot. The open
    // transaction's first offset is below the log start now: the stable offset is the log start, as Kafka's.
    assert_eq!(txns.advance(&p.dir, abort_offset).unwrap(), keep_from);
    let mut fresh = OpenTransactions::new();
    assert_eq!(fresh.advance(&p.dir, abort_offset).unwrap(), keep_from);
    assert_eq!(fresh.first_open(), Some(p3_first));
    assert_eq!(fresh.advance(&p.dir, abort_offset + 1).unwrap(), abort_offset + 1);
    assert_eq!(fresh.advance(&p.dir, p.end).unwrap(), p.open_from.unwrap());
}

/// Every record, in offset order, as `(offset, timestamp)`.
fn all_records(p: &Partition) -> Vec<(i64, i64)> {
    p.batches.iter().flat_map(|b| b.records.clone()).collect()
}

/// What Kafka answers for `target` below `upper`: in the first batch whose max timestamp reaches it, the first
/// record that does.
fn expected_by_time(p: &Partition, target: i64, upper: i64) -> Option<(i64, i64)> {
    p.batches
        .iter()
        .filter(|b| b.info.last_offset < upper)
        .find(|b| b.records.iter().any(|r| r.1 >= target))
        .and_then(|b| b.records.iter().find(|r| r.1 >= target).copied())
}

#[test]
fn offsets_by_timestamp_decode_the_batch_found() {
    for running in [false, true] {
        let p = write(config(running), 0, &mixed_ops());
        let mut targets: Vec<i64> = all_records(&p).iter().flat_map(|r| [r.1 - 1, r.1, r.1 + 1]).collect();
        targets.extend([i64::MIN, 0, 99_999]);
        for upper in [p.end, p.batches[25].info.first_offset, p.batches[1].info.first_offset] {
            for &target in &targets {
                let got = offset_for_timestamp(&p.dir, target, 0, upper).unwrap();
                assert_eq!(
                    got.map(|f| (f.offset, f.timestamp)),
                    expected_by_time(&p, target, upper),
                    "target {target} upper {upper} running {running}"
                );
            }
        }
        // Inside a compressed batch: the first record at or after the target, not the batch's base.
        let zstd = &p.batches[5];
        let (offset, ts) = zstd.records[2];
        let got = offset_for_timestamp(&p.dir, ts - 5, 0, p.end).unwrap().unwrap();
        assert_eq!((got.offset, got.timestamp), (offset, ts));
        assert!(offset > zstd.info.first_offset);
        // Records past the log start only.
        let got = offset_for_timestamp(&p.dir, 0, 7, p.end).unwrap().unwrap();
        assert_eq!(got.offset, 7);
    }
}

#[test]
fn max_timestamp_is_the_record_holding_it() {
    let p = write(config(true), 0, &mixed_ops());
    let unordered = p
        .batches
        .iter()
        .position(|b| b.records.len() == 3 && b.records[1].1 == 4_500)
        .unwrap();
    let by_record = |upper: i64| {
        let recs: Vec<_> = all_records(&p).into_iter().filter(|r| r.0 < upper).collect();
        let max = recs.iter().map(|r| r.1).max()?;
        recs.into_iter().find(|r| r.1 == max)
    };
    let got = max_timestamp(&p.dir, p.end).unwrap().unwrap();
    assert_eq!(Some((got.offset, got.timestamp)), by_record(p.end));
    // Bounded to before the gzip batches: the unordered batch's second record (not its first or last).
    let upper = p.batches[unordered + 2].info.first_offset;
    let got = max_timestamp(&p.dir, upper).unwrap().unwrap();
    assert_eq!((got.offset, got.timestamp), p.batches[unordered].records[1]);
    assert_eq!(Some((got.offset, got.timestamp)), by_record(upper));
    for i in [1, 10, 20, 25, 29] {
        let upper = p.batches[i].info.first_offset;
        let got = max_timestamp(&p.dir, upper).unwrap().map(|f| (f.offset, f.timestamp));
        assert_eq!(got, by_record(upper), "upper {upper}");
    }
}

#[test]
fn leader_epochs_answer_as_kafka() {
    let p = write(config(false), 0, &mixed_ops());
    let entries = [(1, 0), (3, 50), (5, 120)].map(|(epoch, start_offset)| EpochEntry { epoch, start_offset });
    LeaderEpochCheckpoint::new(entries.to_vec())
        .write(&p.dir.join(segment_format::dir::LEADER_EPOCH_CHECKPOINT_FILE))
        .unwrap();
    let end = |epoch, upper| epoch_end(&p.dir, epoch, upper).unwrap();
    assert_eq!(latest_epoch(&p.dir, 200).unwrap(), 5);
    assert_eq!(end(5, 200), (5, 200), "the newest epoch ends at the bound");
    assert_eq!(end(4, 200), (3, 120));
    assert_eq!(end(3, 200), (3, 120));
    assert_eq!(end(2, 200), (1, 50));
    assert_eq!(end(1, 200), (1, 50));
    assert_eq!(end(0, 200), (0, 0), "below the first epoch: the first epoch's start");
    assert_eq!(end(6, 200), (-1, -1));
    assert_eq!(end(-1, 200), (-1, -1));
    // Epochs starting past the bound are not served yet.
    assert_eq!(latest_epoch(&p.dir, 100).unwrap(), 3);
    assert_eq!(end(3, 100), (3, 100));
    assert_eq!(end(5, 100), (-1, -1));
    assert_eq!(latest_epoch(&p.dir, 120).unwrap(), 5);
    // No checkpoint: nothing known.
    fs::remove_file(p.dir.join(segment_format::dir::LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
    assert_eq!(latest_epoch(&p.dir, 200).unwrap(), -1);
    assert_eq!(end(1, 200), (-1, -1));
}

#[test]
fn symlinks_and_strange_files_are_refused_not_followed() {
    let p = write(config(false), 0, &mixed_ops());
    let first = p.segments()[0];
    let log = p.file(first, SegmentFileKind::Log);
    let elsewhere = p._tmp.path().join("elsewhere.log");
    fs::rename(&log, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &log).unwrap();
    let mut out = Vec::new();
    let err = read_batches(&p.dir, 0, p.end, 1000, &mut out).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(out.is_empty());
}

#[test]
fn corrupt_bytes_below_the_bound_are_an_error_not_a_panic() {
    let p = write(config(false), 0, &mixed_ops());
    let first = p.segments()[0];
    let log = p.file(first, SegmentFileKind::Log);
    let mut bytes = fs::read(&log).unwrap();
    let second = p.batches[1].info.position as usize;
    bytes[second + 8..second + 12].copy_from_slice(&3i32.to_be_bytes());
    fs::write(&log, &bytes).unwrap();
    // The first batch is served; the read stops before the bad one.
    let (out, fetched) = read_all(&p, 0, p.end, 1 << 20);
    assert_eq!(out, p.batches[0].bytes);
    assert_eq!(fetched.batches, 1);
    let mut out = Vec::new();
    let err = read_batches(&p.dir, p.batches[1].info.first_offset, p.end, 1 << 20, &mut out).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    // (Below the first producer snapshot, which would let it start past the bad batch.)
    assert!(OpenTransactions::new()
        .advance(&p.dir, p.batches[2].info.first_offset)
        .is_err());
}

#[test]
fn legacy_messages_and_wrappers_are_walked_and_searched() {
    use segment_format::batch::TimestampType;
    use segment_format::legacy::{encode_message, encode_wrapper, LegacySpec};
    let tmp = tempfile::tempdir().unwrap();
    let mut w = PartitionWriter::create(tmp.path(), "old", 0, 0, config(false)).unwrap();
    let mut frames = vec![
        encode_message(0, 1, 100, TimestampType::CreateTime, None, Some(b"a")),
        encode_message(1, 1, 200, TimestampType::CreateTime, None, Some(b"b")),
    ];
    let inner = [(2, 300), (3, 250), (4, 400)].map(|(offset, timestamp)| LegacySpec {
        offset,
        timestamp,
        key: None,
        value: Some(vec![b'x'; 20]),
    });
    frames.push(encode_wrapper(
        1,
        Compression::Gzip,
        TimestampType::CreateTime,
        -1,
        &inner,
    ));
    frames.push(BatchBuilder::new(5).records(records(2, 500)).build());
    for f in &frames {
        w.append_raw(f).unwrap();
    }
    let dir = w.close().unwrap().dir;
    let all: Vec<u8> = frames.concat();
    let read = |offset, upper, max| {
        let mut out = Vec::new();
        read_batches(&dir, offset, upper, max, &mut out).unwrap();
        out
    };
    assert_eq!(read(0, 7, 1 << 20), all);
    // An offset inside the wrapper returns the wrapper, whose frame offset is its last.
    assert_eq!(read(3, 7, 1), frames[2]);
    assert_eq!(read(3, 5, 1 << 20), frames[2]);
    assert_eq!(read(1, 4, 1 << 20), frames[1], "the wrapper ends at 4, past the bound");
    let by_time = |target, upper| {
        offset_for_timestamp(&dir, target, 0, upper)
            .unwrap()
            .map(|f| (f.offset, f.timestamp, f.leader_epoch))
    };
    assert_eq!(by_time(150, 7), Some((1, 200, None)));
    assert_eq!(by_time(260, 7), Some((2, 300, None)));
    assert_eq!(by_time(350, 7), Some((4, 400, None)));
    assert_eq!(by_time(450, 7), Some((5, 500, None)));
    assert_eq!(by_time(450, 5), None);
    let max = max_timestamp(&dir, 5).unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (4, 400));
    assert_eq!(OpenTransactions::new().advance(&dir, 7).unwrap(), 7);
}

#[test]
fn garbage_in_the_files_is_an_error_or_an_answer_never_a_panic() {
    let p = write(config(true), 0, &mixed_ops());
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let files: Vec<PathBuf> = fs::read_dir(&p.dir).unwrap().map(|e| e.unwrap().path()).collect();
    let mut txns = OpenTransactions::new();
    for round in 0..40 {
        let file = &files[next() as usize % files.len()];
        let mut bytes = fs::read(file).unwrap();
        if bytes.is_empty() {
            continue;
        }
        for _ in 0..1 + next() % 8 {
            let at = next() as usize % bytes.len();
            bytes[at] = next() as u8;
        }
        if round % 5 == 0 {
            bytes.truncate(next() as usize % bytes.len());
        }
        fs::write(file, &bytes).unwrap();
        let offset = next() as i64 % p.end;
        let mut out = Vec::new();
        let _ = read_batches(&p.dir, offset, p.end, 1 + next() as usize % 5000, &mut out);
        let _ = aborted_between(&p.dir, offset, p.end);
        let _ = offset_for_timestamp(&p.dir, 1_000 + (next() % 6_000) as i64, 0, p.end);
        let _ = max_timestamp(&p.dir, p.end);
        let _ = epoch_end(&p.dir, (next() % 4) as i32, p.end);
        let _ = txns.advance(&p.dir, p.end);
    }
}

#[test]
fn last_stable_offset_sees_a_segment_rewritten_in_place() {
    let p = write(config(true), 0, &mixed_ops());
    let n = p.batches.len();
    let (open9, last) = (&p.batches[n - 2], &p.batches[n - 1]);
    assert_eq!(open9.info.segment_base_offset, last.info.segment_base_offset);
    let mut txns = OpenTransactions::new();
    assert_eq!(txns.advance(&p.dir, p.end).unwrap(), open9.info.first_offset);
    // The source truncated and the mirror was written again, same sizes: producer 9's batch is now plain and the
    // last one opens producer 10's transaction.
    let plain = BatchBuilder::new(open9.info.first_offset)
        .records(records(2, 6_000))
        .build();
    let txn10 = BatchBuilder::new(last.info.first_offset)
        .producer(10, 0, 0)
        .transactional(true)
        .records(records(2, 6_100))
        .build();
    assert_eq!((plain.len(), txn10.len()), (open9.bytes.len(), last.bytes.len()));
    let log = p.file(last.info.segment_base_offset, SegmentFileKind::Log);
    let mut bytes = fs::read(&log).unwrap();
    bytes[open9.info.position as usize..][..plain.len()].copy_from_slice(&plain);
    bytes[last.info.position as usize..][..txn10.len()].copy_from_slice(&txn10);
    let f = fs::OpenOptions::new().write(true).open(&log).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0).unwrap();
    assert_eq!(txns.advance(&p.dir, p.end).unwrap(), last.info.first_offset);
    assert_eq!(
        OpenTransactions::new().advance(&p.dir, p.end).unwrap(),
        last.info.first_offset
    );
}

#[test]
fn the_batch_at_upper_is_never_parsed() {
    let p = write(config(true), 0, &mixed_ops());
    let cut = p.batches.len() - 3;
    let at = &p.batches[cut];
    let upper = at.info.first_offset;
    let log = p.file(at.info.segment_base_offset, SegmentFileKind::Log);
    let mut bytes = fs::read(&log).unwrap();
    // A length no frame can have: parsing it is an error.
    bytes[at.info.position as usize + 8..][..4].copy_from_slice(&3i32.to_be_bytes());
    fs::write(&log, &bytes).unwrap();
    let (out, _) = read_all(&p, 0, upper, 1 << 20);
    assert_eq!(out, p.bytes_of(0..cut));
    let (out, _) = read_all(&p, upper - 1, upper, 1 << 20);
    assert_eq!(out, p.batches[cut - 1].bytes);
    assert_eq!(OpenTransactions::new().advance(&p.dir, upper).unwrap(), upper);
    assert!(offset_for_timestamp(&p.dir, i64::MAX, 0, upper).unwrap().is_none());
    assert!(max_timestamp(&p.dir, upper).unwrap().is_some());
    assert_eq!(aborted_between(&p.dir, 0, upper).unwrap(), p.aborted);
    // The walk to it from an index entry or the segment start alike.
    fs::remove_file(p.file(at.info.segment_base_offset, SegmentFileKind::Index)).unwrap();
    let (out, _) = read_all(&p, upper - 1, upper, 1 << 20);
    assert_eq!(out, p.batches[cut - 1].bytes);
}

#[test]
fn a_partial_txnindex_entry_being_appended_is_ignored() {
    let p = write(config(true), 0, &mixed_ops());
    let with_abort = p
        .segments()
        .into_iter()
        .find(|&b| p.file(b, SegmentFileKind::TxnIndex).exists())
        .unwrap();
    let path = p.file(with_abort, SegmentFileKind::TxnIndex);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0]);
    fs::write(&path, bytes).unwrap();
    assert_eq!(aborted_between(&p.dir, 0, p.end).unwrap(), p.aborted);
}
