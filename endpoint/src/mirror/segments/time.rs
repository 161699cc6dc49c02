//! ListOffsets by time: the first record at or after a timestamp, and the record with the largest timestamp.
//!
//! Both answer at the record level, as Kafka does (`FileRecords.searchForTimestamp` and
//! `RecordBatch.offsetOfMaxTimestamp` iterate the records of the batch they stop at), so the one batch found is
//! decoded (decompressed if need be, through `segment_format`'s bounded streaming walk); every other batch is
//! judged by its header. The `.timeindex` says where to start: a sealed segment whose largest timestamp is below
//! the target is skipped whole, and in the segment searched the walk starts at the batch of the last entry at or
//! below the target.

use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use segment_format::legacy::for_each_message;
use segment_format::record::{for_each_record, DeepLimits};

use super::fetch::MAX_BATCH_BYTES;
use super::walk::{time_index_floor, time_index_last, walker_for, Header, Segment, Step, Walker};
use super::{format_error, invalid, Listing};

/// A record found by time: its offset, its timestamp, and the leader epoch of its batch (`None` when the batch has
/// none), as ListOffsets returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: Option<i32>,
}

/// ListOffsets by time, as Kafka's `UnifiedLog.fetchOffsetByTimestamp`: the first record, in offset order, at or
/// after `start` (the log start offset) and below `upper`, whose timestamp is at or after `timestamp`, found in the
/// first batch whose max timestamp is; `None` when no record below `upper` is that late. Where Kafka searches only
/// the first segment whose largest timestamp reaches the target (and answers nothing if its matching records are
/// all below the log start), this goes on into the next segments, so a log start raised above the first segment's
/// base gives the first matching record at or after it.
pub fn offset_for_timestamp(dir: &Path, timestamp: i64, start: i64, upper: i64) -> io::Result<Option<TimestampOffset>> {
    let listing = Listing::of(dir)?;
    for (i, &base) in listing.segments.iter().enumerate() {
        if base >= upper {
            break;
        }
        let next_base = listing.next_base(i);
        if next_base.is_some_and(|n| n <= start) {
            continue;
        }
        let Some(seg) = Segment::open(dir, base)? else {
            continue;
        };
        if next_base.is_some_and(|n| n <= upper) {
            if let Some(last) = time_index_last(&seg, upper)? {
                if last.timestamp < timestamp {
                    continue;
                }
            }
        }
        let from = time_index_floor(&seg, timestamp, upper)?
            .map_or(seg.base, |e| e.offset)
            .max(start);
        let mut walker = walker_for(&seg, from, upper)?;
        loop {
            match walker.next_step()? {
                Step::Batch(h) if h.last_offset >= upper => return Ok(None),
                Step::Batch(h) if h.max_timestamp >= timestamp && h.last_offset >= start => {
                    let found = first_record(&seg, &h, |offset, ts| ts >= timestamp && offset >= start)?;
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                Step::Batch(_) => {}
                Step::End | Step::Partial => break,
            }
        }
    }
    Ok(None)
}

/// ListOffsets `MAX_TIMESTAMP` (-3), as Kafka 3.8+ answers it: the record with the largest timestamp below
/// `upper` (the first such record of the first batch whose max timestamp it is, in the first segment that holds
/// it), with its timestamp; `None` without records, or when that batch is magic 0 (no timestamps). Sealed segments
/// are judged by their `.timeindex`'s last entry; the segment `upper` falls in is walked from its last entry below
/// `upper`.
pub fn max_timestamp(dir: &Path, upper: i64) -> io::Result<Option<TimestampOffset>> {
    let listing = Listing::of(dir)?;
    // (timestamp, segment base, an offset of the first batch with that max timestamp, or just before it)
    let mut best: Option<(i64, i64, i64)> = None;
    for (i, &base) in listing.segments.iter().enumerate() {
        if base >= upper {
            break;
        }
        let Some(seg) = Segment::open(dir, base)? else {
            continue;
        };
        let last = time_index_last(&seg, upper)?;
        let sealed = listing.next_base(i).is_some_and(|n| n <= upper);
        let candidate = match last {
            Some(e) if sealed => Some((e.timestamp, e.offset)),
            _ => {
                let mut candidate = last.map(|e| (e.timestamp, e.offset));
                let mut walker = match last {
                    Some(e) => walker_for(&seg, e.offset, upper)?,
                    None => Walker::new(&seg, 0, upper),
                };
                while let Step::Batch(h) = walker.next_step()? {
                    if h.last_offset >= upper {
                        break;
                    }
                    if candidate.is_none_or(|(ts, _)| h.max_timestamp > ts) {
                        candidate = Some((h.max_timestamp, h.last_offset));
                    }
                }
                candidate
            }
        };
        if let Some((ts, offset)) = candidate {
            if best.is_none_or(|(b, _, _)| ts > b) {
                best = Some((ts, base, offset));
            }
        }
    }
    let Some((ts, base, hint)) = best else {
        return Ok(None);
    };
    let Some(seg) = Segment::open(dir, base)? else {
        return Ok(None);
    };
    let first_with = |mut walker: Walker<'_>| -> io::Result<Option<Header>> {
        while let Step::Batch(h) = walker.next_step()? {
            if h.last_offset >= upper {
                break;
            }
            if h.max_timestamp == ts {
                return Ok(Some(h));
            }
        }
        Ok(None)
    };
    let batch = match first_with(walker_for(&seg, hint, upper)?)? {
        Some(h) => Some(h),
        None => first_with(Walker::new(&seg, 0, upper))?,
    };
    match batch {
        Some(h) if h.magic > 0 => first_record(&seg, &h, |_, record_ts| record_ts == ts),
        _ => Ok(None),
    }
}

/// The first record of the batch `h` for which `wanted(offset, timestamp)` holds, decoding the batch.
fn first_record(
    seg: &Segment,
    h: &Header,
    mut wanted: impl FnMut(i64, i64) -> bool,
) -> io::Result<Option<TimestampOffset>> {
    let Some(bytes) = seg.frame(h, MAX_BATCH_BYTES)? else {
        return Err(invalid(format!(
            "{}: byte {}: the batch of {} bytes is larger than {MAX_BATCH_BYTES} or ends past the file",
            seg.path.display(),
            h.position,
            h.size
        )));
    };
    let leader_epoch = (h.leader_epoch >= 0).then_some(h.leader_epoch);
    let limits = DeepLimits::default();
    let mut found = None;
    let mut keep = |offset: i64, timestamp: i64| {
        if wanted(offset, timestamp) {
            found = Some(TimestampOffset {
                offset,
                timestamp,
                leader_epoch,
            });
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let walked = if h.magic >= 2 {
        segment_format::batch::parse_header(&bytes)
            .and_then(|header| for_each_record(&bytes, &header, &limits, |r| keep(r.offset, r.timestamp)))
            .map(|_| ())
    } else {
        for_each_message(&bytes, &limits, |m| keep(m.offset, m.timestamp)).map(|_| ())
    };
    walked.map_err(|e| format_error(e.shifted(h.position).at(&seg.path)))?;
    Ok(found)
}
