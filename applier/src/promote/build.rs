//! Building a promoted partition in staging: copies of the mirror's files, every batch restamped to the target's
//! leader epoch, abort markers for open transactions, empty producer state, the target's `partition.metadata` and
//! a one-entry `leader-epoch-checkpoint`; made durable with every other build by one `syncfs`, then swapped in
//! (`swap::execute`).
//!
//! Why in staging: the live partition directory is replaced by one rename (`swap`), so the broker never sees a
//! half-built partition; a crash mid-build leaves a `.building` directory that the rerun rebuilds from the
//! journal, byte for byte the same.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint};
use segment_format::dir::{
    classify_partition_file, segment_file_name, PartitionFile, SegmentFileKind, LEADER_EPOCH_CHECKPOINT_FILE,
    PARTITION_METADATA_FILE,
};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};

use super::error::{Error, Result};
use super::files::{copy, create_dir, names_in, remove_dir_all, remove_file, rename, truncate_beyond, write_staged};
use super::handover::{hand_over_file, KillSwitch};
use super::journal::{Journal, Planned, JOURNAL_FILE};
use super::kcopy::restamp_in_place;
use super::producer_state::{self, LastIndexes};
use super::refusal::Refusal;
use super::report::{Outcome, PromotedPartition};
use super::restamp::copy_log_restamping;
use super::{tail_kept, txn_cut};

mod settled;

use settled::MirrorEpochs;

/// Suffix of a partition being built in staging.
pub(super) const BUILDING: &str = "building";
/// Suffix an earlier build gave a partition built completely and durably, waiting to be swapped in (one rename per
/// partition; now `swap::BUILDS_DURABLE` says it of every `.building` at once). Still honoured by a rerun.
pub(super) const READY: &str = "ready";
/// Suffix of the target's original partition directory after the swap.
pub(super) const OLD: &str = "old";

pub(super) fn staged(staging: &Path, p: &Planned, suffix: &str) -> PathBuf {
    staging.join(staged_name(p, suffix))
}

/// The name of a partition's directory in staging with one of the suffixes above.
pub(super) fn staged_name(p: &Planned, suffix: &str) -> OsString {
    OsString::from(format!("{}.{suffix}", p.tp().dir_name()))
}

/// The report entry of a planned partition, before anything is copied.
pub(super) fn planned_result(p: &Planned, outcome: Outcome) -> PromotedPartition {
    PromotedPartition {
        topic: p.topic.clone(),
        partition: p.partition,
        outcome,
        target_topic_id: Some(p.target_topic_id.clone()),
        leader_epoch: Some(p.leader_epoch),
        log_start_offset: p.log_start_offset,
        log_end_offset: Some(p.end_offset()),
        mirror_end_offset: Some(p.mirror_end_offset()),
        consistent_cut: p.consistent_cut.clone(),
        segments: p.segments.len(),
        log_bytes: 0,
        batches_restamped: 0,
        handed_over: p.handover,
        transactions_aborted: p.cut.clone(),
        log_dirs: Vec::new(),
    }
}

/// What [`build`] did with one partition.
pub(super) struct Built {
    pub(super) result: PromotedPartition,
    /// Built by this call (`false`: an earlier run had).
    pub(super) now: bool,
    /// Files in the build that must go before it is made durable: the mirror's producer snapshots, brought along by
    /// a directory handed over whole. Removed after every build, not during them: on an ext4 without a journal,
    /// each inode freed while others are being created makes every later creation in that group step over it
    /// (`recently_deleted`), which made 10,000 builds four times slower.
    pub(super) leftovers: Vec<PathBuf>,
}

