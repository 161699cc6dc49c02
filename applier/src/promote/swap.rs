//! Putting built partitions live and recording them: once every build is durable (one `syncfs`, then the name
//! [`BUILDS_DURABLE`]), each `.building` directory takes the live partition's place (which is kept as `.old` in
//! staging); once every swap is durable ([`SWAPS_DURABLE`]), the root checkpoints are rewritten and the catalog
//! marks the partitions promoted while the `.old` directories are removed, then staging is removed.
//!
//! Why this order: every step is idempotent and the names on disk (the two markers, `.building`, `.old`) say how
//! far the promotion and each partition got, so a rerun after a crash at any point finishes exactly the journaled
//! promotion. Why two markers rather than a name per partition: with 10,000 partitions, a rename per partition to
//! say "built" was 10,000 system calls, and the rerun's need for each `.old` (which says "swapped") kept the
//! removal of 10,000 directories behind the catalog's writes.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use segment_format::durable::{fsync_dir, FilesystemSync};
use segmirror_catalog::{Catalog, MirrorPartition, PartitionKey, PartitionState, PromotionRecord};

use super::build::{build, planned_result, staged, staged_name, BUILDING, OLD, READY};
use super::error::{Error, Result};
use super::files::{mark_durably, marked, names_in, remove_dir_all, remove_entries_parallel, remove_file, rename};
use super::handover::KillSwitch;
use super::journal::{read_journal, write_journal, Journal, Planned, Step, JOURNAL_FILE, PROMOTION_DIR};
use super::plan::DEFAULT_PARALLEL;
use super::report::{Outcome, PromotedPartition, ReplicaOutcome, ReplicaReport};
use super::target;

/// In staging, once every partition's build is durable (after the `syncfs`): each `.building` directory is complete,
/// and a rerun swaps them in without building anything again. One name for all, instead of a rename per partition.
pub(super) const BUILDS_DURABLE: &str = "builds-durable";
/// In staging, once every partition is swapped in (durably): nothing left in staging is needed but the journal, so
/// the target's original directories may go while the root checkpoints and the catalog are written, and a rerun
/// goes straight to those.
pub(super) const SWAPS_DURABLE: &str = "swaps-durable";

/// What [`execute`] did in each log dir, in the journal's order.
pub(super) struct Executed {
    /// Per partition, the first log dir's result (bytes and batches counted over every log dir).
    pub(super) partitions: Vec<PromotedPartition>,
    pub(super) log_dirs: Vec<ReplicaReport>,
}

