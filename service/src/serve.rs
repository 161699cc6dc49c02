//! `segmirror serve`: the read-only Kafka endpoint (`segmirror_endpoint`) over a mirror root, beside the applier
//! that fills it.
//!
//! What this layer adds to the endpoint: the facts. The endpoint serves what a [`MirrorReplica`] is told is durable;
//! here a loop reads the catalog (the link's state, its partitions' installed ends and lineages, the topics and
//! configs the link carries) and the direct applier's state files (the active segment's durable end, written after
//! the fsync and before the Ack) every [`REFRESH_INTERVAL`], on a blocking thread, and hands them in. Committed
//! group offsets go to the catalog's `served_offsets` table, so they survive a restart of `serve` and a failover
//! can commit them on the target.
//!
//! What is exposed: a partition's served high watermark is the offset after its last batch durable in the mirror
//! (the larger of the catalog's installed end and the state file's durable end). With the shipper's default
//! `--upto high-watermark`, that is committed on the source and final. With `--upto log-end` the mirror may hold
//! records the source has not committed (the shipper says so in the handshake, feature bit 10, and the applier
//! records it with each progress report): the served high watermark then stops at the one the shipper last
//! reported (about once a second), as a broker's own consumers stop at its high watermark, so a source truncation
//! never takes back a record a client was shown. A shipper older than the bit, in that mode, is taken for one in
//! the default mode.
//!
//! The link gates the endpoint like every service: paused, it keeps serving what is installed (a temporary
//! disconnect leaves the replica readable); promoted or deleted, the endpoint stops and the command says where the
//! topics live now.

use std::path::PathBuf;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context as _};
use segment_format::partition_metadata::Uuid;
use segmirror_applier::direct::{recorded_active_segment, recorded_progress};
use segmirror_applier::mirror::{progress_dir, tail_dir};
use segmirror_catalog::{Catalog, LinkState, ServedOffset};
use segmirror_endpoint::group::{CommittedOffset, Coordinator, OffsetStore};
use segmirror_endpoint::mirror::{LinkFacts, MirrorReplica, PartitionFacts};
use segmirror_endpoint::{Endpoint, Limits, Replica, ReplicaState, ServeConfig, TopicView};
use segmirror_transport::direct::tls::{server_config, TlsFiles};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::catalog::open_mirror_catalog;

/// How often the mirror's durable ends are read: the most a new install waits before a long-polling fetch sees it.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(10);

/// What `segmirror serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub mirror: PathBuf,
    pub catalog: Option<PathBuf>,
    pub link: String,
    /// The address to listen on.
    pub listen: String,
    /// `HOST:PORT` clients are told to connect to; default: the listener's address.
    pub advertised: Option<String>,
    /// TLS (client certificates signed by its CA required); `None`: plaintext.
    pub tls: Option<TlsFiles>,
    pub limits: Limits,
}

/// Why the endpoint stopped on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Shut down by the caller.
    Shutdown,
    /// The link left replication: its topics are the target cluster's now (or gone).
    LinkClosed(ReplicaState),
}

/// The endpoint, prepared: the listener bound, the catalog read once.
pub struct ServeService {
    options: ServeOptions,
    listener: TcpListener,
    replica: Arc<MirrorReplica>,
    facts: Arc<Mutex<FactsReader>>,
    store: Arc<MirrorOffsets>,
}

