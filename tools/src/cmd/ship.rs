//! `segmirror ship`: the long-running shipper of the direct transport. Tails the selected partitions of Kafka log
//! dirs and streams every new batch to a `segmirror tail-apply` over one TCP link (mutual TLS or, on a trusted
//! network, `--plaintext`), dialling it (`--connect`) or waiting for it to dial (`--listen`), until SIGTERM or
//! SIGINT; then it says Goodbye and exits 0.
//!
//! Why one process per link rather than a step of `seed`: a tail has no end; the session resumes from the
//! mirror's durable position on every (re)connect, so stopping and restarting `ship` loses and repeats nothing.
//! Partitions are listed again while running (every second and on the watcher's notice): a topic created later
//! is shipped from its first byte, a deleted one is dropped (`shipper::tail::rediscover`).
//!
//! The link's record (the source host's catalog, `segmirror link`; `cli::link_gate`) gates it: paused, the session
//! ends and nothing ships until resumed; promoted or deleted, it stops (exit 0, one line naming the state).
//! Without --topics the record's topics regex selects the partitions and is re-read while running: newly selected
//! topics are shipped, deselected ones stop (their mirrors keep what they have).
//!
//! Exit status: 0 after a signal or once the link record is promoted or deleted, 2 on usage errors (flags, PEM
//! files, a log dir without a cluster id) and on this side's own failures (a source file that cannot be read or
//! diverged). With `--cluster`, a `--source-bootstrap` that is another node is a usage error; one that does not
//! answer yet is not (a shipper restarted beside a broker still down waits for it, leading and shipping nothing
//! until the broker answers as the log dir's node).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use segmirror_catalog::Link;
use segmirror_shipper::link_meta::{announce_direct, MetaConfig, MetaReader, ALL_GROUPS, DEFAULT_META_INTERVAL};
use segmirror_shipper::source::bound_hw::{CheckpointHighWatermarks, HighWatermarkSource, UptoPolicy};
use segmirror_shipper::source::discover::{discover, log_dir_cluster_id, TopicFilter, ALL_TOPICS};
use segmirror_shipper::source::leadership::{
    check_node, node_id_of_log_dir, MetadataLeadership, NodeCheck, LEADERSHIP_INTERVAL,
};
use segmirror_shipper::source::list_offsets::{ListOffsetsConfig, ListOffsetsHighWatermarks, REQUEST_TIMEOUT};
use segmirror_shipper::tail::{LiveTopicFilter, Rediscovery, TailFeed, TailFeedConfig, TailPartition};
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::PartitionRef;
use segmirror_transport::direct::session::{SessionConfig, ShipperSession};
use segmirror_transport::direct::Role;

