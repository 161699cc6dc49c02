//! Following the active segment as the broker appends to it, reading each byte
//! once.
//!
//! [`super::bound_active`] validates the active `.log` from byte 0 on every
//! call, which is right for one snapshot of a segment but quadratic for a tail
//! driver that calls it again after every append to a segment that grows to a
//! GiB. [`read_tail`] instead continues from a [`TailPosition`]: the end of a
//! prefix already validated, with what is needed to check the batches after it
//! (the next expected offset, the last leader epoch) and to tell that the file
//! is still the one that prefix was read from. It returns the complete,
//! CRC-valid batches appended since, as a [`Chunk`] `[from, to)` that ends on a
//! batch boundary, with the chunk's CRC-32C and a summary of its batches. The
//! chunks of successive calls are contiguous, so their concatenation is the
//! segment's prefix and every byte is read (and shipped) once.
//!
//! What is not shipped yet:
//! - a batch the broker is still writing (the file ends inside it), or the
//!   zero header of a preallocated tail (`preallocate=true`): left for the next
//!   call, counted in [`Chunk::pending`];
//! - batches at or beyond the `upto` bound (the high watermark, see
//!   [`super::bound_hw`]): a chunk ends at the last batch whose last offset is
//!   below it;
//! - more than [`TailOptions::max_chunk_bytes`] per call (at least one batch),
//!   so one call on a segment that a slow tail fell behind on stays short.
//!
//! The file is read in the bounded buffers of [`LogFile::scan_range`]; a batch
//! length larger than [`TailOptions::max_batch_bytes`], or one that would end
//! past Kafka's largest segment, is refused as corrupt (naming the file and
//! position) even while the batch is still incomplete, so a hostile length
//! never makes the reader wait for, or buffer, gigabytes. (A hostile length
//! within those limits is waited for like a batch being written; the sealed
//! segment's full check at the roll refuses it.)
//!
//! The file may also have changed under the position. Kafka never rewrites
//! bytes in place: it truncates (a follower after a leader change), replaces
//! the file by rename (compaction swaps; a roll leaves the old file alone) or
//! deletes it. So: a file shorter than the position is [`TailRead::Truncated`];
//! another inode at the path is [`TailRead::Replaced`]; and the last batch
//! before the position is read back and compared with the one validated
//! (offset, length, epoch, magic, CRC: a tripwire for a truncation followed by
//! new appends between two calls), a difference being [`TailRead::Changed`].
//! The tripwire looks at one batch, not the whole prefix (that would be the
//! quadratic re-read this module exists to avoid); a driver that wants the
//! whole prefix checked when the segment is sealed combines the chunk CRCs
//! ([`combine_crc32c`]) and compares them with a full scan. All outcomes are
//! typed; `Err` is left for I/O failures.
//!
//! When the segment is sealed (a roll), the driver checks it whole once
//! ([`super::bound_sealed`]) and compares [`prefix_crc32c`] of the file with
//! [`TailPosition::prefix_crc32c`], the chunks' CRCs combined: equal, the
//! sealed segment is exactly the bytes already shipped, and its final version
//! needs only its indexes, snapshot and transaction index on top.
//!
//! Blocking (file reads); async callers run it in `spawn_blocking`.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use segment_format::batch::BatchInfo;
use segment_format::log::{LogFile, MAX_FRAME_BYTES};
use segment_format::open::MAX_SEGMENT_BYTES;
use segment_format::{Defect, Error};

use segment_format::crc_combine::PrefixCrc;

/// Most bytes one [`read_tail`] call returns (64 MiB, or one batch if a batch
/// is larger): a tail that fell behind catches up in calls of bounded time,
/// each a chunk a transport can carry and acknowledge on its own.
pub const MAX_CHUNK_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes of a frame header the tripwire compares: offset (8), length (4),
/// partition leader epoch (4), magic (1), CRC (4). For legacy frames the same
/// bytes hold offset, length, CRC and magic: a change shows as well.
const TRIPWIRE_BYTES: usize = 21;

