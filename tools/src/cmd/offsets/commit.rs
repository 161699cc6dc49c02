//! `segmirror offsets commit`: at failover, commit the source groups' offsets on the target cluster, so each group
//! resumes there exactly where it stopped on the source.
//!
//! Why this way: the offsets come from the source's `__consumer_offsets` segments on disk (`--log-dir`) or a JSON
//! file (`--from`); each is clamped to the partition's log end installed on the target (`--installed`: the mirror
//! root or the target broker's log dir), so no group points past the data; each is committed without a leader epoch
//! (a source epoch on the target makes clients loop or reset: docs/promotion.md), as a memberless commit, which
//! the coordinator accepts only for a group without active members: such a group is refused and reported, never
//! forced. Every commit is read back (OffsetFetch) and compared.
//!
//! Exit status: 0 when every selected group was committed (clamps included: they are reported); 2 when a group
//! was refused, a commit failed or read back differently, and on usage or I/O errors; 1 when a source
//! `__consumer_offsets` segment or an installed segment is corrupt.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use cluster_client::admin::{AdminClient, OffsetToCommit, REQUEST_TIMEOUT};
use cluster_client::error_name;
use cluster_client::offsets_plan::{installed_log_ends, plan, PlannedOffset};
use segment_format::consumer_offsets::{read_log_dir, OffsetsFilter};
use segment_format::failover_source::{FailoverSource, SourceGroupOffset};
use segment_format::Error as FormatError;
use serde::Serialize;

use super::whole_name_regex;
use crate::cli::runtime::Runtime;
use crate::cli::{EXIT_CORRUPT, EXIT_USAGE_OR_IO};

const COMMIT_HELP: &str = "\
Each offset is clamped to the partition's log end installed on the target (--installed: the mirror root, or the \
target broker's log dir after promote): a clamp is reported with the group, topic, partition, the offset wanted and \
the one committed. A partition not installed gets no commit. Offsets are committed with no leader epoch, as a \
memberless commit (what kafka-consumer-groups --reset-offsets does): a group with active members on the target \
is refused and reported; stop its consumers and run again. Every commit is read back and compared. Works for \
classic and KIP-848 (group.protocol=consumer) groups.";

#[derive(clap::Args)]
#[command(after_help = COMMIT_HELP)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["log_dirs", "from"])))]
pub struct Args {
    /// A broker of the target cluster, HOST:PORT (PLAINTEXT listener).
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: String,
    /// A source broker's log dir holding `__consumer_offsets-N` partitions; repeat for several.
    #[arg(long = "log-dir", value_name = "DIR")]
    log_dirs: Vec<PathBuf>,
    /// A JSON file `{"offsets": [{"group", "topic", "partition", "offset", "metadata"}]}` instead of log dirs.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Where the data is installed on the target: the mirror root or the target broker's log dir (its partition
    /// directories give each partition's log end).
    #[arg(long, value_name = "DIR")]
    installed: PathBuf,
    /// Only groups whose id matches this regular expression (the whole id).
    #[arg(long, value_name = "REGEX")]
    groups: Option<String>,
    /// Only offsets of topics whose name matches this regular expression (the whole name).
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// Show what would be committed (and which groups would be refused); commit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Longest wait for one request to the target, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = REQUEST_TIMEOUT.as_secs())]
    timeout: u64,
}

/// What happened to one group.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Committed,
    /// `--dry-run`: would be committed.
    Planned,
    /// Active members on the target.
    Refused,
    Failed,
    /// No offset of it is installed on the target.
    Nothing,
}

#[derive(Debug, Serialize)]
struct GroupReport {
    group: String,
    outcome: Outcome,
    /// The group on the target, as its coordinator describes it.
    target_state: Option<String>,
    target_members: Option<usize>,
    /// `classic` or `consumer` (KIP-848), as the target's describe answered.
    kind: Option<&'static str>,
    error: Option<String>,
    offsets: Vec<OffsetReport>,
}

