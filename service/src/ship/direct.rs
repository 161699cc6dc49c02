//! The long-running shipper of the direct transport (`segmirror ship`): tails the selected partitions of Kafka log
//! dirs and streams every new batch to the applier over one link, dialling it or waiting for it to dial, until the
//! shutdown token is cancelled; then it says Goodbye.
//!
//! Why one process per link rather than a step of `seed`: a tail has no end; the session resumes from the
//! mirror's durable position on every (re)connect, so stopping and restarting the shipper loses and repeats
//! nothing. Partitions are listed again while running (every second and on the watcher's notice): a topic created
//! later is shipped from its first byte, a deleted one is dropped (the shipper's rediscovery).
//!
//! The link's record (the source host's catalog; [`crate::link_gate`]) gates it: paused, the session ends and
//! nothing ships until resumed; promoted or deleted, it stops ([`crate::link_gate::ClosedLink`]). Without explicit
//! topics the record's topics regex selects the partitions and is re-read while running: newly selected topics are
//! shipped, deselected ones stop (their mirrors keep what they have).
//!
//! In two parts: [`DirectShipService::prepare`] (blocking: discovery, the high watermark source, leadership, the link's
//! metadata) and [`DirectShipService::serve`] (async, until the shutdown token), so the caller installs its signal
//! handler where the link starts, and a test runs both with its own token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use segmirror_catalog::Link;
use segmirror_shipper::direct::{LiveTopicFilter, Rediscovery, TailFeed, TailFeedConfig, TailPartition};
use segmirror_shipper::link_meta::{announce_direct, DirectMetaSender, MetaConfig, MetaReader};
use segmirror_shipper::source::bound_hw::{CheckpointHighWatermarks, HighWatermarkSource, UptoPolicy};
use segmirror_shipper::source::discover::{discover, log_dir_cluster_id, TopicFilter, ALL_TOPICS};
use segmirror_shipper::source::fetch_hw::{FetchHighWatermarks, FetchHwConfig};
use segmirror_shipper::source::leadership::{
    check_node, node_id_of_log_dir, MetadataLeadership, NodeCheck, LEADERSHIP_INTERVAL,
};
use segmirror_shipper::source::list_offsets::{ListOffsetsConfig, REQUEST_TIMEOUT};
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::{PartitionRef, TruncateMode};
use segmirror_transport::direct::session::{SessionConfig, ShipperSession};
use segmirror_transport::direct::Role;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::admin_port::admin::{CatalogAdmin, LinkAdmin, ShipperAdmin};
use crate::admin_port::figures::{LinkMeter, ShipperMeter, Snapshot};
use crate::admin_port::{self, App};
use crate::link::{link_config, EndpointConfig};
use crate::link_gate::{run_link_gated, shipper_topics, LinkRecord, OnLink, Side};
use crate::runtime::Runtime;

/// Whether the shipper is one of several (one beside each broker of the source cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceNodes {
    /// The shipper ships every selected partition of its log dirs.
    One,
    /// The shipper ships only the partitions its broker leads (asked of `source_bootstrap`, which must be this
    /// broker), each claimed from the applier at its leader epoch.
    Cluster,
}

/// What a direct shipper needs to know (the command line's `segmirror ship` flags).
#[derive(Debug, Clone)]
pub struct DirectShipConfig {
    /// The broker log dirs to tail.
    pub log_dirs: Vec<PathBuf>,
    /// Topics to ship (a regular expression); `None`: the link record's regex, else every topic.
    pub topics: Option<String>,
    /// The source host's catalog holding the link's record; `None`: the data directory's, if it records the link.
    pub catalog: Option<PathBuf>,
    /// How far to ship: committed records only, or every complete batch.
    pub upto: UptoPolicy,
    /// A source broker to learn the high watermarks (and, in a cluster, leadership) from.
    pub source_bootstrap: Option<String>,
    pub nodes: SourceNodes,
    /// Most payload bytes per second on the link.
    pub max_bandwidth: Option<u64>,
    /// The source broker's `metadata.log.dir`; default: the first log dir holding it.
    pub metadata_log_dir: Option<PathBuf>,
    /// Consumer groups whose committed offsets the link carries (a regular expression).
    pub groups: String,
    /// Milliseconds between two reads of the metadata log and `__consumer_offsets`.
    pub meta_interval_ms: u64,
    pub endpoint: EndpointConfig,
    /// Where to serve `/metrics` and the admin API, if anywhere.
    pub metrics_addr: Option<String>,
}

/// The partitions selected at start, and how the selection follows the link record.
struct Selection {
    record: Option<(LinkRecord, Link)>,
    topics: String,
    filter: TopicFilter,
    /// Without explicit topics, the link record's regex is followed while running.
    live_filter: Option<LiveTopicFilter>,
    cluster_id: String,
    partitions: Vec<TailPartition>,
}

