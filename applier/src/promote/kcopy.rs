//! Copying a `.log` inside the kernel (`copy_file_range`) and restamping the copy in place.
//!
//! Why: `cp` copies in the kernel; promotion read 1 MiB chunks into a buffer, restamped them and wrote them out, which
//! moves every byte through user space twice and ran at 0.92–0.96x `cp -r` + `sync` (docs/BENCHMARKS.md). Here the
//! bytes go from the mirror's page cache to the copy's without leaving the kernel, in chunks; after each chunk the
//! headers of the frames now whole **in the copy** are checked exactly as [`inspect_frame`] checks them for the
//! buffered copy (same errors at the same positions, naming the mirror file the bytes came from) and each magic-2
//! batch's `partitionLeaderEpoch` (outside the batch CRC, see `restamp`) is patched. Positions come only from the copy
//! we own, never from the mirror after copying: a mirror file that changed under us cannot make us patch the wrong
//! bytes.
//!
//! How the headers are read and patched ([`HeaderWalk`]): `pread` of a small window at each frame start (a whole run of
//! small frames shares one window) and `pwrite` of only the changed bytes. An earlier version patched through a shared
//! writable mapping of the copy instead; `perf` showed that mapping's page faults (a read and a write fault per header
//! page, each write fault dirtying a mapped page that write-back then had to write-protect again) and the munmap of up
//! to a GiB per file took most of promotion's CPU (4 CPU s for 2 GiB against `cp`'s 1), and its RSS counted every
//! mapped page (970 MiB). Two small system calls per batch touch the same page-cache pages without mapping them. (See
//! docs/BENCHMARKS.md, "promoteperf".)
//!
//! Write-back of each chunk is started (`sync_file_range`) once every header in it is patched — up to the page of
//! the first frame not yet patched, so no page is written back and dirtied again; the file is not fsynced here (the
//! promotion syncs its staging once, `files::write_staged`).
//! The mirror's pages are dropped from the page cache chunk by chunk as they are copied: they are read once, and
//! the copy's writes then reuse them hot instead of taking fresh pages (docs/decisions/0044-drop-read-pages.md).
//!
//! A file system without `copy_file_range` between these two files (EXDEV, ENOSYS, EINVAL, EOPNOTSUPP on the
//! first call) gets the buffered one-pass copy (`restamp::copy_log_restamping_buffered`), which writes the same
//! bytes.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use segment_format::batch::RECORD_BATCH_OVERHEAD;

use super::error::{Error, Result};
use segment_format::durable::{drop_cached, read_sequentially, write_behind};

use super::frames::{inspect_frame, partial_header, restamp_header, LogWalk, PARTITION_LEADER_EPOCH_OFFSET};

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
/// frame header of the copy and setting every magic-2 batch's epoch to `epoch` in place. The result is
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
        return Ok(KernelCopy::Copied(walk));
    }
    read_sequentially(&source);
    let chunk = chunk.max(1);
    let mut headers = HeaderWalk::new(&out, to, from, size, epoch);
    let (mut copied, mut written_behind) = (0u64, 0u64);
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
            Ok(n) => {
                copied += n as u64;
                // The mirror's copy of these bytes is read once: its pages go back to the free lists for the
                // copy's next writes to reuse (see `durable::drop_cached`). From the start each time: a large
                // folio that straddles a chunk's end is dropped only by a range that covers it whole.
                drop_cached(&source, copied);
            }
            Err(e) if copied == 0 && unsupported(&e) => return Ok(KernelCopy::Unsupported),
            Err(e) => return Err(Error::io(from, e)),
        }
        headers.patch_upto(copied, &mut walk)?;
        // Pages before the first unpatched header are final: start their write-back.
        let settled = headers.next_frame.min(copied) / PAGE * PAGE;
        if settled > written_behind {
            write_behind(&out, written_behind, settled - written_behind);
            written_behind = settled;
        }
    }
    headers.finish()?;
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

/// Window read at a frame start while frames are large: one header (rounded up), a few bytes per batch.
const HEADER_WINDOW: usize = 64;
/// Window read while frames are small (average below [`SMALL_FRAMES`]): many headers per `pread`, and their
/// patches written back with one `pwrite` of the changed span.
const RUN_WINDOW: usize = 64 << 10;
/// Average frame size below which a window holds a run of headers rather than one.
const SMALL_FRAMES: u64 = 4 << 10;

