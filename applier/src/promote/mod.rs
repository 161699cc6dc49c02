//! Promotion: hand mirror partitions to a real, stopped Kafka broker.
//!
//! A mirror partition (`<mirror-root>/<topic>-<partition>/`) holds the source's segments byte for byte. Promotion
//! installs them into the target broker's log dir in place of the empty partition the target cluster created for
//! the same topic, so that the broker serves every record at its source offset, accepts new writes after them and
//! restarts cleanly; then the catalog marks the partition `promoted` and the applier never writes it again.
//!
//! # What the broker needs (each point established against a real Kafka 4.4 broker, `tests/tests/e2e_promote.rs`)
//! - `partition.metadata` with the **target** cluster's topic id: a directory carrying another id is set aside as
//!   stray at load.
//! - Every magic-2 batch's `partitionLeaderEpoch` **restamped** to the target partition's leader epoch, and a
//!   `leader-epoch-checkpoint` of one entry `(that epoch, log start offset)`. Source epochs are usually higher than
//!   the target's; a KIP-320 consumer that read a record of epoch 7 from a leader of epoch 2 commits epoch 7, and on
//!   resuming the Java client refuses the broker's metadata as stale forever while librdkafka's offset validation
//!   fails and resets to `auto.offset.reset`. The broker itself truncates the "conflicting" epoch cache on becoming
//!   leader. The field is outside the batch CRC and Kafka's own leader restamps on append, so restamping keeps the
//!   data valid. docs/promotion.md ("Leader epochs") records the evidence and the rejected options.
//! - **No producer state of the source's**: the target cluster hands out producer ids the source used, and the
//!   broker would take a new producer's first batches for duplicates of the source's. No source snapshot is
//!   copied; after the data comes an empty active segment with an empty producer snapshot at its base, so that
//!   neither a clean nor an unclean start ever replays a source segment (`producer_state`).
//! - **No open transaction**: one reaching the mirror's end is aborted by an ABORT marker appended after the data,
//!   with its `.txnindex` entry (`txn_cut`); the report and the catalog say what was cut. docs/promotion.md
//!   ("Producer state", "Open transactions") records the evidence.
//! - Root checkpoints: `recovery-point-offset-checkpoint` = log end offset (no recovery needed),
//!   `replication-offset-checkpoint` (high watermark) = log end offset, `log-start-offset-checkpoint` = the source's
//!   log start offset when it lies above the first segment's base offset (Kafka writes it only then; without it
//!   the broker would serve records the source had deleted), and no stale `cleaner-offset-checkpoint` entry. Other
//!   partitions' entries are kept.
//!
//! # Refusals
//! Nothing is changed unless every selected partition can be promoted: the broker must be stopped (its log dir
//! `.lock` free — promotion holds it until done, so a broker started by mistake fails instead of loading half a
//! partition), the mirror root and the `--link` must exist (they are looked up, never created), the topic must
//! exist in the target log dir with a `partition.metadata` carrying the topic id the target's metadata log names
//! and as many partition directories as the mirror has partitions, the target partitions must hold no data
//! (unless `force`), no applier may hold the mirror, each mirror partition must be exactly what the catalog says
//! is installed (no leftovers of an interrupted apply; a tailed partition: plus its active segment, see below), and the target topic's retention must not delete promoted data at the broker's first
//! retention check (unless `allow_retention_delete`; [`retention`] says how it is predicted from the target's
//! metadata log and `server.properties`). The checks go on past the first failure — both sides of every partition
//! are inspected even when one refuses, and a running broker's log dir is still read — so one run reports every
//! reason for every partition ([`Refusal`], [`Error::Refused`]; the CLI exits 2).
//!
//! # Tailed partitions
//! A partition the tail appender (`crate::direct`, `segmirror tail-apply`) wrote has its sealed segments recorded in
//! the catalog as installed versions and its **active segment** only in the appender's state file
//! (`<mirror>/.tail/<tp>.json`: base offset and durable size; why the position stays there is in `crate::direct`'s
//! `catalog` module). Planning accepts such a partition when its last `.log` is that segment at exactly the
//! recorded size (bytes beyond it were never acknowledged: a refusal naming the file and both sizes, as is a
//! shorter file), the catalog's installed end lies at or below its base, and its batches end at the recorded next
//! offset; the catalog's end is journaled and checked again at the pause. The active segment's companions on the
//! mirror are the appender's own, derived and possibly stale (their index files are not fsynced; a mirror tailed
//! before the appender kept them has none). Promotion reads no more of a tailed partition's data than of an applied
//! one's, because the appender **keeps** what it needs in the state file, written atomically with the position it
//! describes (`crate::direct::Kept`): the entry counts and CRC-32C of the active segment's offset, time and
//! transaction index, the transactions open at the end, and the leader epochs of every batch it appended. Promotion
//! **trusts** them only when the state file describes exactly the mirror's end (segment, size, next offset), and each
//! companion file only when its bytes match (`tail_kept`); the facts are journaled with the plan. Then: no transaction
//! open means no walk to find one; a segment the kept epochs put wholly in the target's epoch is settled without a
//! walk as an applied one is (`build::settled`); matching indexes are sealed as an applied last segment's are
//! (`txn_cut::seal_kept_indexes`, a read of their tail), and the `.txnindex` keeps its recorded entries. Whatever does
//! not match, or was not kept (an older appender, a state recorded by a hand-over, truncation or replacement), is
//! derived in staging from the bytes it promotes as before: offset and time index rebuilt from its batches
//! (`txn_cut::rebuild_indexes`, as for any last segment), the `.txnindex` entries of the aborted transactions whose
//! ABORT marker lies in it computed by segment-format's `TxnTracker` over the promoted segments from the first
//! (`txn_cut::txn_index_entries`) — the same rule `verify` checks the index against — and the open transactions by
//! `txn_cut::find_open_transactions`. An open transaction the record cannot describe still walks from the first
//! segment (or the newest producer snapshot) to find what to abort; a consistent cut decides them from those open at
//! the end and the batches after the cut, reading back from the cut only for a producer a marker follows whose
//! closed transaction the appender did not keep (each seal records its segment's transactions as an install does,
//! D0056; the appender keeps each producer's last closed transaction, D0057). The cut's own entries are appended
//! after the segment's. Everything else (restamping, no source producer state, the cut, root checkpoints,
//! `partition.metadata`) is as for an applied partition. A mirror an applier
//! holds (the one-applier lock in the mirror root, `crate::lock_mirror`) is refused naming the holder: a
//! `tail-apply` grows its active segments with every chunk. Promotion takes that lock itself when the mirror has
//! one (it never creates it: a mirror nobody applied to stays untouched).
//!
//! # Applied partitions: open transactions from the installs' records
//! Which transactions are open at an applied partition's end is what the broker would rebuild: the newest producer
//! snapshot, then the batches after it (`txn_cut::find_open_transactions`). A mirror of a live broker has no snapshot
//! inside its active segments, so that walk read every batch header of them, and promotion grew with the data. Each
//! install reads all of its version's batches anyway and records in the catalog, in the transaction that records the
//! version, how they leave each transactional producer (`segment_format::txn_ends`); planning folds those records
//! from the walk's own starting point and, when they prove that nothing is open, skips the walk (`recorded_txns`).
//! A record missing for any segment the walk would read, or a transaction open at the end, means the walk as before
//! (an abort marker needs the transaction's first offset, epochs and counts). `segmirror verify --deep --catalog`
//! holds every record to the batches.
//!
//! # Crash safety
//! Work happens in `<log dir>/.segmirror-promote/`, a name the broker cannot parse as a partition, so **a broker
//! refuses to start while a promotion is unfinished** (its log names the directory). In order:
//! 1. the selected partitions are paused in the catalog (one transaction; a running applier leaves them alone) and
//!    the plan is written to `promotion.json` there (the journal);
//! 2. each partition is built complete in `<topic>-<partition>.building/` (copies, restamped, abort markers, empty
//!    producer state); what is cut is decided at planning and journaled, so a rebuild after a crash writes the same
//!    bytes. Up to [`PromoteRequest::parallel`] partitions are built at once (they share nothing in staging and
//!    nothing live changes before every build is done). None of their files is fsynced: once every build is done,
//!    one `syncfs` of the log dir's filesystem makes them all durable (a failed write-back of any of them fails it),
//!    and only then does one name in staging say so (`swap::BUILDS_DURABLE`). Why: an fsync per file and directory
//!    made a promotion of 10,000 small partitions wait for some 80,000 journal commits;
//! 3. each live partition directory is renamed to `<topic>-<partition>.old` in staging and the `.building` one takes
//!    its place; then one more name says every swap is durable (`swap::SWAPS_DURABLE`);
//! 4. the root checkpoints are rewritten (`durable::write_atomically`) and the catalog marks the partitions promoted
//!    (with the target topic id, all in one transaction), while the `.old` directories are removed;
//! 5. the journal, then the staging directory is removed.
//!
//! A rerun after a crash at any point finds the journal, finishes exactly the journaled promotion from the state on
//! disk (the two markers, then the `.building`/`.old` names, say how far it and each partition got) and then
//! handles the rest of the request.
//! Promoting an already promoted partition is a no-op reported as such. A `.log` is copied in the kernel
//! (`copy_file_range`), every frame header of the copy checked and its epoch patched in place through a mapping,
//! write-back started as it goes and one fsync (`kcopy`; a buffered one-pass copy where the kernel cannot,
//! `restamp::copy_log_restamping`); the other files with `std::fs::copy`. Planning reads a mirror's end offset
//! from the last batches of its last segment, found through the offset index (`log_end`), not from a walk of the
//! whole segment: the copy walks every header anyway and refuses a partition that changed. Hard links are never
//! used, because the
//! broker rewrites some files in place (the last segment's indexes are resized at load, recovery rebuilds
//! indexes) and would change the mirror under the catalog. With [`Handover::Rename`] the mirror's files are instead
//! renamed into staging (the mirror gives them up, and the catalog records where they went), which is journaled and
//! finished by a rerun like every other step (`handover`).
//!
//! # Replicas
//! A topic replicated on several target brokers is promoted into every replica's log dir in one run
//! ([`PromoteRequest::replica_log_dirs`]; module `swap`, [`ReplicaReport`]). Why one run and not one per log dir:
//! the plan fixes bytes (the abort markers' timestamp, the consistent cut, the restamped epoch), and replicas that
//! differ in them would diverge at the first leader change. So: every log dir is locked; a partition goes into
//! each named log dir that holds its directory (the brokers the target cluster assigned it to — read from the
//! stopped brokers' disks, not from a running cluster); its epoch is the highest any of those replicas led in;
//! the one journal (with the list of log dirs and their partitions) is written into every log dir before
//! anything is built; then log dir after log dir is built, swapped and checkpointed exactly as for one, and the
//! catalog records it (`promoted_replicas`) before its journal is removed; the last log dir's pass also marks the
//! partitions promoted. A rerun that finds the journal in any log dir finishes the rest and skips a log dir
//! without a journal that the catalog records (finished), or gives the journal to one without either (the crash
//! came while the journals were written). With [`Handover::Rename`] a partition's files are renamed into the last
//! log dir that gets it and copied into the others first (never hard-linked: a broker truncates and appends its
//! files in place, and a shared inode would change the other replica).
//!
//! # Layout
//! This module only orchestrates ([`promote`]: lock, resume a journal, select, plan, journal, execute). The steps
//! are modules named by what they do — `plan` (the request, every refusal, the plan, the pause; its `inspect` reads
//! both sides of every partition on worker threads), `journal` (the durable plan and the crash points), `build` (a
//! partition complete in staging), `swap` (live directories, root checkpoints, catalog record) — with helpers
//! `restamp`, `kcopy`, `handover`, `txn_cut`, `recorded_txns`, `producer_state`, `target`, [`retention`], `lock` and
//! `files`. Errors are [`Error`] (this folder's own); the crate's error wraps it. Shared types live in
//! leaf modules (`journal::Planned`, `report`, `refusal`, `retention::loss`), so no two modules import each other.