#[derive(Debug, Serialize)]
struct OffsetReport {
    #[serde(flatten)]
    planned: PlannedOffset,
    clamped: bool,
    /// The broker's refusal of this partition's commit, or a read-back that differs.
    error: Option<String>,
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let groups = args
        .groups
        .as_deref()
        .map(whole_name_regex)
        .transpose()
        .context("--groups is not a valid regular expression")?;
    let topics = args
        .topics
        .as_deref()
        .map(whole_name_regex)
        .transpose()
        .context("--topics is not a valid regular expression")?;
    let keep_group = |g: &str| groups.as_ref().is_none_or(|r| r.is_match(g));
    let keep_topic = |t: &str| topics.as_ref().is_none_or(|r| r.is_match(t));
    // Blocking reads, before any async work.
    let read = || -> Result<(Vec<SourceGroupOffset>, _), FormatError> {
        let offsets = match &args.from {
            Some(file) => FailoverSource::read_json(file)?
                .offsets
                .into_iter()
                .filter(|o| keep_group(&o.group) && keep_topic(&o.topic))
                .collect(),
            None => {
                let filter = OffsetsFilter {
                    group: Box::new(keep_group),
                    topic: Box::new(keep_topic),
                };
                let mut all = Vec::new();
                for dir in &args.log_dirs {
                    all.extend(FailoverSource::offsets_from_replay(&read_log_dir(dir, &filter)?));
                }
                all
            }
        };
        let installed = installed_log_ends(&args.installed, &keep_topic)?;
        Ok((offsets, installed))
    };
    let (offsets, installed) = match read() {
        Ok(read) => read,
        Err(e @ (FormatError::Corrupt { .. } | FormatError::Incomplete { .. })) => {
            eprintln!("segmirror: corrupt data: {e}");
            return Ok(ExitCode::from(EXIT_CORRUPT));
        }
        Err(e) => return Err(e.into()),
    };
    let planned = plan(&offsets, &installed);
    let reports = runtime.block_on(commit_all(&args, planned))??;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "groups": reports }))?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &reports)?;
    }
    out.flush()?;
    let bad = reports
        .iter()
        .any(|g| matches!(g.outcome, Outcome::Refused | Outcome::Failed));
    Ok(if bad {
        ExitCode::from(EXIT_USAGE_OR_IO)
    } else {
        ExitCode::SUCCESS
    })
}

async fn commit_all(args: &Args, planned: BTreeMap<String, Vec<PlannedOffset>>) -> anyhow::Result<Vec<GroupReport>> {
    let mut admin = AdminClient::connect(&args.bootstrap, Duration::from_secs(args.timeout)).await?;
    let mut reports = Vec::new();
    for (group, offsets) in planned {
        let mut report = GroupReport {
            group: group.clone(),
            outcome: Outcome::Nothing,
            target_state: None,
            target_members: None,
            kind: None,
            error: None,
            offsets: offsets
                .into_iter()
                .map(|planned| OffsetReport {
                    clamped: planned.clamped(),
                    planned,
                    error: None,
                })
                .collect(),
        };
        if let Err(e) = commit_group(&mut admin, &mut report, args.dry_run).await {
            report.outcome = Outcome::Failed;
            report.error = Some(e.to_string());
        }
        reports.push(report);
    }
    Ok(reports)
}