/// Build `<tp>.building` in staging unless it (or the swap after it) already happened (see [`Built`]).
/// `held`: the names staging held before the builds began (no build touches another partition's names).
/// Runs on a worker thread of `swap::build_all`, next to other partitions' builds: it touches only this
/// partition's directories in staging and reads only its mirror partition.
pub(super) fn build(
    journal: &Journal,
    p: &Planned,
    staging: &Path,
    held: &HashSet<OsString>,
    outcome: Outcome,
    kill: KillSwitch<'_>,
) -> Result<Built> {
    let mut result = planned_result(p, outcome);
    if held.contains(&staged_name(p, READY)) || held.contains(&staged_name(p, OLD)) {
        return Ok(Built {
            result,
            now: false,
            leftovers: Vec::new(),
        });
    }
    let building = staged(staging, p, BUILDING);
    // A handover's `.building` may hold the only copy of files already moved: it is finished, never rebuilt
    // (`handover`).
    if held.contains(&staged_name(p, BUILDING)) && !p.handover {
        remove_dir_all(&building)?;
    }
    let source = journal.mirror_root.join(p.tp().dir_name());
    let mut found_end = None;
    // A consistent cut inside the last segment keeps only a prefix of it: in a handover the segment is handed over
    // and cut back to the planned bytes (`hand_over_cut_segment`). Abort markers are appended to the last segment:
    // handed over all the same when its planned size is known (a rerun cuts the file back to it, `markers_after`),
    // copied otherwise.
    let limit = p.last_segment_limit();
    let markers_after = p.last_segment_size().filter(|_| !p.cut.is_empty());
    let copied_last = p.handover && limit.is_none() && !p.cut.is_empty() && markers_after.is_none();
    // Read before any file moves; it stays in the mirror (`handover`), so a rerun reads the same (a directory
    // handed over whole takes it along: a rerun then walks the segments, which restamps the same bytes).
    let epochs = if p.handover {
        MirrorEpochs::read(&source)
    } else {
        MirrorEpochs::default()
    };
    let fresh = !held.contains(&staged_name(p, BUILDING));
    let moved = match p.handover && !copied_last && fresh {
        true => hand_over_directory(&source, &building, p)?,
        false => None,
    };
    let moved_whole = moved.is_some();
    let mut leftovers = Vec::new();
    if let Some(snapshots) = moved {
        kill.renamed()?;
        // The one at the end offset is replaced by the build's own, empty one (`producer_state`).
        let own = segment_file_name(p.end_offset(), SegmentFileKind::Snapshot);
        leftovers = snapshots
            .into_iter()
            .filter(|name| *name != own)
            .map(|name| building.join(name))
            .collect();
    } else {
        create_dir(&building)?;
    }
    if p.handover && !fresh {
        // A directory an earlier run handed over whole may still hold the mirror's snapshots.
        remove_snapshots(&building)?;
        // And its last segment the abort markers that run appended: cut back to the planned bytes before anything
        // reads the file (they are appended again, the same bytes, by `producer_state::finish`).
        if let (Some(size), Some(last)) = (markers_after, p.segments.last()) {
            truncate_beyond(&building.join(segment_file_name(*last, SegmentFileKind::Log)), size)?;
            // And the entries written for the markers, in the last segment or in a segment of their own.
            for base in [*last, p.log_end_offset] {
                txn_cut::cut_companions_back(&building, base, p.log_end_offset)?;
            }
        }
    }
    // Which companions of a segment cut inside were trusted before it was cut back.
    let mut cut_trusted = None;
    for (i, base) in p.segments.iter().enumerate() {
        let is_last = i + 1 == p.segments.len();
        if p.handover && !(copied_last && is_last) {
            // A segment wholly in the target's epoch needs no walk (`settled`): by the epochs the tail appender
            // kept where they cover it (`tail_kept`), else by the mirror's checkpoint — never for the tailed
            // active segment, whose bytes no install checked.
            let end = p.segments.get(i + 1).copied().unwrap_or(p.log_end_offset);
            let tailed = p.tail_active.is_some_and(|t| t.segment_base == *base);
            let epoch = match tail_kept::segment_epoch(p.tail_kept.as_ref(), *base, end) {
                Some(kept) => Some(kept),
                None if tailed => None,
                None => epochs.single_epoch(*base, end),
            };
            let settled = epoch == Some(p.leader_epoch);
            #[cfg(test)]
            if settled && tailed {
                tail_kept::used::note(&building, "epochs");
            }
            let done = match limit.filter(|_| is_last) {
                Some(bytes) => {
                    let cut =
                        hand_over_cut_segment(p, &source, &building, *base, bytes, settled, moved_whole, fresh, kill)?;
                    cut_trusted = Some(cut.trusted);
                    cut.done
                }
                None => hand_over_segment(&source, &building, *base, p.leader_epoch, settled, moved_whole, kill)?,
            };
            result.log_bytes += done.size;
            result.batches_restamped += done.restamped;
            found_end = Some(done.last_offset.map_or(*base, |o| o.saturating_add(1)));
            continue;
        }
        for kind in [
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
            SegmentFileKind::TxnIndex,
            SegmentFileKind::Log,
        ] {
            let name = segment_file_name(*base, kind);
            let from = source.join(&name);
            // A prefix's companions are rebuilt from the kept bytes below, not copied.
            let prefix = if is_last { limit } else { None };
            if kind != SegmentFileKind::Log && (!from.exists() || prefix.is_some()) {
                continue;
            }
            let to = building.join(&name);
            if kind == SegmentFileKind::Log {
                // One pass: read, check and restamp the headers in memory, write (see `restamp`).
                let walk = copy_log_restamping(&from, &to, p.leader_epoch, prefix)?;
                result.log_bytes += walk.size;
                result.batches_restamped += walk.restamped;
                found_end = Some(walk.last_offset.map_or(*base, |o| o.saturating_add(1)));
            } else {
                copy(&from, &to)?;
            }
        }
    }
    if let Some(found) = found_end.filter(|f| *f != p.log_end_offset) {
        return Err(Error::Refused {
            refusals: vec![Refusal::MirrorChanged {
                partition: p.tp(),
                log: source.join(segment_file_name(
                    p.segments.last().copied().unwrap_or_default(),
                    SegmentFileKind::Log,
                )),
                planned_end_offset: p.log_end_offset,
                found_end_offset: found,
            }],
        });
    }
    // A tailed active segment (unless a consistent cut left it behind) and a segment cut inside get companions
    // derived from the promoted bytes.
    let last = p.segments.last().copied();
    let tailed = p.tail_active.filter(|t| Some(t.segment_base) == last);
    let mut kept_indexes = false;
    if let Some(base) = last.filter(|_| tailed.is_some() || limit.is_some()) {
        kept_indexes = complete_tailed_segment(p, &building, base, cut_trusted)?;
    }
    // The last segment's companions are the mirror's, which install checked against its batches (not a tailed
    // segment's derived ones unless they match what the appender kept, not a cut's prefix): sealed from them, and
    // extended over abort markers, not rebuilt by a walk.
    let last_indexes = if kept_indexes || (tailed.is_none() && limit.is_none()) {
        LastIndexes::Kept
    } else {
        LastIndexes::Derived
    };
    producer_state::finish(p, &building, last_indexes)?;
    let topic_id: Uuid = p.target_topic_id.parse().map_err(|e| {
        Error::io(
            staging.join(JOURNAL_FILE),
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e}")),
        )
    })?;
    write_staged(
        &building.join(PARTITION_METADATA_FILE),
        PartitionMetadata::new(topic_id).encode().as_bytes(),
    )?;
    let epochs = if p.log_start_offset < p.end_offset() {
        vec![EpochEntry {
            epoch: p.leader_epoch,
            start_offset: p.log_start_offset,
        }]
    } else {
        Vec::new()
    };
    write_staged(
        &building.join(LEADER_EPOCH_CHECKPOINT_FILE),
        LeaderEpochCheckpoint::new(epochs).encode().as_bytes(),
    )?;
    // Nothing written here was fsynced, nor are the directories (this one, and the mirror's side of a handover's
    // renames): one `syncfs` after every build makes them durable before any is swapped in (`swap::execute`).
    Ok(Built {
        result,
        now: true,
        leftovers,
    })
}

