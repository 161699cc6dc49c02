//! The bucket applier (`segmirror apply`): installs what a shipper put in an object store into a mirror root, byte
//! for byte, recording it in the catalog; once ([`BucketApplyService::run_once`]: reruns install only what is new
//! and finish an interrupted run) or following the store until the shutdown token
//! ([`BucketApplyService::follow`], which holds the mirror for the whole run and never writes to the store, so
//! several followers, each with its own mirror and catalog, can follow one store).
//!
//! Why the service opens the store and the catalog: a mistyped store folder must fail rather than be created and
//! reported as applied, and the catalog is the mirror root's own (`crate::catalog`); both are opened once here and
//! handed to the applier.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use segmirror_applier::bucket::follow::{follow, FollowConfig, FollowStats};
use segmirror_applier::report::LinkMetaOutcome;
use segmirror_applier::{ApplyConfig, ApplyReport, PartitionOutcome, PartitionReport, Progress};
use segmirror_catalog::Catalog;
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{S3Options, Store, StoreUrl};
use tokio_util::sync::CancellationToken;

use crate::admin_port::admin::CatalogAdmin;
use crate::admin_port::figures::{add_bucket_lag, LinkMeter, RoundMeter, RoundOutcome, Snapshot};
use crate::admin_port::{self, App};
use crate::bucket_ends::CachedEnds;
use crate::catalog::open_mirror_catalog;
use crate::link_gate::{ClosedLink, Side};
use crate::runtime::Runtime;

/// What a bucket applier needs to know (the command line's `segmirror apply` store flags).
#[derive(Debug, Clone)]
pub struct BucketApplyConfig {
    /// Where the shipper wrote: a local folder or s3://bucket[/prefix].
    pub store: String,
    /// The mirror root.
    pub mirror: PathBuf,
    /// The link to apply; optional when the store holds one link.
    pub link: Option<String>,
    /// Key prefix inside the store.
    pub prefix: String,
    /// The catalog; default: the mirror root's.
    pub catalog: Option<PathBuf>,
    pub s3: S3Options,
    /// Also decompress every batch and check every record before installing.
    pub deep: bool,
    /// Partitions installed at once.
    pub parallel: usize,
    /// Wait for another apply on the same mirror instead of failing.
    pub wait: bool,
    /// Following: milliseconds between two looks at the store.
    pub poll_interval_ms: u64,
    /// Following: where to serve `/metrics` and the admin API, if anywhere.
    pub metrics_addr: Option<String>,
}

/// A bucket applier with its store and catalog open.
pub struct BucketApplyService {
    config: BucketApplyConfig,
    apply: ApplyConfig,
    catalog: Catalog,
    catalog_path: PathBuf,
}

impl BucketApplyService {
    /// Opens the store (which must exist) and the mirror's catalog.
    pub fn open(config: BucketApplyConfig) -> anyhow::Result<BucketApplyService> {
        let url = StoreUrl::parse(&config.store)?;
        // A mistyped folder must fail, not be created and reported as applied.
        let store = Store::open_existing(&url, &config.s3)?;
        let (catalog_path, catalog) = open_mirror_catalog(config.catalog.clone(), &config.mirror, false)?;
        let mut apply = ApplyConfig::new(store, url.to_string(), &config.mirror)
            .with_prefix(KeyPrefix::new(&config.prefix)?)
            .with_deep_validation(config.deep)
            .with_wait_for_lock(config.wait)
            .with_parallel_partitions(config.parallel);
        if let Some(link) = &config.link {
            apply = apply.with_link(link);
        }
        Ok(BucketApplyService {
            config,
            apply,
            catalog,
            catalog_path,
        })
    }

    /// The catalog's path (for the report).
    pub fn catalog_path(&self) -> &std::path::Path {
        &self.catalog_path
    }

    /// One run: installs what is new and finishes an interrupted run; `progress` hears of the plan and each segment.
    pub fn run_once(self, runtime: &Runtime, progress: &dyn Progress) -> anyhow::Result<ApplyReport> {
        Ok(runtime.block_on(segmirror_applier::apply(&self.apply, self.catalog, progress))??)
    }

