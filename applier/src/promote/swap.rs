//! Putting built partitions live and recording them: each `.ready` directory takes the live partition's place
//! (which is kept as `.old` in staging), the root checkpoints are rewritten, the catalog marks the partitions
//! promoted, and staging is removed.
//!
//! Why this order: every step is idempotent and the names on disk (`.ready`, `.old`) say how far each partition
//! got, so a rerun after a crash at any point finishes exactly the journaled promotion.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use segment_format::durable::fsync_dir;
use segmirror_catalog::{Catalog, EventKind, PartitionKey, PartitionState, Subject};

use super::build::{build, staged, OLD, READY};
use super::error::{Error, Result};
use super::files::{remove_dir_all, remove_file, rename};
use super::handover::KillSwitch;
use super::journal::{Journal, Planned, Step, JOURNAL_FILE, PROMOTION_DIR};
use super::plan::DEFAULT_PARALLEL;
use super::report::{Outcome, PromotedPartition};
use super::target;

/// Carry out a journaled promotion from whatever state the disk is in, building up to `parallel` partitions at
/// once. Every step is idempotent.
pub(super) fn execute(
    journal: &Journal,
    log_dir: &Path,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
    outcome: Outcome,
    parallel: usize,
    kill: KillSwitch<'_>,
) -> Result<Vec<PromotedPartition>> {
    let staging = log_dir.join(PROMOTION_DIR);
    let results = build_all(journal, &staging, outcome, hook, parallel, kill)?;
    // Every `.ready` name durable at once, before anything live changes.
    fsync_dir(&staging)?;
    swap_all(&journal.partitions, log_dir, &staging, hook)?;
    target::write_root_checkpoints(log_dir, &journal.partitions)?;
    hook(Step::Checkpointed);
    for p in &journal.partitions {
        record(catalog, &journal.link, p, log_dir)?;
    }
    hook(Step::Recorded);
    // The journal goes first: a staging directory without one holds nothing left to do.
    remove_file(&staging.join(JOURNAL_FILE))?;
    fsync_dir(&staging)?;
    remove_dir_all(&staging)?;
    fsync_dir(log_dir)?;
    Ok(results)
}

