//! The tailed active segment as `promote` sees it: the segment the appender is appending to and its durable size,
//! read from the partition's state file.
//!
//! Why promote reads the state file: the catalog records only sealed segments (see `catalog` for why), so what
//! lies beyond the catalog's installed end in a tailed partition is described by the state file alone. Promotion
//! accepts exactly that segment at exactly that size and nothing beyond; bytes past the recorded size were never
//! acknowledged (a crash mid-append) and are refused rather than promoted or silently cut.

use std::fs;
use std::path::{Path, PathBuf};

use super::{PartitionState, TailError, TailResult};
use crate::mirror;

/// Largest state file read: a few hundred bytes are written; anything far larger is not one of ours.
const MAX_STATE_FILE_BYTES: u64 = 64 << 10;

/// What the state file of a tailed partition records about its last segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveSegment {
    /// The state file it was read from.
    pub state_file: PathBuf,
    /// Base offset of the segment being appended to (or of the last sealed one).
    pub segment_base: i64,
    /// Bytes of that segment durable and recorded.
    pub position: u64,
    /// The segment was sealed (it is then recorded installed in the catalog too).
    pub sealed: bool,
    /// The offset after the last durable batch; `None` before any batch.
    pub next_offset: Option<i64>,
    /// The transactions open at `position`, with their tallies when known (`None`: not recorded, derived at the
    /// next session start).
    pub open_transactions: Option<Vec<segment_format::txn_index::OpenTransaction>>,
    /// What the appender kept for promotion at `position` (`super::kept`); `None` when not kept, or kept for
    /// another position (never trusted then).
    pub kept: Option<super::Kept>,
}

/// The state of partition `topic`-`partition` of the mirror at `root`, or `None` when the partition is not tailed.
pub fn recorded_active_segment(root: &Path, topic: &str, partition: i32) -> TailResult<Option<ActiveSegment>> {
    let path = mirror::state_file(root, &format!("{topic}-{partition}"));
    let size = match fs::metadata(&path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TailError::io(&path, e)),
    };
    if size > MAX_STATE_FILE_BYTES {
        return Err(TailError::BadState {
            path,
            reason: format!("{size} bytes, more than a state file ever holds ({MAX_STATE_FILE_BYTES})"),
        });
    }
    let bytes = fs::read(&path).map_err(|e| TailError::io(&path, e))?;
    let state: PartitionState = serde_json::from_slice(&bytes).map_err(|e| TailError::BadState {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if state.topic != topic || state.partition != partition {
        return Err(TailError::BadState {
            path,
            reason: format!(
                "names partition {}-{}, not the one its file name says",
                state.topic, state.partition
            ),
        });
    }
    let kept = state.valid_kept().cloned();
    Ok(Some(ActiveSegment {
        open_transactions: state.open_transactions,
        kept,
        state_file: path,
        segment_base: state.segment_base,
        position: state.position,
        sealed: state.sealed,
        next_offset: state.next_offset,
    }))
}