/// Where a tail of one segment stands: the end of a validated prefix and what
/// checking the batches after it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailPosition {
    /// The segment's `.log`.
    pub path: PathBuf,
    /// The segment's base offset (batches must not fall below it).
    pub base_offset: i64,
    /// End of the validated prefix: a batch boundary.
    pub position: u64,
    /// One past the last offset of the validated prefix (`base_offset` if it is empty).
    pub next_offset: i64,
    /// Leader epoch of the last v2 batch of the prefix (`-1`: none yet).
    pub last_epoch: i32,
    /// The prefix's last batch, for the tripwire (`None`: empty prefix).
    pub last_batch: Option<BatchMark>,
    /// Inode of the file the prefix was read from (0 off Unix, where
    /// replacement is then seen only through the tripwire).
    pub inode: u64,
    /// CRC-32C of the whole validated prefix `[0, position)`: the chunks'
    /// CRCs combined. When the segment is sealed, [`prefix_crc32c`] of the
    /// file must give the same: the sealed segment is then exactly the bytes
    /// shipped, and its final version only adds its indexes and snapshot.
    pub prefix_crc32c: u32,
}

/// The header bytes of one validated batch, to tell later that it is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMark {
    /// Position of the batch in the file.
    pub position: u64,
    /// Its first 21 bytes (offset, length, leader epoch, magic, CRC).
    pub header: [u8; TRIPWIRE_BYTES],
}

impl TailPosition {
    /// The start of a segment: nothing validated yet. Reads the file's inode,
    /// so the tail is tied to the file that is at `path` now.
    pub fn start(path: &Path, base_offset: i64) -> Result<TailPosition, Error> {
        let inode = inode_of(path)?;
        Ok(TailPosition {
            path: path.to_path_buf(),
            base_offset,
            position: 0,
            next_offset: base_offset,
            last_epoch: -1,
            last_batch: None,
            inode,
            prefix_crc32c: 0,
        })
    }

    /// The position after `chunk`, which [`read_tail`] returned for `self`.
    fn after(&self, chunk: &Chunk, last: Option<(BatchMark, i64, i32)>, inode: u64) -> TailPosition {
        let mut next = self.clone();
        next.position = chunk.to;
        next.inode = inode;
        if !chunk.is_empty() {
            next.prefix_crc32c = combine_crc32c(self.prefix_crc32c, chunk.crc32c, chunk.len());
        }
        if let Some((mark, next_offset, epoch)) = last {
            next.last_batch = Some(mark);
            next.next_offset = next_offset;
            if epoch >= 0 {
                next.last_epoch = epoch;
            }
        }
        next
    }
}

/// How far and how much one [`read_tail`] call reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailOptions {
    /// Ship only batches whose last offset is below this (the high
    /// watermark); `None`: to the end of the log.
    pub upto: Option<i64>,
    /// Most bytes one call returns (at least one batch): [`MAX_CHUNK_BYTES`].
    pub max_chunk_bytes: u64,
    /// Largest batch accepted, complete or not: [`MAX_FRAME_BYTES`].
    pub max_batch_bytes: u64,
}

impl Default for TailOptions {
    fn default() -> Self {
        TailOptions {
            upto: None,
            max_chunk_bytes: MAX_CHUNK_BYTES,
            max_batch_bytes: MAX_FRAME_BYTES,
        }
    }
}

/// Newly appended bytes of a segment: `[from, to)` of its `.log`, whole
/// CRC-valid batches only (`from == to`: nothing new that may be shipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// First byte (the position the call started from).
    pub from: u64,
    /// One past the last byte: a batch boundary.
    pub to: u64,
    /// CRC-32C (Castagnoli) of the bytes `[from, to)`.
    pub crc32c: u32,
    /// Base offset of the first batch.
    pub first_offset: Option<i64>,
    /// Last offset of the last batch.
    pub last_offset: Option<i64>,
    /// Largest batch max-timestamp (`-1`: none).
    pub max_timestamp: i64,
    /// Batches (frames; a legacy wrapper counts once).
    pub batches: u64,
    /// Bytes of the file after `to` when it was read: a batch being written,
    /// batches held back by the bound or the chunk limit, a preallocated tail.
    pub pending: u64,
    /// The chunk stopped at the `upto` bound (a batch after `to` reaches it).
    pub at_bound: bool,
}

