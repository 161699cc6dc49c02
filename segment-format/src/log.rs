//! Reading `.log` segment files: memory-mapped, scanned frame by frame.
//!
//! A segment is a plain concatenation of frames (`offset i64 | length i32 | ...`,
//! `12 + length` bytes each). The scan is *shallow*, like the broker's own load:
//! per frame it checks the framing, computes the CRC and extracts a [`BatchInfo`]
//! (decoding the control type of a control batch, as the broker does). A CRC
//! mismatch does not stop the scan — the framing is intact, so later frames can
//! still be read and reported. A framing defect does stop it: after a bad length
//! or magic nothing tells where the next frame starts. A frame cut short by the
//! end of the data is *incomplete*, not corrupt: normal at the tail of an active
//! segment, and the caller decides what it means.
//!
//! Segments are up to 2 GiB and a verifier reads many of them, some of them
//! live: a running broker truncates a follower's segment, or replaces one after
//! compaction, while it is read. So the file is *read* (`pread`), not mapped: a
//! mapped page past a truncation is a SIGBUS that kills the process without a
//! word (no size check made before the access can rule it out), while a read
//! past it is a short read, reported as [`Defect::ChangedWhileRead`] for the
//! caller to read again. [`LogFile::scan`] reads into two reusable buffers of
//! [`CHUNK_BYTES`] (one scanned while the next is read; 128 KiB, kept from scan
//! to scan, when it scans on one thread), so the process's memory stays a few
//! tens of MiB however large the segment: two chunks, plus one batch when a
//! batch is larger than a chunk (Kafka's `message.max.bytes`, 1 MiB by
//! default, bounds batches; the segment size limit bounds them in any case).
//!
//! CRCs are nearly all the CPU time of a scan, and one core computing them reads
//! a file more slowly than `cat` copies it; so [`LogFile::scan`] shares them with
//! a helper thread, a window of frames at a time, while the frames still reach
//! the caller one by one and in order (see the `window` submodule).

use std::fs::File;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::batch::{
    be_i32, be_i64, be_u32, parse_header, BatchInfo, CRC_OFFSET, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET,
    MIN_FRAME_LENGTH, RECORD_BATCH_OVERHEAD,
};
use crate::control::shallow_control_type;
use crate::error::{Defect, Error, ParseError};
use crate::legacy;

mod chunk;
mod window;

use chunk::{read_full_at, Chunk, Shrunk};
#[cfg(test)]
use chunk::{MAX_SPARE_BUFFERS, MAX_SPARE_CAPACITY, SPARE_BUFFERS};

/// Most frame bytes in one window of the windowed scan (8 MiB, or one frame if
/// a frame is larger): large enough that the hand-offs to the CRC helper cost
/// nothing next to the CRC work, small enough that a chunk holds several.
pub const RELEASE_INTERVAL: u64 = 8 * 1024 * 1024;

/// Bytes [`LogFile::scan`] reads at once (8 MiB, one window): large enough that
/// the CRC helper, started per chunk, gets its share of the work (at 2 MiB it
/// computed under 2 % of the CRCs), small enough that the two buffers stay in
/// the last-level cache, where the CRCs find what the `pread` just wrote (at 16
/// MiB the kernel's copy alone took more CPU than all the CRCs).
pub const CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Bytes a one-thread scan reads at once to start with (128 KiB, as `cat` reads): the chunk stays in the core's
/// cache between the `pread` that writes it and the CRC that reads it, and the two buffers are reused from scan to
/// scan (see `chunk::SPARE_BUFFERS`), so a one-thread scan holds 2 x 264 KiB, not 2 x 10 MiB. On ~1 KiB batches
/// (`log/cost.rs`) it measured as fast as reading a small file whole into a fresh buffer, within the noise of a
/// loaded machine. A frame larger than a chunk makes the chunks grow (up to [`CHUNK_BYTES`]), so that large
/// batches are not carried from chunk to chunk.
const SEQUENTIAL_CHUNK_BYTES: usize = 128 * 1024;

