//! The failover of a link onto its target cluster (`segmirror failover --link NAME`): the steps in order,
//! resumable after a crash at any step.
//!
//! The steps (each journaled in the catalog, `segmirror_catalog::FailoverStep`):
//! 1. `cut`: with [`CutMode::Drain`], wait until the link has installed what its source side made available; with
//!    [`CutMode::Now`], not. Then the link becomes `promoted` (the gate stops its appliers) and the report says, per
//!    partition, what was left behind (the RPO, where the catalog knows it).
//! 2. `topics`: create or check the target topics from the link's metadata in the catalog (the code of `segmirror
//!    topics create`); a difference stops the failover unless `allow_differences`.
//! 3. `stop-brokers`: the stop hook, or a message saying what to stop; then wait until each log dir's `.lock` is
//!    free.
//! 4. `install`: `segmirror promote` of the link's partitions into the log dir (`--handover auto` by default).
//! 5. `start-brokers`: the start hook, or a message; then wait until the bootstrap address answers.
//! 6. `offsets`: commit the link's consumer offsets on the target (the code of `segmirror offsets commit`):
//!    clamped to the installed log ends, no leader epoch, memberless, read back.
//!
//! Why one sequence and a journal: run by hand, these steps are where a failover goes wrong (a topic created with
//! another partition count, offsets committed before the data is installed, a step skipped after an interruption).
//! A rerun with the same settings skips the finished steps and redoes the one that was cut short; every step is
//! idempotent (the state change is a no-op when already made, `topics create` creates only what is missing,
//! `promote` finishes its own journaled promotion, a broker already stopped or started is not waited for, the same
//! offsets are committed again). The report (`report.rs`) is what `--json` prints.
//!
//! Why the printing is behind [`Narrator`]: the steps say what they do as they go (progress lines, the tables of
//! topics, commits and what was left behind); the command line prints them, a test or another front end can keep
//! them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use cluster_client::offsets_commit::GroupReport;
use cluster_client::topics_plan::TopicCheck;
use segmirror_catalog::{Catalog, FailoverStep};
use segmirror_transport::S3Options;

use crate::runtime::Runtime;

mod brokers;
mod bucket;
mod cut;
pub mod report;
pub mod steps;

pub use cut::left_behind_now;
use report::{CutReport, Details, Report, StepReport, StepStatus, REPORT_FORMAT};

/// Whether the cut waits for the link to drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutMode {
    /// Wait until the link has installed what its source side made available (at most `drain_timeout`).
    Drain,
    /// Cut now: what is not installed yet is left behind (and reported).
    Now,
}

/// What a failover needs to know (the command line's `segmirror failover` flags).
#[derive(Debug, Clone)]
pub struct FailoverConfig {
    /// The link to fail over (a link of the applier's catalog).
    pub link: String,
    /// The mirror root the link installs into.
    pub mirror: PathBuf,
    /// The catalog (default: the mirror's).
    pub catalog: Option<PathBuf>,
    pub cut: CutMode,
    /// Longest wait for a drain, in seconds.
    pub drain_timeout: u64,
    /// How long nothing may change before the link counts as drained, in seconds.
    pub drain_quiet: f64,
    /// Key prefix inside a bucket link's store.
    pub prefix: String,
    pub s3: S3Options,
    /// A broker of the target cluster, HOST:PORT.
    pub bootstrap: Option<String>,
    /// The target brokers' log dirs (one per broker for replicated topics).
    pub log_dirs: Vec<PathBuf>,
    pub stop_hook: Option<String>,
    pub start_hook: Option<String>,
    /// Longest wait for the brokers to stop, and to answer after they start, in seconds.
    pub broker_timeout: u64,
    /// Go on when a target topic differs from the source's.
    pub allow_differences: bool,
    /// Replication factor of created topics (default: the target's).
    pub replication_factor: Option<i16>,
    /// How the mirror's files reach the log dir: `copy`, `rename` or `auto`.
    pub handover: String,
    /// Cut every partition of the link at one source moment (milliseconds since the epoch).
    pub consistent_cut: Option<i64>,
    /// The target broker's server.properties.
    pub target_config: Option<PathBuf>,
    /// Promote even where the target topic's retention would delete promoted data.
    pub allow_retention_delete: bool,
    /// Longest wait for one request to the target, in seconds.
    pub timeout: u64,
}

/// What the failover says while it runs: progress lines (stdout), warnings (stderr) and its tables.
pub trait Narrator {
    /// One progress line.
    fn line(&self, text: &str);
    /// One line for the operator's attention (a refusal's reasons, a failed step).
    fn warn(&self, text: &str);
    /// The topics created or checked on the target.
    fn topics(&self, checks: &[TopicCheck]) -> std::io::Result<()>;
    /// The offsets committed on the target.
    fn commits(&self, reports: &[GroupReport]) -> std::io::Result<()>;
    /// What the cut left behind, per partition.
    fn left_behind(&self, report: &CutReport) -> std::io::Result<()>;
}

