//! Walking the batch headers of one segment with `pread`, and the index lookups that say where to start.
//!
//! Why our own header walk rather than `segment_format::log::LogFile::scan`: a scan computes every batch's CRC,
//! which is nearly all its cost, and a Fetch or a last-stable-offset step only needs the headers (the client checks
//! CRCs). The walk reads the file in growing pieces (4 KiB, doubling to 64 KiB) so that finding a batch a few KiB
//! after an index entry costs one small read, and a walk over a whole segment few large ones.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use segment_format::batch::{
    Attributes, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_FRAME_LENGTH, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::index::{OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE};
use segment_format::legacy::RECORD_OVERHEAD_V1;
use segment_format::open::{MAX_INDEX_FILE_BYTES, MAX_SEGMENT_BYTES};

use super::{format_error, invalid};

/// First read of a walk; each further read doubles, up to [`WALK_MAX_READ`].
const WALK_FIRST_READ: usize = 4 * 1024;
/// Largest read of a walk (64 KiB): the walk's memory.
const WALK_MAX_READ: usize = 64 * 1024;
/// Bytes of a legacy v1 message up to the end of its timestamp.
const LEGACY_V1_HEADER: usize = 26;

/// Open `path` if it is a regular file (see [`segment_format::open::open_regular`]): the file and its size, or
/// `None` when it does not exist.
pub(crate) fn open_regular(path: &Path) -> io::Result<Option<(File, u64)>> {
    match segment_format::open::open_regular(path) {
        Ok((file, meta)) => Ok(Some((file, meta.len()))),
        Err(segment_format::Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format_error(e)),
    }
}

/// Fill `buf` from `at` until it is full or the file ends; the bytes read (fewer when the file is shorter than
/// expected: truncated meanwhile).
pub(crate) fn read_at_most(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let Some(rest) = buf.get_mut(done..) else { break };
        match file.read_at(rest, at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// One open `.log` file, with its size when opened (bytes appended later are not seen by this handle's walks).
#[derive(Debug)]
pub(crate) struct Segment {
    pub base: i64,
    pub dir: PathBuf,
    pub path: PathBuf,
    pub file: File,
    pub len: u64,
}

impl Segment {
    /// Open the segment based at `base` in `dir`; `None` when its `.log` is gone (deleted by retention).
    pub fn open(dir: &Path, base: i64) -> io::Result<Option<Segment>> {
        let path = dir.join(segment_file_name(base, SegmentFileKind::Log));
        let Some((file, len)) = open_regular(&path)? else {
            return Ok(None);
        };
        if len > MAX_SEGMENT_BYTES {
            return Err(invalid(format!(
                "{}: {len} bytes, larger than any segment Kafka writes ({MAX_SEGMENT_BYTES})",
                path.display()
            )));
        }
        Ok(Some(Segment {
            base,
            dir: dir.to_path_buf(),
            path,
            file,
            len,
        }))
    }

    /// A file beside this segment (its indexes).
    pub fn sibling(&self, kind: SegmentFileKind) -> PathBuf {
        self.dir.join(segment_file_name(self.base, kind))
    }

    /// The device and inode of the opened file: which file this is, whatever its name is later.
    pub fn identity(&self) -> io::Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.metadata()?;
        Ok((meta.dev(), meta.ino()))
    }

    /// The whole frame of `h`, or `None` when it is larger than `limit` bytes or the file ends before it does.
    pub fn frame(&self, h: &Header, limit: u64) -> io::Result<Option<Vec<u8>>> {
        if h.size > limit {
            return Ok(None);
        }
        let mut buf = vec![0u8; h.size as usize];
        let got = read_at_most(&self.file, &mut buf, h.position)?;
        Ok((got == buf.len()).then_some(buf))
    }
}

/// What the walk needs of a frame's header, for every magic. Legacy frames (magic 0/1) carry one offset, which is
/// both their first and last (a wrapper's offset is its last inner message's), no producer and no epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// Byte position in the `.log`.
    pub position: u64,
    /// Bytes of the whole frame.
    pub size: u64,
    pub magic: i8,
    pub base_offset: i64,
    pub last_offset: i64,
    /// `-1` when the frame has none (magic 0).
    pub max_timestamp: i64,
    /// `-1` for legacy frames.
    pub leader_epoch: i32,
    /// Zero for legacy frames (their attributes are not the v2 attributes).
    pub attributes: Attributes,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The stored CRC (v2: CRC-32C of the batch from its attributes; legacy: CRC-32 of the message).
    pub crc: u32,
}

