//! Reading both sides of the partitions to promote: what each mirror partition holds (its segments, end, log
//! start, producer snapshots, and for a tailed one its active segment and what the appender kept) and what each
//! target log dir's partition says (topic id, leader epoch, no data), with the refusals each finds. Read ahead of
//! planning on worker threads ([`inspect_all`]); planning (the parent module) decides from what is found here.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use segment_format::dir::{segment_file_name, PartitionDir, SegmentFileKind, SegmentFiles};
use segment_format::durable::{read_ahead, read_ahead_together};
use segment_format::txn_index::OpenTransaction;
use segment_format::TopicPartition;
use segmirror_catalog::MirrorPartition;

use super::super::error::{Error, Result};
use super::super::journal::TailActive;
use super::super::log_end::log_end;
use super::super::refusal::Refusal;
use super::super::target;
use super::{PromoteRequest, DEFAULT_PARALLEL};

/// What a mirror partition holds.
pub(super) struct MirrorFacts {
    pub(super) log_start_offset: i64,
    pub(super) log_end_offset: i64,
    pub(super) segments: Vec<i64>,
    pub(super) snapshots: Vec<i64>,
    pub(super) tail_active: Option<TailActive>,
    /// What the tail appender kept of the active segment, and how many transactions it recorded open at its end.
    pub(super) tail_kept: Option<crate::direct::Kept>,
    pub(super) tail_open_transactions: Option<Vec<OpenTransaction>>,
    /// The size of the last segment's `.log` where its end was read.
    pub(super) last_segment_bytes: u64,
}

fn inspect_mirror(
    mirror_root: &Path,
    p: &MirrorPartition,
    tp: &TopicPartition,
    refusals: &mut Vec<Refusal>,
) -> Result<Option<MirrorFacts>> {
    let dir = mirror_root.join(tp.dir_name());
    if !dir.is_dir() {
        refusals.push(Refusal::MirrorPartitionMissing {
            partition: tp.clone(),
            path: dir,
        });
        return Ok(None);
    }
    let listing = PartitionDir::open(&dir)?;
    let unexpected = listing
        .temp_files
        .iter()
        .chain(listing.transient_files.iter().map(|t| &t.path))
        .chain(&listing.unknown_files)
        .chain(&listing.orphan_indexes)
        .next();
    if let Some(path) = unexpected {
        refusals.push(Refusal::MirrorUnexpectedFile {
            partition: tp.clone(),
            path: path.clone(),
        });
        return Ok(None);
    }
    let (Some(first), Some(last)) = (listing.segments.first(), listing.segments.last()) else {
        refusals.push(Refusal::NothingInstalled {
            partition: tp.clone(),
            path: dir,
        });
        return Ok(None);
    };
    let tailed = match tailed_active_segment(mirror_root, p, tp, last, refusals)? {
        Tailed::Refused => return Ok(None),
        Tailed::Active(active) => Some(*active),
        Tailed::No => None,
    };
    let tail_active = tailed.as_ref().map(|a| a.active);
    // From the last batches only (the offset index says where they start): see `log_end`. A tailed active segment's
    // end was read already.
    let (log_end_offset, last_segment_bytes) = match &tailed {
        Some(active) => (active.end_offset, active.size),
        None => {
            let size = std::fs::metadata(&last.log).map_err(|e| Error::io(&last.log, e))?.len();
            read_ahead_applied(&listing, last, size);
            let end = log_end(&last.log, last.base_offset)?;
            (end.end_offset, end.size)
        }
    };
    // A tailed partition: the catalog holds the sealed segments below the active one, whose end the state file
    // records (checked in `tailed_active_segment`); otherwise the catalog holds everything up to the end.
    let consistent = match &tail_active {
        Some(_) => true,
        None => p.installed_end_offset == Some(log_end_offset),
    };
    if !consistent {
        refusals.push(Refusal::MirrorCatalogMismatch {
            partition: tp.clone(),
            log: last.log.clone(),
            mirror_end_offset: log_end_offset,
            catalog_end_offset: p.installed_end_offset,
        });
        return Ok(None);
    }
    let (tail_kept, tail_open_transactions) = match tailed {
        Some(active) => (active.kept, active.open_transactions),
        None => kept_at_end(mirror_root, tp, last, log_end_offset)?,
    };
    let log_start_offset = p.log_start_offset.max(first.base_offset);
    if log_start_offset > log_end_offset {
        refusals.push(Refusal::LogStartBeyondEnd {
            partition: tp.clone(),
            log_start_offset,
            log_end_offset,
        });
        return Ok(None);
    }
    // A segment whose successor starts at or below the log start offset holds nothing a consumer may read; the
    // broker's retention would delete it at once, so it is not copied.
    let bases: Vec<i64> = listing.segments.iter().map(|s| s.base_offset).collect();
    let segments: Vec<i64> = bases
        .iter()
        .enumerate()
        .filter(|(i, _)| bases.get(i + 1).is_none_or(|next| *next > log_start_offset))
        .map(|(_, b)| *b)
        .collect();
    let first_kept = segments.first().copied().unwrap_or(log_end_offset);
    let snapshots = listing
        .snapshots
        .iter()
        .map(|s| s.offset)
        .filter(|o| (first_kept..=log_end_offset).contains(o))
        .collect();
    Ok(Some(MirrorFacts {
        log_start_offset,
        log_end_offset,
        segments,
        snapshots,
        tail_active,
        tail_kept,
        tail_open_transactions,
        last_segment_bytes,
    }))
}

