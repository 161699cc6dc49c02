//! `segmirror ship`: the flags of the long-running direct shipper (`segmirror_service::ship::direct`, which says what it
//! does and why), and its run until SIGTERM or SIGINT; then it says Goodbye and exits 0.
//!
//! Exit status: 0 after a signal or once the link record is promoted or deleted, 2 on usage errors (flags, PEM
//! files, a log dir without a cluster id) and on this side's own failures (a source file that cannot be read or
//! diverged). With `--cluster`, a `--source-bootstrap` that is another node is a usage error; one that does not
//! answer yet is not (a shipper restarted beside a broker still down waits for it, leading and shipping nothing
//! until the broker answers as the log dir's node).

use std::path::PathBuf;
use std::process::ExitCode;

use segmirror_service::ship::direct::{DirectShipConfig, DirectShipService, SourceNodes};
use segmirror_shipper::link_meta::{ALL_GROUPS, DEFAULT_META_INTERVAL};
use segmirror_shipper::source::bound_hw::UptoPolicy;

use crate::cli::link::{shutdown_on_signal, LinkArgs};
use crate::cli::metrics::MetricsArgs;
use crate::cli::runtime::Runtime;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
enum Upto {
    /// Committed records only (the broker's high watermark from replication-offset-checkpoint).
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
    /// Topics to ship: a regular expression matched against the whole topic name (internal topics never). Default:
    /// the link record's topics regex, re-read while running (see --catalog), else every topic. Given, it wins over
    /// the record's.
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// The source host's catalog holding this link's record (`segmirror link create`): its state gates the
    /// shipper (paused: nothing shipped; promoted or deleted: it stops) and its topics regex selects, both re-read
    /// while running. Default: the data directory's catalog.sqlite, if it records the link; without a record the
    /// shipper runs from its flags alone.
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// How far to ship.
    #[arg(long, value_enum, default_value_t = Upto::HighWatermark)]
    upto: Upto,
    /// Learn the high watermarks from this source broker (HOST:PORT of a PLAINTEXT listener) as they move, by a
    /// Fetch it holds until they do (ListOffsets first, and every 50 ms if Fetch fails), instead of
    /// replication-offset-checkpoint (seconds behind). One broker: partitions it does not lead keep no bound
    /// (nothing of them ships). With --upto log-end they bound nothing and go to the applier's progress reports,
    /// where `segmirror serve` stops its read_committed readers.
    #[arg(long, value_name = "HOST:PORT")]
    source_bootstrap: Option<String>,
    /// The source is one broker of several: ship only the partitions this broker leads (asked of
    /// --source-bootstrap, which must be this broker: its node id is checked against the log dir's
    /// meta.properties), each claimed from the applier at its leader epoch. Needs an applier serving several
    /// shippers on the link (`segmirror apply --listen ADDR --cluster`, feature bit 6), which this shipper dials
    /// (--connect); one shipper runs beside each broker.
    #[arg(long, requires = "source_bootstrap", conflicts_with = "listen")]
    cluster: bool,
    /// Most payload bytes per second on the link (default: no limit).
    #[arg(long, value_name = "BYTES_PER_S")]
    max_bandwidth: Option<u64>,
    /// The source broker's `metadata.log.dir` (the directory holding `__cluster_metadata-0`); default: the first
    /// --log-dir holding it. The link's topics (partition counts, configs, ids) are read from it and sent to the
    /// applier, which records them in its catalog (`segmirror topics`, `segmirror offsets`). Not with --cluster.
    #[arg(long, value_name = "DIR", conflicts_with = "cluster")]
    metadata_log_dir: Option<PathBuf>,
    /// Consumer groups whose committed offsets (read from `__consumer_offsets` in the log dirs) the link carries,
    /// for the link's topics: a regular expression matching whole group ids.
    #[arg(long, value_name = "REGEX", default_value = ALL_GROUPS)]
    groups: String,
    /// Milliseconds between two reads of the metadata log and `__consumer_offsets` (a new version is sent only
    /// when they changed, and the newest at the start of every session).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_META_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    meta_interval_ms: u64,
    #[command(flatten)]
    link: LinkArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
}

impl Args {
    fn config(self) -> DirectShipConfig {
        DirectShipConfig {
            endpoint: self.link.endpoint_config(),
            log_dirs: self.log_dirs,
            topics: self.topics,
            catalog: self.catalog,
            upto: match self.upto {
                Upto::HighWatermark => UptoPolicy::HighWatermark,
                Upto::LogEnd => UptoPolicy::LogEnd,
            },
            source_bootstrap: self.source_bootstrap,
            nodes: if self.cluster {
                SourceNodes::Cluster
            } else {
                SourceNodes::One
            },
            max_bandwidth: self.max_bandwidth,
            metadata_log_dir: self.metadata_log_dir,
            groups: self.groups,
            meta_interval_ms: self.meta_interval_ms,
            metrics_addr: self.metrics.metrics_addr,
        }
    }
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let service = DirectShipService::prepare(args.config(), runtime)?;
    runtime.block_on(async move {
        let shutdown = shutdown_on_signal()?;
        service.serve(shutdown).await
    })??;
    eprintln!("segmirror ship: link stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