/// What handing over one segment did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HandedOver {
    size: u64,
    restamped: u64,
    last_offset: Option<i64>,
    /// Every header was walked (`false`: the segment was confirmed to be in the target's epoch, `settled`).
    walked: bool,
}

/// Move one segment's files from the mirror partition `source` into `building` (what an earlier, interrupted run
/// moved stays; nothing to move when the directory was `moved_whole`), then restamp its `.log` in place — unless
/// `settled` (the mirror's epochs put the whole segment in `epoch`) and `settled::confirm` agrees from the file's
/// first and last batches.
fn hand_over_segment(
    source: &Path,
    building: &Path,
    base: i64,
    epoch: i32,
    settled: bool,
    moved_whole: bool,
    kill: KillSwitch<'_>,
) -> Result<HandedOver> {
    move_segment(source, building, base, moved_whole, kill)?;
    restamp_segment(building, base, epoch, settled, kill)
}

/// A segment handed over and cut back to what a consistent cut keeps of it.
struct CutSegment {
    done: HandedOver,
    /// Which of its companions were the mirror's checked ones before they were cut back.
    trusted: tail_kept::Trusted,
}

/// Hand over the segment `base` a consistent cut falls inside, keeping its first `bytes` of `.log`: moved like any
/// other, its `.log` truncated there and its companions' entries at or after the cut removed — then restamped or
/// settled as a whole segment is. What lies after the cut is not read: the companions kept are the mirror's, checked
/// against the batches at install (a tailed active segment's only where they match what the appender kept, judged
/// before they are cut back; otherwise derived from the kept bytes after, `complete_tailed_segment`).
///
/// A rerun after a crash finds the file cut already (`truncate_beyond` and the cut-back are no-ops then) and the
/// companions no longer what the appender kept: it derives them, the same bytes.
#[allow(clippy::too_many_arguments)]
fn hand_over_cut_segment(
    p: &Planned,
    source: &Path,
    building: &Path,
    base: i64,
    bytes: u64,
    settled: bool,
    moved_whole: bool,
    fresh: bool,
    kill: KillSwitch<'_>,
) -> Result<CutSegment> {
    move_segment(source, building, base, moved_whole, kill)?;
    let tailed = p.tail_active.is_some_and(|t| t.segment_base == base);
    let trusted = match (&p.tail_kept, tailed) {
        (_, false) => tail_kept::Trusted {
            indexes: true,
            txn: true,
        },
        (Some(kept), true) if fresh => tail_kept::trust(kept, building, base)?,
        (_, true) => tail_kept::Trusted::default(),
    };
    truncate_beyond(&building.join(segment_file_name(base, SegmentFileKind::Log)), bytes)?;
    txn_cut::cut_companions_back(building, base, p.log_end_offset)?;
    kill.cut_back()?;
    let done = restamp_segment(building, base, p.leader_epoch, settled, kill)?;
    Ok(CutSegment { done, trusted })
}

