//! Whether a transaction is open at an applied mirror's end, from what the installs recorded rather than from
//! the batches.
//!
//! Why: `txn_cut::find_open_transactions` replays the batches after the newest producer snapshot, and a mirror of
//! a live broker's partition has none inside its active segment (the broker writes one at a roll and at a clean
//! shutdown): the walk read every batch header of every active segment, so the promotion of a bucket-fed mirror
//! grew with the data (about 1 s per GiB from a cold cache, docs/BENCHMARKS.md). Every install reads all batches of
//! the version it installs anyway, and the catalog keeps, with that version, how those batches leave each
//! transactional producer (`segment_format::txn_ends`). Folding those short lists from the same starting point as
//! the walk — the producers the newest usable snapshot holds open, or none before the first promoted segment — gives
//! the same set of producers with an open transaction (the fold is exact for the set; see that module).
//!
//! The records also carry each open producer's trailing run (first offset, producer epoch, counts), and the fold adds
//! them up as the walk's tracker does: the open transactions are then aborted from the records alone (D0054), and the
//! walk is left for what the records cannot tell — a segment the walk would read without a record, a record of
//! another version (its next offset differs), a snapshot inside a segment, a record written before runs were kept,
//! or a transaction the starting snapshot already holds open whose start the records from the first segment on do not
//! find at the snapshot's first offset (the walk counts its batches from there, before the snapshot: a transaction
//! open across a segment roll is counted from the records of the segments before it).
//!
//! A consistent cut starts from the transactions open at the end and the batches after the cut
//! ([`open_at_cut_from_end`]). A producer a marker follows is decided by the tail appender's record of the
//! transaction its first marker after the cut closed, where it has one (each producer's last, or the active
//! segment's closed log: [`decided_by_closed`]), or by the record of the segment holding the cut, which names each
//! producer's last marker in it with its transaction's batches there and the transactions open at its end, and by
//! that segment's log of every marker where the record keeps one (`crate::segment_log`; [`decided_by_record`]), and
//! otherwise read back from the cut ([`open_at_cut_reading_back`]); where that cannot tell, a cut inside a segment
//! ([`open_at_cut`]) folds the records of the segments before it and walks only that segment's batches below the
//! cut — none when its own record names no transactional producer. A tail-fed mirror has the records too: each seal
//! records its segment's (`crate::direct`'s catalog).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use segment_format::closed_log::{self, SegmentClosing};
use segment_format::file_record::FileRecord;
use segment_format::txn_ends::{OpenDetails, TxnEnds};
use segment_format::txn_index::{ClosedTransaction, TxnTally};

use super::consistent_cut::AfterCut;
use super::error::{Error, Result};
use super::txn_cut::{
    cut_at_end, open_at_cut_backwards, open_at_cut_in_segment, starting_snapshot, CutTransaction, Tallied,
};

/// Per installed segment (base offset): its installed version's next offset and what the install recorded of it.
pub(super) type Recorded = BTreeMap<i64, (i64, Option<TxnEnds>)>;

/// The transactions open at `log_end_offset` of the mirror partition `dir` (promoted `segments`, producer
/// `snapshots`) as promotion aborts them, when the records tell all the walk would find (`Some(vec![])`: none
/// open); `None` when they cannot.
pub(super) fn open_at_end(
    dir: &Path,
    recorded: &Recorded,
    segments: &[i64],
    snapshots: &[i64],
    log_end_offset: i64,
) -> Option<Vec<CutTransaction>> {
    open_at(dir, recorded, segments, snapshots, log_end_offset).map(|open| cut_at_end(open, log_end_offset))
}

