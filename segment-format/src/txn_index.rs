//! The aborted-transaction index (`.txnindex`) and the producer state needed to
//! know what it must contain.
//!
//! READ_COMMITTED consumers get the list of aborted transactions overlapping a
//! fetch from these files, not from the log: an entry missing here means aborted
//! records are delivered as committed. Each 34-byte entry is
//! `version i16 (0) | producerId i64 | firstOffset i64 | lastOffset i64 |
//! lastStableOffset i64` (`AbortedTxn`); `lastOffset` is the offset of the ABORT
//! marker, entries strictly increase in it, and the entry lives in the index of
//! the segment holding the marker. The file is created lazily, so its absence
//! means "no aborted transaction in this segment" — check it as empty bytes.
//!
//! Whether a marker needs an entry depends on state that may start segments
//! earlier (the transaction's first data batch), so [`TxnTracker`] follows
//! producers across the whole partition, exactly as `ProducerStateManager` does
//! during `LogSegment.recover`, and yields the entry Kafka would write. Its memory
//! is one map entry per producer with an open transaction.
//! [`TxnIndexChecker`] compares a segment's file with the markers and with
//! those expectations.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::batch::{BatchInfo, ControlType};
use crate::dir::SegmentRole;
use crate::error::{Defect, IndexKind};
use crate::report::Finding;
use crate::snapshot::ProducerSnapshot;
use serde::{Deserialize, Serialize};

/// Size of one entry (`AbortedTxn.TOTAL_SIZE`).
pub const ABORTED_TXN_SIZE: usize = 34;
/// `AbortedTxn.CURRENT_VERSION`.
pub const ABORTED_TXN_VERSION: i16 = 0;

/// One aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTxn {
    /// Written as an i16; Kafka's reader only looks at the first byte.
    pub version: i16,
    pub producer_id: i64,
    /// First offset of the transaction in this partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// LSO when the marker was written.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn new(producer_id: i64, first_offset: i64, last_offset: i64, last_stable_offset: i64) -> Self {
        AbortedTxn {
            version: ABORTED_TXN_VERSION,
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset,
        }
    }

    pub fn to_bytes(&self) -> [u8; ABORTED_TXN_SIZE] {
        let mut out = [0u8; ABORTED_TXN_SIZE];
        let fields: [&[u8]; 5] = [
            &self.version.to_be_bytes(),
            &self.producer_id.to_be_bytes(),
            &self.first_offset.to_be_bytes(),
            &self.last_offset.to_be_bytes(),
            &self.last_stable_offset.to_be_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            if let Some(dst) = out.get_mut(at..at + f.len()) {
                dst.copy_from_slice(f);
            }
            at += f.len();
        }
        out
    }

    pub fn from_bytes(b: &[u8; ABORTED_TXN_SIZE]) -> Self {
        let i64_at = |at: usize| {
            let mut a = [0u8; 8];
            if let Some(src) = b.get(at..at + 8) {
                a.copy_from_slice(src);
            }
            i64::from_be_bytes(a)
        };
        AbortedTxn {
            version: i16::from_be_bytes([b[0], b[1]]),
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        }
    }
}

/// A parsed `.txnindex`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnIndex {
    pub entries: Vec<AbortedTxn>,
    /// Bytes of a trailing partial entry (Kafka's iteration ignores them).
    pub trailing_bytes: usize,
}

impl TxnIndex {
    pub fn parse(bytes: &[u8]) -> Self {
        let chunks = bytes.chunks_exact(ABORTED_TXN_SIZE);
        let trailing_bytes = chunks.remainder().len();
        let entries = chunks
            .filter_map(|c| <&[u8; ABORTED_TXN_SIZE]>::try_from(c).ok())
            .map(AbortedTxn::from_bytes)
            .collect();
        TxnIndex {
            entries,
            trailing_bytes,
        }
    }
}

/// Serialise entries as Kafka appends them.
pub fn serialize(entries: &[AbortedTxn]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_bytes()).collect()
}

fn entry_at(bytes: &[u8], i: usize) -> AbortedTxn {
    bytes
        .get(i * ABORTED_TXN_SIZE..(i + 1) * ABORTED_TXN_SIZE)
        .and_then(|c| <&[u8; ABORTED_TXN_SIZE]>::try_from(c).ok())
        .map(AbortedTxn::from_bytes)
        .unwrap_or(AbortedTxn::new(0, 0, 0, 0))
}