mod build;
mod consistent_cut;
mod error;
mod files;
mod frames;
mod handover;
mod journal;
mod kcopy;
mod lock;
mod log_end;
mod plan;
mod producer_state;
mod recorded_txns;
mod refusal;
mod report;
mod restamp;
pub mod retention;
mod swap;
mod tail_kept;
mod target;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_seal;
#[cfg(test)]
mod tests_tail;
#[cfg(test)]
mod tests_tail_follow;
#[cfg(test)]
mod tests_tail_kept;
#[cfg(test)]
mod tests_tail_roll;
#[cfg(test)]
mod tests_txn;
mod txn_cut;

use std::collections::BTreeMap;

use segment_format::dir::{CLEAN_SHUTDOWN_FILE, META_PROPERTIES_FILE};
use segment_format::durable::fsync_dir;
use segment_format::TopicPartition;
use segmirror_catalog::{Catalog, MirrorPartition, PartitionState};

use files::remove_dir_all;
use handover::KillSwitch;
pub(crate) use journal::Step;
use journal::{read_journal, write_journal, Journal};
use plan::{pause, plan};
use report::already_promoted;
use swap::execute;

pub use consistent_cut::{parse_timestamp as parse_cut_timestamp, ConsistentCut};
pub use error::{Error, Result};
pub use journal::{JOURNAL_FILE, JOURNAL_FORMAT, PROMOTION_DIR};
pub use lock::{LockFailure, LogDirLock};
pub use plan::{topics_regex, Handover, PromoteRequest, DEFAULT_PARALLEL};
pub use refusal::{Refusal, Refusals};
pub use report::{Outcome, PromoteReport, PromotedPartition, ReplicaOutcome, ReplicaReport};
pub use restamp::{walk_log, LogWalk, PARTITION_LEADER_EPOCH_OFFSET};
pub use retention::loss::RetentionLoss;
pub use txn_cut::CutTransaction;