/// The transactions open at a consistent cut (`cut_offset`), from those open at the mirror's end (`at_end`:
/// producer, first offset, tally; from the installs' records or the tail appender's) and what the batches after the
/// cut did (`after`), without reading before the cut; `None` where that cannot tell.
///
/// A producer with no batch after the cut is as it is at the end. One with only data batches after the cut and open
/// at the end was open at the cut when its transaction began before it, with the batches after the cut taken off
/// its tally (a transaction's batches share one producer epoch, as Kafka's producer state enforces; the tally's
/// epoch is kept only where the batches after the cut carry it too), and was not open when it began after. A
/// producer with a marker after the cut may or may not have had a transaction open at it: only its batches before
/// the cut can tell (`None` here; [`open_at_cut_reading_back`] reads them).
pub(super) fn open_at_cut_from_end(
    at_end: &[Tallied],
    after: &AfterCut,
    cut_offset: i64,
) -> Option<Vec<CutTransaction>> {
    let (open, undecided) = decided_from_end(at_end, after, cut_offset)?;
    undecided.is_empty().then(|| cut_at_end(open, cut_offset))
}

/// What the mirror's end and the batches after a cut say: the transactions open at the end (`at_end`: producer,
/// first offset, tally), each producer's last closed transaction where the tail appender kept them (`closed`, else
/// empty), the active segment's closed log where it kept one (`closed_log`, read only when needed), and what the
/// batches after the cut did (`after`); and how to read the log of a segment whose record keeps one
/// (`segment_log`: base and record; read only when needed, nothing where it is not the recorded one).
#[derive(Clone, Copy)]
pub(super) struct FromEnd<'a> {
    pub(super) at_end: &'a [Tallied],
    pub(super) closed: &'a [ClosedTransaction],
    pub(super) closed_log: Option<&'a dyn Fn() -> Result<Vec<ClosedTransaction>>>,
    pub(super) segment_log: Option<&'a dyn Fn(i64, FileRecord) -> Result<Vec<SegmentClosing>>>,
    pub(super) after: &'a AfterCut,
}

/// [`open_at_cut_from_end`] for a cut inside a segment, where the producers a marker after the cut leaves undecided
/// are decided by the kept closed transactions ([`decided_by_closed`]), by the segment's record
/// ([`decided_by_record`]), or else read backwards from the cut (`txn_cut::open_at_cut_backwards`, from the records
/// folded to that segment's base): each only as far back as its last event before the cut, and its transaction's
/// start. `None` when the records or the segment's offset index cannot tell.
pub(super) fn open_at_cut_reading_back(
    dir: &Path,
    recorded: &Recorded,
    segments: &[i64],
    snapshots: &[i64],
    cut: CutInside,
    end: FromEnd<'_>,
) -> Result<Option<Vec<CutTransaction>>> {
    let Some((mut open, mut undecided)) = decided_from_end(end.at_end, end.after, cut.cut_offset) else {
        return Ok(None);
    };
    let first_base = segments.first().copied().unwrap_or(cut.base);
    let by_closed = decided_by_closed(end.closed, end.after, &mut undecided, first_base, cut.cut_offset);
    #[cfg(test)]
    if by_closed.decided {
        super::tail_kept::used::note(dir, "closed-transactions");
    }
    open.extend(by_closed.open);
    if let Some(read) = end.closed_log.filter(|_| !undecided.is_empty()) {
        let by_log = decided_by_closed(&read()?, end.after, &mut undecided, first_base, cut.cut_offset);
        if by_log.decided {
            tracing::debug!(dir = %dir.display(), "a producer a marker follows decided by the closed log");
            #[cfg(test)]
            super::tail_kept::used::note(dir, "closed-log");
        }
        open.extend(by_log.open);
    }
    if !undecided.is_empty() {
        let Some(at_base) = open_at(dir, recorded, segments, snapshots, cut.base) else {
            return Ok(None);
        };
        let by_record = decided_by_record(recorded, cut, &at_base, end.after, &mut undecided, first_base, None);
        #[cfg(test)]
        {
            if by_record.decided {
                super::tail_kept::used::note(dir, "closings-recorded");
            }
            if by_record.at_segment_end {
                super::tail_kept::used::note(dir, "open-at-segment-end");
            }
        }
        open.extend(by_record.open);
        // A producer whose first marker after the cut lies in the segment but is not its last there: the segment's
        // log of every marker, where its record keeps one.
        let in_segment = |p: &i64| {
            end.after
                .producers
                .get(p)
                .and_then(|a| a.first_marker)
                .is_some_and(|m| m < cut.end)
        };
        let log = recorded
            .get(&cut.base)
            .and_then(|(next, ends)| ends.as_ref().filter(|_| *next == cut.end))
            .and_then(|ends| ends.log);
        if let (Some(read), Some(log)) = (end.segment_log, log.filter(|_| undecided.iter().any(in_segment))) {
            let log = read(cut.base, log)?;
            let by_log = decided_by_record(
                recorded,
                cut,
                &at_base,
                end.after,
                &mut undecided,
                first_base,
                Some(&log),
            );
            if by_log.decided {
                tracing::debug!(dir = %dir.display(), "a producer a marker follows decided by the segment's log");
                #[cfg(test)]
                super::tail_kept::used::note(dir, "segment-log");
            }
            open.extend(by_log.open);
        }
        if !undecided.is_empty() {
            #[cfg(test)]
            super::tail_kept::used::note(dir, "read-back");
            match open_at_cut_backwards(dir, cut.base, &at_base, &undecided, cut.cut_offset)? {
                Some(found) => open.extend(found),
                None => return Ok(None),
            }
        }
    }
    Ok(Some(cut_at_end(open, cut.cut_offset)))
}

