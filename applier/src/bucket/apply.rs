//! One run of the applier over one link: list, plan every partition, then install in offset order.
//!
//! Per partition, in this order:
//! 1. **Gate** on the catalog: a paused or promoted partition is skipped (a promoted one is never written again).
//! 2. **Lineage** (`read::choose_lineage`): a newer lineage than the recorded one is a lineage break — an event is
//!    logged, the partition paused and reported; nothing is merged.
//! 3. **Read** the manifests not settled in the catalog (installed and sealed ones are immutable and not read
//!    again, so a rerun over an installed mirror costs a listing, not a download). Then every partition read is
//!    recorded (created, or its log start advanced) in ONE catalog transaction for the run, not one each: a
//!    partition record describes no file, so it may come before the files (a run that dies before installing leaves
//!    records with nothing installed, as it did with one transaction each).
//! 4. **Reconcile** the partition directory with the catalog (see `reconcile`). Steps 1 to 4 are `prepare`'s.
//! 5. **Plan** with the ordering rule (see `plan`), then **install** each planned version (see `install`) and
//!    record it in the catalog, one transaction per version, only once it is durable.
//! 6. **Sweep** segment files the catalog does not list. Steps 5 and 6 are `execute`'s; the link's own gate,
//!    identity check and metadata are `link`'s.
//!
//! All partitions are planned before anything is installed so that the progress bar knows its total. Then
//! [`DEFAULT_PARALLEL_PARTITIONS`] partitions are installed at a time, each one's versions strictly in offset order.
//! A partition that fails (store, catalog, disk) is reported and the run goes on with the others; a refused segment
//! stops only its own partition.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use segment_format::partition_metadata::Uuid;
use segment_format::progress::Progress;
use segment_format::verify::{Depth, VerifyOptions};
use segmirror_catalog::{Catalog, PartitionId, PartitionKey, Upsert};
use segmirror_transport::manifest::{validate_link_name, KeyPrefix};
use segmirror_transport::SegmentSource;

use super::plan::{Candidate, Installed, Step};
use super::quiet::QuietPartitions;
use super::read::LinkObjects;
use super::reconcile;
use crate::catalog_cell::CatalogCell;
use crate::error::{Error, Result};
use crate::install;
use crate::lock::{LockWait, MirrorLock};
use crate::mirror::MirrorLayout;
use crate::report::{ApplyReport, PartitionOutcome, PartitionReport};

mod execute;
mod link;
mod prepare;

/// Topics regex recorded for a link the applier creates in the catalog: the shipper already chose the topics, the
/// applier mirrors whatever the link's bucket holds.
pub const APPLIER_TOPICS_REGEX: &str = ".*";

/// Partitions installed at once. Installing a segment alternates CPU work (hashing and checking every byte) with
/// waits for the disk (its fsyncs) and for the catalog (one durable commit per segment), and the partitions of a
/// run are independent, so several at a time keep both cores and the disk busy: with many small partitions, eight
/// installed 10 % faster than four on a 2-core machine (docs/BENCHMARKS.md), and sixteen no faster than
/// eight. Each holds only a few MiB of buffers (its bytes stream through), so eight bound memory to tens of MiB.
/// Segments of one partition are always installed one after the other, in offset order.
pub const DEFAULT_PARALLEL_PARTITIONS: usize = 8;

/// Partitions whose catalog rows and manifests are read at once before planning (reads only; the store's round
/// trips overlap).
const PREPARE_CONCURRENCY: usize = 16;

/// How a run comes to hold the mirror's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunLock {
    /// The run takes it, waiting for another holder or failing at once.
    Take(LockWait),
    /// The caller holds it for all its runs (follow mode): a run does not take it again.
    HeldByCaller,
}

/// What to apply, from where, into where.
#[derive(Debug, Clone)]
pub struct ApplyConfig {
    store: Arc<dyn SegmentSource>,
    store_url: String,
    prefix: KeyPrefix,
    link: Option<String>,
    mirror_root: PathBuf,
    verify: VerifyOptions,
    parallel_partitions: usize,
    pub(crate) lock: RunLock,
    #[cfg(feature = "failpoints")]
    failpoint: Option<std::sync::Arc<crate::failpoint::Armed>>,
}

