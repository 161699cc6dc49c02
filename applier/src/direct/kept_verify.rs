//! `segmirror verify --deep` of what the tail appender kept for promotion (`kept`): each state file's facts checked
//! against the bytes they describe, so that a mirror whose state promotion would trust is known to say what its
//! data says.
//!
//! Why a walk here and none at promotion: promotion trusts the facts (checking only that each companion file's
//! bytes are the ones recorded) so that a failover costs no read of the data; `verify --deep` reads all of it
//! anyway and can afford to derive every fact again. Checked for a state whose facts describe its position and
//! whose segment holds exactly the recorded bytes (bytes past them are a crash's, cut at the next session start):
//! - the offset and time index entries a rebuild of the segment gives (the appender's rule and interval) against
//!   the recorded counts and CRC-32C: a mismatch is an error (promotion would seal wrong indexes);
//! - the leader epoch of every batch from the history's start against the one the history says at its offset: an
//!   error (promotion would skip restamping a batch);
//! - the segment's `.txnindex` entries and the transactions open at the end, followed from the partition's first
//!   segment, against the recorded ones: a warning, not an error, because the appender follows transactions from
//!   where it started, which retention may since have deleted (a transaction begun there has its true first offset
//!   in the record and its first batch in the mirror in this walk);
//! - except where promotion would abort the open transactions from the record alone (every one tallied and begun
//!   in the mirror, `promote::tail_kept::tallied`): then the record must be exactly what this walk
//!   finds, producer, first offset and tally, or it is an error (promotion would write a wrong marker or miss
//!   one);
//! - each producer's last closed transaction against the walk's: the marker must be the producer's last one, and
//!   where promotion would use its first offset and tally (begun in the mirror, tallied) they must be the walk's,
//!   or it is an error (a consistent cut would abort the wrong batches);
//! - each entry of the active segment's closed log against the transaction the walk finds its marker closed, by the
//!   same rule: an error where they differ, a warning where the log is not the recorded one (a write a crash lost:
//!   promotion then reads back from a cut instead of using it).

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use segment_format::dir::PartitionDir;
use segment_format::error::Defect;
use segment_format::index::{serialize_offset_index, serialize_time_index};
use segment_format::report::Finding;
use segment_format::txn_index::{self, AbortedTxn, ClosedTransaction, OpenTransaction, TxnTally, TxnTracker};

use super::kept::{recorded_closed_log, Kept, KeptEpochs};
use super::*;
use segment_format::file_record::FileRecord;

/// What a walk of a tailed partition derives, for comparison with what was kept.
struct Derived {
    offset_index: FileRecord,
    time_index: FileRecord,
    txn_index: FileRecord,
    open_transactions: Vec<OpenTransaction>,
    /// Each producer's last transaction closed by a marker.
    closed: BTreeMap<i64, ClosedTransaction>,
    /// The transactions closed by the markers the closed log names, by marker offset.
    closed_at: BTreeMap<i64, ClosedTransaction>,
    /// Base offset of the partition's first segment (where the walk started).
    first_base: Option<i64>,
    /// The first batch whose epoch is not the one the kept history says at its offset: (offset, its epoch, the
    /// history's).
    epoch_mismatch: Option<(i64, i32, Option<i32>)>,
}

/// Findings for every tailed partition of the mirror root `root` (none without a `.tail` directory), and what
/// could not be read (the `.tail` directory itself; a partition that cannot be checked is a warning).
pub fn verify_kept(root: &Path) -> (Vec<Finding>, Vec<String>) {
    let (mut findings, mut io_errors) = (Vec::new(), Vec::new());
    let dir = mirror::tail_dir(root);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (findings, io_errors),
        Err(e) => {
            io_errors.push(format!("{}: {e}", dir.display()));
            return (findings, io_errors);
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| mirror::is_record(p))
        .collect();
    files.sort();
    for path in files {
        // Not a verdict on the data (whose own defects the segment walk of `verify` reports): a partition that
        // changed under a running applier, or a state file that does not parse, is a warning.
        if let Err(e) = verify_one(root, &path, &mut findings) {
            findings.push(Finding::warning(
                &path,
                None,
                None,
                Defect::Other {
                    message: format!("what the tail appender kept could not be checked: {e}"),
                },
            ));
        }
    }
    (findings, io_errors)
}