/// What the end and the batches after the cut decide (see [`open_at_cut_from_end`]): the transactions open at the
/// cut among the producers they decide, and the producers a marker after the cut leaves undecided. `None` when they
/// contradict, or more producers came after the cut than are followed.
fn decided_from_end(at_end: &[Tallied], after: &AfterCut, cut_offset: i64) -> Option<(Vec<Tallied>, BTreeSet<i64>)> {
    if after.overflow {
        return None;
    }
    let undecided: BTreeSet<i64> = after
        .producers
        .iter()
        .filter(|(_, a)| a.marker)
        .map(|(p, _)| *p)
        .collect();
    let mut open = Vec::new();
    for &(producer, first, tally) in at_end.iter().filter(|(p, _, _)| !undecided.contains(p)) {
        match after.producers.get(&producer) {
            None if first < cut_offset => open.push((producer, first, tally)),
            // Open at the end but no batch after the cut to begin it there: the records disagree with the bytes.
            None => return None,
            Some(_) if first >= cut_offset => {}
            Some(a) => open.push((producer, first, before_cut(tally, &a.data, a.min_epoch)?)),
        }
    }
    // Data after the cut, and no marker, of a producer not open at the end: the records disagree with the bytes.
    let unexplained = after
        .producers
        .iter()
        .any(|(p, a)| !a.marker && !at_end.iter().any(|(q, _, _)| q == p));
    if unexplained {
        return None;
    }
    Some((open, undecided))
}

/// The part before a cut of a transaction tallied `whole` whose batches after the cut add up to `after` (their
/// smallest producer epoch `after_min_epoch`); `None` when that cannot be told: a transaction's batches share one
/// producer epoch (Kafka's producer state enforces it), so the epoch is kept only where the batches after the cut
/// carry it too, and at least one batch must lie before the cut.
fn before_cut(whole: TxnTally, after: &TxnTally, after_min_epoch: Option<i16>) -> Option<TxnTally> {
    if after.batches == 0 {
        return (whole.batches > 0).then_some(whole);
    }
    let same_epoch = after_min_epoch == Some(whole.producer_epoch) && after.producer_epoch == whole.producer_epoch;
    if !same_epoch || after.batches >= whole.batches {
        return None;
    }
    Some(TxnTally {
        producer_epoch: whole.producer_epoch,
        records: whole.records.checked_sub(after.records)?,
        batches: whole.batches - after.batches,
        bytes: whole.bytes.checked_sub(after.bytes)?,
    })
}