/// Follows open transactions through a partition, fed every batch in offset
/// order, and says which transaction index entry each ABORT marker calls for.
///
/// Mirrors `ProducerAppendInfo` / `ProducerStateManager` in recovery: a
/// transactional data batch opens a transaction for its producer if none is open
/// (first offset = the batch's base offset); a COMMIT or ABORT marker closes it;
/// an ABORT closing a transaction that had data yields an [`AbortedTxn`] whose
/// `last_stable_offset` is the first offset of the earliest transaction still
/// open for another producer, else the marker offset + 1. Markers of
/// transactions without data, empty control batches and legacy batches yield
/// nothing.
#[derive(Debug, Clone, Default)]
pub struct TxnTracker {
    open_by_producer: HashMap<i64, OpenTxn>,
    open_by_first_offset: BTreeMap<i64, i64>,
}

/// What an open transaction's data batches add up to, from its first offset on: the producer epoch an ABORT
/// marker closing it carries (the largest of its batches'), and what aborting it takes from a `read_committed`
/// consumer. Kept only for a transaction the tracker saw begin: one it was started with is not tallied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TxnTally {
    pub producer_epoch: i16,
    pub records: u64,
    pub batches: u64,
    pub bytes: u64,
}

impl TxnTally {
    /// The batches of `other`, which follow these, added.
    pub fn merge(&mut self, other: &TxnTally) {
        self.producer_epoch = self.producer_epoch.max(other.producer_epoch);
        self.records = self.records.saturating_add(other.records);
        self.batches = self.batches.saturating_add(other.batches);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }

    /// One more data batch of the transaction.
    pub fn add(&mut self, batch: &BatchInfo) {
        self.producer_epoch = self.producer_epoch.max(batch.producer_epoch);
        self.records = self
            .records
            .saturating_add(u64::try_from(batch.records_count).unwrap_or(0));
        self.batches = self.batches.saturating_add(1);
        self.bytes = self.bytes.saturating_add(batch.size);
    }
}

#[derive(Debug, Clone, Copy)]
struct OpenTxn {
    first_offset: i64,
    tally: Option<TxnTally>,
}

/// One open transaction as the tracker holds it (and as a tail appender's state file records it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTransaction {
    pub producer_id: i64,
    /// First offset of the transaction in the partition.
    pub first_offset: i64,
    /// `None`: not known — the tracker was started with this transaction open and does not know its earlier
    /// batches (or a record chose not to keep it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tally: Option<TxnTally>,
}

/// A transaction a COMMIT or ABORT marker closed, as the tracker saw it close.
///
/// A tail appender keeps each producer's last one, and every one of its active segment in a closed log
/// (`segmirror_applier::direct::Kept`, [`crate::closed_log`]): a consistent cut whose producer's marker follows it
/// learns from it where the transaction across the cut began, without reading back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedTransaction {
    pub producer_id: i64,
    /// Offset of the marker.
    pub marker_offset: i64,
    /// First offset of the transaction it closed; `None`: the marker closed no transaction (none had data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_offset: Option<i64>,
    /// Its data batches added up, when the tracker saw it begin (as [`OpenTransaction::tally`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tally: Option<TxnTally>,
}