fn verify_one(root: &Path, state_path: &Path, findings: &mut Vec<Finding>) -> TailResult<()> {
    let bytes = fs::read(state_path).map_err(|e| TailError::io(state_path, e))?;
    let state: PartitionState = serde_json::from_slice(&bytes).map_err(|e| TailError::BadState {
        path: state_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if !valid_topic(&state.topic) {
        return Ok(());
    }
    let Some(kept) = state.valid_kept().cloned() else {
        return Ok(());
    };
    let pdir = mirror::partition_dir(root, &state.topic, state.partition);
    let log = pdir.join(segment_file_name(state.segment_base, SegmentFileKind::Log));
    match fs::metadata(&log) {
        Ok(m) if m.len() == state.position => {}
        // Not the recorded bytes (a crash's leftovers, or nothing yet): nothing the facts describe.
        _ => return Ok(()),
    }
    let log_path = mirror::closed_log_file(root, &format!("{}-{}", state.topic, state.partition));
    let logged = recorded_closed_log(&log_path, kept.closed_log).map_err(|e| TailError::io(&log_path, e))?;
    let logged: BTreeMap<i64, ClosedTransaction> = logged
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.marker_offset, c))
        .collect();
    let derived = derive(&pdir, &state, &kept, &logged)?;
    if kept.closed_log.entries > 0 && logged.is_empty() {
        let defect = Defect::Other {
            message: format!(
                "the closed log {} is not the one recorded ({} entries): a consistent cut reads back from the cut \
                 instead",
                log_path.display(),
                kept.closed_log.entries
            ),
        };
        findings.push(Finding::warning(state_path, None, None, defect));
    }
    let mut differs = |what: &str, kept: String, found: String, error: bool| {
        let defect = Defect::Other {
            message: format!(
                "the tail state kept for promotion says {what} {kept}, the segment {} gives {found}",
                log.display()
            ),
        };
        findings.push(if error {
            Finding::error(state_path, None, None, defect)
        } else {
            Finding::warning(state_path, None, None, defect)
        });
    };
    let file = |f: &FileRecord| format!("{} entries (CRC-32C {:#010x})", f.entries, f.crc32c);
    if kept.offset_index != derived.offset_index {
        differs(
            "offset index",
            file(&kept.offset_index),
            file(&derived.offset_index),
            true,
        );
    }
    if kept.time_index != derived.time_index {
        differs("time index", file(&kept.time_index), file(&derived.time_index), true);
    }
    if let Some((offset, epoch, said)) = derived.epoch_mismatch {
        differs(
            &format!("the batch at offset {offset} has leader epoch"),
            said.map_or("none".to_string(), |e| e.to_string()),
            epoch.to_string(),
            true,
        );
    }
    if kept.txn_index != derived.txn_index {
        differs(".txnindex", file(&kept.txn_index), file(&derived.txn_index), false);
    }
    let open = state.open_transactions.as_deref().unwrap_or_default();
    let trusted = derived
        .first_base
        .is_some_and(|first| super::kept::open_transactions_match_a_walk(open, first));
    let describe = |open: &[OpenTransaction]| -> String {
        let each: Vec<String> = open
            .iter()
            .map(|o| {
                format!(
                    "producer {} from {}{}",
                    o.producer_id,
                    o.first_offset,
                    tally_text(o.tally)
                )
            })
            .collect();
        format!("{} [{}]", open.len(), each.join("; "))
    };
    if trusted && open != derived.open_transactions.as_slice() {
        differs(
            "open transactions",
            describe(open),
            describe(&derived.open_transactions),
            true,
        );
    } else if open.len() != derived.open_transactions.len() {
        differs(
            "open transactions",
            open.len().to_string(),
            derived.open_transactions.len().to_string(),
            false,
        );
    }
    if let Some((kept_one, found)) = derived.first_base.and_then(|first| {
        kept.closed
            .iter()
            .find_map(|c| closed_differs(c, derived.closed.get(&c.producer_id), first))
    }) {
        differs("the last transaction closed", kept_one, found, true);
    }
    if let Some((logged_one, found)) = derived.first_base.and_then(|first| {
        logged.values().find_map(|c| {
            let walked = derived
                .closed_at
                .get(&c.marker_offset)
                .filter(|w| w.producer_id == c.producer_id);
            closed_differs(c, walked, first)
        })
    }) {
        differs("in its closed log a transaction closed", logged_one, found, true);
    }
    Ok(())
}