/// A direct shipper, prepared and ready to serve.
pub struct DirectShipService {
    config: DirectShipConfig,
    record: Option<(LinkRecord, Link)>,
    topics: String,
    cluster_id: String,
    node_id: Option<i32>,
    session: ShipperSession<TailFeed>,
    high_watermarks: Arc<dyn HighWatermarkSource>,
    link_meter: Arc<LinkMeter>,
    shipper_meter: Arc<ShipperMeter>,
    on_link: OnLink,
    meta_reader: Option<(MetaReader, DirectMetaSender)>,
}

impl DirectShipService {
    /// Discovers the partitions, sets up the high watermark source, leadership and the link's metadata; blocking.
    pub fn prepare(config: DirectShipConfig, runtime: &Runtime) -> anyhow::Result<DirectShipService> {
        let selection = select(&config)?;
        let high_watermarks = high_watermarks(&config, runtime, &selection.partitions)?;
        let mut feed_config = TailFeedConfig::new(high_watermarks.clone());
        let node_id = leadership(&config, runtime, &mut feed_config)?;
        feed_config.progress_interval = Some(segmirror_transport::direct::handshake::PROGRESS_INTERVAL);
        feed_config.upto = config.upto;
        let link_meter = Arc::new(LinkMeter::default());
        let shipper_meter = Arc::new(ShipperMeter::new(
            &config.endpoint.link,
            selection
                .partitions
                .iter()
                .map(|p| (p.partition.topic.clone(), p.partition.partition)),
        ));
        let Selection {
            record,
            topics,
            filter,
            live_filter,
            cluster_id,
            partitions,
        } = selection;
        let filter_for_meta = filter.clone();
        let mut rediscovery = Rediscovery::new(config.log_dirs.clone(), filter, cluster_id.clone());
        rediscovery.live_filter = live_filter.clone();
        let feed = TailFeed::new(partitions, feed_config).with_rediscovery(rediscovery);
        let on_link = follow_record(link_meter.clone(), live_filter);
        let session_config = SessionConfig {
            max_bandwidth: config.max_bandwidth,
            observer: config
                .metrics_addr
                .is_some()
                .then(|| shipper_meter.clone() as Arc<dyn segmirror_transport::direct::session::SessionObserver>),
            ..SessionConfig::default()
        };
        let session = ShipperSession::new(feed, session_config)?;
        let (session, meta_reader) = link_meta(&config, filter_for_meta, session)?;
        Ok(DirectShipService {
            config,
            record,
            topics,
            cluster_id,
            node_id,
            session,
            high_watermarks,
            link_meter,
            shipper_meter,
            on_link,
            meta_reader,
        })
    }

    /// Serves the link until `shutdown` (or the link record is promoted or deleted:
    /// [`crate::link_gate::ClosedLink`]).
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        if let Some(addr) = &self.config.metrics_addr {
            start_metrics(&self, addr, shutdown.clone()).await?;
        }
        let DirectShipService {
            config,
            record,
            cluster_id,
            node_id,
            session,
            link_meter,
            on_link,
            meta_reader,
            ..
        } = self;
        if let Some((reader, tx)) = meta_reader {
            tokio::spawn(announce_direct(reader, tx));
        }
        let link = &config.endpoint.link;
        let mut handshake = match node_id {
            Some(node_id) => HandshakeConfig::cluster_shipper(link.clone(), cluster_id, node_id),
            None => HandshakeConfig::new(Role::Shipper, link.clone(), Some(cluster_id)),
        };
        // Feature bit 9: a recorded link names its id to the applier, which refuses another link of the same name.
        handshake.link_id = record.as_ref().map(|(_, l)| l.id.clone());
        // Feature bit 10: the applier learns that what it installs past the reported high watermark may not be
        // committed.
        handshake.upto = match config.upto {
            UptoPolicy::HighWatermark => TruncateMode::HighWatermark,
            UptoPolicy::LogEnd => TruncateMode::LogEnd,
        };
        let link_config = link_config(handshake, None, "ship", Some(link_meter));
        let gate = record.map(|(record, _)| (record, Side::Shipper, on_link));
        run_link_gated(&config.endpoint, link_config, session, shutdown, gate, "ship").await
    }
}