impl ServeService {
    /// Bind the listener and read the link's facts once (an unknown link, or a mirror without a catalog, is an
    /// error here rather than an endpoint serving nothing).
    pub async fn prepare(options: ServeOptions) -> anyhow::Result<Self> {
        let mirror = options.mirror.clone();
        let catalog_arg = options.catalog.clone();
        let link = options.link.clone();
        let (reader, store) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let (_, catalog) = open_mirror_catalog(catalog_arg.clone(), &mirror, true)?;
            let record = catalog.link(&link).with_context(|| format!("link {link}"))?;
            if record.state == LinkState::Deleted {
                bail!("link {link} is deleted: nothing to serve");
            }
            let (_, offsets_catalog) = open_mirror_catalog(catalog_arg, &mirror, true)?;
            Ok((
                FactsReader {
                    catalog,
                    mirror,
                    link: link.clone(),
                    last: None,
                },
                CatalogOffsets {
                    catalog: Mutex::new(offsets_catalog),
                    link,
                },
            ))
        })
        .await??;
        let listener = TcpListener::bind(&options.listen)
            .await
            .with_context(|| format!("listening on {}", options.listen))?;
        let replica = Arc::new(MirrorReplica::new(options.mirror.clone(), options.link.clone()));
        let store = Arc::new(MirrorOffsets {
            store,
            replica: replica.clone(),
        });
        let service = Self {
            options,
            listener,
            replica,
            facts: Arc::new(Mutex::new(reader)),
            store,
        };
        service.refresh().await?;
        Ok(service)
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    async fn refresh(&self) -> anyhow::Result<ReplicaState> {
        refresh(&self.facts, &self.replica).await
    }

    /// Serve until `shutdown` or until the link is promoted or deleted.
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<Stopped> {
        let local = self.listener.local_addr()?;
        tracing::info!(
            link = %self.options.link,
            listen = %local,
            tls = self.options.tls.is_some(),
            "serving the mirror read-only over the Kafka protocol"
        );
        let running = Running::start(
            self.listener,
            self.replica.clone(),
            self.store.clone(),
            &self.options.common(),
        )?;
        let mut failing = false;
        let outcome = loop {
            tokio::select! {
                () = shutdown.cancelled() => break Stopped::Shutdown,
                () = tokio::time::sleep(REFRESH_INTERVAL) => {}
            }
            match refresh(&self.facts, &self.replica).await {
                Ok(ReplicaState::Replicating) => failing = false,
                Ok(closed) => break Stopped::LinkClosed(closed),
                Err(e) => {
                    if !failing {
                        tracing::warn!("reading the mirror's catalog failed (serving the last ends read): {e:#}");
                    }
                    failing = true;
                }
            }
        };
        running.stop().await;
        Ok(outcome)
    }
}

/// What the endpoint over a mirror and the one over a bucket are started with alike.
pub(crate) struct EndpointOptions<'a> {
    pub link: &'a str,
    pub advertised: Option<&'a str>,
    pub tls: Option<&'a TlsFiles>,
    pub limits: Limits,
}

impl ServeOptions {
    fn common(&self) -> EndpointOptions<'_> {
        EndpointOptions {
            link: &self.link,
            advertised: self.advertised.as_deref(),
            tls: self.tls.as_ref(),
            limits: self.limits,
        }
    }
}

/// A running endpoint: its listener's task and what stops it.
pub(crate) struct Running {
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Serve `replica` on `listener`: advertised as the listener's address unless `advertised` says otherwise,
    /// node 0, cluster id `segmirror-<link>`, groups coordinated here with their offsets in `store`.
    pub(crate) fn start(
        listener: TcpListener,
        replica: Arc<dyn Replica>,
        store: Arc<dyn OffsetStore>,
        options: &EndpointOptions<'_>,
    ) -> anyhow::Result<Running> {
        let local = listener.local_addr()?;
        let (host, port) = match options.advertised {
            Some(addr) => split_host_port(addr)?,
            None => (local.ip().to_string(), i32::from(local.port())),
        };
        let tls = options.tls.map(server_config).transpose()?;
        let config = ServeConfig {
            advertised_host: host,
            advertised_port: port,
            node_id: 0,
            cluster_id: format!("segmirror-{}", options.link),
            limits: options.limits,
        };
        let topics = replica.clone();
        let groups = Coordinator::new(
            store,
            options.link.to_string(),
            Arc::new(move |topic: &str, partition: i32| topics.ends(topic, partition).is_ok()),
        );
        let endpoint = Arc::new(Endpoint::new(replica, groups, config));
        let stop = CancellationToken::new();
        let server = tokio::spawn(segmirror_endpoint::serve(
            listener,
            endpoint,
            tls,
            stop.clone().cancelled_owned(),
        ));
        Ok(Running { stop, server })
    }

    /// Stop accepting and wait for the listener's task.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.server.await;
    }
}

/// Read the facts on a blocking thread and hand them to the replica.
async fn refresh(facts: &Arc<Mutex<FactsReader>>, replica: &Arc<MirrorReplica>) -> anyhow::Result<ReplicaState> {
    let facts = facts.clone();
    let replica = replica.clone();
    tokio::task::spawn_blocking(move || {
        let mut reader = facts.lock().unwrap_or_else(|e| e.into_inner());
        let (read, changed) = reader.refreshed()?;
        if changed {
            for failure in replica.refresh(&read) {
                tracing::warn!("a mirror partition cannot be served: {failure}");
            }
        }
        Ok(read.state)
    })
    .await?
}

