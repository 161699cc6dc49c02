//! Transactions: the aborted ones of a fetched range (from `.txnindex`) and the open ones (the last stable offset).

use std::io;
use std::path::Path;

use segment_format::batch::{BatchInfo, ControlType};
use segment_format::control::shallow_control_type;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_index::{AbortedTxn as IndexEntry, TxnIndex, TxnTracker, ABORTED_TXN_SIZE};

use super::walk::{open_regular, read_at_most, walker_for, Header, Segment, Step, Walker};
use super::{invalid, Listing};
use crate::replica::AbortedTxn;

/// `.txnindex` entries read at once (34 bytes each): the memory of a lookup besides its answer.
const TXN_ENTRIES_PER_READ: usize = 512;

/// Largest control batch read to learn its type (a COMMIT or ABORT marker is under 100 bytes).
const MAX_CONTROL_BATCH_BYTES: u64 = 64 * 1024;

/// The aborted transactions a `read_committed` fetch of `[from, upper)` must list, as Kafka's
/// `collectAbortedTransactions`: the `.txnindex` entries, from the segment holding `from` on, with a last offset at
/// or after `from` and a first offset below `upper`, in file order, through the later segments (an abort's marker
/// can be segments after its data) until an entry whose last stable offset is at or past `upper` (no later abort
/// can concern the range). `upper` is the offset after
/// the last batch fetched. A missing `.txnindex` means no abort in its segment, and a partial entry at its end (one
/// being appended) is ignored.
pub fn aborted_between(dir: &Path, from: i64, upper: i64) -> io::Result<Vec<AbortedTxn>> {
    let mut found = Vec::new();
    if from >= upper {
        return Ok(found);
    }
    let listing = Listing::of(dir)?;
    let first = listing.holding(from).unwrap_or(0);
    for &base in listing.segments.get(first..).unwrap_or_default() {
        let path = dir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
        if aborted_in_index(&path, from, upper, &mut found)? == Scan::Done {
            break;
        }
    }
    Ok(found)
}

/// Whether a later `.txnindex` can still concern the range [`aborted_in_index`] was asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// An entry's last stable offset reached the range's end: no later abort concerns it.
    Done,
    /// Later segments' indexes may still list aborts of the range.
    GoOn,
}

/// The entries of one `.txnindex` file that a `read_committed` fetch of `[from, upper)` must list (the rule of
/// [`aborted_between`]), appended to `found`. A missing file lists nothing.
pub fn aborted_in_index(path: &Path, from: i64, upper: i64, found: &mut Vec<AbortedTxn>) -> io::Result<Scan> {
    let Some((file, _)) = open_regular(path)? else {
        return Ok(Scan::GoOn);
    };
    let mut buf = vec![0u8; ABORTED_TXN_SIZE * TXN_ENTRIES_PER_READ];
    let mut at = 0u64;
    loop {
        let got = read_at_most(&file, &mut buf, at)?;
        let whole = got - got % ABORTED_TXN_SIZE;
        let entries = TxnIndex::parse(buf.get(..whole).unwrap_or_default()).entries;
        for e in &entries {
            if e.last_offset >= from && e.first_offset < upper {
                found.push(AbortedTxn {
                    producer_id: e.producer_id,
                    first_offset: e.first_offset,
                });
            }
            if e.last_stable_offset >= upper {
                return Ok(Scan::Done);
            }
        }
        if got < buf.len() {
            return Ok(Scan::GoOn);
        }
        at += got as u64;
    }
}

/// Feed `tracker` every batch of the file `<base>.log` in `dir`, from its first byte, below `upper`; the offset
/// after the last batch fed, `None` when none was. For a piece of a segment held on its own (the remote read
/// replica's chunks), walked in order by a caller that keeps the tracker between pieces.
pub fn track_file(tracker: &mut TxnTracker, dir: &Path, base: i64, upper: i64) -> io::Result<Option<i64>> {
    let Some(seg) = Segment::open(dir, base)? else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}: gone while it was being walked",
                dir.join(segment_file_name(base, SegmentFileKind::Log)).display()
            ),
        ));
    };
    let mut walker = Walker::new(&seg, 0, upper);
    let mut next = None;
    loop {
        match walker.next_step()? {
            Step::Batch(h) if h.last_offset >= upper => return Ok(next),
            Step::Batch(h) => {
                feed(tracker, &seg, &h)?;
                next = Some(h.next_offset());
            }
            Step::End => return Ok(next),
            Step::Partial => {
                return Err(invalid(format!(
                    "{}: a partial batch at byte {} of a piece that holds whole batches only",
                    seg.path.display(),
                    walker.position()
                )))
            }
        }
    }
}

