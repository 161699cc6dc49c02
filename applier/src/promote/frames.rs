//! The 61-byte header of a `.log` frame as promotion reads it: where the epoch and the last offset delta sit, and
//! the checks every walk and copy makes of a frame before trusting its length ([`inspect_frame`]).
//!
//! Why a module of its own: the buffered copy (`restamp`) and the kernel copy (`kcopy`) must fail alike, at the
//! same positions with the same words, so both take the frame rules from here rather than from each other.

use std::path::Path;

use segment_format::batch::{
    HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, MIN_FRAME_LENGTH, RECORD_BATCH_OVERHEAD,
};
use segment_format::error::{Defect, Error as FormatError};
use segment_format::index::OffsetIndexEntry;
use segment_format::log::LogFile;

use super::error::{Error, Result};

/// Byte position of `partitionLeaderEpoch` in a magic-2 batch.
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
/// Byte position of `lastOffsetDelta` in a magic-2 batch.
pub(super) const LAST_OFFSET_DELTA_OFFSET: usize = 23;
/// What a walk over one `.log` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogWalk {
    /// Frames (batches and legacy messages) in the file.
    pub frames: u64,
    /// Magic-2 batches whose epoch was rewritten (0 when only inspecting).
    pub restamped: u64,
    /// Last offset of the last frame; `None` for an empty file.
    pub last_offset: Option<i64>,
    /// Bytes of the file.
    pub size: u64,
}

pub(super) fn corrupt(path: &Path, position: u64, offset: Option<i64>, message: String) -> Error {
    Error::Format(FormatError::corrupt(path, position, offset, Defect::Other { message }))
}

pub(super) fn partial_header(path: &Path, position: u64, remaining: u64) -> Error {
    corrupt(
        path,
        position,
        None,
        format!("{remaining} trailing bytes, too few for a frame header (a partial batch)"),
    )
}

/// One frame's header as the walks read it.
pub(super) struct Frame {
    pub(super) base_offset: i64,
    pub(super) magic: i8,
    /// Bytes of the whole frame, its 12-byte log overhead included.
    pub(super) size: u64,
    pub(super) last_offset: i64,
}

/// Check the frame whose header starts `header` at `position` of `path`, with `remaining` bytes of the file from
/// there. `header` holds at least [`HEADER_SIZE_UP_TO_MAGIC`] bytes, and [`RECORD_BATCH_OVERHEAD`] for a magic-2
/// batch (callers pass `min(RECORD_BATCH_OVERHEAD, remaining)`; a shorter magic-2 frame is refused here).
pub(super) fn inspect_frame(path: &Path, position: u64, remaining: u64, header: &[u8]) -> Result<Frame> {
    if remaining < HEADER_SIZE_UP_TO_MAGIC as u64 || header.len() < HEADER_SIZE_UP_TO_MAGIC {
        return Err(partial_header(path, position, remaining));
    }
    let base_offset = i64::from_be_bytes(array(header, 0));
    let length = i32::from_be_bytes(array(header, 8));
    let magic = header.get(MAGIC_OFFSET).copied().unwrap_or_default() as i8;
    if length < MIN_FRAME_LENGTH {
        return Err(corrupt(
            path,
            position + 8,
            Some(base_offset),
            format!("frame length {length} is below Kafka's minimum {MIN_FRAME_LENGTH}"),
        ));
    }
    let size = LOG_OVERHEAD as u64 + length as u64;
    if size > remaining {
        return Err(corrupt(
            path,
            position,
            Some(base_offset),
            format!("frame of {size} bytes runs past the end of the file ({remaining} bytes left)"),
        ));
    }
    let last_offset = match magic {
        0 | 1 => base_offset,
        2 => {
            if size < RECORD_BATCH_OVERHEAD as u64 || header.len() < RECORD_BATCH_OVERHEAD {
                return Err(corrupt(
                    path,
                    position + 8,
                    Some(base_offset),
                    format!("magic-2 batch of {size} bytes is smaller than its {RECORD_BATCH_OVERHEAD}-byte header"),
                ));
            }
            let delta = i32::from_be_bytes(array(header, LAST_OFFSET_DELTA_OFFSET));
            base_offset.checked_add(i64::from(delta)).ok_or_else(|| {
                corrupt(
                    path,
                    position,
                    Some(base_offset),
                    format!("last offset delta {delta} overflows"),
                )
            })?
        }
        other => {
            return Err(corrupt(
                path,
                position + MAGIC_OFFSET as u64,
                Some(base_offset),
                format!("unknown magic {other}"),
            ))
        }
    };
    Ok(Frame {
        base_offset,
        magic,
        size,
        last_offset,
    })
}

/// Set the `partitionLeaderEpoch` of the magic-2 batch whose header starts `header` to `epoch`; `true` when it
/// changed (the field lies outside the batch CRC, see `restamp`). The one place both copies and the in-place walk
/// patch the epoch, so they cannot drift. A header too short to hold the field is left alone (`inspect_frame` has
/// refused such a batch already).
pub(super) fn restamp_header(header: &mut [u8], epoch: i32) -> bool {
    let wanted = epoch.to_be_bytes();
    match header.get_mut(PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4) {
        Some(field) if field != wanted => {
            field.copy_from_slice(&wanted);
            true
        }
        _ => false,
    }
}

/// `N` bytes of `buf` from `at` (zeros past its end; callers read fixed positions of a full header).
pub(super) fn array<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = buf.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

/// Where a read of segment `base` (its `.log` open as `log`) for the batches from `offset` on may start: the
/// position of the largest entry of its offset index (`entries`, ascending) at or below `offset`, when a magic-2
/// batch holding that entry's offset starts there — an entry is a batch's offset at the batch's position, so every
/// batch before it ends below `offset`. `Some(0)` without such an entry (the whole segment); `None` when the entry
/// does not point at its batch (past the end, inside a frame, at another batch): the index does not describe the
/// file. The indexes promotion reads are the mirror's, checked against the batches at install; this checks again.
pub(super) fn indexed_start(log: &LogFile, base: i64, entries: &[OffsetIndexEntry], offset: i64) -> Option<u64> {
    let Some(entry) = entries.iter().take_while(|e| e.offset(base) <= offset).last() else {
        return Some(0);
    };
    let position = u64::try_from(entry.position).ok()?;
    let end = position.checked_add(RECORD_BATCH_OVERHEAD as u64)?;
    let mut header = Vec::with_capacity(RECORD_BATCH_OVERHEAD);
    if end > log.len() || log.read_range_into(position, end, &mut header).is_err() {
        return None;
    }
    let held = entry.offset(base);
    match inspect_frame(log.path(), position, log.len() - position, &header) {
        Ok(f) if f.magic == 2 && f.base_offset <= held && held <= f.last_offset => Some(position),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
