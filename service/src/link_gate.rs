//! A running service's view of its link record: the state gates what it does, re-read every [`GATE_INTERVAL`], so
//! `segmirror link pause` takes effect without a restart.
//!
//! - **active**: data moves.
//! - **paused**: a direct service ends its session (Goodbye) and moves nothing until resumed; then it runs a new
//!   session, which resumes from the mirror's durable position, so the link catches up with nothing lost or
//!   repeated. A listening service keeps its socket bound (the same port after resume), it only stops serving.
//! - **promoted / deleted**: the link's expected end. A long-running service (`ship`, `ship --store`, `apply
//!   --listen|--connect|--follow`) stops, at start or while running ([`ClosedLink`]; the command line says so in
//!   one line and exits 0): a supervisor that restarts on failure must not restart it, and must not record a
//!   failure either. A one-shot command asked to move data under such a link (`seed`) is refused (exit 2).
//!
//! Where the record is: the applier's is in its mirror's catalog (which `apply` creates implicitly). The shipper's
//! is the source host's own record (`segmirror link create` there): `--catalog`, else the data directory's
//! catalog.sqlite. A shipper whose catalog has no record of its link runs unmanaged, from its flags alone, as
//! before links had records; with `--catalog` given, a missing record is an error.
//!
//! Why polling a SQLite file rather than a notification: the record is changed by another process (the CLI, the
//! admin API) that may run as another user; a read of one row every half second costs nothing next to the data
//! path, and needs no channel that could be lost.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use segmirror_catalog::{Catalog, Link, LinkState};
use segmirror_transport::direct::session::link::{
    dial, listen, listen_cluster, Acceptor, Dialer, LinkConfig, SessionRunner,
};
use segmirror_transport::direct::session::{ChunkApplier, Cluster, SessionConfig};
use tokio_util::sync::CancellationToken;

use crate::catalog::catalog_path;
use crate::link::{run_link, Endpoint, EndpointConfig};

/// How often a running service reads its link record (500 ms): a pause takes effect within about that.
pub const GATE_INTERVAL: Duration = Duration::from_millis(500);

/// Which side reads the record (for the refusal's wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Shipper,
    Applier,
}

/// Where a service's link record is.
#[derive(Debug, Clone)]
pub struct LinkRecord {
    pub catalog: PathBuf,
    pub name: String,
}

impl LinkRecord {
    /// The source host's record of `link`: in `--catalog`, else in the data directory's catalog if it exists.
    /// `None`: no such catalog or no such link there (the shipper runs unmanaged); with `--catalog`, either is an
    /// error.
    pub fn for_shipper(catalog_arg: Option<PathBuf>, link: &str) -> anyhow::Result<Option<(LinkRecord, Link)>> {
        let explicit = catalog_arg.is_some();
        let path = match catalog_path(catalog_arg) {
            Ok(path) => path,
            Err(_) if !explicit => return Ok(None),
            Err(e) => return Err(e),
        };
        if !path.is_file() {
            if explicit {
                bail!(
                    "catalog {} does not exist: record the link there first (`segmirror link create {link} --catalog \
                     {}`)",
                    path.display(),
                    path.display()
                );
            }
            return Ok(None);
        }
        let record = LinkRecord {
            catalog: path,
            name: link.to_string(),
        };
        match record.read() {
            Ok(l) => Ok(Some((record, l))),
            Err(e) if !explicit && is_not_found(&e) => Ok(None),
            Err(e) if is_not_found(&e) => bail!(
                "catalog {} has no link {link:?}: record it with `segmirror link create {link} --catalog {}`",
                record.catalog.display(),
                record.catalog.display()
            ),
            Err(e) => Err(e),
        }
    }

    /// The record now (blocking: opens the catalog).
    pub fn read(&self) -> anyhow::Result<Link> {
        let catalog =
            Catalog::open(&self.catalog).with_context(|| format!("opening catalog {}", self.catalog.display()))?;
        catalog
            .link(&self.name)
            .with_context(|| format!("link {:?} in catalog {}", self.name, self.catalog.display()))
    }

