//! Planning a promotion: every precondition of every selected partition checked on both sides (mirror and target
//! log dir), every refusal collected, and the partitions that may go planned down to the offsets, epochs and open
//! transactions; then the planned partitions paused in the catalog.
//!
//! Why all refusals at once: an operator fixing one reason at a time, rerunning in between, is what this avoids.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::{now_ms, TopicPartition};
use segmirror_catalog::{Catalog, MirrorPartition, PartitionKey, PartitionState};

use super::error::{Error, Result};
use super::journal::{Planned, ReplicaDir};
use super::refusal::Refusal;
use super::retention::loss::RetentionLoss;
use super::{consistent_cut, recorded_txns, retention, target, txn_cut};

mod inspect;

use inspect::{inspect_all, Inspected, MirrorFacts, TargetSeen};

/// What to promote, and where.
#[derive(Debug, Clone, Default)]
pub struct PromoteRequest {
    /// The applier's mirror root (`segmirror apply --mirror`).
    pub mirror_root: PathBuf,
    /// The stopped target broker's log dir (one entry of its `log.dirs`).
    pub log_dir: PathBuf,
    /// Further stopped brokers' log dirs: the other replicas of the same partitions (`--log-dir` given several
    /// times). One plan is installed into every log dir that holds a partition's directory, `log_dir` first and
    /// these in order; with [`Handover::Rename`] a partition's files are renamed into the last of them and copied
    /// into the others. Empty: `log_dir` only.
    pub replica_log_dirs: Vec<PathBuf>,
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
    /// How many partitions are built (copied) at once; 0 means [`DEFAULT_PARALLEL`].
    pub parallel: usize,
    /// How the mirror's files reach the log dir: copied (the mirror keeps them) or renamed (handed over).
    pub handover: Handover,
    /// Cut every selected partition before its first batch newer than this timestamp (ms since the epoch;
    /// `consistent_cut` says which timestamp and why); `None` promotes each partition to the mirror's end.
    pub consistent_cut: Option<i64>,
    /// Crash tests: a kill point inside handover builds.
    #[cfg(feature = "failpoints")]
    pub failpoint: Option<std::sync::Arc<crate::failpoint::Armed>>,
}

/// How the mirror's files reach the broker's log dir (`segmirror promote --handover`).
///
/// Why renaming is allowed: a promoted partition is terminal (the applier never writes it again), so the mirror
/// may give its files up; promotion then costs the same for 40 MiB and for 4 GiB, less the epoch restamping, which
/// touches one header per batch. Why it is not the default: the mirror no longer holds the data afterwards (no
/// second promotion into another log dir from it, no `verify` of the mirror).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handover {
    /// Copy every file (the mirror keeps its data).
    #[default]
    Copy,
    /// Rename the mirror's files into the log dir (same file system only; refused otherwise).
    Rename,
    /// Rename when the mirror root and the log dir are on one file system and the promotion covers every
    /// partition of the link (the link ends with it); copy otherwise.
    Auto,
}

impl std::str::FromStr for Handover {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "copy" => Ok(Handover::Copy),
            "rename" => Ok(Handover::Rename),
            "auto" => Ok(Handover::Auto),
            other => Err(format!("unknown handover {other:?} (copy, rename or auto)")),
        }
    }
}

/// Partitions built at once by default: enough to keep a disk busy while one partition's files are fsynced and
/// a CPU busy checking headers, few enough not to turn one sequential copy into many competing ones.
pub const DEFAULT_PARALLEL: usize = 4;

impl PromoteRequest {
    /// Every log dir of the request, `log_dir` first.
    pub fn log_dirs(&self) -> Vec<PathBuf> {
        std::iter::once(self.log_dir.clone())
            .chain(self.replica_log_dirs.iter().cloned())
            .collect()
    }
}

/// The time planning stamps (the abort markers' timestamp, the retention check's now): the clock's, or in tests the
/// one [`FIXED_NOW_MS`] sets on the planning thread, so that two promotions compared byte for byte cut alike.
fn planning_time() -> i64 {
    #[cfg(test)]
    if let Some(fixed) = FIXED_NOW_MS.with(std::cell::Cell::get) {
        return fixed;
    }
    now_ms()
}

