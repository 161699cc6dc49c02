//! `segmirror offsets commit`: at failover, commit the source groups' offsets on the target cluster, so each group
//! resumes there exactly where it stopped on the source.
//!
//! Why this way: the offsets come from the source's `__consumer_offsets` segments on disk (`--log-dir`), a JSON
//! file (`--from`), or, on the applier's host, what a link shipped into the catalog (`--link NAME`); each is clamped to the partition's log end installed on the target (`--installed`: the mirror
//! root or the target broker's log dir), so no group points past the data; each is committed without a leader epoch
//! (a source epoch on the target makes clients loop or reset: docs/promotion.md), as a memberless commit, which
//! the coordinator accepts only for a group without active members: such a group is refused and reported, never
//! forced. Every commit is read back (OffsetFetch) and compared (`cluster_client::offsets_commit`, which `segmirror
//! failover` runs too).
//!
//! Exit status: 0 when every selected group was committed (clamps included: they are reported); 2 when a group
//! was refused, a commit failed or read back differently, and on usage or I/O errors; 1 when a source
//! `__consumer_offsets` segment or an installed segment is corrupt.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cluster_client::admin::REQUEST_TIMEOUT;
use cluster_client::offsets_commit::any_refused_or_failed;
use segment_format::Error as FormatError;
use segmirror_service::offsets::{commit, read_commit_inputs, shipped_offsets, CommitSource, Selection};

use crate::cli::runtime::Runtime;
use crate::cli::target_report::write_commits;
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
#[command(group(clap::ArgGroup::new("source").required(true).args(["log_dirs", "from", "link"])))]
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
    /// On the applier's host: the offsets this link shipped, as the catalog recorded them (with --mirror or
    /// --catalog).
    #[arg(long, value_name = "NAME")]
    link: Option<String>,
    #[command(flatten)]
    link_catalog: crate::cli::catalog::LinkCatalogArgs,
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

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let selection = Selection::new(args.groups.as_deref(), args.topics.as_deref())?;
    // Blocking reads, before any async work.
    let source = match (&args.link, &args.from) {
        (Some(link), _) => CommitSource::Link(shipped_offsets(&args.link_catalog.open()?, link)?),
        (None, Some(file)) => CommitSource::File(file),
        (None, None) => CommitSource::LogDirs(&args.log_dirs),
    };
    let (offsets, installed) = match read_commit_inputs(&source, &args.installed, &selection) {
        Ok(read) => read,
        Err(e @ (FormatError::Corrupt { .. } | FormatError::Incomplete { .. })) => {
            eprintln!("segmirror: corrupt data: {e}");
            return Ok(ExitCode::from(EXIT_CORRUPT));
        }
        Err(e) => return Err(e.into()),
    };
    let timeout = Duration::from_secs(args.timeout);
    let reports = commit(runtime, &args.bootstrap, timeout, &offsets, &installed, args.dry_run)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "groups": reports }))?;
        writeln!(out)?;
    } else {
        write_commits(&mut out, &reports)?;
    }
    out.flush()?;
    Ok(if any_refused_or_failed(&reports) {
        ExitCode::from(EXIT_USAGE_OR_IO)
    } else {
        ExitCode::SUCCESS
    })
}
