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
//! (unless `force`), each mirror partition must be exactly what the catalog says is installed (no leftovers of an
//! interrupted apply), and the target topic's retention must not delete promoted data at the broker's first
//! retention check (unless `allow_retention_delete`; [`retention`] says how it is predicted from the target's
//! metadata log and `server.properties`). The checks go on past the first failure — both sides of every partition
//! are inspected even when one refuses, and a running broker's log dir is still read — so one run reports every
//! reason for every partition ([`Refusal`], [`Error::PromoteRefused`]; the CLI exits 2).
//!
//! # Crash safety
//! Work happens in `<log dir>/.segmirror-promote/`, a name the broker cannot parse as a partition, so **a broker
//! refuses to start while a promotion is unfinished** (its log names the directory). In order:
//! 1. the selected partitions are paused in the catalog (a running applier leaves them alone) and the plan is
//!    written to `promotion.json` there (the journal);
//! 2. each partition is built complete in `<topic>-<partition>.building/` (copies, restamped, abort markers, empty
//!    producer state, fsynced) and renamed `.ready`; what is cut is decided at planning and journaled, so a rebuild
//!    after a crash writes the same bytes;
//! 3. each live partition directory is renamed to `<topic>-<partition>.old` in staging and the `.ready` one takes
//!    its place;
//! 4. the root checkpoints are rewritten (`durable::write_atomically`);
//! 5. the catalog marks the partitions promoted (with the target topic id);
//! 6. the staging directory is removed.
//!
//! A rerun after a crash at any point finds the journal, finishes exactly the journaled promotion from the state on
//! disk (the `.ready`/`.old` names say how far each partition got) and then handles the rest of the request.
//! Promoting an already promoted partition is a no-op reported as such. Copies are made with `std::fs::copy`
//! (a kernel copy that can share blocks on file systems with reflinks); hard links are never used, because the
//! broker rewrites some files in place (the last segment's indexes are resized at load, recovery rebuilds
//! indexes) and would change the mirror under the catalog.
//!
//! One target log dir per run; for a topic replicated on several target brokers, promote into each replica's log
//! dir (identical copies) before starting any of them.

mod lock;
mod producer_state;
mod refusal;
mod restamp;
pub mod retention;
mod target;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_txn;
mod txn_cut;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use regex::Regex;
use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint};
use segment_format::dir::{
    segment_file_name, PartitionDir, PartitionDirName, SegmentFileKind, CLEAN_SHUTDOWN_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE, META_PROPERTIES_FILE, PARTITION_METADATA_FILE,
};
use segment_format::durable::{fsync_dir, write_atomically};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segmirror_catalog::{Catalog, EventKind, MirrorPartition, PartitionKey, PartitionState, Subject};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use lock::{LockFailure, LogDirLock};
pub use refusal::{Refusal, Refusals};
pub use restamp::{walk_log, LogWalk, PARTITION_LEADER_EPOCH_OFFSET};
pub use retention::RetentionLoss;
pub use txn_cut::CutTransaction;

/// The staging directory inside the target log dir. Not a partition name: the broker refuses to start while it
/// exists.
pub const STAGING_DIR: &str = ".segmirror-promote";
/// The journal of an unfinished promotion, inside [`STAGING_DIR`].
pub const JOURNAL_FILE: &str = "promotion.json";
/// `format` of the journal.
pub const JOURNAL_FORMAT: &str = "segmirror.promotion.v1";
/// Largest journal read back: a few hundred bytes per partition; 64 MiB is far beyond any real promotion and keeps
/// a damaged file from exhausting memory.
const MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// Suffix of a partition being built in staging.
const BUILDING: &str = "building";
/// Suffix of a partition built completely, waiting to be swapped in.
const READY: &str = "ready";
/// Suffix of the target's original partition directory after the swap.
const OLD: &str = "old";