#[cfg(test)]
thread_local! {
    pub(super) static FIXED_NOW_MS: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// A topic selection that matches whole topic names only (`orders` does not select `orders-eu`), as Kafka's own
/// topic regexes (`topics.regex`) are used.
pub fn topics_regex(pattern: &str) -> std::result::Result<Regex, regex::Error> {
    Regex::new(&format!("^(?:{pattern})$"))
}

/// What planning found: the partitions to promote, and what an operator should know.
pub(super) struct Plan {
    pub(super) planned: Vec<Planned>,
    /// Each log dir of the request with the partitions it gets (every log dir holding the partition's directory).
    pub(super) replicas: Vec<ReplicaDir>,
    pub(super) notes: Vec<String>,
    /// What the target's retention will delete (refused unless `allow_retention_delete`).
    pub(super) retention_deletes: Vec<RetentionLoss>,
}

/// Check every precondition of every partition in `todo` (and of their topics) and plan them; every refusal is
/// added to `refusals` (nothing is planned to run while there is one).
pub(super) fn plan(
    request: &PromoteRequest,
    catalog: &Catalog,
    all: &[MirrorPartition],
    todo: &[MirrorPartition],
    mirror_exists: bool,
    refusals: &mut Vec<Refusal>,
) -> Result<Plan> {
    let started = std::time::Instant::now();
    let step = |name: &str| tracing::debug!(elapsed = ?started.elapsed(), "planning: {name}");
    let mut planner = Planner::new(request, catalog, refusals)?;
    step("target log dirs and settings read");
    planner.check_topics(all, todo);
    step("topics checked");
    let inspected = inspect_all(request, &planner.targets, todo, mirror_exists);
    step("both sides of every partition read");
    for (p, seen) in todo.iter().zip(inspected) {
        planner.plan_partition(p, seen)?;
    }
    step("every partition planned");
    planner.check_topic_ids();
    planner.finish(all, todo)
}

/// One planning walk: the target log dirs and settings read once, what each partition and topic showed so far,
/// and the refusals found.
struct Planner<'a> {
    request: &'a PromoteRequest,
    /// Read only: what the installs recorded of each segment (`recorded_txns`).
    catalog: &'a Catalog,
    refusals: &'a mut Vec<Refusal>,
    log_dirs: Vec<PathBuf>,
    targets: Vec<target::TargetLogDir>,
    /// Each log dir with the partitions it gets.
    replicas: Vec<ReplicaDir>,
    /// The target's settings (`None`: `--target-config` unreadable, refused), or why its retention is unknown.
    settings: Option<std::result::Result<retention::TargetSettings, retention::Unknown>>,
    /// Each selected topic's retention on the target, where known.
    retentions: BTreeMap<String, retention::TopicRetention>,
    /// The target topic id of each planned partition, by topic.
    ids: BTreeMap<String, BTreeMap<i32, String>>,
    now_ms: i64,
    planned: Vec<Planned>,
    notes: Vec<String>,
    retention_deletes: Vec<RetentionLoss>,
}

impl<'a> Planner<'a> {
    fn new(request: &'a PromoteRequest, catalog: &'a Catalog, refusals: &'a mut Vec<Refusal>) -> Result<Self> {
        let log_dirs = request.log_dirs();
        let targets = log_dirs
            .iter()
            .map(|d| target::TargetLogDir::open(d))
            .collect::<Result<Vec<_>>>()?;
        let replicas: Vec<ReplicaDir> = log_dirs
            .iter()
            .map(|d| ReplicaDir {
                log_dir: d.clone(),
                partitions: Vec::new(),
            })
            .collect();
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
        Ok(Planner {
            request,
            catalog,
            refusals,
            log_dirs,
            targets,
            replicas,
            settings,
            retentions: BTreeMap::new(),
            ids: BTreeMap::new(),
            now_ms: planning_time(),
            planned: Vec::new(),
            notes: Vec::new(),
            retention_deletes: Vec::new(),
        })
    }

