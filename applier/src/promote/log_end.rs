//! The end offset of a mirror partition's last segment, read from its last batches only.
//!
//! Why: planning compares the mirror's end offset with the one the catalog recorded (a mirror changed behind the
//! catalog's back is refused before anything is touched). Walking the whole last `.log` for it cost a read of the
//! segment (up to `segment.bytes`, 1 GiB by default) per partition before the copy read it again. Kafka adds an
//! offset index entry every `index.interval.bytes` (4 KiB by default), so the index's last entry points at a batch
//! a few KiB before the end: the walk starts there. The entry is trusted only when it checks out — its position
//! lies inside the file on a frame whose base offset is at or below the entry's offset (Kafka indexes the start of
//! an append and the largest offset in it), at or above the segment's base, and the frames from there end exactly
//! at the end of the file at or after the entry's offset. Otherwise (no index, an empty or zero-filled one, a
//! stale entry of a tail appender that never fsyncs its indexes) the walk starts at the segment's beginning, as it
//! always did. The last batch's CRC is checked too. Nothing rests on the index alone: the copy walks every header
//! again (`restamp::copy_log_restamping`) and refuses a partition whose end differs from the plan.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;

use segment_format::batch::{ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD};

use super::error::{Error, Result};
use super::frames::{corrupt, inspect_frame, Frame};
use super::restamp::walk_log_from;

/// Bytes of one offset index entry: relative offset and position, both 32-bit.
const INDEX_ENTRY: u64 = 8;
/// How much of the index's end is searched for its last entry (a preallocated index ends in zeros).
const INDEX_TAIL: u64 = 64 * 1024;
/// Read size of the last batch's CRC check.
const CRC_BUFFER: usize = 64 * 1024;

/// What was found at the end of a `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogEnd {
    /// The next offset after the last frame; the segment's base offset for an empty file.
    pub(super) end_offset: i64,
    /// Where the walk started (0 when the index did not help).
    pub(super) walked_from: u64,
    /// Where the last frame ends: the file's size (the walk refuses bytes after the last frame).
    pub(super) size: u64,
}

/// The end offset of `log` (a segment whose base offset is `base`), from its offset index's last entry on (see the
/// module docs), with the last batch's CRC checked.
pub(super) fn log_end(log: &Path, base: i64) -> Result<LogEnd> {
    let start = index_hint(log, base)?;
    let walked = match start {
        Some((position, entry_offset)) => match walk_log_from(log, position, None) {
            Ok((walk, Some(last))) => {
                let first = frame_at(log, position, walk.size)?;
                let fits = first.is_some_and(|f| f.base_offset >= base && f.base_offset <= entry_offset)
                    && walk.last_offset.is_some_and(|l| l >= entry_offset);
                fits.then_some((walk, last, position))
            }
            Ok((_, None)) | Err(_) => None,
        },
        None => None,
    };
    let (walk, last_frame, walked_from) = match walked {
        Some(found) => found,
        None => {
            let (walk, last) = walk_log_from(log, 0, None)?;
            let Some(last) = last else {
                return Ok(LogEnd {
                    end_offset: base,
                    walked_from: 0,
                    size: walk.size,
                });
            };
            (walk, last, 0)
        }
    };
    check_last_batch_crc(log, last_frame, walk.size)?;
    Ok(LogEnd {
        end_offset: walk.last_offset.map_or(base, |o| o.saturating_add(1)),
        walked_from,
        size: walk.size,
    })
}

/// The position and absolute offset of the offset index's last entry, when it has one past the segment's start.
fn index_hint(log: &Path, base: i64) -> Result<Option<(u64, i64)>> {
    let index = log.with_extension("index");
    let file = match File::open(&index) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&index, e)),
    };
    let len = file.metadata().map_err(|e| Error::io(&index, e))?.len();
    let whole = len - len % INDEX_ENTRY;
    let from = whole.saturating_sub(INDEX_TAIL);
    let mut tail = vec![0u8; usize::try_from(whole - from).unwrap_or(0)];
    file.read_exact_at(&mut tail, from).map_err(|e| Error::io(&index, e))?;
    // The last entry that is not zero-fill (a real entry at position 0 is the first one, which gives no hint).
    let entry = tail.chunks_exact(INDEX_ENTRY as usize).rev().find_map(|e| {
        let relative = i32::from_be_bytes([e[0], e[1], e[2], e[3]]);
        let position = i32::from_be_bytes([e[4], e[5], e[6], e[7]]);
        (position > 0 && relative >= 0).then_some((position as u64, base.saturating_add(i64::from(relative))))
    });
    Ok(entry)
}

/// The frame starting at `position` of `log` (`size` bytes), or `None` when its header does not check out.
fn frame_at(log: &Path, position: u64, size: u64) -> Result<Option<Frame>> {
    let file = File::open(log).map_err(|e| Error::io(log, e))?;
    let remaining = size.saturating_sub(position);
    let mut header = vec![0u8; usize::try_from(remaining.min(RECORD_BATCH_OVERHEAD as u64)).unwrap_or(0)];
    file.read_exact_at(&mut header, position)
        .map_err(|e| Error::io(log, e))?;
    Ok(inspect_frame(log, position, remaining, &header).ok())
}

/// Check the CRC-32C of the magic-2 batch at `position` that ends the file (`size` bytes); legacy frames are
/// left alone (their CRC is another one, and a mirror of a magic-2 topic has none at its end).
fn check_last_batch_crc(log: &Path, position: u64, size: u64) -> Result<()> {
    let mut file = File::open(log).map_err(|e| Error::io(log, e))?;
    let remaining = size.saturating_sub(position);
    let mut header = vec![0u8; usize::try_from(remaining.min(RECORD_BATCH_OVERHEAD as u64)).unwrap_or(0)];
    file.read_exact_at(&mut header, position)
        .map_err(|e| Error::io(log, e))?;
    let frame = inspect_frame(log, position, remaining, &header)?;
    if frame.magic != 2 {
        return Ok(());
    }
    let stored = header
        .get(CRC_OFFSET..ATTRIBUTES_OFFSET)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let mut crc = 0u32;
    let mut left = frame.size - ATTRIBUTES_OFFSET as u64;
    let mut buf = vec![0u8; CRC_BUFFER];
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(position + ATTRIBUTES_OFFSET as u64))
        .map_err(|e| Error::io(log, e))?;
    while left > 0 {
        let n = usize::try_from(left.min(CRC_BUFFER as u64)).unwrap_or(CRC_BUFFER);
        let piece = buf.get_mut(..n).unwrap_or_default();
        file.read_exact(piece).map_err(|e| Error::io(log, e))?;
        crc = crc32c::crc32c_append(crc, piece);
        left -= n as u64;
    }
    if crc != stored {
        return Err(corrupt(
            log,
            position,
            Some(frame.base_offset),
            format!("the last batch's CRC-32C is {crc:#010x}, its header says {stored:#010x}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
