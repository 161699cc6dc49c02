//! The direct applier (`segmirror apply --listen|--connect`): receives what a direct shipper streams and appends it
//! to a mirror root byte for byte (the applier's direct appender, state under `<mirror>/.tail/`), listening for the
//! shipper or dialling it, until the shutdown token is cancelled; then it says Goodbye.
//!
//! With [`SourceNodes::Cluster`] the source is a cluster with one shipper beside each broker: the applier listens
//! and serves one session per shipper node id at the same time (`link::listen_cluster`), all appending through one
//! `session::Cluster`, which lets only the holder of a partition's claim append to it (the grant is by leader
//! epoch, recorded under `<mirror>/.tail/claims/` before it is answered). Only when listening: dialling out reaches
//! one shipper, and which broker leads a partition moves, so a pulling applier would have to know and dial every
//! broker; the shippers dial the one applier instead.
//!
//! The link's record in the mirror's catalog gates it ([`crate::link_gate`]): while the link is paused no session is
//! served (nothing installed); on resume the shipper's next session catches up. A promoted or deleted link ends it,
//! at start or while running ([`crate::link_gate::ClosedLink`]); in a cluster alike, a pause ends every shipper's
//! session and serves none until resumed.
//!
//! In two parts: [`DirectApplyService::prepare`] (blocking: the mirror lock, the catalog opened once and handed to
//! the appender, the link checks) and [`DirectApplyService::serve`] (async, until the shutdown token).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use segmirror_applier::direct::tail_lags;
use segmirror_applier::direct::{TailAppender, TailCatalog};
use segmirror_applier::lock_mirror;
use segmirror_catalog::PeerLink;
use segmirror_transport::direct::handshake::{HandshakeConfig, PeerLinkIdCheck};
use segmirror_transport::direct::session::{ApplierSession, Cluster, SessionConfig};
use segmirror_transport::direct::Role;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::admin_port::admin::CatalogAdmin;
use crate::admin_port::figures::{applier_rows, ApplierMeter, LinkMeter, Snapshot};
use crate::admin_port::{self, App};
use crate::catalog::open_mirror_catalog;
use crate::link::{link_config, EndpointConfig};
use crate::link_gate::{refuse_closed, run_cluster_gated, run_link_gated, LinkRecord, OnLink, Side};
pub use crate::ship::SourceNodes;

/// What a direct applier needs to know (the command line's `segmirror apply --listen|--connect` flags).
#[derive(Debug, Clone)]
pub struct DirectApplyConfig {
    /// The mirror root (created if missing).
    pub mirror: PathBuf,
    /// Accept only a shipper of this source cluster; `None`: follow the cluster the first shipper names.
    pub source_cluster_id: Option<String>,
    /// The catalog; default: the mirror root's.
    pub catalog: Option<PathBuf>,
    /// Keep segments the source deleted (retention) this much longer on the mirror.
    pub retain_deleted_for: std::time::Duration,
    /// One shipper, or one beside each broker of the source cluster (listening only).
    pub nodes: SourceNodes,
    pub endpoint: EndpointConfig,
    /// Where to serve `/metrics` and the admin API, if anywhere.
    pub metrics_addr: Option<String>,
}

/// A direct applier, prepared (the mirror locked for the whole run) and ready to serve.
pub struct DirectApplyService {
    config: DirectApplyConfig,
    catalog_path: PathBuf,
    record: LinkRecord,
    appender: TailAppender,
    handshake: HandshakeConfig,
    starts_paused: bool,
    _lock: segmirror_applier::MirrorLock,
}

