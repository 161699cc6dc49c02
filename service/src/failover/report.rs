//! `failover --json`: the failover's report, the one JSON document printed on stdout, for a runbook's automation
//! (a pager note with the RPO, a ticket with the left-behind table) that must not scrape the human lines.
//!
//! The document (`format` `segmirror.failover-report.v1`; the field names are a contract, documented in README's
//! runbook): the link, whether the failover finished, each step in order (name, status, attempts, this run's
//! duration, the journal's duration, outcome or error), the cut's RPO and per-partition left-behind table, and the
//! offsets committed (per group, as `segmirror offsets commit --json` reports them, with the clamped count).

use cluster_client::offsets_commit::GroupReport;
use serde::Serialize;

/// The document's `format`.
pub const REPORT_FORMAT: &str = "segmirror.failover-report.v1";

/// The whole document.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub link: String,
    /// The link's state when this run started (`active`, `paused`, `promoted`).
    pub link_state_at_start: String,
    /// Every step done (by this run or an earlier one).
    pub finished: bool,
    /// This run's time, in milliseconds.
    pub took_ms: u64,
    /// Every step, in order, including those this run did not reach (`status` `not-run`).
    pub steps: Vec<StepReport>,
    /// The cut's RPO and left-behind table; `null` when the cut was not reached.
    pub cut: Option<CutReport>,
    /// The offsets step's commits; `null` when it did not run in this run.
    pub offsets: Option<OffsetsReport>,
}

/// What happened to one step in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepStatus {
    /// Ran and finished in this run.
    Done,
    /// Finished by an earlier run (skipped).
    DoneEarlier,
    /// Ran in this run and failed: the failover stopped here.
    Failed,
    /// Not reached in this run (a step before it failed).
    NotRun,
}

#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub name: &'static str,
    pub status: StepStatus,
    /// Times the step was started, this run's included (the journal's count).
    pub attempts: u32,
    /// This run's time in the step, in milliseconds; `null` when it did not run.
    pub took_ms: Option<u64>,
    /// From the journal: from the last start to the finish, in milliseconds; `null` when not finished.
    pub journal_took_ms: Option<u64>,
    /// The step's one-line outcome (as journaled); `null` unless finished.
    pub outcome: Option<String>,
    /// Why it failed; `null` unless failed.
    pub error: Option<String>,
}

/// The cut: what was known on the source side and not installed when the link was promoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CutReport {
    pub rpo: Rpo,
    /// One row per partition the link knows of, sorted by topic and partition.
    pub left_behind: Vec<LeftBehind>,
}

/// The sums of the left-behind table. Records produced on the source and neither shipped nor consumed are not
/// known here, so these are lower bounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rpo {
    pub left_offsets: i64,
    pub left_bytes: u64,
    /// Segment versions shipped (in the catalog, or in the bucket's manifests) and not installed.
    pub pending_versions: u64,
    pub partitions_behind: usize,
    pub partitions: usize,
    /// The sum of the installed end offsets.
    pub installed_offsets: i64,
}

/// One partition's row of the left-behind table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftBehind {
    pub topic: String,
    pub partition: i32,
    pub installed_end: Option<i64>,
    /// The highest source offset known (a direct shipper's report, a group's commit, the bucket's newest version).
    pub known_source_end: Option<i64>,
    /// The end of the newest version the bucket holds (bucket links; `null` for a direct link).
    pub bucket_end: Option<i64>,
    pub left_offsets: i64,
    pub left_bytes: Option<u64>,
    pub pending_versions: u64,
}

/// The offsets step.
#[derive(Debug, Clone, Serialize)]
pub struct OffsetsReport {
    /// Offsets recorded for the link (every group, topic, partition).
    pub recorded: usize,
    pub committed: usize,
    /// Lowered to the installed log end (the group had consumed records that were not installed).
    pub clamped: usize,
    pub groups: Vec<GroupReport>,
}

/// What the steps report besides their one-line outcome (filled by the steps that have a table).
#[derive(Debug, Default)]
pub struct Details {
    pub cut: Option<CutReport>,
    pub offsets: Option<OffsetsReport>,
}
