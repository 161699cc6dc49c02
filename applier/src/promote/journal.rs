//! The journal of a promotion: its plan, written durably before anything in the target changes.
//!
//! Why: promotion touches many directories of a broker's log dir and the catalog; a crash between any two steps
//! must be finishable by a rerun that does *exactly* what was decided, not re-decide it from a half-changed disk.
//! So the plan (every partition, its offsets, epochs, what is cut and when) is journaled in
//! `<log dir>/.segmirror-promote/promotion.json` first, and every later step reads only the journal.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use segment_format::durable::{fsync_dir, write_atomically};
use segment_format::TopicPartition;
use serde::{Deserialize, Serialize};

use super::consistent_cut::ConsistentCut;
use super::error::{Error, Result};
use super::files::create_dir;
use super::txn_cut::CutTransaction;

/// Promotion's work directory inside the target log dir (the journal and the partitions being built). Not a
/// partition name: the broker refuses to start while it exists. Named apart from the applier's `STAGING_DIR`
/// (downloads in the mirror root), which is another directory with another purpose.
pub const PROMOTION_DIR: &str = ".segmirror-promote";
/// The journal of an unfinished promotion, inside [`PROMOTION_DIR`].
pub const JOURNAL_FILE: &str = "promotion.json";
/// `format` of the journal.
pub const JOURNAL_FORMAT: &str = "segmirror.promotion.v1";
/// Largest journal read back: a few hundred bytes per partition; 64 MiB is far beyond any real promotion and keeps
/// a damaged file from exhausting memory.
pub(super) const MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// One partition of a promotion plan, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Planned {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// The target topic id (Kafka's text form).
    pub(crate) target_topic_id: String,
    /// The epoch every batch is restamped to.
    pub(crate) leader_epoch: i32,
    pub(crate) log_start_offset: i64,
    pub(crate) log_end_offset: i64,
    /// Base offsets of the segments to copy (those not wholly below the log start offset), ascending.
    pub(crate) segments: Vec<i64>,
    /// The mirror's producer-state snapshots (read to find open transactions; none is copied: the promoted
    /// partition starts with empty producer state, see `producer_state`).
    pub(crate) snapshots: Vec<i64>,
    /// The catalog's state before promotion paused it.
    pub(crate) previous_state: String,
    /// Transactions open at `log_end_offset`, aborted by markers from there on (see `txn_cut`).
    #[serde(default)]
    pub(crate) cut: Vec<CutTransaction>,
    /// Timestamp of the abort markers (decided at planning, so a rebuilt partition is identical).
    #[serde(default)]
    pub(crate) cut_timestamp: i64,
    /// The partition was tailed: its last segment is the tail appender's active segment, which has no companions
    /// in the mirror (see `build`). `None` for a partition installed by `apply` (and in journals written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tail_active: Option<TailActive>,
    /// The mirror's files are handed over by rename into staging instead of copied (`--handover`; see `build`).
    /// Journaled so that a rerun after a crash between renames moves the rest, never rebuilds from a mirror that
    /// no longer holds them. `false` in journals written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) handover: bool,
    /// The consistent cut (`--consistent-cut`): `log_end_offset` and `segments` are then the cut's, and the last
    /// segment may be promoted only up to `last_segment_bytes`. `None` in journals written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) consistent_cut: Option<ConsistentCut>,
    /// What the tail appender kept of the tailed active segment at the planned size (`tail_kept`), trusted where
    /// the files match it. `None`: not tailed, not kept (an older appender), and in journals written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tail_kept: Option<crate::direct::Kept>,
    /// The size of the last segment's `.log` at planning (not with a consistent cut inside it): where abort markers
    /// are appended. `None` in journals written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_segment_bytes: Option<u64>,
}

/// The tailed active segment of a planned partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TailActive {
    /// Its base offset (the partition's last segment).
    pub(crate) segment_base: i64,
    /// What the catalog recorded installed (the sealed segments' end) at planning, checked again at the pause.
    pub(crate) catalog_end_offset: Option<i64>,
}

impl Planned {
    pub(crate) fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }

    pub(crate) fn first_base_offset(&self) -> i64 {
        self.segments.first().copied().unwrap_or(self.log_end_offset)
    }

    /// Where the mirror partition ended at planning (beyond `log_end_offset` when a consistent cut left some behind).
    pub(crate) fn mirror_end_offset(&self) -> i64 {
        self.consistent_cut
            .as_ref()
            .map_or(self.log_end_offset, |c| c.mirror_end_offset)
    }

    /// Bytes of the last segment's `.log` promoted when a consistent cut falls inside it.
    pub(crate) fn last_segment_limit(&self) -> Option<u64> {
        self.consistent_cut.as_ref().and_then(|c| c.last_segment_bytes)
    }

    /// The planned size of the last segment's `.log` (journaled, or what the tail appender kept describes it in
    /// journals written before): the bytes abort markers are appended after, so that a rerun can cut a handed-over
    /// file (the only copy) back to them and append the same markers again.
    pub(crate) fn last_segment_size(&self) -> Option<u64> {
        let last = *self.segments.last()?;
        if self.last_segment_limit().is_some() {
            return None;
        }
        self.last_segment_bytes.or_else(|| {
            self.tail_kept
                .as_ref()
                .filter(|k| k.segment_base == last)
                .map(|k| k.position)
        })
    }

    /// The promoted partition's log end offset: the mirror's (or the consistent cut's), plus one abort marker per
    /// cut transaction.
    pub(crate) fn end_offset(&self) -> i64 {
        self.log_end_offset.saturating_add(self.cut.len() as i64)
    }
}