/// Reads a link's facts from the catalog and the mirror's state files.
struct FactsReader {
    catalog: Catalog,
    mirror: PathBuf,
    link: String,
    /// The last facts read and what they were read at.
    last: Option<(Fingerprint, LinkFacts)>,
}

/// What says whether the facts can have changed: the catalog's `data_version` (another connection committed) and
/// the modification time of the direct applier's state directory (a state file was replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    data_version: i64,
    state_dir: Option<SystemTime>,
    /// The progress reports' directory: a new report may move a partition's committed end.
    progress_dir: Option<SystemTime>,
}

/// A directory's modification time, `None` when it does not exist (yet).
fn modified(dir: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(dir).and_then(|m| m.modified()).ok()
}

/// A state directory modified this recently is read again even when its time did not change: the kernel stamps
/// modification times from a coarse clock (a few milliseconds), so two renames within one tick share a time.
const COARSE_CLOCK_MARGIN: Duration = Duration::from_millis(50);

impl FactsReader {
    /// The facts, and whether they changed since the last call. Reads nothing but the fingerprint when it did not
    /// move, so an idle endpoint costs one `PRAGMA` and one `stat` per refresh whatever its partitions.
    fn refreshed(&mut self) -> anyhow::Result<(LinkFacts, bool)> {
        let fingerprint = Fingerprint {
            data_version: self.catalog.data_version()?,
            state_dir: modified(&tail_dir(&self.mirror)),
            progress_dir: modified(&progress_dir(&self.mirror)),
        };
        let settled = [fingerprint.state_dir, fingerprint.progress_dir]
            .iter()
            .flatten()
            .all(|t| t.elapsed().is_ok_and(|age| age > COARSE_CLOCK_MARGIN));
        if let Some((last, facts)) = &self.last {
            if *last == fingerprint && settled {
                return Ok((facts.clone(), false));
            }
        }
        let facts = self.read()?;
        let changed = self.last.as_ref().is_none_or(|(_, last)| *last != facts);
        self.last = Some((fingerprint, facts.clone()));
        Ok((facts, changed))
    }

    fn read(&self) -> anyhow::Result<LinkFacts> {
        let link = self.catalog.link(&self.link)?;
        let state = match link.state {
            LinkState::Active | LinkState::Paused => ReplicaState::Replicating,
            LinkState::Promoted => ReplicaState::Promoted {
                target: (!link.target.is_empty()).then(|| link.target.clone()),
            },
            LinkState::Deleted => ReplicaState::Deleted,
        };
        let carried = self.catalog.link_topics(&self.link).unwrap_or_default();
        let mut partitions = Vec::new();
        let mut topics: Vec<TopicView> = Vec::new();
        for p in self.catalog.partitions(&self.link)? {
            let key = &p.key;
            let active = recorded_active_segment(&self.mirror, &key.topic, key.partition)
                .ok()
                .flatten()
                .and_then(|a| a.next_offset);
            let durable_end = match (p.installed_end_offset, active) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            // A shipper above the high watermark (`--upto log-end`): served up to the one it last reported
            // (nothing known committed before its first report of the partition).
            let committed_end = recorded_progress(&self.mirror, &key.topic, key.partition)
                .ok()
                .flatten()
                .filter(|p| p.above_high_watermark)
                .map(|p| p.high_watermark.unwrap_or(i64::MIN));
            partitions.push(PartitionFacts {
                topic: key.topic.clone(),
                partition: key.partition,
                durable_end,
                log_start: p.log_start_offset,
                committed_end,
            });
            match topics.iter_mut().find(|t| t.name == key.topic) {
                Some(t) => t.partitions.push(key.partition),
                None => topics.push(TopicView {
                    name: key.topic.clone(),
                    id: Uuid::from_str(&p.source_topic_id).map_or([0; 16], |id| id.0),
                    partitions: vec![key.partition],
                    configs: carried
                        .iter()
                        .find(|t| t.name == key.topic)
                        .map(|t| t.configs.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                        .unwrap_or_default(),
                }),
            }
        }
        for t in &mut topics {
            t.partitions.sort_unstable();
        }
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(LinkFacts {
            state,
            topics,
            partitions,
        })
    }
}

/// A mirror's group offsets as the endpoint answers OffsetFetch: those committed through it and, for the partitions
/// a group never committed here, the source group's offsets the link carried, so an application that moves from
/// the source cluster to the endpoint resumes where it stood there. Per partition the later commit wins, the rule
/// `failover` applies (`crate::offsets::failover_offsets`; commit times from two hosts' clocks). An offset past
/// what the endpoint serves is answered as the served high watermark: the consumer waits there for the mirror to
/// catch up rather than being reset by OFFSET_OUT_OF_RANGE.
struct MirrorOffsets {
    store: CatalogOffsets,
    replica: Arc<MirrorReplica>,
}

impl OffsetStore for MirrorOffsets {
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        self.store.commit(group, offsets)
    }

    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String> {
        let catalog = self.store.catalog.lock().unwrap_or_else(|e| e.into_inner());
        let merged = crate::offsets::group_offsets(&catalog, &self.store.link, group).map_err(|e| format!("{e:#}"))?;
        drop(catalog);
        Ok(merged
            .into_iter()
            .map(|o| {
                let served = self.replica.ends(&o.topic, o.partition).map(|e| e.high_watermark);
                CommittedOffset {
                    offset: served.map_or(o.offset, |end| o.offset.min(end)),
                    topic: o.topic,
                    partition: o.partition,
                    leader_epoch: o.leader_epoch.unwrap_or(-1),
                    metadata: o.metadata,
                }
            })
            .collect())
    }

