//! `segmirror tail-apply`: the long-running applier of the direct transport. Receives what a `segmirror ship`
//! streams and appends it to a mirror root byte for byte (`applier::tail::TailAppender`, state in
//! `<mirror>/.tail/`), listening for the shipper (`--listen`) or dialling it (`--connect`), until SIGTERM or
//! SIGINT; then it says Goodbye and exits 0.
//!
//! `--cluster` (issue 10): the source is a cluster with one `segmirror ship --cluster` beside each broker. The
//! applier listens and serves one session per shipper node id at the same time (`link::listen_cluster`), all
//! appending through one `session::Cluster`, which lets only the holder of a partition's claim append to it (the
//! grant is by leader epoch, recorded under `<mirror>/.tail/claims/` before it is answered). Only with `--listen`:
//! dialling out (`--connect`) reaches one shipper, and which broker leads a partition moves, so a pulling applier
//! would have to know and dial every broker; the shippers dial the one applier instead, and `--cluster --connect`
//! is a usage error (exit 2).
//!
//! Why a command of its own rather than flags of `apply`: `apply` installs what a shipper left in an object store
//! and exits; this one holds a link open forever and takes none of `apply`'s store flags. Keeping them apart keeps
//! `apply`'s flags and exit codes exactly as they were.
//!
//! The link's record in the mirror's catalog gates it (`cli::link_gate`): while `segmirror link pause` holds, no
//! session is served (nothing installed); on resume the shipper's next session catches up. A promoted or deleted
//! link ends it, at start or while running (exit 0, one line naming the state: `link_gate::end_on_closed`). With
//! `--cluster` alike: a pause ends every shipper's session and serves none until resumed
//! (`link_gate::run_cluster_gated`).
//!
//! Exit status: 0 after a signal or once the link is promoted or deleted, 2 on usage errors (flags, PEM files) and
//! on this side's own failures (the mirror cannot be written).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use segmirror_applier::lock_mirror;
use segmirror_applier::tail::{TailAppender, TailCatalog, DEFAULT_RETAIN_DELETED_FOR};
use segmirror_catalog::PeerLink;
use segmirror_transport::direct::handshake::{HandshakeConfig, PeerLinkIdCheck};
use segmirror_transport::direct::session::{ApplierSession, Cluster, SessionConfig};
use segmirror_transport::direct::Role;

use crate::cli::catalog::{open_mirror_catalog, CATALOG_HELP};
use crate::cli::link::{link_config, shutdown_on_signal, LinkArgs};
use crate::cli::link_gate::{refuse_closed, run_cluster_gated, run_link_gated, LinkRecord, OnLink, Side};
use crate::cli::metrics::MetricsArgs;
use crate::cli::runtime::Runtime;
use crate::cli::serve::admin::CatalogAdmin;
use segmirror_applier::mirror::tail_lags;

use crate::cli::serve::figures::{applier_rows, ApplierMeter, LinkMeter, Snapshot};
use crate::cli::serve::{self, App};

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

/// The applier's figures now: the catalog's links and the mirror's per-partition lag (what `status` shows), with
/// this process's counters. Blocking (the catalog, the mirror's files).
fn applier_snapshot(
    catalog_path: &std::path::Path,
    mirror: &std::path::Path,
    served: &str,
    link_meter: &LinkMeter,
    meter: &ApplierMeter,
) -> Snapshot {
    let status = match segmirror_catalog::Catalog::open(catalog_path).and_then(|c| c.status()) {
        Ok(status) => status,
        Err(e) => {
            tracing::warn!(catalog = %catalog_path.display(), error = %e, "metrics: the catalog cannot be read");
            return Snapshot::default();
        }
    };
    let now = segment_format::now_ms().max(0) as u64;
    let lags = tail_lags(mirror, &status, now);
    let links = status
        .links
        .iter()
        .filter(|l| l.name == served)
        .map(|l| {
            let state = l.state.as_str();
            link_meter.row(&l.name, state, &["active", "paused", "promoted", "deleted"], lags.len())
        })
        .collect();
    Snapshot {
        links,
        partitions: applier_rows(served, &lags, meter),
    }
}

