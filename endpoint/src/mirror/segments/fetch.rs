//! Whole record batches from an offset, as a Fetch returns them.
//!
//! Like Kafka's `LogSegment.read`: the segment holding the offset is found by base offset, its `.index` gives a
//! position at or before the offset, and the walk moves over batch headers to the first batch whose last offset is
//! at or after it (so an offset inside a batch returns that whole batch, and an offset in a compaction gap the next
//! one). From there the bytes are read in one `pread` into the caller's buffer and cut after the last whole batch
//! that ends at or below `upper` and fits in `max_bytes`. Unlike Kafka, which answers from one segment per fetch,
//! the read continues into the next segments while bytes remain, so a consumer catching up gets full responses.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::walk::{parse_header, read_at_most, walker_for, Header, Parsed, Segment, Step, Walker};
use super::{invalid, Listing};
use crate::replica::FileSpan;

/// Largest batch returned (256 MiB, `segment_format::log::MAX_FRAME_BYTES`): the first batch is returned whole
/// even when larger than `max_bytes` (as Kafka does, so a consumer can always progress), and this bounds what one
/// length field can make a read allocate. Kafka's `message.max.bytes` is 1 MiB by default.
pub const MAX_BATCH_BYTES: u64 = segment_format::log::MAX_FRAME_BYTES;

/// What [`read_batches`] appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fetched {
    /// Bytes appended to the buffer.
    pub bytes: usize,
    /// Batches appended.
    pub batches: usize,
    /// The offset after the last batch appended (`None` when none was): the upper bound of the range for
    /// [`super::aborted_between`].
    pub next_offset: Option<i64>,
}

/// Where the walk for the first batch ended.
enum Located {
    /// The first batch at or after the target.
    Found(Header),
    /// No batch of the segment ends at or after the target.
    SegmentEnd,
    /// The next batch reaches `upper`: nothing more may be read.
    Upper,
}

/// The first batch of `seg` whose last offset is at or after `target`.
fn locate(seg: &Segment, target: i64, upper: i64) -> io::Result<Located> {
    let mut walker = walker_for(seg, target, upper)?;
    loop {
        match walker.next_step()? {
            Step::Batch(h) if h.last_offset >= upper => return Ok(Located::Upper),
            Step::Batch(h) if h.last_offset >= target => return Ok(Located::Found(h)),
            Step::Batch(_) => {}
            Step::End | Step::Partial => return Ok(Located::SegmentEnd),
        }
    }
}

/// Append to `out` the record batches from the one holding `offset` (the first whose last offset is at or after
/// it), byte for byte as on disk, across segments, stopping before the first batch whose last offset is at or past
/// `upper` and before the batch that would take the bytes appended past `max_bytes`. The first batch is appended
/// even when it alone is larger than `max_bytes` (up to [`MAX_BATCH_BYTES`]). Nothing is appended when `offset` is
/// at or past `upper`.
///
/// An offset below the first segment (deleted by retention) is a `NotFound` error, which the caller answers as
/// out of range. A batch that does not frame is an `InvalidData` error if it is the first, else the read stops
/// before it (the next read reports it).
pub fn read_batches(dir: &Path, offset: i64, upper: i64, max_bytes: usize, out: &mut Vec<u8>) -> io::Result<Fetched> {
    each_segment(dir, offset, upper, |seg, first, fetched| {
        read_segment(&seg, first, upper, max_bytes, out, fetched)
    })
}

/// The walk [`read_batches`] and [`span_batches`] share: from the segment holding `offset`, each segment's first
/// batch at or after the offset reached so far, handed to `take` with the segment, until `take` stops, `upper` is
/// reached or the segments end.
fn each_segment(
    dir: &Path,
    offset: i64,
    upper: i64,
    mut take: impl FnMut(Segment, Header, &mut Fetched) -> io::Result<Cut>,
) -> io::Result<Fetched> {
    let mut fetched = Fetched::default();
    if offset >= upper {
        return Ok(fetched);
    }
    let listing = Listing::of(dir)?;
    let Some(holding) = listing.holding(offset) else {
        return Err(not_held(dir, offset, &listing));
    };
    let mut i = holding;
    let mut target = offset;
    while let Some(&base) = listing.segments.get(i) {
        if base >= upper {
            break;
        }
        let Some(seg) = Segment::open(dir, base)? else {
            if i == holding {
                // Deleted by retention since the listing: the offset is below the log start now.
                return Err(not_held(dir, offset, &listing));
            }
            break;
        };
        let first = match locate(&seg, target, upper)? {
            Located::Found(h) => h,
            Located::Upper => break,
            Located::SegmentEnd => {
                i += 1;
                continue;
            }
        };
        match take(seg, first, &mut fetched)? {
            Cut::Stop => break,
            Cut::SegmentEnd => {
                target = fetched.next_offset.unwrap_or(target);
                i += 1;
            }
        }
    }
    Ok(fetched)
}

/// Why a segment's read ended.
enum Cut {
    /// Nothing more may be read: `upper`, `max_bytes` or a partial or bad frame.
    Stop,
    /// Every batch of the segment from the first was read: the next segment follows.
    SegmentEnd,
}