/// Segment `base`'s log (`crate::segment_log`) of the mirror partition `dir`, when it is the one `record` (the
/// segment's catalog record) describes; none otherwise.
pub(super) fn segment_log(dir: &Path, base: i64, record: FileRecord) -> Result<Vec<SegmentClosing>> {
    match crate::segment_log::read(dir, base, record).map_err(|e| Error::io(dir, e))? {
        Some(logged) => Ok(logged),
        None => {
            tracing::debug!(dir = %dir.display(), base, "segment log is not the recorded one: not used");
            Ok(Vec::new())
        }
    }
}

/// What the kept closed transactions (or a segment's record) decided of the producers a marker after a cut left
/// undecided.
#[derive(Default)]
pub(super) struct Decided {
    /// The transactions open at the cut among them.
    open: Vec<Tallied>,
    /// Whether any producer was decided.
    decided: bool,
    /// Whether any was decided by what was open at the end of the segment holding the cut.
    at_segment_end: bool,
}

impl Decided {
    /// `producer` decided: open at the cut as `stands` says, or not. `false`: no longer undecided (for `retain`).
    fn decide(&mut self, producer: i64, stands: Option<(i64, TxnTally)>) -> bool {
        self.open.extend(stands.map(|(first, tally)| (producer, first, tally)));
        self.decided = true;
        false
    }
}

/// The producers of `undecided` (those with a marker after the cut at `cut_offset`) that the tail appender's kept
/// closed transactions (`closed`, in marker offset order: each producer's last one, or the active segment's closed
/// log, `direct::Kept`) decide, taken out of `undecided`; the rest are read back from the cut. A producer is decided
/// only where its first marker after the cut is one an entry names (so that entry is the transaction across the
/// cut, and the marker is still where the appender saw it): the transaction was open at the cut when it began
/// before it (from `first_base`, where the walk would start, with a tally), with its batches after the cut taken off
/// its tally, and was not open when it began after the cut, or the marker closed none. Anything the bytes after the
/// cut contradict is left to the reading back.
pub(super) fn decided_by_closed(
    closed: &[ClosedTransaction],
    after: &AfterCut,
    undecided: &mut BTreeSet<i64>,
    first_base: i64,
    cut_offset: i64,
) -> Decided {
    let mut found = Decided::default();
    undecided.retain(|producer| {
        let Some(a) = after.producers.get(producer) else {
            return true;
        };
        let Some(marker) = a.first_marker else {
            return true;
        };
        let Some(c) = closed_log::find(closed, *producer, marker) else {
            return true;
        };
        let closed: Closed = match (c.first_offset, c.tally) {
            (None, _) => None,
            (Some(first), Some(tally)) => Some((first, tally)),
            (Some(_), None) => return true,
        };
        match at_cut(
            closed,
            &a.before_marker,
            a.before_marker_min_epoch,
            first_base,
            cut_offset,
        ) {
            Some(stands) => found.decide(*producer, stands),
            None => true,
        }
    });
    found
}

/// The transaction a producer's marker after a cut closed, as the segment's record and the fold to its base give
/// it: first offset and tally; `None` when it had no data.
type Closed = Option<(i64, TxnTally)>;

/// How a transaction whose first offset and tally are `closed` stands at a cut at `cut_offset`, given the producer's
/// batches after the cut that belong to it (`before_marker`, their smallest producer epoch `min_epoch`: those before
/// the marker that closed it, or before the end of the segment it was open at): `Some(Some(open))` open at the cut,
/// `Some(None)` not, `None` when the bytes after the cut contradict it or the walk would count it otherwise (begun
/// before `first_base`).
fn at_cut(
    closed: Closed,
    before_marker: &TxnTally,
    min_epoch: Option<i16>,
    first_base: i64,
    cut_offset: i64,
) -> Option<Option<(i64, TxnTally)>> {
    match closed {
        // The marker closed no transaction: none was open at the cut, and no data may precede it after the cut.
        None => (before_marker.batches == 0).then_some(None),
        Some((first, tally)) if first >= cut_offset => (tally == *before_marker).then_some(None),
        Some((first, tally)) if first >= first_base => {
            before_cut(tally, before_marker, min_epoch).map(|before| Some((first, before)))
        }
        Some(_) => None,
    }
}