impl TxnTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Start from known open transactions `(producer id, first offset)`, e.g. a
    /// producer snapshot taken at the first segment's base offset.
    pub fn with_open_transactions(open: impl IntoIterator<Item = (i64, i64)>) -> Self {
        Self::with_tallied(open.into_iter().map(|(producer_id, first_offset)| OpenTransaction {
            producer_id,
            first_offset,
            tally: None,
        }))
    }

    /// Start from open transactions as [`Self::open_tallied`] gave them (the tallies go on counting).
    pub fn with_tallied(open: impl IntoIterator<Item = OpenTransaction>) -> Self {
        let mut t = Self::new();
        for o in open {
            t.open(o.producer_id, o.first_offset, o.tally);
        }
        t
    }

    pub fn from_snapshot(snapshot: &ProducerSnapshot) -> Self {
        Self::with_open_transactions(snapshot.open_transactions())
    }

    fn open(&mut self, producer_id: i64, first_offset: i64, tally: Option<TxnTally>) {
        if let Some(old) = self
            .open_by_producer
            .insert(producer_id, OpenTxn { first_offset, tally })
        {
            self.open_by_first_offset.remove(&old.first_offset);
        }
        self.open_by_first_offset.insert(first_offset, producer_id);
    }

    /// Feed the next batch; returns the entry Kafka would append for an ABORT marker.
    pub fn on_batch(&mut self, batch: &BatchInfo) -> Option<AbortedTxn> {
        self.on_batch_closing(batch).0
    }

    /// [`Self::on_batch`], also saying which transaction a COMMIT or ABORT marker closed ([`ClosedTransaction`]).
    pub fn on_batch_closing(&mut self, batch: &BatchInfo) -> (Option<AbortedTxn>, Option<ClosedTransaction>) {
        if batch.magic < 2 || batch.producer_id < 0 {
            return (None, None);
        }
        let pid = batch.producer_id;
        if !batch.is_control {
            if batch.is_transactional {
                match self.open_by_producer.get_mut(&pid) {
                    Some(open) => {
                        if let Some(tally) = &mut open.tally {
                            tally.add(batch);
                        }
                    }
                    None => {
                        let mut tally = TxnTally::default();
                        tally.add(batch);
                        self.open(pid, batch.base_offset, Some(tally));
                    }
                }
            }
            return (None, None);
        }
        let aborted = match batch.control {
            Some(ControlType::Abort) => true,
            Some(ControlType::Commit) => false,
            _ => return (None, None),
        };
        let marker = batch.base_offset;
        let Some(open) = self.open_by_producer.remove(&pid) else {
            let closed = ClosedTransaction {
                producer_id: pid,
                marker_offset: marker,
                first_offset: None,
                tally: None,
            };
            return (None, Some(closed));
        };
        let first = open.first_offset;
        let lso = self
            .open_by_first_offset
            .iter()
            .find(|(_, &p)| p != pid)
            .map_or(marker.saturating_add(1), |(&f, _)| f);
        self.open_by_first_offset.remove(&first);
        let closed = ClosedTransaction {
            producer_id: pid,
            marker_offset: marker,
            first_offset: Some(first),
            tally: open.tally,
        };
        (aborted.then(|| AbortedTxn::new(pid, first, marker, lso)), Some(closed))
    }

    /// Open transactions as `(producer id, first offset)`, by first offset.
    pub fn open_transactions(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.open_by_first_offset.iter().map(|(&f, &p)| (p, f))
    }

    /// Open transactions with their tallies, by first offset.
    pub fn open_tallied(&self) -> impl Iterator<Item = OpenTransaction> + '_ {
        self.open_by_first_offset
            .iter()
            .map(|(&first_offset, &producer_id)| OpenTransaction {
                producer_id,
                first_offset,
                tally: self.open_by_producer.get(&producer_id).and_then(|o| o.tally),
            })
    }

    /// First offset of the earliest open transaction (the first unstable offset).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.open_by_first_offset.keys().next().copied()
    }
}

/// Checks one segment's `.txnindex` beside a scan of its `.log`.
///
/// Per entry: version 0, `first_offset <= last_offset`, `last_offset` strictly
/// increasing and not below the segment base offset (the broker's load-time
/// sanity check), and `last_offset` the offset of an ABORT control batch of the
/// same producer in this segment. Per expected entry from a [`TxnTracker`]: the
/// index has it. A `first_offset` later than expected or a wrong producer is an
/// error (consumers would see aborted records); an earlier `first_offset` (data
/// since removed by compaction) or a different `last_stable_offset` (Kafka's leader,
/// follower and recovery paths compute it at different moments) is a warning.
#[derive(Debug)]
pub struct TxnIndexChecker<'a> {
    path: PathBuf,
    bytes: &'a [u8],
    base_offset: i64,
    entries: usize,
    /// Entry indices by last offset, when the file is not already in that order.
    order: Option<Vec<u32>>,
    /// Next entry (in last-offset order) not yet matched to a batch.
    cursor: usize,
    findings: Vec<Finding>,
}

