//! What retention would delete, as reported: the data types of a retention prediction.
//!
//! Why apart from the prediction: a refusal and a report carry a [`RetentionLoss`]; keeping the types in a module
//! that imports nothing of promotion lets the refusal type (and the error that carries refusals) use them without
//! importing the code that reads the target's files.

use std::fmt;
use std::path::PathBuf;

use segment_format::TopicPartition;
use serde::Serialize;

/// The retention that applies to one topic, and where each figure came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicRetention {
    /// `None`: unlimited.
    pub retention_ms: Option<i64>,
    /// `None`: unlimited.
    pub retention_bytes: Option<u64>,
    /// False for a compact-only cleanup policy: nothing is deleted by age or size.
    pub deletes: bool,
    /// Where the values came from, e.g. `retention.ms=60000 (topic config)`.
    pub source: String,
}

/// One mirror segment as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentAge {
    pub base_offset: i64,
    /// Exclusive end: the next segment's base offset, or the log end offset.
    pub end_offset: i64,
    /// Newest batch `maxTimestamp`; `None` when no batch carries one.
    pub max_timestamp: Option<i64>,
    pub bytes: u64,
}

/// Why a segment would go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteReason {
    /// `now - max_timestamp > retention.ms`.
    RetentionMs,
    /// The log is larger than `retention.bytes` without it.
    RetentionBytes,
}

/// One segment the target would delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoomedSegment {
    pub base_offset: i64,
    pub end_offset: i64,
    pub max_timestamp: Option<i64>,
    pub bytes: u64,
    pub reason: DeleteReason,
}

/// Promoted data the target topic's retention would delete at the broker's first retention check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionLoss {
    pub partition: TopicPartition,
    pub retention: TopicRetention,
    /// When the prediction was made (ms since the epoch).
    pub now_ms: i64,
    /// `now - retention.ms`: segments whose newest record is older go.
    pub cutoff_ms: Option<i64>,
    /// The oldest segment's newest timestamp.
    pub oldest_segment_max_timestamp: Option<i64>,
    /// Bytes of the whole promoted log.
    pub log_bytes: u64,
    /// The segments that go, oldest first.
    pub segments: Vec<DoomedSegment>,
    /// Offsets that go: `[log start offset, first_kept_offset)`.
    pub first_kept_offset: i64,
    pub log_start_offset: i64,
    /// The first segment's `.log` in the mirror.
    pub log: PathBuf,
}

impl RetentionLoss {
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }
}

/// A duration in days, hours, minutes and seconds, for people.
pub struct Age(pub i64);

impl fmt::Display for Age {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0 / 1000;
        let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
        if d > 0 {
            write!(f, "{d}d {h}h")
        } else if h > 0 {
            write!(f, "{h}h {m}m")
        } else if m > 0 {
            write!(f, "{m}m {sec}s")
        } else {
            write!(f, "{}ms", self.0)
        }
    }
}

impl fmt::Display for RetentionLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (first, last) = (self.segments.first(), self.segments.last());
        write!(
            f,
            "{}: the target's retention would delete offsets [{}, {}) — {} segment(s) from {}, {} of {} bytes — at \
             the broker's first retention check",
            self.partition,
            self.log_start_offset,
            self.first_kept_offset,
            self.segments.len(),
            self.log.display(),
            self.bytes(),
            self.log_bytes
        )?;
        if let (Some(cutoff), Some(oldest)) = (self.cutoff_ms, self.oldest_segment_max_timestamp) {
            if self.segments.iter().any(|s| s.reason == DeleteReason::RetentionMs) {
                write!(
                    f,
                    ": the oldest segment's newest record has timestamp {oldest} ({} old), before now - retention.ms \
                     = {cutoff}",
                    Age(self.now_ms.saturating_sub(oldest))
                )?;
                if let Some(newest) = last.and_then(|s| s.max_timestamp) {
                    write!(f, "; the newest record deleted has timestamp {newest}")?;
                }
            }
        }
        if self.segments.iter().any(|s| s.reason == DeleteReason::RetentionBytes) {
            write!(
                f,
                "; the log exceeds retention.bytes ({})",
                self.retention
                    .retention_bytes
                    .map_or_else(|| "?".into(), |b| b.to_string())
            )?;
        }
        let _ = first;
        write!(f, " [{}]", self.retention.source)
    }
}