use crate::cli::link::{link_config, shutdown_on_signal, LinkArgs};
use crate::cli::link_gate::{run_link_gated, shipper_topics, LinkRecord, OnLink, Side};
use crate::cli::runtime::Runtime;
use crate::cli::serve::admin::{CatalogAdmin, LinkAdmin, ShipperAdmin};
use crate::cli::serve::figures::{LinkMeter, ShipperMeter, Snapshot};
use crate::cli::serve::{self, App, MetricsArgs};

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
    /// Learn the high watermarks from this source broker (HOST:PORT of a PLAINTEXT listener) with ListOffsets, a
    /// round trip behind it, instead of replication-offset-checkpoint (seconds behind). One broker: partitions it
    /// does not lead keep no bound (nothing of them ships).
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

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let record = LinkRecord::for_shipper(args.catalog.clone(), &args.link.link)?;
    let topics = shipper_topics("ship", args.topics.as_deref(), record.as_ref(), ALL_TOPICS)?;
    let filter = TopicFilter::new(&topics).with_context(|| format!("topics {topics:?}"))?;
    // Without --topics, the link record's regex is followed while running.
    let live_filter: Option<LiveTopicFilter> = match (&record, &args.topics) {
        (Some(_), None) => Some(Arc::new(std::sync::RwLock::new(filter.clone()))),
        _ => None,
    };
    let found = discover(&args.log_dirs, &filter);
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
            let first = args.log_dirs.first().context("no --log-dir")?;
            let id = log_dir_cluster_id(first).map_err(|e| anyhow::anyhow!("{e}: nothing to ship from"))?;
            eprintln!(
                "segmirror ship: no partition in {} matches --topics {:?} yet; waiting for one",
                args.log_dirs
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
        args.link.link,
        partitions.len()
    );
    let high_watermarks: Arc<dyn HighWatermarkSource> = match (&args.source_bootstrap, args.upto) {
        (Some(bootstrap), Upto::HighWatermark) => {
            // The partitions known now; the source asks for any other the feed looks up (topics created later).
            let asked = partitions
                .iter()
                .map(|p| (p.partition.topic.clone(), p.partition.partition))
                .collect();
            let handle = runtime.block_on(async { tokio::runtime::Handle::current() })?;
            eprintln!("segmirror ship: high watermarks from {bootstrap} (ListOffsets)");
            Arc::new(ListOffsetsHighWatermarks::spawn(
                &handle,
                bootstrap.clone(),
                asked,
                ListOffsetsConfig::default(),
            ))
        }
        (bootstrap, upto) => {
            if let (Some(bootstrap), Upto::LogEnd) = (bootstrap, upto) {
                eprintln!("segmirror ship: warning: --source-bootstrap {bootstrap} is not used with --upto log-end");
            }
            Arc::new(CheckpointHighWatermarks::new(args.log_dirs.clone()))
        }
    };
    let mut feed_config = TailFeedConfig::new(high_watermarks.clone());
    let node_id = match (&args.source_bootstrap, args.cluster) {
        (Some(bootstrap), true) => {
            let mut ids = Vec::new();
            for dir in &args.log_dirs {
                ids.push(
                    node_id_of_log_dir(dir).with_context(|| format!("--cluster: the node id of {}", dir.display()))?,
                );
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
            eprintln!("segmirror ship: node {node_id} of the source cluster: shipping the partitions it leads ({bootstrap}, Metadata)");
            feed_config.leadership = Some(Arc::new(MetadataLeadership::spawn(
                &handle,
                bootstrap.clone(),
                node_id,
                LEADERSHIP_INTERVAL,
                ListOffsetsConfig::default(),
            )));
            Some(node_id)
        }
        _ => None,
    };
    feed_config.progress_interval = Some(segmirror_transport::direct::handshake::PROGRESS_INTERVAL);
    feed_config.upto = match args.upto {
        Upto::HighWatermark => UptoPolicy::HighWatermark,
        Upto::LogEnd => UptoPolicy::LogEnd,
    };
    let link_meter = Arc::new(LinkMeter::default());
    let shipper_meter = Arc::new(ShipperMeter::new(
        &args.link.link,
        partitions
            .iter()
            .map(|p| (p.partition.topic.clone(), p.partition.partition)),
    ));
    let filter_for_meta = filter.clone();
    let mut rediscovery = Rediscovery::new(args.log_dirs.clone(), filter, cluster_id.clone());
    rediscovery.live_filter = live_filter.clone();
    let feed = TailFeed::new(partitions, feed_config).with_rediscovery(rediscovery);
    let followed_meter = link_meter.clone();
    let on_link: OnLink = Arc::new(move |link: &Link| {
        followed_meter.set_paused(link.state == segmirror_catalog::LinkState::Paused);
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
    });
    let session_config = SessionConfig {
        max_bandwidth: args.max_bandwidth,
        observer: args
            .metrics
            .metrics_addr
            .is_some()
            .then(|| shipper_meter.clone() as Arc<dyn segmirror_transport::direct::session::SessionObserver>),
        ..SessionConfig::default()
    };
    let mut session = ShipperSession::new(feed, session_config)?;
    // The link's metadata (feature bit 8): one shipper per broker would each see only the `__consumer_offsets`
    // partitions its broker holds, so with --cluster none is sent.
    let meta = match args.cluster {
        true => None,
        false => MetaConfig::find(
            &args.log_dirs,
            args.metadata_log_dir.as_deref(),
            &args.groups,
            filter_for_meta,
            &args.link.link,
        )?,
    };
    let meta_reader = match meta {
        Some(mut meta) => {
            meta.interval = Duration::from_millis(args.meta_interval_ms);
            eprintln!(
                "segmirror ship: link metadata from {} and groups {:?} every {} ms",
                meta.metadata_dir.display(),
                args.groups,
                args.meta_interval_ms
            );
            let (tx, rx) = tokio::sync::watch::channel(None);
            session = session.with_link_meta(rx);
            Some((MetaReader::new(meta)?, tx))
        }
        None => {
            if !args.cluster {
                eprintln!(
                    "segmirror ship: warning: no {} in the log dirs: the link carries no topic metadata or consumer \
                     offsets (give --metadata-log-dir)",
                    segment_format::metadata_log::METADATA_DIR
                );
            }
            None
        }
    };
    // Feature bit 9: a recorded link names its id to the applier, which refuses another link of the same name.
    let link_id = record.as_ref().map(|(_, l)| l.id.clone());
    let link = args.link;
    let (gate, _) = tokio::sync::watch::channel(false);
    let gate = Arc::new(gate);
    runtime.block_on(async move {
        let shutdown = shutdown_on_signal()?;
        if let Some(addr) = &args.metrics.metrics_addr {
            let (name, meter) = (link.link.clone(), link_meter.clone());
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
            // A recorded link is paused through its record (the gate below reads it); an unmanaged one has no
            // record to pause.
            let admin: Arc<dyn LinkAdmin> = match &record {
                Some((record, _)) => Arc::new(CatalogAdmin {
                    catalog_path: record.catalog.clone(),
                    served: link.link.clone(),
                    gate: gate.clone(),
                    meter: link_meter.clone(),
                    pausable: true,
                }),
                None => Arc::new(ShipperAdmin {
                    link: link.link.clone(),
                    topics: topics.clone(),
                    gate: gate.clone(),
                    meter: link_meter.clone(),
                    pausable: false,
                }),
            };
            let app = App {
                snapshot: Arc::new(snapshot),
                admin,
            };
            serve::start(addr, app, shutdown.clone()).await?;
        }
        if let Some((reader, tx)) = meta_reader {
            tokio::spawn(announce_direct(reader, tx));
        }
        let mut handshake = match node_id {
            Some(node_id) => HandshakeConfig::cluster_shipper(link.link.clone(), cluster_id, node_id),
            None => HandshakeConfig::new(Role::Shipper, link.link.clone(), Some(cluster_id)),
        };
        handshake.link_id = link_id;
        let config = link_config(handshake, None, "ship", Some(link_meter.clone()));
        let gate = record.map(|(record, _)| (record, Side::Shipper, on_link));
        run_link_gated(&link, config, session, shutdown, gate, "ship").await
    })??;
    eprintln!("segmirror ship: link stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
