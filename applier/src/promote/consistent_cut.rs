//! The consistent cut (`segmirror promote --consistent-cut T`): every partition of the link ends at the same
//! source moment instead of at its own lag.
//!
//! Why: each partition of a mirror ends wherever its replication last got to; after a failover one partition may
//! hold a minute more than another, and an application that reads across partitions (a join, an order split by
//! key) sees a state the source never had at any one time. Cutting every partition at one timestamp makes the DR
//! copy reflect one moment (up to clock skew between the source's producers or brokers).
//!
//! Rule: a partition is cut **before the first batch whose max timestamp is greater than `T`**; everything after
//! it is left behind, even later batches with smaller timestamps, so the promoted log stays a contiguous prefix of
//! the source (offsets are positions; a hole would be a record the source had and the target skips). So no
//! promoted record has a timestamp above `T`.
//!
//! Which timestamp: the batch's stored `maxTimestamp`, whatever the topic's `message.timestamp.type`. That is
//! what a consumer sees: with `LogAppendTime` the broker stamps the batch's max timestamp with its append time
//! and consumers read every record's timestamp as that one; with `CreateTime` it is the largest producer-given
//! record timestamp of the batch. So `T` means "appended by the source broker at or before T" on a
//! LogAppendTime topic and "created by the producer at or before T" on a CreateTime one; a CreateTime producer
//! with a skewed clock moves the cut of its partitions (the report names the first batch left behind and its
//! timestamp). Batches wholly below the log start offset are not looked at (no consumer reads them); legacy
//! magic-0 messages have no timestamp (-1) and never cause a cut.
//!
//! The transactional cut (`txn_cut`) then applies within the prefix: a transaction open at the new end gets its
//! ABORT marker there.
//!
//! # What is read
//! A cut is usually near the end (a failover to the moment before an incident), so finding it reads what lies after
//! it and, before it, only where the segments' time indexes lead. An entry `(T', o)` says the largest batch max
//! timestamp up to the batch holding offset `o` is `T'`, first reached by that batch (what install checked every
//! installed index against); a sealed segment ends in an entry of its max timestamp (Kafka appends it at a roll).
//! So a sealed segment whose last entry is not newer than `T` is not read at all, and in the segment holding the cut
//! the scan starts at the offset-index entry below the last entry not newer than `T`: the newer batch lies between
//! that entry's batch and the first newer entry's (about one `index.interval.bytes` apart). Every hint is checked
//! against the batches it names (their max timestamps, where the newer one is found); one that does not hold, and a
//! segment without a usable index, is scanned whole, as before. A tailed active segment's index counts only where
//! it is what the appender kept. Every batch read has its CRC checked, and what lies after the cut is counted for
//! the report (batches and bytes left behind).
//!
//! The transactions open at the cut come from those open at the end and the batches after the cut. A producer a
//! marker follows is decided by the record of the transaction its first marker after the cut closed: the tail
//! appender's (its closed log holds every marker of the active segment, D0059), or that of the segment holding the
//! cut, where it is the producer's last marker there; otherwise it is read backwards from the cut
//! (`recorded_txns::open_at_cut_reading_back`, D0057). A handover hands the segment holding the cut over and cuts it
//! back (`build`). So a consistent cut no longer reads the mirror from its start.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;

use segment_format::batch::{BatchInfo, ControlType};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::index::{read_index_file, OffsetIndex, TimeIndex};
use segment_format::log::LogFile;
use segment_format::txn_index::TxnTally;
use serde::{Deserialize, Serialize};

use segment_format::error::Error as FormatError;

use super::error::{Error, Result};
use super::frames::indexed_start;
use super::log_end::log_end;