/// Promote the selected mirror partitions into the stopped broker's log dir. See the module docs.
///
/// Errors: [`Error::Refused`] with every reason when the promotion cannot start (nothing was changed);
/// I/O, catalog and format errors otherwise (a rerun finishes the job).
pub fn promote(request: &PromoteRequest, catalog: &mut Catalog) -> Result<PromoteReport> {
    promote_with(request, catalog, &mut |_| {})
}

pub(crate) fn promote_with(
    request: &PromoteRequest,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
) -> Result<PromoteReport> {
    let log_dirs = request.log_dirs();
    // Every reason found is reported at once; the checks below go on as far as they can without the others.
    let mut refusals = Vec::new();
    let is_log_dir = check_log_dirs(&log_dirs, &mut refusals);
    let mirror_exists = request.mirror_root.is_dir();
    if !mirror_exists {
        refusals.push(Refusal::MirrorRootMissing {
            path: request.mirror_root.clone(),
        });
    }
    let _mirror_lock = if mirror_exists {
        lock_the_mirror(request, &mut refusals)?
    } else {
        None
    };
    // Every log dir's lock, held to the end (replicas: all of them, so no broker of the cluster starts while its
    // replicas differ).
    let mut locks: Locks = Locks::default();
    let mut all_locked = is_log_dir;
    if is_log_dir {
        for log_dir in &log_dirs {
            all_locked &= locks.acquire(log_dir, &mut refusals)?;
        }
    }
    let mut notes = unclean_shutdown_notes(&locks);
    // Only with every log dir's lock: an interrupted promotion is finished (or its leftovers removed) by the
    // process that holds them.
    let mut resumed = Resumed::default();
    if all_locked {
        resumed = finish_interrupted(request, catalog, hook, &mut locks, &mut refusals, &mut notes)?;
    }

    let Some(link) = choose_link(request, catalog, resumed.link.take(), &mut refusals)? else {
        return Err(Error::Refused { refusals });
    };
    let selected: Vec<MirrorPartition> = catalog
        .partitions(&link)?
        .into_iter()
        .filter(|p| request.topics.as_ref().is_none_or(|re| re.is_match(&p.key.topic)))
        .collect();
    if selected.is_empty() && resumed.partitions.is_empty() {
        refusals.push(Refusal::NothingSelected { link });
        return Err(Error::Refused { refusals });
    }

    let mut report = PromoteReport {
        log_dir: request.log_dir.clone(),
        log_dirs: resumed.log_dirs,
        link: link.clone(),
        partitions: Vec::new(),
        notes,
        retention_deletes: Vec::new(),
    };
    let mut todo = Vec::new();
    for p in selected {
        let tp = p.key.topic_partition();
        if let Some(done) = resumed.partitions.remove(&tp) {
            report.partitions.push(done);
        } else if p.state == PartitionState::Promoted {
            report.partitions.push(already_promoted(&p));
        } else {
            todo.push(p);
        }
    }
    report.partitions.extend(resumed.partitions.into_values());

    if !todo.is_empty() && is_log_dir {
        promote_planned(
            request,
            catalog,
            hook,
            &link,
            &todo,
            mirror_exists,
            &mut refusals,
            &mut report,
        )?;
    }
    if !refusals.is_empty() {
        return Err(Error::Refused { refusals });
    }
    report
        .partitions
        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    drop(locks);
    Ok(report)
}