/// One target log dir's view of a partition: its index among the request's log dirs, its facts, its refusals.
pub(super) type TargetSeen = (usize, Result<Option<target::TargetFacts>>, Vec<Refusal>);

/// What one partition's mirror and target directories showed, read ahead of planning ([`inspect_all`]).
pub(super) struct Inspected {
    pub(super) mirror: Result<Option<MirrorFacts>>,
    pub(super) mirror_refusals: Vec<Refusal>,
    /// Each log dir that holds the partition (the first log dir when none does, so that its refusal names it).
    pub(super) targets: Vec<TargetSeen>,
}

/// How many inspecting threads per building one ([`PromoteRequest::parallel`]): the reads wait on the disk far more
/// than they use a CPU (a cold page cache: every directory, inode and file tail is a read of its own), so more of
/// them in flight is what shortens planning. At 10,000 partitions on two cores, 16 threads took the promotion from
/// 10.1 to 8.6 s; 32 and 64 gained nothing more (docs/BENCHMARKS.md).
const READS_PER_BUILD: usize = 4;

/// Both sides of every partition of `todo`, read by up to [`READS_PER_BUILD`] threads per building thread
/// ([`PromoteRequest::parallel`]), in `todo`'s order.
///
/// Why threads: these reads (the mirror's listing, state file, last batches and index tails; the target's listing,
/// `partition.metadata` and epoch checkpoint) are some forty system calls per partition and share nothing, so with
/// thousands of partitions one thread left the disk and the other cores idle for about half of a promotion (10,000
/// partitions, timed with `strace -ttt`: the first build began half way through). What they find is merged in
/// order, so the refusals and the plan are the ones a single thread gives.
pub(super) fn inspect_all(
    request: &PromoteRequest,
    targets: &[target::TargetLogDir],
    todo: &[MirrorPartition],
    mirror_exists: bool,
) -> Vec<Inspected> {
    let inspect = |p: &MirrorPartition| {
        let tp = p.key.topic_partition();
        let mut mirror_refusals = Vec::new();
        let mirror = if mirror_exists {
            inspect_mirror(&request.mirror_root, p, &tp, &mut mirror_refusals)
        } else {
            Ok(None)
        };
        let mut holders: Vec<usize> = (0..targets.len()).filter(|i| targets[*i].holds(&tp)).collect();
        if holders.is_empty() {
            holders.push(0);
        }
        let existing = target::ExistingData::of(request.force);
        let seen = holders
            .into_iter()
            .filter_map(|i| {
                let mut refusals = Vec::new();
                let facts = targets.get(i)?.inspect_partition(&tp, existing, &mut refusals);
                Some((i, facts, refusals))
            })
            .collect();
        Inspected {
            mirror,
            mirror_refusals,
            targets: seen,
        }
    };
    let threads = match request.parallel {
        0 => DEFAULT_PARALLEL,
        n => n,
    }
    .saturating_mul(READS_PER_BUILD)
    .min(todo.len())
    .max(1);
    if threads == 1 {
        return todo.iter().map(inspect).collect();
    }
    let next = AtomicUsize::new(0);
    let mut found: Vec<(usize, Inspected)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = todo.get(i) else { break };
                        mine.push((i, inspect(p)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    found.sort_unstable_by_key(|(i, _)| *i);
    found.into_iter().map(|(_, seen)| seen).collect()
}

/// Whether a mirror partition's last segment is a tailed active segment.
enum Tailed {
    /// Not tailed, or the tail's last segment is sealed (and so installed in the catalog).
    No,
    Active(Box<ActiveTail>),
    /// A refusal was recorded.
    Refused,
}

/// A tailed active segment as planning found it: what the plan journals, the end its batches give (the recorded
/// one), and what the appender kept of it (as [`kept_at_end`] would return it, without reading the state file again).
struct ActiveTail {
    active: TailActive,
    end_offset: i64,
    /// The recorded size of the active segment (checked against the file).
    size: u64,
    kept: Option<crate::direct::Kept>,
    open_transactions: Option<Vec<OpenTransaction>>,
}

/// A tailed partition (one with a tail state file whose last segment is not sealed) is promotable when its last
/// `.log` is that active segment at exactly the recorded durable size, the catalog's installed (sealed) end lies
/// at or below its base (or inside it, below the recorded end: an unsealed prefix the tail took over), and its
/// batches end where the state file says. See `crate::direct` (`catalog`, `active`).
fn tailed_active_segment(
    mirror_root: &Path,
    p: &MirrorPartition,
    tp: &TopicPartition,
    last: &SegmentFiles,
    refusals: &mut Vec<Refusal>,
) -> Result<Tailed> {
    let state = match crate::direct::recorded_active_segment(mirror_root, &tp.topic, tp.partition) {
        Ok(Some(state)) if !state.sealed => state,
        Ok(_) => return Ok(Tailed::No),
        Err(e) => {
            refusals.push(Refusal::TailStateUnreadable {
                partition: tp.clone(),
                reason: e.to_string(),
            });
            return Ok(Tailed::Refused);
        }
    };
    let log = last
        .log
        .with_file_name(segment_file_name(state.segment_base, SegmentFileKind::Log));
    if last.base_offset > state.segment_base {
        // A segment beyond the active one: not written by the appender.
        refusals.push(Refusal::MirrorUnexpectedFile {
            partition: tp.clone(),
            path: last.log.clone(),
        });
        return Ok(Tailed::Refused);
    }
    let on_disk = match std::fs::metadata(&log) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(Error::io(&log, e)),
    };
    if on_disk != state.position {
        refusals.push(Refusal::TailActiveSizeMismatch {
            partition: tp.clone(),
            log,
            recorded: state.position,
            on_disk,
        });
        return Ok(Tailed::Refused);
    }
    if last.base_offset < state.segment_base {
        // Claimed at 0 bytes and never created (a crash in between): the partition ends with its sealed segments.
        return Ok(Tailed::No);
    }
    read_ahead_active(last, state.position);
    let recorded_end = if state.position == 0 {
        state.segment_base
    } else {
        state.next_offset.unwrap_or(state.segment_base)
    };
    // The catalog's end inside the active segment: either its seal was recorded in the catalog and a crash came
    // before the state file said so (the catalog's end is then the recorded end, and decides), or the segment is
    // an unsealed prefix `apply` installed that the tail took over and appended to (`tail::handover`: the
    // catalog's end lies below the recorded one, and the state file describes the segment).
    if p.installed_end_offset
        .is_some_and(|end| end > state.segment_base && end >= recorded_end)
    {
        return Ok(Tailed::No);
    }
    let end = log_end(&log, state.segment_base)?.end_offset;
    if end != recorded_end {
        refusals.push(Refusal::MirrorCatalogMismatch {
            partition: tp.clone(),
            log,
            mirror_end_offset: end,
            catalog_end_offset: Some(recorded_end),
        });
        return Ok(Tailed::Refused);
    }
    // What the appender kept is about this segment when the state file describes the mirror's end (the file has the
    // recorded size, checked above, and `end` is the recorded next offset): `kept_at_end`'s rule.
    let describes_end = state.next_offset == Some(end);
    Ok(Tailed::Active(Box::new(ActiveTail {
        active: TailActive {
            segment_base: state.segment_base,
            catalog_end_offset: p.installed_end_offset,
        },
        end_offset: end,
        size: state.position,
        kept: state.kept.clone().filter(|_| describes_end),
        open_transactions: state
            .open_transactions
            .filter(|_| describes_end && state.kept.is_some()),
    })))
}

/// Ask the kernel now, without waiting, for what promotion reads later of a tailed partition's active segment of
/// `size` bytes: its last batches (`log_end`, next), its first batch (`build::settled`), and its offset, time and
/// transaction indexes whole (`log_end`, `tail_kept::trust`).
///
/// Why: with a cold page cache each of these was a wait of its own, and building waits with a few threads where
/// planning has [`READS_PER_BUILD`] times as many; asked for together, without waiting, they arrive meanwhile
/// (10,000 partitions: docs/BENCHMARKS.md).
fn read_ahead_active(active: &SegmentFiles, size: u64) {
    let companions = [
        active.index.as_ref(),
        active.time_index.as_ref(),
        active.txn_index.as_ref(),
    ];
    read_ahead_together(companions.into_iter().flatten().map(PathBuf::as_path));
    read_ahead_log(&active.log, size);
}

/// [`read_ahead_active`] for an applied partition (`listing`) whose last segment is `last`, of `size` bytes: its
/// first and last batches, its offset, time and transaction indexes (`log_end`, `txn_cut::seal_kept_indexes`), and
/// the partition's newest producer snapshot (`recorded_txns::open_at`, where the walk would start) and leader-epoch
/// checkpoint (`build`, the mirror's epochs).
///
/// The small files are asked in one submission, in the order an install writes them: the filesystem usually gives
/// them consecutive blocks, and one submission sends those to the disk as one request where one hint per file sent
/// four (10,000 partitions: docs/BENCHMARKS.md).
fn read_ahead_applied(listing: &PartitionDir, last: &SegmentFiles, size: u64) {
    let companions = [
        last.index.as_ref(),
        last.time_index.as_ref(),
        last.txn_index.as_ref(),
        listing.snapshots.last().map(|s| &s.path),
        listing.leader_epoch_checkpoint.as_ref(),
    ];
    read_ahead_together(companions.into_iter().flatten().map(PathBuf::as_path));
    read_ahead_log(&last.log, size);
}

/// Ask for a last segment's `.log` of `size` bytes: its first batch's header lies in the first page, its last
/// batches mostly in the last few; a segment of up to 128 KiB is asked for whole, one request costing the disk about
/// what two small ones do.
fn read_ahead_log(log: &Path, size: u64) {
    const LOG_HEAD: u64 = 4096;
    const LOG_TAIL: u64 = 16 * 1024;
    const LOG_WHOLE: u64 = 128 * 1024;
    if size <= LOG_WHOLE {
        read_ahead(log, 0, Some(size));
    } else {
        read_ahead(log, 0, Some(LOG_HEAD));
        read_ahead(log, size.saturating_sub(LOG_TAIL), None);
    }
}

/// What the tail appender kept for promotion (`crate::direct::Kept`) and the transactions it recorded open, when
/// its state file describes exactly the mirror's end: its segment is the last one (`last`), at the recorded size,
/// and its next offset is the log end offset found. `(None, None)` otherwise (not tailed, or kept by no appender, or
/// anything else: promotion then walks, as it always did). A state file that cannot be read was refused already
/// for an active segment; for a sealed one it only means nothing is trusted.
fn kept_at_end(
    mirror_root: &Path,
    tp: &TopicPartition,
    last: &SegmentFiles,
    log_end_offset: i64,
) -> Result<(Option<crate::direct::Kept>, Option<Vec<OpenTransaction>>)> {
    let Ok(Some(state)) = crate::direct::recorded_active_segment(mirror_root, &tp.topic, tp.partition) else {
        return Ok((None, None));
    };
    if state.kept.is_none() || state.segment_base != last.base_offset || state.next_offset != Some(log_end_offset) {
        return Ok((None, None));
    }
    let size = std::fs::metadata(&last.log).map_err(|e| Error::io(&last.log, e))?.len();
    if size != state.position {
        return Ok((None, None));
    }
    Ok((state.kept, state.open_transactions))
}
