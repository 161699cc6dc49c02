//! What the appender keeps, with every record of a partition's state, so that `promote` need not read the data
//! it hands over: the active segment's offset, time and transaction index as they stand at the recorded position
//! (their entry counts and CRC-32C), and the leader epochs of the batches appended ([`KeptEpochs`]).
//!
//! Why: a tailed partition's active segment grows to a GiB, and its sealed segments have no leader-epoch
//! checkpoint (none is shipped). Without these facts promotion walked every batch header of every segment to
//! restamp epochs, every batch of the partition to find the transactions open at its end and the aborted ones'
//! `.txnindex` entries, and the active segment twice more to rebuild its indexes: a failover that grew with the
//! data (docs/BENCHMARKS.md). The appender sees each batch once anyway, when it checks it.
//!
//! # Durability, and why promote may trust it
//! The facts are part of the state file, written atomically with the position they describe ([`Kept::describes`]),
//! so they are as durable as the position and never ahead of it. They *describe* the companion files, which stay
//! written as `companions` writes them (offset and time index without an fsync): promotion trusts a file only
//! when its bytes have exactly the recorded length (the `.txnindex`: at least, entries past the record are a
//! crash's leftovers) and CRC-32C, and otherwise rebuilds it from the `.log` as before. A state file without the
//! facts (written by an older build, or by the hand-over, a truncation or a replacement, which record positions
//! the facts do not describe) makes promotion walk as before; the next chunk records them again.
//!
//! # Epochs
//! A history of `(epoch, start offset)` changes of the batches appended at offsets from [`KeptEpochs::from_offset`]
//! on. It carries over seals and segment claims, and restarts (at the next chunk's segment base, or its first
//! batch) whenever the previous record does not carry valid facts, so it never claims offsets it did not see. A
//! replacement of sealed segments (the source's cleaner) moves `from_offset` up to the active segment: the
//! replaced bytes were not checked here. Bounded to [`MAX_KEPT_EPOCHS`] changes; a partition past that restarts
//! its history at its next segment.
//!
//! # Closed transactions
//! Each producer's last transaction a COMMIT or ABORT marker closed: the marker's offset, and the transaction's
//! first offset and tally as the appender's tracker held them (`txn_index::ClosedTransaction`). Why: a consistent
//! cut inside a transaction whose marker follows the cut must know where that transaction began and what it held
//! before the cut. The batches after the cut say the rest; without this, promotion read back from the cut until the
//! producer's previous event, which for a producer's only transaction in a segment is the segment's base (9 s for
//! 4 GiB, docs/BENCHMARKS.md). An entry is only ever made from a marker the appender checked, with the tracker's
//! first offset and tally (a tally only for a transaction it saw begin), so an entry is right whenever its marker is
//! still the one at its offset: promotion uses one only where it is the producer's first marker after the cut.
//! Without valid facts before a chunk the list starts over from the chunk's markers; a replacement of sealed
//! segments drops the entries that reach below the active segment (the cleaner may have removed their batches).
//!
//! # The closed log
//! The list above holds one transaction per producer, so a producer that commits twice or more after a cut is not
//! decided by it: its first marker after the cut is not its last. The active segment's every closed transaction goes
//! to its closed log, `.tail/closed/<topic>-<partition>.bin` (`segment_format::closed_log`, fixed-size entries in
//! marker order), appended with each chunk's entries next to the indexes, without an fsync, and described in the
//! record by its entry count and CRC-32C like them ([`Kept::closed_log`]). Promotion reads only the recorded entries,
//! and only where their bytes match ([`recorded_closed_log`]); a log a crash shortened or damaged is not used (read
//! back from the cut, as before). A session that rebuilds the indexes cuts the log back to the recorded entries, or
//! starts it over at its next chunk when they do not match; a new segment starts it over; a replacement of sealed
//! segments records it empty (its entries may count batches below the active segment). Bounded by
//! `closed_log::MAX_ENTRIES`: a 1 GiB segment holds more markers only when its transactions average under 4 KiB.

