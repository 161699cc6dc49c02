//! Walking a `.log` frame by frame through its 61-byte headers, optionally rewriting each magic-2 batch's
//! `partitionLeaderEpoch`.
//!
//! Why restamp: a mirrored batch carries the leader epoch the *source* cluster's leader stamped on it, usually
//! higher than the target partition's epoch. KIP-320 clients remember the epoch of the last record they read and
//! commit it with their offsets; on the target that epoch is "from the future": the Java consumer refuses the
//! broker's metadata as stale and stops fetching, librdkafka's offset validation gets "no such epoch" back and
//! resets to `auto.offset.reset` (see docs/promotion.md, "Leader epochs", for the experiment). Kafka's
//! own leader restamps every batch it appends (`LogValidator`), and the field lies outside the CRC (which covers
//! bytes 21.. of a batch; `DefaultRecordBatch`), so rewriting those four bytes leaves every batch valid.
//!
//! Promotion restamps while it copies ([`copy_log_restamping`]): in the kernel, patching the copy's headers in
//! place (`kcopy`), or, where the kernel cannot copy between the two files, through a buffer: each chunk read from
//! the mirror has the headers of the frames starting in it checked and its epoch fields patched in memory before it
//! is written, so the copy is never read back. Both use [`inspect_frame`], so they fail alike. [`walk_log`]
//! restamps a file in place (only the header is read and at most four
//! bytes written per batch) and inspects one. Legacy (magic 0/1) frames have no epoch field — bytes 12..16 are
//! their CRC — and are left alone. Both walks are strict: a frame that does not fit the file, a length below
//! Kafka's minimum or an unknown magic is an error naming the file, position and offset; a mirror never holds
//! partial batches.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use segment_format::batch::{HEADER_SIZE_UP_TO_MAGIC, MAGIC_OFFSET, RECORD_BATCH_OVERHEAD};

use super::error::{Error, Result};
use super::frames::{corrupt, inspect_frame, partial_header, restamp_header};
pub use super::frames::{LogWalk, PARTITION_LEADER_EPOCH_OFFSET};
use super::kcopy::{copy_length, copy_log_in_kernel, KernelCopy, KERNEL_CHUNK};
use segment_format::durable::{read_sequentially, write_behind};

/// Read buffer of the header walk: big enough to serve many small batches per read.
const WALK_BUFFER: usize = 64 * 1024;
/// Chunk of the one-pass copy: large enough that a read and a write move a lot per system call, small enough
/// that a few partitions copied in parallel hold little memory.
const COPY_CHUNK: usize = 1 << 20;
/// Write-back is started every this many bytes copied.
const WRITE_BEHIND_BYTES: u64 = 8 << 20;

/// Walk `path` and report its frames; with `epoch`, rewrite every magic-2 batch's `partitionLeaderEpoch` that
/// differs from it. The file must be a whole number of frames.
pub fn walk_log(path: &Path, epoch: Option<i32>) -> Result<LogWalk> {
    walk_log_from(path, 0, epoch).map(|(walk, _)| walk)
}

/// [`walk_log`] from byte `start` (a frame boundary) to the end; also returns the position of the last frame.
/// `frames` and `restamped` count only the frames from `start`.
pub(super) fn walk_log_from(path: &Path, start: u64, epoch: Option<i32>) -> Result<(LogWalk, Option<u64>)> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if start > size {
        return Err(corrupt(
            path,
            start,
            None,
            format!("walk starts at {start}, past the end of the file ({size} bytes)"),
        ));
    }
    file.seek(SeekFrom::Start(start)).map_err(|e| Error::io(path, e))?;
    let mut reader = BufReader::with_capacity(WALK_BUFFER, file);
    let mut writer = match epoch {
        Some(_) => Some(
            OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io(path, e))?,
        ),
        None => None,
    };
    let mut walk = LogWalk {
        size,
        ..LogWalk::default()
    };
    let mut last_frame = None;
    let mut position = start;
    let mut header = [0u8; RECORD_BATCH_OVERHEAD];
    while position < size {
        let remaining = size - position;
        let want = (RECORD_BATCH_OVERHEAD as u64).min(remaining) as usize;
        if want < HEADER_SIZE_UP_TO_MAGIC {
            return Err(partial_header(path, position, remaining));
        }
        // The prefix first: a legacy frame may be shorter than a magic-2 header.
        let (prefix, rest) = header.split_at_mut(HEADER_SIZE_UP_TO_MAGIC);
        reader.read_exact(prefix).map_err(|e| Error::io(path, e))?;
        let mut consumed = HEADER_SIZE_UP_TO_MAGIC;
        if prefix.get(MAGIC_OFFSET).copied() == Some(2) {
            let more = rest.get_mut(..want - HEADER_SIZE_UP_TO_MAGIC).unwrap_or_default();
            reader.read_exact(more).map_err(|e| Error::io(path, e))?;
            consumed = want;
        }
        let frame = inspect_frame(path, position, remaining, header.get(..consumed).unwrap_or_default())?;
        if frame.magic == 2 {
            if let (Some(epoch), Some(out)) = (epoch, writer.as_mut()) {
                if restamp_header(&mut header, epoch) {
                    let at = position + PARTITION_LEADER_EPOCH_OFFSET as u64;
                    out.seek(SeekFrom::Start(at)).map_err(|e| Error::io(path, e))?;
                    out.write_all(&epoch.to_be_bytes()).map_err(|e| Error::io(path, e))?;
                    walk.restamped += 1;
                }
            }
        }
        let skip = i64::try_from(frame.size - consumed as u64).map_err(|_| {
            corrupt(
                path,
                position,
                Some(frame.base_offset),
                format!("frame of {} bytes is too large", frame.size),
            )
        })?;
        reader.seek_relative(skip).map_err(|e| Error::io(path, e))?;
        walk.frames += 1;
        walk.last_offset = Some(frame.last_offset);
        last_frame = Some(position);
        position += frame.size;
    }
    if let Some(out) = writer {
        out.sync_all().map_err(|e| Error::io(path, e))?;
    }
    Ok((walk, last_frame))
}

