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
//! or a transaction the starting snapshot already holds open (the walk counts its batches from before the snapshot).

use std::collections::BTreeMap;
use std::path::Path;

use segment_format::txn_ends::{OpenDetails, TxnEnds};
use segment_format::txn_index::TxnTally;

use super::txn_cut::{cut_at_end, starting_snapshot, CutTransaction};

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
    // The walk's starting point, found the walk's way.
    let (mut open, from): (BTreeMap<i64, OpenDetails>, i64) = match starting_snapshot(dir, snapshots, log_end_offset) {
        Some((offset, snapshot)) => {
            // The walk would start inside a segment: the records describe whole segments only.
            if offset != log_end_offset && !segments.contains(&offset) {
                return None;
            }
            (
                snapshot
                    .open_transactions()
                    .map(|(producer, _)| (producer, None))
                    .collect(),
                offset,
            )
        }
        None => (BTreeMap::new(), segments.first().copied().unwrap_or(log_end_offset)),
    };
    for (i, base) in segments.iter().enumerate() {
        if *base < from || *base >= log_end_offset {
            continue;
        }
        let end = segments.get(i + 1).copied().unwrap_or(log_end_offset);
        match recorded.get(base) {
            Some((next, Some(ends))) if *next == end => ends.fold_runs(&mut open),
            _ => return None,
        }
    }
    let known: Vec<(i64, i64, TxnTally)> = open
        .into_iter()
        .map(|(producer, details)| details.map(|(first, tally)| (producer, first, tally)))
        .collect::<Option<_>>()?;
    Some(cut_at_end(known, log_end_offset))
}