impl Header {
    pub fn next_offset(&self) -> i64 {
        self.last_offset.saturating_add(1)
    }

    pub fn end(&self) -> u64 {
        self.position + self.size
    }

    pub fn is_control(&self) -> bool {
        self.magic >= 2 && self.attributes.is_control()
    }

    pub fn is_transactional(&self) -> bool {
        self.magic >= 2 && self.attributes.is_transactional()
    }
}

/// A header, or how many bytes parsing it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parsed {
    Header(Header),
    Short { needed: usize },
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    let mut a = [0u8; 2];
    if let Some(src) = b.get(at..at + 2) {
        a.copy_from_slice(src);
    }
    i16::from_be_bytes(a)
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    if let Some(src) = b.get(at..at + 4) {
        a.copy_from_slice(src);
    }
    i32::from_be_bytes(a)
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    if let Some(src) = b.get(at..at + 8) {
        a.copy_from_slice(src);
    }
    i64::from_be_bytes(a)
}

/// Parse the header of the frame at the start of `bytes` (which sits at `position` of `path`), checking what the
/// walk relies on: a length of at least the smallest frame, a known magic, non-negative offsets, a last offset not
/// below the base offset.
pub(crate) fn parse_header(bytes: &[u8], position: u64, path: &Path) -> io::Result<Parsed> {
    if bytes.len() < HEADER_SIZE_UP_TO_MAGIC {
        return Ok(Parsed::Short {
            needed: HEADER_SIZE_UP_TO_MAGIC,
        });
    }
    let corrupt = |what: String| invalid(format!("{}: byte {position}: {what}", path.display()));
    let base_offset = i64_at(bytes, 0);
    let length = i32_at(bytes, 8);
    let magic = bytes[16] as i8;
    if length < MIN_FRAME_LENGTH {
        return Err(corrupt(format!("batch length {length}")));
    }
    if base_offset < 0 {
        return Err(corrupt(format!("negative offset {base_offset}")));
    }
    let size = LOG_OVERHEAD as u64 + length as u64;
    let header = match magic {
        2 => {
            if size < RECORD_BATCH_OVERHEAD as u64 {
                return Err(corrupt(format!("batch length {length} is shorter than a batch header")));
            }
            if bytes.len() < RECORD_BATCH_OVERHEAD {
                return Ok(Parsed::Short {
                    needed: RECORD_BATCH_OVERHEAD,
                });
            }
            let last_offset_delta = i32_at(bytes, 23);
            if last_offset_delta < 0 {
                return Err(corrupt(format!("negative last offset delta {last_offset_delta}")));
            }
            Header {
                position,
                size,
                magic,
                base_offset,
                last_offset: base_offset.saturating_add(i64::from(last_offset_delta)),
                max_timestamp: i64_at(bytes, 35),
                leader_epoch: i32_at(bytes, 12),
                attributes: Attributes(i16_at(bytes, 21)),
                producer_id: i64_at(bytes, 43),
                producer_epoch: i16_at(bytes, 51),
                crc: i32_at(bytes, 17) as u32,
            }
        }
        0 | 1 => {
            let has_timestamp = magic == 1 && size >= (LOG_OVERHEAD + RECORD_OVERHEAD_V1) as u64;
            if has_timestamp && bytes.len() < LEGACY_V1_HEADER {
                return Ok(Parsed::Short {
                    needed: LEGACY_V1_HEADER,
                });
            }
            Header {
                position,
                size,
                magic,
                base_offset,
                last_offset: base_offset,
                max_timestamp: if has_timestamp { i64_at(bytes, 18) } else { NO_TIMESTAMP },
                leader_epoch: NO_PARTITION_LEADER_EPOCH,
                attributes: Attributes(0),
                producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
                crc: i32_at(bytes, 12) as u32,
            }
        }
        other => return Err(corrupt(format!("unknown magic {other}"))),
    };
    Ok(Parsed::Header(header))
}