    /// Per selected topic: as many partitions on the target as in the mirror, and the target's retention known
    /// (or a note, with `allow_retention_delete`).
    fn check_topics(&mut self, all: &[MirrorPartition], todo: &[MirrorPartition]) {
        let topics: BTreeSet<&str> = todo.iter().map(|p| p.key.topic.as_str()).collect();
        for topic in &topics {
            let mirror_partitions = all.iter().filter(|p| p.key.topic == *topic).count();
            // With replicas, a broker holds only the partitions assigned to it: together they must hold every one.
            let target_partitions = match self.targets.as_slice() {
                [one] => one.partition_count(topic),
                several => several
                    .iter()
                    .flat_map(|t| t.partitions_of(topic).iter().copied())
                    .collect::<BTreeSet<i32>>()
                    .len(),
            };
            if mirror_partitions != target_partitions {
                self.refusals.push(Refusal::PartitionCountMismatch {
                    topic: topic.to_string(),
                    mirror_partitions,
                    target_partitions,
                });
            }
            let Some(settings) = &self.settings else { continue };
            match settings.as_ref().map_err(Clone::clone).and_then(|s| s.retention(topic)) {
                Ok(r) => {
                    self.retentions.insert(topic.to_string(), r);
                }
                Err(unknown) if self.request.allow_retention_delete => self.notes.push(format!(
                    "topic {topic}: retention not checked ({unknown}); the target may delete promoted data at start"
                )),
                Err(unknown) => self.refusals.push(Refusal::RetentionUnknown {
                    topic: topic.to_string(),
                    reason: unknown.to_string(),
                }),
            }
        }
    }

    /// One partition: both sides as inspected (even when one refuses, so one run names every problem), what the
    /// target's retention would delete, and the plan down to its offsets and open transactions.
    fn plan_partition(&mut self, p: &MirrorPartition, seen: Inspected) -> Result<()> {
        let tp = p.key.topic_partition();
        let mirror = seen.mirror?;
        self.refusals.extend(seen.mirror_refusals);
        let found = self.inspect_targets(&tp, seen.targets)?;
        let Some(mirror) = mirror else { return Ok(()) };
        self.check_retention(&tp, &mirror)?;
        let Some(found) = found else { return Ok(()) };
        let planned = self.planned(p, &tp, mirror, &found)?;
        self.planned.push(planned);
        Ok(())
    }

    /// The partition in every log dir holding its directory (Kafka creates it on each replica; with none, the first
    /// log dir's refusal names what is missing): its facts when every replica has them and they agree on the topic
    /// id. The log dirs that get it are recorded.
    fn inspect_targets(&mut self, tp: &TopicPartition, seen: Vec<TargetSeen>) -> Result<Option<target::TargetFacts>> {
        let mut found: Option<target::TargetFacts> = None;
        let mut replica_ids: Vec<(PathBuf, String)> = Vec::new();
        let mut every_replica = true;
        let mut holders = Vec::with_capacity(seen.len());
        for (i, facts, refusals) in seen {
            holders.push(i);
            self.refusals.extend(refusals);
            match facts? {
                Some(facts) => {
                    replica_ids.push((self.log_dirs[i].clone(), facts.topic_id.to_string()));
                    // The highest epoch any replica led in: every replica gets the same bytes, and no replica's
                    // epoch cache is ahead of them.
                    found = Some(match found {
                        Some(f) if f.leader_epoch >= facts.leader_epoch => f,
                        _ => facts,
                    });
                }
                None => every_replica = false,
            }
        }
        if replica_ids
            .iter()
            .any(|(_, id)| replica_ids.first().is_some_and(|(_, first)| first != id))
        {
            self.refusals.push(Refusal::ReplicaTopicIdsDiffer {
                partition: tp.clone(),
                ids: replica_ids,
            });
            every_replica = false;
        }
        let found = found.filter(|_| every_replica);
        if let Some(found) = &found {
            self.ids
                .entry(tp.topic.clone())
                .or_default()
                .insert(tp.partition, found.topic_id.to_string());
            for i in &holders {
                self.replicas[*i].partitions.push(tp.dir_name());
            }
        }
        Ok(found)
    }

