//! `segmirror apply --listen|--connect` (also reachable as `segmirror tail-apply`): the flags of the long-running
//! direct applier (`segmirror_service::apply::direct`, which says what it does and why), run until SIGTERM or
//! SIGINT; then it says Goodbye and exits 0. `--cluster --connect` is a usage error (exit 2): the shippers of a
//! cluster dial the one applier.
//!
//! Why a command of its own rather than flags of `apply`: `apply` installs what a shipper left in an object store
//! and exits; this one holds a link open forever and takes none of `apply`'s store flags. Keeping them apart keeps
//! `apply`'s flags and exit codes exactly as they were.
//!
//! Exit status: 0 after a signal or once the link is promoted or deleted, 2 on usage errors (flags, PEM files) and
//! on this side's own failures (the mirror cannot be written).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use segmirror_applier::direct::DEFAULT_RETAIN_DELETED_FOR;
use segmirror_service::apply::direct::{DirectApplyConfig, DirectApplyService, SourceNodes};

use crate::cli::catalog::CATALOG_HELP;
use crate::cli::link::{shutdown_on_signal, LinkArgs};
use crate::cli::metrics::MetricsArgs;
use crate::cli::runtime::Runtime;

#[derive(clap::Args)]
pub struct Args {
    /// The mirror root (created if missing): partitions are appended into DIR/<topic>-<partition>/ with Kafka's
    /// file names. A directory of segmirror's own, never a broker's log dir.
    #[arg(long, value_name = "DIR")]
    mirror: PathBuf,
    /// Accept only a shipper of this source cluster (its `meta.properties` cluster.id); a shipper of another
    /// cluster is refused and its link pauses. Without it, the link follows the source cluster its first shipper
    /// names (recorded in the catalog), and a shipper of another cluster is refused the same way.
    #[arg(long, value_name = "ID")]
    source_cluster_id: Option<String>,
    /// The catalog recording the link, the partitions and every sealed segment (what `promote` reads).
    #[arg(long, value_name = "PATH", long_help = CATALOG_HELP)]
    catalog: Option<PathBuf>,
    /// Keep segments the source deleted (retention) this many hours longer on the mirror. Default 0: the mirror
    /// deletes them as soon as the source's log start passes them.
    #[arg(long, value_name = "HOURS", default_value_t = DEFAULT_RETAIN_DELETED_FOR.as_secs() / 3600)]
    retain_deleted_for: u64,
    /// Serve the shippers of a source cluster (one `segmirror ship --cluster` beside each broker), one session per
    /// broker at the same time; each partition is appended to only by the shipper whose claim (by leader epoch)
    /// holds it. Needs --listen: the shippers dial this applier (with --connect it could reach one of them only).
    #[arg(long, conflicts_with = "connect")]
    cluster: bool,
    #[command(flatten)]
    link: LinkArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
}

impl Args {
    fn config(self) -> anyhow::Result<DirectApplyConfig> {
        let retain_deleted_for = self
            .retain_deleted_for
            .checked_mul(3600)
            .map(std::time::Duration::from_secs)
            .with_context(|| format!("--retain-deleted-for {} hours is too long", self.retain_deleted_for))?;
        Ok(DirectApplyConfig {
            mirror: self.mirror,
            source_cluster_id: self.source_cluster_id,
            catalog: self.catalog,
            retain_deleted_for,
            nodes: if self.cluster {
                SourceNodes::Cluster
            } else {
                SourceNodes::One
            },
            endpoint: self.link.endpoint_config(),
            metrics_addr: self.metrics.metrics_addr,
        })
    }
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let mirror = args.mirror.clone();
    std::fs::create_dir_all(&mirror).with_context(|| format!("creating mirror root {}", mirror.display()))?;
    let service = DirectApplyService::prepare(args.config()?)?;
    runtime.block_on(async move {
        let shutdown = shutdown_on_signal()?;
        service.serve(shutdown).await
    })??;
    eprintln!("segmirror tail-apply: link stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
