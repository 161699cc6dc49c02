//! What a promotion reports: per partition, what happened and what the promoted log now is.
//!
//! Kept apart from the steps because the CLI prints it (text or JSON) and tests compare it; a journaled rerun
//! builds the same entries as the first run.

use segmirror_catalog::MirrorPartition;
use serde::Serialize;
use std::path::PathBuf;

use super::consistent_cut::ConsistentCut;
use super::retention::loss::RetentionLoss;
use super::txn_cut::CutTransaction;

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
    /// Where the mirror partition ended: `log_end_offset` less the abort markers, unless a consistent cut left
    /// offsets behind (`consistent_cut` says what and why).
    pub mirror_end_offset: Option<i64>,
    /// What `--consistent-cut` left behind (`None`: no batch was newer than the cut, or no consistent cut).
    pub consistent_cut: Option<ConsistentCut>,
    /// Segments and bytes of `.log` copied (0 for `AlreadyPromoted`).
    pub segments: usize,
    pub log_bytes: u64,
    /// Batches whose epoch was rewritten.
    pub batches_restamped: u64,
    /// The mirror's files were handed over by rename (`--handover`), not copied: the mirror no longer holds them.
    pub handed_over: bool,
    /// Transactions open at the mirror's end, aborted by this promotion (an ABORT marker each, at
    /// `marker_offset`; `log_end_offset` counts the markers).
    pub transactions_aborted: Vec<CutTransaction>,
    /// The broker log dirs that hold the promoted partition (replicas), in the order they were installed; empty for
    /// `AlreadyPromoted` (the catalog's `promoted_replicas` lists them).
    pub log_dirs: Vec<PathBuf>,
}

/// What happened in one log dir of a promotion into several replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaOutcome {
    /// Installed by this run.
    Installed,
    /// An interrupted promotion into it was finished by this run.
    Resumed,
    /// An earlier run of the same interrupted promotion had finished it (same plan, so the same bytes); skipped.
    FinishedEarlier,
}

/// One log dir of a promotion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplicaReport {
    pub log_dir: PathBuf,
    pub outcome: ReplicaOutcome,
    /// Partitions it got.
    pub partitions: usize,
    /// Bytes of `.log` copied (or handed over) into it by this run.
    pub log_bytes: u64,
}

/// What a promotion did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromoteReport {
    /// The first log dir of the request.
    pub log_dir: PathBuf,
    /// Every log dir this run installed into, finished or found finished (replicas), in order.
    pub log_dirs: Vec<ReplicaReport>,
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

pub(super) fn already_promoted(p: &MirrorPartition) -> PromotedPartition {
    PromotedPartition {
        topic: p.key.topic.clone(),
        partition: p.key.partition,
        outcome: Outcome::AlreadyPromoted,
        target_topic_id: p.mirror_topic_id.clone(),
        leader_epoch: None,
        log_start_offset: p.log_start_offset,
        log_end_offset: p.installed_end_offset,
        mirror_end_offset: None,
        consistent_cut: None,
        segments: 0,
        log_bytes: 0,
        batches_restamped: 0,
        handed_over: false,
        transactions_aborted: Vec::new(),
        log_dirs: Vec::new(),
    }
}