/// The producers of `undecided` (a marker after the cut inside segment `cut.base`) that the segment's record decides,
/// taken out of `undecided`, with `at_base` the transactions open at the segment's base (the records folded):
/// - a producer whose first marker after the cut lies in the segment and is its last there gets the transaction that
///   marker closed from the record's closing (`txn_ends::ClosingRun`, in the records written since closings were
///   kept: its batches in the segment before the marker) and, when no marker of it precedes those in the segment,
///   what was open at the base; with the segment's `log` (every marker, `closed_log::SegmentClosing`), any marker of
///   it there the same way (what was open at the base only where the entry is not the whole transaction);
/// - a producer whose first marker after the cut lies in a later segment has no marker between the cut and the
///   segment's end: it stands at the cut as it stands at that end (what was open at the base with the record's runs
///   folded in), less its batches after the cut in the segment.
pub(super) fn decided_by_record(
    recorded: &Recorded,
    cut: CutInside,
    at_base: &[Tallied],
    after: &AfterCut,
    undecided: &mut BTreeSet<i64>,
    first_base: i64,
    log: Option<&[SegmentClosing]>,
) -> Decided {
    let mut found = Decided::default();
    let Some(ends) = recorded
        .get(&cut.base)
        .and_then(|(next, ends)| ends.as_ref().filter(|_| *next == cut.end))
    else {
        return found;
    };
    let mut at_segment_end: BTreeMap<i64, OpenDetails> = at_base
        .iter()
        .map(|&(producer, first, tally)| (producer, Some((first, tally))))
        .collect();
    ends.fold_runs(&mut at_segment_end);
    undecided.retain(|producer| {
        let Some(a) = after.producers.get(producer) else {
            return true;
        };
        let Some(marker) = a.first_marker else {
            return true;
        };
        let stands = if marker >= cut.end {
            let closed: Closed = match at_segment_end.get(producer) {
                None => None,
                Some(Some(open)) => Some(*open),
                // Open there without a tally: a record written before runs were kept.
                Some(None) => return true,
            };
            at_cut(
                closed,
                &a.in_cut_segment,
                a.in_cut_segment_min_epoch,
                first_base,
                cut.cut_offset,
            )
        } else {
            // Its first marker after the cut must be its last in the segment, or one the segment's log names.
            let named = ends
                .closings
                .as_ref()
                .and_then(|closings| closings.get(producer))
                .filter(|c| c.marker_offset == marker)
                .map(|c| (c.after_marker, c.data))
                .or_else(|| {
                    log.and_then(|log| closed_log::find_in_segment(log, *producer, marker))
                        .map(|c| (c.whole, c.data))
                });
            let Some((whole, data)) = named else {
                return true;
            };
            let base = at_base
                .iter()
                .find(|(p, _, _)| p == producer)
                .map(|&(_, first, tally)| (first, tally));
            let closed: Closed = match (whole, data, base) {
                (true, data, _) | (false, data, None) => data,
                (false, None, Some(base)) => Some(base),
                (false, Some((_, tally)), Some((first, mut before))) => {
                    before.merge(&tally);
                    Some((first, before))
                }
            };
            at_cut(
                closed,
                &a.before_marker,
                a.before_marker_min_epoch,
                first_base,
                cut.cut_offset,
            )
        };
        match stands {
            Some(stands) => {
                found.at_segment_end |= marker >= cut.end;
                found.decide(*producer, stands)
            }
            None => true,
        }
    });
    found
}

/// Where a consistent cut falls inside a segment: that segment and where its installed version ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct CutInside {
    /// The segment holding the cut (the last of the promoted ones).
    pub(super) base: i64,
    /// Its end before the cut: the next segment's base, or the mirror's end.
    pub(super) end: i64,
    /// The cut: the promoted log's end.
    pub(super) cut_offset: i64,
}

