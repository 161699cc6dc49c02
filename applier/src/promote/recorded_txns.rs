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
//! Only the answer "none open" is taken from here: an open transaction needs its first offset, epochs and counts for
//! the abort marker, which the walk finds. Anything not recorded for exactly the segments the walk would read (a
//! version installed by another path, a catalog written before this was kept, a snapshot inside a segment) means
//! "walk".

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use segment_format::txn_ends::TxnEnds;

use super::txn_cut::starting_snapshot;

/// Per installed segment (base offset): its installed version's next offset and what the install recorded of it.
pub(super) type Recorded = BTreeMap<i64, (i64, Option<TxnEnds>)>;

/// `true` when the records prove that no transaction is open at `log_end_offset` of the mirror partition `dir`
/// (promoted `segments`, producer `snapshots`); `false` when a transaction is open or the records cannot tell.
pub(super) fn none_open(
    dir: &Path,
    recorded: &Recorded,
    segments: &[i64],
    snapshots: &[i64],
    log_end_offset: i64,
) -> bool {
    // The walk's starting point, found the walk's way.
    let (mut open, from): (BTreeSet<i64>, i64) = match starting_snapshot(dir, snapshots, log_end_offset) {
        Some((offset, snapshot)) => {
            // The walk would start inside a segment: the records describe whole segments only.
            if offset != log_end_offset && !segments.contains(&offset) {
                return false;
            }
            (
                snapshot.open_transactions().map(|(producer, _)| producer).collect(),
                offset,
            )
        }
        None => (BTreeSet::new(), segments.first().copied().unwrap_or(log_end_offset)),
    };
    for (i, base) in segments.iter().enumerate() {
        if *base < from || *base >= log_end_offset {
            continue;
        }
        let end = segments.get(i + 1).copied().unwrap_or(log_end_offset);
        match recorded.get(base) {
            Some((next, Some(ends))) if *next == end => ends.fold(&mut open),
            _ => return false,
        }
    }
    open.is_empty()
}