/// Where the walk of [`OpenTransactions`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    /// The segment, by base offset and by file (a segment replaced under the same name is another file).
    base: i64,
    identity: (u64, u64),
    /// The byte after the last batch walked.
    position: u64,
    /// The header of the last batch walked in this segment, if any: a segment truncated and written again since
    /// has other bytes there.
    last: Option<Header>,
}

/// Follows the open transactions of a partition to give its last stable offset, incrementally: each
/// [`OpenTransactions::advance`] walks the batch headers from where the previous one stopped up to the new bound,
/// feeding a [`TxnTracker`] (as `ProducerStateManager` does on the broker), so following a growing partition
/// costs its new batches only. Memory is one map entry per open transaction.
///
/// It starts from the newest producer snapshot at or below the first bound that still lies in the held segments
/// (`<offset>.snapshot`, the producer state before `offset`, with its open transactions), else from the first
/// segment with nothing open (a transaction whose first batches retention already deleted, with no snapshot to
/// carry it, is then missed: Kafka's snapshots exist to carry it). It starts again that way whenever the files no
/// longer continue where it stopped: the bound went below it, the segment it was in was replaced or shrank, or
/// retention deleted past it.
#[derive(Debug, Default)]
pub struct OpenTransactions {
    tracker: TxnTracker,
    /// The offset after the last batch walked; `None` before the first walk.
    next_offset: Option<i64>,
    cursor: Option<Cursor>,
}

impl OpenTransactions {
    /// A tracker that has walked nothing yet: the first [`OpenTransactions::advance`] picks where to start.
    pub fn new() -> Self {
        Self::default()
    }

    /// Walk `dir` up to `upper` (exclusive, a batch boundary: the high watermark) and return the last stable
    /// offset: the first offset of the oldest transaction still open below `upper`, or `upper` when none is (as
    /// Kafka, never below the first segment's base offset). Never reads a batch at or past `upper`.
    pub fn advance(&mut self, dir: &Path, upper: i64) -> io::Result<i64> {
        let listing = Listing::of(dir)?;
        let Some(&log_start) = listing.segments.first() else {
            self.restart(None, TxnTracker::new());
            return Ok(upper);
        };
        let stale = match self.next_offset {
            None => true,
            Some(next) => next > upper || next < log_start || !self.cursor_still_valid(dir, &listing)?,
        };
        if stale {
            self.start(dir, &listing, upper)?;
        }
        self.walk(dir, &listing, upper)?;
        let lso = self
            .tracker
            .first_unstable_offset()
            .map_or(upper, |first| first.min(upper));
        Ok(lso.max(log_start.min(upper)))
    }

    /// The first offset of the oldest transaction open at the bound of the last [`OpenTransactions::advance`]
    /// (which may be below the log start, where the last stable offset stops), if any.
    pub fn first_open(&self) -> Option<i64> {
        self.tracker.first_unstable_offset()
    }

    fn restart(&mut self, next_offset: Option<i64>, tracker: TxnTracker) {
        self.tracker = tracker;
        self.next_offset = next_offset;
        self.cursor = None;
    }

