//! `segmirror ship --store URL`: the flags of the continuous shipper through a bucket
//! (`segmirror_service::ship::bucket`, which says what it does and why), run until SIGTERM/SIGINT, then exit 0.
//!
//! Why a subcommand of its own behind `ship --store` (the routing is in `cli::config`): the direct `ship`'s
//! `--connect`/`--listen` and TLS flags mean nothing here and the store flags nothing there; one `ship` name keeps
//! the operator's mental model (ship = keep sending), two argument sets keep clap the one place that checks them.
//!
//! Exit status: 0 after a signal or once the link record is promoted or deleted; 2 on usage errors, when another
//! shipper took over a partition (fenced: this one stops rather than fight over the bucket) or when the log dirs
//! cannot be watched.

use std::path::PathBuf;
use std::process::ExitCode;

use segmirror_service::ship::bucket::{BucketShipConfig, BucketShipService};
use segmirror_shipper::bucket::follow::{StoreTailEnd, DEFAULT_UPLOAD_BYTES, DEFAULT_UPLOAD_INTERVAL};
use segmirror_shipper::link_meta::{ALL_GROUPS, DEFAULT_META_INTERVAL};
use segmirror_shipper::source::bound_hw::UptoPolicy;

use crate::cli::metrics::MetricsArgs;
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
    /// Default: the link record's topics regex, re-read while running (see --catalog), else every topic.
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// The source host's catalog holding this link's record (`segmirror link create`): paused, nothing is shipped;
    /// promoted or deleted, it stops; both re-read while running. Default: the data directory's catalog.sqlite, if it
    /// records the link.
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// How far to ship: committed records only (needs --source-bootstrap), or every complete batch.
    #[arg(long, value_enum, default_value_t = Upto::HighWatermark)]
    upto: Upto,
    /// Learn the high watermarks from this source broker (HOST:PORT of a PLAINTEXT listener) as they move, as
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
    #[command(flatten)]
    metrics: MetricsArgs,

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

impl Args {
    fn config(self) -> BucketShipConfig {
        BucketShipConfig {
            log_dirs: self.log_dirs,
            store: self.store,
            topics: self.topics,
            catalog: self.catalog,
            upto: match self.upto {
                Upto::HighWatermark => UptoPolicy::HighWatermark,
                Upto::LogEnd => UptoPolicy::LogEnd,
            },
            source_bootstrap: self.source_bootstrap,
            link: self.link,
            prefix: self.prefix,
            s3: self.s3.options(),
            upload_interval_ms: self.upload_interval_ms,
            upload_bytes: self.upload_bytes,
            shipper_id: self.shipper_id,
            metadata_log_dir: self.metadata_log_dir,
            groups: self.groups,
            meta_interval_ms: self.meta_interval_ms,
            metrics_addr: self.metrics.metrics_addr,
        }
    }
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let service = BucketShipService::prepare(args.config(), runtime)?;
    let (end, stats) = runtime.block_on(async {
        let shutdown = crate::cli::link::shutdown_on_signal()?;
        service.serve(shutdown).await
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
