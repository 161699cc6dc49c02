//! `segmirror ship --store URL`: the continuous shipper through a bucket, for sites where neither side can reach
//! the other. Runs rounds of `seed` (`segmirror_shipper::store_tail`): on a change of the log dirs, every
//! `--upload-interval-ms` or once the active segments grew by `--upload-bytes`, whichever comes first, each grown
//! active segment's new bytes go up as one chunk object and a new manifest version; a rolled segment gets its
//! sealed version. Until SIGTERM/SIGINT, then exit 0.
//!
//! Why a subcommand of its own behind `ship --store` (the routing is in `cli::config`): the direct `ship`'s
//! `--connect`/`--listen` and TLS flags mean nothing here and the store flags nothing there; one `ship` name keeps
//! the operator's mental model (ship = keep sending), two argument sets keep clap the one place that checks them.
//!
//! Exit status: 0 after a signal; 2 on usage errors, when another shipper took over a partition (fenced: this one
//! stops rather than fight over the bucket) or when the log dirs cannot be watched.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use segment_format::verify::VerifyOptions;
use segmirror_shipper::link_meta::{MetaConfig, ALL_GROUPS, DEFAULT_META_INTERVAL};
use segmirror_shipper::seed::committed::CommittedOnly;
use segmirror_shipper::seed::{PartitionStatus, SeedConfig, TopicFilter, ALL_TOPICS};
use segmirror_shipper::source::list_offsets::{ListOffsetsConfig, ListOffsetsHighWatermarks};
use segmirror_shipper::store_tail::{
    self, StoreTailConfig, StoreTailEnd, DEFAULT_UPLOAD_BYTES, DEFAULT_UPLOAD_INTERVAL,
};
use segmirror_transport::manifest::KeyPrefix;

use crate::cli::runtime::Runtime;
use crate::cli::store::S3Args;
use crate::cli::EXIT_USAGE_OR_IO;

/// The link name used when `--link` is not given (as `seed`'s).
pub const DEFAULT_LINK: &str = "default";

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Upto {
    /// Committed records only: a version is uploaded once the source's high watermark (asked of
    /// --source-bootstrap) covers its last offset.
    #[default]
    HighWatermark,
    /// Every complete, CRC-valid batch in the log, committed or not.
    LogEnd,
}