impl ApplyConfig {
    /// Apply from `store` (any transport's read side; its URL as the operator wrote it, recorded for a new link)
    /// into `mirror_root`; the root key prefix, the store's only link, shallow validation.
    pub fn new(
        store: impl SegmentSource + 'static,
        store_url: impl Into<String>,
        mirror_root: impl Into<PathBuf>,
    ) -> Self {
        ApplyConfig {
            store: Arc::new(store),
            store_url: store_url.into(),
            prefix: KeyPrefix::root(),
            link: None,
            mirror_root: mirror_root.into(),
            verify: VerifyOptions::default(),
            parallel_partitions: DEFAULT_PARALLEL_PARTITIONS,
            lock: RunLock::Take(LockWait::Fail),
            #[cfg(feature = "failpoints")]
            failpoint: None,
        }
    }

    /// The key prefix the shipper wrote under.
    pub fn with_prefix(mut self, prefix: KeyPrefix) -> Self {
        self.prefix = prefix;
        self
    }

    /// Apply this link (required when the store holds several).
    pub fn with_link(mut self, link: impl Into<String>) -> Self {
        self.link = Some(link.into());
        self
    }

    /// Also decompress every batch and check every record before installing.
    pub fn with_deep_validation(mut self, deep: bool) -> Self {
        self.verify.depth = if deep { Depth::Deep } else { Depth::Shallow };
        self
    }

    /// Install this many partitions at once (at least 1; default [`DEFAULT_PARALLEL_PARTITIONS`]).
    pub fn with_parallel_partitions(mut self, n: usize) -> Self {
        self.parallel_partitions = n.max(1);
        self
    }

    /// When another run holds the mirror's lock, wait for it instead of failing with [`Error::MirrorLocked`].
    pub fn with_wait_for_lock(mut self, wait: bool) -> Self {
        self.lock = RunLock::Take(if wait { LockWait::Wait } else { LockWait::Fail });
        self
    }

    /// Arm a kill point (crash tests).
    #[cfg(feature = "failpoints")]
    pub fn with_failpoint(mut self, armed: std::sync::Arc<crate::failpoint::Armed>) -> Self {
        self.failpoint = Some(armed);
        self
    }

    pub fn mirror_root(&self) -> &std::path::Path {
        &self.mirror_root
    }
}

/// Apply `config` once, recording in `catalog` (which is dropped at the end; use [`Applier`] to keep it).
pub async fn apply(config: &ApplyConfig, catalog: Catalog, progress: &dyn Progress) -> Result<ApplyReport> {
    let mut applier = Applier::new(config.clone(), catalog);
    applier.run(progress).await
}

/// The applier: a config and the catalog it records in.
#[derive(Debug)]
pub struct Applier {
    config: ApplyConfig,
    catalog: CatalogCell,
    /// Follow mode's state of the active segments it appends to (`install::append`); `None` for one-shot runs.
    appends: Option<install::append::AppendCache>,
    /// Follow mode's partitions with nothing to do (`quiet`); `None` for one-shot runs.
    quiet: Option<QuietPartitions>,
    /// How long the last run's listing of the store took (zero when it listed nothing): what paces a follower.
    last_listing_took: std::time::Duration,
}

/// A partition after planning, before installing.
struct Planned {
    report: PartitionReport,
    key: PartitionKey,
    id: PartitionId,
    topic_id: Uuid,
    dir: PathBuf,
    steps: Vec<Step>,
    /// Installed bases before the run.
    installed: BTreeSet<i64>,
    /// The mirror partition's log end (the last installed version's next offset) before the run: a producer
    /// snapshot there is the installed log-end snapshot, which the sweep keeps.
    log_end: Option<i64>,
}

/// A partition whose manifests are read, before its catalog record is made or confirmed: every partition of a run
/// is recorded in one transaction (one commit for hundreds of new partitions, not one each).
struct Read {
    key: PartitionKey,
    topic_id: Uuid,
    log_start_offset: i64,
    installed: Vec<Installed>,
    candidates: Vec<Candidate>,
}