/// Largest batch a scan reads (256 MiB): a batch must be in memory whole for
/// its CRC and records, so a larger one would let one length field decide how
/// much memory a scan takes. Kafka's `message.max.bytes` is 1 MiB by default;
/// a batch above this limit is reported as [`Defect::TooLarge`].
pub const MAX_FRAME_BYTES: u64 = 256 * 1024 * 1024;

/// Room kept in front of a chunk for the start of a frame the previous chunk
/// cut (2 MiB, twice Kafka's default `message.max.bytes`), so joining the two
/// copies only that partial frame; a larger partial frame costs one more copy.
const CARRY_ROOM: usize = 2 * 1024 * 1024;

/// One frame found by a scan.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub info: BatchInfo,
    /// The whole frame, `info.size` bytes.
    pub bytes: &'a [u8],
    /// CRC stored in the frame (v2: CRC-32C at byte 17; legacy: CRC-32 at byte 12).
    pub stored_crc: u32,
    /// CRC computed over the bytes the stored one covers.
    pub computed_crc: u32,
}

impl Frame<'_> {
    pub fn crc_matches(&self) -> bool {
        self.stored_crc == self.computed_crc
    }

    /// The CRC defect, if any, to report at [`Frame::crc_position`].
    pub fn crc_defect(&self) -> Option<Defect> {
        (!self.crc_matches()).then_some(Defect::CrcMismatch {
            stored: self.stored_crc,
            computed: self.computed_crc,
        })
    }

    /// Absolute position of the stored CRC.
    pub fn crc_position(&self) -> u64 {
        let at = if self.info.magic >= 2 {
            CRC_OFFSET
        } else {
            legacy::LEGACY_CRC_OFFSET
        };
        self.info.position + at as u64
    }
}

/// Iterator over the frames of a byte slice (see [`scan_frames`]).
#[derive(Debug, Clone)]
pub struct FrameIter<'a> {
    bytes: &'a [u8],
    base: u64,
    pos: usize,
    done: bool,
    /// CRCs computed already ([`scan_frames_known`]), in position order; `next_known` is the first not passed yet.
    known: &'a [KnownCrc],
    next_known: usize,
}

/// The CRC-32C a v2 frame's check computes (its bytes from the attributes on), already computed by whoever
/// hashed the bytes before (the direct protocol's decoder checks a chunk frame's CRC batch by batch): the frame at
/// `position` (relative to the scanned slice) with `size` bytes. Only a v2 frame at exactly that position with
/// exactly that size takes it; any other is hashed as usual.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownCrc {
    pub position: u64,
    pub size: u64,
    pub crc32c: u32,
}

/// Scan the frames of `bytes`, whose first byte sits at file position
/// `base_position`. Yields each frame, then stops after the last whole frame or
/// after the first framing error (`Corrupt`) or partial frame (`Incomplete`).
/// Error positions are absolute and name the *start* of the offending frame, so
/// they are also the end of the well-framed prefix; the defect names the field.
pub fn scan_frames(bytes: &[u8], base_position: u64) -> FrameIter<'_> {
    scan_frames_known(bytes, base_position, &[])
}

/// [`scan_frames`], taking each v2 frame's computed CRC from `known` where it names the frame's position and size,
/// instead of hashing the frame again (`known` sorted by position). Why: the bytes a direct-protocol chunk carries
/// were hashed batch by batch to check the frame's CRC; hashing them again for the batch checks was a second
/// CRC pass over every byte on the applier.
pub fn scan_frames_known<'a>(bytes: &'a [u8], base_position: u64, known: &'a [KnownCrc]) -> FrameIter<'a> {
    FrameIter {
        bytes,
        base: base_position,
        pos: 0,
        done: false,
        known,
        next_known: 0,
    }
}