#[derive(clap::Args)]
pub struct Args {
    /// A broker log dir to tail (repeat for several).
    #[arg(long = "log-dir", value_name = "DIR", required = true)]
    log_dirs: Vec<PathBuf>,
    /// Where to ship: a local folder (a path or file:///absolute/path) or s3://bucket[/prefix] (credentials as for
    /// `segmirror seed`).
    #[arg(long, value_name = "URL")]
    store: String,
    /// Topics to ship: a comma-separated list of names and regular expressions, each matching a whole topic name.
    #[arg(long, value_name = "REGEX", default_value = ALL_TOPICS)]
    topics: String,
    /// How far to ship: committed records only (needs --source-bootstrap), or every complete batch.
    #[arg(long, value_enum, default_value_t = Upto::HighWatermark)]
    upto: Upto,
    /// Learn the high watermarks from this source broker (HOST:PORT of a PLAINTEXT listener) with ListOffsets, as
    /// `ship --connect` does; required with --upto high-watermark.
    #[arg(long, value_name = "HOST:PORT")]
    source_bootstrap: Option<String>,
    /// Name of the mirror link (the first key component under the prefix), as for `seed` and `apply`.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_LINK)]
    link: String,
    /// Key prefix inside the store.
    #[arg(long, value_name = "P", default_value = "")]
    prefix: String,
    #[command(flatten)]
    s3: S3Args,
    /// Milliseconds between upload rounds while the source changes.
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_UPLOAD_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    upload_interval_ms: u64,
    /// Growth of the active segments (bytes) that starts a round before the interval is up.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_UPLOAD_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    upload_bytes: u64,
    /// Who is shipping, recorded in leases and manifests (default: segmirror-seed@<host>:<pid>).
    #[arg(long, value_name = "ID")]
    shipper_id: Option<String>,
    /// The source broker's `metadata.log.dir` (the directory holding `__cluster_metadata-0`); default: the first
    /// --log-dir holding it. The link's topics (partition counts, configs, ids) are read from it.
    #[arg(long, value_name = "DIR")]
    metadata_log_dir: Option<PathBuf>,
    /// Consumer groups whose committed offsets (read from `__consumer_offsets` in the log dirs) the link carries,
    /// for the link's topics: a regular expression matching whole group ids.
    #[arg(long, value_name = "REGEX", default_value = ALL_GROUPS)]
    groups: String,
    /// Milliseconds between two reads of the metadata log and `__consumer_offsets` (a new version is uploaded only
    /// when they changed).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_META_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    meta_interval_ms: u64,
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let bootstrap = match (args.upto, &args.source_bootstrap) {
        (Upto::HighWatermark, Some(bootstrap)) => Some(bootstrap.clone()),
        (Upto::HighWatermark, None) => bail!(
            "ship --store --upto high-watermark (the default) asks the source broker for its high watermarks: give \
             --source-bootstrap HOST:PORT, or --upto log-end to ship every complete batch (records above the high \
             watermark may then reach the mirror and later be truncated at the source)"
        ),
        (Upto::LogEnd, Some(bootstrap)) => {
            eprintln!("segmirror ship: warning: --source-bootstrap {bootstrap} is not used with --upto log-end");
            None
        }
        (Upto::LogEnd, None) => None,
    };
    let store = args.s3.open_or_create(&args.store)?;
    let mut seed = SeedConfig::new(args.log_dirs.clone(), &args.link)?;
    seed.prefix = KeyPrefix::new(&args.prefix)?;
    seed.topics = TopicFilter::new(&args.topics)?;
    seed.verify = VerifyOptions::default();
    if let Some(id) = &args.shipper_id {
        seed.shipper_id = id.clone();
    }
    if let Some(bootstrap) = bootstrap {
        // The direct tail's high-watermark source: partitions are asked for from their first lookup on.
        let handle = runtime.block_on(async { tokio::runtime::Handle::current() })?;
        eprintln!("segmirror ship: committed records only: high watermarks from {bootstrap} (ListOffsets)");
        let source = ListOffsetsHighWatermarks::spawn(&handle, bootstrap, Vec::new(), ListOffsetsConfig::default());
        seed.committed_only = Some(CommittedOnly::new(Arc::new(source)));
    }
    seed.validate()?;
    let meta = MetaConfig::find(
        &args.log_dirs,
        args.metadata_log_dir.as_deref(),
        &args.groups,
        seed.topics.clone(),
        &args.link,
    )?;
    let mut config = StoreTailConfig::new(seed);
    match meta {
        Some(mut meta) => {
            meta.interval = Duration::from_millis(args.meta_interval_ms);
            eprintln!(
                "segmirror ship: link metadata from {} and groups {:?} every {} ms",
                meta.metadata_dir.display(),
                args.groups,
                args.meta_interval_ms
            );
            config.meta = Some(meta);
        }
        None => eprintln!(
            "segmirror ship: warning: no {} in the log dirs: the link carries no topic metadata or consumer \
             offsets (give --metadata-log-dir)",
            segment_format::metadata_log::METADATA_DIR
        ),
    }
    config.upload_interval = Duration::from_millis(args.upload_interval_ms);
    config.upload_bytes = args.upload_bytes;
    eprintln!(
        "segmirror ship: shipping to {} (link {:?}) every {} ms or {} bytes, until SIGTERM/SIGINT",
        args.store, args.link, args.upload_interval_ms, args.upload_bytes
    );
    let mut reported: std::collections::BTreeMap<String, String> = Default::default();
    let (end, stats) = runtime.block_on(async {
        let shutdown = crate::cli::link::shutdown_on_signal()?;
        let done = store_tail::run(&store, &config, async move { shutdown.cancelled().await }, |report| {
            for e in &report.log_dir_errors {
                if reported.insert(format!("log dir {e}"), String::new()).is_none() {
                    eprintln!("segmirror ship: error: {e}");
                }
            }
            for p in &report.partitions {
                let problem = match &p.status {
                    PartitionStatus::Complete => None,
                    PartitionStatus::Refused { base_offset, findings } => Some(format!(
                        "refused segment {base_offset:?}: {}",
                        findings.first().map(ToString::to_string).unwrap_or_default()
                    )),
                    PartitionStatus::Diverged {
                        base_offset, reason, ..
                    } => Some(format!("diverged at segment {base_offset}: {reason}")),
                    PartitionStatus::Failed { kind, error } => Some(format!("failed ({kind:?}): {error}")),
                };
                match problem {
                    Some(line) if reported.get(&p.name()) != Some(&line) => {
                        eprintln!("segmirror ship: {}: {line}", p.name());
                        reported.insert(p.name(), line);
                    }
                    Some(_) => {}
                    None => {
                        reported.remove(&p.name());
                    }
                }
                if p.segments_shipped > 0 {
                    tracing::info!(partition = %p.name(), versions = p.segments_shipped, bytes = p.bytes_uploaded,
                        through = ?p.shipped_through, "shipped");
                }
            }
        })
        .await?;
        anyhow::Ok(done)
    })??;
    eprintln!(
        "segmirror ship: {} round(s), {} version(s) committed, {} byte(s) uploaded",
        stats.rounds, stats.segments_shipped, stats.bytes_uploaded
    );
    match end {
        StoreTailEnd::Stopped => Ok(ExitCode::SUCCESS),
        StoreTailEnd::Fenced(partitions) => {
            eprintln!(
                "segmirror ship: error: another shipper took the lease of {}; stopped",
                partitions.join(", ")
            );
            Ok(ExitCode::from(EXIT_USAGE_OR_IO))
        }
    }
}