impl<'a> TxnIndexChecker<'a> {
    /// `bytes` is the whole `.txnindex` (empty if the file does not exist).
    /// A partial entry at the end is a warning in the [`SegmentRole::Newest`] segment (mid-append), else an error.
    pub fn new(path: impl AsRef<Path>, bytes: &'a [u8], base_offset: i64, role: SegmentRole) -> Self {
        let path = path.as_ref().to_path_buf();
        let entries = bytes.len() / ABORTED_TXN_SIZE;
        let mut findings = Vec::new();
        let trailing = bytes.len() % ABORTED_TXN_SIZE;
        if trailing != 0 {
            let at = (entries * ABORTED_TXN_SIZE) as u64;
            let defect = index_defect(format!(
                "{trailing} bytes of a partial entry at the end (length {} is not a multiple of {ABORTED_TXN_SIZE}); \
                 the broker ignores them",
                bytes.len()
            ));
            findings.push(if role == SegmentRole::Newest {
                Finding::warning(&path, Some(at), None, defect)
            } else {
                Finding::error(&path, Some(at), None, defect)
            });
        }
        let mut sorted = true;
        let mut prev: Option<i64> = None;
        for i in 0..entries {
            let e = entry_at(bytes, i);
            let pos = Some((i * ABORTED_TXN_SIZE) as u64);
            let mut err = |msg: String| {
                findings.push(Finding::error(&path, pos, Some(e.last_offset), index_defect(msg)));
            };
            if e.version != ABORTED_TXN_VERSION {
                err(format!("entry version {} (only version 0 exists)", e.version));
            }
            if e.first_offset > e.last_offset {
                err(format!(
                    "first offset {} is after last offset {}",
                    e.first_offset, e.last_offset
                ));
            }
            if e.last_offset < base_offset {
                err(format!(
                    "last offset {} is below the segment base offset {base_offset} (the broker's sanity check \
                     fails and it rebuilds the segment)",
                    e.last_offset
                ));
            }
            if let Some(p) = prev {
                if e.last_offset <= p {
                    sorted = false;
                    err(format!(
                        "last offset {} does not increase (previous {p})",
                        e.last_offset
                    ));
                }
            }
            prev = Some(e.last_offset);
        }
        let order = (!sorted).then(|| {
            let mut v: Vec<u32> = (0..entries as u32).collect();
            v.sort_by_key(|&i| entry_at(bytes, i as usize).last_offset);
            v
        });
        TxnIndexChecker {
            path,
            bytes,
            base_offset,
            entries,
            order,
            cursor: 0,
            findings,
        }
    }

    fn index_at(&self, k: usize) -> usize {
        match &self.order {
            Some(o) => o.get(k).map_or(k, |&i| i as usize),
            None => k,
        }
    }

    fn error(&mut self, i: usize, offset: i64, msg: String) {
        let pos = Some((i * ABORTED_TXN_SIZE) as u64);
        self.findings
            .push(Finding::error(&self.path, pos, Some(offset), index_defect(msg)));
    }

    fn warning(&mut self, i: usize, offset: i64, msg: String) {
        let pos = Some((i * ABORTED_TXN_SIZE) as u64);
        self.findings
            .push(Finding::warning(&self.path, pos, Some(offset), index_defect(msg)));
    }

    /// Feed the next batch of the segment, with what [`TxnTracker::on_batch`]
    /// returned for it (`None` when not tracking).
    pub fn on_batch(&mut self, batch: &BatchInfo, expected: Option<&AbortedTxn>) {
        let mut matched_expected = false;
        while self.cursor < self.entries {
            let i = self.index_at(self.cursor);
            let e = entry_at(self.bytes, i);
            if e.last_offset > batch.last_offset {
                break;
            }
            self.cursor += 1;
            if e.last_offset < batch.base_offset {
                self.error(
                    i,
                    e.last_offset,
                    format!(
                        "no batch at last offset {} in the segment (expected an ABORT marker)",
                        e.last_offset
                    ),
                );
                continue;
            }
            if e.last_offset != batch.base_offset {
                self.error(
                    i,
                    e.last_offset,
                    format!(
                        "last offset {} falls inside the batch {}..={}, not on an ABORT marker",
                        e.last_offset, batch.base_offset, batch.last_offset
                    ),
                );
                continue;
            }
            self.check_marker(i, &e, batch);
            if let Some(x) = expected {
                if x.last_offset == e.last_offset {
                    matched_expected = true;
                    self.compare(i, &e, x);
                }
            }
        }
        if let Some(x) = expected {
            if !matched_expected {
                let at = self.insertion_slot(x.last_offset);
                self.findings.push(Finding::error(
                    &self.path,
                    Some((at * ABORTED_TXN_SIZE) as u64),
                    Some(x.last_offset),
                    index_defect(format!(
                        "no entry for the ABORT marker at offset {} of producer {} (transaction from offset {}): \
                         READ_COMMITTED consumers would receive the aborted records",
                        x.last_offset, x.producer_id, x.first_offset
                    )),
                ));
            }
        }
    }

