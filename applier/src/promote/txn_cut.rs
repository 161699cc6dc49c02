//! The clean transactional cut at promotion: transactions still open at the mirror's end are aborted.
//!
//! Why: the mirror ends wherever `seed` last read the source. A transaction open there (transactional batches of a
//! producer with no COMMIT/ABORT marker after them) has no coordinator on the target to finish it. With the source's
//! producer state the target broker would rebuild it as open and its last stable offset would stay below it
//! forever (no later write would ever reach a `read_committed` consumer); with empty producer state (what
//! promotion gives the target, see `producer_state`) its records would be served as committed although the source
//! may have aborted them. So promotion decides: it appends one ABORT marker per open transaction at the mirror's
//! end, exactly as a coordinator would have written it (magic 2, transactional + control, the producer's id and
//! epoch, the target leader epoch), with the matching `.txnindex` entries that `read_committed` fetches use to
//! filter the records, and then starts the producer state after the markers. Aborting (rather than truncating to
//! the last stable offset) keeps every byte the source wrote at its source offset — the mirror stays a prefix of
//! the source — and the records stay visible to `read_uncommitted` readers exactly as on the source; only the
//! decision the source had not yet made is made, the safe way (an aborted transaction loses nothing a consumer
//! was ever promised). See docs/promotion.md, "Open transactions".
//!
//! Which transactions are open is decided the way the broker itself rebuilds its state: from the newest producer
//! snapshot at or below the end (its entries with a `currentTxnFirstOffset`), then the batches after it; without
//! a usable snapshot, from the first promoted segment. Memory is bounded by the number of producers (as the
//! broker's own producer state is), never by the data.

use std::collections::{BTreeSet, HashMap};
use std::fs::OpenOptions;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;

use segment_format::batch::{parse_header, BatchInfo, ControlType, NO_TIMESTAMP};
use segment_format::control::{decode_control_batch, end_txn_marker_batch, EndTxnMarker};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::durable::write_atomically;
use segment_format::error::ParseError;
use segment_format::index::{
    read_index_file, serialize_offset_index, serialize_time_index, OffsetIndex, OffsetIndexBuilder, OffsetIndexEntry,
    TimeIndex, TimeIndexBuilder, TimeIndexEntry, DEFAULT_INDEX_INTERVAL_BYTES,
};
use segment_format::log::LogFile;
// The bound the applier installed the mirror's snapshots under (the bucket contract's), so every one it holds is read.
use segment_format::record::DeepLimits;
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_index::{self, AbortedTxn, TxnIndex, TxnTally, TxnTracker};
use segmirror_transport::manifest::MAX_SNAPSHOT_BYTES;
use serde::{Deserialize, Serialize};

use super::error::{Error, Result};
use super::files::write_staged;
use super::frames::indexed_start;

/// Coordinator epoch of every ABORT marker promotion writes. A coordinator epoch fences a zombie coordinator's
/// markers; no coordinator on the target ever knew the producer, and the broker compares the value only with
/// producer state: promotion starts that empty after the markers (`producer_state`), and a replay of the markers
/// (recovery, which appends as a replica) only logs a lower epoch than the producer's last
/// (`ProducerAppendInfo.checkCoordinatorEpoch`). One value, rather than the producer's last marker's, because the
/// marker must be the same whether planning walked the partition or read what the tail appender kept, and the
/// producer's last marker may lie anywhere before its open transaction (docs/promotion.md, "Open transactions").
pub const MARKER_COORDINATOR_EPOCH: i32 = 0;

/// A transaction open at the mirror's end, aborted by promotion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutTransaction {
    pub producer_id: i64,
    /// The producer's epoch in its last batch (the marker carries it, as a coordinator's would).
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    /// First offset of the transaction in this partition.
    pub first_offset: i64,
    /// Records of the transaction in the promoted segments (those below the log start offset are not copied),
    /// now aborted.
    pub records: u64,
    /// Its batches in the promoted segments, and their bytes (what a `read_committed` consumer no longer gets).
    /// 0 in journals written before they were counted.
    #[serde(default)]
    pub batches: u64,
    #[serde(default)]
    pub bytes: u64,
    /// Offset of the ABORT marker promotion writes.
    pub marker_offset: i64,
}

