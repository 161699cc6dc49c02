//! The continuous shipper through a bucket (`segmirror ship --store URL`), for sites where neither side can reach
//! the other. Runs rounds of `seed` (the shipper's bucket follower): on a change of the log dirs, every upload
//! interval or once the active segments grew by the upload bytes, whichever comes first, each grown active
//! segment's new bytes go up as one chunk object and a new manifest version; a rolled segment gets its sealed
//! version. Until the shutdown token is cancelled, or another shipper takes a partition's lease (fenced).
//!
//! The link's record (the source host's catalog; [`crate::link_gate`]) gates it: paused, nothing is uploaded until
//! resumed; promoted or deleted, it stops ([`crate::link_gate::ClosedLink`]). Without explicit topics the record's
//! topics regex selects, re-read while running (a change starts a new run of rounds with the new filter).
//!
//! In two parts, as [`super::direct::DirectShipService`]: [`BucketShipService::prepare`] (blocking: the store, the
//! seed settings, the bucket's link identity, the link's metadata) and [`BucketShipService::serve`] (async).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use segment_format::verify::VerifyOptions;
use segmirror_shipper::bucket::follow::{self, RoundStats, StoreTailConfig, StoreTailEnd};
use segmirror_shipper::bucket::seed::committed::CommittedOnly;
use segmirror_shipper::bucket::seed::{PartitionStatus, SeedConfig, TopicFilter, ALL_TOPICS};
use segmirror_shipper::link_meta::MetaConfig;
use segmirror_shipper::source::bound_hw::UptoPolicy;
use segmirror_shipper::source::fetch_hw::{FetchHighWatermarks, FetchHwConfig};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{S3Options, Store, StoreUrl};
use tokio_util::sync::CancellationToken;

use crate::admin_port::admin::ShipperAdmin;
use crate::admin_port::figures::{LinkMeter, RoundMeter, RoundOutcome, Snapshot};
use crate::admin_port::{self, App};
use crate::link_gate::{
    claim_bucket, refuse_closed, shipper_topics, until_active, watch_until, LinkRecord, OnLink, Side,
};
use crate::runtime::Runtime;

/// What a bucket shipper needs to know (the command line's `segmirror ship --store` flags).
#[derive(Debug, Clone)]
pub struct BucketShipConfig {
    /// The broker log dirs to tail.
    pub log_dirs: Vec<PathBuf>,
    /// Where to ship: a local folder or s3://bucket[/prefix].
    pub store: String,
    /// Topics to ship; `None`: the link record's regex, else every topic.
    pub topics: Option<String>,
    /// The source host's catalog holding the link's record.
    pub catalog: Option<PathBuf>,
    /// How far to ship: committed records only (needs `source_bootstrap`), or every complete batch.
    pub upto: UptoPolicy,
    pub source_bootstrap: Option<String>,
    /// The mirror link's name (the first key component under the prefix).
    pub link: String,
    /// Key prefix inside the store.
    pub prefix: String,
    pub s3: S3Options,
    pub upload_interval_ms: u64,
    pub upload_bytes: u64,
    /// Who is shipping, recorded in leases and manifests (default: the seed's).
    pub shipper_id: Option<String>,
    pub metadata_log_dir: Option<PathBuf>,
    /// Consumer groups whose committed offsets the link carries (a regular expression).
    pub groups: String,
    pub meta_interval_ms: u64,
    /// Where to serve `/metrics` and the admin API, if anywhere.
    pub metrics_addr: Option<String>,
}

/// A bucket shipper, prepared and ready to serve.
pub struct BucketShipService {
    config: BucketShipConfig,
    record: Option<(LinkRecord, segmirror_catalog::Link)>,
    store: Store,
    tail: StoreTailConfig,
}