    /// [`LinkRecord::read`] on a blocking thread.
    pub async fn read_async(&self) -> anyhow::Result<Link> {
        let record = self.clone();
        tokio::task::spawn_blocking(move || record.read())
            .await
            .context("reading the link record")?
    }
}

fn is_not_found(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<segmirror_catalog::Error>(),
        Some(segmirror_catalog::Error::NotFound { .. })
    )
}

/// A link that moves no data any more (promoted, deleted), as the error a gate returns: the command line turns it
/// into a service's clean stop, any other caller reports it as an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedLink {
    pub name: String,
    pub state: LinkState,
    pub side: Side,
}

impl std::fmt::Display for ClosedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let consequence = match (self.state, self.side) {
            (LinkState::Promoted, Side::Shipper) => "its mirror became a real cluster; shipping to it is refused",
            (LinkState::Promoted, Side::Applier) => "its mirror became a real cluster; nothing is installed again",
            _ => "nothing is shipped or installed under a deleted link",
        };
        write!(f, "link {:?} is {}: {consequence}", self.name, self.state)
    }
}

impl std::error::Error for ClosedLink {}

/// Refuses a link that moves no data any more (promoted, deleted), naming its state ([`ClosedLink`]).
pub fn refuse_closed(link: &Link, side: Side) -> anyhow::Result<()> {
    match link.state {
        LinkState::Active | LinkState::Paused => Ok(()),
        LinkState::Promoted | LinkState::Deleted => Err(ClosedLink {
            name: link.name.clone(),
            state: link.state,
            side,
        }
        .into()),
    }
}

/// The topics a shipper selects: `--topics` if given (it wins over the record, with a warning when they differ),
/// else the link record's topics regex, else every topic. Also refuses a closed link and says which record is used.
pub fn shipper_topics(
    role: &str,
    explicit: Option<&str>,
    record: Option<&(LinkRecord, Link)>,
    all_topics: &str,
) -> anyhow::Result<String> {
    let Some((record, link)) = record else {
        return Ok(explicit.unwrap_or(all_topics).to_string());
    };
    refuse_closed(link, Side::Shipper)?;
    let topics = match explicit {
        Some(topics) => {
            if topics != link.topics_regex {
                eprintln!(
                    "segmirror {role}: warning: --topics {topics:?} wins over link {:?}'s topics regex {:?}",
                    link.name, link.topics_regex
                );
            }
            topics.to_string()
        }
        None => link.topics_regex.clone(),
    };
    eprintln!(
        "segmirror {role}: link {:?} (id {}) recorded in {}: state {}, topics {topics:?}",
        link.name,
        link.id,
        record.catalog.display(),
        link.state
    );
    Ok(topics)
}

/// Claims the store for the link record `link` (the bucket's link identity object, written by the first shipper
/// of a managed link): refused, naming both ids, when the bucket already belongs to another link of that name.
pub async fn claim_bucket(
    role: &str,
    store: &segmirror_transport::Store,
    prefix: &segmirror_transport::manifest::KeyPrefix,
    link: &Link,
) -> anyhow::Result<()> {
    use segmirror_transport::bucket::link_identity::{claim_link_identity, link_identity_key, IdentityClaim};
    let key = link_identity_key(prefix, &link.name);
    match claim_link_identity(store, prefix, &link.name, &link.id)
        .await
        .with_context(|| format!("the link identity object {key}"))?
    {
        IdentityClaim::Created => {
            eprintln!(
                "segmirror {role}: link {:?}: wrote its identity {key} (id {})",
                link.name, link.id
            );
            Ok(())
        }
        IdentityClaim::Same => Ok(()),
        IdentityClaim::Other(found) => bail!(
            "the store's link {:?} belongs to link id {} ({key}), but this host's link {:?} is id {}: a link deleted \
             and recreated is another link; ship it under another name or another --prefix",
            link.name,
            found.id,
            link.name,
            link.id
        ),
    }
}