/// Refuse a log dir named twice or not a formatted Kafka log dir; `false` when one is not.
fn check_log_dirs(log_dirs: &[std::path::PathBuf], refusals: &mut Vec<Refusal>) -> bool {
    let mut is_log_dir = true;
    for (i, log_dir) in log_dirs.iter().enumerate() {
        if log_dirs.get(..i).is_some_and(|before| before.contains(log_dir)) {
            refusals.push(Refusal::DuplicateLogDir {
                log_dir: log_dir.clone(),
            });
        } else if !log_dir.join(META_PROPERTIES_FILE).is_file() {
            refusals.push(Refusal::NotALogDir {
                log_dir: log_dir.clone(),
            });
            is_log_dir = false;
        }
    }
    is_log_dir
}

/// The mirror's one-applier lock, held to the end: an `apply` or `tail-apply` at work on the mirror could change a
/// partition between planning and copying (a tail appender grows its active segment with every chunk), so promotion
/// refuses while one runs, naming it, and keeps them out while it runs.
fn lock_the_mirror(request: &PromoteRequest, refusals: &mut Vec<Refusal>) -> Result<Option<crate::lock::MirrorLock>> {
    match crate::lock::lock_mirror_if_used(&request.mirror_root) {
        Ok(held) => Ok(held),
        Err(crate::lock::LockError::Locked { path, holder }) => {
            refusals.push(Refusal::MirrorBusy {
                lock_file: path,
                holder,
            });
            Ok(None)
        }
        Err(e) => Err(Error::io(
            crate::mirror::apply_lock_file(&request.mirror_root),
            std::io::Error::other(e.to_string()),
        )),
    }
}

