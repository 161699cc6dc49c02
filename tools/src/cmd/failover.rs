//! `segmirror failover --link NAME`: the flags, the journal table (`--status`), the printing of the steps' lines
//! and tables, and the `--json` document; the failover itself (its steps, their order, the journal) is
//! `segmirror_service::failover`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use cluster_client::offsets_commit::GroupReport;
use cluster_client::topics_plan::TopicCheck;
use segmirror_catalog::{Catalog, FailoverStep};
use segmirror_service::failover::report::{CutReport, StepStatus};
use segmirror_service::failover::{self, steps, CutMode, Failover, FailoverConfig, Narrator, RunEnd};

use crate::cli::catalog::open_mirror_catalog;
use crate::cli::runtime::Runtime;
use crate::cli::store::S3Args;
use crate::cli::table;
use crate::cli::target_report::{write_commits, write_topics};
use crate::cli::EXIT_USAGE_OR_IO;

mod report;

use report::StdoutForJson;

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

impl Args {
    fn config(&self) -> FailoverConfig {
        FailoverConfig {
            link: self.link.clone(),
            mirror: self.mirror.clone(),
            catalog: self.catalog.clone(),
            cut: if self.drain { CutMode::Drain } else { CutMode::Now },
            drain_timeout: self.drain_timeout,
            drain_quiet: self.drain_quiet,
            prefix: self.prefix.clone(),
            s3: self.s3.options(),
            bootstrap: self.bootstrap.clone(),
            log_dirs: self.log_dirs.clone(),
            stop_hook: self.stop_hook.clone(),
            start_hook: self.start_hook.clone(),
            broker_timeout: self.broker_timeout,
            allow_differences: self.allow_differences,
            replication_factor: self.replication_factor,
            handover: self.handover.clone(),
            consistent_cut: self.consistent_cut,
            target_config: self.target_config.clone(),
            allow_retention_delete: self.allow_retention_delete,
            timeout: self.timeout,
        }
    }
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
    let config = args.config();
    let failover = Failover {
        config: &config,
        runtime,
        out: &Printer,
    };
    let state_at_start = link.state.to_string();
    let mut run = failover::run(&failover, &mut catalog, &state_at_start)?;
    if let Some(out) = json {
        if run.details.cut.is_none() && run.steps.first().is_some_and(|(s, _, _)| *s == StepStatus::DoneEarlier) {
            // The cut was done by an earlier run; what is left behind now (nothing is installed after it).
            run.details.cut = Some(failover::left_behind_now(&failover, &catalog)?);
        }
        let report = failover::report(&args.link, &catalog, &state_at_start, started, run.details, &run.steps)?;
        out.write(&report)?;
    }
    Ok(match run.end {
        RunEnd::Finished => ExitCode::SUCCESS,
        RunEnd::StoppedAtFailedStep => ExitCode::from(EXIT_USAGE_OR_IO),
    })
}

/// The steps' lines and tables on stdout, warnings on stderr.
struct Printer;

impl Narrator for Printer {
    fn line(&self, text: &str) {
        println!("{text}");
    }

    fn warn(&self, text: &str) {
        eprintln!("{text}");
    }

    fn topics(&self, checks: &[TopicCheck]) -> std::io::Result<()> {
        write_topics(&mut std::io::stdout().lock(), checks, false)
    }

    fn commits(&self, reports: &[GroupReport]) -> std::io::Result<()> {
        write_commits(&mut std::io::stdout().lock(), reports)
    }

    fn left_behind(&self, report: &CutReport) -> std::io::Result<()> {
        write_left_behind(report)
    }
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
    table::print(&mut out, ["STEP", "STATE", "ATTEMPTS", "TOOK", "OUTCOME"], &rows)?;
    Ok(())
}

fn write_left_behind(report: &CutReport) -> std::io::Result<()> {
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let rows: Vec<[String; 8]> = report
        .left_behind
        .iter()
        .map(|row| {
            [
                row.topic.clone(),
                row.partition.to_string(),
                dash(row.installed_end.map(|o| o.to_string())),
                dash(row.known_source_end.map(|o| o.to_string())),
                dash(row.bucket_end.map(|o| o.to_string())),
                row.left_offsets.to_string(),
                dash(row.left_bytes.map(|b| b.to_string())),
                row.pending_versions.to_string(),
            ]
        })
        .collect();
    table::print(
        &mut std::io::stdout().lock(),
        [
            "TOPIC",
            "PARTITION",
            "INSTALLED-END",
            "KNOWN-SOURCE-END",
            "BUCKET-END",
            "LEFT-OFFSETS",
            "LEFT-BYTES",
            "PENDING-VERSIONS",
        ],
        &rows,
    )
}
