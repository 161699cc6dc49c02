//! `segmirror topics plan|create|check`: the source's topics on the target cluster, with the same partition counts
//! and topic-level configs, created or checked.
//!
//! Why: a mirrored partition is only usable on a target topic with the same partitions, and the target's configs
//! decide what its broker does with the installed data (`cleanup.policy`, `retention.ms`); creating them by hand is
//! where a failover goes wrong quietly. The source's side is read without a client: from its broker's metadata log
//! on disk (`--source-metadata-log`), from a JSON file (`--from`, `segment_format::failover_source`), or, on the
//! applier's host, from what a link shipped into the catalog (`--link NAME`). The work is
//! `segmirror_service::topics` over `cluster_client::topics_sync`, which `segmirror failover` runs too; this module
//! parses the flags, prints the checks and chooses the exit status.
//!
//! Exit status: 0 when every topic matches (or was created and then matches); 2 when a topic differs (or, for
//! `check`, is missing) unless `--allow-differences`, when the target refused a creation or a describe, and on
//! usage or I/O errors; 1 when the metadata log is corrupt.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use cluster_client::admin::REQUEST_TIMEOUT;
use cluster_client::topics_sync::TopicsMode;
use segment_format::Error as FormatError;
use segmirror_service::offsets::Selection;
use segmirror_service::topics::{read_source_topics, select, sync, TopicsSource};

use crate::cli::runtime::Runtime;
use crate::cli::target_report::write_topics;
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
#[command(group(clap::ArgGroup::new("source").required(true).args(["source_metadata_log", "from", "link"])))]
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
    /// On the applier's host: the topics this link shipped, as the catalog recorded them (with --mirror or
    /// --catalog).
    #[arg(long, value_name = "NAME")]
    link: Option<String>,
    #[command(flatten)]
    link_catalog: crate::cli::catalog::LinkCatalogArgs,
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

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let (mode, args) = match args.action {
        Action::Plan(a) => (TopicsMode::Plan, a),
        Action::Create(a) => (TopicsMode::Create, a),
        Action::Check(a) => (TopicsMode::Check, a),
    };
    let selection = Selection::new(None, args.topics.as_deref())?;
    let from = match (&args.link, &args.from) {
        (Some(link), _) => TopicsSource::Link {
            catalog: args.link_catalog.open()?,
            link,
        },
        (None, Some(file)) => TopicsSource::File(file),
        (None, None) => TopicsSource::MetadataLog(args.source_metadata_log.as_deref().unwrap_or(Path::new("."))),
    };
    let source = match read_source_topics(from)? {
        Ok(topics) => topics,
        Err(e @ (FormatError::Corrupt { .. } | FormatError::Incomplete { .. })) => {
            eprintln!("segmirror: corrupt metadata log: {e}");
            return Ok(ExitCode::from(EXIT_CORRUPT));
        }
        Err(e) => return Err(e.into()),
    };
    let source = select(source, &selection);
    let timeout = Duration::from_secs(args.timeout);
    let checks = sync(
        runtime,
        &args.bootstrap,
        timeout,
        mode,
        &source,
        args.replication_factor,
    )?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "topics": checks }))?;
        writeln!(out)?;
    } else {
        write_topics(&mut out, &checks, mode == TopicsMode::Plan)?;
    }
    out.flush()?;
    Ok(if mode.acceptable(&checks, args.allow_differences) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_USAGE_OR_IO)
    })
}