/// Feature bit 9: the shipper's link id checked against the one this catalog's link follows, adopting the first one
/// seen (as the bucket's link identity object is, `apply`); a shipper of another link of the same name (deleted and
/// recreated on the source) is refused naming both ids.
fn peer_link_id_check(catalog_path: PathBuf, link: String) -> PeerLinkIdCheck {
    PeerLinkIdCheck(Arc::new(move |shipper_id: &str| {
        let found = segmirror_catalog::Catalog::open(&catalog_path)
            .and_then(|mut c| c.adopt_peer_link_id(&link, shipper_id))
            .map_err(|e| {
                format!(
                    "checking the shipper's link id in catalog {}: {e}",
                    catalog_path.display()
                )
            })?;
        match found {
            PeerLink::Adopted => {
                tracing::info!(link = %link, shipper_link_id = %shipper_id, "this link now follows the shipper's link id");
                Ok(())
            }
            PeerLink::Same => Ok(()),
            PeerLink::Other { recorded } => Err(format!(
                "this applier's link {link:?} follows link id {recorded}, the shipper's link {link:?} is id \
                 {shipper_id}: a link deleted and recreated is another link; ship it under another name, or apply \
                 it into another mirror"
            )),
        }
    }))
}

/// The shipper's source cluster checked against the one this catalog's link follows, adopting the first one seen
/// (as the link id is): a link mirrors one source cluster, and a shipper of another one is refused naming both ids,
/// its topics never installed. `--source-cluster-id` names the cluster up front instead.
fn peer_source_cluster_check(catalog_path: PathBuf, link: String) -> PeerLinkIdCheck {
    PeerLinkIdCheck(Arc::new(move |cluster: &str| {
        let found = segmirror_catalog::Catalog::open(&catalog_path)
            .and_then(|mut c| c.adopt_source_cluster_id(&link, cluster))
            .map_err(|e| {
                format!(
                    "checking the shipper's source cluster in catalog {}: {e}",
                    catalog_path.display()
                )
            })?;
        match found {
            PeerLink::Adopted => {
                tracing::info!(link = %link, source_cluster = %cluster, "this link now follows the shipper's source cluster");
                Ok(())
            }
            PeerLink::Same => Ok(()),
            PeerLink::Other { recorded } => Err(format!(
                "this applier's link {link:?} mirrors source cluster {recorded}, the shipper ships from cluster \
                 {cluster}: a link mirrors one source cluster; ship the other cluster under another link, into \
                 another mirror"
            )),
        }
    }))
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.mirror).with_context(|| format!("creating mirror root {}", args.mirror.display()))?;
    let keep = args
        .retain_deleted_for
        .checked_mul(3600)
        .map(std::time::Duration::from_secs)
        .with_context(|| format!("--retain-deleted-for {} hours is too long", args.retain_deleted_for))?;
    // One applier per mirror, for the whole run: `apply`, another `tail-apply` and `promote` are refused while
    // this one appends (the lock names this process).
    let _lock = lock_mirror(&args.mirror, segmirror_applier::LockWait::Fail).map_err(segmirror_applier::Error::from)?;
    let (catalog_path, catalog) = open_mirror_catalog(args.catalog, &args.mirror, false)?;
    let starts_paused = catalog
        .link(&args.link.link)
        .is_ok_and(|l| l.state == segmirror_catalog::LinkState::Paused);
    let catalog = TailCatalog::open(catalog, &args.link.link).with_context(|| {
        format!(
            "recording link {} in catalog {}",
            args.link.link,
            catalog_path.display()
        )
    })?;
    // The link's record in this catalog gates the applier: a paused link installs nothing, a promoted or deleted
    // one is refused (`cli::link_gate`).
    let record = LinkRecord {
        catalog: catalog_path.clone(),
        name: args.link.link.clone(),
    };
    refuse_closed(&record.read()?, Side::Applier)?;
    let appender = TailAppender::open_with_catalog(&args.mirror, catalog)
        .with_context(|| format!("opening mirror {}", args.mirror.display()))?
        .retain_deleted_for(keep);
    let link = args.link;
    let mut handshake = HandshakeConfig::new(Role::Applier, link.link.clone(), args.source_cluster_id);
    handshake.peer_link_id = Some(peer_link_id_check(catalog_path.clone(), link.link.clone()));
    if handshake.source_cluster_id.is_none() {
        handshake.peer_source_cluster = Some(peer_source_cluster_check(catalog_path.clone(), link.link.clone()));
    }
    let link_meter = Arc::new(LinkMeter::default());
    link_meter.set_paused(starts_paused);
    let meter = Arc::new(ApplierMeter::default());
    let metered = args.metrics.metrics_addr.is_some();
    let session_config = SessionConfig {
        observer: metered.then(|| meter.clone() as Arc<dyn segmirror_transport::direct::session::SessionObserver>),
        ..SessionConfig::default()
    };
    let (gate, _) = tokio::sync::watch::channel(starts_paused);
    let gate_meter = link_meter.clone();
    let gate = Arc::new(gate);
    let metrics_addr = args.metrics.metrics_addr.clone();
    let mirror = args.mirror.clone();
    let event_meter = metered.then(|| link_meter.clone());
    let start_metrics = move |shutdown: tokio_util::sync::CancellationToken, served: String, pausable: bool| async move {
        let Some(addr) = metrics_addr else {
            return anyhow::Ok(());
        };
        let (path, link_meter2, meter2, served2) =
            (catalog_path.clone(), link_meter.clone(), meter.clone(), served.clone());
        let snapshot = move || applier_snapshot(&path, &mirror, &served2, &link_meter2, &meter2);
        let admin = CatalogAdmin {
            catalog_path,
            served,
            gate: gate.clone(),
            meter: link_meter.clone(),
            pausable,
        };
        let app = App {
            snapshot: Arc::new(snapshot),
            admin: Arc::new(admin),
        };
        serve::start(&addr, app, shutdown).await?;
        Ok(())
    };
    if args.cluster {
        let cluster = Cluster::new(appender);
        runtime.block_on(async move {
            let shutdown = shutdown_on_signal()?;
            start_metrics(shutdown.clone(), link.link.clone(), true).await?;
            let endpoint = link.endpoint_config().endpoint().await?;
            eprintln!("segmirror tail-apply: serving the shippers of a source cluster (one session per broker)");
            let config = link_config(handshake, None, "tail-apply", event_meter);
            let on_link: OnLink = Arc::new(move |l: &segmirror_catalog::Link| {
                gate_meter.set_paused(l.state == segmirror_catalog::LinkState::Paused)
            });
            let gate = (record, on_link);
            run_cluster_gated(endpoint, config, cluster, session_config, shutdown, gate, "tail-apply").await
        })??;
    } else {
        let session = ApplierSession::new(appender, session_config)?;
        runtime.block_on(async move {
            let shutdown = shutdown_on_signal()?;
            start_metrics(shutdown.clone(), link.link.clone(), true).await?;
            let config = link_config(handshake, None, "tail-apply", event_meter);
            // The record gates the session (a pause through the admin API or `segmirror link pause` alike); the
            // metrics show the state it read last.
            let on_link: OnLink = Arc::new(move |l: &segmirror_catalog::Link| {
                gate_meter.set_paused(l.state == segmirror_catalog::LinkState::Paused)
            });
            let gate = Some((record, Side::Applier, on_link));
            run_link_gated(&link.endpoint_config(), config, session, shutdown, gate, "tail-apply").await
        })??;
    }
    eprintln!("segmirror tail-apply: link stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