/// The result of planning one partition.
enum Prepared {
    /// Read and checked, waiting for the partition's record ([`Applier::record_partitions`]) to be planned.
    Read(Box<Read>),
    Planned(Box<Planned>),
    /// Nothing to install; the caller's report says why.
    Done,
}

impl Applier {
    pub fn new(config: ApplyConfig, catalog: Catalog) -> Self {
        Applier {
            config,
            catalog: CatalogCell::new(catalog),
            appends: None,
            quiet: None,
            last_listing_took: std::time::Duration::ZERO,
        }
    }

    /// Runs of a follower: a grown active segment's new chunks are appended to the installed file in place (after
    /// every check), with state kept between runs, instead of a staged copy of the whole version
    /// (`install::append`); and a partition complete after a run is passed over by the next ones while its listing
    /// stays the same, with a full run every `quiet::FULL_RUN_INTERVAL` (`quiet`).
    pub fn appending(mut self) -> Self {
        self.appends = Some(install::append::AppendCache::default());
        self.quiet = Some(QuietPartitions::default());
        self
    }

    /// [`Applier::appending`] with another interval between full runs (tests).
    #[doc(hidden)]
    pub fn with_full_run_interval(mut self, interval: std::time::Duration) -> Self {
        self.quiet = Some(QuietPartitions::with_interval(interval));
        self
    }

    /// Bytes of installed `.log`s read back to prove them before appending (a test hook): zero for a run whose
    /// appends continued the state kept since the previous run.
    pub fn append_proof_bytes_read(&self) -> u64 {
        self.appends.as_ref().map_or(0, |a| a.proof_bytes_read())
    }

    /// How long the last run's listing of the store took; zero when that run listed nothing (passed over whole).
    pub fn last_listing_took(&self) -> std::time::Duration {
        self.last_listing_took
    }

    /// The catalog back, unless a catalog call's task died.
    pub fn into_catalog(self) -> Option<Catalog> {
        self.catalog.into_inner()
    }

    /// One run (see the module docs). `Err` only when nothing could be applied at all: the mirror root is unusable,
    /// the store cannot be listed, the catalog cannot record the link, or several links and none chosen.
    pub async fn run(&mut self, progress: &dyn Progress) -> Result<ApplyReport> {
        let started = std::time::Instant::now();
        self.last_listing_took = std::time::Duration::ZERO;
        let mut report = ApplyReport::default();
        // One applier per mirror: the lock is taken before anything in the mirror is touched, held to the end (in
        // follow mode the follower holds it for all its runs).
        let (layout, _lock) = self.open_mirror(&mut report).await?;
        if let Some(link) = &self.config.link {
            validate_link_name(link).map_err(|reason| Error::BadLinkName {
                name: link.clone(),
                reason,
            })?;
        }
        tracing::debug!(elapsed = ?started.elapsed(), "mirror opened");
        let before = self.read_before().await;
        if let (Some(quiet), Some(before)) = (self.quiet.as_ref(), before.as_ref()) {
            if let Some(unchanged) = quiet.pass_over(before, std::time::Instant::now()) {
                report.link = Some(before.link.clone());
                report.partitions_unchanged = unchanged;
                return Ok(report);
            }
        }
        if let Some(quiet) = self.quiet.as_mut() {
            quiet.unsettle();
        }
        let listing = std::time::Instant::now();
        let listed = self.list_link(&mut report).await;
        self.last_listing_took = listing.elapsed();
        let Some(listed) = listed? else {
            return Ok(report);
        };
        let link = listed.name;
        if let Some(reason) = self.gate_link(&link, &mut report).await? {
            report.link_skipped = Some(reason);
            return Ok(report);
        }
        if listed.has_identity {
            self.check_link_identity(&link).await?;
        }

        tracing::debug!(elapsed = ?started.elapsed(), "store listed");
        let partitions_listed = listed.objects.partitions.len();
        let mut full_run = false;
        let (objects, listed_partitions) = match self.quiet.as_mut() {
            Some(quiet) => {
                let split = quiet.split(listed.objects.partitions, std::time::Instant::now());
                full_run = split.full;
                report.partitions_unchanged = split.skipped;
                (
                    LinkObjects {
                        partitions: split.changed,
                    },
                    Some(split.listed),
                )
            }
            None => (listed.objects, None),
        };
        let (read, read_reports) = self.read_partitions(&link, objects, &mut report).await;
        tracing::debug!(elapsed = ?started.elapsed(), partitions = read.len(), "manifests read");
        let upserts = self.record_partitions(&read).await?;
        let planned = self
            .plan_partitions(&layout, read, upserts, read_reports, &mut report, progress)
            .await;
        tracing::debug!(elapsed = ?started.elapsed(), partitions = planned.len(), "planned");
        create_partition_dirs(&planned).await?;
        let failure = self.install_partitions(&layout, planned, &mut report, progress).await;
        tracing::debug!(elapsed = ?started.elapsed(), "installed");
        if let Some(e) = failure {
            return Err(e);
        }
        // What is left in staging (a version whose download failed) is of no use to anyone now.
        let cleanup = layout.clone();
        tokio::task::spawn_blocking(move || reconcile::clear_staging(&cleanup))
            .await
            .map_err(|e| Error::task("clear staging", e))??;
        report
            .partitions
            .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        if listed.has_meta {
            report.link_meta = self.record_link_meta(&link).await?;
        }
        if let (Some(quiet), Some(listed)) = (self.quiet.as_mut(), listed_partitions) {
            quiet.remember(&report.partitions, listed);
            if full_run {
                quiet.full_run_took(started.elapsed());
            }
            // A notice read for another link than the one applied (none was named) says nothing of this one.
            let before = before.filter(|b| b.link == link);
            quiet.settle(&link, before, &report.partitions, partitions_listed);
        }
        Ok(report)
    }