impl BucketShipService {
    /// Opens (or creates) the store, builds the seed settings, claims the bucket for a recorded link and finds the
    /// link's metadata; blocking.
    pub fn prepare(config: BucketShipConfig, runtime: &Runtime) -> anyhow::Result<BucketShipService> {
        let bootstrap = committed_bootstrap(&config)?;
        let record = LinkRecord::for_shipper(config.catalog.clone(), &config.link)?;
        let topics = shipper_topics("ship", config.topics.as_deref(), record.as_ref(), ALL_TOPICS)?;
        // A local folder that does not exist yet is created: the shipper writes the first objects.
        let store = Store::open(&StoreUrl::parse(&config.store)?, &config.s3)?;
        let mut seed = SeedConfig::new(config.log_dirs.clone(), &config.link)?;
        seed.prefix = KeyPrefix::new(&config.prefix)?;
        seed.topics = TopicFilter::new(&topics)?;
        seed.verify = VerifyOptions::default();
        if let Some(id) = &config.shipper_id {
            seed.shipper_id = id.clone();
        }
        if let Some(bootstrap) = bootstrap {
            // The direct tail's high-watermark source: partitions are asked for from their first lookup on.
            let handle = runtime.block_on(async { tokio::runtime::Handle::current() })?;
            eprintln!("segmirror ship: committed records only: high watermarks from {bootstrap} (long-polling Fetch)");
            let source = FetchHighWatermarks::spawn(&handle, bootstrap, Vec::new(), FetchHwConfig::default());
            seed.committed_only = Some(CommittedOnly::new(Arc::new(source)));
        }
        seed.validate()?;
        if let Some((_, link)) = &record {
            runtime.block_on(claim_bucket("ship", &store, &seed.prefix, link))??;
        }
        let tail = tail_config(&config, seed)?;
        eprintln!(
            "segmirror ship: shipping to {} (link {:?}) every {} ms or {} bytes, until SIGTERM/SIGINT",
            config.store, config.link, config.upload_interval_ms, config.upload_bytes
        );
        Ok(BucketShipService {
            config,
            record,
            store,
            tail,
        })
    }

    /// Runs rounds until `shutdown`, a closed link ([`crate::link_gate::ClosedLink`]) or a fence; how it ended,
    /// with the rounds' totals.
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<(StoreTailEnd, RoundStats)> {
        let BucketShipService {
            config,
            record,
            store,
            tail: mut config_tail,
        } = self;
        let meter = Arc::new(RoundMeter::new(&config.link, true));
        if let Some(addr) = &config.metrics_addr {
            start_metrics(&config, &config_tail, &meter, addr, shutdown.clone()).await?;
        }
        let mut on_round = round_reporter(meter);
        let Some((record, _)) = record else {
            let done = follow::run(&store, &config_tail, shutdown.cancelled(), &mut on_round).await?;
            return anyhow::Ok(done);
        };
        let explicit_topics = config.topics.is_some();
        let args = &config;
        let config = &mut config_tail;
        // Gated by the link record: each active period is one run of the store tail; a pause (or a new topics
        // regex, when --topics was not given) ends it, and the next run resumes from the bucket's manifests.
        let mut total = follow::RoundStats::default();
        let latest: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let seen = latest.clone();
        let on_link: OnLink = Arc::new(move |link: &segmirror_catalog::Link| {
            if let Ok(mut slot) = seen.lock() {
                *slot = Some(link.topics_regex.clone());
            }
        });
        loop {
            if !until_active(&record, Side::Shipper, "ship", &on_link, &shutdown).await? {
                return Ok((StoreTailEnd::Stopped, total));
            }
            if !explicit_topics {
                let wanted = latest.lock().ok().and_then(|l| l.clone());
                if let Some(wanted) = wanted.filter(|w| w != config.seed.topics.as_str()) {
                    match TopicFilter::new(&wanted) {
                        Ok(filter) => {
                            eprintln!("segmirror ship: link {:?}: topics regex now {wanted:?}", args.link);
                            config.seed.topics = filter;
                        }
                        Err(e) => eprintln!(
                            "segmirror ship: warning: link {:?}'s topics regex {wanted:?} does not compile ({e}); \
                             keeping {:?}",
                            args.link,
                            config.seed.topics.as_str()
                        ),
                    }
                }
            }
            let period = shutdown.child_token();
            let following = config.seed.topics.as_str().to_string();
            let watcher = tokio::spawn(watch_until(
                record.clone(),
                on_link.clone(),
                period.clone(),
                move |link| !explicit_topics && link.topics_regex != following,
            ));
            let (end, stats) = follow::run(&store, config, period.cancelled(), &mut on_round).await?;
            period.cancel();
            let stopped_by = watcher.await.ok().flatten();
            total.rounds += stats.rounds;
            total.segments_shipped += stats.segments_shipped;
            total.bytes_uploaded += stats.bytes_uploaded;
            if matches!(end, StoreTailEnd::Fenced(_)) || shutdown.is_cancelled() {
                return Ok((end, total));
            }
            if let Some(link) = stopped_by {
                refuse_closed(&link, Side::Shipper)?;
            }
        }
    }
}