    /// Slot (in file order) where an entry for `last_offset` belongs.
    fn insertion_slot(&self, last_offset: i64) -> usize {
        (0..self.entries)
            .find(|&i| entry_at(self.bytes, i).last_offset > last_offset)
            .unwrap_or(self.entries)
    }

    fn check_marker(&mut self, i: usize, e: &AbortedTxn, batch: &BatchInfo) {
        let at = e.last_offset;
        if !batch.is_control {
            self.error(i, at, format!("the batch at last offset {at} is not a control batch"));
        } else if batch.producer_id != e.producer_id {
            self.error(
                i,
                at,
                format!(
                    "entry producer {} but the marker at offset {at} belongs to producer {}",
                    e.producer_id, batch.producer_id
                ),
            );
        } else {
            match batch.control {
                Some(ControlType::Abort) => {}
                Some(ControlType::Commit) => {
                    self.error(i, at, format!("the marker at offset {at} is a COMMIT, not an ABORT"))
                }
                Some(ControlType::Other(t)) => self.error(
                    i,
                    at,
                    format!("the control batch at offset {at} has type {t}, not ABORT"),
                ),
                None => self.warning(
                    i,
                    at,
                    format!("the control record at offset {at} could not be decoded to confirm an ABORT"),
                ),
            }
        }
    }

    fn compare(&mut self, i: usize, e: &AbortedTxn, x: &AbortedTxn) {
        let at = e.last_offset;
        if e.producer_id != x.producer_id {
            self.error(
                i,
                at,
                format!("producer {} but expected {}", e.producer_id, x.producer_id),
            );
        }
        if e.first_offset > x.first_offset {
            self.error(
                i,
                at,
                format!(
                    "first offset {} is after the transaction's first offset {}: READ_COMMITTED consumers would \
                     receive aborted records from {}",
                    e.first_offset, x.first_offset, x.first_offset
                ),
            );
        } else if e.first_offset < x.first_offset {
            self.warning(
                i,
                at,
                format!(
                    "first offset {} is before the first surviving batch of the transaction ({}); normal if \
                     compaction removed its earlier batches",
                    e.first_offset, x.first_offset
                ),
            );
        }
        if e.last_stable_offset != x.last_stable_offset {
            self.warning(
                i,
                at,
                format!(
                    "last stable offset {} differs from {} computed from the log (a follower appending a \
                     multi-batch chunk records a later value)",
                    e.last_stable_offset, x.last_stable_offset
                ),
            );
        }
    }

    /// Report entries beyond the last batch and return every finding.
    pub fn finish(mut self) -> Vec<Finding> {
        while self.cursor < self.entries {
            let i = self.index_at(self.cursor);
            self.cursor += 1;
            let e = entry_at(self.bytes, i);
            if e.last_offset >= self.base_offset {
                self.error(
                    i,
                    e.last_offset,
                    format!("last offset {} is beyond the last batch of the segment", e.last_offset),
                );
            }
        }
        let mut findings = self.findings;
        findings.sort_by_key(|f| f.position);
        findings
    }
}

fn index_defect(message: String) -> Defect {
    Defect::Index {
        index: IndexKind::Transaction,
        message,
    }
}