impl DirectApplyService {
    /// Locks the mirror (one applier per mirror, for the whole run: `apply`, another direct applier and `promote` are
    /// refused while this one appends; the lock names this process), opens the catalog once, refuses a closed link
    /// and opens the appender; blocking.
    pub fn prepare(config: DirectApplyConfig) -> anyhow::Result<DirectApplyService> {
        std::fs::create_dir_all(&config.mirror)
            .with_context(|| format!("creating mirror root {}", config.mirror.display()))?;
        let lock =
            lock_mirror(&config.mirror, segmirror_applier::LockWait::Fail).map_err(segmirror_applier::Error::from)?;
        let (catalog_path, catalog) = open_mirror_catalog(config.catalog.clone(), &config.mirror, false)?;
        let name = config.endpoint.link.clone();
        let starts_paused = catalog
            .link(&name)
            .is_ok_and(|l| l.state == segmirror_catalog::LinkState::Paused);
        let catalog = TailCatalog::open(catalog, &name)
            .with_context(|| format!("recording link {name} in catalog {}", catalog_path.display()))?;
        // The link's record in this catalog gates the applier: a paused link installs nothing, a promoted or deleted
        // one is refused (`crate::link_gate`). Read through the catalog already open.
        let record = LinkRecord {
            catalog: catalog_path.clone(),
            name: name.clone(),
        };
        let link = catalog
            .catalog()
            .link(&name)
            .with_context(|| format!("link {name:?} in catalog {}", catalog_path.display()))?;
        refuse_closed(&link, Side::Applier)?;
        let appender = TailAppender::open_with_catalog(&config.mirror, catalog)
            .with_context(|| format!("opening mirror {}", config.mirror.display()))?
            .retain_deleted_for(config.retain_deleted_for);
        let mut handshake = HandshakeConfig::new(Role::Applier, name.clone(), config.source_cluster_id.clone());
        handshake.peer_link_id = Some(peer_link_id_check(catalog_path.clone(), name.clone()));
        if handshake.source_cluster_id.is_none() {
            handshake.peer_source_cluster = Some(peer_source_cluster_check(catalog_path.clone(), name));
        }
        Ok(DirectApplyService {
            config,
            catalog_path,
            record,
            appender,
            handshake,
            starts_paused,
            _lock: lock,
        })
    }

    /// Serves the link (or, in a cluster, every shipper) until `shutdown` or the link is promoted or deleted
    /// ([`crate::link_gate::ClosedLink`]).
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let DirectApplyService {
            config,
            catalog_path,
            record,
            appender,
            handshake,
            starts_paused,
            _lock,
        } = self;
        let link_meter = Arc::new(LinkMeter::default());
        link_meter.set_paused(starts_paused);
        let meter = Arc::new(ApplierMeter::default());
        let metered = config.metrics_addr.is_some();
        let session_config = SessionConfig {
            observer: metered.then(|| meter.clone() as Arc<dyn segmirror_transport::direct::session::SessionObserver>),
            ..SessionConfig::default()
        };
        let gate_meter = link_meter.clone();
        let event_meter = metered.then(|| link_meter.clone());
        if let Some(addr) = &config.metrics_addr {
            let figures = Figures {
                catalog_path,
                mirror: config.mirror.clone(),
                served: config.endpoint.link.clone(),
                link_meter,
                meter,
            };
            start_metrics(figures, addr, starts_paused, shutdown.clone()).await?;
        }
        // The record gates the session (a pause through the admin API or `segmirror link pause` alike); the
        // metrics show the state it read last.
        let on_link: OnLink = Arc::new(move |l: &segmirror_catalog::Link| {
            gate_meter.set_paused(l.state == segmirror_catalog::LinkState::Paused)
        });
        let link = link_config(handshake, None, "tail-apply", event_meter);
        match config.nodes {
            SourceNodes::Cluster => {
                let endpoint = config.endpoint.endpoint().await?;
                eprintln!("segmirror tail-apply: serving the shippers of a source cluster (one session per broker)");
                let cluster = Cluster::new(appender);
                let gate = (record, on_link);
                run_cluster_gated(endpoint, link, cluster, session_config, shutdown, gate, "tail-apply").await
            }
            SourceNodes::One => {
                let session = ApplierSession::new(appender, session_config)?;
                let gate = Some((record, Side::Applier, on_link));
                run_link_gated(&config.endpoint, link, session, shutdown, gate, "tail-apply").await
            }
        }
    }
}

/// What a scrape reads: the catalog's links and the mirror's per-partition lag, with this process's counters.
struct Figures {
    catalog_path: PathBuf,
    mirror: PathBuf,
    served: String,
    link_meter: Arc<LinkMeter>,
    meter: Arc<ApplierMeter>,
}

/// `/metrics` and the admin API; a pause through the API is recorded in the link record, which the gate reads.
async fn start_metrics(
    figures: Figures,
    addr: &str,
    starts_paused: bool,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (gate, _) = watch::channel(starts_paused);
    let admin = CatalogAdmin {
        catalog_path: figures.catalog_path.clone(),
        served: figures.served.clone(),
        gate: Arc::new(gate),
        meter: figures.link_meter.clone(),
        pausable: true,
    };
    let snapshot = move || {
        applier_snapshot(
            &figures.catalog_path,
            &figures.mirror,
            &figures.served,
            &figures.link_meter,
            &figures.meter,
        )
    };
    let app = App {
        snapshot: Arc::new(snapshot),
        admin: Arc::new(admin),
    };
    admin_port::start(addr, app, shutdown).await?;
    Ok(())
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

#[cfg(test)]
#[path = "direct_tests.rs"]
mod tests;