/// The source bootstrap to ask for high watermarks when committed records only are shipped; refused without one.
fn committed_bootstrap(config: &BucketShipConfig) -> anyhow::Result<Option<String>> {
    Ok(match (config.upto, &config.source_bootstrap) {
        (UptoPolicy::HighWatermark, Some(bootstrap)) => Some(bootstrap.clone()),
        (UptoPolicy::HighWatermark, None) => bail!(
            "ship --store --upto high-watermark (the default) asks the source broker for its high watermarks: give \
             --source-bootstrap HOST:PORT, or --upto log-end to ship every complete batch (records above the high \
             watermark may then reach the mirror and later be truncated at the source)"
        ),
        (UptoPolicy::LogEnd, Some(bootstrap)) => {
            eprintln!("segmirror ship: warning: --source-bootstrap {bootstrap} is not used with --upto log-end");
            None
        }
        (UptoPolicy::LogEnd, None) => None,
    })
}

/// The follower's settings: the seed's, the link's metadata, the upload triggers.
fn tail_config(args: &BucketShipConfig, seed: SeedConfig) -> anyhow::Result<StoreTailConfig> {
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
    Ok(config)
}

/// Each round's report: counted in `meter`, each problem said once (again when it changes), shipped versions logged.
fn round_reporter(meter: Arc<RoundMeter>) -> impl FnMut(&segmirror_shipper::bucket::seed::SeedReport) {
    let mut reported: std::collections::BTreeMap<String, String> = Default::default();
    move |report: &segmirror_shipper::bucket::seed::SeedReport| {
        for e in &report.log_dir_errors {
            if reported.insert(format!("log dir {e}"), String::new()).is_none() {
                eprintln!("segmirror ship: error: {e}");
            }
        }
        for p in &report.partitions {
            meter.round(
                &p.topic,
                p.partition,
                RoundOutcome {
                    through: p.shipped_through,
                    bytes: p.bytes_uploaded,
                    failed: !matches!(p.status, PartitionStatus::Complete),
                },
            );
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
    }
}

/// `/metrics` and the admin API (paused through the link record, `segmirror link pause`, not through this API yet).
async fn start_metrics(
    args: &BucketShipConfig,
    config: &StoreTailConfig,
    meter: &Arc<RoundMeter>,
    addr: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (gate, _) = tokio::sync::watch::channel(false);
    let link_meter = Arc::new(LinkMeter::default());
    let (rows, link) = (meter.clone(), args.link.clone());
    let snapshot = move || Snapshot {
        links: vec![link_meter.row(&link, "active", &["active"], rows.partitions())],
        partitions: rows.rows(),
    };
    let admin = ShipperAdmin {
        link: args.link.clone(),
        topics: config.seed.topics.as_str().to_string(),
        gate: Arc::new(gate),
        meter: Arc::new(LinkMeter::default()),
        pausable: false,
    };
    let app = App {
        snapshot: Arc::new(snapshot),
        admin: Arc::new(admin),
    };
    admin_port::start(addr, app, shutdown).await?;
    Ok(())
}