/// Read the batches of `seg` from `first` into `out` (see [`read_batches`]).
fn read_segment(
    seg: &Segment,
    first: Header,
    upper: i64,
    max_bytes: usize,
    out: &mut Vec<u8>,
    fetched: &mut Fetched,
) -> io::Result<Cut> {
    let is_first = fetched.batches == 0;
    if is_first && first.size > MAX_BATCH_BYTES {
        return Err(invalid(format!(
            "{}: byte {}: a batch of {} bytes, larger than the {MAX_BATCH_BYTES} bytes a read returns",
            seg.path.display(),
            first.position,
            first.size
        )));
    }
    let budget = max_bytes.saturating_sub(fetched.bytes) as u64;
    let rest = seg.len - first.position;
    let want = if is_first { budget.max(first.size) } else { budget }.min(rest);
    if want < first.size {
        return Ok(Cut::Stop);
    }
    let start = out.len();
    out.resize(start + want as usize, 0);
    let got = match out.get_mut(start..) {
        Some(buf) => read_at_most(&seg.file, buf, first.position),
        None => Ok(0),
    };
    let got = match got {
        Ok(n) => n,
        Err(e) => {
            out.truncate(start);
            return Err(e);
        }
    };
    let read_all = got as u64 == rest;
    let mut kept = 0usize;
    let mut cut = Cut::Stop;
    let mut bad = None;
    loop {
        // The batch after one ending at `upper` is not looked at.
        if fetched.next_offset.is_some_and(|next| next >= upper) {
            break;
        }
        let Some(rest_bytes) = out.get(start + kept..start + got) else {
            break;
        };
        if rest_bytes.is_empty() {
            if read_all {
                cut = Cut::SegmentEnd;
            }
            break;
        }
        let position = first.position + kept as u64;
        let h = match parse_header(rest_bytes, position, &seg.path) {
            Ok(Parsed::Header(h)) => h,
            Ok(Parsed::Short { .. }) => break,
            Err(e) => {
                bad = Some(e);
                break;
            }
        };
        if h.last_offset >= upper || (rest_bytes.len() as u64) < h.size {
            break;
        }
        if let Some(prev) = fetched.next_offset {
            if h.last_offset < prev {
                bad = Some(invalid(format!(
                    "{}: byte {position}: offsets go back from {prev} to {}",
                    seg.path.display(),
                    h.base_offset
                )));
                break;
            }
        }
        kept += h.size as usize;
        fetched.bytes += h.size as usize;
        fetched.batches += 1;
        fetched.next_offset = Some(h.next_offset());
    }
    out.truncate(start + kept);
    match bad {
        Some(e) if fetched.batches == 0 => Err(e),
        _ => Ok(cut),
    }
}

fn not_held(dir: &Path, offset: i64, listing: &Listing) -> io::Error {
    let first = listing.segments.first().map_or_else(
        || "no segments".to_string(),
        |b| format!("the first segment starts at {b}"),
    );
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: offset {offset} is not held: {first}", dir.display()),
    )
}

/// The byte ranges [`read_batches`] would return, without reading them: the open `.log` files and where in them,
/// for a response the socket takes straight from the files (`sendfile`). Only the batch headers are read (the
/// walk reads through one small buffer). Same bounds, same errors.
pub fn span_batches(dir: &Path, offset: i64, upper: i64, max_bytes: usize) -> io::Result<(Vec<FileSpan>, Fetched)> {
    let mut spans = Vec::new();
    let fetched = each_segment(dir, offset, upper, |seg, first, fetched| {
        let ((position, len), cut) = span_segment(&seg, first, upper, max_bytes, fetched)?;
        if len > 0 {
            spans.push(FileSpan {
                file: Arc::new(seg.file),
                position,
                len,
            });
        }
        Ok(cut)
    })?;
    Ok((spans, fetched))
}

/// The whole batches of `seg` from `first` that [`read_segment`] would keep: (position, length) and why it ended.
fn span_segment(
    seg: &Segment,
    first: Header,
    upper: i64,
    max_bytes: usize,
    fetched: &mut Fetched,
) -> io::Result<((u64, u64), Cut)> {
    let is_first = fetched.batches == 0;
    if is_first && first.size > MAX_BATCH_BYTES {
        return Err(invalid(format!(
            "{}: byte {}: a batch of {} bytes, larger than the {MAX_BATCH_BYTES} bytes a read returns",
            seg.path.display(),
            first.position,
            first.size
        )));
    }
    let mut walker = Walker::new(seg, first.position, upper);
    let mut kept = 0u64;
    let mut bad = None;
    let cut = loop {
        if fetched.next_offset.is_some_and(|next| next >= upper) {
            break Cut::Stop;
        }
        let h = match walker.next_step() {
            Ok(Step::Batch(h)) => h,
            Ok(Step::End) => break Cut::SegmentEnd,
            Ok(Step::Partial) => break Cut::Stop,
            Err(e) => {
                bad = Some(e);
                break Cut::Stop;
            }
        };
        if h.last_offset >= upper {
            break Cut::Stop;
        }
        let budget = max_bytes.saturating_sub(fetched.bytes) as u64;
        let first_of_response = fetched.batches == 0;
        if h.size > budget && !first_of_response {
            break Cut::Stop;
        }
        if let Some(prev) = fetched.next_offset {
            if h.last_offset < prev {
                bad = Some(invalid(format!(
                    "{}: byte {}: offsets go back from {prev} to {}",
                    seg.path.display(),
                    h.position,
                    h.base_offset
                )));
                break Cut::Stop;
            }
        }
        kept += h.size;
        fetched.bytes += h.size as usize;
        fetched.batches += 1;
        fetched.next_offset = Some(h.next_offset());
    };
    match bad {
        Some(e) if fetched.batches == 0 => Err(e),
        _ => Ok(((first.position, kept), cut)),
    }
}