/// The journal: the plan of an unfinished promotion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub(crate) format: String,
    pub(crate) link: String,
    pub(crate) mirror_root: PathBuf,
    pub(crate) partitions: Vec<Planned>,
    /// Every log dir of the promotion, in the order they are installed, with the partitions each gets (replicas,
    /// see `replicas`). The same journal is written into every one of them before anything is built, so a rerun
    /// that finds it in any of them knows the whole promotion. Empty in journals written before: the log dir the
    /// journal is in, with every partition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) replicas: Vec<ReplicaDir>,
}

/// One log dir of a promotion into several replicas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReplicaDir {
    pub(crate) log_dir: PathBuf,
    /// The journaled partitions this log dir gets, by directory name (`<topic>-<partition>`).
    pub(crate) partitions: Vec<String>,
}

impl Journal {
    /// The journal of each log dir, in order: the partitions it gets, each handed over by rename (when planned so)
    /// only in the last log dir that gets it — the copies into the others come first, from the mirror's files.
    /// `found_in` is the log dir of a journal written before replicas (no `replicas`).
    pub(crate) fn per_log_dir(&self, found_in: &Path) -> Vec<(PathBuf, Journal)> {
        let replicas = if self.replicas.is_empty() {
            vec![ReplicaDir {
                log_dir: found_in.to_path_buf(),
                partitions: self.partitions.iter().map(|p| p.tp().dir_name()).collect(),
            }]
        } else {
            self.replicas.clone()
        };
        // Sets, not lists: a promotion of 10,000 partitions looked each name up in a list of 10,000.
        let sets: Vec<HashSet<&str>> = replicas
            .iter()
            .map(|r| r.partitions.iter().map(String::as_str).collect())
            .collect();
        let names: Vec<String> = self.partitions.iter().map(|p| p.tp().dir_name()).collect();
        replicas
            .iter()
            .zip(&sets)
            .enumerate()
            .map(|(i, (r, gets))| {
                let later = sets.get(i + 1..).unwrap_or_default();
                let partitions = self
                    .partitions
                    .iter()
                    .zip(&names)
                    .filter(|(_, name)| gets.contains(name.as_str()))
                    .map(|(p, name)| {
                        let mut p = p.clone();
                        p.handover = p.handover && !later.iter().any(|l| l.contains(name.as_str()));
                        p
                    })
                    .collect();
                let journal = Journal {
                    partitions,
                    replicas: Vec::new(),
                    ..self.clone()
                };
                (r.log_dir.clone(), journal)
            })
            .collect()
    }

    /// The log dir a partition's files are handed over to (the last that gets it), if it is handed over.
    pub(crate) fn handed_over_to(&self, p: &Planned, found_in: &Path) -> Option<PathBuf> {
        if !p.handover {
            return None;
        }
        let name = p.tp().dir_name();
        if self.replicas.is_empty() {
            return Some(found_in.to_path_buf());
        }
        self.replicas
            .iter()
            .rev()
            .find(|r| r.partitions.contains(&name))
            .map(|r| r.log_dir.clone())
    }
}

/// Points between the steps of a promotion, for crash tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// The journal is durable; nothing built yet.
    Journaled,
    /// A partition's `.building` directory is complete (durable with the others at the `syncfs` after the last).
    Built(TopicPartition),
    /// The live directory moved to `.old`; the new one not yet in place.
    MovedAside(TopicPartition),
    /// The new partition directory is live.
    Swapped(TopicPartition),
    /// The root checkpoints are written.
    Checkpointed,
    /// The catalog marks every partition promoted; staging still there.
    Recorded,
    /// A log dir other than the last of a promotion into several replicas is finished (its staging removed); the
    /// next one is not started.
    ReplicaInstalled(PathBuf),
}

/// The journal of an unfinished promotion, if there is one. A journal that cannot be read is an error: the
/// promotion it describes may be half done, and only it says what to finish.
pub(super) fn read_journal(staging: &Path) -> Result<Option<Journal>> {
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
    let planned: HashSet<String> = journal.partitions.iter().map(|p| p.tp().dir_name()).collect();
    for r in &journal.replicas {
        if let Some(name) = r.partitions.iter().find(|n| !planned.contains(n.as_str())) {
            return Err(invalid(format!(
                "log dir {} gets {name}, which the plan does not hold",
                r.log_dir.display()
            )));
        }
    }
    Ok(Some(journal))
}

/// Write `journal` durably into `staging` (created if missing, with the log dir fsynced).
pub(super) fn write_journal(journal: &Journal, log_dir: &Path, staging: &Path) -> Result<()> {
    create_dir(staging)?;
    fsync_dir(log_dir)?;
    let json = serde_json::to_vec_pretty(journal).map_err(|e| {
        Error::io(
            staging.join(JOURNAL_FILE),
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    write_atomically(&staging.join(JOURNAL_FILE), &json)?;
    Ok(())
}
