//! The CRC pipeline behind [`LogFile::scan`](super::LogFile::scan).
//!
//! Computing CRCs is nearly all of a shallow scan's CPU time: the framing walk
//! and the checks that run beside the scan are a few percent. On a warm page
//! cache one core computing CRC-32C over a mapped segment is slower than `cat`
//! copying it, so the CRC work is shared with one helper thread, while the
//! checks stay sequential (they carry state from batch to batch).
//!
//! This buys wall time with CPU time. Frame headers read in a pass of their own
//! (instead of right after the previous frame's CRC has streamed through the
//! cache) cost a cache and TLB miss each, and releasing pages of a process with
//! two running threads costs TLB shoot-downs: about a third more CPU for about
//! 1.5 times the throughput (`docs/BENCHMARKS.md`). So [`LogFile::scan`] only
//! uses it for large files when a second CPU is available.
//!
//! [`LogFile::scan`]: super::LogFile::scan
//!
//! A scan runs in *windows* of whole frames, up to [`WINDOW_BYTES`]: the scanning
//! thread walks a window's frame headers (cheap), both threads compute the
//! window's CRCs, and only then are its frames handed, in file order, to the
//! caller. The next window is walked and handed to the helper before this
//! thread joins the work on the current one, so while the caller checks window
//! `n` the helper already computes window `n + 1`.
//!
//! Work is *claimed*, not assigned: a window is cut into pieces of about
//! [`PIECE_BYTES`] and each thread takes the next unclaimed piece from an atomic
//! counter. The scanning thread never sleeps on the helper, which matters on a
//! loaded machine: a helper the scheduler has not run yet claims nothing, and a
//! piece it holds for longer than a piece's work takes is computed again by the
//! scanning thread (CRCs are pure, so both store the same values). A magic-2 batch
//! larger than [`FRAGMENT_BYTES`] is cut into fragments whose CRCs are combined,
//! so one huge batch is shared too.
//!
//! Memory stays bounded whatever the segment size: a window holds the metadata
//! of at most [`WINDOW_FRAMES`] frames, and the caller releases the pages of
//! each window once it has been checked and no thread reads it any more. That
//! is usually two windows mapped (the one being checked and the next); a late
//! helper can hold up [`MAX_CHECKED_UNRELEASED`] more before the scan waits for
//! it.

use std::collections::VecDeque;
use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use super::{compute_crc, frame_at, Frame, Framed, ScanSummary, RELEASE_INTERVAL};
use crate::batch::ATTRIBUTES_OFFSET;
use crate::error::ParseError;

/// Most frame bytes in one window (a larger frame makes a window of its own):
/// the scan's release interval. Every window costs a hand-off to the helper (a
/// wake-up, a few microseconds); 8 MiB is about a millisecond of CRC work on
/// two cores.
const WINDOW_BYTES: usize = RELEASE_INTERVAL as usize;

/// Most frames in one window, bounding the per-window metadata (about 150 bytes
/// a frame) when batches are tiny.
const WINDOW_FRAMES: usize = 4096;

/// Bytes of CRC work claimed at once (about 15 µs of work): large enough that
/// claiming (an atomic shared by two cores) costs nothing next to the work,
/// small enough that the scanning thread waits little for the helper's last
/// piece at the end of a window, or loses little computing it again.
const PIECE_BYTES: usize = 128 * 1024;

/// How long the scanning thread waits for a piece the helper holds before it
/// computes the piece itself: about a piece's work, so a running helper
/// finishes in time and a descheduled one costs little.
const HELPER_GRACE: Duration = Duration::from_micros(20);

/// Magic-2 batches larger than this are cut into fragments of this size. A
/// combination of two CRCs costs about as much as computing a few KiB of CRC,
/// so fragments are large.
const FRAGMENT_BYTES: usize = 1024 * 1024;

/// Checked windows whose pages may stay mapped while a late helper still reads
/// them; beyond this, the scan waits for the helper.
const MAX_CHECKED_UNRELEASED: usize = 1;