impl Chunk {
    /// Bytes in the chunk.
    pub fn len(&self) -> u64 {
        self.to - self.from
    }

    /// Nothing new.
    pub fn is_empty(&self) -> bool {
        self.to == self.from
    }
}

/// What continuing a tail came to.
#[derive(Debug)]
pub enum TailRead {
    /// The batches appended since the position (possibly none) and the
    /// position after them.
    Appended { chunk: Chunk, next: TailPosition },
    /// The file is shorter than the position: the broker truncated it.
    Truncated { path: PathBuf, len: u64, position: u64 },
    /// Another file is at the path now (a rename over it), or none is.
    Replaced { path: PathBuf, reason: String },
    /// The bytes before the position are not the ones validated.
    Changed { path: PathBuf, reason: String },
    /// The batch at the position is corrupt (bad framing or CRC, offsets or
    /// epochs out of order, a length over the limit): the error names the
    /// file and position. Nothing from it on is shipped. (Sound batches
    /// before a corrupt one are returned first, as `Appended`.)
    Corrupt(Error),
}

/// The CRC-32C of `a ++ b`, from the CRCs of `a` and `b` and the length of
/// `b`: the chunks of a segment combine into the CRC of its prefix.
pub fn combine_crc32c(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    // A chunk is at most a segment, and a segment is below 2 GiB.
    crc32c::crc32c_combine(crc_a, crc_b, usize::try_from(len_b).unwrap_or(usize::MAX))
}

/// Bytes [`prefix_crc32c`] reads at once (1 MiB): bounded memory, few calls.
const PREFIX_READ_BYTES: usize = 1024 * 1024;

/// The CRC-32C of the first `len` bytes of `path`, read in bounded pieces;
/// `None` if the file is shorter. One pass per sealed segment (not per
/// chunk), to compare with [`TailPosition::prefix_crc32c`].
/// Blocking; async callers run it in `spawn_blocking`.
pub fn prefix_crc32c(path: &Path, len: u64) -> Result<Option<u32>, Error> {
    let mut buf = vec![0u8; PREFIX_READ_BYTES];
    let mut crc = 0u32;
    let mut at = 0u64;
    while at < len {
        let want = usize::try_from(len - at).map_or(PREFIX_READ_BYTES, |n| n.min(PREFIX_READ_BYTES));
        let Some(piece) = buf.get_mut(..want) else { break };
        let n = read_at(path, at, piece)?;
        let Some(read) = piece.get(..n) else { break };
        if n == 0 {
            return Ok(None);
        }
        crc = crc32c::crc32c_append(crc, read);
        at += n as u64;
    }
    Ok(Some(crc))
}

fn inode_of(path: &Path) -> Result<u64, Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = {
        let _ = meta;
        0
    };
    Ok(inode)
}

/// Read up to `buf.len()` bytes at `position`; fewer where the file ends.
fn read_at(path: &Path, position: u64, buf: &mut [u8]) -> Result<usize, Error> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    file.seek(SeekFrom::Start(position)).map_err(|e| Error::io(path, e))?;
    let mut done = 0;
    while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
        match file.read(rest) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(done)
}

/// Is the tripwire batch still there, as validated?
fn tripwire_holds(at: &TailPosition) -> Result<bool, Error> {
    let Some(mark) = &at.last_batch else { return Ok(true) };
    let mut now = [0u8; TRIPWIRE_BYTES];
    let n = read_at(&at.path, mark.position, &mut now)?;
    Ok(n == TRIPWIRE_BYTES && now == mark.header)
}

/// The outcome for a file that vanished or changed its inode since `at`.
fn identity_outcome(at: &TailPosition) -> Result<Option<TailRead>, Error> {
    match inode_of(&at.path) {
        Ok(inode) if inode == at.inode => Ok(None),
        Ok(inode) => Ok(Some(TailRead::Replaced {
            path: at.path.clone(),
            reason: format!("inode {} is now {inode}", at.inode),
        })),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(Some(TailRead::Replaced {
                path: at.path.clone(),
                reason: "the file is gone (deleted or renamed)".into(),
            }))
        }
        Err(e) => Err(e),
    }
}