/// Called with the record on every read (e.g. to follow its topics regex).
pub type OnLink = Arc<dyn Fn(&Link) + Send + Sync>;

/// Waits until the record is active (returns `false` if `shutdown` came first); refuses a closed link.
pub async fn until_active(
    record: &LinkRecord,
    side: Side,
    role: &str,
    on_link: &OnLink,
    shutdown: &CancellationToken,
) -> anyhow::Result<bool> {
    let mut said = false;
    loop {
        let link = record.read_async().await?;
        refuse_closed(&link, side)?;
        on_link(&link);
        if link.state == LinkState::Active {
            if said {
                eprintln!("segmirror {role}: link {:?} resumed", link.name);
            }
            return Ok(true);
        }
        if !said {
            tracing::info!(link = %link.name, "link paused: moving nothing until it is resumed");
            eprintln!(
                "segmirror {role}: link {:?} is paused: moving nothing until it is resumed",
                link.name
            );
            said = true;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(false),
            () = tokio::time::sleep(GATE_INTERVAL) => {}
        }
    }
}

/// Cancels `period` once the record is no longer active or `stop` says so (returning the record then); read
/// errors are logged and retried.
pub async fn watch_until(
    record: LinkRecord,
    on_link: OnLink,
    period: CancellationToken,
    stop: impl Fn(&Link) -> bool + Send + 'static,
) -> Option<Link> {
    loop {
        tokio::select! {
            () = period.cancelled() => return None,
            () = tokio::time::sleep(GATE_INTERVAL) => {}
        }
        match record.read_async().await {
            Ok(link) if link.state == LinkState::Active && !stop(&link) => on_link(&link),
            Ok(link) => {
                period.cancel();
                return Some(link);
            }
            Err(e) => tracing::warn!(error = %crate::error_line(&e), "reading the link record; trying again"),
        }
    }
}

/// What a gated service runs while its link is active: one period of serving, until `period` is cancelled (a
/// pause, a closed link, shutdown) or the service ends on its own. The loop around it ([`run_gated`]) is the same
/// whatever runs: one dialed or listened session ([`run_link_gated`]), or every shipper of a cluster
/// ([`run_cluster_gated`]).
trait GatedService {
    /// What a stop says ended (`"session"`, `"every shipper's session"`).
    const STOPPED: &'static str;

    async fn serve(&mut self, period: &CancellationToken) -> anyhow::Result<()>;
}

/// The gate's loop: wait until the link is active, serve until the record says otherwise (or shutdown), say why the
/// period ended, and again; a closed link ends it ([`ClosedLink`]), at start and while running.
async fn run_gated<S: GatedService>(
    service: &mut S,
    record: &LinkRecord,
    side: Side,
    on_link: &OnLink,
    shutdown: &CancellationToken,
    role: &str,
) -> anyhow::Result<()> {
    loop {
        if !until_active(record, side, role, on_link, shutdown).await? {
            return Ok(());
        }
        let period = shutdown.child_token();
        let watcher = tokio::spawn(watch_until(record.clone(), on_link.clone(), period.clone(), |_| false));
        let served = service.serve(&period).await;
        period.cancel();
        let stopped_by = watcher.await.ok().flatten();
        served?;
        if shutdown.is_cancelled() {
            return Ok(());
        }
        if let Some(link) = stopped_by {
            refuse_closed(&link, side)?;
            eprintln!(
                "segmirror {role}: link {:?} is {}: {} stopped",
                link.name,
                link.state,
                S::STOPPED
            );
        }
    }
}

/// A listener is bound once and kept across pauses (a resumed applier answers on the same port): each period
/// serves on a clone of it.
fn listener_of(std: &std::net::TcpListener) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::from_std(std.try_clone().context("the listening socket")?).context("the listening socket")
}

/// One session at a time, dialed or listened for.
struct LinkService<R> {
    config: LinkConfig,
    /// `None` only while a listened period holds it (`listen` takes the runner and hands it back).
    runner: Option<R>,
    at: GatedEndpoint,
}