/// Build every journaled partition (`build`), `parallel` at a time (at least one, at most one per partition), in
/// the order of the journal. The hook sees `Built` on this thread as each partition completes.
///
/// Why in parallel: a partition's build is a copy of its segments with write-behind and one fsync per file; one
/// at a time leaves the disk idle while a partition's files are fsynced and its directory renamed, and one CPU idle
/// while the other reads and checks headers. Partitions share nothing in staging, and nothing live changes before
/// every build is done (the swaps come after), so the crash protocol is unchanged: a crash mid-build leaves
/// `.building` (rebuilt by the rerun) and `.ready` directories, whichever partitions got that far.
///
/// On a failure the workers take no further partition; the builds under way finish (or fail) and every failure
/// is reported: the refusals of all failed partitions together, or else the first other error.
fn build_all(
    journal: &Journal,
    staging: &Path,
    outcome: Outcome,
    hook: &mut dyn FnMut(Step),
    parallel: usize,
    kill: KillSwitch<'_>,
) -> Result<Vec<PromotedPartition>> {
    let partitions = &journal.partitions;
    let wanted = if parallel == 0 { DEFAULT_PARALLEL } else { parallel };
    let workers = wanted.min(partitions.len()).max(1);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut results: Vec<Option<PromotedPartition>> = vec![None; partitions.len()];
    let mut failures: Vec<(usize, Error)> = Vec::new();
    std::thread::scope(|scope| {
        // A panic on this thread (the crash tests' hook) stops the workers taking new partitions, as a crash would.
        let _stop_on_unwind = StopOnDrop(&stop);
        let (sender, receiver) = mpsc::channel();
        for _ in 0..workers {
            let sender = sender.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(p) = partitions.get(i) else { break };
                    let built = build(journal, p, staging, outcome, kill);
                    if built.is_err() {
                        stop.store(true, Ordering::SeqCst);
                    }
                    if sender.send((i, built)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for (i, built) in receiver {
            match built {
                Ok((done, built_now)) => {
                    if let Some(p) = partitions.get(i).filter(|_| built_now) {
                        hook(Step::Built(p.tp()));
                    }
                    if let Some(slot) = results.get_mut(i) {
                        *slot = Some(done);
                    }
                }
                Err(e) => failures.push((i, e)),
            }
        }
    });
    if !failures.is_empty() {
        failures.sort_by_key(|(i, _)| *i);
        let all_refused = failures.iter().all(|(_, e)| matches!(e, Error::Refused { .. }));
        if !all_refused {
            let first = failures.into_iter().find(|(_, e)| !matches!(e, Error::Refused { .. }));
            return Err(first.map(|(_, e)| e).unwrap_or(Error::Refused { refusals: Vec::new() }));
        }
        let refusals = failures
            .into_iter()
            .flat_map(|(_, e)| match e {
                Error::Refused { refusals } => refusals,
                _ => Vec::new(),
            })
            .collect();
        return Err(Error::Refused { refusals });
    }
    // Every partition was built: a worker stops early only after a failure.
    Ok(results.into_iter().flatten().collect())
}

/// Sets the flag when dropped (also while unwinding).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Put each `<tp>.ready` in place of its live partition directory, keeping the live one as `<tp>.old`: first every
/// live directory is moved aside, then every `.ready` one moved in, with one fsync of the log dir and of staging
/// after each round instead of four per partition. Why that is safe: the names say how far each partition got
/// (`.old` present: moved aside; `.ready` absent: swapped), whatever subset of the renames a crash kept, and the
/// root checkpoints are written only after the second round is durable. A partition swapped by an earlier run
/// (no `.ready`) is skipped.
fn swap_all(partitions: &[Planned], log_dir: &Path, staging: &Path, hook: &mut dyn FnMut(Step)) -> Result<()> {
    let pending: Vec<&Planned> = partitions
        .iter()
        .filter(|p| staged(staging, p, READY).exists())
        .collect();
    let mut moved = Vec::new();
    for p in &pending {
        let old = staged(staging, p, OLD);
        if !old.exists() {
            rename(&log_dir.join(p.tp().dir_name()), &old)?;
            moved.push(p.tp());
        }
    }
    if !moved.is_empty() {
        fsync_dir(log_dir)?;
        fsync_dir(staging)?;
    }
    for tp in moved {
        hook(Step::MovedAside(tp));
    }
    for p in &pending {
        rename(&staged(staging, p, READY), &log_dir.join(p.tp().dir_name()))?;
    }
    if !pending.is_empty() {
        fsync_dir(staging)?;
        fsync_dir(log_dir)?;
    }
    for p in pending {
        hook(Step::Swapped(p.tp()));
    }
    Ok(())
}

/// Mark the partition promoted in the catalog, with the target topic id.
fn record(catalog: &mut Catalog, link: &str, p: &Planned, log_dir: &Path) -> Result<()> {
    let key = PartitionKey::of(link, &p.tp());
    let row = catalog.partition(&key)?;
    if row.state == PartitionState::Promoted {
        return Ok(());
    }
    catalog.set_mirror_topic_id(row.id, &p.target_topic_id)?;
    if p.handover {
        catalog.set_handed_over(row.id, &log_dir.display().to_string())?;
    }
    let detail = format!(
        "promoted into {}: offsets [{}, {}), {} segment(s), leader epoch restamped to {}, target topic id {} \
         (state before promotion: {}); producer state starts empty at offset {}",
        log_dir.display(),
        p.log_start_offset,
        p.end_offset(),
        p.segments.len(),
        p.leader_epoch,
        p.target_topic_id,
        p.previous_state,
        p.end_offset()
    );
    catalog.append_event(Subject::Partition(&key), EventKind::Note, &detail)?;
    for c in &p.cut {
        let detail = format!(
            "transaction open at the mirror's end aborted at promotion: producer id {} (epoch {}), first offset {}, \
             {} record(s), ABORT marker at offset {}",
            c.producer_id, c.producer_epoch, c.first_offset, c.records, c.marker_offset
        );
        catalog.append_event(Subject::Partition(&key), EventKind::Note, &detail)?;
    }
    if let Some(c) = &p.consistent_cut {
        let detail = format!(
            "consistent cut at {} ms: promoted up to offset {} of the mirror's {}; left behind {} offset(s) in {} \
             batch(es), {} bytes (the batch at offset {} has max timestamp {})",
            c.timestamp_ms,
            c.cut_offset,
            c.mirror_end_offset,
            c.left_offsets,
            c.left_batches,
            c.left_bytes,
            c.first_left_offset,
            c.first_left_timestamp
        );
        catalog.append_event(Subject::Partition(&key), EventKind::Note, &detail)?;
    }
    catalog.set_partition_state(row.id, PartitionState::Promoted)?;
    Ok(())
}
