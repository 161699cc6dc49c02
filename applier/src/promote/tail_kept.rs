//! A tailed partition promoted from what the tail appender kept (`crate::direct::Kept`) instead of walks of its
//! data: the epochs of its segments, and the active segment's offset, time and transaction index.
//!
//! Why: without these, a tailed partition's promotion read every batch header of every segment (no leader-epoch
//! checkpoint to settle a segment), every batch of the partition to find the aborted transactions' `.txnindex`
//! entries of the active segment, and the active segment twice more to rebuild its indexes; a failover that grew
//! with the data (9.4 s for 4.1 GiB against 0.03–0.06 s for the same data applied from a bucket).
//!
//! What is trusted, and why that keeps promotion's output the same as the walks' (tests compare the bytes):
//! - **Epochs**: the appender recorded the epoch of every batch it checked from [`KeptEpochs::from_offset`] on; a
//!   segment in that range under one epoch equal to the target's is settled exactly as an applied one under the
//!   mirror's leader-epoch checkpoint (`build::settled`, which also confirms the file's first and last batches).
//! - **Companion files**: the appender writes the active segment's indexes as it appends (the rule and interval a
//!   rebuild uses) and records their entry counts and CRC-32C with the position. A file whose bytes match is what a
//!   rebuild from the `.log` would write; one that does not (an index not yet written back when a crash came, an
//!   older appender) is rebuilt from the `.log` as before. The `.txnindex` is written durably before the record,
//!   so only entries *after* the recorded ones can be there (a crash's leftovers): its recorded prefix is kept.
//! - **Open transactions**: the appender records the transactions open at the position, each with its tally (the
//!   producer epoch, records, batches and bytes of its batches so far: `txn_index::TxnTally`), which is all an
//!   ABORT marker and its report need ([`tallied`]). A walk from the first segment finds the same set
//!   with the same sums: it follows the same batches by the same rule (`TxnTracker`). Only where the walk would see
//!   something else does planning walk: a transaction begun before the first segment (retention deleted its start:
//!   the walk takes it to begin at its first batch in the mirror), one without a tally (recorded before tallies
//!   were, open when the appender's knowledge began, or past the bound on tallied ones), a producer snapshot
//!   (where the walk would start) or a consistent cut (which starts from this record and the batches after the cut
//!   instead, `recorded_txns::open_at_cut_from_end`).
//! - **Closed transactions**: each producer's last transaction a marker closed, with its first offset and tally
//!   (`direct::Kept::closed`), and every one closed in the active segment, in its closed log ([`closed_log`], read
//!   only for a cut that needs it, and only where its bytes are the recorded ones). A consistent cut takes a producer
//!   whose first marker after the cut is a recorded one from it, where the walk would find the same: begun from the
//!   first segment on and tallied (`recorded_txns::decided_by_closed`).
//! - **A consistent cut inside the active segment** judges its companions against what was kept before cutting them
//!   back to the cut (`build::hand_over_cut_segment`), and takes its time index as a hint only where it matches
//!   ([`time_index_matches`]).
//!
//! The facts are journaled with the plan (`journal::Planned::tail_kept`), so a rerun after a crash judges the same
//! files by the same facts; a file a first run already changed (the sealed time index) no longer matches, and the
//! rerun rebuilds it, which writes the same bytes.

use std::path::Path;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::index::{OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE};
use segment_format::txn_index::{ClosedTransaction, OpenTransaction, TxnIndex, ABORTED_TXN_SIZE};

use crate::direct::{Kept, KeptEpochs};

use super::error::{Error, Result};
use super::files::remove_file;
use super::txn_cut;

/// The one epoch of every batch of the segment `base..end` by the kept history, when it covers the segment.
pub(super) fn segment_epoch(kept: Option<&Kept>, base: i64, end: i64) -> Option<i32> {
    kept.and_then(|k| k.epochs.as_ref())
        .and_then(|e: &KeptEpochs| e.single_epoch(base, end))
}