/// Move one segment's files from the mirror into `building` (nothing when the directory was `moved_whole`; what an
/// earlier run moved stays).
fn move_segment(source: &Path, building: &Path, base: i64, moved_whole: bool, kill: KillSwitch<'_>) -> Result<()> {
    let kinds: &[SegmentFileKind] = if moved_whole {
        &[]
    } else {
        &[
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
            SegmentFileKind::TxnIndex,
            SegmentFileKind::Log,
        ]
    };
    for &kind in kinds {
        let name = segment_file_name(base, kind);
        let (from, to) = (source.join(&name), building.join(&name));
        if !hand_over_file(&from, &to)? && kind == SegmentFileKind::Log {
            return Err(Error::io(
                &from,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "a journaled segment is neither in the mirror nor in {}",
                        building.display()
                    ),
                ),
            ));
        }
        kill.renamed()?;
    }
    Ok(())
}

/// Restamp the `.log` of segment `base` in `building` in place, unless `settled` and `settled::confirm` agrees.
fn restamp_segment(building: &Path, base: i64, epoch: i32, settled: bool, kill: KillSwitch<'_>) -> Result<HandedOver> {
    let log = building.join(segment_file_name(base, SegmentFileKind::Log));
    let confirmed = if settled {
        settled::confirm(
            &log,
            &building.join(segment_file_name(base, SegmentFileKind::Index)),
            base,
            epoch,
        )?
    } else {
        None
    };
    let done = match confirmed {
        Some(s) => HandedOver {
            size: s.size,
            restamped: 0,
            last_offset: s.last_offset,
            walked: false,
        },
        None => {
            let walk = restamp_in_place(&log, epoch)?;
            HandedOver {
                size: walk.size,
                restamped: walk.restamped,
                last_offset: walk.last_offset,
                walked: true,
            }
        }
    };
    kill.restamped()?;
    Ok(done)
}

