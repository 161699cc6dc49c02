//! Leader epochs from `leader-epoch-checkpoint`: OffsetForLeaderEpoch and the epoch Metadata reports.
//!
//! Entries that start past the served bound are left out: they describe batches not served yet, and a client must
//! not learn an end offset past the high watermark from them. Entries starting exactly at the bound stay (a leader
//! assigns its epoch at its log end offset before it appends anything, and Kafka answers for it then too).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use segment_format::checkpoint::{leader_epoch_checkpoint_path, LeaderEpochCheckpoint};

use super::format_error;

/// `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`.
const UNDEFINED: (i32, i64) = (-1, -1);

/// The checkpoint's entries starting at or below `upper`, as epoch -> start offset (empty without the file).
fn epochs(dir: &Path, upper: i64) -> io::Result<BTreeMap<i32, i64>> {
    let checkpoint = match LeaderEpochCheckpoint::read(&leader_epoch_checkpoint_path(dir)) {
        Ok(c) => c,
        Err(segment_format::Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(BTreeMap::new())
        }
        Err(e) => return Err(format_error(e)),
    };
    Ok(checkpoint
        .entries
        .iter()
        .filter(|e| e.start_offset <= upper)
        .map(|e| (e.epoch, e.start_offset))
        .collect())
}

/// The newest leader epoch starting at or below `upper`, -1 when there is none.
pub fn latest_epoch(dir: &Path, upper: i64) -> io::Result<i32> {
    Ok(epochs(dir, upper)?.keys().next_back().copied().unwrap_or(UNDEFINED.0))
}

/// OffsetForLeaderEpoch, as Kafka's `LeaderEpochFileCache.endOffsetFor(requested, logEndOffset)` with the high
/// watermark `upper` as the log end: `(-1, -1)` for epoch -1 or one above every known epoch; `(requested, upper)`
/// for the newest epoch; otherwise the largest epoch at or below `requested` and the start offset of the first
/// epoch after it, or, when `requested` is below every known epoch, `(requested, start of the first epoch)`.
pub fn epoch_end(dir: &Path, requested: i32, upper: i64) -> io::Result<(i32, i64)> {
    let epochs = epochs(dir, upper)?;
    if requested == UNDEFINED.0 {
        return Ok(UNDEFINED);
    }
    if epochs.keys().next_back() == Some(&requested) {
        return Ok((requested, upper));
    }
    let Some((_, &higher_start)) = epochs.range(requested.saturating_add(1)..).next() else {
        return Ok(UNDEFINED);
    };
    match epochs.range(..=requested).next_back() {
        Some((&floor, _)) => Ok((floor, higher_start)),
        None => Ok((requested, higher_start)),
    }
}