/// The bytes and batches of the chunk a [`read_tail_into`] call returned, as its scan read and checked them: the
/// caller ships these very bytes instead of reading the range a second time (and hashing it again), so nothing can
/// change between the check and the copy.
#[derive(Debug, Default)]
pub struct ChunkContent {
    /// The chunk's bytes, `[from, to)` of the file.
    pub bytes: Vec<u8>,
    /// Its batches, in file order.
    pub batches: Vec<BatchInfo>,
}

/// Continue the tail at `at` (see the module doc).
pub fn read_tail(at: &TailPosition, options: &TailOptions) -> Result<TailRead, Error> {
    read_tail_inner(at, options, None)
}

/// [`read_tail`], also handing over the chunk's bytes and batches in `content` (cleared first; left empty for any
/// outcome but a non-empty [`TailRead::Appended`]). Memory: the chunk, at most [`TailOptions::max_chunk_bytes`] or
/// one batch of at most [`TailOptions::max_batch_bytes`].
pub fn read_tail_into(at: &TailPosition, options: &TailOptions, content: &mut ChunkContent) -> Result<TailRead, Error> {
    content.bytes.clear();
    content.batches.clear();
    let read = read_tail_inner(at, options, Some(content));
    if !matches!(&read, Ok(TailRead::Appended { .. })) {
        content.bytes.clear();
        content.batches.clear();
    }
    read
}

/// The end of the range one call scans: the chunk limit past the position, or the first batch when it is larger
/// (up to the batch limit; a longer length is left for the scan to report). Why not the file's end: the scan reads
/// and CRC-checks its window ahead of the frames it hands over, so a tail far behind a segment's end read (and
/// checked) up to twice the chunk for every chunk it shipped.
fn scan_limit(at: &TailPosition, options: &TailOptions, len: u64) -> Result<u64, Error> {
    let mut header = [0u8; 12];
    let first_batch = match read_at(&at.path, at.position, &mut header)? {
        12 => {
            let length = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
            u64::try_from(length).map_or(0, |l| (12 + l).min(options.max_batch_bytes))
        }
        _ => 0,
    };
    Ok(at
        .position
        .saturating_add(options.max_chunk_bytes.max(first_batch))
        .min(len))
}