use segment_format::batch::BatchInfo;
use segment_format::closed_log;
use segment_format::file_record::FileRecord;
use segment_format::index::{serialize_offset_index, serialize_time_index, OffsetIndexEntry, TimeIndexEntry};
use segment_format::txn_index::{self, AbortedTxn, ClosedTransaction};

use super::*;

/// Most epoch changes kept: a leader change per entry, so far beyond what a partition sees between failovers; a
/// partition past it is walked at promotion until its history restarts.
pub const MAX_KEPT_EPOCHS: usize = 512;

/// Most closed transactions kept (one per producer, the latest markers): a state file stays within its 64 KiB with
/// every other fact at its bound; a producer whose entry gave way is read back from a cut as before.
pub const MAX_KEPT_CLOSED: usize = 64;

/// The kept closed transactions `kept` (by marker offset) with those a chunk's markers closed (`closed`, in offset
/// order) added: a producer's newer one replaces its older, and past [`MAX_KEPT_CLOSED`] the oldest markers go.
pub(super) fn with_closed(mut kept: Vec<ClosedTransaction>, closed: &[ClosedTransaction]) -> Vec<ClosedTransaction> {
    for c in closed {
        kept.retain(|k| k.producer_id != c.producer_id);
        kept.push(*c);
    }
    let excess = kept.len().saturating_sub(MAX_KEPT_CLOSED);
    kept.drain(..excess);
    kept
}

/// The leader epochs of the batches appended from `from_offset` on: each change as `(epoch, first offset)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptEpochs {
    /// Every batch at or above this offset was appended (and checked) by the appender and is in the history.
    pub from_offset: i64,
    /// `(epoch, start offset)`, by start offset; the first starts at `from_offset`.
    pub changes: Vec<(i32, i64)>,
}

impl KeptEpochs {
    fn starting(from_offset: i64) -> KeptEpochs {
        KeptEpochs {
            from_offset,
            changes: Vec::new(),
        }
    }

    /// The history with `batches` (in offset order, all at or above `from_offset`) added; `None` past the bound.
    fn with(mut self, batches: &[BatchInfo]) -> Option<KeptEpochs> {
        for b in batches {
            let epoch = b.partition_leader_epoch;
            if self.changes.last().is_none_or(|(e, _)| *e != epoch) {
                let start = if self.changes.is_empty() {
                    self.from_offset
                } else {
                    b.base_offset
                };
                self.changes.push((epoch, start));
            }
        }
        (self.changes.len() <= MAX_KEPT_EPOCHS).then_some(self)
    }

    /// The epoch the history says the batch at `offset` carries (`None` below its start).
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        if offset < self.from_offset {
            return None;
        }
        self.changes
            .iter()
            .rev()
            .find(|(_, start)| *start <= offset)
            .map(|(epoch, _)| *epoch)
    }

    /// The one epoch of every batch in the offsets `base..end`, when the history covers them and none changes
    /// inside; `None` otherwise (or when no batch was seen there).
    pub fn single_epoch(&self, base: i64, end: i64) -> Option<i32> {
        let epoch = self.epoch_at(base)?;
        let changes_inside = self.changes.iter().any(|(_, start)| *start > base && *start < end);
        (!changes_inside).then_some(epoch)
    }

    /// The history for offsets at or above `offset` only (what lies below is no longer vouched for).
    pub(super) fn restricted_to(&self, offset: i64) -> KeptEpochs {
        if offset <= self.from_offset {
            return self.clone();
        }
        let mut changes: Vec<(i32, i64)> = Vec::new();
        if let Some((epoch, _)) = self.changes.iter().rev().find(|(_, start)| *start <= offset) {
            changes.push((*epoch, offset));
        }
        changes.extend(self.changes.iter().copied().filter(|(_, start)| *start > offset));
        KeptEpochs {
            from_offset: offset,
            changes,
        }
    }
}