/// A note for each locked log dir its broker did not stop cleanly.
fn unclean_shutdown_notes(locks: &Locks) -> Vec<String> {
    let mut notes = Vec::new();
    for log_dir in locks.dirs() {
        if !log_dir.join(CLEAN_SHUTDOWN_FILE).exists() {
            notes.push(format!(
                "{} has no {CLEAN_SHUTDOWN_FILE}: the broker did not stop cleanly and will recover its partitions \
                 from their recovery points at start (promoted partitions need none)",
                log_dir.display()
            ));
        }
    }
    notes
}

/// What finishing interrupted promotions did.
#[derive(Default)]
struct Resumed {
    partitions: BTreeMap<TopicPartition, PromotedPartition>,
    log_dirs: Vec<ReplicaReport>,
    /// The link of the (last) interrupted promotion, chosen when the request names none.
    link: Option<String>,
}

/// Finish every interrupted promotion found in the request's log dirs (its journal in `PROMOTION_DIR`), or remove
/// the leftovers of one that crashed before its journal was durable.
fn finish_interrupted(
    request: &PromoteRequest,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
    locks: &mut Locks,
    refusals: &mut Vec<Refusal>,
    notes: &mut Vec<String>,
) -> Result<Resumed> {
    let mut resumed = Resumed::default();
    let mut finished: Vec<Journal> = Vec::new();
    for log_dir in &request.log_dirs() {
        let staging = log_dir.join(PROMOTION_DIR);
        if let Some(journal) = read_journal(&staging)? {
            if finished.contains(&journal) {
                continue;
            }
            // A log dir of the interrupted promotion the request does not name is locked too.
            for (dir, _) in journal.per_log_dir(log_dir) {
                if !locks.acquire(&dir, refusals)? {
                    return Err(Error::Refused {
                        refusals: std::mem::take(refusals),
                    });
                }
            }
            notes.push(format!(
                "finished an interrupted promotion of {} partition(s) of link {:?}",
                journal.partitions.len(),
                journal.link
            ));
            let kill = KillSwitch::of(request);
            let executed = execute(
                &journal,
                log_dir,
                catalog,
                hook,
                Outcome::Resumed,
                request.parallel,
                kill,
            )?;
            for p in executed.partitions {
                resumed
                    .partitions
                    .insert(TopicPartition::new(p.topic.clone(), p.partition), p);
            }
            resumed.log_dirs.extend(executed.log_dirs);
            resumed.link = Some(journal.link.clone());
            finished.push(journal);
        } else if staging.exists() {
            // A crash before the journal was durable (nothing of it was used) or after the log dir was
            // recorded (nothing left to do).
            remove_dir_all(&staging)?;
            fsync_dir(log_dir)?;
        }
    }
    Ok(resumed)
}