/// The partitions of the log dirs the topics select, refusing log dirs of different clusters.
fn select(config: &DirectShipConfig) -> anyhow::Result<Selection> {
    let record = LinkRecord::for_shipper(config.catalog.clone(), &config.endpoint.link)?;
    let topics = shipper_topics("ship", config.topics.as_deref(), record.as_ref(), ALL_TOPICS)?;
    let filter = TopicFilter::new(&topics).with_context(|| format!("topics {topics:?}"))?;
    let live_filter: Option<LiveTopicFilter> = match (&record, &config.topics) {
        (Some(_), None) => Some(Arc::new(std::sync::RwLock::new(filter.clone()))),
        _ => None,
    };
    let found = discover(&config.log_dirs, &filter);
    for e in &found.log_dir_errors {
        eprintln!("segmirror ship: error: {e}");
    }
    for p in &found.failed {
        eprintln!(
            "segmirror ship: cannot ship {}-{} ({}): {:?}",
            p.topic,
            p.partition,
            p.path.display(),
            p.problem
        );
    }
    // No partition yet is no error: the feed lists the log dirs again and ships a matching topic once created.
    let cluster_id = match found.sources.first() {
        Some(first) => first.cluster_id.clone(),
        None => {
            let first = config.log_dirs.first().context("no --log-dir")?;
            let id = log_dir_cluster_id(first).map_err(|e| anyhow::anyhow!("{e}: nothing to ship from"))?;
            eprintln!(
                "segmirror ship: no partition in {} matches --topics {:?} yet; waiting for one",
                config
                    .log_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                topics
            );
            id
        }
    };
    if let Some(other) = found.sources.iter().find(|s| s.cluster_id != cluster_id) {
        bail!(
            "the log dirs belong to different clusters ({cluster_id} and {} in {}): one ship per source cluster",
            other.cluster_id,
            other.dir.display()
        );
    }
    let partitions: Vec<TailPartition> = found
        .sources
        .iter()
        .map(|s| TailPartition {
            partition: PartitionRef {
                topic: s.topic.clone(),
                partition: s.partition,
                topic_id: s.topic_id.0,
            },
            dir: s.dir.clone(),
        })
        .collect();
    eprintln!(
        "segmirror ship: link {:?}: {} partition(s) of cluster {cluster_id}",
        config.endpoint.link,
        partitions.len()
    );
    Ok(Selection {
        record,
        topics,
        filter,
        live_filter,
        cluster_id,
        partitions,
    })
}

/// The high watermarks: from the source broker (a long-polling Fetch, ListOffsets to learn them first and to fall
/// back on) when one is given, else from the log dirs' replication-offset-checkpoint. They bound what ships in the
/// default mode; in both modes they go to the applier in the progress reports.
fn high_watermarks(
    config: &DirectShipConfig,
    runtime: &Runtime,
    partitions: &[TailPartition],
) -> anyhow::Result<Arc<dyn HighWatermarkSource>> {
    Ok(match (&config.source_bootstrap, config.upto) {
        // Both modes: with `--upto log-end` the bound is the log end, and the high watermarks learned here go to
        // the applier in the progress reports (what `serve` lets `read_committed` readers see).
        (Some(bootstrap), _) => {
            // The partitions known now; the source asks for any other the feed looks up (topics created later).
            let asked = partitions
                .iter()
                .map(|p| (p.partition.topic.clone(), p.partition.partition))
                .collect();
            let handle = runtime.block_on(async { tokio::runtime::Handle::current() })?;
            eprintln!("segmirror ship: high watermarks from {bootstrap} (long-polling Fetch)");
            Arc::new(FetchHighWatermarks::spawn(
                &handle,
                bootstrap.clone(),
                asked,
                FetchHwConfig::default(),
            ))
        }
        (None, _) => Arc::new(CheckpointHighWatermarks::new(config.log_dirs.clone())),
    })
}

/// In a cluster: this broker's node id (checked against the source bootstrap), and the leadership the feed
/// follows; `None` for a single source.
fn leadership(
    config: &DirectShipConfig,
    runtime: &Runtime,
    feed_config: &mut TailFeedConfig,
) -> anyhow::Result<Option<i32>> {
    let (Some(bootstrap), SourceNodes::Cluster) = (&config.source_bootstrap, config.nodes) else {
        return Ok(None);
    };
    let mut ids = Vec::new();
    for dir in &config.log_dirs {
        ids.push(node_id_of_log_dir(dir).with_context(|| format!("--cluster: the node id of {}", dir.display()))?);
    }
    ids.dedup();
    let [node_id] = ids[..] else {
        bail!("--cluster: the log dirs belong to different nodes ({ids:?}); one shipper per broker");
    };
    let handle = runtime.block_on(async { tokio::runtime::Handle::current() })?;
    let check = runtime
        .block_on(check_node(bootstrap, node_id, REQUEST_TIMEOUT))?
        .with_context(|| format!("--cluster: --source-bootstrap {bootstrap}"))?;
    if let NodeCheck::Unreachable { reason } = check {
        eprintln!(
            "segmirror ship: warning: --source-bootstrap {bootstrap} does not answer ({reason}); shipping \
             nothing until node {node_id} answers (checked then)"
        );
    }
    eprintln!(
        "segmirror ship: node {node_id} of the source cluster: shipping the partitions it leads ({bootstrap}, Metadata)"
    );
    feed_config.leadership = Some(Arc::new(MetadataLeadership::spawn(
        &handle,
        bootstrap.clone(),
        node_id,
        LEADERSHIP_INTERVAL,
        ListOffsetsConfig::default(),
    )));
    Ok(Some(node_id))
}