/// What to promote, and where.
#[derive(Debug, Clone, Default)]
pub struct PromoteRequest {
    /// The applier's mirror root (`segmirror apply --mirror`).
    pub mirror_root: PathBuf,
    /// The stopped target broker's log dir (one entry of its `log.dirs`).
    pub log_dir: PathBuf,
    /// The catalog link; `None` when the catalog holds exactly one.
    pub link: Option<String>,
    /// Topics to promote; `None` = every topic of the link. Build it with [`topics_regex`] so that it must match
    /// the whole topic name.
    pub topics: Option<Regex>,
    /// Replace target partitions that hold data.
    pub force: bool,
    /// The target broker's `server.properties`, for its static defaults (`log.retention.*`, `metadata.log.dir`);
    /// without it Kafka's defaults are assumed.
    pub target_config: Option<PathBuf>,
    /// Promote even when the target topic's retention would delete promoted data at start (or cannot be known);
    /// the report lists what the broker will delete.
    pub allow_retention_delete: bool,
}

/// A partition named the way Kafka names its directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    fn dir_name(&self) -> String {
        PartitionDirName::new(self.topic.clone(), self.partition).dir_name()
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What happened to one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Installed into the target by this run.
    Promoted,
    /// An interrupted promotion of it was finished by this run.
    Resumed,
    /// Promoted earlier; nothing done.
    AlreadyPromoted,
}

/// One partition of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromotedPartition {
    pub topic: String,
    pub partition: i32,
    pub outcome: Outcome,
    /// The target topic id now in `partition.metadata` (as the catalog records it for `AlreadyPromoted`).
    pub target_topic_id: Option<String>,
    /// The leader epoch every batch now carries.
    pub leader_epoch: Option<i32>,
    pub log_start_offset: i64,
    pub log_end_offset: Option<i64>,
    /// Segments and bytes of `.log` copied (0 for `AlreadyPromoted`).
    pub segments: usize,
    pub log_bytes: u64,
    /// Batches whose epoch was rewritten.
    pub batches_restamped: u64,
    /// Transactions open at the mirror's end, aborted by this promotion (an ABORT marker each, at
    /// `marker_offset`; `log_end_offset` counts the markers).
    pub transactions_aborted: Vec<CutTransaction>,
}

/// What a promotion did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromoteReport {
    pub log_dir: PathBuf,
    pub link: String,
    pub partitions: Vec<PromotedPartition>,
    /// Things an operator should know that are not failures.
    pub notes: Vec<String>,
    /// Promoted data the target's retention will delete at its first retention check (promoted anyway, as
    /// `allow_retention_delete` asked).
    pub retention_deletes: Vec<RetentionLoss>,
}

impl PromoteReport {
    /// Partitions this run changed (promoted or resumed).
    pub fn changed(&self) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.outcome != Outcome::AlreadyPromoted)
            .count()
    }
}

/// One partition of a promotion plan, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Planned {
    topic: String,
    partition: i32,
    /// The target topic id (Kafka's text form).
    target_topic_id: String,
    /// The epoch every batch is restamped to.
    leader_epoch: i32,
    log_start_offset: i64,
    log_end_offset: i64,
    /// Base offsets of the segments to copy (those not wholly below the log start offset), ascending.
    segments: Vec<i64>,
    /// The mirror's producer-state snapshots (read to find open transactions; none is copied: the promoted
    /// partition starts with empty producer state, see `producer_state`).
    snapshots: Vec<i64>,
    /// The catalog's state before promotion paused it.
    previous_state: String,
    /// Transactions open at `log_end_offset`, aborted by markers from there on (see `txn_cut`).
    #[serde(default)]
    cut: Vec<CutTransaction>,
    /// Timestamp of the abort markers (decided at planning, so a rebuilt partition is identical).
    #[serde(default)]
    cut_timestamp: i64,
}

impl Planned {
    fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }

    fn first_base_offset(&self) -> i64 {
        self.segments.first().copied().unwrap_or(self.log_end_offset)
    }

    /// The promoted partition's log end offset: the mirror's, plus one abort marker per cut transaction.
    fn end_offset(&self) -> i64 {
        self.log_end_offset.saturating_add(self.cut.len() as i64)
    }
}

/// The journal: the plan of an unfinished promotion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Journal {
    format: String,
    link: String,
    mirror_root: PathBuf,
    partitions: Vec<Planned>,
}

/// Points between the steps of a promotion, for crash tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The journal is durable; nothing built yet.
    Journaled,
    /// A partition's `.ready` directory is complete.
    Built(TopicPartition),
    /// The live directory moved to `.old`; the new one not yet in place.
    MovedAside(TopicPartition),
    /// The new partition directory is live.
    Swapped(TopicPartition),
    /// The root checkpoints are written.
    Checkpointed,
    /// The catalog marks every partition promoted; staging still there.
    Recorded,
}