/// One failover run's settings and surroundings, handed to every step.
#[derive(Clone, Copy)]
pub struct Failover<'a> {
    pub config: &'a FailoverConfig,
    pub runtime: &'a Runtime,
    pub out: &'a dyn Narrator,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every step is done (by this run or an earlier one).
    Finished,
    /// A step failed: the failover stopped there; a rerun redoes it.
    StoppedAtFailedStep,
}

/// What happened to each step in this run, in order: status, this run's time in it, the error.
pub type RunSteps = Vec<(StepStatus, Option<Duration>, Option<String>)>;

/// What a run did: how it ended, its steps, and what the steps reported besides their outcome lines.
pub struct RunOutcome {
    pub end: RunEnd,
    pub steps: RunSteps,
    pub details: Details,
}

/// Runs every step not finished yet, in order (see the module doc).
pub fn run(failover: &Failover, catalog: &mut Catalog, state_at_start: &str) -> anyhow::Result<RunOutcome> {
    let mut details = Details::default();
    let mut run_steps = RunSteps::new();
    let end = run_steps_in_order(failover, state_at_start, catalog, &mut details, &mut run_steps)?;
    Ok(RunOutcome {
        end,
        steps: run_steps,
        details,
    })
}

/// Every step not finished yet, in order; `run_steps` gets what happened to each this run, in order.
fn run_steps_in_order(
    failover: &Failover,
    state_at_start: &str,
    catalog: &mut Catalog,
    details: &mut Details,
    run_steps: &mut RunSteps,
) -> anyhow::Result<RunEnd> {
    let Failover { config, out, .. } = *failover;
    let started = Instant::now();
    out.line(&format!(
        "failover of link {} (state {state_at_start}) into {} at {}",
        config.link,
        config
            .log_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        config.bootstrap.as_deref().unwrap_or("?")
    ));
    for (position, step) in steps::STEPS.iter().enumerate() {
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        let journaled = catalog.start_failover_step(&config.link, step.name(), position)?;
        if journaled.finished() {
            out.line(&format!("[{}] done earlier: {}", step.name(), journaled.outcome));
            run_steps.push((StepStatus::DoneEarlier, None, None));
            continue;
        }
        if journaled.attempts > 1 {
            out.line(&format!(
                "[{}] interrupted earlier; redoing it (attempt {})",
                step.name(),
                journaled.attempts
            ));
        }
        let step_started = Instant::now();
        match steps::run_step(*step, failover, catalog, details) {
            Ok(outcome) => {
                catalog.finish_failover_step(&config.link, step.name(), &outcome)?;
                out.line(&format!(
                    "[{}] {outcome} ({:.1} s)",
                    step.name(),
                    step_started.elapsed().as_secs_f64()
                ));
                run_steps.push((StepStatus::Done, Some(step_started.elapsed()), None));
            }
            Err(e) => {
                out.warn(&format!(
                    "segmirror failover: step {} failed: {e:#}\nfix the cause and run the same command again: the \
                     finished steps are skipped",
                    step.name()
                ));
                run_steps.push((StepStatus::Failed, Some(step_started.elapsed()), Some(format!("{e:#}"))));
                return Ok(RunEnd::StoppedAtFailedStep);
            }
        }
    }
    out.line(&format!(
        "failover of link {} finished in {:.1} s (this run)",
        config.link,
        started.elapsed().as_secs_f64()
    ));
    Ok(RunEnd::Finished)
}

/// `--json`'s document: this run's steps beside the journal's attempts, durations and outcomes.
pub fn report(
    link: &str,
    catalog: &Catalog,
    state_at_start: &str,
    started: Instant,
    details: Details,
    run_steps: &[(StepStatus, Option<Duration>, Option<String>)],
) -> anyhow::Result<Report> {
    let journal: Vec<FailoverStep> = catalog.failover_steps(link).context("reading the failover journal")?;
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let steps: Vec<StepReport> = steps::STEPS
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let row = journal.iter().find(|s| s.step == step.name());
            let (status, took, error) = run_steps.get(i).cloned().unwrap_or((StepStatus::NotRun, None, None));
            StepReport {
                name: step.name(),
                status,
                attempts: row.map_or(0, |r| r.attempts),
                took_ms: took.map(ms),
                journal_took_ms: row.and_then(|r| {
                    r.finished_at_ms
                        .map(|f| u64::try_from(f - r.started_at_ms).unwrap_or(0))
                }),
                outcome: row.filter(|r| r.finished()).map(|r| r.outcome.clone()),
                error,
            }
        })
        .collect();
    Ok(Report {
        format: REPORT_FORMAT,
        link: link.to_string(),
        link_state_at_start: state_at_start.to_string(),
        finished: steps
            .iter()
            .all(|s| matches!(s.status, StepStatus::Done | StepStatus::DoneEarlier)),
        took_ms: ms(started.elapsed()),
        steps,
        cut: details.cut,
        offsets: details.offsets,
    })
}

/// How long to wait between two looks at something another process changes.
const POLL: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests;