/// On every read of the link record: the meter's paused state, and the record's topics regex followed when the
/// topics were not given explicitly.
fn follow_record(meter: Arc<LinkMeter>, live_filter: Option<LiveTopicFilter>) -> OnLink {
    Arc::new(move |link: &Link| {
        meter.set_paused(link.state == segmirror_catalog::LinkState::Paused);
        let Some(live) = &live_filter else {
            return;
        };
        let current = live.read().map(|f| f.as_str() == link.topics_regex).unwrap_or(false);
        if current {
            return;
        }
        match TopicFilter::new(&link.topics_regex) {
            Ok(filter) => {
                eprintln!(
                    "segmirror ship: link {:?}: topics regex now {:?}",
                    link.name, link.topics_regex
                );
                if let Ok(mut slot) = live.write() {
                    *slot = filter;
                }
            }
            Err(e) => {
                tracing::warn!(link = %link.name, error = %e, "the link's topics regex does not compile; keeping the previous one")
            }
        }
    })
}

/// The link's metadata (feature bit 8), wired into the session: one shipper per broker would each see only the
/// `__consumer_offsets` partitions its broker holds, so in a cluster none is sent.
type WithMeta = (ShipperSession<TailFeed>, Option<(MetaReader, DirectMetaSender)>);

fn link_meta(
    config: &DirectShipConfig,
    filter: TopicFilter,
    session: ShipperSession<TailFeed>,
) -> anyhow::Result<WithMeta> {
    let meta = match config.nodes {
        SourceNodes::Cluster => None,
        SourceNodes::One => MetaConfig::find(
            &config.log_dirs,
            config.metadata_log_dir.as_deref(),
            &config.groups,
            filter,
            &config.endpoint.link,
        )?,
    };
    Ok(match meta {
        Some(mut meta) => {
            meta.interval = Duration::from_millis(config.meta_interval_ms);
            eprintln!(
                "segmirror ship: link metadata from {} and groups {:?} every {} ms",
                meta.metadata_dir.display(),
                config.groups,
                config.meta_interval_ms
            );
            let (tx, rx) = watch::channel(None);
            let session = session.with_link_meta(rx);
            (session, Some((MetaReader::new(meta)?, tx)))
        }
        None => {
            if config.nodes == SourceNodes::One {
                eprintln!(
                    "segmirror ship: warning: no {} in the log dirs: the link carries no topic metadata or consumer \
                     offsets (give --metadata-log-dir)",
                    segment_format::metadata_log::METADATA_DIR
                );
            }
            (session, None)
        }
    })
}

/// `/metrics` and the admin API: a recorded link is paused through its record (the gate reads it); an unmanaged
/// one has no record to pause.
async fn start_metrics(service: &DirectShipService, addr: &str, shutdown: CancellationToken) -> anyhow::Result<()> {
    let link = service.config.endpoint.link.clone();
    let (gate, _) = watch::channel(false);
    let gate = Arc::new(gate);
    let (name, meter) = (link.clone(), service.link_meter.clone());
    let (shipper_meter, high_watermarks) = (service.shipper_meter.clone(), service.high_watermarks.clone());
    let snapshot = move || Snapshot {
        links: vec![meter.row(
            &name,
            if meter.paused() { "paused" } else { "active" },
            &["active", "paused"],
            shipper_meter.partitions(),
        )],
        partitions: {
            high_watermarks.refresh();
            shipper_meter.rows(Some(high_watermarks.as_ref()))
        },
    };
    let admin: Arc<dyn LinkAdmin> = match &service.record {
        Some((record, _)) => Arc::new(CatalogAdmin {
            catalog_path: record.catalog.clone(),
            served: link,
            gate: gate.clone(),
            meter: service.link_meter.clone(),
            pausable: true,
        }),
        None => Arc::new(ShipperAdmin {
            link,
            topics: service.topics.clone(),
            gate: gate.clone(),
            meter: service.link_meter.clone(),
            pausable: false,
        }),
    };
    let app = App {
        snapshot: Arc::new(snapshot),
        admin,
    };
    admin_port::start(addr, app, shutdown).await?;
    Ok(())
}