/// Follows the transactions of a partition through `segments` (`.log` paths in offset order, each the
/// segment after the previous one) with `tracker`, and returns the tracker at the end with the index entries
/// the *last* segment's ABORT markers call for. `last_end` bounds the last segment to its first bytes (a
/// mirror's recorded end, beyond which a crash may have left bytes nobody acknowledged). What both the
/// promotion of a tailed active segment and the tail appender's hand-over use to derive a `.txnindex` they
/// never received; memory is one map entry per open transaction, as the tracker's.
pub fn follow_segments(
    segments: &[&Path],
    last_end: Option<u64>,
    mut tracker: TxnTracker,
) -> Result<(TxnTracker, Vec<AbortedTxn>), crate::Error> {
    let mut entries = Vec::new();
    for (i, path) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let mut log = crate::log::LogFile::open(path)?;
        let end = match last_end {
            Some(end) if last => end.min(log.len()),
            _ => log.len(),
        };
        log.scan_range(0, end, |frame| {
            if let Some(entry) = tracker.on_batch(&frame.info) {
                if last {
                    entries.push(entry);
                }
            }
            std::ops::ControlFlow::Continue(())
        })?;
    }
    Ok((tracker, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Severity;
    use proptest::prelude::*;

    #[test]
    fn exact_layout() {
        let e = AbortedTxn::new(
            0x0102030405060708,
            0x1112131415161718,
            0x2122232425262728,
            0x3132333435363738,
        );
        let b = e.to_bytes();
        let mut expected = vec![0u8, 0];
        for base in [0x01u8, 0x11, 0x21, 0x31] {
            expected.extend((0..8).map(|k| base + k));
        }
        assert_eq!(b.to_vec(), expected);
        assert_eq!(AbortedTxn::from_bytes(&b), e);
    }

    #[test]
    fn parse_reports_partial_tail() {
        let mut bytes = serialize(&[AbortedTxn::new(1, 0, 5, 6), AbortedTxn::new(2, 3, 9, 10)]);
        bytes.extend_from_slice(&[0; 7]);
        let idx = TxnIndex::parse(&bytes);
        assert_eq!(idx.entries.len(), 2);
        assert_eq!(idx.trailing_bytes, 7);
    }

    fn data(pos: u64, base: i64, last: i64, pid: i64, txn: bool) -> BatchInfo {
        BatchInfo {
            position: pos,
            size: 100,
            magic: 2,
            base_offset: base,
            last_offset: last,
            max_timestamp: 0,
            partition_leader_epoch: 0,
            producer_id: pid,
            producer_epoch: 0,
            is_transactional: txn,
            control: None,
            is_control: false,
            records_count: (last - base + 1) as i32,
        }
    }

    fn marker(pos: u64, offset: i64, pid: i64, t: ControlType) -> BatchInfo {
        BatchInfo {
            is_transactional: true,
            control: Some(t),
            is_control: true,
            records_count: 1,
            ..data(pos, offset, offset, pid, true)
        }
    }

    /// Producer 1 aborts [0, 5] at 6 while producer 2 has a transaction open
    /// from 3; producer 2 commits at 8; producer 3 aborts a data-less txn at 9;
    /// producer 1 aborts again at 12 with nothing else open.
    fn scenario() -> Vec<BatchInfo> {
        vec![
            data(0, 0, 2, 1, true),
            data(100, 3, 4, 2, true),
            data(200, 5, 5, 1, true),
            marker(300, 6, 1, ControlType::Abort),
            data(400, 7, 7, -1, false),
            marker(500, 8, 2, ControlType::Commit),
            marker(600, 9, 3, ControlType::Abort),
            data(700, 10, 11, 1, true),
            marker(800, 12, 1, ControlType::Abort),
        ]
    }

    fn expected_entries() -> Vec<AbortedTxn> {
        vec![AbortedTxn::new(1, 0, 6, 3), AbortedTxn::new(1, 10, 12, 13)]
    }

    #[test]
    fn tracker_yields_kafka_entries() {
        let mut t = TxnTracker::new();
        let got: Vec<_> = scenario().iter().filter_map(|b| t.on_batch(b)).collect();
        assert_eq!(got, expected_entries());
        assert_eq!(t.first_unstable_offset(), None);
    }

    #[test]
    fn tracker_says_which_transaction_each_marker_closed() {
        // Producer 2 is open from the start (untallied): its commit closes a transaction without a tally.
        let mut t = TxnTracker::with_open_transactions([(2, 3)]);
        let closed: Vec<ClosedTransaction> = scenario()
            .iter()
            .skip(2)
            .filter_map(|b| t.on_batch_closing(b).1)
            .collect();
        let tally = |records, batches, bytes| {
            Some(TxnTally {
                producer_epoch: 0,
                records,
                batches,
                bytes,
            })
        };
        let scenario = scenario();
        let size = |i: usize| scenario[i].size;
        assert_eq!(
            closed,
            vec![
                ClosedTransaction {
                    producer_id: 1,
                    marker_offset: 6,
                    first_offset: Some(5),
                    tally: tally(1, 1, size(2)),
                },
                ClosedTransaction {
                    producer_id: 2,
                    marker_offset: 8,
                    first_offset: Some(3),
                    tally: None,
                },
                ClosedTransaction {
                    producer_id: 3,
                    marker_offset: 9,
                    first_offset: None,
                    tally: None,
                },
                ClosedTransaction {
                    producer_id: 1,
                    marker_offset: 12,
                    first_offset: Some(10),
                    tally: tally(2, 1, size(7)),
                },
            ]
        );
    }

    #[test]
    fn tracker_from_snapshot_state() {
        let mut t = TxnTracker::with_open_transactions([(4, 50)]);
        assert_eq!(t.first_unstable_offset(), Some(50));
        let got = t.on_batch(&marker(0, 60, 4, ControlType::Abort));
        assert_eq!(got, Some(AbortedTxn::new(4, 50, 60, 61)));
        assert_eq!(t.open_transactions().count(), 0);
    }

    #[test]
    fn tracker_tallies_the_transactions_it_saw_begin() {
        // Producer 1 opens at 0 (two batches, 3 + 2 records), producer 2 is open from the start (untallied).
        let mut t = TxnTracker::with_open_transactions([(2, -5)]);
        let mut first = data(0, 0, 2, 1, true);
        first.producer_epoch = 3;
        let mut second = data(100, 3, 4, 1, true);
        second.producer_epoch = 4;
        for b in [&first, &data(50, 3, 3, 2, true), &second] {
            assert_eq!(t.on_batch(b), None);
        }
        let open: Vec<OpenTransaction> = t.open_tallied().collect();
        assert_eq!(open.len(), 2);
        assert_eq!(
            (open[0].producer_id, open[0].first_offset, open[0].tally),
            (2, -5, None)
        );
        assert_eq!(
            (open[1].producer_id, open[1].first_offset, open[1].tally),
            (
                1,
                0,
                Some(TxnTally {
                    producer_epoch: 4,
                    records: 5,
                    batches: 2,
                    bytes: first.size + second.size
                })
            )
        );
        // Carried over to a tracker started from them, the tally goes on counting; a marker ends it.
        let mut again = TxnTracker::with_tallied(open);
        again.on_batch(&data(200, 5, 5, 1, true));
        let tally = again
            .open_tallied()
            .find(|o| o.producer_id == 1)
            .and_then(|o| o.tally)
            .unwrap();
        assert_eq!((tally.records, tally.batches), (6, 3));
        again.on_batch(&marker(300, 6, 1, ControlType::Commit));
        assert_eq!(again.open_tallied().map(|o| o.producer_id).collect::<Vec<_>>(), vec![2]);
    }

    fn run(bytes: &[u8], batches: &[BatchInfo]) -> Vec<Finding> {
        let mut t = TxnTracker::new();
        let mut c = TxnIndexChecker::new("00000000000000000000.txnindex", bytes, 0, SegmentRole::Sealed);
        for b in batches {
            let exp = t.on_batch(b);
            c.on_batch(b, exp.as_ref());
        }
        c.finish()
    }

    #[test]
    fn correct_index_passes() {
        assert_eq!(run(&serialize(&expected_entries()), &scenario()), vec![]);
        // A segment without aborts and without a file.
        assert_eq!(run(&[], &[data(0, 0, 3, 1, false)]), vec![]);
    }

    #[test]
    fn missing_entry_for_abort_marker_is_reported_where_it_belongs() {
        let only_second = serialize(&expected_entries()[1..]);
        let f = run(&only_second, &scenario());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(
            (f[0].severity, f[0].position, f[0].offset),
            (Severity::Error, Some(0), Some(6))
        );
        let only_first = serialize(&expected_entries()[..1]);
        let f = run(&only_first, &scenario());
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].position, f[0].offset), (Some(34), Some(12)));
    }

    #[test]
    fn entry_without_abort_marker_is_reported() {
        let mut entries = expected_entries();
        entries.insert(1, AbortedTxn::new(2, 3, 7, 8)); // offset 7 is a data batch
        entries.push(AbortedTxn::new(2, 3, 8, 9)); // out of order, and 8 is a COMMIT
        entries.push(AbortedTxn::new(1, 10, 99, 100)); // beyond the segment
        let f = run(&serialize(&entries), &scenario());
        let got: Vec<_> = f.iter().map(|f| (f.position, f.offset)).collect();
        assert!(got.contains(&(Some(34), Some(7))), "{f:?}");
        assert!(got.contains(&(Some(102), Some(8))), "{f:?}");
        assert!(got.contains(&(Some(136), Some(99))), "{f:?}");
        assert!(f.iter().all(|f| f.severity == Severity::Error));
        assert!(f
            .iter()
            .any(|f| matches!(&f.defect, Defect::Index { message, .. } if message.contains("COMMIT"))));
    }

    #[test]
    fn structural_defects() {
        let mut bad = AbortedTxn::new(1, 7, 6, 7);
        bad.version = 1;
        let mut bytes = serialize(&[bad]);
        bytes.extend_from_slice(&[1, 2, 3]);
        let c = TxnIndexChecker::new("t", &bytes, 10, SegmentRole::Sealed);
        let f = c.finish();
        // version, first > last, below base; partial tail at 34.
        assert_eq!(f.iter().filter(|f| f.position == Some(0)).count(), 3, "{f:?}");
        assert!(f
            .iter()
            .any(|f| f.position == Some(34) && f.severity == Severity::Error));
        let c = TxnIndexChecker::new("t", &[0; 5], 0, SegmentRole::Newest);
        assert_eq!(
            c.finish()[0].severity,
            Severity::Warning,
            "partial tail of the active segment"
        );
    }

    #[test]
    fn first_offset_and_lso_differences() {
        let mut entries = expected_entries();
        entries[0].first_offset = 1; // later than the real start: error
        entries[1].last_stable_offset = 20; // follower-style LSO: warning
        let f = run(&serialize(&entries), &scenario());
        let sev: Vec<_> = f.iter().map(|f| (f.position, f.severity)).collect();
        assert_eq!(sev, vec![(Some(0), Severity::Error), (Some(34), Severity::Warning)]);
        let mut entries = expected_entries();
        entries[0].first_offset = 0;
        entries[1].first_offset = 9;
        let f = run(&serialize(&entries), &scenario());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    proptest! {
        #[test]
        fn round_trip(raw in proptest::collection::vec((any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()), 0..20)) {
            let entries: Vec<_> = raw.into_iter().map(|(a, b, c, d)| AbortedTxn::new(a, b, c, d)).collect();
            let bytes = serialize(&entries);
            prop_assert_eq!(bytes.len(), entries.len() * ABORTED_TXN_SIZE);
            prop_assert_eq!(TxnIndex::parse(&bytes), TxnIndex { entries, trailing_bytes: 0 });
        }

        #[test]
        fn checker_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300),
                                batches in proptest::collection::vec((0i64..50, 0i64..4, 0i64..3, 0u8..4), 0..20)) {
            let _ = TxnIndex::parse(&bytes);
            let mut t = TxnTracker::new();
            let mut c = TxnIndexChecker::new("t", &bytes, 0, SegmentRole::Sealed);
            let mut pos = 0;
            let mut off = 0;
            for (gap, len, pid, kind) in batches {
                let base = off + gap;
                let b = match kind {
                    0 => marker(pos, base, pid, ControlType::Abort),
                    1 => marker(pos, base, pid, ControlType::Commit),
                    _ => data(pos, base, base + len, pid, kind == 2),
                };
                off = b.last_offset + 1;
                pos += 100;
                let exp = t.on_batch(&b);
                c.on_batch(&b, exp.as_ref());
            }
            let _ = c.finish();
        }
    }
}