    /// What the target topic's retention would delete of the promoted partition at the broker's first check:
    /// refused, or reported with `allow_retention_delete`.
    fn check_retention(&mut self, tp: &TopicPartition, mirror: &MirrorFacts) -> Result<()> {
        let Some(r) = self.retentions.get(&tp.topic) else {
            return Ok(());
        };
        let now_ms = self.now_ms;
        let dir = self.request.mirror_root.join(tp.dir_name());
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
            if self.request.allow_retention_delete {
                self.retention_deletes.push(loss);
            } else {
                self.refusals.push(Refusal::RetentionWouldDelete(Box::new(loss)));
            }
        }
        Ok(())
    }

    /// The partition's plan: the mirror cut at the consistent cut (if asked for), its open transactions found.
    fn planned(
        &self,
        p: &MirrorPartition,
        tp: &TopicPartition,
        mut mirror: MirrorFacts,
        found: &target::TargetFacts,
    ) -> Result<Planned> {
        let request = self.request;
        let mut consistent = None;
        let mut inside = None;
        let mut from_end = None;
        // The installs' records of this partition's segments, read from the catalog once, when first needed.
        let mut recorded: Option<recorded_txns::Recorded> = None;
        if let Some(at) = request.consistent_cut {
            let dir = request.mirror_root.join(tp.dir_name());
            // A tailed active segment's time index is derived (not fsynced): a hint only when it is what the
            // appender kept.
            let trust_last_index = match (mirror.tail_active, &mirror.tail_kept) {
                (None, _) => true,
                (Some(active), Some(kept)) => super::tail_kept::time_index_matches(kept, &dir, active.segment_base),
                (Some(_), None) => false,
            };
            if let Some(point) = consistent_cut::find(
                &dir,
                &mirror.segments,
                mirror.log_start_offset,
                mirror.log_end_offset,
                at,
                trust_last_index,
            )? {
                tracing::debug!(partition = %tp, read_bytes = point.read_bytes, cut = point.cut.cut_offset, "consistent cut found");
                // A cut inside a segment: where that segment ended before it.
                inside = point
                    .cut
                    .last_segment_bytes
                    .and(point.segments.last().copied())
                    .map(|base| recorded_txns::CutInside {
                        base,
                        end: mirror
                            .segments
                            .iter()
                            .copied()
                            .find(|b| *b > base)
                            .unwrap_or(mirror.log_end_offset),
                        cut_offset: point.cut.cut_offset,
                    });
                // The transactions open at the cut from those open at the end and the batches after the cut, which
                // the search read; a producer with a marker after the cut from the appender's or the segment's
                // record of the transaction it closed, else read backwards from the cut, only as far as its last
                // event (`recorded_txns::open_at_cut_reading_back`).
                if !point.segments.is_empty() {
                    if let Some(at_end) = self.open_at_mirror_end(p, &dir, &mirror, &mut recorded)? {
                        let read_closed_log = || match &mirror.tail_kept {
                            Some(kept) => super::tail_kept::closed_log(kept, &request.mirror_root, &tp.dir_name()),
                            None => Ok(Vec::new()),
                        };
                        let read_segment_log = |base: i64, record| recorded_txns::segment_log(&dir, base, record);
                        from_end = match inside {
                            Some(cut) => recorded_txns::open_at_cut_reading_back(
                                &dir,
                                self.recorded(p, &mut recorded)?,
                                &point.segments,
                                &mirror.snapshots,
                                cut,
                                recorded_txns::FromEnd {
                                    at_end: &at_end,
                                    closed: mirror.tail_kept.as_ref().map_or(&[], |k| &k.closed),
                                    closed_log: Some(&read_closed_log),
                                    segment_log: Some(&read_segment_log),
                                    after: &point.after,
                                },
                            )?,
                            None => recorded_txns::open_at_cut_from_end(&at_end, &point.after, point.cut.cut_offset),
                        };
                    }
                }
                mirror.log_end_offset = point.cut.cut_offset;
                mirror.segments = point.segments;
                let kept = mirror.log_end_offset;
                mirror.snapshots.retain(|o| *o <= kept);
                consistent = Some(point.cut);
            }
        }
        // The tail appender's record of the transactions open at the end spares the walk (`tail_kept`) when it
        // holds what the walk would find; a cut, a producer snapshot (where the walk would start) or a transaction
        // the record cannot describe take the walk.
        let kept_open = tail_tallied_at_end(&mirror)
            .filter(|_| consistent.is_none())
            .map(|open| txn_cut::cut_at_end(open, mirror.log_end_offset));
        let dir = request.mirror_root.join(tp.dir_name());
        // The installs' records of each segment's transactions spare it too (`recorded_txns`); a cut inside a
        // segment walks that segment's batches below the cut, and no other.
        let mut recorded_open = || -> Result<Option<Vec<txn_cut::CutTransaction>>> {
            let recorded = self.recorded(p, &mut recorded)?;
            match inside {
                Some(cut) => recorded_txns::open_at_cut(&dir, recorded, &mirror.segments, &mirror.snapshots, cut),
                None => Ok(recorded_txns::open_at_end(
                    &dir,
                    recorded,
                    &mirror.segments,
                    &mirror.snapshots,
                    mirror.log_end_offset,
                )),
            }
        };
        let cut = if let Some(kept) = kept_open {
            #[cfg(test)]
            super::tail_kept::used::note(&dir, "open-transactions");
            kept
        } else if let Some(at_cut) = from_end {
            #[cfg(test)]
            super::tail_kept::used::note(&dir, "transactions-from-the-end");
            at_cut
        } else if let Some(recorded) = recorded_open()? {
            #[cfg(test)]
            super::tail_kept::used::note(&dir, "recorded-transactions");
            recorded
        } else {
            txn_cut::find_open_transactions(&dir, &mirror.segments, &mirror.snapshots, mirror.log_end_offset)?
        };
        // What was kept describes the whole active segment; a cut inside it judges the companions against it before
        // cutting them back (`build::hand_over_cut_segment`).
        let tail_kept = mirror.tail_kept;
        Ok(Planned {
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
            cut_timestamp: self.now_ms,
            tail_active: mirror.tail_active,
            handover: false,
            last_segment_bytes: Some(mirror.last_segment_bytes).filter(|_| consistent.is_none()),
            consistent_cut: consistent,
            tail_kept,
        })
    }

    /// The transactions open at the mirror's end with their first offsets and tallies, from what the appliers
    /// recorded: the tail appender's (where it holds what the walk would find), else the installs' records folded.
    /// `None` when neither can tell.
    fn open_at_mirror_end(
        &self,
        p: &MirrorPartition,
        dir: &std::path::Path,
        mirror: &MirrorFacts,
        recorded: &mut Option<recorded_txns::Recorded>,
    ) -> Result<Option<Vec<txn_cut::Tallied>>> {
        if let Some(tallied) = tail_tallied_at_end(mirror) {
            return Ok(Some(tallied));
        }
        Ok(recorded_txns::open_at(
            dir,
            self.recorded(p, recorded)?,
            &mirror.segments,
            &mirror.snapshots,
            mirror.log_end_offset,
        ))
    }

    /// The installs' records of `p`'s segments (`recorded_txns`), read from the catalog into `cache` the first time.
    fn recorded<'c>(
        &self,
        p: &MirrorPartition,
        cache: &'c mut Option<recorded_txns::Recorded>,
    ) -> Result<&'c recorded_txns::Recorded> {
        let recorded = match cache.take() {
            Some(recorded) => recorded,
            None => self.catalog.installed_txn_ends(p.id)?,
        };
        Ok(cache.insert(recorded))
    }

    /// Per topic: its planned partitions carry one topic id, the one the target's metadata log names for it.
    fn check_topic_ids(&mut self) {
        for (topic, ids) in std::mem::take(&mut self.ids) {
            let distinct: BTreeSet<&String> = ids.values().collect();
            if distinct.len() > 1 {
                self.refusals.push(Refusal::TargetTopicIdsDiffer { topic, ids });
            } else if let (Some(Ok(settings)), Some(id)) = (&self.settings, distinct.first()) {
                // The broker keeps a partition directory only if the metadata log names the same topic id.
                let metadata_topic_id = settings.topic_id(&topic);
                if metadata_topic_id.as_ref() != Some(*id) {
                    self.refusals.push(Refusal::TargetTopicIdDisagrees {
                        topic,
                        metadata_log: settings.metadata_dir.clone(),
                        metadata_topic_id,
                        partition_topic_id: (*id).clone(),
                    });
                }
            }
        }
    }

    /// How the plan hands files over, decided for all its partitions, and the log dirs that get any.
    fn finish(mut self, all: &[MirrorPartition], todo: &[MirrorPartition]) -> Result<Plan> {
        let replicas = &self.replicas;
        // Renamed only into the last log dir that gets a partition: those must share the mirror's file system.
        let rename_into: Vec<PathBuf> = replicas
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                r.partitions
                    .iter()
                    .any(|name| !replicas[i + 1..].iter().any(|l| l.partitions.contains(name)))
            })
            .map(|(_, r)| r.log_dir.clone())
            .collect();
        let rename = decide_handover(self.request, &rename_into, all, todo, &mut self.notes, self.refusals)?;
        for p in &mut self.planned {
            p.handover = rename;
        }
        self.replicas.retain(|r| !r.partitions.is_empty());
        Ok(Plan {
            planned: self.planned,
            replicas: self.replicas,
            notes: self.notes,
            retention_deletes: self.retention_deletes,
        })
    }
}

