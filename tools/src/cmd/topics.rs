//! `segmirror topics plan|create|check`: the source's topics on the target cluster, with the same partition counts
//! and topic-level configs, created or checked.
//!
//! Why: a mirrored partition is only usable on a target topic with the same partitions, and the target's configs
//! decide what its broker does with the installed data (`cleanup.policy`, `retention.ms`); creating them by hand is
//! where a failover goes wrong quietly. The source's side is read without a client: from its broker's metadata log
//! on disk (`--source-metadata-log`), or from a JSON file (`--from`, `segment_format::failover_source`).
//!
//! Exit status: 0 when every topic matches (or was created and then matches); 2 when a topic differs (or, for
//! `check`, is missing) unless `--allow-differences`, when the target refused a creation or a describe, and on
//! usage or I/O errors; 1 when the metadata log is corrupt.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use cluster_client::admin::{AdminClient, NewTopic, REQUEST_TIMEOUT};
use cluster_client::topics_plan::{compare, TopicCheck, Verdict};
use segment_format::failover_source::{FailoverSource, SourceTopic};
use segment_format::metadata_log::{read_metadata_dir, METADATA_DIR};
use segment_format::Error as FormatError;

use crate::cli::runtime::Runtime;
use crate::cli::{EXIT_CORRUPT, EXIT_USAGE_OR_IO};

const TOPICS_HELP: &str = "\
plan: show what create would do (nothing changes). create: create the missing topics with the source's partition \
count and the topic-level configs the source set explicitly (replication factor: the target's \
default.replication.factor unless --replication-factor), then check every topic. check: compare only; a missing \
topic is a mismatch.\n\n\
Compared: the partition count; each config the source set (against the target's effective value, whatever sets \
it); each topic-level override the target has and the source has not. Every difference is listed; the exit status \
is 2 on any difference unless --allow-differences.";

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Show which topics would be created and how the existing ones differ; changes nothing.
    Plan(CommonArgs),
    /// Create the missing topics, then check them all.
    Create(CommonArgs),
    /// Check that every source topic exists on the target with the same partitions and configs.
    Check(CommonArgs),
}

#[derive(clap::Args)]
#[command(after_help = TOPICS_HELP)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["source_metadata_log", "from"])))]
struct CommonArgs {
    /// A broker of the target cluster, HOST:PORT (PLAINTEXT listener).
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: String,
    /// The source broker's metadata log: its `__cluster_metadata-0` directory, or the log dir holding it (read from
    /// disk; stop the broker, or read a copy, for the last committed state).
    #[arg(long, value_name = "DIR")]
    source_metadata_log: Option<PathBuf>,
    /// A JSON file `{"topics": [{"name", "partitions", "configs": {..}}]}` instead of a metadata log.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// Only topics whose name matches this regular expression (the whole name).
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// Replication factor of created topics (default: the target's `default.replication.factor`).
    #[arg(long, value_name = "N")]
    replication_factor: Option<i16>,
    /// Exit 0 even when topics differ (they are still listed).
    #[arg(long)]
    allow_differences: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Longest wait for one request to the target, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = REQUEST_TIMEOUT.as_secs())]
    timeout: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plan,
    Create,
    Check,
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let (mode, args) = match args.action {
        Action::Plan(a) => (Mode::Plan, a),
        Action::Create(a) => (Mode::Create, a),
        Action::Check(a) => (Mode::Check, a),
    };
    let filter = args
        .topics
        .as_deref()
        .map(|p| regex::Regex::new(&format!("^(?:{p})$")))
        .transpose()
        .context("--topics is not a valid regular expression")?;
    let source = match read_source_topics(&args) {
        Ok(topics) => topics,
        Err(e @ (FormatError::Corrupt { .. } | FormatError::Incomplete { .. })) => {
            eprintln!("segmirror: corrupt metadata log: {e}");
            return Ok(ExitCode::from(EXIT_CORRUPT));
        }
        Err(e) => return Err(e.into()),
    };
    let source: Vec<SourceTopic> = source
        .into_iter()
        .filter(|t| filter.as_ref().is_none_or(|r| r.is_match(&t.name)))
        .collect();
    let checks = runtime.block_on(reconcile(&args, mode, &source))??;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "topics": checks }))?;
        writeln!(out)?;
    } else {
        write_table(&mut out, &checks, mode)?;
    }
    out.flush()?;
    let failed = checks.iter().any(|c| c.verdict == Verdict::Failed);
    let differs = checks
        .iter()
        .any(|c| c.verdict == Verdict::Differs || (mode == Mode::Check && c.verdict == Verdict::Missing));
    Ok(if failed || (differs && !args.allow_differences) {
        ExitCode::from(EXIT_USAGE_OR_IO)
    } else {
        ExitCode::SUCCESS
    })
}