/// What a consistent cut did to one partition (journaled with the plan; reported).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsistentCut {
    /// The cut's timestamp `T` (ms since the epoch).
    pub timestamp_ms: i64,
    /// Where the mirror partition ended.
    pub mirror_end_offset: i64,
    /// Where the promoted log ends now (before any abort marker): the end of the last batch kept.
    pub cut_offset: i64,
    /// What was left behind: offsets `[cut_offset, mirror_end_offset)`, in so many batches and `.log` bytes.
    pub left_offsets: i64,
    pub left_batches: u64,
    pub left_bytes: u64,
    /// The first batch left behind: its first offset and max timestamp (the reason for the cut).
    pub first_left_offset: i64,
    pub first_left_timestamp: i64,
    /// Bytes of the last promoted segment's `.log` kept, when the cut falls inside it (its indexes are then
    /// rebuilt from the kept bytes); `None` when whole segments are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_segment_bytes: Option<u64>,
}

/// What the batches left behind by a cut did to each transactional producer (at most [`MAX_AFTER_PRODUCERS`]):
/// with the transactions open at the mirror's end, it tells which were open at the cut without reading before it
/// (`recorded_txns::open_at_cut_from_end`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AfterCut {
    pub producers: BTreeMap<i64, AfterProducer>,
    /// More transactional producers than are followed: nothing can be told from what is kept here.
    pub overflow: bool,
    /// The batches noted now lie in a segment after the one holding the cut ([`AfterCut::leave_cut_segment`]).
    past_cut_segment: bool,
}

/// One transactional producer's batches after a cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfterProducer {
    /// A control batch (a COMMIT or ABORT marker) of the producer lies after the cut.
    pub marker: bool,
    /// Its transactional data batches after the cut, added up.
    pub data: TxnTally,
    /// The smallest producer epoch of those batches.
    pub min_epoch: Option<i16>,
    /// The offsets of its first and last COMMIT or ABORT marker after the cut.
    pub first_marker: Option<i64>,
    pub last_marker: Option<i64>,
    /// Its transactional data batches between the cut and its first marker, added up, and their smallest producer
    /// epoch: the part after the cut of the transaction that marker closed.
    pub before_marker: TxnTally,
    pub before_marker_min_epoch: Option<i16>,
    /// Its transactional data batches between the cut and the end of the segment holding it, added up, and their
    /// smallest producer epoch: with that segment's record, they decide a producer whose first marker after the cut
    /// lies in a later segment (`recorded_txns::decided_by_record`).
    pub in_cut_segment: TxnTally,
    pub in_cut_segment_min_epoch: Option<i16>,
}

/// The most transactional producers a cut's scan follows after the cut.
pub const MAX_AFTER_PRODUCERS: usize = 1024;

impl AfterCut {
    /// One more batch after the cut, in offset order.
    pub(super) fn note(&mut self, info: &BatchInfo) {
        if info.magic < 2 || info.producer_id < 0 || !(info.is_transactional || info.is_control) || self.overflow {
            return;
        }
        if !self.producers.contains_key(&info.producer_id) && self.producers.len() >= MAX_AFTER_PRODUCERS {
            self.overflow = true;
            self.producers.clear();
            return;
        }
        let after = self.producers.entry(info.producer_id).or_default();
        let min = |e: Option<i16>| Some(e.map_or(info.producer_epoch, |e| e.min(info.producer_epoch)));
        if info.is_control {
            after.marker = true;
            if matches!(info.control, Some(ControlType::Commit | ControlType::Abort)) {
                after.first_marker = after.first_marker.or(Some(info.base_offset));
                after.last_marker = Some(info.base_offset);
            }
        } else {
            after.data.add(info);
            after.min_epoch = min(after.min_epoch);
            if after.first_marker.is_none() {
                after.before_marker.add(info);
                after.before_marker_min_epoch = min(after.before_marker_min_epoch);
            }
            if !self.past_cut_segment {
                after.in_cut_segment.add(info);
                after.in_cut_segment_min_epoch = min(after.in_cut_segment_min_epoch);
            }
        }
    }

    /// The batches noted from now on lie in segments after the one holding the cut.
    pub(super) fn leave_cut_segment(&mut self) {
        self.past_cut_segment = true;
    }
}

/// Where a partition is cut: its kept segments and the report entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutPoint {
    /// Base offsets of the segments promoted (a prefix of the input).
    pub segments: Vec<i64>,
    pub cut: ConsistentCut,
    /// Bytes of `.log` the search read: what lies after the cut, and a few KiB before it where the time indexes
    /// lead (the whole mirror without them).
    pub read_bytes: u64,
    /// What the batches left behind did to each transactional producer.
    pub after: AfterCut,
}

