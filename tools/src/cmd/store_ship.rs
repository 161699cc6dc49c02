//! `segmirror ship --store URL`: the continuous shipper through a bucket, for sites where neither side can reach
//! the other. Runs rounds of `seed` (`segmirror_shipper::store_tail`): on a change of the log dirs, every
//! `--upload-interval-ms` or once the active segments grew by `--upload-bytes`, whichever comes first, each grown
//! active segment's new bytes go up as one chunk object and a new manifest version; a rolled segment gets its
//! sealed version. Until SIGTERM/SIGINT, then exit 0.
//!
//! Why a subcommand of its own behind `ship --store` (the routing is in `cli::config`): the direct `ship`'s
//! `--connect`/`--listen` and TLS flags mean nothing here and the store flags nothing there; one `ship` name keeps
//! the operator's mental model (ship = keep sending), two argument sets keep clap the one place that checks them.
//!
//! The link's record (the source host's catalog, `segmirror link`; `cli::link_gate`) gates it: paused, nothing is
//! uploaded until resumed; promoted or deleted, it stops (exit 0, one line naming the state). Without --topics the
//! record's topics regex selects, re-read while running (a change starts a new run of rounds with the new filter).
//!
//! Exit status: 0 after a signal or once the link record is promoted or deleted; 2 on usage errors, when another
//! shipper took over a partition (fenced: this one stops rather than fight over the bucket) or when the log dirs
//! cannot be watched.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use segment_format::verify::VerifyOptions;
use segmirror_shipper::link_meta::{MetaConfig, ALL_GROUPS, DEFAULT_META_INTERVAL};
use segmirror_shipper::seed::committed::CommittedOnly;
use segmirror_shipper::seed::{PartitionStatus, SeedConfig, TopicFilter, ALL_TOPICS};
use segmirror_shipper::source::list_offsets::{ListOffsetsConfig, ListOffsetsHighWatermarks};
use segmirror_shipper::store_tail::{
    self, StoreTailConfig, StoreTailEnd, DEFAULT_UPLOAD_BYTES, DEFAULT_UPLOAD_INTERVAL,
};
use segmirror_transport::manifest::KeyPrefix;

use crate::cli::link_gate::{
    claim_bucket, refuse_closed, shipper_topics, until_active, watch_until, LinkRecord, OnLink, Side,
};
use crate::cli::metrics::MetricsArgs;
use crate::cli::runtime::Runtime;
use crate::cli::serve::admin::ShipperAdmin;
use crate::cli::serve::figures::{LinkMeter, RoundMeter, RoundOutcome, Snapshot};
use crate::cli::serve::{self, App};
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
    /// Learn the high watermarks from this source broker (HOST:PORT of a PLAINTEXT listener) with ListOffsets, as
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

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let bootstrap = match (args.upto, &args.source_bootstrap) {
        (Upto::HighWatermark, Some(bootstrap)) => Some(bootstrap.clone()),
        (Upto::HighWatermark, None) => bail!(
            "ship --store --upto high-watermark (the default) asks the source broker for its high watermarks: give \
             --source-bootstrap HOST:PORT, or --upto log-end to ship every complete batch (records above the high \
             watermark may then reach the mirror and later be truncated at the source)"
        ),
        (Upto::LogEnd, Some(bootstrap)) => {
            eprintln!("segmirror ship: warning: --source-bootstrap {bootstrap} is not used with --upto log-end");
            None
        }
        (Upto::LogEnd, None) => None,
    };
    let record = LinkRecord::for_shipper(args.catalog.clone(), &args.link)?;
    let topics = shipper_topics("ship", args.topics.as_deref(), record.as_ref(), ALL_TOPICS)?;
    let store = args.s3.open_or_create(&args.store)?;
    let mut seed = SeedConfig::new(args.log_dirs.clone(), &args.link)?;
    seed.prefix = KeyPrefix::new(&args.prefix)?;
    seed.topics = TopicFilter::new(&topics)?;
    seed.verify = VerifyOptions::default();
    if let Some(id) = &args.shipper_id {
        seed.shipper_id = id.clone();
    }
    if let Some(bootstrap) = bootstrap {
        // The direct tail's high-watermark source: partitions are asked for from their first lookup on.
        let handle = runtime.block_on(async { tokio::runtime::Handle::current() })?;
        eprintln!("segmirror ship: committed records only: high watermarks from {bootstrap} (ListOffsets)");
        let source = ListOffsetsHighWatermarks::spawn(&handle, bootstrap, Vec::new(), ListOffsetsConfig::default());
        seed.committed_only = Some(CommittedOnly::new(Arc::new(source)));
    }
    seed.validate()?;
    if let Some((_, link)) = &record {
        runtime.block_on(claim_bucket("ship", &store, &seed.prefix, link))??;
    }

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
    eprintln!(
        "segmirror ship: shipping to {} (link {:?}) every {} ms or {} bytes, until SIGTERM/SIGINT",
        args.store, args.link, args.upload_interval_ms, args.upload_bytes
    );
    let mut reported: std::collections::BTreeMap<String, String> = Default::default();
    let meter = Arc::new(RoundMeter::new(&args.link, true));
    let mut on_round = |report: &segmirror_shipper::seed::SeedReport| {
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
    };
    let explicit_topics = args.topics.is_some();
    let (end, stats) = runtime.block_on(async {
        let shutdown = crate::cli::link::shutdown_on_signal()?;
        if let Some(addr) = &args.metrics.metrics_addr {
            let (gate, _) = tokio::sync::watch::channel(false);
            let link_meter = Arc::new(LinkMeter::default());
            let (rows, link) = (meter.clone(), args.link.clone());
            let snapshot = move || Snapshot {
                links: vec![link_meter.row(&link, "active", &["active"], rows.partitions())],
                partitions: rows.rows(),
            };
            // Paused through the link record (`segmirror link pause`), not through this API yet.
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
            serve::start(addr, app, shutdown.clone()).await?;
        }
        let Some((record, _)) = record else {
            let done = store_tail::run(&store, &config, shutdown.cancelled(), &mut on_round).await?;
            return anyhow::Ok(done);
        };
        // Gated by the link record: each active period is one run of the store tail; a pause (or a new topics
        // regex, when --topics was not given) ends it, and the next run resumes from the bucket's manifests.
        let mut total = store_tail::RoundStats::default();
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
            let (end, stats) = store_tail::run(&store, &config, period.cancelled(), &mut on_round).await?;
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