async fn commit_group(admin: &mut AdminClient, report: &mut GroupReport, dry_run: bool) -> cluster_client::Result<()> {
    let to_commit: Vec<OffsetToCommit> = report
        .offsets
        .iter()
        .filter_map(|o| {
            o.planned.commit.map(|offset| OffsetToCommit {
                topic: o.planned.topic.clone(),
                partition: o.planned.partition,
                offset,
                metadata: o.planned.metadata.clone(),
            })
        })
        .collect();
    if to_commit.is_empty() {
        return Ok(());
    }
    let state = admin.group_state(&report.group).await?;
    report.target_state = Some(state.state.clone());
    report.target_members = Some(state.members);
    report.kind = Some(state.kind);
    if !state.accepts_simple_commit() {
        report.outcome = Outcome::Refused;
        report.error = Some(format!(
            "{} active member(s) on the target (state {}): a commit without a member would be refused; stop the \
             group's consumers and run again",
            state.members, state.state
        ));
        return Ok(());
    }
    if dry_run {
        report.outcome = Outcome::Planned;
        return Ok(());
    }
    let answers = admin.commit_offsets(&report.group, &to_commit).await?;
    let mut failed = false;
    for ((topic, partition), code) in answers {
        if code != 0 {
            failed = true;
            if let Some(o) = report
                .offsets
                .iter_mut()
                .find(|o| o.planned.topic == topic && o.planned.partition == partition)
            {
                o.error = Some(format!("OffsetCommit refused: {}", error_name(code)));
            }
        }
    }
    let partitions: Vec<(String, i32)> = to_commit.iter().map(|o| (o.topic.clone(), o.partition)).collect();
    let fetched = admin.fetch_offsets(&report.group, &partitions).await?;
    for o in report.offsets.iter_mut().filter(|o| o.error.is_none()) {
        let Some(want) = o.planned.commit else { continue };
        match fetched.get(&(o.planned.topic.clone(), o.planned.partition)) {
            Some(f) if f.offset == want && f.leader_epoch == -1 => {}
            Some(f) => {
                failed = true;
                o.error = Some(format!(
                    "read back offset {} leader epoch {} (committed {want}, no epoch)",
                    f.offset, f.leader_epoch
                ));
            }
            None => {
                failed = true;
                o.error = Some("not in the OffsetFetch answer".into());
            }
        }
    }
    report.outcome = if failed { Outcome::Failed } else { Outcome::Committed };
    Ok(())
}

fn write_table(out: &mut impl Write, reports: &[GroupReport]) -> std::io::Result<()> {
    let rows: Vec<[String; 6]> = reports
        .iter()
        .flat_map(|g| {
            g.offsets.iter().map(move |o| {
                let outcome = match (&g.outcome, &o.error, o.planned.commit) {
                    (_, Some(_), _) => "FAILED",
                    (_, None, None) => "skipped",
                    (Outcome::Committed, None, Some(_)) if o.clamped => "committed (clamped)",
                    (Outcome::Committed, None, Some(_)) => "committed",
                    (Outcome::Planned, None, Some(_)) if o.clamped => "would commit (clamped)",
                    (Outcome::Planned, None, Some(_)) => "would commit",
                    (Outcome::Refused, ..) => "REFUSED",
                    (Outcome::Failed, ..) => "FAILED",
                    (Outcome::Nothing, ..) => "skipped",
                };
                [
                    g.group.clone(),
                    o.planned.topic.clone(),
                    o.planned.partition.to_string(),
                    o.planned.wanted.to_string(),
                    o.planned.commit.map_or_else(|| "-".into(), |c| c.to_string()),
                    outcome.to_string(),
                ]
            })
        })
        .collect();
    let header = ["GROUP", "TOPIC", "PARTITION", "WANTED", "COMMITTED", "OUTCOME"];
    crate::cli::table::print(out, header, &rows)?;
    for g in reports {
        if let Some(e) = &g.error {
            writeln!(out, "group {}: {e}", g.group)?;
        }
        for o in &g.offsets {
            let p = &o.planned;
            if let Some(e) = &o.error {
                writeln!(out, "group {} {}-{}: {e}", g.group, p.topic, p.partition)?;
            } else if let Some(note) = &p.note {
                writeln!(out, "group {} {}-{}: {note}", g.group, p.topic, p.partition)?;
            }
        }
    }
    Ok(())
}