    /// Follows the store until `shutdown` (or the link is promoted or deleted: [`ClosedLink`]): one line per run that
    /// installed something, a refusal or failure once per partition until it changes.
    pub async fn follow(self, shutdown: CancellationToken) -> anyhow::Result<FollowStats> {
        let BucketApplyService {
            config,
            apply,
            catalog,
            catalog_path,
        } = self;
        let mut follow_config = FollowConfig::new(apply);
        follow_config.poll_interval = Duration::from_millis(config.poll_interval_ms);
        let mirror = config.mirror.display().to_string();
        eprintln!(
            "segmirror apply: following {} into {mirror} (every {} ms) until SIGTERM/SIGINT",
            config.store, config.poll_interval_ms
        );
        let meter = Arc::new(RoundMeter::new(config.link.as_deref().unwrap_or("?"), false));
        if let Some(addr) = &config.metrics_addr {
            start_metrics(&config, &catalog_path, &meter, addr, shutdown.clone()).await?;
        }
        let stats = follow(
            &follow_config,
            catalog,
            async move { shutdown.cancelled().await },
            round_reporter(meter),
        )
        .await;
        match stats {
            Ok(stats) => anyhow::Ok(stats),
            // Promoted or deleted: the link's end (the command line says so and exits 0).
            Err(segmirror_applier::Error::LinkClosed { link, state }) => Err(ClosedLink {
                name: link,
                state: state.parse().unwrap_or(segmirror_catalog::LinkState::Deleted),
                side: Side::Applier,
            }
            .into()),
            Err(e) => Err(e.into()),
        }
    }
}

/// `/metrics` and the admin API of a follower. Pausing needs no gate here: every round reads the link's state from
/// the catalog and skips a paused link (`applier::apply`).
async fn start_metrics(
    config: &BucketApplyConfig,
    catalog_path: &std::path::Path,
    meter: &Arc<RoundMeter>,
    addr: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (gate, _) = tokio::sync::watch::channel(false);
    let link_meter = Arc::new(LinkMeter::default());
    let (rows, path) = (meter.clone(), catalog_path.to_path_buf());
    let bucket = CachedEnds::new(
        Store::open_existing(&StoreUrl::parse(&config.store)?, &config.s3)?,
        KeyPrefix::new(&config.prefix)?,
        tokio::runtime::Handle::current(),
    );
    // The first read of the bucket starts now, so the first scrape finds figures (see `CachedEnds`).
    if let Some(link) = &config.link {
        bucket.warm(link);
    }
    let snapshot = move || {
        let link = rows.link();
        match Catalog::open(&path).and_then(|c| c.status()) {
            Ok(status) => {
                let mut figures = follower_snapshot(&status, &link, &link_meter, &rows);
                // Before the first round, a follower without --link does not know its link ("?").
                let ends = (link != "?").then(|| bucket.get(&link)).flatten();
                if let Some(ends) = ends {
                    add_bucket_lag(&link, &mut figures.partitions, &ends, segment_format::now_ms());
                }
                figures
            }
            Err(e) => {
                tracing::warn!(catalog = %path.display(), error = %e, "metrics: the catalog cannot be read");
                Snapshot::default()
            }
        }
    };
    let admin = CatalogAdmin {
        catalog_path: catalog_path.to_path_buf(),
        served: meter.link(),
        gate: Arc::new(gate),
        meter: Arc::new(LinkMeter::default()),
        pausable: true,
    };
    let app = App {
        snapshot: Arc::new(snapshot),
        admin: Arc::new(admin),
    };
    admin_port::start(addr, app, shutdown).await?;
    Ok(())
}