/// Promote the selected mirror partitions into the stopped broker's log dir. See the module docs.
///
/// Errors: [`Error::PromoteRefused`] with every reason when the promotion cannot start (nothing was changed);
/// I/O, catalog and format errors otherwise (a rerun finishes the job).
pub fn promote(request: &PromoteRequest, catalog: &mut Catalog) -> Result<PromoteReport> {
    promote_with(request, catalog, &mut |_| {})
}

pub(crate) fn promote_with(
    request: &PromoteRequest,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
) -> Result<PromoteReport> {
    let log_dir = request.log_dir.as_path();
    // Every reason found is reported at once; the checks below go on as far as they can without the others.
    let mut refusals = Vec::new();
    let is_log_dir = log_dir.join(META_PROPERTIES_FILE).is_file();
    if !is_log_dir {
        refusals.push(Refusal::NotALogDir {
            log_dir: log_dir.to_path_buf(),
        });
    }
    let mirror_exists = request.mirror_root.is_dir();
    if !mirror_exists {
        refusals.push(Refusal::MirrorRootMissing {
            path: request.mirror_root.clone(),
        });
    }
    let lock = if is_log_dir {
        match LogDirLock::try_acquire(log_dir) {
            Ok(lock) => Some(lock),
            Err(LockFailure::Held) => {
                refusals.push(Refusal::BrokerRunning {
                    lock_file: log_dir.join(segment_format::dir::LOCK_FILE),
                });
                None
            }
            Err(LockFailure::Io(e)) => return Err(e),
        }
    } else {
        None
    };
    let mut notes = Vec::new();
    if lock.is_some() && !log_dir.join(CLEAN_SHUTDOWN_FILE).exists() {
        notes.push(format!(
            "{} has no {CLEAN_SHUTDOWN_FILE}: the broker did not stop cleanly and will recover its partitions from \
             their recovery points at start (promoted partitions need none)",
            log_dir.display()
        ));
    }
    let staging = log_dir.join(STAGING_DIR);
    let mut resumed: BTreeMap<TopicPartition, PromotedPartition> = BTreeMap::new();
    let mut link_from_journal = None;
    // Only with the log dir's lock: an interrupted promotion is finished (or its leftovers removed) by the process
    // that holds it.
    if lock.is_some() {
        if let Some(journal) = read_journal(&staging)? {
            notes.push(format!(
                "finished an interrupted promotion of {} partition(s) of link {:?}",
                journal.partitions.len(),
                journal.link
            ));
            for p in execute(&journal, log_dir, catalog, hook, Outcome::Resumed)? {
                resumed.insert(TopicPartition::new(p.topic.clone(), p.partition), p);
            }
            link_from_journal = Some(journal.link);
        } else if staging.exists() {
            // A crash before the journal was durable (nothing of it was used) or after the promotion was recorded
            // (nothing left to do).
            remove_dir_all(&staging)?;
            fsync_dir(log_dir)?;
        }
    }

    let links: Vec<String> = catalog.links()?.into_iter().map(|l| l.name).collect();
    let link = match (&request.link, link_from_journal) {
        // Looked up, never created: a mistyped --link is a refusal.
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
    };
    let Some(link) = link else {
        return Err(Error::PromoteRefused { refusals });
    };
    let selected: Vec<MirrorPartition> = catalog
        .partitions(&link)?
        .into_iter()
        .filter(|p| request.topics.as_ref().is_none_or(|re| re.is_match(&p.key.topic)))
        .collect();
    if selected.is_empty() && resumed.is_empty() {
        refusals.push(Refusal::NothingSelected { link });
        return Err(Error::PromoteRefused { refusals });
    }

    let mut report = PromoteReport {
        log_dir: log_dir.to_path_buf(),
        link: link.clone(),
        partitions: Vec::new(),
        notes,
        retention_deletes: Vec::new(),
    };
    let mut todo = Vec::new();
    for p in selected {
        let tp = TopicPartition::new(p.key.topic.clone(), p.key.partition);
        if let Some(done) = resumed.remove(&tp) {
            report.partitions.push(done);
        } else if p.state == PartitionState::Promoted {
            report.partitions.push(already_promoted(&p));
        } else {
            todo.push(p);
        }
    }
    report.partitions.extend(resumed.into_values());

    if !todo.is_empty() && is_log_dir {
        let all = catalog.partitions(&link)?;
        let plan = plan(request, &all, &todo, mirror_exists, &mut refusals)?;
        report.notes.extend(plan.notes);
        report.retention_deletes = plan.retention_deletes;
        if !refusals.is_empty() {
            return Err(Error::PromoteRefused { refusals });
        }
        let planned = plan.planned;
        let previous: BTreeMap<TopicPartition, PartitionState> = todo
            .iter()
            .map(|p| (TopicPartition::new(p.key.topic.clone(), p.key.partition), p.state))
            .collect();
        pause(catalog, &link, &request.mirror_root, &planned, &previous)?;
        let journal = Journal {
            format: JOURNAL_FORMAT.to_string(),
            link: link.clone(),
            mirror_root: request.mirror_root.clone(),
            partitions: planned,
        };
        create_dir(&staging)?;
        fsync_dir(log_dir)?;
        let json = serde_json::to_vec_pretty(&journal).map_err(|e| {
            Error::io(
                staging.join(JOURNAL_FILE),
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })?;
        write_atomically(&staging.join(JOURNAL_FILE), &json)?;
        hook(Step::Journaled);
        report
            .partitions
            .extend(execute(&journal, log_dir, catalog, hook, Outcome::Promoted)?);
    }
    if !refusals.is_empty() {
        return Err(Error::PromoteRefused { refusals });
    }
    report
        .partitions
        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    drop(lock);
    Ok(report)
}

/// A topic selection that matches whole topic names only (`orders` does not select `orders-eu`), as Kafka's own
/// topic regexes (`topics.regex`) are used.
pub fn topics_regex(pattern: &str) -> std::result::Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

fn already_promoted(p: &MirrorPartition) -> PromotedPartition {
    PromotedPartition {
        topic: p.key.topic.clone(),
        partition: p.key.partition,
        outcome: Outcome::AlreadyPromoted,
        target_topic_id: p.mirror_topic_id.clone(),
        leader_epoch: None,
        log_start_offset: p.log_start_offset,
        log_end_offset: p.installed_end_offset,
        segments: 0,
        log_bytes: 0,
        batches_restamped: 0,
        transactions_aborted: Vec::new(),
    }
}

/// What planning found: the partitions to promote, and what an operator should know.
struct Plan {
    planned: Vec<Planned>,
    notes: Vec<String>,
    /// What the target's retention will delete (refused unless `allow_retention_delete`).
    retention_deletes: Vec<RetentionLoss>,
}

/// Check every precondition of every partition in `todo` (and of their topics) and plan them; every refusal is
/// added to `refusals` (nothing is planned to run while there is one).
fn plan(
    request: &PromoteRequest,
    all: &[MirrorPartition],
    todo: &[MirrorPartition],
    mirror_exists: bool,
    refusals: &mut Vec<Refusal>,
) -> Result<Plan> {
    let mut planned = Vec::new();
    let mut notes = Vec::new();
    let mut retention_deletes = Vec::new();
    let target = target::TargetLogDir::open(&request.log_dir)?;
    let settings = match retention::TargetSettings::load(&request.log_dir, request.target_config.as_deref()) {
        Ok(settings) => Some(settings),
        // The operator named this file: a refusal (retention is not judged without it), not a guess.
        Err(Error::Format(e)) => {
            refusals.push(Refusal::TargetConfigUnreadable {
                path: e.path().to_path_buf(),
                reason: e.to_string(),
            });
            None
        }
        Err(e) => return Err(e),
    };
    let topics: BTreeSet<&str> = todo.iter().map(|p| p.key.topic.as_str()).collect();
    let mut retentions = BTreeMap::new();
    for topic in &topics {
        let mirror_partitions = all.iter().filter(|p| p.key.topic == *topic).count();
        let target_partitions = target.partition_count(topic);
        if mirror_partitions != target_partitions {
            refusals.push(Refusal::PartitionCountMismatch {
                topic: topic.to_string(),
                mirror_partitions,
                target_partitions,
            });
        }
        let Some(settings) = &settings else { continue };
        match settings.as_ref().map_err(Clone::clone).and_then(|s| s.retention(topic)) {
            Ok(r) => {
                retentions.insert(topic.to_string(), r);
            }
            Err(unknown) if request.allow_retention_delete => notes.push(format!(
                "topic {topic}: retention not checked ({unknown}); the target may delete promoted data at start"
            )),
            Err(unknown) => refusals.push(Refusal::RetentionUnknown {
                topic: topic.to_string(),
                reason: unknown.to_string(),
            }),
        }
    }
    let now_ms = now_ms();
    let mut ids: BTreeMap<String, BTreeMap<i32, String>> = BTreeMap::new();
    for p in todo {
        let tp = TopicPartition::new(p.key.topic.clone(), p.key.partition);
        // Both sides are inspected even when one refuses, so one run names every problem.
        let mirror = if mirror_exists {
            inspect_mirror(&request.mirror_root, p, &tp, refusals)?
        } else {
            None
        };
        let found = target.inspect_partition(&tp, request.force, refusals)?;
        if let Some(found) = &found {
            ids.entry(tp.topic.clone())
                .or_default()
                .insert(tp.partition, found.topic_id.to_string());
        }
        let Some(mirror) = mirror else { continue };
        if let Some(r) = retentions.get(&tp.topic) {
            let dir = request.mirror_root.join(tp.dir_name());
            let ages = retention::segment_ages(&dir, &mirror.segments, mirror.log_end_offset)?;
            let doomed = retention::predict(r, &ages, now_ms);
            if let Some(last) = doomed.last() {
                let loss = RetentionLoss {
                    partition: tp.clone(),
                    retention: r.clone(),
                    now_ms,
                    cutoff_ms: r.retention_ms.map(|ms| now_ms.saturating_sub(ms)),
                    oldest_segment_max_timestamp: ages.first().and_then(|a| a.max_timestamp),
                    log_bytes: ages.iter().map(|a| a.bytes).sum(),
                    first_kept_offset: last.end_offset,
                    log_start_offset: mirror.log_start_offset,
                    log: dir.join(segment_file_name(
                        doomed.first().map_or(last.base_offset, |d| d.base_offset),
                        SegmentFileKind::Log,
                    )),
                    segments: doomed,
                };
                if request.allow_retention_delete {
                    retention_deletes.push(loss);
                } else {
                    refusals.push(Refusal::RetentionWouldDelete(Box::new(loss)));
                }
            }
        }
        let Some(found) = found else { continue };
        let cut = txn_cut::find_open_transactions(
            &request.mirror_root.join(tp.dir_name()),
            &mirror.segments,
            &mirror.snapshots,
            mirror.log_end_offset,
        )?;
        planned.push(Planned {
            topic: tp.topic.clone(),
            partition: tp.partition,
            target_topic_id: found.topic_id.to_string(),
            leader_epoch: found.leader_epoch,
            log_start_offset: mirror.log_start_offset,
            log_end_offset: mirror.log_end_offset,
            segments: mirror.segments,
            snapshots: mirror.snapshots,
            previous_state: p.state.as_str().to_string(),
            cut,
            cut_timestamp: now_ms,
        });
    }
    for (topic, ids) in ids {
        let distinct: BTreeSet<&String> = ids.values().collect();
        if distinct.len() > 1 {
            refusals.push(Refusal::TargetTopicIdsDiffer { topic, ids });
        } else if let (Some(Ok(settings)), Some(id)) = (&settings, distinct.first()) {
            // The broker keeps a partition directory only if the metadata log names the same topic id.
            let metadata_topic_id = settings.topic_id(&topic);
            if metadata_topic_id.as_ref() != Some(*id) {
                refusals.push(Refusal::TargetTopicIdDisagrees {
                    topic,
                    metadata_log: settings.metadata_dir.clone(),
                    metadata_topic_id,
                    partition_topic_id: (*id).clone(),
                });
            }
        }
    }
    Ok(Plan {
        planned,
        notes,
        retention_deletes,
    })
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What a mirror partition holds.
struct MirrorFacts {
    log_start_offset: i64,
    log_end_offset: i64,
    segments: Vec<i64>,
    snapshots: Vec<i64>,
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
    let walk = walk_log(&last.log, None)?;
    let log_end_offset = walk.last_offset.map_or(last.base_offset, |o| o.saturating_add(1));
    if p.installed_end_offset != Some(log_end_offset) {
        refusals.push(Refusal::MirrorCatalogMismatch {
            partition: tp.clone(),
            log: last.log.clone(),
            mirror_end_offset: log_end_offset,
            catalog_end_offset: p.installed_end_offset,
        });
        return Ok(None);
    }
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
    }))
}