/// A transaction being followed through the scan: its first offset and what its batches add up to (the tail
/// appender's tally of it, `txn_index::TxnTally`, is the same sum).
#[derive(Debug, Clone, Copy)]
struct Open {
    first_offset: i64,
    tally: TxnTally,
}

/// The producer snapshot the detection starts from: the newest of `snapshots` at or below `end` that reads
/// cleanly (a corrupt one is skipped, as the broker skips it). `None`: start from the first segment.
pub(super) fn starting_snapshot(dir: &Path, snapshots: &[i64], end: i64) -> Option<(i64, ProducerSnapshot)> {
    let mut candidates: Vec<i64> = snapshots.iter().copied().filter(|o| *o <= end).collect();
    candidates.sort_unstable();
    candidates.into_iter().rev().find_map(|offset| {
        let path = dir.join(segment_file_name(offset, SegmentFileKind::Snapshot));
        // The applier installs none larger; one that is (put there by someone else) is not read into memory.
        let size = std::fs::metadata(&path).ok()?.len();
        if size > MAX_SNAPSHOT_BYTES {
            return None;
        }
        ProducerSnapshot::read(&path).ok().map(|s| (offset, s))
    })
}

/// Where a scan of segment `base` (open as `log`) for the batches from `offset` on may start ([`indexed_start`]
/// over its offset index); 0, the whole segment, when the index is missing or does not describe the file.
fn scan_start(dir: &Path, log: &LogFile, base: i64, offset: i64) -> u64 {
    let index = dir.join(segment_file_name(base, SegmentFileKind::Index));
    read_index_file(&index)
        .ok()
        .and_then(|bytes| indexed_start(log, base, &OffsetIndex::parse(&bytes).entries, offset))
        .unwrap_or(0)
}

/// The transactions open at `log_end_offset` in the mirror partition `dir`, whose segments (base offsets,
/// ascending) are `segments` and producer snapshots `snapshots`; each gets its marker offset, in order of first
/// offset from `log_end_offset` on.
pub fn find_open_transactions(
    dir: &Path,
    segments: &[i64],
    snapshots: &[i64],
    log_end_offset: i64,
) -> Result<Vec<CutTransaction>> {
    let mut open: HashMap<i64, Open> = HashMap::new();
    let first_base = segments.first().copied().unwrap_or(log_end_offset);
    let snapshot_offset = match starting_snapshot(dir, snapshots, log_end_offset) {
        Some((offset, snapshot)) => {
            for e in &snapshot.entries {
                if let Some(first) = e.open_transaction() {
                    open.insert(
                        e.producer_id,
                        Open {
                            first_offset: first,
                            tally: TxnTally {
                                producer_epoch: e.epoch,
                                ..TxnTally::default()
                            },
                        },
                    );
                }
            }
            offset
        }
        None => first_base,
    };
    // Records of transactions the snapshot says are open were written before it: count them from their first
    // offsets (nothing else before the snapshot changes what is open).
    let scan_from = open
        .values()
        .map(|o| o.first_offset)
        .min()
        .unwrap_or(snapshot_offset)
        .min(snapshot_offset);
    let open = follow(dir, segments, open, snapshot_offset, scan_from, log_end_offset)?;
    Ok(cut_followed(open, log_end_offset))
}

/// The transactions open at `end` inside segment `base` of `dir` (a consistent cut), given those open at `base`
/// with their first offsets and tallies (`open`: what the installs' records fold to): a walk of that segment's
/// batches below `end` only.
pub(super) fn open_at_cut_in_segment(
    dir: &Path,
    base: i64,
    open: Vec<Tallied>,
    end: i64,
) -> Result<Vec<CutTransaction>> {
    let open: HashMap<i64, Open> = open
        .into_iter()
        .map(|(producer, first_offset, tally)| (producer, Open { first_offset, tally }))
        .collect();
    let open = follow(dir, &[base], open, base, base, end)?;
    Ok(cut_followed(open, end))
}

/// [`cut_at_end`] of the transactions [`follow`] left open.
fn cut_followed(open: HashMap<i64, Open>, end: i64) -> Vec<CutTransaction> {
    cut_at_end(
        open.into_iter()
            .map(|(producer_id, o)| (producer_id, o.first_offset, o.tally)),
        end,
    )
}

