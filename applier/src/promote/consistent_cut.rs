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
//! ABORT marker there. The scan reads (and checks the CRC of) every batch of the promoted segments: opt-in cost,
//! one sequential read of the mirror.

use std::ops::ControlFlow;
use std::path::Path;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::LogFile;
use serde::{Deserialize, Serialize};

use segment_format::error::Error as FormatError;

use super::error::{Error, Result};

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

/// Where a partition is cut: its kept segments and the report entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutPoint {
    /// Base offsets of the segments promoted (a prefix of the input).
    pub segments: Vec<i64>,
    pub cut: ConsistentCut,
}

/// Find the consistent cut at `timestamp_ms` of the mirror partition `dir` (segments `segments`, ascending; log
/// start and end offsets as planned). `None` when no batch is newer than `T` (nothing is cut).
pub fn find(
    dir: &Path,
    segments: &[i64],
    log_start_offset: i64,
    log_end_offset: i64,
    timestamp_ms: i64,
) -> Result<Option<CutPoint>> {
    // The end of the last batch kept, and where the first one left behind is (segment index, position).
    let mut kept_end: Option<i64> = None;
    let mut first_left: Option<(usize, u64, i64, i64)> = None;
    let (mut left_batches, mut left_bytes) = (0u64, 0u64);
    for (i, base) in segments.iter().enumerate() {
        let path = dir.join(segment_file_name(*base, SegmentFileKind::Log));
        let mut log = LogFile::open(&path)?;
        let mut failure = None;
        log.scan(|frame| {
            let info = &frame.info;
            // A timestamp is trusted only from a batch whose CRC (which covers it) matches.
            if let Some(defect) = frame.crc_defect() {
                failure = Some(FormatError::corrupt(
                    &path,
                    frame.crc_position(),
                    Some(info.base_offset),
                    defect,
                ));
                return ControlFlow::Break(());
            }
            if first_left.is_some() {
                left_batches += 1;
                left_bytes += info.size;
            } else if info.last_offset >= log_start_offset && info.max_timestamp > timestamp_ms {
                first_left = Some((i, info.position, info.base_offset, info.max_timestamp));
                left_batches = 1;
                left_bytes = info.size;
            } else {
                kept_end = Some(info.last_offset.saturating_add(1));
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = failure {
            return Err(Error::Format(e));
        }
    }
    let Some((segment, position, first_left_offset, first_left_timestamp)) = first_left else {
        return Ok(None);
    };
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
    }))
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