/// Pause the planned partitions in the catalog so that a running applier leaves them alone, then check that
/// nothing was installed between planning and pausing.
fn pause(
    catalog: &mut Catalog,
    link: &str,
    mirror_root: &Path,
    planned: &[Planned],
    previous: &BTreeMap<TopicPartition, PartitionState>,
) -> Result<()> {
    let mut refusals = Vec::new();
    for p in planned {
        let key = PartitionKey::new(link, p.topic.clone(), p.partition);
        let row = catalog.partition(&key)?;
        if row.state != PartitionState::Paused {
            catalog.set_partition_state(row.id, PartitionState::Paused)?;
        }
        let row = catalog.partition(&key)?;
        if row.installed_end_offset != Some(p.log_end_offset) {
            refusals.push(Refusal::MirrorCatalogMismatch {
                partition: p.tp(),
                log: mirror_root.join(p.tp().dir_name()),
                mirror_end_offset: p.log_end_offset,
                catalog_end_offset: row.installed_end_offset,
            });
        }
    }
    if refusals.is_empty() {
        return Ok(());
    }
    // Undo the pause: nothing else was changed.
    for p in planned {
        let key = PartitionKey::new(link, p.topic.clone(), p.partition);
        if let Some(state) = previous.get(&p.tp()).filter(|s| **s != PartitionState::Paused) {
            let row = catalog.partition(&key)?;
            catalog.set_partition_state(row.id, *state)?;
        }
    }
    Err(Error::PromoteRefused { refusals })
}