/// What the walk found at its position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A whole frame (its header; the body is in the file).
    Batch(Header),
    /// The file ends here.
    End,
    /// The file ends inside a frame: a batch being appended, or a file truncated under the walk.
    Partial,
}

/// Walks the frames of a segment from a frame boundary, reading headers through one small buffer. Once it has
/// returned a batch that ends at or past `upper`, the segment ends there for it: the bytes after are never parsed.
#[derive(Debug)]
pub(crate) struct Walker<'a> {
    seg: &'a Segment,
    upper: i64,
    reached_upper: bool,
    pos: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_at: u64,
    next_read: usize,
}

impl<'a> Walker<'a> {
    pub fn new(seg: &'a Segment, pos: u64, upper: i64) -> Self {
        Walker {
            seg,
            upper,
            reached_upper: false,
            pos,
            buf: Vec::new(),
            buf_at: 0,
            next_read: WALK_FIRST_READ,
        }
    }

    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The frame at the position, without moving past it.
    pub fn peek(&mut self) -> io::Result<Step> {
        if self.pos >= self.seg.len || self.reached_upper {
            return Ok(Step::End);
        }
        let mut refilled = false;
        loop {
            let have = self
                .pos
                .checked_sub(self.buf_at)
                .and_then(|rel| self.buf.get(rel as usize..))
                .unwrap_or_default();
            match parse_header(have, self.pos, &self.seg.path)? {
                Parsed::Header(h) if h.end() > self.seg.len => return Ok(Step::Partial),
                Parsed::Header(h) => return Ok(Step::Batch(h)),
                Parsed::Short { needed } => {
                    if refilled || self.pos + needed as u64 > self.seg.len {
                        return Ok(Step::Partial);
                    }
                    self.fill()?;
                    refilled = true;
                }
            }
        }
    }

    /// The frame at the position, moving past it.
    pub fn next_step(&mut self) -> io::Result<Step> {
        let step = self.peek()?;
        if let Step::Batch(h) = step {
            self.pos = h.end();
            self.reached_upper = h.next_offset() >= self.upper;
        }
        Ok(step)
    }

    fn fill(&mut self) -> io::Result<()> {
        let n = (self.seg.len - self.pos).min(self.next_read as u64) as usize;
        self.next_read = (self.next_read * 2).min(WALK_MAX_READ);
        self.buf.resize(n, 0);
        let got = read_at_most(&self.seg.file, &mut self.buf, self.pos)?;
        self.buf.truncate(got);
        self.buf_at = self.pos;
        Ok(())
    }
}

/// Read slot `i` of an index file of `N`-byte entries.
fn slot<const N: usize>(file: &File, i: u64) -> io::Result<Option<[u8; N]>> {
    let mut b = [0u8; N];
    let got = read_at_most(file, &mut b, i * N as u64)?;
    Ok((got == N).then_some(b))
}

/// An index file opened for lookups: its whole slots, at most [`MAX_INDEX_FILE_BYTES`] of them.
fn open_index(path: &Path, entry_size: usize) -> io::Result<Option<(File, u64)>> {
    let Some((file, len)) = open_regular(path)? else {
        return Ok(None);
    };
    Ok(Some((file, len.min(MAX_INDEX_FILE_BYTES) / entry_size as u64)))
}

/// Largest `i` in `[0, slots)` for which `pred` holds, `pred` holding on a prefix of the slots.
fn last_where(slots: u64, mut pred: impl FnMut(u64) -> io::Result<bool>) -> io::Result<Option<u64>> {
    let (mut lo, mut hi) = (0u64, slots);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid)? {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo.checked_sub(1))
}