/// A kept closed transaction (`kept`) against the walk's last one of its producer (`walked`), from the first segment
/// at `first_base`: `Some((kept, found))` described, where promotion could use the record and it says otherwise.
/// Promotion uses a record only where its marker is still the producer's last one, and its first offset and tally
/// only from `first_base` on (`promote::recorded_txns::decided_by_closed`); a marker below `first_base` went with
/// retention.
fn closed_differs(
    kept: &ClosedTransaction,
    walked: Option<&ClosedTransaction>,
    first_base: i64,
) -> Option<(String, String)> {
    let describe = |c: &ClosedTransaction| match c.first_offset {
        Some(first) => format!(
            "producer {} marker at {}, from {}{}",
            c.producer_id,
            c.marker_offset,
            first,
            tally_text(c.tally)
        ),
        None => format!("producer {} marker at {}, no data", c.producer_id, c.marker_offset),
    };
    if kept.marker_offset < first_base {
        return None;
    }
    let Some(walked) = walked.filter(|w| w.marker_offset == kept.marker_offset) else {
        let found = walked.map_or_else(|| "no marker of that producer".to_string(), describe);
        return Some((describe(kept), found));
    };
    let usable = kept.tally.is_some() && kept.first_offset.is_some_and(|f| f >= first_base);
    let differs = kept.first_offset.is_some() != walked.first_offset.is_some()
        || (usable && (kept.first_offset, kept.tally) != (walked.first_offset, walked.tally));
    differs.then(|| (describe(kept), describe(walked)))
}

/// A transaction's tally as the findings name it (` (epoch E, R records in B batches, N bytes)`), or nothing.
fn tally_text(tally: Option<TxnTally>) -> String {
    tally.map_or_else(String::new, |t| {
        format!(
            " (epoch {}, {} records in {} batches, {} bytes)",
            t.producer_epoch, t.records, t.batches, t.bytes
        )
    })
}

/// The facts a walk of `state`'s partition gives: its segments up to the recorded one, from the first; of the
/// transactions closed, those at the markers `logged` names (bounded by the closed log) and each producer's last.
fn derive(
    pdir: &Path,
    state: &PartitionState,
    kept: &Kept,
    logged: &BTreeMap<i64, ClosedTransaction>,
) -> TailResult<Derived> {
    let segments = PartitionDir::open(pdir)?.segments;
    let mut tracker = TxnTracker::new();
    let mut closed = BTreeMap::new();
    let mut closed_at = BTreeMap::new();
    let mut aborted: Vec<AbortedTxn> = Vec::new();
    let epochs: Option<&KeptEpochs> = kept.epochs.as_ref();
    let mut epoch_mismatch = None;
    let mut offsets = OffsetIndexBuilder::new(state.segment_base, REBUILD_INDEX_INTERVAL_BYTES);
    let mut times = TimeIndexBuilder::new(state.segment_base, REBUILD_INDEX_INTERVAL_BYTES);
    let mut failed = None;
    for s in segments.iter().filter(|s| s.base_offset <= state.segment_base) {
        let active = s.base_offset == state.segment_base;
        let mut log = LogFile::open(&s.log)?;
        // The active segment as recorded: a running appender may be writing past it.
        let end = if active { state.position } else { log.len() };
        log.scan_range(0, end, |frame| {
            let b = &frame.info;
            let (entry, ended) = tracker.on_batch_closing(b);
            if let Some(c) = ended {
                if logged.contains_key(&c.marker_offset) {
                    closed_at.insert(c.marker_offset, c);
                }
                closed.insert(c.producer_id, c);
            }
            if active {
                aborted.extend(entry);
                if let Err(e) = offsets.push(b).and_then(|_| times.push(b)) {
                    failed = Some(e.at(&s.log));
                    return ControlFlow::Break(());
                }
            }
            if let Some(e) = epochs.filter(|e| b.base_offset >= e.from_offset && epoch_mismatch.is_none()) {
                let said = e.epoch_at(b.base_offset);
                if said != Some(b.partition_leader_epoch) {
                    epoch_mismatch = Some((b.base_offset, b.partition_leader_epoch, said));
                }
            }
            ControlFlow::Continue(())
        })?;
        if let Some(e) = failed.take() {
            return Err(TailError::Format(e));
        }
    }
    Ok(Derived {
        offset_index: FileRecord::of(&serialize_offset_index(offsets.entries()), offsets.entries().len()),
        time_index: FileRecord::of(&serialize_time_index(times.entries()), times.entries().len()),
        txn_index: FileRecord::of(&txn_index::serialize(&aborted), aborted.len()),
        open_transactions: tracker.open_tallied().collect(),
        closed,
        closed_at,
        first_base: segments.first().map(|s| s.base_offset),
        epoch_mismatch,
    })
}

#[cfg(test)]
#[path = "kept_verify_tests.rs"]
mod tests;