/// Copy the `.log` `from` to `to` (created; it must not be in use), checking every frame header as [`walk_log`]
/// does and setting every magic-2 batch's `partitionLeaderEpoch` to `epoch`: in the kernel where it can
/// (`kcopy`), else buffered ([`copy_log_restamping_buffered`]). Either way the copy holds the same bytes as
/// [`std::fs::copy`] followed by `walk_log(to, Some(epoch))` and fails with the same errors; it is not fsynced (the
/// promotion syncs its staging once, `files::write_staged`).
/// With `limit`, only the first `limit` bytes (a frame boundary: a consistent cut's prefix) are copied.
pub(super) fn copy_log_restamping(from: &Path, to: &Path, epoch: i32, limit: Option<u64>) -> Result<LogWalk> {
    match copy_log_in_kernel(from, to, epoch, KERNEL_CHUNK, limit)? {
        KernelCopy::Copied(walk) => Ok(walk),
        KernelCopy::Unsupported => copy_log_restamping_buffered(from, to, epoch, limit),
    }
}

/// The copy through a buffer, for file systems without `copy_file_range` between the two files: each chunk is
/// read, the headers of the frames starting in it are checked and restamped in the buffer, then the chunk is
/// written and its write-back started ([`write_behind`]). Memory: one chunk.
pub(super) fn copy_log_restamping_buffered(from: &Path, to: &Path, epoch: i32, limit: Option<u64>) -> Result<LogWalk> {
    copy_log_restamping_in_chunks(from, to, epoch, COPY_CHUNK, limit)
}

/// [`copy_log_restamping_buffered`] with chunks of `chunk` bytes (tests cut headers at every position with small
/// ones).
fn copy_log_restamping_in_chunks(
    from: &Path,
    to: &Path,
    epoch: i32,
    chunk: usize,
    limit: Option<u64>,
) -> Result<LogWalk> {
    let chunk = chunk.max(1);
    let mut source = File::open(from).map_err(|e| Error::io(from, e))?;
    let size = copy_length(from, source.metadata().map_err(|e| Error::io(from, e))?.len(), limit)?;
    read_sequentially(&source);
    let mut out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(to)
        .map_err(|e| Error::io(to, e))?;
    let mut walk = LogWalk {
        size,
        ..LogWalk::default()
    };
    let chunk = usize::try_from(size.min(chunk as u64)).unwrap_or(chunk);
    // The chunk plus room for a header carried over from the previous one.
    let mut buf = vec![0u8; chunk + RECORD_BATCH_OVERHEAD];
    // `buf[..filled]` holds the file's bytes from `buf_start`; `next_frame` is where the next frame starts.
    let (mut buf_start, mut filled, mut next_frame) = (0u64, 0usize, 0u64);
    let mut written_behind = 0u64;
    let mut read_total = 0u64;
    while buf_start + (filled as u64) < size {
        let want = usize::try_from((size - read_total).min(chunk as u64)).unwrap_or(chunk);
        let target = buf.get_mut(filled..filled + want).unwrap_or_default();
        source.read_exact(target).map_err(|e| {
            let message = format!("the file shrank while it was copied (expected {size} bytes): {e}");
            Error::io(from, std::io::Error::new(e.kind(), message))
        })?;
        read_total += want as u64;
        filled += want;
        let buf_end = buf_start + filled as u64;
        // Every frame whose header lies whole in the buffer (or ends the file).
        while next_frame < buf_end {
            let remaining = size - next_frame;
            let need = (RECORD_BATCH_OVERHEAD as u64).min(remaining);
            if next_frame + need > buf_end {
                break;
            }
            let at = usize::try_from(next_frame - buf_start).unwrap_or(usize::MAX);
            let header = buf.get_mut(at..at + need as usize).unwrap_or_default();
            let frame = inspect_frame(from, next_frame, remaining, header)?;
            if frame.magic == 2 && restamp_header(header, epoch) {
                walk.restamped += 1;
            }
            walk.frames += 1;
            walk.last_offset = Some(frame.last_offset);
            next_frame += frame.size;
        }
        // Write everything before a header cut by the chunk's end; carry that header's start over.
        let keep_from = if next_frame < buf_end {
            usize::try_from(next_frame - buf_start).unwrap_or(filled)
        } else {
            filled
        };
        let done = buf.get(..keep_from).unwrap_or_default();
        out.write_all(done).map_err(|e| Error::io(to, e))?;
        buf.copy_within(keep_from..filled, 0);
        buf_start += keep_from as u64;
        filled -= keep_from;
        if buf_start - written_behind >= WRITE_BEHIND_BYTES {
            write_behind(&out, written_behind, buf_start - written_behind);
            written_behind = buf_start;
        }
    }
    if filled > 0 || next_frame < size {
        // Bytes at the end too few for the header of the frame starting there.
        return Err(partial_header(from, next_frame, size.saturating_sub(next_frame)));
    }
    Ok(walk)
}

#[cfg(test)]
mod tests;