fn read_tail_inner(
    at: &TailPosition,
    options: &TailOptions,
    content: Option<&mut ChunkContent>,
) -> Result<TailRead, Error> {
    if let Some(outcome) = identity_outcome(at)? {
        return Ok(outcome);
    }
    let mut log = match LogFile::open(&at.path) {
        Ok(log) => log,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(TailRead::Replaced {
                path: at.path.clone(),
                reason: "the file is gone (deleted or renamed)".into(),
            })
        }
        Err(e) if e.is_too_large() => return Ok(TailRead::Corrupt(e)),
        Err(e) => return Err(e),
    };
    let len = log.len();
    if len < at.position {
        return Ok(TailRead::Truncated {
            path: at.path.clone(),
            len,
            position: at.position,
        });
    }
    let limit = scan_limit(at, options, len)?;
    let (mut bytes_out, batches_out) = match content {
        Some(ChunkContent { bytes, batches }) => (Some(bytes), Some(batches)),
        None => (None, None),
    };
    let mut scan = TailScan::new(at, options, batches_out);
    let scanned = match bytes_out.as_deref_mut() {
        // The range is read once, straight into the buffer that is shipped, and scanned there.
        Some(bytes) => scan_in_place(&log, at.position, limit, bytes, |frame| scan.frame(frame)),
        None => log
            .scan_range(at.position, limit, |frame| scan.frame(frame))
            .map(|_| ()),
    };
    if let Some(bytes) = bytes_out {
        // Only the accepted batches are the chunk; what follows them (a partial batch, batches past the bound or
        // the limit, a corrupt one) is read again by the next call.
        bytes.truncate(usize::try_from(scan.end - at.position).unwrap_or(usize::MAX));
    }
    // The file as it is after the scan: the same inode, as long as the scan
    // went, and the prefix's last batch where it was.
    if let Some(outcome) = identity_outcome(at)? {
        return Ok(outcome);
    }
    let len_after = match std::fs::metadata(&at.path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(TailRead::Replaced {
                path: at.path.clone(),
                reason: "the file is gone (deleted or renamed)".into(),
            })
        }
        Err(e) => return Err(Error::io(&at.path, e)),
    };
    if len_after < scan.end.max(at.position) {
        return Ok(TailRead::Truncated {
            path: at.path.clone(),
            len: len_after,
            position: scan.end.max(at.position),
        });
    }
    if !tripwire_holds(at)? {
        return Ok(TailRead::Changed {
            path: at.path.clone(),
            reason: format!(
                "the batch at byte {} is not the one read before (truncated and rewritten?)",
                at.last_batch.map_or(0, |m| m.position)
            ),
        });
    }
    // Corruption after sound batches: those ship now, and the next call,
    // starting at the bad batch, reports it.
    let corrupt = match (scan.corrupt.take(), scanned) {
        (Some(e), _) => Some(e),
        (None, Ok(_)) => None,
        // A batch still being written (or held back past the limit).
        (
            None,
            Err(Error::Incomplete {
                position,
                offset,
                needed,
                ..
            }),
        ) => (needed > options.max_batch_bytes || position.saturating_add(needed) > MAX_SEGMENT_BYTES)
            .then(|| too_large(&at.path, position, offset, needed, options)),
        (None, Err(e)) if e.is_changed_while_read() => {
            return Ok(TailRead::Changed {
                path: at.path.clone(),
                reason: e.to_string(),
            })
        }
        (
            None,
            Err(Error::Corrupt {
                position,
                defect: Defect::BadLength { value: 0, .. },
                ..
            }),
        ) if zero_header(&at.path, position)? => None,
        (None, Err(e @ Error::Corrupt { .. })) => Some(e),
        (None, Err(e)) => return Err(e),
    };
    if let Some(e) = corrupt {
        if scan.batches == 0 {
            return Ok(TailRead::Corrupt(e));
        }
    }
    let chunk = Chunk {
        from: at.position,
        to: scan.end,
        crc32c: scan.crc.value(),
        first_offset: scan.first_offset,
        last_offset: scan.last.map(|(_, next, _)| next - 1),
        max_timestamp: scan.max_timestamp,
        batches: scan.batches,
        pending: len.saturating_sub(scan.end),
        at_bound: scan.at_bound,
    };
    let next = at.after(&chunk, scan.last, at.inode);
    Ok(TailRead::Appended { chunk, next })
}

/// Reads `[from, to)` of `log` into `buf` (cleared first) and scans the frames there, calling `f` for each, as
/// [`LogFile::scan_range`] does over its own buffers. Why not that: it reads into buffers of its own, zeroed before
/// each read, and the caller then copied every accepted frame into the buffer it ships. Here the bytes land once, in
/// `buf` ([`LogFile::read_range_into`]: spare capacity, not zeroed), and the accepted prefix of `buf` is what ships.
/// Memory: `to - from`, which [`scan_limit`] bounds by the chunk limit or one batch. A file that ends before `to` was
/// truncated while read: [`Defect::ChangedWhileRead`].
fn scan_in_place<F>(log: &LogFile, from: u64, to: u64, buf: &mut Vec<u8>, mut f: F) -> Result<(), Error>
where
    F: FnMut(&segment_format::log::Frame<'_>) -> ControlFlow<()>,
{
    buf.clear();
    log.read_range_into(from, to, buf)?;
    for frame in segment_format::log::scan_frames(buf, from) {
        match frame {
            Ok(frame) => {
                if f(&frame).is_break() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e.at(log.path())),
        }
    }
    Ok(())
}

/// Is the frame header at `position` all zeros (a preallocated tail, not yet written)?
fn zero_header(path: &Path, position: u64) -> Result<bool, Error> {
    let mut header = [0u8; 12];
    let n = read_at(path, position, &mut header)?;
    Ok(n == header.len() && header.iter().all(|&b| b == 0))
}

fn too_large(path: &Path, position: u64, offset: Option<i64>, size: u64, options: &TailOptions) -> Error {
    Error::corrupt(
        path,
        position,
        offset,
        Defect::TooLarge {
            what: "record batch",
            size,
            limit: options.max_batch_bytes,
        },
    )
}

/// The per-frame checks and totals of one [`read_tail`] scan.
struct TailScan<'a> {
    at: &'a TailPosition,
    options: &'a TailOptions,
    /// Where the accepted batches' infos go ([`read_tail_into`]; their bytes are already in place).
    batches_out: Option<&'a mut Vec<BatchInfo>>,
    end: u64,
    /// The chunk's CRC-32C, combined from the batch CRCs the scan checked: no second pass over the bytes.
    crc: PrefixCrc,
    first_offset: Option<i64>,
    /// The last accepted batch: its mark, the next offset, its epoch.
    last: Option<(BatchMark, i64, i32)>,
    next_offset: i64,
    last_epoch: i32,
    max_timestamp: i64,
    batches: u64,
    at_bound: bool,
    corrupt: Option<Error>,
}