impl FrameIter<'_> {
    /// Absolute position of the next frame: after a stop, the end of the
    /// well-framed prefix.
    pub fn next_position(&self) -> u64 {
        self.base + self.pos as u64
    }
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = Result<Frame<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        if rest.is_empty() {
            self.done = true;
            return None;
        }
        let position = self.next_position();
        while self
            .known
            .get(self.next_known)
            .is_some_and(|k| k.position < self.pos as u64)
        {
            self.next_known += 1;
        }
        let known = self
            .known
            .get(self.next_known)
            .filter(|k| k.position == self.pos as u64)
            .copied();
        let parsed = match known {
            None => next_frame(rest, position),
            Some(k) => frame_at(rest, position).map(|framed| Frame {
                info: framed.info,
                bytes: framed.bytes,
                stored_crc: framed.stored_crc,
                computed_crc: if framed.info.magic >= 2 && framed.bytes.len() as u64 == k.size {
                    k.crc32c
                } else {
                    compute_crc(framed.info.magic, framed.bytes)
                },
            }),
        };
        match parsed {
            Ok(frame) => {
                self.pos += frame.bytes.len();
                Some(Ok(frame))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Parse the frame at the start of `rest` (which sits at absolute `position`).
fn next_frame(rest: &[u8], position: u64) -> Result<Frame<'_>, ParseError> {
    let framed = frame_at(rest, position)?;
    Ok(Frame {
        info: framed.info,
        bytes: framed.bytes,
        stored_crc: framed.stored_crc,
        computed_crc: compute_crc(framed.info.magic, framed.bytes),
    })
}

/// A frame whose framing and header are checked but whose CRC is not computed
/// yet: the cheap half of a scan, which [`LogFile::scan`] runs ahead of the CRCs.
#[derive(Debug, Clone, Copy)]
struct Framed<'a> {
    info: BatchInfo,
    bytes: &'a [u8],
    stored_crc: u32,
}

/// The CRC of a whole frame, as its magic defines it.
fn compute_crc(magic: i8, bytes: &[u8]) -> u32 {
    if magic >= 2 {
        crate::batch::compute_crc(bytes)
    } else {
        legacy::compute_crc(bytes)
    }
}

/// Check the framing of the frame at the start of `rest` and read its header.
fn frame_at(rest: &[u8], position: u64) -> Result<Framed<'_>, ParseError> {
    let offset = rest.get(..8).map(|b| be_i64(b, 0));
    if rest.len() < HEADER_SIZE_UP_TO_MAGIC {
        return Err(ParseError::Incomplete {
            position,
            offset,
            needed: HEADER_SIZE_UP_TO_MAGIC as u64,
            available: rest.len() as u64,
        });
    }
    let length = be_i32(rest, 8);
    let magic = rest[MAGIC_OFFSET] as i8;
    let corrupt = |defect| ParseError::Corrupt {
        position,
        offset,
        defect,
    };
    if length < MIN_FRAME_LENGTH {
        return Err(corrupt(Defect::BadLength {
            field: "batch length",
            value: i64::from(length),
        }));
    }
    if !(0..=2).contains(&magic) {
        return Err(corrupt(Defect::BadMagic { magic }));
    }
    let size = LOG_OVERHEAD as u64 + length as u64;
    if magic == 2 && size < RECORD_BATCH_OVERHEAD as u64 {
        return Err(corrupt(Defect::BadLength {
            field: "batch length",
            value: i64::from(length),
        }));
    }
    let Some(bytes) = rest.get(..size as usize) else {
        return Err(ParseError::Incomplete {
            position,
            offset,
            needed: size,
            available: rest.len() as u64,
        });
    };
    if magic == 2 {
        let header = parse_header(bytes).map_err(|e| e.shifted(position))?;
        let control = if header.is_control() {
            shallow_control_type(bytes, &header)
        } else {
            None
        };
        let info = BatchInfo {
            position,
            size,
            magic,
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            max_timestamp: header.max_timestamp,
            partition_leader_epoch: header.partition_leader_epoch,
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            is_transactional: header.is_transactional(),
            control,
            is_control: header.is_control(),
            records_count: header.records_count,
        };
        Ok(Framed {
            info,
            bytes,
            stored_crc: header.crc,
        })
    } else {
        let info = legacy::shallow_info(bytes, position).map_err(|e| e.shifted(position))?;
        Ok(Framed {
            info,
            bytes,
            stored_crc: be_u32(bytes, legacy::LEGACY_CRC_OFFSET),
        })
    }
}