/// Where a segment's time index says a scan for the first batch newer than `T` may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// No batch of the segment is newer than `T`: its closing entry (the segment's max timestamp) is not.
    Older,
    /// Scan from `position`; the batch holding `held.0` reached the running max `held.1` (at most `T`), and the
    /// batch holding `stop.0` reaches `stop.1` (above `T`): the first newer batch is at or before it.
    From {
        position: u64,
        held: Option<(i64, i64)>,
        stop: Option<(i64, i64)>,
    },
}

/// The segment's time index as a hint (module docs). `sealed`: the segment has a successor, so its index ends in
/// the entry Kafka appends at a roll (the segment's max timestamp; install checked it against the batches).
/// `None` when there is no usable index: the whole segment is scanned.
fn time_hint(dir: &Path, log: &LogFile, base: i64, sealed: bool, log_start_offset: i64, t: i64) -> Option<Hint> {
    let bytes = read_index_file(&dir.join(segment_file_name(base, SegmentFileKind::TimeIndex))).ok()?;
    let entries = TimeIndex::parse(&bytes).entries;
    // What the checker at install holds the index to: timestamps strictly increasing above -1, offsets not
    // decreasing and inside the segment. Anything else is not an index to lean on.
    let ordered = entries.windows(2).all(|w| {
        w.first()
            .zip(w.get(1))
            .is_some_and(|(a, b)| a.timestamp < b.timestamp && a.relative_offset <= b.relative_offset)
    });
    if entries.is_empty() || !ordered || entries.iter().any(|e| e.relative_offset < 0 || e.timestamp < 0) {
        return None;
    }
    let newer = entries.partition_point(|e| e.timestamp <= t);
    let stop = entries.get(newer).map(|e| (e.offset(base), e.timestamp));
    if stop.is_none() && sealed {
        return Some(Hint::Older);
    }
    // Below the log start nothing cuts: a scan from there needs no held entry.
    let held = newer
        .checked_sub(1)
        .and_then(|i| entries.get(i))
        .map(|e| (e.offset(base), e.timestamp))
        .filter(|(offset, _)| *offset >= log_start_offset);
    let from = held.map_or(log_start_offset, |(offset, _)| offset);
    let offsets = read_index_file(&dir.join(segment_file_name(base, SegmentFileKind::Index)))
        .map(|b| OffsetIndex::parse(&b).entries)
        .unwrap_or_default();
    let position = if from > base {
        indexed_start(log, base, &offsets, from)?
    } else {
        0
    };
    Some(Hint::From { position, held, stop })
}