/// The `.index` entry to start a walk for `target` from: the last entry at or below `target` whose offset is
/// below `upper` and whose position is inside the `.log`, as `(offset, position)`. Slots past the first with a
/// relative offset of 0 are the zero tail a running broker preallocates (offsets strictly increase), so they end
/// the entries, as do entries past `upper` or the end of the file (written before the batches they point to).
pub(crate) fn offset_index_floor(seg: &Segment, target: i64, upper: i64) -> io::Result<Option<(i64, u64)>> {
    let Some((file, slots)) = open_index(&seg.sibling(SegmentFileKind::Index), OFFSET_INDEX_ENTRY_SIZE)? else {
        return Ok(None);
    };
    let entry = |i: u64| -> io::Result<Option<(i64, u64)>> {
        let Some(b) = slot::<OFFSET_INDEX_ENTRY_SIZE>(&file, i)? else {
            return Ok(None);
        };
        let rel = i32_at(&b, 0);
        let position = i32_at(&b, 4);
        let offset = seg.base.saturating_add(i64::from(rel));
        let valid = (i == 0 || rel > 0) && rel >= 0 && position >= 0 && (position as u64) < seg.len && offset < upper;
        Ok(valid.then_some((offset, position as u64)))
    };
    let found = last_where(slots, |i| Ok(entry(i)?.is_some_and(|(offset, _)| offset <= target)))?;
    match found {
        Some(i) => entry(i),
        None => Ok(None),
    }
}

/// A `.timeindex` entry: the largest timestamp up to and including `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub timestamp: i64,
    pub offset: i64,
}

fn time_entry(file: &File, seg: &Segment, i: u64, upper: i64) -> io::Result<Option<TimeEntry>> {
    let Some(b) = slot::<TIME_INDEX_ENTRY_SIZE>(file, i)? else {
        return Ok(None);
    };
    let timestamp = i64_at(&b, 0);
    let rel = i32_at(&b, 8);
    let offset = seg.base.saturating_add(i64::from(rel));
    // Slot 0 all zero is a preallocated index without entries as often as an entry (0, base): taken as none,
    // which only makes the walk start at the segment's first batch.
    let valid = rel > 0 || (i == 0 && rel == 0 && timestamp != 0);
    Ok((valid && offset < upper).then_some(TimeEntry { timestamp, offset }))
}

/// The last `.timeindex` entry with a timestamp at or below `timestamp` and an offset below `upper`
/// (`TimeIndex.lookup`).
pub(crate) fn time_index_floor(seg: &Segment, timestamp: i64, upper: i64) -> io::Result<Option<TimeEntry>> {
    let Some((file, slots)) = open_index(&seg.sibling(SegmentFileKind::TimeIndex), TIME_INDEX_ENTRY_SIZE)? else {
        return Ok(None);
    };
    let found = last_where(slots, |i| {
        Ok(time_entry(&file, seg, i, upper)?.is_some_and(|e| e.timestamp <= timestamp))
    })?;
    match found {
        Some(i) => time_entry(&file, seg, i, upper),
        None => Ok(None),
    }
}

/// The last `.timeindex` entry with an offset below `upper`: the segment's largest timestamp up to it.
pub(crate) fn time_index_last(seg: &Segment, upper: i64) -> io::Result<Option<TimeEntry>> {
    let Some((file, slots)) = open_index(&seg.sibling(SegmentFileKind::TimeIndex), TIME_INDEX_ENTRY_SIZE)? else {
        return Ok(None);
    };
    match last_where(slots, |i| Ok(time_entry(&file, seg, i, upper)?.is_some()))? {
        Some(i) => time_entry(&file, seg, i, upper),
        None => Ok(None),
    }
}

/// A walker positioned for `target`: at the `.index` entry at or below it when the batch there is one the entry
/// can name (based at or below the entry's offset, in this segment), else at the segment's first batch.
pub(crate) fn walker_for(seg: &Segment, target: i64, upper: i64) -> io::Result<Walker<'_>> {
    if let Some((offset, position)) = offset_index_floor(seg, target, upper)? {
        let mut walker = Walker::new(seg, position, upper);
        if let Ok(Step::Batch(h)) = walker.peek() {
            if h.base_offset >= seg.base && h.base_offset <= offset {
                return Ok(walker);
            }
        }
    }
    Ok(Walker::new(seg, 0, upper))
}