/// The transactions the appender recorded open at the mirror's end (`log_end_offset`): producer id, first offset and
/// tally of each, when the record holds what a walk from the first promoted segment (base `first_base`) would find:
/// every one tallied and begun at or after `first_base` (module docs). `None`: the walk decides. Promotion aborts
/// them with markers from the end on (`txn_cut::cut_at_end`).
pub(super) fn tallied(open: &[OpenTransaction], first_base: i64, log_end_offset: i64) -> Option<Vec<txn_cut::Tallied>> {
    if !crate::direct::open_transactions_match_a_walk(open, first_base) {
        return None;
    }
    open.iter()
        .map(|o| {
            o.tally
                .filter(|_| o.first_offset < log_end_offset)
                .map(|t| (o.producer_id, o.first_offset, t))
        })
        .collect()
}

/// The active segment's closed log of the tailed partition `name` under the mirror root `root`, when its first
/// entries are the ones `kept` records (`direct::recorded_closed_log`); none otherwise.
pub(super) fn closed_log(kept: &Kept, root: &Path, name: &str) -> Result<Vec<ClosedTransaction>> {
    let path = crate::mirror::closed_log_file(root, name);
    match crate::direct::recorded_closed_log(&path, kept.closed_log).map_err(|e| Error::io(&path, e))? {
        Some(logged) => Ok(logged),
        None => {
            tracing::debug!(path = %path.display(), "closed log is not the recorded one: not used");
            Ok(Vec::new())
        }
    }
}

/// Whether segment `base`'s time index in `dir` is the one the appender kept (what a rebuild from its `.log` would
/// write).
pub(super) fn time_index_matches(kept: &Kept, dir: &Path, base: i64) -> bool {
    std::fs::read(dir.join(segment_file_name(base, SegmentFileKind::TimeIndex)))
        .is_ok_and(|bytes| kept.time_index.matches(&bytes, TIME_INDEX_ENTRY_SIZE, true))
}

/// Which of the active segment's companions in `dir` matched what was kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Trusted {
    /// The offset and time index (both or neither).
    pub(super) indexes: bool,
    /// The `.txnindex`, now holding exactly the recorded entries.
    pub(super) txn: bool,
}

/// Judge segment `base`'s companions in `dir` (a partition being built) against `kept`; a matching `.txnindex`
/// is cut back to the recorded entries (atomically: a handover's `.building` holds the only copy).
pub(super) fn trust(kept: &Kept, dir: &Path, base: i64) -> Result<Trusted> {
    let read = |kind: SegmentFileKind| -> Result<Vec<u8>> {
        let path = dir.join(segment_file_name(base, kind));
        match std::fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io(&path, e)),
        }
    };
    let indexes = kept
        .offset_index
        .matches(&read(SegmentFileKind::Index)?, OFFSET_INDEX_ENTRY_SIZE, true)
        && kept
            .time_index
            .matches(&read(SegmentFileKind::TimeIndex)?, TIME_INDEX_ENTRY_SIZE, true);
    let txn_bytes = read(SegmentFileKind::TxnIndex)?;
    let txn = kept.txn_index.matches(&txn_bytes, ABORTED_TXN_SIZE, false);
    if txn {
        let recorded = usize::try_from(kept.txn_index.entries).unwrap_or(usize::MAX);
        if txn_bytes.len() != recorded.saturating_mul(ABORTED_TXN_SIZE) {
            let entries = TxnIndex::parse(&txn_bytes).entries;
            let keep = entries.get(..recorded).unwrap_or_default();
            if keep.is_empty() {
                remove_file(&dir.join(segment_file_name(base, SegmentFileKind::TxnIndex)))?;
            } else {
                txn_cut::write_txn_index(dir, base, keep)?;
            }
        }
    }
    #[cfg(test)]
    {
        if indexes {
            used::note(dir, "indexes");
        }
        if txn {
            used::note(dir, "txn-index");
        }
    }
    Ok(Trusted { indexes, txn })
}

/// Which kept facts a test's promotions used, by path (tests run in parallel, each under its own directory).
#[cfg(test)]
pub(super) mod used {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static NOTED: Mutex<Vec<(PathBuf, &'static str)>> = Mutex::new(Vec::new());

    pub(in crate::promote) fn note(path: &Path, what: &'static str) {
        NOTED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((path.to_path_buf(), what));
    }

    /// What was used for paths under `root`, sorted, each once.
    pub(in crate::promote) fn under(root: &Path) -> Vec<&'static str> {
        let mut found: Vec<&'static str> = NOTED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(p, _)| p.starts_with(root))
            .map(|(_, w)| *w)
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    }
}
