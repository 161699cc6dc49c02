//! `segmirror failover --link NAME`: the whole failover of a link onto its target cluster, in order, resumable
//! after a crash at any step.
//!
//! The steps (each journaled in the catalog, `segmirror_catalog::FailoverStep`):
//! 1. `cut`: with `--drain`, wait until the link has installed what its source side made available; with `--now`,
//!    not. Then the link becomes `promoted` (the gate stops its appliers) and the report says, per partition, what
//!    was left behind (the RPO, where the catalog knows it).
//! 2. `topics`: create or check the target topics from the link's metadata in the catalog (the code of `segmirror
//!    topics create`); a difference stops the failover unless `--allow-differences`.
//! 3. `stop-brokers`: `--stop-hook CMD`, or a message saying what to stop; then wait until each `--log-dir`'s
//!    `.lock` is free.
//! 4. `install`: `segmirror promote` of the link's partitions into the log dir (`--handover auto` by default).
//! 5. `start-brokers`: `--start-hook CMD`, or a message; then wait until `--bootstrap` answers.
//! 6. `offsets`: commit the link's consumer offsets on the target (the code of `segmirror offsets commit`):
//!    clamped to the installed log ends, no leader epoch, memberless, read back.
//!
//! Why one command and a journal: run by hand, these steps are where a failover goes wrong (a topic created with
//! another partition count, offsets committed before the data is installed, a step skipped after an interruption).
//! A rerun with the same flags skips the finished steps and redoes the one that was cut short; every step is
//! idempotent (the state change is a no-op when already made, `topics create` creates only what is missing,
//! `promote` finishes its own journaled promotion, a broker already stopped or started is not waited for, the same
//! offsets are committed again). `--status` shows the journal; `--json` prints the run's report as one document
//! (`failover/report.rs`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use segmirror_catalog::{Catalog, FailoverStep};

use crate::cli::catalog::open_mirror_catalog;
use crate::cli::runtime::Runtime;
use crate::cli::store::S3Args;
use crate::cli::EXIT_USAGE_OR_IO;

mod brokers;
mod bucket;
mod cut;
mod report;
mod steps;

use report::{Details, Report, StdoutForJson, StepReport, StepStatus, REPORT_FORMAT};

const FAILOVER_HELP: &str = "\
Steps, in order: cut (drain or not, then the link becomes promoted), topics (create/check on the target), \
stop-brokers, install (promote into --log-dir), start-brokers, offsets (commit the link's groups on the target). \
Each step is journaled in the catalog; after a crash, run the same command again: finished steps are skipped, the \
interrupted one is redone. --status shows the journal.\n\n\
Hooks run with `sh -c` and these environment variables: SEGMIRROR_FAILOVER_LINK, SEGMIRROR_FAILOVER_STEP \
(stop-brokers or start-brokers), SEGMIRROR_FAILOVER_LOG_DIRS (the --log-dir values, ':'-separated), \
SEGMIRROR_FAILOVER_BOOTSTRAP. A hook that exits non-zero stops the failover at its step. Without a hook, the \
command says what to do and waits (the log dir's .lock free; the bootstrap answering).\n\n\
Exit status: 0 done; 2 a step refused or failed (the message names it; fix and run again), or a usage or I/O \
error.";