/// How often a scan waiting for a late helper looks again. Such waits are rare
/// (the helper is a whole window late) and cost a sleeping thread nothing.
const QUIET_POLL: Duration = Duration::from_micros(100);

/// One unit of CRC work.
#[derive(Debug, Clone, Copy)]
enum Unit<'m> {
    /// A whole frame, with its magic's CRC.
    Frame { magic: i8, bytes: &'m [u8] },
    /// Part of the CRC-covered bytes of a large magic-2 batch (CRC-32C).
    Fragment(&'m [u8]),
}

impl Unit<'_> {
    fn crc(&self) -> u32 {
        match *self {
            Unit::Frame { magic, bytes } => compute_crc(magic, bytes),
            Unit::Fragment(bytes) => crc32c::crc32c(bytes),
        }
    }

    fn len(&self) -> usize {
        match *self {
            Unit::Frame { bytes, .. } | Unit::Fragment(bytes) => bytes.len(),
        }
    }
}

/// How windows are cut: the constants above, smaller in tests so that small
/// inputs cross every boundary.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub window_bytes: usize,
    pub window_frames: usize,
    pub piece_bytes: usize,
    pub fragment_bytes: usize,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        window_bytes: WINDOW_BYTES,
        window_frames: WINDOW_FRAMES,
        piece_bytes: PIECE_BYTES,
        fragment_bytes: FRAGMENT_BYTES,
    };
}

/// A frame of a window and the units that make up its CRC.
#[derive(Debug, Clone)]
struct Pending<'m> {
    framed: Framed<'m>,
    units: Range<usize>,
}

/// A run of whole frames whose CRCs are computed together.
#[derive(Debug)]
struct Window<'m> {
    frames: Vec<Pending<'m>>,
    units: Vec<Unit<'m>>,
    /// The CRC of each unit, written by whichever thread computed it.
    crcs: Vec<AtomicU32>,
    /// Runs of units claimed as one.
    pieces: Vec<Range<usize>>,
    /// Index of the next unclaimed piece.
    next_piece: AtomicUsize,
    /// Whether each piece's CRCs are stored.
    done: Vec<AtomicBool>,
    /// Threads between a claim and the end of its computation: while it is
    /// not 0, the window's bytes are being read and must not be released.
    readers: AtomicUsize,
}

/// Where the frame walk of a window stopped.
struct WalkEnd {
    /// Position after the window's last frame, relative to the scanned bytes.
    end: usize,
    /// The framing error or partial frame that stopped the scan, if any.
    stop: Option<ParseError>,
}

impl<'m> Window<'m> {
    /// Walk the frames of `bytes` from `start`, up to a window's worth.
    fn walk(bytes: &'m [u8], start: usize, base: u64, limits: Limits) -> (Window<'m>, WalkEnd) {
        let mut builder = Builder::new(limits);
        let mut end = start;
        let mut stop = None;
        let mut window_bytes = 0;
        // A window holds at least one frame, however small the limits.
        while builder.frames.is_empty()
            || builder.frames.len() < limits.window_frames && window_bytes < limits.window_bytes
        {
            let rest = bytes.get(end..).unwrap_or_default();
            if rest.is_empty() {
                break;
            }
            match frame_at(rest, base + end as u64) {
                Ok(framed) => {
                    end += framed.bytes.len();
                    window_bytes += framed.bytes.len();
                    builder.push(framed);
                }
                Err(e) => {
                    stop = Some(e);
                    break;
                }
            }
        }
        (builder.finish(), WalkEnd { end, stop })
    }

    /// Claim and compute pieces until none is left unclaimed.
    fn work(&self) {
        loop {
            // Counted before the claim: once every piece is claimed, a reader
            // that is not counted yet can claim nothing (see `is_quiet`).
            self.readers.fetch_add(1, Ordering::SeqCst);
            let i = self.next_piece.fetch_add(1, Ordering::SeqCst);
            if i < self.pieces.len() {
                self.compute(i);
            }
            self.readers.fetch_sub(1, Ordering::SeqCst);
            if i >= self.pieces.len() {
                return;
            }
        }
    }