/// Carry out a journaled promotion from whatever state the disk is in. Every step is idempotent.
fn execute(
    journal: &Journal,
    log_dir: &Path,
    catalog: &mut Catalog,
    hook: &mut dyn FnMut(Step),
    outcome: Outcome,
) -> Result<Vec<PromotedPartition>> {
    let staging = log_dir.join(STAGING_DIR);
    let mut results = Vec::new();
    for p in &journal.partitions {
        results.push(build(journal, p, &staging, outcome, hook)?);
    }
    for p in &journal.partitions {
        swap(p, log_dir, &staging, hook)?;
    }
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

fn staged(staging: &Path, p: &Planned, suffix: &str) -> PathBuf {
    staging.join(format!("{}.{suffix}", p.tp().dir_name()))
}

/// Build `<tp>.ready` in staging unless it (or the swap after it) already happened.
fn build(
    journal: &Journal,
    p: &Planned,
    staging: &Path,
    outcome: Outcome,
    hook: &mut dyn FnMut(Step),
) -> Result<PromotedPartition> {
    let ready = staged(staging, p, READY);
    let old = staged(staging, p, OLD);
    let mut result = PromotedPartition {
        topic: p.topic.clone(),
        partition: p.partition,
        outcome,
        target_topic_id: Some(p.target_topic_id.clone()),
        leader_epoch: Some(p.leader_epoch),
        log_start_offset: p.log_start_offset,
        log_end_offset: Some(p.end_offset()),
        segments: p.segments.len(),
        log_bytes: 0,
        batches_restamped: 0,
        transactions_aborted: p.cut.clone(),
    };
    if ready.exists() || old.exists() {
        return Ok(result);
    }
    let building = staged(staging, p, BUILDING);
    if building.exists() {
        remove_dir_all(&building)?;
    }
    create_dir(&building)?;
    let source = journal.mirror_root.join(p.tp().dir_name());
    let mut found_end = None;
    for base in &p.segments {
        for kind in [
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
            SegmentFileKind::TxnIndex,
            SegmentFileKind::Log,
        ] {
            let name = segment_file_name(*base, kind);
            let from = source.join(&name);
            if kind != SegmentFileKind::Log && !from.exists() {
                continue;
            }
            let to = building.join(&name);
            copy(&from, &to)?;
            if kind == SegmentFileKind::Log {
                let walk = walk_log(&to, Some(p.leader_epoch))?;
                result.log_bytes += walk.size;
                result.batches_restamped += walk.restamped;
                found_end = Some(walk.last_offset.map_or(*base, |o| o.saturating_add(1)));
            } else {
                sync_file(&to)?;
            }
        }
    }
    if let Some(found) = found_end.filter(|f| *f != p.log_end_offset) {
        return Err(Error::PromoteRefused {
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
    producer_state::finish(p, &building)?;
    let topic_id: Uuid = p.target_topic_id.parse().map_err(|e| {
        Error::io(
            staging.join(JOURNAL_FILE),
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e}")),
        )
    })?;
    PartitionMetadata::new(topic_id).write(&building.join(PARTITION_METADATA_FILE))?;
    let epochs = if p.log_start_offset < p.end_offset() {
        vec![EpochEntry {
            epoch: p.leader_epoch,
            start_offset: p.log_start_offset,
        }]
    } else {
        Vec::new()
    };
    LeaderEpochCheckpoint::new(epochs).write(&building.join(LEADER_EPOCH_CHECKPOINT_FILE))?;
    fsync_dir(&building)?;
    rename(&building, &ready)?;
    fsync_dir(staging)?;
    hook(Step::Built(p.tp()));
    Ok(result)
}

/// Put `<tp>.ready` in place of the live partition directory, keeping the live one as `<tp>.old`.
fn swap(p: &Planned, log_dir: &Path, staging: &Path, hook: &mut dyn FnMut(Step)) -> Result<()> {
    let ready = staged(staging, p, READY);
    let old = staged(staging, p, OLD);
    let live = log_dir.join(p.tp().dir_name());
    if !ready.exists() {
        // Swapped earlier (the journal says it was built, and only a swap removes `.ready`).
        return Ok(());
    }
    if !old.exists() {
        rename(&live, &old)?;
        fsync_dir(log_dir)?;
        fsync_dir(staging)?;
        hook(Step::MovedAside(p.tp()));
    }
    rename(&ready, &live)?;
    fsync_dir(staging)?;
    fsync_dir(log_dir)?;
    hook(Step::Swapped(p.tp()));
    Ok(())
}

/// Mark the partition promoted in the catalog, with the target topic id.
fn record(catalog: &mut Catalog, link: &str, p: &Planned, log_dir: &Path) -> Result<()> {
    let key = PartitionKey::new(link, p.topic.clone(), p.partition);
    let row = catalog.partition(&key)?;
    if row.state == PartitionState::Promoted {
        return Ok(());
    }
    catalog.set_mirror_topic_id(row.id, &p.target_topic_id)?;
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
    catalog.set_partition_state(row.id, PartitionState::Promoted)?;
    Ok(())
}

/// The journal of an unfinished promotion, if there is one. A journal that cannot be read is an error: the
/// promotion it describes may be half done, and only it says what to finish.
fn read_journal(staging: &Path) -> Result<Option<Journal>> {
    let path = staging.join(JOURNAL_FILE);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let invalid = |message: String| Error::io(&path, std::io::Error::new(std::io::ErrorKind::InvalidData, message));
    if meta.len() > MAX_JOURNAL_BYTES {
        return Err(invalid(format!(
            "journal of {} bytes exceeds {MAX_JOURNAL_BYTES}",
            meta.len()
        )));
    }
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let journal: Journal =
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("not a promotion journal: {e}")))?;
    if journal.format != JOURNAL_FORMAT {
        return Err(invalid(format!(
            "journal format {:?}, this segmirror writes {JOURNAL_FORMAT:?}",
            journal.format
        )));
    }
    for p in &journal.partitions {
        // Names become path components: accept only what Kafka accepts.
        segment_format::dir::validate_topic_name(&p.topic).map_err(|r| invalid(format!("topic {:?}: {r}", p.topic)))?;
        let ordered = p.segments.windows(2).all(|w| w.first() < w.last());
        if p.partition < 0
            || p.log_start_offset < 0
            || p.log_start_offset > p.log_end_offset
            || !ordered
            || p.segments.iter().chain(&p.snapshots).any(|o| *o < 0)
        {
            return Err(invalid(format!("inconsistent plan for {}", p.tp())));
        }
    }
    Ok(Some(journal))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to).map_err(|e| Error::io(from, e))?;
    Ok(())
}

fn sync_file(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(path, e))
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::io(from, e))
}

fn create_dir(path: &Path) -> Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn remove_dir_all(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}