/// The figures of a bucket follower: per partition of its link the catalog's installed end, with the bytes and
/// errors of this process's rounds (the lag against the bucket's newest versions is added by `add_bucket_lag`).
fn follower_snapshot(
    status: &segmirror_catalog::Status,
    link: &str,
    link_meter: &LinkMeter,
    rounds: &RoundMeter,
) -> Snapshot {
    let Some(recorded) = status.links.iter().find(|l| l.name == link) else {
        return Snapshot {
            links: Vec::new(),
            partitions: rounds.rows(),
        };
    };
    let state = recorded.state.as_str();
    let mut partitions = rounds.rows();
    // Where each counted partition's row is: a lookup per recorded partition, not a scan (10,000 partitions).
    let at: std::collections::HashMap<(String, i32), usize> = partitions
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.topic.clone(), r.partition), i))
        .collect();
    for p in &recorded.partitions {
        match at
            .get(&(p.topic.clone(), p.partition))
            .and_then(|i| partitions.get_mut(*i))
        {
            Some(row) => row.installed = p.installed_end_offset.max(row.installed),
            None => {
                let row = RoundMeter::new(link, false);
                row.round(
                    &p.topic,
                    p.partition,
                    RoundOutcome {
                        through: p.installed_end_offset,
                        bytes: 0,
                        failed: false,
                    },
                );
                partitions.extend(row.rows());
            }
        }
    }
    Snapshot {
        links: vec![link_meter.row(
            link,
            state,
            &["active", "paused", "promoted", "deleted"],
            partitions.len(),
        )],
        partitions,
    }
}

/// Each run's report: counted in `meter`, installs said, each problem said once (again when it changes).
fn round_reporter(meter: Arc<RoundMeter>) -> impl FnMut(&ApplyReport) {
    let mut last_problem: std::collections::BTreeMap<String, String> = Default::default();
    move |report| {
        if let Some(link) = &report.link {
            meter.set_link(link);
        }
        for p in &report.partitions {
            meter.round(
                &p.topic,
                p.partition,
                RoundOutcome {
                    through: p.installed.iter().map(|i| i.next_offset).max(),
                    bytes: p.installed.iter().map(|i| i.log_bytes).sum(),
                    failed: matches!(
                        p.outcome,
                        PartitionOutcome::Refused(_) | PartitionOutcome::Failed { .. }
                    ),
                },
            );
        }
        for note in &report.notes {
            if last_problem.insert(format!("note {note}"), String::new()).is_none() {
                eprintln!("segmirror apply: {note}");
            }
        }
        for k in &report.ignored_keys {
            if last_problem
                .insert(format!("key {:?}", k.key), k.reason.clone())
                .is_none()
            {
                eprintln!("segmirror apply: warning: ignored {:?}: {}", k.key, k.reason);
            }
        }
        match &report.link_meta {
            Some(LinkMetaOutcome::Recorded {
                version,
                topics,
                offsets,
            }) => {
                eprintln!(
                    "segmirror apply: link metadata version {version} recorded: {topics} topic(s), {offsets} \
                     group offset(s)"
                );
                last_problem.remove("link metadata");
            }
            Some(LinkMetaOutcome::Refused { reason })
                if last_problem.insert("link metadata".into(), reason.clone()).as_ref() != Some(reason) =>
            {
                eprintln!("segmirror apply: link metadata refused: {reason}");
            }
            _ => {}
        }
        for p in &report.partitions {
            if !p.installed.is_empty() {
                let through = p.installed.iter().map(|i| i.next_offset).max().unwrap_or_default();
                eprintln!(
                    "segmirror apply: {}: installed {} version(s), through offset {through}",
                    p.name(),
                    p.installed.len()
                );
            }
            match (detail(p), &p.outcome) {
                (Some(line), PartitionOutcome::Refused(_) | PartitionOutcome::Failed { .. }) => {
                    if last_problem.get(&p.name()) != Some(&line) {
                        eprintln!("segmirror apply: {}: {line}", p.name());
                        last_problem.insert(p.name(), line);
                    }
                }
                _ => {
                    last_problem.remove(&p.name());
                }
            }
        }
    }
}

/// The line under a partition's row, when there is something to explain.
pub fn detail(p: &PartitionReport) -> Option<String> {
    match &p.outcome {
        PartitionOutcome::Complete => None,
        PartitionOutcome::Waiting { reason, .. } => Some(format!("waiting: {reason}")),
        PartitionOutcome::Refused(r) => Some(format!(
            "refused segment {} ({}); nothing from there on was installed: {}",
            r.base_offset, r.manifest_key, r.refusal
        )),
        PartitionOutcome::Skipped { reason } => Some(format!("skipped: {reason}")),
        PartitionOutcome::Failed { error } => Some(format!("failed: {error}")),
    }
}