    fn groups(&self) -> Result<Vec<String>, String> {
        let mut groups = self.store.groups()?;
        let catalog = self.store.catalog.lock().unwrap_or_else(|e| e.into_inner());
        let shipped = catalog.link_offsets(&self.store.link).map_err(|e| e.to_string())?;
        drop(catalog);
        groups.extend(shipped.into_iter().map(|o| o.source().group));
        groups.sort_unstable();
        groups.dedup();
        Ok(groups)
    }

    fn delete(&self, group: &str) -> Result<(), String> {
        self.store.delete(group)
    }
}

/// Group offsets committed through the endpoint, in the catalog (one connection, one commit at a time).
pub(crate) struct CatalogOffsets {
    pub(crate) catalog: Mutex<Catalog>,
    pub(crate) link: String,
}

impl OffsetStore for CatalogOffsets {
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        let now = segment_format::now_ms();
        let rows: Vec<ServedOffset> = offsets
            .iter()
            .map(|o| ServedOffset {
                topic: o.topic.clone(),
                partition: o.partition,
                offset: o.offset,
                leader_epoch: (o.leader_epoch >= 0).then_some(o.leader_epoch),
                metadata: o.metadata.clone(),
                committed_at_ms: now,
            })
            .collect();
        let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        catalog
            .commit_served_offsets(&self.link, group, &rows)
            .map_err(|e| e.to_string())
    }

    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String> {
        let catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        let rows = catalog.served_offsets(&self.link, group).map_err(|e| e.to_string())?;
        Ok(rows
            .into_iter()
            .map(|r| CommittedOffset {
                topic: r.topic,
                partition: r.partition,
                offset: r.offset,
                leader_epoch: r.leader_epoch.unwrap_or(-1),
                metadata: r.metadata,
            })
            .collect())
    }

    fn groups(&self) -> Result<Vec<String>, String> {
        let catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        catalog.served_groups(&self.link).map_err(|e| e.to_string())
    }

    fn delete(&self, group: &str) -> Result<(), String> {
        let mut catalog = self.catalog.lock().unwrap_or_else(|e| e.into_inner());
        catalog
            .delete_served_group(&self.link, group)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// `HOST:PORT` (a bracketed IPv6 host allowed).
pub(crate) fn split_host_port(addr: &str) -> anyhow::Result<(String, i32)> {
    let (host, port) = addr
        .rsplit_once(':')
        .with_context(|| format!("advertised listener {addr}: expected HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("advertised listener {addr}: {port} is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        bail!("advertised listener {addr}: no host");
    }
    Ok((host.to_string(), i32::from(port)))
}