    fn compute(&self, piece: usize) {
        let (Some(units), Some(done)) = (self.pieces.get(piece), self.done.get(piece)) else {
            return;
        };
        for u in units.clone() {
            if let (Some(unit), Some(slot)) = (self.units.get(u), self.crcs.get(u)) {
                slot.store(unit.crc(), Ordering::Relaxed);
            }
        }
        // Release: whoever sees the flag sees the CRCs stored above.
        done.store(true, Ordering::Release);
    }

    /// Compute the window's CRCs with the helper and return once all are
    /// stored. Only the scanning thread calls it.
    ///
    /// It never sleeps on the helper: a piece the helper still holds after
    /// [`HELPER_GRACE`] is computed here as well. On a loaded machine the helper
    /// may lose its core for a whole time slice, and the scanning thread, once
    /// asleep, could wait as long again to be woken. Both threads then store the
    /// same values, so it does not matter which one finishes first.
    fn finish(&self) {
        self.work();
        for (i, done) in self.done.iter().enumerate() {
            let since = Instant::now();
            while !done.load(Ordering::Acquire) {
                if since.elapsed() >= HELPER_GRACE {
                    self.compute(i);
                    break;
                }
                std::hint::spin_loop();
            }
        }
    }

    /// Leave the unclaimed pieces uncomputed: the scan stopped early.
    fn cancel(&self) {
        self.next_piece.fetch_max(self.pieces.len(), Ordering::SeqCst);
    }

    /// No thread reads the window's bytes, nor will: its pages may be released.
    /// Only after [`Window::finish`], which leaves no piece to claim.
    fn is_quiet(&self) -> bool {
        self.readers.load(Ordering::SeqCst) == 0
    }

    /// Wait until [`Window::is_quiet`]: the helper is still computing a piece
    /// this thread has already computed again. It may have lost its core, or
    /// wait for the disk on a cold page cache, so this sleeps rather than spins.
    fn wait_quiet(&self) {
        while !self.is_quiet() {
            thread::sleep(QUIET_POLL);
        }
    }

    /// The frames, with their computed CRCs. Only after [`Window::finish`].
    fn frames(&self) -> impl Iterator<Item = Frame<'m>> + '_ {
        self.frames.iter().map(|p| Frame {
            info: p.framed.info,
            bytes: p.framed.bytes,
            stored_crc: p.framed.stored_crc,
            computed_crc: self.crc_of(p.units.clone()),
        })
    }

    /// The CRC of a frame from those of its units (fragments are combined).
    fn crc_of(&self, units: Range<usize>) -> u32 {
        let mut parts =
            units.filter_map(|u| Some((self.crcs.get(u)?.load(Ordering::Relaxed), self.units.get(u)?.len())));
        let first = parts.next().map_or(0, |(crc, _)| crc);
        parts.fold(first, |crc, (next, len)| crc32c::crc32c_combine(crc, next, len))
    }
}

/// Collects a window's frames, cutting them into units and pieces.
struct Builder<'m> {
    limits: Limits,
    frames: Vec<Pending<'m>>,
    units: Vec<Unit<'m>>,
    pieces: Vec<Range<usize>>,
    /// First unit of the piece being filled, and its bytes so far.
    piece_start: usize,
    piece_bytes: usize,
}

impl<'m> Builder<'m> {
    fn new(limits: Limits) -> Self {
        Builder {
            limits,
            frames: Vec::new(),
            units: Vec::new(),
            pieces: Vec::new(),
            piece_start: 0,
            piece_bytes: 0,
        }
    }

    fn push(&mut self, framed: Framed<'m>) {
        let first = self.units.len();
        let covered = framed.bytes.get(ATTRIBUTES_OFFSET..).unwrap_or_default();
        let fragment_bytes = self.limits.fragment_bytes.max(1);
        if framed.info.magic >= 2 && covered.len() > fragment_bytes {
            for fragment in covered.chunks(fragment_bytes) {
                self.push_unit(Unit::Fragment(fragment));
            }
        } else {
            self.push_unit(Unit::Frame {
                magic: framed.info.magic,
                bytes: framed.bytes,
            });
        }
        self.frames.push(Pending {
            framed,
            units: first..self.units.len(),
        });
    }