/// Find the consistent cut at `timestamp_ms` of the mirror partition `dir` (segments `segments`, ascending; log
/// start and end offsets as planned). `None` when no batch is newer than `T` (nothing is cut).
///
/// Reads what lies after the cut (counted for the report) and, before it, only where the segments' time indexes
/// lead: a segment whose closing entry is not newer than `T` is not read at all, and the segment holding the cut
/// from the offset-index entry below its last entry not newer than `T`. Each hint is checked against the batches
/// it names; one that does not hold, or a segment without a usable index, is scanned whole. `trust_last_index`:
/// the last segment's time index may be taken as a hint (not a tailed active segment's derived one that does not
/// match what the appender kept).
pub fn find(
    dir: &Path,
    segments: &[i64],
    log_start_offset: i64,
    log_end_offset: i64,
    timestamp_ms: i64,
    trust_last_index: bool,
) -> Result<Option<CutPoint>> {
    // The end of the last batch kept: `None` before any, or after a segment skipped whole (then read from that
    // segment's end when needed).
    let mut kept_end: Option<i64> = None;
    let mut skipped: Option<usize> = None;
    let mut first_left: Option<(usize, u64, i64, i64)> = None;
    let (mut left_batches, mut left_bytes, mut read_bytes) = (0u64, 0u64, 0u64);
    let mut after = AfterCut::default();
    for (i, base) in segments.iter().enumerate() {
        let sealed = i + 1 < segments.len();
        let path = dir.join(segment_file_name(*base, SegmentFileKind::Log));
        let mut log = LogFile::open(&path)?;
        let hint = if first_left.is_some() || !(sealed || trust_last_index) {
            None
        } else {
            time_hint(dir, &log, *base, sealed, log_start_offset, timestamp_ms)
        };
        if hint == Some(Hint::Older) {
            skipped = Some(i);
            kept_end = None;
            continue;
        }
        let scanned = if first_left.is_some() {
            // Left behind whole: counted.
            scan_from(&mut log, &path, i, 0, [None, None], log_start_offset, None, &mut after)?.found
        } else {
            scan_segment(&mut log, &path, i, hint, log_start_offset, timestamp_ms, &mut after)?
        };
        read_bytes += scanned.read_bytes;
        if first_left.is_none() && scanned.first_left.is_some() {
            // The segment holding the cut is scanned: what follows lies in later ones.
            after.leave_cut_segment();
        }
        match (scanned.first_left, first_left) {
            (_, Some(_)) => {
                left_batches += scanned.batches;
                left_bytes += scanned.bytes;
            }
            (Some(found), None) => {
                first_left = Some(found);
                left_batches = scanned.batches;
                left_bytes = scanned.bytes;
                if scanned.kept_end.is_some() {
                    kept_end = scanned.kept_end;
                }
            }
            (None, None) => {
                skipped = None;
                kept_end = scanned.kept_end.or(kept_end);
            }
        }
    }
    let Some((segment, position, first_left_offset, first_left_timestamp)) = first_left else {
        return Ok(None);
    };
    // The cut at a segment's first batch after one skipped whole: the kept log ends where that one ends.
    if position == 0 && kept_end.is_none() {
        if let Some(before) = skipped.filter(|s| s + 1 == segment) {
            let base = segments.get(before).copied().unwrap_or_default();
            let log = dir.join(segment_file_name(base, SegmentFileKind::Log));
            kept_end = Some(log_end(&log, base)?.end_offset);
        }
    }
    // Nothing a consumer could read is kept: the log is empty from its start offset.
    let visible = kept_end.filter(|end| *end > log_start_offset);
    let cut_offset = visible.unwrap_or(log_start_offset);
    let (segments, last_segment_bytes) = match visible {
        None => (Vec::new(), None),
        Some(_) if position == 0 => (segments.get(..segment).unwrap_or_default().to_vec(), None),
        Some(_) => (segments.get(..=segment).unwrap_or_default().to_vec(), Some(position)),
    };
    Ok(Some(CutPoint {
        segments,
        cut: ConsistentCut {
            timestamp_ms,
            mirror_end_offset: log_end_offset,
            cut_offset,
            left_offsets: log_end_offset.saturating_sub(cut_offset),
            left_batches,
            left_bytes,
            first_left_offset,
            first_left_timestamp,
            last_segment_bytes,
        },
        read_bytes,
        after,
    }))
}

/// What a scan of one segment found.
struct Scanned {
    /// The first batch newer than `T`: (segment index, position, base offset, max timestamp).
    first_left: Option<(usize, u64, i64, i64)>,
    /// The end of the last batch before it (of the segment's last batch when none is newer).
    kept_end: Option<i64>,
    /// Batches and bytes from the first newer one to the segment's end.
    batches: u64,
    bytes: u64,
    read_bytes: u64,
}