/// Carry out a journaled promotion from whatever state the disk is in, log dir after log dir (replicas: every log
/// dir the journal names, in its order; `found_in` for a journal written before replicas), building up to
/// `parallel` partitions at once. Every step is idempotent.
///
/// Per log dir: build, swap, root checkpoints, then the catalog records the log dir for its partitions
/// (`promoted_replicas`), and — in the last log dir only — marks every partition promoted; then that log dir's
/// journal is removed. So a log dir without a journal whose partitions the catalog records in it is finished and
/// skipped by a rerun; one without either never got its journal (a crash while the journals were written) and
/// gets it now: the same plan, so the same bytes as the others.
pub(super) fn execute(
    journal: &Journal,
    found_in: &Path,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
    outcome: Outcome,
    parallel: usize,
    kill: KillSwitch<'_>,
) -> Result<Executed> {
    let dirs = journal.per_log_dir(found_in);
    // The link's partitions from one query, not one per partition (10,000 partitions).
    let rows: HashMap<(String, i32), MirrorPartition> = catalog
        .partitions(&journal.link)?
        .into_iter()
        .map(|row| ((row.key.topic.clone(), row.key.partition), row))
        .collect();
    let mut merged: Vec<PromotedPartition> = Vec::new();
    // Where each partition is in `merged`: a lookup per partition, not a scan (10,000 partitions).
    let mut merged_at: HashMap<(String, i32), usize> = HashMap::new();
    let mut log_dirs = Vec::new();
    let mut earlier = Vec::new();
    for (i, (log_dir, sub)) in dirs.iter().enumerate() {
        let last = i + 1 == dirs.len();
        let staging = log_dir.join(PROMOTION_DIR);
        let ids = sub
            .partitions
            .iter()
            .map(|p| catalog_row(catalog, &rows, &journal.link, p).map(|row| row.id))
            .collect::<Result<Vec<_>>>()?;
        let name = log_dir.display().to_string();
        match read_journal(&staging)? {
            Some(found) if found != *journal => {
                return Err(Error::io(
                    staging.join(JOURNAL_FILE),
                    std::io::Error::other(
                        "the journal of another promotion: run promote with this log dir alone to finish it first",
                    ),
                ))
            }
            Some(_) => {}
            None => {
                let replicas = catalog.promoted_replicas_of_link(&journal.link)?;
                let finished = ids
                    .iter()
                    .all(|id| replicas.get(id).is_some_and(|dirs| dirs.contains(&name)));
                if finished {
                    earlier.push((
                        log_dir.clone(),
                        sub.partitions.iter().map(Planned::tp).collect::<Vec<_>>(),
                    ));
                    log_dirs.push(ReplicaReport {
                        log_dir: log_dir.clone(),
                        outcome: ReplicaOutcome::FinishedEarlier,
                        partitions: sub.partitions.len(),
                        log_bytes: 0,
                    });
                    continue;
                }
                if staging.exists() {
                    remove_dir_all(&staging)?;
                }
                write_journal(journal, log_dir, &staging)?;
            }
        }
        // Where the time goes, for `SEGMIRROR_LOG=segmirror_applier=debug`: each phase's end, from the first.
        let started = std::time::Instant::now();
        let phase = |name: &str| tracing::debug!(log_dir = %log_dir.display(), elapsed = ?started.elapsed(), "{name}");
        let swapped = marked(&staging, SWAPS_DURABLE)?;
        let results = if swapped || marked(&staging, BUILDS_DURABLE)? {
            // Every build is durable already (and maybe swapped in): none is built again.
            sub.partitions.iter().map(|p| planned_result(p, outcome)).collect()
        } else {
            // Opened before the builds, so that it reports a failed write-back of any file they write.
            let filesystem = FilesystemSync::open(log_dir)?;
            let results = build_all(sub, &staging, outcome, hook, parallel, kill)?;
            phase("partitions built in staging");
            // Every build's files and directories durable at once, then said so by one name, before anything live
            // changes.
            filesystem.sync()?;
            phase("staging durable (syncfs)");
            mark_durably(&staging, BUILDS_DURABLE)?;
            results
        };
        if !swapped {
            swap_all(&sub.partitions, log_dir, &staging, hook)?;
            mark_durably(&staging, SWAPS_DURABLE)?;
            phase("partitions swapped in");
        }
        // The target's original directories (`.old`) go while the root checkpoints and the catalog are written:
        // a rerun no longer needs them (it finds `SWAPS_DURABLE`), and the two share no file.
        let threads = parallel.max(DEFAULT_PARALLEL);
        std::thread::scope(|scope| -> Result<()> {
            let removal = scope.spawn(|| {
                let removed =
                    remove_entries_parallel(&staging, threads, &[JOURNAL_FILE, BUILDS_DURABLE, SWAPS_DURABLE]);
                phase("the target's original directories removed");
                removed
            });
            let recorded = (|| -> Result<()> {
                target::write_root_checkpoints(log_dir, &sub.partitions)?;
                phase("root checkpoints written");
                hook(Step::Checkpointed);
                catalog.record_promoted_replicas(&ids, &name)?;
                phase("replicas recorded");
                if last {
                    record(catalog, journal, &rows, found_in)?;
                    hook(Step::Recorded);
                }
                phase("root checkpoints written and the catalog recorded");
                Ok(())
            })();
            let removed = removal
                .join()
                .unwrap_or_else(|_| Err(Error::io(&staging, std::io::Error::other("a removal thread panicked"))));
            recorded.and(removed)
        })?;
        // The journal goes first: a staging directory without one holds nothing left to do.
        remove_file(&staging.join(JOURNAL_FILE))?;
        fsync_dir(&staging)?;
        remove_dir_all(&staging)?;
        fsync_dir(log_dir)?;
        phase("staging removed");
        log_dirs.push(ReplicaReport {
            log_dir: log_dir.clone(),
            outcome: match outcome {
                Outcome::Resumed => ReplicaOutcome::Resumed,
                _ => ReplicaOutcome::Installed,
            },
            partitions: sub.partitions.len(),
            log_bytes: results.iter().map(|r| r.log_bytes).sum(),
        });
        for mut r in results {
            r.log_dirs = vec![log_dir.clone()];
            match merged_at.entry((r.topic.clone(), r.partition)) {
                Entry::Occupied(at) => {
                    if let Some(m) = merged.get_mut(*at.get()) {
                        m.log_bytes += r.log_bytes;
                        m.batches_restamped += r.batches_restamped;
                        m.handed_over |= r.handed_over;
                        m.log_dirs.extend(r.log_dirs);
                    }
                }
                Entry::Vacant(at) => {
                    at.insert(merged.len());
                    merged.push(r);
                }
            }
        }
        if !last {
            hook(Step::ReplicaInstalled(log_dir.clone()));
        }
    }
    // A partition of a log dir finished earlier still belongs to the report.
    for p in &journal.partitions {
        if let Entry::Vacant(slot) = merged_at.entry((p.topic.clone(), p.partition)) {
            slot.insert(merged.len());
            merged.push(super::build::planned_result(p, outcome));
        }
    }
    for (log_dir, tps) in earlier {
        let tps: HashSet<(&str, i32)> = tps.iter().map(|tp| (tp.topic.as_str(), tp.partition)).collect();
        for m in merged
            .iter_mut()
            .filter(|m| tps.contains(&(m.topic.as_str(), m.partition)))
        {
            m.log_dirs.push(log_dir.clone());
        }
    }
    Ok(Executed {
        partitions: merged,
        log_dirs,
    })
}