#[derive(clap::Args)]
#[command(after_help = FAILOVER_HELP)]
#[command(group(clap::ArgGroup::new("cut_mode").args(["drain", "now"])))]
pub struct Args {
    /// The link to fail over (a link of the applier's catalog).
    #[arg(long, value_name = "NAME")]
    link: String,
    /// The mirror root the link installs into (`segmirror apply --mirror`).
    #[arg(long, value_name = "DIR")]
    mirror: PathBuf,
    /// The catalog (default: the mirror's, as for `segmirror apply`).
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// Show where the link's failover is (the journal), change nothing.
    #[arg(long)]
    status: bool,
    /// Wait until the link has installed what its source side made available before cutting.
    #[arg(long, required_unless_present_any = ["status", "now"])]
    drain: bool,
    /// Cut now: what is not installed yet is left behind (and reported).
    #[arg(long)]
    now: bool,
    /// Longest wait for --drain, in seconds; then the failover stops, reporting what is left (rerun with --now to
    /// cut anyway).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    drain_timeout: u64,
    /// --drain: how long nothing may change (installed offsets, pending segments, the link's metadata version)
    /// before the link counts as drained, in seconds; longer than the applier's poll interval.
    #[arg(long, value_name = "SECONDS", default_value_t = 3.0)]
    drain_quiet: f64,
    /// Key prefix inside a bucket link's store, as given to `segmirror apply --prefix` (the cut compares the
    /// bucket's newest versions with what is installed).
    #[arg(long, value_name = "P", default_value = "")]
    prefix: String,
    #[command(flatten)]
    s3: S3Args,
    /// A broker of the target cluster, HOST:PORT (PLAINTEXT listener).
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "status")]
    bootstrap: Option<String>,
    /// The target broker's log dir (one entry of its `log.dirs`); once per broker for replicated topics (each
    /// partition is installed into every named log dir that holds its directory, with the same bytes; the
    /// stop-brokers step waits for every one's `.lock`).
    #[arg(long = "log-dir", value_name = "DIR", required_unless_present = "status")]
    log_dirs: Vec<PathBuf>,
    /// Run this command (sh -c) to stop the target brokers; without it, the command asks and waits.
    #[arg(long, value_name = "CMD")]
    stop_hook: Option<String>,
    /// Run this command (sh -c) to start the target brokers; without it, the command asks and waits.
    #[arg(long, value_name = "CMD")]
    start_hook: Option<String>,
    /// Longest wait for the brokers to stop, and to answer after they start, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    broker_timeout: u64,
    /// Go on when a target topic differs from the source's (the differences are still listed).
    #[arg(long)]
    allow_differences: bool,
    /// Replication factor of created topics (default: the target's `default.replication.factor`).
    #[arg(long, value_name = "N")]
    replication_factor: Option<i16>,
    /// How the mirror's files reach the log dir (as `segmirror promote --handover`): `auto` renames when mirror
    /// and log dir share a file system, so the failover time does not grow with the data.
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["copy", "rename", "auto"])]
    handover: String,
    /// Cut every partition of the link at one source moment (as `segmirror promote --consistent-cut`):
    /// milliseconds since the epoch or RFC 3339; the install step's report says per partition what was left behind.
    #[arg(long, value_name = "TIMESTAMP", value_parser = segmirror_applier::promote::parse_cut_timestamp)]
    consistent_cut: Option<i64>,
    /// The target broker's server.properties (as `segmirror promote --target-config`).
    #[arg(long, value_name = "PATH")]
    target_config: Option<PathBuf>,
    /// Promote even where the target topic's retention would delete promoted data (as `segmirror promote`).
    #[arg(long)]
    allow_retention_delete: bool,
    /// Print the failover's report as one JSON document on stdout (steps, the cut's left-behind table and RPO,
    /// the offsets committed; see README's runbook); the progress lines and the hooks' output go to stderr.
    #[arg(long, conflicts_with = "status")]
    json: bool,
    /// Longest wait for one request to the target, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = cluster_client::admin::REQUEST_TIMEOUT.as_secs())]
    timeout: u64,
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let (_, mut catalog) = open_mirror_catalog(args.catalog.clone(), &args.mirror, true)?;
    let link = catalog.link(&args.link)?;
    if args.status {
        print_status(&catalog, &args.link, &link.state.to_string())?;
        return Ok(ExitCode::SUCCESS);
    }
    let json = if args.json {
        Some(StdoutForJson::take().context("keeping stdout for the JSON report")?)
    } else {
        None
    };
    let started = Instant::now();
    let mut details = Details::default();
    let mut run_steps: Vec<(StepStatus, Option<Duration>, Option<String>)> = Vec::new();
    let state_at_start = link.state.to_string();
    let code = run_steps_in_order(
        &args,
        &state_at_start,
        &mut catalog,
        runtime,
        &mut details,
        &mut run_steps,
    )?;
    if let Some(out) = json {
        if details.cut.is_none() && run_steps.first().is_some_and(|(s, _, _)| *s == StepStatus::DoneEarlier) {
            // The cut was done by an earlier run; what is left behind now (nothing is installed after it).
            details.cut = Some(cut::left_behind_now(&args, &catalog, runtime)?);
        }
        let report = report(&args, &catalog, &state_at_start, started, details, &run_steps)?;
        out.write(&report)?;
    }
    Ok(code)
}