/// The link to promote: the one named (looked up, never created: a mistyped --link is a refusal), else the one an
/// interrupted promotion was of, else the catalog's only one. `None` with a refusal.
fn choose_link(
    request: &PromoteRequest,
    catalog: &Catalog,
    link_from_journal: Option<String>,
    refusals: &mut Vec<Refusal>,
) -> Result<Option<String>> {
    let links: Vec<String> = catalog.links()?.into_iter().map(|l| l.name).collect();
    Ok(match (&request.link, link_from_journal) {
        (Some(name), _) if links.contains(name) => Some(name.clone()),
        (Some(name), _) => {
            refusals.push(Refusal::UnknownLink {
                link: name.clone(),
                links: links.clone(),
            });
            None
        }
        (None, Some(name)) => Some(name),
        (None, None) => match links.as_slice() {
            [one] => Some(one.clone()),
            _ => {
                refusals.push(Refusal::NoLink { links: links.clone() });
                None
            }
        },
    })
}

/// Plan the partitions `todo` (every check; a refusal stops here with nothing changed), pause them, journal the
/// plan into every log dir, then build and hand them over; their outcomes go to `report`.
#[allow(clippy::too_many_arguments)]
fn promote_planned(
    request: &PromoteRequest,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
    link: &str,
    todo: &[MirrorPartition],
    mirror_exists: bool,
    refusals: &mut Vec<Refusal>,
    report: &mut PromoteReport,
) -> Result<()> {
    let started = std::time::Instant::now();
    let all = catalog.partitions(link)?;
    let plan = plan(request, catalog, &all, todo, mirror_exists, refusals)?;
    tracing::debug!(
        partitions = plan.planned.len(),
        refusals = refusals.len(),
        elapsed = ?started.elapsed(),
        "promotion planned"
    );
    report.notes.extend(plan.notes);
    report.retention_deletes = plan.retention_deletes;
    if !refusals.is_empty() {
        return Err(Error::Refused {
            refusals: std::mem::take(refusals),
        });
    }
    let planned = plan.planned;
    let previous: BTreeMap<TopicPartition, PartitionState> =
        todo.iter().map(|p| (p.key.topic_partition(), p.state)).collect();
    pause(catalog, link, &request.mirror_root, &planned, &previous)?;
    let journal = Journal {
        format: JOURNAL_FORMAT.to_string(),
        link: link.to_string(),
        mirror_root: request.mirror_root.clone(),
        partitions: planned,
        replicas: plan.replicas,
    };
    // One plan, journaled into every log dir before anything is built: a rerun finds it in any of them.
    for replica in &journal.replicas {
        write_journal(&journal, &replica.log_dir, &replica.log_dir.join(PROMOTION_DIR))?;
    }
    tracing::debug!(elapsed = ?started.elapsed(), "partitions paused in the catalog and the promotion journaled");
    hook(Step::Journaled);
    let executed = execute(
        &journal,
        &request.log_dir,
        catalog,
        hook,
        Outcome::Promoted,
        request.parallel,
        KillSwitch::of(request),
    )?;
    report.partitions.extend(executed.partitions);
    report.log_dirs.extend(executed.log_dirs);
    Ok(())
}

/// The log dirs' locks a run holds.
#[derive(Default)]
struct Locks(Vec<(std::path::PathBuf, LogDirLock)>);

impl Locks {
    /// Take `log_dir`'s lock unless held already: `false` (and a refusal) when its broker runs.
    fn acquire(&mut self, log_dir: &std::path::Path, refusals: &mut Vec<Refusal>) -> Result<bool> {
        if self.0.iter().any(|(d, _)| d == log_dir) {
            return Ok(true);
        }
        match LogDirLock::try_acquire(log_dir) {
            Ok(lock) => {
                self.0.push((log_dir.to_path_buf(), lock));
                Ok(true)
            }
            Err(LockFailure::Held) => {
                refusals.push(Refusal::BrokerRunning {
                    lock_file: log_dir.join(segment_format::dir::LOCK_FILE),
                });
                Ok(false)
            }
            Err(LockFailure::Io(e)) => Err(e),
        }
    }

    fn dirs(&self) -> impl Iterator<Item = &std::path::Path> {
        self.0.iter().map(|(d, _)| d.as_path())
    }
}