    /// Follow mode: what the store says of the link's change notice, and the catalog's `data_version`, read before
    /// the listing (`quiet`). `None` when not following, when no link is known yet, when the store holds no notice
    /// or when either cannot be read: the run then lists, as it always may.
    async fn read_before(&self) -> Option<super::quiet::Before> {
        let quiet = self.quiet.as_ref()?;
        let link = self.config.link.clone().or_else(|| quiet.link().map(str::to_string))?;
        let key = segmirror_transport::bucket::link_changes::link_changes_key(&self.config.prefix, &link);
        let notice = match self.config.store.stat(&key).await {
            Ok(Some(notice)) => notice,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(key, error = %e, "the link's change notice could not be read; listing");
                return None;
            }
        };
        let data_version = self
            .catalog
            .call("catalog data version", |c| c.data_version())
            .await
            .ok()?;
        Some(super::quiet::Before {
            link,
            notice,
            data_version,
        })
    }

    /// Open the mirror root, take its lock (unless the caller holds it), and clear an earlier run's staging.
    async fn open_mirror(&self, report: &mut ApplyReport) -> Result<(MirrorLayout, Option<MirrorLock>)> {
        let root = self.config.mirror_root.clone();
        let run_lock = self.config.lock;
        let (layout, cleared, lock) = tokio::task::spawn_blocking(move || -> Result<_> {
            let layout = MirrorLayout::open(&root)?;
            let lock = match run_lock {
                RunLock::HeldByCaller => None,
                RunLock::Take(wait) => Some(crate::lock::lock_mirror(layout.root(), wait)?),
            };
            let cleared = reconcile::clear_staging(&layout)?;
            Ok((layout, cleared, lock))
        })
        .await
        .map_err(|e| Error::task("open mirror root", e))??;
        report.staging_cleared = cleared;
        Ok((layout, lock))
    }

    /// Step 1 to 3 for every partition of the link: each partition's manifests are read while others' are (a store
    /// round trip each); the results come back in partition order, so the report and its notes do not depend on
    /// which read finished first. Returns the partitions read, with their reports, waiting to be recorded; the
    /// others' reports (skipped, failed) go to `report`.
    async fn read_partitions(
        &self,
        link: &str,
        objects: LinkObjects,
        report: &mut ApplyReport,
    ) -> (Vec<Read>, Vec<PartitionReport>) {
        let mut read = Vec::new();
        let mut read_reports = Vec::new();
        let this = self;
        let mut prepared = futures::stream::iter(objects.partitions)
            .map(|((topic, partition), objects)| {
                let key = PartitionKey::new(link.to_string(), topic.clone(), partition);
                async move {
                    let mut partition_report = PartitionReport::new(&topic, partition);
                    let mut notes = Vec::new();
                    let prepared = this.prepare(key, objects, &mut partition_report, &mut notes).await;
                    (prepared, partition_report, notes)
                }
            })
            .buffered(PREPARE_CONCURRENCY);
        while let Some((prepared, mut partition_report, notes)) = prepared.next().await {
            report.notes.extend(notes);
            match prepared {
                Ok(Prepared::Read(r)) => {
                    read.push(*r);
                    read_reports.push(partition_report);
                }
                Ok(Prepared::Planned(_) | Prepared::Done) => report.partitions.push(partition_report),
                Err(e) => {
                    partition_report.outcome = PartitionOutcome::Failed { error: e.to_string() };
                    report.partitions.push(partition_report);
                }
            }
        }
        (read, read_reports)
    }

    /// Steps 4 and 5's planning for every recorded partition, telling `progress` what will be installed. Returns
    /// the partitions planned; the others' reports go to `report`.
    async fn plan_partitions(
        &self,
        layout: &MirrorLayout,
        read: Vec<Read>,
        upserts: Vec<std::result::Result<Upsert, segmirror_catalog::Error>>,
        read_reports: Vec<PartitionReport>,
        report: &mut ApplyReport,
        progress: &dyn Progress,
    ) -> Vec<Planned> {
        let mut planned = Vec::new();
        for ((r, upsert), mut partition_report) in read.into_iter().zip(upserts).zip(read_reports) {
            match self.plan_recorded(layout, r, upsert, &mut partition_report).await {
                Ok(Prepared::Planned(p)) => {
                    let installs = p.steps.iter().filter_map(|s| match s {
                        Step::Install { manifest, .. } => Some(manifest.all_files().map(|f| f.size).sum::<u64>()),
                        _ => None,
                    });
                    let (count, bytes) = installs.fold((0u64, 0u64), |(c, b), size| (c + 1, b + size));
                    progress.planned(count, bytes);
                    planned.push(*p);
                }
                Ok(Prepared::Read(_) | Prepared::Done) => report.partitions.push(partition_report),
                Err(e) => {
                    partition_report.outcome = PartitionOutcome::Failed { error: e.to_string() };
                    report.partitions.push(partition_report);
                }
            }
        }
        planned
    }

    /// Steps 5 and 6 for every planned partition. Partitions are independent: several are installed at once (each
    /// still in offset order). A failure that ends the run (an injected crash) stops partitions from starting, lets
    /// those under way finish, and is returned.
    async fn install_partitions(
        &self,
        layout: &MirrorLayout,
        planned: Vec<Planned>,
        report: &mut ApplyReport,
        progress: &dyn Progress,
    ) -> Option<Error> {
        let this = self;
        let stop = AtomicBool::new(false);
        let mut installs = futures::stream::iter(planned)
            .map(|p| {
                let stop = &stop;
                async move {
                    if stop.load(Ordering::SeqCst) {
                        return None;
                    }
                    Some(this.execute(layout, p, progress).await)
                }
            })
            .buffer_unordered(this.config.parallel_partitions);
        let mut failure = None;
        while let Some(done) = installs.next().await {
            match done {
                Some(Ok(r)) => report.partitions.push(r),
                Some(Err(e)) => {
                    stop.store(true, Ordering::SeqCst);
                    failure.get_or_insert(e);
                }
                None => {}
            }
        }
        failure
    }
}

/// The directories of the partitions that install something, created with one fsync of the mirror root.
async fn create_partition_dirs(planned: &[Planned]) -> Result<()> {
    let dirs: Vec<PathBuf> = planned
        .iter()
        .filter(|p| p.steps.iter().any(|s| matches!(s, Step::Install { .. })))
        .map(|p| p.dir.clone())
        .collect();
    tokio::task::spawn_blocking(move || install::create_partition_dirs(&dirs))
        .await
        .map_err(|e| Error::task("create partition dirs", e))?
}