/// Every step not finished yet, in order; `run_steps` gets what happened to each this run, in order.
fn run_steps_in_order(
    args: &Args,
    state_at_start: &str,
    catalog: &mut Catalog,
    runtime: &Runtime,
    details: &mut Details,
    run_steps: &mut Vec<(StepStatus, Option<Duration>, Option<String>)>,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    println!(
        "failover of link {} (state {state_at_start}) into {} at {}",
        args.link,
        args.log_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        args.bootstrap.as_deref().unwrap_or("?")
    );
    for (position, step) in steps::STEPS.iter().enumerate() {
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        let journaled = catalog.start_failover_step(&args.link, step.name(), position)?;
        if journaled.finished() {
            println!("[{}] done earlier: {}", step.name(), journaled.outcome);
            run_steps.push((StepStatus::DoneEarlier, None, None));
            continue;
        }
        if journaled.attempts > 1 {
            println!(
                "[{}] interrupted earlier; redoing it (attempt {})",
                step.name(),
                journaled.attempts
            );
        }
        let step_started = Instant::now();
        match steps::run_step(*step, args, catalog, runtime, details) {
            Ok(outcome) => {
                catalog.finish_failover_step(&args.link, step.name(), &outcome)?;
                println!(
                    "[{}] {outcome} ({:.1} s)",
                    step.name(),
                    step_started.elapsed().as_secs_f64()
                );
                run_steps.push((StepStatus::Done, Some(step_started.elapsed()), None));
            }
            Err(e) => {
                eprintln!(
                    "segmirror failover: step {} failed: {e:#}\nfix the cause and run the same command again: the \
                     finished steps are skipped",
                    step.name()
                );
                run_steps.push((StepStatus::Failed, Some(step_started.elapsed()), Some(format!("{e:#}"))));
                return Ok(ExitCode::from(EXIT_USAGE_OR_IO));
            }
        }
    }
    println!(
        "failover of link {} finished in {:.1} s (this run)",
        args.link,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// `--json`'s document: this run's steps beside the journal's attempts, durations and outcomes.
fn report(
    args: &Args,
    catalog: &Catalog,
    state_at_start: &str,
    started: Instant,
    details: Details,
    run_steps: &[(StepStatus, Option<Duration>, Option<String>)],
) -> anyhow::Result<Report> {
    let journal: Vec<FailoverStep> = catalog
        .failover_steps(&args.link)
        .context("reading the failover journal")?;
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
        link: args.link.clone(),
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

/// The journal as a table.
fn print_status(catalog: &Catalog, link: &str, state: &str) -> anyhow::Result<()> {
    let journal: Vec<FailoverStep> = catalog.failover_steps(link).context("reading the failover journal")?;
    println!("link {link}: state {state}");
    let rows: Vec<[String; 5]> = steps::STEPS
        .iter()
        .map(|step| {
            let row = journal.iter().find(|s| s.step == step.name());
            let (state, attempts, took, outcome) = match row {
                None => ("not started".to_string(), String::new(), String::new(), String::new()),
                Some(s) => (
                    if s.finished() { "done" } else { "started, not finished" }.to_string(),
                    s.attempts.to_string(),
                    s.finished_at_ms
                        .map(|f| format!("{:.1} s", (f - s.started_at_ms) as f64 / 1000.0))
                        .unwrap_or_default(),
                    s.outcome.clone(),
                ),
            };
            [step.name().to_string(), state, attempts, took, outcome]
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    crate::cli::table::print(&mut out, ["STEP", "STATE", "ATTEMPTS", "TOOK", "OUTCOME"], &rows)?;
    Ok(())
}

/// How long to wait between two looks at something another process changes.
const POLL: Duration = Duration::from_millis(200);