/// An open transaction as the records or a walk give it: producer id, first offset, tally.
pub(super) type Tallied = (i64, i64, TxnTally);

/// The most events of the followed producers one chunk of [`open_at_cut_backwards`] holds in memory.
const MAX_CHUNK_EVENTS: usize = 65_536;

/// The second chunk of [`open_at_cut_backwards`] (the first runs from the last index entry below the cut) is at
/// least this long; each further one at least twice the one before, up to [`MAX_BACKWARD_CHUNK`].
const MIN_BACKWARD_CHUNK: u64 = 16 * 1024;
/// The longest chunk [`open_at_cut_backwards`] asks for between two index entries: large enough that reading a
/// whole segment backwards costs what a forward walk does, small enough that its events stay few.
const MAX_BACKWARD_CHUNK: u64 = 4 << 20;

/// The transactions of `producers` open at `cut_offset` inside segment `base` of `dir`, read **backwards** from the
/// cut through the segment's offset index, in chunks that grow from the cut back (see [`MAX_BACKWARD_CHUNK`]), only
/// until each producer's last event before the cut is found (and, for an open transaction, where it began): a
/// producer whose transaction is short is decided within a few KiB of the cut. `open_at_base` are the transactions
/// open at the segment's base (what the installs' records fold to), used for a producer whose events reach back to
/// it. `Ok(None)` when the offset index does not describe the file (the caller walks forward).
pub(super) fn open_at_cut_backwards(
    dir: &Path,
    base: i64,
    open_at_base: &[Tallied],
    producers: &BTreeSet<i64>,
    cut_offset: i64,
) -> Result<Option<Vec<Tallied>>> {
    let path = dir.join(segment_file_name(base, SegmentFileKind::Log));
    let mut log = LogFile::open(&path)?;
    let index = read_index_file(&dir.join(segment_file_name(base, SegmentFileKind::Index)))
        .map(|b| OffsetIndex::parse(&b).entries)
        .unwrap_or_default();
    // The entries below the cut, ascending (an index whose positions do not ascend does not describe the file).
    let mut below: Vec<(u64, &OffsetIndexEntry)> = Vec::new();
    for e in index.iter().filter(|e| e.offset(base) < cut_offset) {
        let Ok(position) = u64::try_from(e.position) else {
            return Ok(None);
        };
        if position <= below.last().map_or(0, |(p, _)| *p) {
            return Ok(None);
        }
        below.push((position, e));
    }
    // Chunk starts, ascending: 0 and some of those entries. From the cut back, the nearest entry first, then each
    // next one at least twice as far back as the chunk before it was long, up to `MAX_BACKWARD_CHUNK`: a short
    // transaction is decided within a few KiB of the cut, and a producer whose transaction (or its last marker)
    // lies far back is read in chunks of MiBs, at a forward walk's pace, not one index interval (4 KiB) at a time.
    // Each start is checked to point at its batch only when the reading reaches it (checking them all first would
    // read a header per entry of the whole segment).
    let mut chosen: Vec<(u64, Option<&OffsetIndexEntry>)> = Vec::new();
    let mut chunk = MIN_BACKWARD_CHUNK;
    for &(position, e) in below.iter().rev() {
        match chosen.last() {
            Some((later, _)) if later - position < chunk => {}
            Some(_) => {
                chosen.push((position, Some(e)));
                chunk = chunk.saturating_mul(2).min(MAX_BACKWARD_CHUNK);
            }
            None => chosen.push((position, Some(e))),
        }
    }
    chosen.push((0, None));
    let starts: Vec<(u64, Option<&OffsetIndexEntry>)> = chosen.into_iter().rev().collect();
    // Per producer, what the backward reading has found: its transaction's batches after the last marker, so far.
    struct Found {
        tally: TxnTally,
        first: i64,
    }
    let mut pending: BTreeSet<i64> = producers.clone();
    let mut running: HashMap<i64, Found> = HashMap::new();
    let mut open: Vec<Tallied> = Vec::new();
    let mut end = log.len();
    for (start, entry) in starts.iter().rev() {
        if pending.is_empty() {
            break;
        }
        if let Some(e) = entry {
            if indexed_start(&log, base, std::slice::from_ref(*e), e.offset(base)) != Some(*start) {
                return Ok(None);
            }
        }
        // The chunk's events of the pending producers, in file order: (producer, a marker?, its batch).
        let mut events: Vec<(i64, bool, BatchInfo)> = Vec::new();
        let mut failure = None;
        log.scan_range(*start, end, |frame| {
            let info = frame.info;
            if info.base_offset >= cut_offset {
                return ControlFlow::Break(());
            }
            if info.magic < 2 || info.producer_id < 0 || !pending.contains(&info.producer_id) {
                return ControlFlow::Continue(());
            }
            if info.is_control {
                match marker_of(frame.bytes) {
                    Ok(Some(_)) => events.push((info.producer_id, true, info)),
                    Ok(None) => {}
                    Err(e) => {
                        failure = Some(Error::Format(e.shifted(info.position).at(&path)));
                        return ControlFlow::Break(());
                    }
                }
            } else if info.is_transactional {
                events.push((info.producer_id, false, info));
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        if events.len() > MAX_CHUNK_EVENTS {
            // A chunk this large (an index this sparse) is better walked forward.
            return Ok(None);
        }
        for (producer, marker, info) in events.into_iter().rev() {
            if !pending.contains(&producer) {
                continue;
            }
            match (marker, running.get_mut(&producer)) {
                // A marker after which nothing of it comes: closed at the cut.
                (true, None) => {
                    pending.remove(&producer);
                }
                // The marker before its open transaction: it began at the batch after.
                (true, Some(_)) => {
                    if let Some(f) = running.remove(&producer) {
                        open.push((producer, f.first, f.tally));
                    }
                    pending.remove(&producer);
                }
                (false, Some(f)) => {
                    f.tally.add(&info);
                    f.first = info.base_offset;
                }
                (false, None) => {
                    let mut tally = TxnTally::default();
                    tally.add(&info);
                    running.insert(
                        producer,
                        Found {
                            tally,
                            first: info.base_offset,
                        },
                    );
                }
            }
        }
        end = *start;
    }
    // Reached the segment's base: as the forward walk from it would have it.
    for producer in pending {
        let at_base = open_at_base.iter().find(|(p, _, _)| *p == producer);
        match (running.remove(&producer), at_base) {
            (Some(f), Some(&(_, first, tally))) => {
                let mut tally = tally;
                tally.merge(&f.tally);
                open.push((producer, first, tally));
            }
            (Some(f), None) => open.push((producer, f.first, f.tally)),
            (None, Some(&at)) => open.push(at),
            (None, None) => {}
        }
    }
    Ok(Some(open))
}

/// Follow the batches of `segments` from `scan_from` to `log_end_offset` by the tracker's rule, from `open` (the
/// transactions open at `snapshot_offset`; batches below it only add to their tallies).
fn follow(
    dir: &Path,
    segments: &[i64],
    mut open: HashMap<i64, Open>,
    snapshot_offset: i64,
    scan_from: i64,
    log_end_offset: i64,
) -> Result<HashMap<i64, Open>> {
    for (i, base) in segments.iter().enumerate() {
        if segments.get(i + 1).is_some_and(|next| *next <= scan_from) {
            continue;
        }
        let path = dir.join(segment_file_name(*base, SegmentFileKind::Log));
        let mut log = LogFile::open(&path)?;
        let mut failure: Option<Error> = None;
        // Nothing before `scan_from` changes the outcome: the segment holding it is read from its offset index's
        // entry at or below it (a snapshot at the log end reads a few KiB instead of the whole last segment).
        let from = if *base < scan_from {
            scan_start(dir, &log, *base, scan_from)
        } else {
            0
        };
        let len = log.len();
        log.scan_range(from, len, |frame| {
            let info = &frame.info;
            if info.base_offset >= log_end_offset {
                // Beyond a consistent cut: left behind, not promoted.
                return ControlFlow::Break(());
            }
            if info.magic < 2 || info.producer_id < 0 || info.last_offset < scan_from {
                return ControlFlow::Continue(());
            }
            let pid = info.producer_id;
            if info.last_offset < snapshot_offset {
                if info.is_transactional && !info.is_control {
                    if let Some(o) = open.get_mut(&pid).filter(|o| info.base_offset >= o.first_offset) {
                        o.tally.add(info);
                    }
                }
                return ControlFlow::Continue(());
            }
            if info.is_control {
                match marker_of(frame.bytes) {
                    Ok(Some(_)) => {
                        open.remove(&pid);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        failure = Some(Error::Format(e.shifted(info.position).at(&path)));
                        return ControlFlow::Break(());
                    }
                }
            } else if info.is_transactional {
                open.entry(pid)
                    .or_insert(Open {
                        first_offset: info.base_offset,
                        tally: TxnTally::default(),
                    })
                    .tally
                    .add(info);
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
    }
    Ok(open)
}

/// The transactions open at `log_end_offset`, `(producer id, first offset, tally)`, as promotion aborts them: in
/// order of first offset, their markers from `log_end_offset` on, with promotion's one coordinator epoch.
pub(super) fn cut_at_end(open: impl IntoIterator<Item = Tallied>, log_end_offset: i64) -> Vec<CutTransaction> {
    let mut open: Vec<Tallied> = open.into_iter().collect();
    open.sort_unstable_by_key(|(_, first_offset, _)| *first_offset);
    open.into_iter()
        .zip(log_end_offset..)
        .map(|((producer_id, first_offset, t), marker_offset)| CutTransaction {
            producer_id,
            producer_epoch: t.producer_epoch,
            coordinator_epoch: MARKER_COORDINATOR_EPOCH,
            first_offset,
            records: t.records,
            batches: t.batches,
            bytes: t.bytes,
            marker_offset,
        })
        .collect()
}

/// The COMMIT/ABORT marker of a control batch (`None` for other control records and for a control batch left
/// empty by compaction, which the broker ignores too).
fn marker_of(batch: &[u8]) -> std::result::Result<Option<EndTxnMarker>, ParseError> {
    let header = parse_header(batch)?;
    let record = decode_control_batch(batch, &header, &DeepLimits::default())?;
    Ok(record.and_then(|r| r.marker))
}

/// The ABORT marker batches for `cut` (in its order), and the `.txnindex` entries the broker would have appended
/// for them.
pub fn abort_markers(cut: &[CutTransaction], leader_epoch: i32, timestamp: i64) -> (Vec<u8>, Vec<AbortedTxn>) {
    let mut tracker = TxnTracker::with_open_transactions(cut.iter().map(|c| (c.producer_id, c.first_offset)));
    let mut bytes = Vec::new();
    let mut entries = Vec::new();
    for c in cut {
        let marker = EndTxnMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: c.coordinator_epoch,
        };
        let batch = end_txn_marker_batch(
            c.marker_offset,
            timestamp,
            leader_epoch,
            c.producer_id,
            c.producer_epoch,
            marker,
        );
        let info = BatchInfo {
            position: bytes.len() as u64,
            size: batch.len() as u64,
            magic: 2,
            base_offset: c.marker_offset,
            last_offset: c.marker_offset,
            max_timestamp: timestamp,
            partition_leader_epoch: leader_epoch,
            producer_id: c.producer_id,
            producer_epoch: c.producer_epoch,
            is_transactional: true,
            control: Some(ControlType::Abort),
            is_control: true,
            records_count: 1,
        };
        entries.extend(tracker.on_batch(&info));
        bytes.extend_from_slice(&batch);
    }
    (bytes, entries)
}

/// The `.txnindex` entries of segment `base` in the partition `dir` whose segments are `segments` (ascending): one per
/// ABORT marker in that segment closing a transaction with data, as the broker appends them ([`TxnTracker`], the rule
/// `verify` checks the index against). For a tailed active segment, whose companions on the mirror are derived ones
/// (`tail::companions`), rewritten at promotion. Open transactions are followed from the first segment on (memory
/// bounded by the number of producers); a transaction open across the first segment's base is taken to start at its
/// first batch in the mirror, as `verify` without a producer snapshot does.
pub fn txn_index_entries(dir: &Path, segments: &[i64], base: i64) -> Result<Vec<AbortedTxn>> {
    let paths: Vec<_> = segments
        .iter()
        .filter(|s| **s <= base)
        .map(|s| dir.join(segment_file_name(*s, SegmentFileKind::Log)))
        .collect();
    let paths: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let (_, entries) = txn_index::follow_segments(&paths, None, TxnTracker::new())?;
    Ok(entries)
}

/// Write the `.txnindex` of segment `base` in `dir` (none when `entries` is empty, as Kafka creates it lazily).
pub fn write_txn_index(dir: &Path, base: i64, entries: &[AbortedTxn]) -> Result<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let txn = dir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
    write_atomically(&txn, &txn_index::serialize(entries))?;
    Ok(())
}

/// After a crash, before abort markers are appended again to segment `base` of the partition being built in `dir`
/// (whose `.log` is cut back to the planned bytes): its offset, time and transaction index entries at or after
/// `end` (the planned log end offset, where the markers begin) removed, so that what an earlier run wrote for the
/// markers is written again the same way, not twice. Nothing when a file is missing or holds no such entry.
pub fn cut_companions_back(dir: &Path, base: i64, end: i64) -> Result<()> {
    let read = |kind: SegmentFileKind| -> Result<Option<Vec<u8>>> {
        let path = dir.join(segment_file_name(base, kind));
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&path, e)),
        }
    };
    if let Some(bytes) = read(SegmentFileKind::Index)? {
        let index = OffsetIndex::parse(&bytes);
        let kept: Vec<OffsetIndexEntry> = index.entries.iter().copied().filter(|e| e.offset(base) < end).collect();
        if kept.len() != index.entries.len() {
            write_atomically(
                &dir.join(segment_file_name(base, SegmentFileKind::Index)),
                &serialize_offset_index(&kept),
            )?;
        }
    }
    if let Some(bytes) = read(SegmentFileKind::TimeIndex)? {
        let index = TimeIndex::parse(&bytes);
        let kept: Vec<TimeIndexEntry> = index.entries.iter().copied().filter(|e| e.offset(base) < end).collect();
        if kept.len() != index.entries.len() {
            write_atomically(
                &dir.join(segment_file_name(base, SegmentFileKind::TimeIndex)),
                &serialize_time_index(&kept),
            )?;
        }
    }
    if let Some(bytes) = read(SegmentFileKind::TxnIndex)? {
        let index = TxnIndex::parse(&bytes);
        let kept: Vec<AbortedTxn> = index.entries.iter().copied().filter(|e| e.last_offset < end).collect();
        if kept.len() != index.entries.len() || index.trailing_bytes != 0 {
            let path = dir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
            if kept.is_empty() {
                super::files::remove_file(&path)?;
            } else {
                write_atomically(&path, &txn_index::serialize(&kept))?;
            }
        }
    }
    Ok(())
}

/// Largest value of a segment-relative offset or file position (both are 32-bit in Kafka's indexes).
const MAX_RELATIVE: i64 = i32::MAX as i64;

/// Whether `markers` bytes ending at offset `end` still fit the segment of base `base` and `size` bytes (relative
/// offsets and positions must stay 32-bit; otherwise the broker would have rolled a new segment).
pub fn fits_in_segment(base: i64, size: u64, end: i64, marker_bytes: usize) -> bool {
    let size_after = size.saturating_add(marker_bytes as u64);
    end.saturating_sub(base) <= MAX_RELATIVE && size_after <= MAX_RELATIVE as u64
}

/// Append the markers to the segment `base` in `dir` (its `.log` must exist) and their entries to its
/// `.txnindex` (the `.log` durable with the rest of staging, by one `syncfs`: `files::write_staged`).
pub fn append_markers(dir: &Path, base: i64, markers: &[u8], entries: &[AbortedTxn]) -> Result<()> {
    let log = dir.join(segment_file_name(base, SegmentFileKind::Log));
    let mut file = OpenOptions::new()
        .append(true)
        .open(&log)
        .map_err(|e| Error::io(&log, e))?;
    file.write_all(markers).map_err(|e| Error::io(&log, e))?;
    if entries.is_empty() {
        return Ok(());
    }
    let txn = dir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
    let mut existing = match std::fs::read(&txn) {
        Ok(bytes) => TxnIndex::parse(&bytes).entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(&txn, e)),
    };
    existing.extend_from_slice(entries);
    write_atomically(&txn, &txn_index::serialize(&existing))?;
    Ok(())
}