/// What a partition's state file keeps for promotion (module docs), describing its state at one position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The position described: facts whose segment, size or next offset differ from the state's are not used.
    pub segment_base: i64,
    pub position: u64,
    pub next_offset: Option<i64>,
    /// The segment's `.index`, `.timeindex` and `.txnindex` at that position.
    pub offset_index: FileRecord,
    pub time_index: FileRecord,
    pub txn_index: FileRecord,
    /// `None`: not known (past [`MAX_KEPT_EPOCHS`]).
    pub epochs: Option<KeptEpochs>,
    /// Each producer's last transaction closed by a marker the appender checked (module docs, "Closed
    /// transactions"), by marker offset, at most `MAX_KEPT_CLOSED` (the latest markers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<ClosedTransaction>,
    /// The segment's closed log (`.tail/closed/<topic>-<partition>.bin`, module docs): every transaction a marker
    /// closed in it from its start, or from where the appender's knowledge of the segment began. Empty in a state
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "FileRecord::is_empty")]
    pub closed_log: FileRecord,
}

impl Kept {
    /// Whether these facts describe the state `segment_base`/`position`/`next_offset`.
    pub fn describes(&self, segment_base: i64, position: u64, next_offset: Option<i64>) -> bool {
        self.segment_base == segment_base && self.position == position && self.next_offset == next_offset
    }
}

/// The closed log at `path` (`mirror::closed_log_file`), when its first entries are the ones `recorded` describes
/// (the appender writes it without an fsync and records its entry count and CRC-32C with the position, `Kept`):
/// those entries.
/// `None` when they are not (a write a crash lost, a damaged file), or it is not a regular file. Only the recorded
/// entries are read: a crash's leftovers after them are not.
pub fn recorded_closed_log(path: &Path, recorded: FileRecord) -> std::io::Result<Option<Vec<ClosedTransaction>>> {
    Ok(closed_log::read_recorded(path, recorded)?.and_then(|bytes| closed_log::parse(&bytes).ok()))
}

/// Whether the open transactions a state records hold what a walk of the partition from its first segment (base
/// `first_base`) finds: every one tallied and begun in the mirror (a walk takes a transaction begun before its first
/// segment to start at its first batch there). The one rule by which promotion aborts them from the record
/// (`promote::tail_kept::tallied`) and by which `verify --deep` holds the record to the walk as an error.
pub fn open_transactions_match_a_walk(open: &[segment_format::txn_index::OpenTransaction], first_base: i64) -> bool {
    open.iter().all(|o| o.tally.is_some() && o.first_offset >= first_base)
}

impl PartitionState {
    /// The kept facts, when they describe this state.
    pub(super) fn valid_kept(&self) -> Option<&Kept> {
        self.kept
            .as_ref()
            .filter(|k| k.describes(self.segment_base, self.position, self.next_offset))
    }
}

impl Inner {
    /// The kept epoch history of `name` restricted to its active segment and beyond, and its closed log emptied,
    /// recorded (a replacement of sealed segments is about to change bytes below it: module docs). Nothing to do
    /// without valid facts.
    pub(super) fn distrust_epochs_below_active(&mut self, name: &str) -> TailResult<()> {
        let Some(s) = self.states.get(name).cloned() else {
            return Ok(());
        };
        let Some(k) = s.valid_kept() else { return Ok(()) };
        let base = s.segment_base;
        // A transaction with a batch or its marker below the active segment may have lost batches to the cleaner.
        let below = |c: &ClosedTransaction| c.marker_offset < base || c.first_offset.is_some_and(|f| f < base);
        let epochs_below = k.epochs.as_ref().is_some_and(|e| e.from_offset < base);
        // The closed log's entries may reach below too; it starts over rather than be read here.
        let logged = k.closed_log.entries > 0;
        if !epochs_below && !k.closed.iter().any(below) && !logged {
            return Ok(());
        }
        let kept = Kept {
            epochs: k.epochs.as_ref().map(|e| e.restricted_to(base)),
            closed: k.closed.iter().copied().filter(|c| !below(c)).collect(),
            closed_log: FileRecord::default(),
            ..k.clone()
        };
        self.record(name.to_string(), PartitionState { kept: Some(kept), ..s })?;
        self.restart_closed_log(name);
        Ok(())
    }
}