/// The transactions open at a consistent cut inside a segment (`cut`; `segments` the promoted ones, that segment
/// last): the records folded up to that segment, then only its batches below the cut walked — none when its own
/// record says no transactional producer wrote to it. `None` when the records cannot tell what is open at its
/// base (the walk from the start decides).
pub(super) fn open_at_cut(
    dir: &Path,
    recorded: &Recorded,
    segments: &[i64],
    snapshots: &[i64],
    cut: CutInside,
) -> Result<Option<Vec<CutTransaction>>> {
    let Some(open) = open_at(dir, recorded, segments, snapshots, cut.base) else {
        return Ok(None);
    };
    let quiet = matches!(recorded.get(&cut.base), Some((next, Some(ends)))
        if *next == cut.end && ends.open.is_empty() && ends.closed.is_empty());
    if quiet {
        return Ok(Some(cut_at_end(open, cut.cut_offset)));
    }
    open_at_cut_in_segment(dir, cut.base, open, cut.cut_offset).map(Some)
}

/// The transactions open at `end` (an offset at which a segment of `segments` begins, or the log's end) with their
/// first offsets and tallies, folded from the records of the segments below it from the walk's starting point;
/// `None` when the records cannot tell. At the mirror's end, what [`open_at_cut_from_end`] starts from.
pub(super) fn open_at(
    dir: &Path,
    recorded: &Recorded,
    segments: &[i64],
    snapshots: &[i64],
    end: i64,
) -> Option<Vec<Tallied>> {
    // The walk's starting point, found the walk's way: a snapshot's open transactions (first offset, epoch).
    let mut held: BTreeMap<i64, (i64, i16)> = BTreeMap::new();
    let (mut open, from): (BTreeMap<i64, OpenDetails>, i64) = match starting_snapshot(dir, snapshots, end) {
        Some((offset, snapshot)) => {
            // The walk would start inside a segment: the records describe whole segments only.
            if offset != end && !segments.contains(&offset) {
                return None;
            }
            for e in &snapshot.entries {
                if let Some(first) = e.open_transaction() {
                    held.insert(e.producer_id, (first, e.epoch));
                }
            }
            (held.keys().map(|producer| (*producer, None)).collect(), offset)
        }
        None => (BTreeMap::new(), segments.first().copied().unwrap_or(end)),
    };
    fold_from(recorded, segments, from, end, &mut open)?;
    // A transaction the snapshot holds open and still open here began before the snapshot: the walk counts its
    // batches from its first offset. The records from the first segment on count the same batches when they find it
    // begun at that offset (not before the mirror's first segment, where retention took its start).
    if open.values().any(Option::is_none) {
        let mut from_first = BTreeMap::new();
        let first = segments.first().copied().unwrap_or(end);
        if fold_from(recorded, segments, first, end, &mut from_first).is_some() {
            for (producer, details) in open.iter_mut().filter(|(_, d)| d.is_none()) {
                let (Some(&(snapshot_first, epoch)), Some(Some((first, tally)))) =
                    (held.get(producer), from_first.get(producer))
                else {
                    continue;
                };
                if *first == snapshot_first {
                    let mut tally = *tally;
                    // The walk starts the tally at the snapshot's epoch.
                    tally.producer_epoch = tally.producer_epoch.max(epoch);
                    *details = Some((*first, tally));
                }
            }
        }
    }
    open.into_iter()
        .map(|(producer, details)| details.map(|(first, tally)| (producer, first, tally)))
        .collect()
}

/// Fold the records of the segments from `from` to `end` into `open`; `None` when one is missing or describes another
/// version (its next offset differs).
fn fold_from(
    recorded: &Recorded,
    segments: &[i64],
    from: i64,
    end: i64,
    open: &mut BTreeMap<i64, OpenDetails>,
) -> Option<()> {
    for (i, base) in segments.iter().enumerate() {
        if *base < from || *base >= end {
            continue;
        }
        let segment_end = segments.get(i + 1).copied().unwrap_or(end);
        match recorded.get(base) {
            Some((next, Some(ends))) if *next == segment_end => ends.fold_runs(open),
            _ => return None,
        }
    }
    Some(())
}