/// Whether this promotion hands the mirror's files over by rename ([`Handover`]); a refusal for `Rename` across
/// file systems, a note when `Auto` copies.
fn decide_handover(
    request: &PromoteRequest,
    rename_into: &[PathBuf],
    all: &[MirrorPartition],
    todo: &[MirrorPartition],
    notes: &mut Vec<String>,
    refusals: &mut Vec<Refusal>,
) -> Result<bool> {
    if request.handover == Handover::Copy {
        return Ok(false);
    }
    let mut same_fs = true;
    for log_dir in rename_into {
        if !same_file_system(&request.mirror_root, log_dir)? {
            same_fs = false;
            if request.handover == Handover::Rename {
                refusals.push(Refusal::HandoverAcrossFileSystems {
                    mirror_root: request.mirror_root.clone(),
                    log_dir: log_dir.clone(),
                });
            }
        }
    }
    if request.handover == Handover::Rename {
        return Ok(same_fs);
    }
    let promoting: std::collections::HashSet<&PartitionKey> = todo.iter().map(|t| &t.key).collect();
    let left_mirroring = all
        .iter()
        .filter(|p| p.state != PartitionState::Promoted && !promoting.contains(&p.key))
        .count();
    let why_copy = if !same_fs {
        Some("the mirror root and the log dir are on different file systems".to_string())
    } else if left_mirroring > 0 {
        Some(format!(
            "{left_mirroring} partition(s) of the link stay mirrored (the topic selection does not cover the link)"
        ))
    } else {
        None
    };
    if let Some(why) = &why_copy {
        notes.push(format!("--handover auto copies: {why}"));
    }
    Ok(why_copy.is_none())
}

