//! Copying a `.log` inside the kernel (`copy_file_range`) and restamping the copy in place.
//!
//! Why: `cp` copies in the kernel; promotion read 1 MiB chunks into a buffer, restamped them and wrote them out,
//! which moves every byte through user space twice and ran at 0.92–0.96x `cp -r` + `sync` (issue 12). Here the
//! bytes go from the mirror's page cache to the copy's without leaving the kernel, in chunks; after each chunk the
//! headers of the frames now whole **in the copy** are checked exactly as [`inspect_frame`] checks them for the
//! buffered copy (same errors at the same positions, naming the mirror file the bytes came from) and each magic-2
//! batch's `partitionLeaderEpoch` (outside the batch CRC, see `restamp`) is patched through a shared mapping of
//! the copy. Positions come only from the copy we own, never from the mirror after copying: a mirror file that
//! changed under us cannot make us patch the wrong bytes. The headers lie in the page cache the copy just filled,
//! so the walk costs a page-cache touch per batch, not a read.
//!
//! Write-back of each chunk is started (`sync_file_range`) once every header in it is patched — up to the page of
//! the first frame not yet patched, so no page is written back and dirtied again — and the file is fsynced once.
//! A file system without `copy_file_range` between these two files (EXDEV, ENOSYS, EINVAL, EOPNOTSUPP on the
//! first call) gets the buffered one-pass copy (`restamp::copy_log_restamping_buffered`), which writes the same
//! bytes.
//!
//! The mapping can fault (SIGBUS) only if the copy is truncated under us; it is a file of our own in promotion's
//! staging directory, which nothing else writes while we hold the log dir's lock.

use std::fs::{File, OpenOptions};
use std::path::Path;

use segment_format::batch::RECORD_BATCH_OVERHEAD;

use super::error::{Error, Result};
use segment_format::durable::{read_sequentially, write_behind};

use super::frames::{inspect_frame, partial_header, restamp_header, LogWalk};

/// Bytes per `copy_file_range` call: each chunk's headers are patched and its write-back started before the next.
pub(super) const KERNEL_CHUNK: usize = 8 << 20;
/// Page size the write-behind ranges are rounded down to (a page holding an unpatched header is not written yet).
const PAGE: u64 = 4096;

/// What the kernel copy did.
#[derive(Debug)]
pub(super) enum KernelCopy {
    /// Copied, checked and restamped.
    Copied(LogWalk),
    /// The kernel cannot copy between these files (nothing was copied): use the buffered copy.
    Unsupported,
}

/// Copy `from` to `to` (created or truncated) with `copy_file_range` in chunks of `chunk` bytes, checking every
/// frame header of the copy and setting every magic-2 batch's epoch to `epoch` in place; fsync once. The result is
/// the same bytes and [`LogWalk`] as the buffered copy, or the same error. With `limit`, only the file's first
/// `limit` bytes (a frame boundary: a consistent cut's prefix) are copied.
pub(super) fn copy_log_in_kernel(
    from: &Path,
    to: &Path,
    epoch: i32,
    chunk: usize,
    limit: Option<u64>,
) -> Result<KernelCopy> {
    let source = File::open(from).map_err(|e| Error::io(from, e))?;
    let size = copy_length(from, source.metadata().map_err(|e| Error::io(from, e))?.len(), limit)?;
    let out = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(to)
        .map_err(|e| Error::io(to, e))?;
    let mut walk = LogWalk {
        size,
        ..LogWalk::default()
    };
    if size == 0 {
        out.sync_all().map_err(|e| Error::io(to, e))?;
        return Ok(KernelCopy::Copied(walk));
    }
    let Ok(len) = usize::try_from(size) else {
        return Ok(KernelCopy::Unsupported);
    };
    read_sequentially(&source);
    let chunk = chunk.max(1);
    // The mapping needs the file at its final length: the copy fills it chunk by chunk from the start.
    out.set_len(size).map_err(|e| Error::io(to, e))?;
    // SAFETY: `out` is a file of our own in promotion's staging directory, open for reading and writing, and set
    // to `size` bytes above; nothing else truncates it while the mapping lives (the log dir's lock is held).
    let mut map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&out) }.map_err(|e| Error::io(to, e))?;
    let (mut copied, mut next_frame, mut written_behind) = (0u64, 0u64, 0u64);
    while copied < size {
        let want = usize::try_from((size - copied).min(chunk as u64)).unwrap_or(chunk);
        let (mut off_in, mut off_out) = (copied, copied);
        match kernel_copy(&source, &mut off_in, &out, &mut off_out, want) {
            Ok(0) => {
                let message = format!("the file shrank while it was copied (expected {size} bytes, {copied} copied)");
                return Err(Error::io(
                    from,
                    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, message),
                ));
            }
            Ok(n) => copied += n as u64,
            Err(e) if copied == 0 && unsupported(&e) => {
                drop(map);
                return Ok(KernelCopy::Unsupported);
            }
            Err(e) => return Err(Error::io(from, e)),
        }
        patch_headers(&mut map, from, size, copied, epoch, &mut next_frame, &mut walk)?;
        // Pages before the first unpatched header are final: start their write-back.
        let settled = next_frame.min(copied) / PAGE * PAGE;
        if settled > written_behind {
            write_behind(&out, written_behind, settled - written_behind);
            written_behind = settled;
        }
    }
    if next_frame < size {
        // Bytes at the end too few for the header of the frame starting there.
        return Err(partial_header(from, next_frame, size - next_frame));
    }
    drop(map);
    out.sync_all().map_err(|e| Error::io(to, e))?;
    Ok(KernelCopy::Copied(walk))
}