/// The running description of the active segment's companion files and closed log, as [`ActiveIndexes`] writes
/// them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct KeptFiles {
    pub offset_index: FileRecord,
    pub time_index: FileRecord,
    pub txn_index: FileRecord,
    pub closed_log: FileRecord,
}

impl KeptFiles {
    pub(super) fn offsets_written(&mut self, whole: bool, entries: &[OffsetIndexEntry]) {
        let bytes = serialize_offset_index(entries);
        self.offset_index = if whole {
            FileRecord::of(&bytes, entries.len())
        } else {
            self.offset_index.append(&bytes, entries.len())
        };
    }

    pub(super) fn times_written(&mut self, whole: bool, entries: &[TimeIndexEntry]) {
        let bytes = serialize_time_index(entries);
        self.time_index = if whole {
            FileRecord::of(&bytes, entries.len())
        } else {
            self.time_index.append(&bytes, entries.len())
        };
    }

    /// The `.txnindex` now holds exactly `entries`.
    pub(super) fn txn_is(&mut self, entries: &[AbortedTxn]) {
        self.txn_index = FileRecord::of(&txn_index::serialize(entries), entries.len());
    }

    /// `entries` appended to the `.txnindex`.
    pub(super) fn txn_appended(&mut self, entries: &[AbortedTxn]) {
        self.txn_index = self.txn_index.append(&txn_index::serialize(entries), entries.len());
    }

    /// `bytes`, holding `entries` closed transactions, written to the closed log: the whole of it, or appended.
    pub(super) fn closed_written(&mut self, whole: bool, bytes: &[u8], entries: usize) {
        self.closed_log = if whole {
            FileRecord::of(bytes, entries)
        } else {
            self.closed_log.append(bytes, entries)
        };
    }
}

/// The facts to record with the state a chunk leaves: the segment's files as `files` describes them, and the
/// epoch history of `prev` (the state the chunk continues, when its facts are valid) with `batches` added.
pub(super) fn after_chunk(
    prev: Option<&PartitionState>,
    chunk: &Chunk,
    new_segment: bool,
    batches: &[BatchInfo],
    files: KeptFiles,
    next_offset: Option<i64>,
    closed: &[ClosedTransaction],
) -> Kept {
    let valid = prev.and_then(|s| s.valid_kept());
    let carried = valid.and_then(|k| k.epochs.clone());
    let history = match carried {
        Some(h) => Some(h),
        // Nothing before this chunk is vouched for: from its segment's start when it starts one, else from its
        // first batch.
        None if new_segment || chunk.position == 0 => Some(KeptEpochs::starting(chunk.segment_base)),
        None => batches.first().map(|b| KeptEpochs::starting(b.base_offset)),
    };
    Kept {
        segment_base: chunk.segment_base,
        position: chunk.position + chunk.bytes.len() as u64,
        next_offset,
        offset_index: files.offset_index,
        time_index: files.time_index,
        txn_index: files.txn_index,
        closed_log: files.closed_log,
        epochs: history.and_then(|h| h.with(batches)),
        // Without valid facts before the chunk, from its markers on (a marker not seen is not claimed).
        closed: with_closed(valid.map(|k| k.closed.clone()).unwrap_or_default(), closed),
    }
}

/// The facts of a segment claimed at 0 bytes after `prev`: empty files, `prev`'s epoch history (when valid).
pub(super) fn at_claim(prev: Option<&PartitionState>, segment_base: i64, next_offset: Option<i64>) -> Option<Kept> {
    let valid = prev.and_then(|s| s.valid_kept())?;
    let (epochs, closed) = (valid.epochs.clone(), valid.closed.clone());
    Some(Kept {
        segment_base,
        position: 0,
        next_offset,
        offset_index: FileRecord::default(),
        time_index: FileRecord::default(),
        txn_index: FileRecord::default(),
        closed_log: FileRecord::default(),
        epochs,
        closed,
    })
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