/// Hand the mirror partition directory `source` over as `building` by one rename, when it holds nothing the build
/// does not take: each planned segment's `.log` (all of them) and companions, the mirror's leader-epoch
/// checkpoint and `partition.metadata` (which the build overwrites) and producer snapshots (no source snapshot is
/// promoted).
/// Returns the names of the snapshots it brought, for removal after every build ([`Built::leftovers`]); `None`,
/// with nothing changed, for anything else (the files are then moved one by one, and the rest stays).
///
/// Why: one rename instead of a directory created in staging and three or four renames per segment; with
/// 10,000 partitions of one segment each that is 40,000 fewer changes of directories. The mirror then no longer
/// has the partition's directory, as the catalog records the partition promoted and handed over.
fn hand_over_directory(source: &Path, building: &Path, p: &Planned) -> Result<Option<Vec<String>>> {
    let names = match std::fs::read_dir(source) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<Vec<OsString>>>()
            .map_err(|e| Error::io(source, e))?,
        // Not there (or unreadable): the one-by-one path says what is missing.
        Err(_) => return Ok(None),
    };
    let planned: HashSet<i64> = p.segments.iter().copied().collect();
    let mut logs = 0;
    let mut snapshots = Vec::new();
    for name in &names {
        let Some(text) = name.to_str() else { return Ok(None) };
        if is_snapshot(text) {
            snapshots.push(text.to_owned());
            continue;
        }
        match classify_partition_file(text) {
            PartitionFile::Segment { base_offset, kind } if planned.contains(&base_offset) => {
                logs += usize::from(kind == SegmentFileKind::Log);
            }
            PartitionFile::LeaderEpochCheckpoint | PartitionFile::PartitionMetadata => {}
            _ => return Ok(None),
        }
    }
    if logs != planned.len() {
        return Ok(None);
    }
    rename(source, building)?;
    Ok(Some(snapshots))
}

/// Remove the producer snapshots from a partition being built: a directory handed over whole brought the mirror's.
/// The build's own (at its end offset) is written after this.
fn remove_snapshots(building: &Path) -> Result<()> {
    for name in names_in(building)? {
        if name.to_str().is_some_and(is_snapshot) {
            remove_file(&building.join(name))?;
        }
    }
    Ok(())
}

/// Whether `name` is a producer snapshot's.
fn is_snapshot(name: &str) -> bool {
    matches!(
        classify_partition_file(name),
        PartitionFile::Segment {
            kind: SegmentFileKind::Snapshot,
            ..
        }
    )
}

/// The tailed active segment's companions on the mirror are derived (`tail::companions`: index files not fsynced,
/// none on a mirror tailed by an older build), so they are rewritten from the promoted bytes: its offset and time index are rebuilt from its batches (`txn_cut::rebuild_indexes`, as Kafka leaves a rolled
/// segment's; `producer_state::finish` rewrites them identically when it stops being the active segment) and its
/// `.txnindex` holds the aborted transactions whose ABORT marker lies in it (`txn_cut::txn_index_entries`). Done
/// before `finish`, which appends the entries of the transactions promotion cuts after these. What the tail appender
/// kept replaces each walk whose file matches it (`tail_kept`; not for a consistent cut's prefix). Returns whether
/// the offset and time index are the kept ones (then sealed by `finish` like an applied segment's).
fn complete_tailed_segment(
    p: &Planned,
    building: &Path,
    base: i64,
    cut_trusted: Option<tail_kept::Trusted>,
) -> Result<bool> {
    let trusted = match (&p.tail_kept, p.last_segment_limit(), cut_trusted) {
        (_, _, Some(judged)) => judged,
        (Some(kept), None, None) if p.tail_active.is_some_and(|t| t.segment_base == base) => {
            tail_kept::trust(kept, building, base)?
        }
        _ => tail_kept::Trusted::default(),
    };
    if !trusted.txn {
        let entries = txn_cut::txn_index_entries(building, &p.segments, base)?;
        txn_cut::write_txn_index(building, base, &entries)?;
    }
    if !trusted.indexes {
        txn_cut::rebuild_indexes(building, base)?;
    }
    Ok(trusted.indexes)
}