/// Whether `a` and `b` (existing paths) are on the same file system (`st_dev`).
#[cfg(unix)]
fn same_file_system(a: &Path, b: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).map_err(|e| Error::io(p, e));
    Ok(dev(a)? == dev(b)?)
}

#[cfg(not(unix))]
fn same_file_system(_: &Path, _: &Path) -> Result<bool> {
    Ok(false)
}

/// The transactions open at the mirror's end as the tail appender recorded them (producer, first offset, tally),
/// where that record holds what the walk would find: kept facts, no producer snapshot (where the walk would start),
/// every transaction tallied and begun inside the mirror.
fn tail_tallied_at_end(mirror: &MirrorFacts) -> Option<Vec<txn_cut::Tallied>> {
    let open = mirror.tail_open_transactions.as_deref()?;
    if mirror.tail_kept.is_none() || !mirror.snapshots.is_empty() {
        return None;
    }
    let first_base = mirror.segments.first().copied().unwrap_or(mirror.log_end_offset);
    super::tail_kept::tallied(open, first_base, mirror.log_end_offset)
}

/// Pause the planned partitions in the catalog so that a running applier leaves them alone, then check that
/// nothing was installed between planning and pausing.
pub(super) fn pause(
    catalog: &mut Catalog,
    link: &str,
    mirror_root: &Path,
    planned: &[Planned],
    previous: &BTreeMap<TopicPartition, PartitionState>,
) -> Result<()> {
    let mut refusals = Vec::new();
    let ids = planned
        .iter()
        .map(|p| catalog.partition(&PartitionKey::of(link, &p.tp())).map(|row| row.id))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // One transaction for every partition: one commit (one fsync of the catalog's log) however many they are.
    let rows = catalog.set_partitions_state(&ids, PartitionState::Paused)?;
    for (p, row) in planned.iter().zip(rows) {
        let expected = p
            .tail_active
            .map_or(Some(p.mirror_end_offset()), |t| t.catalog_end_offset);
        if row.installed_end_offset != expected {
            refusals.push(Refusal::MirrorCatalogMismatch {
                partition: p.tp(),
                log: mirror_root.join(p.tp().dir_name()),
                mirror_end_offset: p.mirror_end_offset(),
                catalog_end_offset: row.installed_end_offset,
            });
        }
    }
    if refusals.is_empty() {
        return Ok(());
    }
    // Undo the pause: nothing else was changed.
    for p in planned {
        let key = PartitionKey::of(link, &p.tp());
        if let Some(state) = previous.get(&p.tp()).filter(|s| **s != PartitionState::Paused) {
            let row = catalog.partition(&key)?;
            catalog.set_partition_state(row.id, *state)?;
        }
    }
    Err(Error::Refused { refusals })
}