/// Scan segment `index` (open as `log`) for the first batch newer than `t`, from where `hint` says; a hint the
/// batches contradict is dropped and the segment scanned from its start.
fn scan_segment(
    log: &mut LogFile,
    path: &Path,
    index: usize,
    hint: Option<Hint>,
    log_start_offset: i64,
    t: i64,
    after: &mut AfterCut,
) -> Result<Scanned> {
    let Some(Hint::From { position, held, stop }) = hint else {
        return scan_from(log, path, index, 0, [None, None], log_start_offset, Some(t), after).map(|s| s.found);
    };
    let watch = [held.map(|h| h.0), stop.map(|s| s.0)];
    // Noted apart: a hint the batches contradict means a scan again from the start.
    let mut hinted_after = AfterCut::default();
    let scanned = scan_from(
        log,
        path,
        index,
        position,
        watch,
        log_start_offset,
        Some(t),
        &mut hinted_after,
    )?;
    let found = &scanned.found;
    // The batch holding an entry's offset reached exactly the entry's timestamp (else the index is not this
    // file's); the newer batch lies at or before the stop entry's (unless that one is below the log start); a scan
    // begun after the held entry saw a kept batch before the newer one.
    let reached = |entry: Option<(i64, i64)>, max: Option<i64>| entry.is_none_or(|(_, ts)| max == Some(ts));
    let visible_stop = stop.filter(|(offset, _)| *offset >= log_start_offset);
    let in_time = match (visible_stop, found.first_left) {
        (Some((offset, _)), Some((_, _, first, _))) => first <= offset,
        (Some(_), None) => false,
        (None, _) => true,
    };
    let began_kept = held.is_none() || found.first_left.is_none() || found.kept_end.is_some();
    if reached(held, scanned.watched[0]) && reached(visible_stop, scanned.watched[1]) && in_time && began_kept {
        *after = hinted_after;
        return Ok(scanned.found);
    }
    let read = scanned.found.read_bytes;
    let mut whole = scan_from(log, path, index, 0, [None, None], log_start_offset, Some(t), after)?.found;
    whole.read_bytes += read;
    Ok(whole)
}

/// A scan's findings, and the max timestamp of the batch holding each watched offset.
struct ScanFrom {
    found: Scanned,
    watched: [Option<i64>; 2],
}

/// Scan `log` from `position` to its end: the first batch newer than `t` (at or above the log start), the end of
/// the batch before it, and what follows it; `t` `None`: every batch is left behind (a segment after the cut).
/// Every batch's CRC is checked: a timestamp is trusted only from a batch whose CRC (which covers it) matches.
#[allow(clippy::too_many_arguments)]
fn scan_from(
    log: &mut LogFile,
    path: &Path,
    index: usize,
    position: u64,
    watch: [Option<i64>; 2],
    log_start_offset: i64,
    t: Option<i64>,
    after: &mut AfterCut,
) -> Result<ScanFrom> {
    let mut found = Scanned {
        first_left: None,
        kept_end: None,
        batches: 0,
        bytes: 0,
        read_bytes: 0,
    };
    let mut watched = [None, None];
    let mut failure = None;
    let len = log.len();
    log.scan_range(position, len, |frame| {
        let info = &frame.info;
        if let Some(defect) = frame.crc_defect() {
            failure = Some(FormatError::corrupt(
                path,
                frame.crc_position(),
                Some(info.base_offset),
                defect,
            ));
            return ControlFlow::Break(());
        }
        found.read_bytes += info.size;
        for (offset, max) in watch.iter().zip(watched.iter_mut()) {
            if offset.is_some_and(|o| info.base_offset <= o && o <= info.last_offset) {
                *max = Some(info.max_timestamp);
            }
        }
        if found.first_left.is_some() || t.is_none() {
            found.batches += 1;
            found.bytes += info.size;
            after.note(info);
        } else if info.last_offset >= log_start_offset && t.is_some_and(|t| info.max_timestamp > t) {
            found.first_left = Some((index, info.position, info.base_offset, info.max_timestamp));
            found.batches = 1;
            found.bytes = info.size;
            after.note(info);
        } else {
            found.kept_end = Some(info.last_offset.saturating_add(1));
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failure {
        return Err(Error::Format(e));
    }
    Ok(ScanFrom { found, watched })
}

/// Parse `--consistent-cut`: milliseconds since the epoch, or an RFC 3339 date and time (`2026-12-02T17:00:00Z`,
/// `...+01:00`, with fractions of a second down to the millisecond).
pub fn parse_timestamp(text: &str) -> std::result::Result<i64, String> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        return if ms >= 0 {
            Ok(ms)
        } else {
            Err(format!("{text}: a timestamp before 1970 cannot be a cut"))
        };
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{text:?} is neither milliseconds since the epoch nor an RFC 3339 time ({e})"))
}

#[cfg(test)]
mod tests;