/// How many bytes of a file of `file_size` bytes a copy takes: `limit` (a prefix), or all of it; a file shorter than
/// the planned prefix changed under the plan (an error naming it).
pub(super) fn copy_length(from: &Path, file_size: u64, limit: Option<u64>) -> Result<u64> {
    match limit {
        None => Ok(file_size),
        Some(limit) if limit <= file_size => Ok(limit),
        Some(limit) => Err(Error::io(
            from,
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file has {file_size} bytes, fewer than the {limit} planned to be promoted"),
            ),
        )),
    }
}

/// Check and restamp every frame from `*next_frame` whose header lies whole in `map[..upto]` (or ends the file of
/// `size` bytes), advancing `*next_frame` past each; errors name `named` (the file the bytes came from).
fn patch_headers(
    map: &mut [u8],
    named: &Path,
    size: u64,
    upto: u64,
    epoch: i32,
    next_frame: &mut u64,
    walk: &mut LogWalk,
) -> Result<()> {
    while *next_frame < upto {
        let remaining = size - *next_frame;
        let need = (RECORD_BATCH_OVERHEAD as u64).min(remaining);
        if *next_frame + need > upto {
            break;
        }
        let at = usize::try_from(*next_frame).unwrap_or(usize::MAX);
        let header = map.get_mut(at..at.saturating_add(need as usize)).unwrap_or_default();
        let frame = inspect_frame(named, *next_frame, remaining, header)?;
        if frame.magic == 2 && restamp_header(header, epoch) {
            walk.restamped += 1;
        }
        walk.frames += 1;
        walk.last_offset = Some(frame.last_offset);
        *next_frame += frame.size;
    }
    Ok(())
}

/// Frames are walked this far with the kernel's default read-ahead before [`restamp_in_place`] judges their size.
const PROBE_BYTES: u64 = 1 << 20;
/// Average frame size above which [`restamp_in_place`] asks for no read-ahead: the walk touches one page per
/// frame, and reading the pages between them would read the whole file for a few headers.
const SPARSE_FRAMES: u64 = 16 << 10;

/// Restamp the `.log` at `path` in place (a file handed over by rename, `build`): the same header checks and epoch
/// patches as the copies, through a shared mapping, touching only the pages that hold headers; fsynced once when
/// anything changed. Errors name `path`.
pub(super) fn restamp_in_place(path: &Path, epoch: i32) -> Result<LogWalk> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut walk = LogWalk {
        size,
        ..LogWalk::default()
    };
    if size == 0 {
        return Ok(walk);
    }
    let len = usize::try_from(size).map_err(|_| Error::io(path, std::io::Error::other("file too large to map")))?;
    // SAFETY: the file is ours (moved into promotion's staging directory, where nothing else writes while the log
    // dir's lock is held); its length is not changed while the mapping lives.
    let mut map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }.map_err(|e| Error::io(path, e))?;
    let mut next_frame = 0u64;
    let probe = size.min(PROBE_BYTES);
    patch_headers(&mut map, path, size, probe, epoch, &mut next_frame, &mut walk)?;
    if walk.frames > 0 && next_frame / walk.frames >= SPARSE_FRAMES {
        // Only a hint: a failure leaves the default read-ahead.
        let _ = map.advise(memmap2::Advice::Random);
    }
    patch_headers(&mut map, path, size, size, epoch, &mut next_frame, &mut walk)?;
    if next_frame < size {
        return Err(partial_header(path, next_frame, size - next_frame));
    }
    // fsync writes the pages dirtied through the mapping too.
    drop(map);
    if walk.restamped > 0 {
        file.sync_all().map_err(|e| Error::io(path, e))?;
    }
    Ok(walk)
}

#[cfg(target_os = "linux")]
fn kernel_copy(source: &File, off_in: &mut u64, out: &File, off_out: &mut u64, len: usize) -> std::io::Result<usize> {
    rustix::fs::copy_file_range(source, Some(off_in), out, Some(off_out), len).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn kernel_copy(_: &File, _: &mut u64, _: &File, _: &mut u64, _: usize) -> std::io::Result<usize> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Errors of a first `copy_file_range` that mean "not between these files here", not "this copy failed".
fn unsupported(e: &std::io::Error) -> bool {
    if e.kind() == std::io::ErrorKind::Unsupported {
        return true;
    }
    #[cfg(target_os = "linux")]
    {
        matches!(
            e.raw_os_error(),
            Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP)
        )
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}