/// The source topics, from the metadata log or the JSON file (blocking reads, before the runtime starts).
fn read_source_topics(args: &CommonArgs) -> Result<Vec<SourceTopic>, FormatError> {
    if let Some(file) = &args.from {
        return Ok(FailoverSource::read_json(file)?.topics);
    }
    let dir = args.source_metadata_log.as_deref().unwrap_or(Path::new("."));
    let dir = if dir.join(METADATA_DIR).is_dir() {
        dir.join(METADATA_DIR)
    } else {
        dir.to_path_buf()
    };
    Ok(FailoverSource::topics_from_metadata(&read_metadata_dir(&dir)?))
}

/// Describe the target, create what `mode` creates, and compare.
async fn reconcile(args: &CommonArgs, mode: Mode, source: &[SourceTopic]) -> anyhow::Result<Vec<TopicCheck>> {
    let mut admin = AdminClient::connect(&args.bootstrap, Duration::from_secs(args.timeout)).await?;
    let mut target = admin.topics().await?;
    let mut created: BTreeMap<String, Option<String>> = BTreeMap::new();
    if mode == Mode::Create {
        let missing: Vec<NewTopic> = source
            .iter()
            .filter(|t| !target.contains_key(&t.name))
            .map(|t| NewTopic {
                name: t.name.clone(),
                partitions: t.partitions,
                replication_factor: args.replication_factor,
                configs: t.configs.clone(),
            })
            .collect();
        if !missing.is_empty() {
            for (name, result) in admin.create_topics(&missing).await? {
                created.insert(name, result.err().map(|e| e.to_string()));
            }
            // Metadata reaches every broker shortly after the controller commits it.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout);
            loop {
                target = admin.topics().await?;
                let waiting = created.iter().any(|(n, e)| e.is_none() && !target.contains_key(n));
                if !waiting || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let present: Vec<String> = source
        .iter()
        .filter(|t| target.contains_key(&t.name))
        .map(|t| t.name.clone())
        .collect();
    let configs = if present.is_empty() {
        BTreeMap::new()
    } else {
        admin.describe_topic_configs(&present).await?
    };
    let empty = BTreeMap::new();
    Ok(source
        .iter()
        .map(|t| {
            if let Some(Some(error)) = created.get(&t.name) {
                return failed(t, error.clone());
            }
            let described = match configs.get(&t.name) {
                Some(Err(e)) => return failed(t, e.to_string()),
                Some(Ok(c)) => c,
                None => &empty,
            };
            let mut check = compare(t, target.get(&t.name), described);
            if created.contains_key(&t.name) && check.verdict == Verdict::Matches {
                check.verdict = Verdict::Created;
            }
            check
        })
        .collect())
}

fn failed(t: &SourceTopic, error: String) -> TopicCheck {
    TopicCheck {
        topic: t.name.clone(),
        verdict: Verdict::Failed,
        source_partitions: t.partitions,
        target_partitions: None,
        differences: Vec::new(),
        error: Some(error),
    }
}

fn write_table(out: &mut impl Write, checks: &[TopicCheck], mode: Mode) -> std::io::Result<()> {
    let verdict = |c: &TopicCheck| -> String {
        match (&c.verdict, mode) {
            (Verdict::Missing, Mode::Plan) => "to create".into(),
            (Verdict::Missing, _) => "MISSING".into(),
            (Verdict::Created, _) => "created".into(),
            (Verdict::Matches, _) => "matches".into(),
            (Verdict::Differs, _) => format!("DIFFERS ({})", c.differences.len()),
            (Verdict::Failed, _) => "FAILED".into(),
        }
    };
    let rows: Vec<[String; 4]> = checks
        .iter()
        .map(|c| {
            [
                c.topic.clone(),
                c.source_partitions.to_string(),
                c.target_partitions.map_or_else(|| "-".into(), |p| p.to_string()),
                verdict(c),
            ]
        })
        .collect();
    let header = ["TOPIC", "SOURCE-PARTITIONS", "TARGET-PARTITIONS", "VERDICT"];
    crate::cli::table::print(out, header, &rows)?;
    for c in checks {
        if let Some(e) = &c.error {
            writeln!(out, "{}: {e}", c.topic)?;
        }
        for d in &c.differences {
            writeln!(
                out,
                "{} {}: source {}, target {} ({})",
                d.topic,
                d.field,
                d.source.as_deref().unwrap_or("(not set)"),
                d.target.as_deref().unwrap_or("(none)"),
                d.note
            )?;
        }
    }
    Ok(())
}