/// Build every journaled partition (`build`), `parallel` at a time (at least one, at most one per partition), in
/// the order of the journal. The hook sees `Built` on this thread as each partition completes.
///
/// Why in parallel: a partition's build is a copy of its segments with write-behind and one fsync per file; one
/// at a time leaves the disk idle while a partition's files are fsynced and its directory renamed, and one CPU idle
/// while the other reads and checks headers. Partitions share nothing in staging, and nothing live changes before
/// every build is done (the swaps come after), so the crash protocol is unchanged: a crash mid-build leaves
/// `.building` directories (rebuilt by the rerun, or finished when they hold a handover's files), whichever
/// partitions got that far.
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
    let held = names_in(staging)?;
    let held = &held;
    let wanted = if parallel == 0 { DEFAULT_PARALLEL } else { parallel };
    let workers = wanted.min(partitions.len()).max(1);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut results: Vec<Option<PromotedPartition>> = vec![None; partitions.len()];
    let mut leftovers = Vec::new();
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
                    let built = build(journal, p, staging, held, outcome, kill);
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
                Ok(built) => {
                    if let Some(p) = partitions.get(i).filter(|_| built.now) {
                        hook(Step::Built(p.tp()));
                    }
                    leftovers.extend(built.leftovers);
                    if let Some(slot) = results.get_mut(i) {
                        *slot = Some(built.result);
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
    // What the builds leave to remove, now that none is creating files (`build::Built::leftovers`).
    for path in leftovers {
        remove_file(&path)?;
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

/// Put each built `<tp>.building` (every build is durable: [`BUILDS_DURABLE`]) in place of its live partition
/// directory, keeping the live one as `<tp>.old`: first every live directory is moved aside, then every built one
/// moved in, with one fsync of the log dir and of staging after each round instead of four per partition. Why that
/// is safe: the names say how far each partition got (`.old` present: moved aside; `.building` absent: swapped),
/// whatever subset of the renames a crash kept, and the root checkpoints are written only after the second round
/// is durable. A partition swapped by an earlier run (no `.building`) is skipped. A `<tp>.ready` (an earlier
/// build's name for a durable build, per partition) is swapped in the same way.
fn swap_all(partitions: &[Planned], log_dir: &Path, staging: &Path, hook: &mut dyn FnMut(Step)) -> Result<()> {
    // Which names staging holds, from one listing rather than two `stat`s per partition.
    let held = names_in(staging)?;
    let pending: Vec<(&Planned, &str)> = partitions
        .iter()
        .filter_map(|p| {
            [READY, BUILDING]
                .into_iter()
                .find(|suffix| held.contains(&staged_name(p, suffix)))
                .map(|suffix| (p, suffix))
        })
        .collect();
    let mut moved = Vec::new();
    for (p, _) in &pending {
        if !held.contains(&staged_name(p, OLD)) {
            rename(&log_dir.join(p.tp().dir_name()), &staged(staging, p, OLD))?;
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
    for (p, suffix) in &pending {
        rename(&staged(staging, p, suffix), &log_dir.join(p.tp().dir_name()))?;
    }
    if !pending.is_empty() {
        fsync_dir(staging)?;
        fsync_dir(log_dir)?;
    }
    for (p, _) in pending {
        hook(Step::Swapped(p.tp()));
    }
    Ok(())
}

/// Mark every partition of the journal promoted in the catalog, in one transaction
/// ([`Catalog::record_promotions`]), with its target topic id, the log dir its files were handed over to (if they
/// were) and the notes saying what was promoted. A partition already promoted (an earlier run got that far) is left
/// as it is. `rows`: the link's partitions as the catalog held them before this run's writes (their ids and
/// states; a partition missing there is looked up on its own).
fn record(
    catalog: &mut Catalog,
    journal: &Journal,
    rows: &HashMap<(String, i32), MirrorPartition>,
    found_in: &Path,
) -> Result<()> {
    let replicas = catalog.promoted_replicas_of_link(&journal.link)?;
    let mut facts = Vec::with_capacity(journal.partitions.len());
    for p in &journal.partitions {
        let row = catalog_row(catalog, rows, &journal.link, p)?;
        if row.state == PartitionState::Promoted {
            continue;
        }
        let dirs = replicas.get(&row.id).cloned().unwrap_or_default();
        let handed_over_to = journal.handed_over_to(p, found_in).map(|dir| dir.display().to_string());
        facts.push((row.id, p, handed_over_to, notes(p, &dirs)));
    }
    let records: Vec<PromotionRecord<'_>> = facts
        .iter_mut()
        .map(|(id, p, handed_over_to, notes)| PromotionRecord {
            id: *id,
            mirror_topic_id: &p.target_topic_id,
            handed_over_to: handed_over_to.as_deref(),
            notes: std::mem::take(notes),
        })
        .collect();
    catalog.record_promotions(&records)?;
    Ok(())
}

/// The catalog row of a journaled partition: from `rows` (the link's, read at once), else looked up on its own (which
/// says when it is not in the catalog).
fn catalog_row(
    catalog: &Catalog,
    rows: &HashMap<(String, i32), MirrorPartition>,
    link: &str,
    p: &Planned,
) -> Result<MirrorPartition> {
    match rows.get(&(p.topic.clone(), p.partition)) {
        Some(row) => Ok(row.clone()),
        None => Ok(catalog.partition(&PartitionKey::of(link, &p.tp()))?),
    }
}

/// The catalog notes of a promoted partition: what was promoted into `dirs`, each transaction aborted at its end,
/// and a consistent cut.
fn notes(p: &Planned, dirs: &[String]) -> Vec<String> {
    let mut notes = vec![format!(
        "promoted into {}: offsets [{}, {}), {} segment(s), leader epoch restamped to {}, target topic id {} \
         (state before promotion: {}); producer state starts empty at offset {}",
        dirs.join(", "),
        p.log_start_offset,
        p.end_offset(),
        p.segments.len(),
        p.leader_epoch,
        p.target_topic_id,
        p.previous_state,
        p.end_offset()
    )];
    for c in &p.cut {
        notes.push(format!(
            "transaction open at the mirror's end aborted at promotion: producer id {} (epoch {}), first offset {}, \
             {} record(s), ABORT marker at offset {}",
            c.producer_id, c.producer_epoch, c.first_offset, c.records, c.marker_offset
        ));
    }
    if let Some(c) = &p.consistent_cut {
        notes.push(format!(
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
        ));
    }
    notes
}