    /// Whether the segment the cursor is in is still the file it walked, at least as long as where it stopped.
    fn cursor_still_valid(&self, dir: &Path, listing: &Listing) -> io::Result<bool> {
        let Some(cursor) = self.cursor else {
            return Ok(true);
        };
        if listing.segments.binary_search(&cursor.base).is_err() {
            // Deleted by retention: the walk goes on in the next segment, if it starts where this one stopped.
            return Ok(true);
        }
        let Some(seg) = Segment::open(dir, cursor.base)? else {
            return Ok(true);
        };
        if seg.identity()? != cursor.identity || seg.len < cursor.position {
            return Ok(false);
        }
        let Some(last) = cursor.last else {
            return Ok(true);
        };
        match Walker::new(&seg, last.position, i64::MAX).peek() {
            Ok(step) => Ok(step == Step::Batch(last)),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Start from the newest usable snapshot, else from the first segment.
    fn start(&mut self, dir: &Path, listing: &Listing, upper: i64) -> io::Result<()> {
        let log_start = listing.segments.first().copied().unwrap_or(0);
        for &offset in listing.snapshots.iter().rev() {
            if offset > upper || offset < log_start {
                continue;
            }
            let path = dir.join(segment_file_name(offset, SegmentFileKind::Snapshot));
            match ProducerSnapshot::read(&path) {
                Ok(snapshot) => {
                    self.restart(Some(offset), TxnTracker::from_snapshot(&snapshot));
                    return Ok(());
                }
                // Deleted meanwhile, being written (a broker writes them in place) or damaged: an older one, or
                // the walk from the first segment, gives the same state.
                Err(_) => continue,
            }
        }
        self.restart(Some(log_start), TxnTracker::new());
        Ok(())
    }

    /// Feed the tracker every batch from where it stopped up to `upper`. A file that changes under the walk ends
    /// it; the next [`OpenTransactions::advance`] sees the change and starts again.
    fn walk(&mut self, dir: &Path, listing: &Listing, upper: i64) -> io::Result<()> {
        loop {
            let Some(next) = self.next_offset else {
                return Ok(());
            };
            if next >= upper {
                return Ok(());
            }
            let Some((seg, position)) = self.resume_point(dir, listing, next, upper)? else {
                return Ok(());
            };
            let identity = seg.identity()?;
            let mut walker = Walker::new(&seg, position, upper);
            let mut last = self.cursor.filter(|c| c.base == seg.base).and_then(|c| c.last);
            let segment_done = loop {
                // The batch after one ending at `upper` is not looked at.
                if self.next_offset.is_some_and(|next| next >= upper) {
                    break false;
                }
                match walker.next_step()? {
                    Step::Batch(h) if h.last_offset >= upper => break false,
                    Step::Batch(h) => {
                        self.on_batch(&seg, &h)?;
                        self.next_offset = Some(h.next_offset());
                        last = Some(h);
                    }
                    Step::End => break true,
                    Step::Partial => break false,
                }
            };
            self.cursor = Some(Cursor {
                base: seg.base,
                identity,
                position: walker.position(),
                last,
            });
            if !segment_done {
                return Ok(());
            }
            // The next segment continues the walk from its start.
            let Some(&next_base) = listing.segments.iter().find(|&&b| b > seg.base) else {
                return Ok(());
            };
            let Some(next_seg) = Segment::open(dir, next_base)? else {
                return Ok(());
            };
            self.cursor = Some(Cursor {
                base: next_base,
                identity: next_seg.identity()?,
                position: 0,
                last: None,
            });
        }
    }

    /// The segment to go on in and the position there: the cursor's when its file is still there, else the first
    /// batch at or after `next` in the segment holding it. `None` when the files changed under the walk.
    fn resume_point(&self, dir: &Path, listing: &Listing, next: i64, upper: i64) -> io::Result<Option<(Segment, u64)>> {
        if let Some(c) = self.cursor {
            if let Some(seg) = Segment::open(dir, c.base)? {
                return Ok((seg.identity()? == c.identity && seg.len >= c.position).then_some((seg, c.position)));
            }
        }
        let Some(base) = listing.holding(next).and_then(|i| listing.segments.get(i).copied()) else {
            return Ok(None);
        };
        let Some(seg) = Segment::open(dir, base)? else {
            return Ok(None);
        };
        let mut walker = walker_for(&seg, next, upper)?;
        let position = loop {
            match walker.peek()? {
                Step::Batch(h) if h.last_offset < next => {
                    walker.next_step()?;
                }
                _ => break walker.position(),
            }
        };
        Ok(Some((seg, position)))
    }

    fn on_batch(&mut self, seg: &Segment, h: &Header) -> io::Result<()> {
        feed(&mut self.tracker, seg, h)
    }
}

/// Feed one batch's header to `tracker` (a control batch's type read from its bytes).
fn feed(tracker: &mut TxnTracker, seg: &Segment, h: &Header) -> io::Result<()> {
    if h.magic < 2 || h.producer_id < 0 {
        return Ok(());
    }
    let control = if h.is_control() { control_type(seg, h)? } else { None };
    let info = BatchInfo {
        position: h.position,
        size: h.size,
        magic: h.magic,
        base_offset: h.base_offset,
        last_offset: h.last_offset,
        max_timestamp: h.max_timestamp,
        partition_leader_epoch: h.leader_epoch,
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        is_transactional: h.is_transactional(),
        control,
        is_control: h.is_control(),
        records_count: 0,
    };
    let _: Option<IndexEntry> = tracker.on_batch(&info);
    Ok(())
}

/// The type of a control batch (COMMIT, ABORT, ...), `None` when it cannot be decoded.
fn control_type(seg: &Segment, h: &Header) -> io::Result<Option<ControlType>> {
    let Some(bytes) = seg.frame(h, MAX_CONTROL_BATCH_BYTES)? else {
        return Ok(None);
    };
    Ok(segment_format::batch::parse_header(&bytes)
        .ok()
        .and_then(|header| shallow_control_type(&bytes, &header)))
}