/// Rewrite the offset and time index of segment `base` in `dir` from its `.log`, as Kafka leaves them when it
/// rolls the segment (trimmed, the time index sealed with the segment's largest timestamp): the segment stops
/// being the active one at promotion, and the broker rebuilds (and so re-reads producer state from) a segment
/// whose indexes fail its load-time checks.
///
/// With Kafka's default `index.interval.bytes` whatever the topic's: the mirror does not record the source topic's
/// interval, the target topic's may differ from it, and any interval gives indexes the broker accepts. Kafka does
/// not check offset or time index contents at load (`LogSegment.sanityCheck`: "Sanity checks for time index and
/// offset index are skipped"), a lookup needs only entries that are lower bounds on batch boundaries
/// (`OffsetIndex.lookup` takes the largest entry at or below the target and scans the log from its position), and
/// appends after the load continue with the broker's own interval (`bytesSinceLastIndexEntry` starts at 0 for a
/// loaded segment). What differs is only how sparse this prefix's index is.
pub fn rebuild_indexes(dir: &Path, base: i64) -> Result<()> {
    let log_path = dir.join(segment_file_name(base, SegmentFileKind::Log));
    let mut offsets = OffsetIndexBuilder::new(base, DEFAULT_INDEX_INTERVAL_BYTES);
    let mut times = TimeIndexBuilder::new(base, DEFAULT_INDEX_INTERVAL_BYTES);
    let mut failure = None;
    let mut log = LogFile::open(&log_path)?;
    log.scan(|frame| {
        let pushed = offsets.push(&frame.info).and_then(|_| times.push(&frame.info));
        match pushed {
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(Error::Format(e.at(&log_path)));
    }
    times.seal();
    // Only ever a partition being built in staging (`files::write_staged` says why no temporary file).
    write_staged(
        &dir.join(segment_file_name(base, SegmentFileKind::Index)),
        &offsets.to_bytes(),
    )?;
    write_staged(
        &dir.join(segment_file_name(base, SegmentFileKind::TimeIndex)),
        &times.to_bytes(),
    )?;
    Ok(())
}

/// Make a last segment that stops being the active one an inactive segment the way the broker's roll does
/// (`LogSegment.onBecomeInactiveSegment`: one final `timeIndex.maybeAppend(maxTimestampSoFar)`, indexes trimmed),
/// from its kept indexes instead of a walk of the whole `.log`. Returns `false` (nothing written) when the kept
/// indexes cannot be used — missing, a partial slot, an entry past the end or at no batch, a frame that does not
/// check — and the caller rebuilds them ([`rebuild_indexes`]).
///
/// Why a short read is enough: every time-index entry is the largest timestamp up to the batch holding its offset
/// (Kafka's `maybeAppend(maxTimestampSoFar, …)`; install checked each entry against the batches, strictly:
/// `verify::check_segment_against_epochs`), so the time index's last entry covers every batch before the one
/// holding its offset. The segment's max timestamp is the larger of that entry and the batches from there to the
/// end, which are found through the offset index and read. That is the batches after the last index entry
/// (`index.interval.bytes`, 4 KiB by default, and one batch) when timestamps grow, as they do for a producer's
/// `CreateTime` or `LogAppendTime`: a handed-over segment costs a read of its indexes and its tail, not of its
/// `.log`, and the failover's install step stops growing with the data (docs/BENCHMARKS.md). The kept indexes also
/// keep the source broker's own interval.
///
/// `markers_at`: where abort markers appended after the kept indexes start (`None`: nothing appended). They get the
/// entries the builders' rule gives them at Kafka's default interval, counted from the last kept entry: for the tail
/// appender's indexes (kept at that interval) exactly what a rebuild of the whole `.log` writes ([`rebuild_indexes`]);
/// for a broker's (the topic's interval) entries a broker would accept, as any lower bound on a batch boundary is.
///
/// Both files are replaced atomically: a handover's `.building` holds the only copy of these files, so a crash
/// must leave either the kept index or the sealed one, never a torn one that a rerun would trust.
pub fn seal_kept_indexes(dir: &Path, base: i64, markers_at: Option<u64>) -> Result<bool> {
    let log_path = dir.join(segment_file_name(base, SegmentFileKind::Log));
    let index_path = dir.join(segment_file_name(base, SegmentFileKind::Index));
    let time_path = dir.join(segment_file_name(base, SegmentFileKind::TimeIndex));
    let (Ok(index_bytes), Ok(time_bytes)) = (read_index_file(&index_path), read_index_file(&time_path)) else {
        return Ok(false);
    };
    let offsets = OffsetIndex::parse(&index_bytes);
    let times = TimeIndex::parse(&time_bytes);
    if offsets.layout.partial_bytes != 0 || times.layout.partial_bytes != 0 {
        return Ok(false);
    }
    let mut log = LogFile::open(&log_path)?;
    let size = log.len();
    let markers_at = markers_at.unwrap_or(size);
    // Where the batch holding the time index's last offset is found: the offset index's largest entry at or
    // below it, checked to point at its batch (the file's start without one).
    let last_time = times.entries.last().copied();
    let covered = last_time.map_or(base, |e| e.offset(base));
    let Some(from) = indexed_start(&log, base, &offsets.entries, covered) else {
        return Ok(false);
    };
    let mut offset_entries = offsets.entries;
    let offsets_kept = offset_entries.len();
    let mut time_entries = times.entries;
    let times_kept = time_entries.len();
    // The largest batch max timestamp so far, with the last offset of the first batch reaching it; appended to the
    // time index only when above its last entry's (`TimeIndex.maybeAppend`).
    let mut max_timestamp = last_time.map_or(NO_TIMESTAMP, |e| e.timestamp);
    let mut max_offset = None;
    let maybe_append = |entries: &mut Vec<TimeIndexEntry>, timestamp: i64, offset: Option<i64>| -> bool {
        let Some(offset) = offset else { return true };
        if entries.last().is_some_and(|e| e.timestamp >= timestamp) {
            return true;
        }
        match i32::try_from(offset - base) {
            Ok(relative_offset) => {
                entries.push(TimeIndexEntry {
                    timestamp,
                    relative_offset,
                });
                true
            }
            Err(_) => false,
        }
    };
    // Batches appended after the kept indexes (abort markers) get entries by the rule the kept ones follow
    // (`OffsetIndexBuilder`: an entry for the first batch more than the interval past the last entry's).
    let mut last_entry_position = offset_entries
        .last()
        .map_or(0, |e| u64::try_from(e.position).unwrap_or(0));
    let mut first_frame = None;
    let mut bad_frame = false;
    let scanned = log.scan_range(from, size, |frame| {
        let info = &frame.info;
        first_frame.get_or_insert(info.base_offset);
        if !frame.crc_matches() || info.last_offset < base {
            bad_frame = true;
            return ControlFlow::Break(());
        }
        if info.max_timestamp > max_timestamp {
            max_timestamp = info.max_timestamp;
            max_offset = Some(info.last_offset);
        }
        if info.position >= markers_at
            && info.position.saturating_sub(last_entry_position) > DEFAULT_INDEX_INTERVAL_BYTES
        {
            let (Ok(relative_offset), Ok(position)) =
                (i32::try_from(info.last_offset - base), i32::try_from(info.position))
            else {
                bad_frame = true;
                return ControlFlow::Break(());
            };
            offset_entries.push(OffsetIndexEntry {
                relative_offset,
                position,
            });
            last_entry_position = info.position;
            if !maybe_append(&mut time_entries, max_timestamp, max_offset) {
                bad_frame = true;
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    let Ok(scanned) = scanned else {
        return Ok(false);
    };
    // The scan must reach the end of the file, from a batch at or below the time index's last offset.
    let time_entry_in_scan = last_time.is_none_or(|_| first_frame.is_some_and(|first| first <= covered));
    if bad_frame || scanned.end != size || !time_entry_in_scan {
        return Ok(false);
    }
    // The roll's entry.
    if !maybe_append(&mut time_entries, max_timestamp, max_offset) {
        return Ok(false);
    }
    if offsets.layout.zero_tail != 0 || offset_entries.len() != offsets_kept {
        write_atomically(&index_path, &serialize_offset_index(&offset_entries))?;
    }
    if times.layout.zero_tail != 0 || time_entries.len() != times_kept {
        write_atomically(&time_path, &serialize_time_index(&time_entries))?;
    }
    Ok(true)
}