    fn push_unit(&mut self, unit: Unit<'m>) {
        self.piece_bytes += unit.len();
        self.units.push(unit);
        if self.piece_bytes >= self.limits.piece_bytes {
            self.close_piece();
        }
    }

    fn close_piece(&mut self) {
        if self.piece_start < self.units.len() {
            self.pieces.push(self.piece_start..self.units.len());
        }
        self.piece_start = self.units.len();
        self.piece_bytes = 0;
    }

    fn finish(mut self) -> Window<'m> {
        self.close_piece();
        Window {
            crcs: self.units.iter().map(|_| AtomicU32::new(0)).collect(),
            done: self.pieces.iter().map(|_| AtomicBool::new(false)).collect(),
            frames: self.frames,
            units: self.units,
            pieces: self.pieces,
            next_piece: AtomicUsize::new(0),
            readers: AtomicUsize::new(0),
        }
    }
}

/// Scan the frames of `bytes`, whose first byte sits at file position `base`,
/// calling `f` for each in order, and `window_done` with the absolute position
/// up to which every frame has been handed to `f` and no thread reads the bytes
/// any more: the caller may release those pages. `window_done` is called for
/// every window, in order; for the last ones after the helper has stopped.
/// With `helper`, one more thread shares the CRC work (the scan is sequential
/// if it cannot be started). Returns the summary and the framing error or
/// partial frame that stopped the scan.
pub(super) fn scan<'m, F, D>(
    bytes: &'m [u8],
    base: u64,
    helper: bool,
    limits: Limits,
    mut f: F,
    mut window_done: D,
) -> (ScanSummary, Option<ParseError>)
where
    F: FnMut(&Frame<'_>) -> ControlFlow<()>,
    D: FnMut(u64),
{
    // Windows not released when the scan ends are released after the scope has
    // joined the helper, when no thread reads them any more.
    let (summary, stop, unreleased) = thread::scope(|scope| {
        let helper = helper.then(|| spawn_helper(scope)).flatten();
        let post = |window: Window<'m>| -> Arc<Window<'m>> {
            let window = Arc::new(window);
            if let Some(tx) = &helper {
                // A helper that is gone leaves the work to this thread.
                let _ = tx.send(Arc::clone(&window));
            }
            window
        };
        let mut summary = ScanSummary::default();
        // Windows checked but perhaps still read by a late helper, oldest first.
        let mut checked: VecDeque<(Arc<Window<'m>>, usize)> = VecDeque::new();
        let (window, mut walked) = Window::walk(bytes, 0, base, limits);
        let mut current = post(window);
        loop {
            // Walk the next window while the helper computes this one, so that
            // it has the next one to compute while this thread checks this one.
            let next = (walked.stop.is_none() && walked.end < bytes.len()).then(|| {
                let (window, next_walked) = Window::walk(bytes, walked.end, base, limits);
                (post(window), next_walked)
            });
            current.finish();
            for frame in current.frames() {
                summary.frames += 1;
                if !frame.crc_matches() {
                    summary.crc_mismatches += 1;
                }
                if f(&frame).is_break() {
                    if let Some((next, _)) = &next {
                        next.cancel();
                    }
                    summary.stopped_early = true;
                    summary.end = frame.info.position + frame.info.size;
                    return (summary, None, checked);
                }
            }
            // Release the checked windows no thread reads any more, in order. A
            // helper that lags further is waited for: at most three windows are
            // mapped, a checked one, the one being checked and the next.
            checked.push_back((Arc::clone(&current), walked.end));
            while let Some((window, end)) = checked.front() {
                if !window.is_quiet() {
                    if checked.len() <= MAX_CHECKED_UNRELEASED {
                        break;
                    }
                    window.wait_quiet();
                }
                window_done(base + *end as u64);
                checked.pop_front();
            }
            match next {
                Some((next, next_walked)) => {
                    current = next;
                    walked = next_walked;
                }
                None => {
                    summary.end = base + walked.end as u64;
                    return (summary, walked.stop, checked);
                }
            }
        }
    });
    for (_, end) in unreleased {
        window_done(base + end as u64);
    }
    (summary, stop)
}

/// Start the helper thread; `None` if the system refuses a thread.
fn spawn_helper<'scope, 'm: 'scope>(scope: &'scope thread::Scope<'scope, '_>) -> Option<mpsc::Sender<Arc<Window<'m>>>> {
    let (tx, rx) = mpsc::channel::<Arc<Window<'m>>>();
    thread::Builder::new()
        .name("segmirror-crc".into())
        .spawn_scoped(scope, move || {
            // Ends when the scan drops the sender (also when it unwinds).
            while let Ok(window) = rx.recv() {
                window.work();
            }
        })
        .ok()?;
    Some(tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{seal_crc, Compression, ControlType, TimestampType};
    use crate::control::{end_txn_marker_batch, EndTxnMarker};
    use crate::legacy::encode_message;
    use crate::log::scan_frames;
    use crate::record::{BatchBuilder, RecordSpec};
    use proptest::prelude::*;

    /// What a scan reports: every frame with both CRCs, the end, the stop.
    type Outcome<'a> = (Vec<(BatchInfo, u32, u32)>, u64, Option<ParseError>);

    use crate::batch::BatchInfo;

    fn sequential(bytes: &[u8], base: u64) -> Outcome<'_> {
        let mut it = scan_frames(bytes, base);
        let mut frames = vec![];
        let mut stop = None;
        for item in it.by_ref() {
            match item {
                Ok(f) => frames.push((f.info, f.stored_crc, f.computed_crc)),
                Err(e) => stop = Some(e),
            }
        }
        (frames, it.next_position(), stop)
    }

    fn windowed(bytes: &[u8], base: u64, helper: bool, limits: Limits) -> (Outcome<'_>, ScanSummary, Vec<u64>) {
        let mut frames = vec![];
        let mut done = vec![];
        let (summary, stop) = scan(
            bytes,
            base,
            helper,
            limits,
            |f| {
                frames.push((f.info, f.stored_crc, f.computed_crc));
                ControlFlow::Continue(())
            },
            |at| done.push(at),
        );
        ((frames, summary.end, stop), summary, done)
    }

    fn batch(base: i64, codec: Compression, records: i32, value: usize) -> Vec<u8> {
        BatchBuilder::new(base)
            .compression(codec)
            .records((0..records).map(|i| RecordSpec::new(i, 1000).with_value(vec![i as u8; value])))
            .build()
    }

    /// A segment of magic-2 batches of various sizes, a control batch and
    /// legacy messages.
    fn segment(sizes: &[(u8, usize)]) -> Vec<u8> {
        let mut seg = Vec::new();
        for (i, &(kind, size)) in sizes.iter().enumerate() {
            let offset = i as i64 * 10;
            match kind % 4 {
                0 => seg.extend(batch(offset, Compression::None, 3, size)),
                1 => seg.extend(batch(offset, Compression::Lz4, 2, size)),
                2 => seg.extend(end_txn_marker_batch(
                    offset,
                    5,
                    0,
                    7,
                    0,
                    EndTxnMarker {
                        control_type: ControlType::Commit,
                        coordinator_epoch: 1,
                    },
                )),
                _ => seg.extend(encode_message(
                    offset,
                    1,
                    9,
                    TimestampType::CreateTime,
                    None,
                    Some(&vec![1; size]),
                )),
            }
        }
        seg
    }

    const TINY: Limits = Limits {
        window_bytes: 700,
        window_frames: 3,
        piece_bytes: 150,
        fragment_bytes: 64,
    };

    #[test]
    fn windows_report_what_the_sequential_scan_reports() {
        let sizes: Vec<(u8, usize)> = (0..40).map(|i| (i as u8, (i * 37) % 400)).collect();
        let mut seg = segment(&sizes);
        let n = seg.len();
        seg[n / 3] ^= 0x10;
        seg[n / 2] ^= 0x01;
        seg.extend_from_slice(&batch(999, Compression::None, 1, 5)[..40]);
        let expected = sequential(&seg, 500);
        assert!(
            expected.0.iter().any(|(_, stored, computed)| stored != computed),
            "flips must break CRCs"
        );
        assert!(matches!(expected.2, Some(ParseError::Incomplete { .. })));
        for limits in [Limits::DEFAULT, TINY] {
            for helper in [false, true] {
                let (outcome, summary, done) = windowed(&seg, 500, helper, limits);
                assert_eq!(outcome, expected, "helper {helper}, {limits:?}");
                let mismatches = expected.0.iter().filter(|(_, s, c)| s != c).count() as u64;
                assert_eq!(
                    (summary.frames, summary.crc_mismatches),
                    (expected.0.len() as u64, mismatches)
                );
                // Windows end on frame boundaries, in order, and the last at the end.
                let boundaries: Vec<u64> = expected.0.iter().map(|(i, _, _)| i.position + i.size).collect();
                assert!(done.iter().all(|d| boundaries.contains(d)), "{done:?}");
                assert!(done.windows(2).all(|w| w[0] < w[1]));
                assert_eq!(done.last(), Some(&expected.1));
            }
        }
        let (_, _, done) = windowed(&seg, 500, true, TINY);
        assert!(
            done.len() >= 40 / 3,
            "at most 3 frames a window: {} windows",
            done.len()
        );
    }

    /// A batch larger than a fragment is cut, and the combined CRC is the CRC of
    /// the whole batch, whether or not it matches the stored one.
    #[test]
    fn fragments_combine_to_the_batch_crc() {
        let mut big = batch(0, Compression::None, 3, 3 * FRAGMENT_BYTES / 2);
        let mut seg = big.clone();
        let middle = big.len() / 2;
        big[middle] ^= 0x80;
        big[..8].copy_from_slice(&3i64.to_be_bytes());
        seg.extend_from_slice(&big);
        let (outcome, summary, _) = windowed(&seg, 0, true, Limits::DEFAULT);
        assert_eq!(outcome, sequential(&seg, 0));
        let crcs: Vec<(u32, u32)> = outcome.0.iter().map(|(_, s, c)| (*s, *c)).collect();
        assert_eq!(crcs[0].1, crate::batch::compute_crc(&seg[..big.len()]));
        assert_eq!(crcs[0].0, crcs[0].1);
        assert_eq!(crcs[1].1, crate::batch::compute_crc(&big));
        assert_ne!(crcs[1].0, crcs[1].1);
        assert_eq!(summary.crc_mismatches, 1);
        // The same with tiny fragments: thousands of combinations.
        let small = Limits {
            fragment_bytes: 1000,
            ..Limits::DEFAULT
        };
        assert_eq!(windowed(&seg, 0, true, small).0, outcome);
    }

    #[test]
    fn break_stops_at_the_frame_and_skips_the_rest() {
        let sizes: Vec<(u8, usize)> = (0..30).map(|i| (0, i * 10)).collect();
        let seg = segment(&sizes);
        let all = sequential(&seg, 0).0;
        for stop_at in [0, 1, 2, 3, 7, 29] {
            let mut seen = 0;
            let (summary, stop) = scan(
                &seg,
                0,
                true,
                TINY,
                |_| {
                    seen += 1;
                    if seen == stop_at + 1 {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                },
                |_| {},
            );
            assert_eq!(stop, None);
            assert_eq!(seen, stop_at + 1);
            let (info, _, _) = all[stop_at];
            assert_eq!(
                summary,
                ScanSummary {
                    frames: stop_at as u64 + 1,
                    crc_mismatches: 0,
                    end: info.position + info.size,
                    stopped_early: true
                }
            );
        }
    }

    /// A helper that claimed a piece and then lost its core does not hold the
    /// scan up: the scanning thread computes the piece itself.
    #[test]
    fn a_piece_a_stalled_helper_holds_is_computed_again() {
        let sizes: Vec<(u8, usize)> = (0..6).map(|i| (i as u8, 100 + i * 50)).collect();
        let seg = segment(&sizes);
        let limits = Limits {
            window_bytes: usize::MAX,
            window_frames: 100,
            piece_bytes: 1,
            fragment_bytes: 100,
        };
        let (window, walked) = Window::walk(&seg, 0, 0, limits);
        assert_eq!((walked.end, walked.stop), (seg.len(), None));
        assert!(window.pieces.len() > 6, "fragments make more pieces than frames");
        // The stalled helper's claim: it counts itself a reader, claims piece 0
        // and does not compute it.
        window.readers.fetch_add(1, Ordering::SeqCst);
        assert_eq!(window.next_piece.fetch_add(1, Ordering::SeqCst), 0);
        window.finish();
        assert!(window.done.iter().all(|d| d.load(Ordering::Acquire)));
        // Its pages are not released while the helper may still read them.
        assert!(!window.is_quiet());
        window.readers.fetch_sub(1, Ordering::SeqCst);
        assert!(window.is_quiet());
        let frames: Vec<_> = window
            .frames()
            .map(|f| (f.info, f.stored_crc, f.computed_crc))
            .collect();
        assert_eq!(frames, sequential(&seg, 0).0);
        assert!(frames.iter().all(|(_, stored, computed)| stored == computed));
    }

    #[test]
    fn empty_input_scans_nothing() {
        let (outcome, summary, done) = windowed(&[], 42, true, Limits::DEFAULT);
        assert_eq!(outcome, (vec![], 42, None));
        assert_eq!(
            summary,
            ScanSummary {
                end: 42,
                ..Default::default()
            }
        );
        assert_eq!(done, vec![42]);
    }

    #[test]
    fn many_tiny_frames_make_many_windows() {
        let one = end_txn_marker_batch(
            0,
            5,
            0,
            7,
            0,
            EndTxnMarker {
                control_type: ControlType::Abort,
                coordinator_epoch: 1,
            },
        );
        let mut seg = Vec::new();
        for i in 0..(2 * WINDOW_FRAMES + 5) as i64 {
            let mut b = one.clone();
            b[..8].copy_from_slice(&i.to_be_bytes());
            seal_crc(&mut b);
            seg.extend(b);
        }
        let (outcome, summary, done) = windowed(&seg, 0, true, Limits::DEFAULT);
        assert_eq!(summary.frames, 2 * WINDOW_FRAMES as u64 + 5);
        assert_eq!(summary.crc_mismatches, 0);
        assert_eq!(done.len(), 3);
        assert_eq!(outcome, sequential(&seg, 0));
    }

    fn limits() -> impl Strategy<Value = Limits> {
        (1usize..2000, 1usize..6, 0usize..600, 1usize..300).prop_map(
            |(window_bytes, window_frames, piece_bytes, fragment_bytes)| Limits {
                window_bytes,
                window_frames,
                piece_bytes,
                fragment_bytes,
            },
        )
    }

    proptest! {
        #[test]
        fn random_bytes_scan_like_the_sequential_scan(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            limits in limits(),
            helper in any::<bool>(),
        ) {
            prop_assert_eq!(windowed(&bytes, 7, helper, limits).0, sequential(&bytes, 7));
        }

        #[test]
        fn mutated_segments_scan_like_the_sequential_scan(
            sizes in proptest::collection::vec((any::<u8>(), 0usize..700), 1..12),
            flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 0..4),
            cut in any::<usize>(),
            limits in limits(),
            helper in any::<bool>(),
        ) {
            let mut seg = segment(&sizes);
            let n = seg.len();
            for (at, x) in flips {
                seg[at % n] ^= x;
            }
            seg.truncate(n - cut % (n / 4 + 1));
            prop_assert_eq!(windowed(&seg, 0, helper, limits).0, sequential(&seg, 0));
        }
    }
}