/// The frame-header walk over a file of our own (the copy, or a handed-over `.log`): each header read with `pread`,
/// checked ([`inspect_frame`]) and its epoch patched with `pwrite` of the changed bytes only. Format errors name
/// `named` (the file the bytes came from), I/O errors `path` (the file read and written).
struct HeaderWalk<'a> {
    file: &'a File,
    path: &'a Path,
    named: &'a Path,
    size: u64,
    epoch: i32,
    /// Where the next frame starts.
    next_frame: u64,
    window: Vec<u8>,
}

impl<'a> HeaderWalk<'a> {
    fn new(file: &'a File, path: &'a Path, named: &'a Path, size: u64, epoch: i32) -> Self {
        HeaderWalk {
            file,
            path,
            named,
            size,
            epoch,
            next_frame: 0,
            window: Vec::new(),
        }
    }

    /// Check and restamp every frame from `next_frame` whose header lies whole in the file's first `upto` bytes (or
    /// ends the file), advancing `next_frame` past each.
    fn patch_upto(&mut self, upto: u64, walk: &mut LogWalk) -> Result<()> {
        while self.next_frame < upto {
            let need = (RECORD_BATCH_OVERHEAD as u64).min(self.size - self.next_frame);
            if self.next_frame + need > upto {
                break;
            }
            let small = walk.frames > 0 && self.next_frame / walk.frames < SMALL_FRAMES;
            let wanted = if small { RUN_WINDOW } else { HEADER_WINDOW } as u64;
            // At least the header (`need` bytes fit below `upto`), at most what is copied.
            let len = wanted.max(need).min(upto - self.next_frame) as usize;
            let start = self.next_frame;
            self.window.resize(len, 0);
            self.file
                .read_exact_at(&mut self.window, start)
                .map_err(|e| Error::io(self.path, e))?;
            // The span of the window changed by patches, written back at once.
            let mut changed: Option<(usize, usize)> = None;
            while self.next_frame < upto {
                let remaining = self.size - self.next_frame;
                let need = (RECORD_BATCH_OVERHEAD as u64).min(remaining) as usize;
                let at = usize::try_from(self.next_frame - start).unwrap_or(usize::MAX);
                let Some(header) = self.window.get_mut(at..at.saturating_add(need)) else {
                    break;
                };
                let frame = inspect_frame(self.named, self.next_frame, remaining, header)?;
                if frame.magic == 2 && restamp_header(header, self.epoch) {
                    walk.restamped += 1;
                    let field = (
                        at + PARTITION_LEADER_EPOCH_OFFSET,
                        at + PARTITION_LEADER_EPOCH_OFFSET + 4,
                    );
                    changed = Some(changed.map_or(field, |(a, _)| (a, field.1)));
                }
                walk.frames += 1;
                walk.last_offset = Some(frame.last_offset);
                self.next_frame += frame.size;
            }
            if let Some((a, b)) = changed {
                let bytes = self.window.get(a..b).unwrap_or_default();
                self.file
                    .write_all_at(bytes, start + a as u64)
                    .map_err(|e| Error::io(self.path, e))?;
            }
        }
        Ok(())
    }

    /// The walk reached the end of the file: bytes at the end too few for a header are an error.
    fn finish(&self) -> Result<()> {
        if self.next_frame < self.size {
            return Err(partial_header(self.named, self.next_frame, self.size - self.next_frame));
        }
        Ok(())
    }
}

/// Frames are walked this far with the kernel's default read-ahead before [`restamp_in_place`] judges their size.
const PROBE_BYTES: u64 = 1 << 20;
/// Average frame size above which [`restamp_in_place`] asks for no read-ahead: the walk touches one page per
/// frame, and reading the pages between them would read the whole file for a few headers.
const SPARSE_FRAMES: u64 = 16 << 10;

/// Restamp the `.log` at `path` in place (a file handed over by rename, `build`): the same header checks and epoch
/// patches as the copies ([`HeaderWalk`]), touching only the pages that hold headers. Errors name `path`.
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
    let mut headers = HeaderWalk::new(&file, path, path, size, epoch);
    headers.patch_upto(size.min(PROBE_BYTES), &mut walk)?;
    if walk.frames > 0 && headers.next_frame / walk.frames >= SPARSE_FRAMES {
        read_randomly(&file);
    }
    headers.patch_upto(size, &mut walk)?;
    headers.finish()?;
    Ok(walk)
}

/// Asks for no read-ahead on `file`. Only a hint: a failure leaves the default read-ahead.
#[cfg(target_os = "linux")]
fn read_randomly(file: &File) {
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::Random);
}

#[cfg(not(target_os = "linux"))]
fn read_randomly(_: &File) {}

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