/// How a [`LogFile::scan`] ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanSummary {
    pub frames: u64,
    /// Frames whose CRC did not match.
    pub crc_mismatches: u64,
    /// Position after the last frame scanned.
    pub end: u64,
    /// The callback returned `Break`.
    pub stopped_early: bool,
}

/// A `.log` file, opened for reading (see the module docs: read, never mapped).
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: File,
    /// The size at open: a scan reads this many bytes (appends made later are
    /// not seen, as a broker's reader would not see them either).
    len: u64,
}

impl LogFile {
    /// Open a `.log` for reading: a regular file only (never blocking on a
    /// FIFO, following no symlink: see [`crate::open`]), of at most
    /// [`MAX_SEGMENT_BYTES`](crate::open::MAX_SEGMENT_BYTES).
    pub fn open(path: impl AsRef<Path>) -> Result<LogFile, Error> {
        let path = path.as_ref().to_path_buf();
        let (file, meta) = crate::open::open_regular(&path)?;
        let len = meta.len();
        if len > crate::open::MAX_SEGMENT_BYTES {
            return Err(crate::open::too_large(
                &path,
                ".log segment",
                len,
                crate::open::MAX_SEGMENT_BYTES,
            ));
        }
        crate::durable::read_sequentially(&file);
        Ok(LogFile { path, file, len })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size of the file when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// The opened file's device and inode: which file this is, whatever its path is called later (a reader that
    /// resumes from a position uses it to know the file is still the one it read, not a cleaned replacement).
    pub fn identity(&self) -> Result<(u64, u64), Error> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.metadata().map_err(|e| Error::io(&self.path, e))?;
        Ok((meta.dev(), meta.ino()))
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the bytes `[from, to)` of this file to `buf`, through the handle opened by [`LogFile::open`] (no
    /// second open by path, which could meet a swapped file or a FIFO), into `buf`'s spare capacity without zeroing
    /// it first. For a caller that ships the very bytes it scans ([`scan_frames`] over them). A file that ends before
    /// `to` was truncated while read: [`Defect::ChangedWhileRead`], as for a scan.
    pub fn read_range_into(&self, from: u64, to: u64, buf: &mut Vec<u8>) -> Result<(), Error> {
        use std::io::{Read, Seek, SeekFrom};
        let want = to.saturating_sub(from);
        let start = buf.len();
        buf.reserve_exact(usize::try_from(want).unwrap_or(usize::MAX));
        // Reads elsewhere use `pread`, so moving this handle's cursor disturbs none of them.
        let mut file = &self.file;
        file.seek(SeekFrom::Start(from)).map_err(|e| Error::io(&self.path, e))?;
        file.take(want).read_to_end(buf).map_err(|e| Error::io(&self.path, e))?;
        let read = (buf.len() - start) as u64;
        if read < want {
            return Err(self.shrunk(from + read));
        }
        Ok(())
    }

    /// The error for a file that ended at `at`, before the size it had at open.
    fn shrunk(&self, at: u64) -> Error {
        Error::corrupt(
            &self.path,
            at,
            None,
            Defect::ChangedWhileRead {
                message: format!(
                    "{} bytes when opened, but it ends at byte {at}: truncated while it was read",
                    self.len
                ),
            },
        )
    }

    fn checked(&self, read: std::io::Result<Result<(), Shrunk>>) -> Result<(), Error> {
        match read {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Shrunk { at })) => Err(self.shrunk(at)),
            Err(e) => Err(Error::io(&self.path, e)),
        }
    }

