//! The readers of the direct applier's records under `.tail/` that others read too: the source's progress as the
//! shipper last reported it (written by `crate::direct`'s progress module, advisory) and the claims of several
//! shippers (written by its claims module before a grant goes out). Read here, from files only, so that
//! `segmirror status`, the failover's checks and the admin server read them the same way, with the applier stopped
//! as well as running. Each reader refuses a record that names another partition than its file name.

use std::fs;
use std::path::Path;

use segmirror_transport::direct::payload::{PartitionRef, Shipped};
use serde::{Deserialize, Serialize};

use super::{claim_file, progress_file, StateError};

/// Largest progress file read: a few kilobytes are written; anything far larger is not one of ours.
const MAX_PROGRESS_FILE_BYTES: u64 = 1 << 20;

/// A partition's last source progress report, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedProgress {
    pub topic: String,
    pub partition: i32,
    /// The source's log end offset (next offset after its last complete batch).
    pub log_end_offset: i64,
    /// The source's high watermark, when the shipper knew it.
    pub high_watermark: Option<i64>,
    pub active_segment_base: i64,
    /// Bytes of the source's active segment.
    pub active_segment_size: u64,
    /// The shipper's clock when it measured (ms since the Unix epoch).
    pub shipper_time_ms: u64,
    /// This applier's clock when the report arrived (ms since the Unix epoch).
    pub received_at_ms: u64,
    /// (log end offset, received at ms) where the source's log end first reached a value not installed then;
    /// increasing in both.
    #[serde(default)]
    pub points: Vec<(i64, u64)>,
    /// The shipper's send position as of the report (`None`: a shipper that does not report it, or a file written
    /// before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shipped: Option<RecordedShipped>,
    /// The shipper that sent the report ships records above the high watermark (`--upto log-end`): what the mirror
    /// holds past `high_watermark` may not be committed on the source, and a leader change may truncate it.
    /// `false` for a shipper in the default mode, and in a file written before it was recorded.
    #[serde(default)]
    pub above_high_watermark: bool,
}

/// The shipper's send position ([`Shipped`]) as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedShipped {
    pub segment_base: i64,
    /// Bytes of that segment shipped.
    pub position: u64,
    /// The offset after the last shipped record.
    pub end_offset: i64,
}

impl From<Shipped> for RecordedShipped {
    fn from(s: Shipped) -> Self {
        RecordedShipped {
            segment_base: s.segment_base,
            position: s.position,
            end_offset: s.end_offset,
        }
    }
}

impl RecordedProgress {
    /// When (received time, ms) the source was first seen holding an offset at or beyond `installed_end`, the
    /// offset after the last installed record; `None` when the last report shows nothing beyond it.
    pub fn behind_since_ms(&self, installed_end: i64) -> Option<u64> {
        if self.log_end_offset <= installed_end {
            return None;
        }
        self.points
            .iter()
            .find(|(end, _)| *end > installed_end)
            .map(|(_, at)| *at)
            .or(Some(self.received_at_ms))
    }
}

/// The recorded progress of `topic`-`partition`, or `None` when there is none; an unreadable file is an error
/// naming it (as a string: the report is advisory and status shows the reason).
pub fn recorded_progress(root: &Path, topic: &str, partition: i32) -> Result<Option<RecordedProgress>, String> {
    let path = progress_file(root, &format!("{topic}-{partition}"));
    let size = match fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if size > MAX_PROGRESS_FILE_BYTES {
        return Err(format!(
            "{}: {size} bytes, more than a progress file holds",
            path.display()
        ));
    }
    let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let p: RecordedProgress = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if p.topic != topic || p.partition != partition {
        return Err(format!(
            "{}: names partition {}-{}, not the one its file name says",
            path.display(),
            p.topic,
            p.partition
        ));
    }
    Ok(Some(p))
}

/// The durable grant of a partition: who ships it, at which leader epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    pub topic: String,
    pub partition: i32,
    pub node: i32,
    pub epoch: i32,
}

/// The recorded claim of `partition`, if any.
pub fn recorded_claim(root: &Path, partition: &PartitionRef) -> Result<Option<ClaimRecord>, StateError> {
    let path = claim_file(root, &format!("{}-{}", partition.topic, partition.partition));
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Io { path, source }),
    };
    let record: ClaimRecord = serde_json::from_slice(&bytes).map_err(|e| StateError::BadState {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if record.topic != partition.topic || record.partition != partition.partition {
        return Err(StateError::BadState {
            path,
            reason: format!(
                "names partition {}-{}, not the one its file name says",
                record.topic, record.partition
            ),
        });
    }
    Ok(Some(record))
}