enum GatedEndpoint {
    Dial {
        addr: String,
        dialer: Dialer,
    },
    Listen {
        listener: std::net::TcpListener,
        acceptor: Acceptor,
    },
}

impl<R: SessionRunner> GatedService for LinkService<R> {
    const STOPPED: &'static str = "session";

    async fn serve(&mut self, period: &CancellationToken) -> anyhow::Result<()> {
        let Some(mut runner) = self.runner.take() else {
            bail!("the session runner was lost by an earlier period");
        };
        let (runner, result) = match &self.at {
            GatedEndpoint::Dial { addr, dialer } => {
                let result = dial(addr, dialer, &self.config, &mut runner, period).await;
                (runner, result)
            }
            GatedEndpoint::Listen { listener, acceptor } => {
                let listener = listener_of(listener)?;
                listen(listener, acceptor.clone(), self.config.clone(), runner, period.clone()).await
            }
        };
        self.runner = Some(runner);
        result.map_err(anyhow::Error::from)
    }
}

/// [`run_link`], gated by the link record (see the module doc); without a record, exactly [`run_link`].
pub async fn run_link_gated<R: SessionRunner>(
    link_args: &EndpointConfig,
    config: LinkConfig,
    runner: R,
    shutdown: CancellationToken,
    gate: Option<(LinkRecord, Side, OnLink)>,
    role: &str,
) -> anyhow::Result<()> {
    let endpoint = link_args.endpoint().await?;
    let Some((record, side, on_link)) = gate else {
        return run_link(endpoint, config, runner, shutdown).await;
    };
    let at = match endpoint {
        Endpoint::Dial { addr, dialer } => GatedEndpoint::Dial { addr, dialer },
        Endpoint::Listen { listener, acceptor } => GatedEndpoint::Listen {
            listener: listener.into_std().context("keeping the listening socket")?,
            acceptor,
        },
    };
    let mut service = LinkService {
        config,
        runner: Some(runner),
        at,
    };
    run_gated(&mut service, &record, side, &on_link, &shutdown, role).await
}

/// Every shipper of a cluster on one listening socket.
struct ClusterService<A> {
    listener: std::net::TcpListener,
    acceptor: Acceptor,
    config: LinkConfig,
    cluster: Cluster<A>,
    session_config: SessionConfig,
}

impl<A: ChunkApplier + Send + 'static> GatedService for ClusterService<A> {
    const STOPPED: &'static str = "every shipper's session";

    async fn serve(&mut self, period: &CancellationToken) -> anyhow::Result<()> {
        let listener = listener_of(&self.listener)?;
        listen_cluster(
            listener,
            self.acceptor.clone(),
            self.config.clone(),
            self.cluster.clone(),
            self.session_config.clone(),
            period.clone(),
        )
        .await
        .map_err(anyhow::Error::from)
    }
}

/// `apply --listen --cluster`, gated by the link record like [`run_link_gated`]: while the link is paused no shipper
/// is served (the socket stays bound, so the shippers reconnect to the same port after resume); a pause ends every
/// session (Goodbye), a resume serves new ones, which resume from the mirror's durable positions and the claims
/// recorded under `<mirror>/.tail/claims/`; promoted or deleted: ended ([`ClosedLink`]), while running too.
pub async fn run_cluster_gated<A: ChunkApplier + Send + 'static>(
    endpoint: Endpoint,
    config: LinkConfig,
    cluster: Cluster<A>,
    session_config: SessionConfig,
    shutdown: CancellationToken,
    gate: (LinkRecord, OnLink),
    role: &str,
) -> anyhow::Result<()> {
    let (record, on_link) = gate;
    let Endpoint::Listen { listener, acceptor } = endpoint else {
        // clap refuses --cluster with --connect; kept as an error rather than a panic.
        bail!("--cluster needs --listen ADDR");
    };
    let mut service = ClusterService {
        listener: listener.into_std().context("keeping the listening socket")?,
        acceptor,
        config,
        cluster,
        session_config,
    };
    run_gated(&mut service, &record, Side::Applier, &on_link, &shutdown, role).await
}