impl<'a> TailScan<'a> {
    fn new(at: &'a TailPosition, options: &'a TailOptions, batches_out: Option<&'a mut Vec<BatchInfo>>) -> Self {
        TailScan {
            at,
            options,
            batches_out,
            end: at.position,
            crc: PrefixCrc::default(),
            first_offset: None,
            last: None,
            next_offset: at.next_offset,
            last_epoch: at.last_epoch,
            max_timestamp: -1,
            batches: 0,
            at_bound: false,
            corrupt: None,
        }
    }

    fn frame(&mut self, frame: &segment_format::log::Frame<'_>) -> ControlFlow<()> {
        let info = &frame.info;
        let path = &self.at.path;
        let fail = |defect| Error::corrupt(path, info.position, Some(info.base_offset), defect);
        if info.size > self.options.max_batch_bytes {
            self.corrupt = Some(too_large(
                path,
                info.position,
                Some(info.base_offset),
                info.size,
                self.options,
            ));
            return ControlFlow::Break(());
        }
        if let Some(defect) = frame.crc_defect() {
            self.corrupt = Some(Error::corrupt(
                path,
                frame.crc_position(),
                Some(info.base_offset),
                defect,
            ));
            return ControlFlow::Break(());
        }
        if info.base_offset < self.next_offset || info.last_offset < info.base_offset {
            self.corrupt = Some(fail(Defect::OffsetOutOfOrder {
                previous: self.next_offset - 1,
                found: info.base_offset,
            }));
            return ControlFlow::Break(());
        }
        if info.last_offset - self.at.base_offset > i64::from(i32::MAX) {
            self.corrupt = Some(fail(Defect::OffsetOverflow {
                base_offset: self.at.base_offset,
                found: info.last_offset,
            }));
            return ControlFlow::Break(());
        }
        if info.magic >= 2 && info.partition_leader_epoch < self.last_epoch {
            self.corrupt = Some(fail(Defect::Epoch {
                message: format!(
                    "leader epoch {} after {}: epochs never decrease in a log",
                    info.partition_leader_epoch, self.last_epoch
                ),
            }));
            return ControlFlow::Break(());
        }
        if self.options.upto.is_some_and(|upto| info.last_offset >= upto) {
            self.at_bound = true;
            return ControlFlow::Break(());
        }
        if self.batches > 0 && (self.end - self.at.position).saturating_add(info.size) > self.options.max_chunk_bytes {
            return ControlFlow::Break(());
        }
        self.crc.append(frame);
        self.first_offset.get_or_insert(info.base_offset);
        let mut header = [0u8; TRIPWIRE_BYTES];
        if let Some(h) = frame.bytes.get(..TRIPWIRE_BYTES) {
            header.copy_from_slice(h);
        }
        self.next_offset = info.last_offset + 1;
        if info.magic >= 2 {
            self.last_epoch = info.partition_leader_epoch;
        }
        self.last = Some((
            BatchMark {
                position: info.position,
                header,
            },
            self.next_offset,
            if info.magic >= 2 {
                info.partition_leader_epoch
            } else {
                -1
            },
        ));
        self.max_timestamp = self.max_timestamp.max(info.max_timestamp);
        if let Some(batches) = self.batches_out.as_deref_mut() {
            batches.push(*info);
        }
        self.batches += 1;
        self.end = info.position + info.size;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
#[path = "growing_tests.rs"]
mod tests;