    /// Whether every byte from `position` to the size at open is zero (the tail
    /// a broker with `preallocate=true` leaves), read in small pieces.
    pub fn is_zero_from(&self, position: u64) -> Result<bool, Error> {
        const PIECE: usize = 64 * 1024;
        let mut buf = vec![0u8; PIECE];
        let mut at = position;
        while at < self.len {
            let n = (self.len - at).min(PIECE as u64) as usize;
            let Some(piece) = buf.get_mut(..n) else { break };
            self.checked(read_full_at(&self.file, piece, at))?;
            if piece.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }

    /// Scan every frame (see [`scan_frames`]), calling `f` for each. Returns
    /// the framing error or partial frame that stopped the scan, with this
    /// file's path and absolute positions, or [`Defect::ChangedWhileRead`] if
    /// the file ended before its size at open (truncated meanwhile).
    ///
    /// The file is read [`CHUNK_BYTES`] at a time (128 KiB on one thread, growing
    /// for large frames). When the process may use two
    /// CPUs, the next chunk of a file of [`PARALLEL_MIN_BYTES`] or more is read
    /// while one is scanned, and the CRCs of a chunk whose frames average
    /// [`PARALLEL_MIN_MEAN_FRAME_BYTES`] or more are computed on two threads (the
    /// private `window` module says how); the frames still reach `f` one by one,
    /// in file order, on the calling thread.
    pub fn scan<F>(&mut self, f: F) -> Result<ScanSummary, Error>
    where
        F: FnMut(&Frame<'_>) -> ControlFlow<()>,
    {
        self.scan_range(0, self.len, f)
    }

    /// [`LogFile::scan`] over the bytes `[from, to)` only: `from` must be a
    /// frame boundary a caller already knows (the end of a prefix it
    /// validated before, for a reader that follows a growing segment without
    /// reading it again from byte 0), `to` at most the size at open. A frame
    /// that crosses `to` is reported as incomplete, as one crossing the end of
    /// the file is. Memory is bounded as for [`LogFile::scan`]; a `from`
    /// beyond `to` scans nothing.
    pub fn scan_range<F>(&mut self, from: u64, to: u64, mut f: F) -> Result<ScanSummary, Error>
    where
        F: FnMut(&Frame<'_>) -> ControlFlow<()>,
    {
        let limit = to.min(self.len);
        let from = from.min(limit);
        let parallel = limit - from >= PARALLEL_MIN_BYTES && helper_available() && !CRC_HELPER_OFF.get();
        // The windowed scan wants large chunks (a hand-off to the helper per chunk); one thread wants small ones
        // that stay in the cache, larger only when frames are (see `SEQUENTIAL_CHUNK_BYTES`).
        let mut sizes = if parallel {
            ChunkSizes {
                chunk: CHUNK_BYTES,
                room: CARRY_ROOM,
            }
        } else {
            ChunkSizes {
                chunk: SEQUENTIAL_CHUNK_BYTES,
                room: SEQUENTIAL_CHUNK_BYTES,
            }
        };
        let chunk_len = |at: u64, chunk: usize| (limit - at).min(chunk as u64) as usize;
        let mut summary = ScanSummary {
            end: from,
            ..ScanSummary::default()
        };
        let (mut current, mut next) = if parallel {
            (Chunk::default(), Chunk::default())
        } else {
            (Chunk::pooled(), Chunk::pooled())
        };
        let first_room = if limit - from > sizes.chunk as u64 {
            sizes.room
        } else {
            0
        };
        let first = current.read(&self.file, from, chunk_len(from, sizes.chunk), first_room);
        self.checked(first)?;
        loop {
            let end = current.end();
            let at_end = end >= limit;
            let file = &self.file;
            // Read the next chunk while this one is scanned (on a second CPU).
            let (chunk_summary, stop, prefetched) = std::thread::scope(|scope| {
                let reader = (parallel && !at_end).then(|| {
                    let n = chunk_len(end, sizes.chunk);
                    let next = &mut next;
                    let room = sizes.room;
                    scope.spawn(move || next.read(file, end, n, room))
                });
                let (s, stop) = if parallel && frames_are_large(current.bytes()) {
                    window::scan(
                        current.bytes(),
                        current.position,
                        true,
                        window::Limits::DEFAULT,
                        &mut f,
                        |_| {},
                    )
                } else {
                    scan_in_order(current.bytes(), current.position, &mut f)
                };
                let prefetched = reader.map(|r| r.join().unwrap_or_else(|_| Err(std::io::ErrorKind::Other.into())));
                (s, stop, prefetched)
            });
            summary.frames += chunk_summary.frames;
            summary.crc_mismatches += chunk_summary.crc_mismatches;
            summary.end = chunk_summary.end;
            if chunk_summary.stopped_early {
                summary.stopped_early = true;
                return Ok(summary);
            }
            // A frame the chunk cut continues in the next one.
            let carry_from = match &stop {
                None if !at_end => end,
                Some(ParseError::Incomplete { position, .. }) if !at_end => *position,
                None => return Ok(summary),
                Some(e) => return Err(e.clone().at(&self.path)),
            };
            if let Some(ParseError::Incomplete {
                position,
                offset,
                needed,
                ..
            }) = &stop
            {
                if position.saturating_add(*needed) > limit {
                    // The frame runs past the end of the file: no need to read it.
                    let available = limit - position;
                    let tail = ParseError::Incomplete {
                        position: *position,
                        offset: *offset,
                        needed: *needed,
                        available,
                    };
                    return Err(tail.at(&self.path));
                }
                if *needed > MAX_FRAME_BYTES {
                    let defect = Defect::TooLarge {
                        what: "record batch",
                        size: *needed,
                        limit: MAX_FRAME_BYTES,
                    };
                    return Err(Error::corrupt(&self.path, *position, *offset, defect));
                }
            }
            let needed = match &stop {
                Some(ParseError::Incomplete { needed, .. }) => *needed,
                _ => 0,
            };
            match prefetched {
                Some(read) => self.checked(read)?,
                None => {
                    // A frame larger than the chunk: chunks of several such frames from now on.
                    sizes.grow_for(needed);
                    self.checked(next.read(&self.file, end, chunk_len(end, sizes.chunk), sizes.room))?
                }
            }
            let carry = current
                .bytes()
                .get((carry_from - current.position) as usize..)
                .unwrap_or_default();
            next.prepend(carry);
            let have = next.bytes().len() as u64;
            if have < needed {
                // A frame larger than a chunk: read the rest of it now.
                let more = (needed - have).min(limit - next.end()) as usize;
                self.checked(next.extend(&self.file, more))?;
            }
            std::mem::swap(&mut current, &mut next);
        }
    }
}

/// How much a scan reads at once, and the room kept in front of a chunk for the frame the chunk before cut.
#[derive(Debug, Clone, Copy)]
struct ChunkSizes {
    chunk: usize,
    room: usize,
}

impl ChunkSizes {
    /// Make chunks hold eight frames of `needed` bytes (up to [`CHUNK_BYTES`]) and their room one (up to
    /// [`CARRY_ROOM`]): a frame larger than the chunk is otherwise carried and read in pieces each time.
    fn grow_for(&mut self, needed: u64) {
        let needed = usize::try_from(needed).unwrap_or(usize::MAX);
        if needed > self.chunk {
            self.chunk = needed.saturating_mul(8).min(CHUNK_BYTES).max(self.chunk);
            self.room = needed.min(CARRY_ROOM).max(self.room);
        }
    }
}

/// [`LogFile::scan`] on one thread: each frame's CRC right after its header,
/// while the frame streams through the cache. (The windowed scan reads the
/// headers in a pass of their own, a cache miss each, which only pays when a
/// second core computes CRCs meanwhile.) `bytes` start at file position `base`.
fn scan_in_order<F>(bytes: &[u8], base: u64, mut f: F) -> (ScanSummary, Option<ParseError>)
where
    F: FnMut(&Frame<'_>) -> ControlFlow<()>,
{
    let mut summary = ScanSummary {
        end: base,
        ..ScanSummary::default()
    };
    let mut frames = scan_frames(bytes, base);
    let mut stop = None;
    for item in frames.by_ref() {
        match item {
            Ok(frame) => {
                summary.frames += 1;
                if !frame.crc_matches() {
                    summary.crc_mismatches += 1;
                }
                if f(&frame).is_break() {
                    summary.stopped_early = true;
                    break;
                }
            }
            Err(e) => {
                stop = Some(e);
                break;
            }
        }
    }
    summary.end = frames.next_position();
    (summary, stop)
}

/// Files smaller than this (4 MiB) are scanned on one thread: starting the CRC
/// helper costs tens of microseconds, about the CRC time of a few hundred KiB.
pub const PARALLEL_MIN_BYTES: u64 = 4 * 1024 * 1024;

/// Frames smaller than this on average (16 KiB), sampled at the start of a chunk, are scanned on the calling thread
/// even in a file large enough for the CRC helper: the windowed scan walks the headers in a pass of their own (a
/// cache miss each) and keeps ~150 bytes of metadata per frame, a cost per frame that on ~1 KiB batches made it
/// 6-7x the one-thread scan in CPU, while the CRC of a small frame is too little work to be worth
/// sharing. The next chunk is still read on the second thread while this one is scanned.
pub const PARALLEL_MIN_MEAN_FRAME_BYTES: usize = 16 * 1024;

/// Frames sampled at the start of a chunk to judge their size.
const FRAME_SIZE_SAMPLE: usize = 16;

/// Whether the frames at the start of `bytes` average at least [`PARALLEL_MIN_MEAN_FRAME_BYTES`], judged from
/// their length fields only (nothing is checked here: the scan that follows reports any defect). A first frame
/// that does not fit in `bytes` counts whole (a large frame), and bytes that do not frame count as large, so the
/// windowed scan, which reports them exactly as the one-thread scan does, keeps what it handled before.
fn frames_are_large(bytes: &[u8]) -> bool {
    let mut position = 0usize;
    let mut frames = 0usize;
    while frames < FRAME_SIZE_SAMPLE {
        let Some(head) = bytes.get(position..).filter(|rest| rest.len() >= LOG_OVERHEAD) else {
            break;
        };
        let length = be_i32(head, 8);
        if length < MIN_FRAME_LENGTH {
            break;
        }
        position = position.saturating_add(LOG_OVERHEAD + length as usize);
        frames += 1;
    }
    frames == 0 || position / frames >= PARALLEL_MIN_MEAN_FRAME_BYTES
}

std::thread_local! {
    /// Set by [`without_crc_helper`] on a thread that is one of several scanning at once.
    static CRC_HELPER_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every [`LogFile::scan`] it makes on this thread scanning on this thread alone (no CRC helper, no
/// read-ahead thread), for a caller that already runs one scan per core (`verify` of many partitions): helpers on
/// top would only add thread switches.
pub fn without_crc_helper<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CRC_HELPER_OFF.set(self.0);
        }
    }
    let _restore = Restore(CRC_HELPER_OFF.replace(true));
    f()
}

/// Whether a second thread can run at the same time: not on a single core (or
/// a one-CPU container), where the helper would only add switches.
fn helper_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

#[cfg(test)]
mod cost;
#[cfg(test)]
mod tests;
