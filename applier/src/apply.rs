//! One run of the applier over one link: list, plan every partition, then install in offset order.
//!
//! Per partition, in this order:
//! 1. **Gate** on the catalog: a paused or promoted partition is skipped (a promoted one is never written again).
//! 2. **Lineage** ([`choose_lineage`]): a newer lineage than the recorded one is a lineage break — an event is
//!    logged, the partition paused and reported; nothing is merged.
//! 3. **Read** the manifests not settled in the catalog (installed and sealed ones are immutable and not read
//!    again, so a rerun over an installed mirror costs a listing, not a download). Then every partition read is
//!    recorded (created, or its log start advanced) in ONE catalog transaction for the run, not one each: a
//!    partition record describes no file, so it may come before the files (a run that dies before installing leaves
//!    records with nothing installed, as it did with one transaction each).
//! 4. **Reconcile** the partition directory with the catalog (see `reconcile`).
//! 5. **Plan** with the ordering rule (see `plan`), then **install** each planned version (see `install`) and
//!    record it in the catalog, one transaction per version, only once it is durable.
//! 6. **Sweep** segment files the catalog does not list.
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
use segment_format::verify::VerifyOptions;
use segmirror_catalog::{
    Catalog, EventKind, InstallOutcome, LinkSpec, LinkState, PartitionId, PartitionKey, PartitionState,
    PartitionUpsert, Subject, Upsert,
};
use segmirror_transport::link_meta;
use segmirror_transport::manifest::{validate_link_name, KeyPrefix, Manifest};
use segmirror_transport::SegmentSource;

use crate::bucket::{self, choose_lineage, LineageChoice, ManifestRead, PartitionObjects, MANIFEST_READ_CONCURRENCY};
use crate::catalog_cell::CatalogCell;
use crate::error::{Error, Result};
use crate::install::{self, Target};
use crate::layout::MirrorLayout;
use crate::plan::{plan, Candidate, Installed, Step};
use crate::reconcile;
use crate::report::{
    ApplyReport, InstalledSegment, LinkMetaOutcome, PartitionOutcome, PartitionReport, Refusal, RefusedSegment,
    SkipReason, SkippedSegment,
};
use segment_format::progress::Progress;

/// Topics regex recorded for a link the applier creates in the catalog: the shipper already chose the topics, the
/// applier mirrors whatever the link's bucket holds.
pub const APPLIER_TOPICS_REGEX: &str = ".*";

/// Partitions installed at once. Installing a segment alternates CPU work (hashing and checking every byte) with
/// waits for the disk (its fsyncs) and for the catalog (one durable commit per segment), and the partitions of a
/// run are independent, so several at a time keep both cores and the disk busy: with many small partitions, eight
/// installed 10 % faster than four on a 2-core machine (docs/BENCHMARKS.md, session 14), and sixteen no faster than
/// eight. Each holds only a few MiB of buffers (its bytes stream through), so eight bound memory to tens of MiB.
/// Segments of one partition are always installed one after the other, in offset order.
pub const DEFAULT_PARALLEL_PARTITIONS: usize = 8;

/// Partitions whose catalog rows and manifests are read at once before planning (reads only; the store's round
/// trips overlap).
const PREPARE_CONCURRENCY: usize = 16;

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
    pub(crate) wait_for_lock: bool,
    /// The caller holds the mirror lock for all its runs (follow mode): a run does not take it again.
    pub(crate) lock_held: bool,
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
            wait_for_lock: false,
            lock_held: false,
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
        self.verify.deep = deep;
        self
    }

    /// Install this many partitions at once (at least 1; default [`DEFAULT_PARALLEL_PARTITIONS`]).
    pub fn with_parallel_partitions(mut self, n: usize) -> Self {
        self.parallel_partitions = n.max(1);
        self
    }

    /// When another run holds the mirror's lock, wait for it instead of failing with [`Error::MirrorLocked`].
    pub fn with_wait_for_lock(mut self, wait: bool) -> Self {
        self.wait_for_lock = wait;
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

/// Where a manifest's data provably ends: after its last batch for a sealed segment (whose `next` is the following
/// segment's base, not proven by its own batches), its `next` for an active-segment prefix (which the install checks
/// against the last batch), its base when it holds no batch.
fn data_end(m: &Manifest) -> i64 {
    match (m.sealed, m.last_offset) {
        (true, Some(last)) => last.saturating_add(1),
        (true, None) => m.base_offset,
        (false, _) => m.next_offset,
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
        }
    }

    /// Runs of a follower: a grown active segment's new chunks are appended to the installed file in place (after
    /// every check), with state kept between runs, instead of a staged copy of the whole version
    /// (`install::append`).
    pub fn appending(mut self) -> Self {
        self.appends = Some(install::append::AppendCache::default());
        self
    }

    /// Bytes of installed `.log`s read back to prove them before appending (a test hook): zero for a run whose
    /// appends continued the state kept since the previous run.
    pub fn append_proof_bytes_read(&self) -> u64 {
        self.appends.as_ref().map_or(0, |a| a.proof_bytes_read())
    }

    /// The catalog back, unless a catalog call's task died.
    pub fn into_catalog(self) -> Option<Catalog> {
        self.catalog.into_inner()
    }

    /// One run (see the module docs). `Err` only when nothing could be applied at all: the mirror root is unusable,
    /// the store cannot be listed, the catalog cannot record the link, or several links and none chosen.
    pub async fn run(&mut self, progress: &dyn Progress) -> Result<ApplyReport> {
        let started = std::time::Instant::now();
        let mut report = ApplyReport::default();
        let root = self.config.mirror_root.clone();
        let wait = self.config.wait_for_lock;
        let lock_held = self.config.lock_held;
        // One applier per mirror: the lock is taken before anything in the mirror is touched, held to the end (in
        // follow mode the follower holds it for all its runs).
        let (layout, cleared, _lock) = tokio::task::spawn_blocking(move || -> Result<_> {
            let layout = MirrorLayout::open(&root)?;
            let lock = if lock_held {
                None
            } else {
                Some(crate::lock::lock_mirror(layout.root(), wait)?)
            };
            let cleared = reconcile::clear_staging(&layout)?;
            Ok((layout, cleared, lock))
        })
        .await
        .map_err(|e| Error::task("open mirror root", e))??;
        report.staging_cleared = cleared;
        if let Some(link) = &self.config.link {
            validate_link_name(link).map_err(|reason| Error::BadLinkName {
                name: link.clone(),
                reason,
            })?;
        }
        tracing::debug!(elapsed = ?started.elapsed(), "mirror opened");
        let mut listing = bucket::list(
            self.config.store.as_ref(),
            &self.config.prefix,
            self.config.link.as_deref(),
        )
        .await?;
        report.ignored_keys = std::mem::take(&mut listing.ignored);
        let link = match &self.config.link {
            Some(link) => link.clone(),
            None => match listing.links.keys().collect::<Vec<_>>().as_slice() {
                [] => {
                    report.notes.push(format!(
                        "nothing to apply: no segmirror objects under prefix '{}'",
                        self.config.prefix
                    ));
                    return Ok(report);
                }
                [one] => (*one).clone(),
                many => {
                    return Err(Error::AmbiguousLink {
                        prefix: self.config.prefix.to_string(),
                        links: many.iter().map(|s| s.to_string()).collect(),
                    })
                }
            },
        };
        report.link = Some(link.clone());
        let has_meta = listing.meta_links.contains(&link);
        let objects = match listing.links.remove(&link) {
            Some(objects) => objects,
            // A named link the store does not hold: fine if the catalog knows it (everything was cleaned up from
            // the store), a typo otherwise, which must not create a link.
            None => {
                let name = link.clone();
                let known = self
                    .catalog
                    .call("link", move |c| match c.link(&name) {
                        Ok(_) => Ok(None),
                        Err(segmirror_catalog::Error::NotFound { .. }) => {
                            Ok(Some(c.links()?.into_iter().map(|l| l.name).collect::<Vec<_>>()))
                        }
                        Err(e) => Err(e),
                    })
                    .await?;
                if let Some(known) = known {
                    return Err(Error::UnknownLink {
                        link,
                        prefix: self.config.prefix.to_string(),
                        known,
                    });
                }
                Default::default()
            }
        };

        let state = self.ensure_link(&link, &mut report).await?;
        match state {
            LinkState::Active => {}
            LinkState::Paused => {
                report.link_skipped = Some(SkipReason::LinkPaused);
                return Ok(report);
            }
            LinkState::Promoted => {
                report.link_skipped = Some(SkipReason::LinkPromoted);
                return Ok(report);
            }
            LinkState::Deleted => {
                report.link_skipped = Some(SkipReason::LinkDeleted);
                return Ok(report);
            }
        }

        if listing.identities.contains_key(&link) {
            self.check_link_identity(&link).await?;
        }

        tracing::debug!(elapsed = ?started.elapsed(), "store listed");
        let mut read = Vec::new();
        let mut read_reports = Vec::new();
        // Each partition's manifests are read while others' are (a store round trip each); the results come back
        // in partition order, so the report and its notes do not depend on which read finished first.
        let this: &Applier = self;
        let mut prepared = futures::stream::iter(objects.partitions)
            .map(|((topic, partition), objects)| {
                let key = PartitionKey::new(link.clone(), topic.clone(), partition);
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
                    read.push(r);
                    read_reports.push(partition_report);
                }
                Ok(Prepared::Planned(_) | Prepared::Done) => report.partitions.push(partition_report),
                Err(e) => {
                    partition_report.outcome = PartitionOutcome::Failed { error: e.to_string() };
                    report.partitions.push(partition_report);
                }
            }
        }
        tracing::debug!(elapsed = ?started.elapsed(), partitions = read.len(), "manifests read");
        let upserts = self.record_partitions(&read).await?;
        let mut planned = Vec::new();
        for ((r, upsert), mut partition_report) in read.into_iter().zip(upserts).zip(read_reports) {
            match self.plan_recorded(&layout, *r, upsert, &mut partition_report).await {
                Ok(Prepared::Planned(p)) => {
                    let installs = p.steps.iter().filter_map(|s| match s {
                        Step::Install { manifest, .. } => Some(manifest.all_files().map(|f| f.size).sum::<u64>()),
                        _ => None,
                    });
                    let (count, bytes) = installs.fold((0u64, 0u64), |(c, b), size| (c + 1, b + size));
                    progress.planned(count, bytes);
                    planned.push(p);
                }
                Ok(Prepared::Read(_) | Prepared::Done) => report.partitions.push(partition_report),
                Err(e) => {
                    partition_report.outcome = PartitionOutcome::Failed { error: e.to_string() };
                    report.partitions.push(partition_report);
                }
            }
        }
        tracing::debug!(elapsed = ?started.elapsed(), partitions = planned.len(), "planned");
        // The directories of the partitions that install something, created with one fsync of the mirror root.
        let dirs: Vec<PathBuf> = planned
            .iter()
            .filter(|p| p.steps.iter().any(|s| matches!(s, Step::Install { .. })))
            .map(|p| p.dir.clone())
            .collect();
        tokio::task::spawn_blocking(move || install::create_partition_dirs(&dirs))
            .await
            .map_err(|e| Error::task("create partition dirs", e))??;
        // Partitions are independent: install several at once (each still in offset order). A failure that ends
        // the run (an injected crash) stops partitions from starting, lets those under way finish, and is returned.
        let stop = AtomicBool::new(false);
        let mut installs = futures::stream::iter(planned)
            .map(|p| {
                let (layout, stop) = (&layout, &stop);
                async move {
                    if stop.load(Ordering::SeqCst) {
                        return None;
                    }
                    Some(this.execute(layout, *p, progress).await)
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
        drop(installs);
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
        if has_meta {
            report.link_meta = self.record_link_meta(&link).await?;
        }
        Ok(report)
    }

    /// Record the link's newest metadata if the catalog has an older version (see `segmirror_transport::link_meta`;
    /// what may be committed is computed against the installed data when read, so recording it after the installs
    /// or before makes no difference to what a target may commit). A refused or unreadable version is reported, not
    /// a reason to fail the run.
    async fn record_link_meta(&self, link: &str) -> Result<Option<LinkMetaOutcome>> {
        let store = self.config.store.as_ref();
        let manifest = match link_meta::read_manifest(store, &self.config.prefix, link).await {
            Ok(None) => return Ok(None),
            Ok(Some(manifest)) => manifest,
            Err(e) => return Ok(Some(LinkMetaOutcome::Refused { reason: e.to_string() })),
        };
        let name = link.to_string();
        let recorded = self.catalog.call("link metadata", move |c| c.link_meta(&name)).await?;
        if recorded.as_ref().is_some_and(|r| r.version >= manifest.version) {
            return Ok(Some(LinkMetaOutcome::Unchanged {
                version: manifest.version,
            }));
        }
        let meta = match link_meta::read_version(store, &manifest).await {
            Ok(meta) => meta,
            Err(e) => return Ok(Some(LinkMetaOutcome::Refused { reason: e.to_string() })),
        };
        let (version, topics, offsets) = (
            meta.topics.version,
            meta.topics.topics.len(),
            meta.offsets.offsets.len(),
        );
        match self
            .catalog
            .try_call("link metadata", move |c| c.record_link_meta(&meta))
            .await?
        {
            Ok(_) => Ok(Some(LinkMetaOutcome::Recorded {
                version,
                topics,
                offsets,
            })),
            Err(e @ segmirror_catalog::Error::Invalid { .. }) => {
                Ok(Some(LinkMetaOutcome::Refused { reason: e.to_string() }))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The link's state, creating the link (active) if the catalog does not know it.
    async fn ensure_link(&self, link: &str, report: &mut ApplyReport) -> Result<LinkState> {
        let spec = LinkSpec {
            name: link.to_string(),
            store_url: self.config.store_url.clone(),
            topics_regex: APPLIER_TOPICS_REGEX.to_string(),
            groups_regex: None,
        };
        let recorded = self
            .catalog
            .call("link", move |c| match c.link(&spec.name) {
                Err(segmirror_catalog::Error::NotFound { .. }) => c.create_link(&spec),
                other => other,
            })
            .await?;
        if recorded.store_url != self.config.store_url {
            report.notes.push(format!(
                "link {link} was recorded with store {}; applying from {}",
                recorded.store_url, self.config.store_url
            ));
        }
        Ok(recorded.state)
    }

    /// Reads the store's link identity object and checks it against (or, the first time, records it as) the id
    /// the catalog's link follows: a bucket of a recreated link of the same name is refused, naming both ids.
    async fn check_link_identity(&self, link: &str) -> Result<()> {
        use segmirror_transport::link_identity::{link_identity_key, parse_link_identity, MAX_LINK_IDENTITY_BYTES};
        let key = link_identity_key(&self.config.prefix, link);
        let bytes = self.config.store.read_document(&key, MAX_LINK_IDENTITY_BYTES).await?;
        let identity = parse_link_identity(&key, link, &bytes)?;
        let (name, id) = (link.to_string(), identity.id.clone());
        let found = self
            .catalog
            .call("link identity", move |c| c.adopt_peer_link_id(&name, &id))
            .await?;
        match found {
            segmirror_catalog::PeerLink::Adopted | segmirror_catalog::PeerLink::Same => Ok(()),
            segmirror_catalog::PeerLink::Other { recorded } => Err(Error::ForeignLinkBucket {
                link: link.to_string(),
                key,
                bucket_id: identity.id,
                recorded_id: recorded,
            }),
        }
    }

    /// Steps 1 to 3 of the module docs for one partition (steps 4 and 5 follow in [`Applier::plan_recorded`], once
    /// the partitions are recorded together).
    async fn prepare(
        &self,
        key: PartitionKey,
        objects: PartitionObjects,
        report: &mut PartitionReport,
        notes: &mut Vec<String>,
    ) -> Result<Prepared> {
        let lookup_key = key.clone();
        let recorded = self
            .catalog
            .call("partition", move |c| match c.partition(&lookup_key) {
                Ok(p) => Ok(Some(p)),
                Err(segmirror_catalog::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            })
            .await?;
        if let Some(p) = &recorded {
            report.source_topic_id = Some(p.source_topic_id.clone());
            let skip = match p.state {
                PartitionState::Mirroring => None,
                PartitionState::Paused => Some(SkipReason::Paused),
                PartitionState::Promoted => Some(SkipReason::Promoted),
            };
            if let Some(reason) = skip {
                report.outcome = PartitionOutcome::Skipped { reason };
                return Ok(Prepared::Done);
            }
        }
        let (topic_id, older) =
            match choose_lineage(recorded.as_ref().map(|p| p.source_topic_id.as_str()), &objects.lineages) {
                LineageChoice::Nothing => return Ok(Prepared::Done),
                LineageChoice::Break { recorded: old, offered } => {
                    let id = recorded.as_ref().map(|p| p.id);
                    return self.lineage_break(key, id, old, offered.to_string(), report).await;
                }
                LineageChoice::Use { topic_id, older } => (topic_id, older),
            };
        if !older.is_empty() {
            let older: Vec<String> = older.iter().map(|id| id.to_string()).collect();
            notes.push(format!(
                "{key}: ignoring older lineage(s) {} in the store (a deleted topic's leftovers)",
                older.join(", ")
            ));
        }
        report.source_topic_id = Some(topic_id.to_string());
        let installed: Vec<Installed> = match &recorded {
            Some(p) => {
                let id = p.id;
                self.catalog
                    .call("installed segments", move |c| c.installed_segments(id))
                    .await?
                    .iter()
                    .map(Installed::from)
                    .collect()
            }
            None => Vec::new(),
        };

        // Read what is not settled.
        let lineage = objects.lineages.get(&topic_id).map(|l| &l.manifests);
        let mut candidates = Vec::new();
        let mut to_read = Vec::new();
        for (&base, info) in lineage.into_iter().flatten() {
            if installed.iter().any(|s| s.base_offset == base && s.sealed) {
                candidates.push(Candidate::Settled { base_offset: base });
            } else {
                to_read.push((base, info.key.clone()));
            }
        }
        let (store, prefix) = (self.config.store.as_ref(), &self.config.prefix);
        let reads: Vec<(i64, String, Result<ManifestRead>)> = futures::stream::iter(to_read)
            .map(|(base, key)| async move {
                let read = bucket::read_manifest(store, prefix, &key).await;
                (base, key, read)
            })
            .buffered(MANIFEST_READ_CONCURRENCY)
            .collect()
            .await;
        let mut log_start_offset = recorded.as_ref().map_or(0, |p| p.log_start_offset);
        let mut valid = Vec::new();
        for (base, key, read) in reads {
            match read? {
                ManifestRead::Valid(manifest) => valid.push((key, manifest)),
                ManifestRead::Invalid(refusal) => candidates.push(Candidate::Invalid {
                    key,
                    base_offset: base,
                    refusal,
                }),
                ManifestRead::Gone => {}
            }
        }
        // A log start offset is a claim about the source no batch proves; it is believed only up to the end of what
        // the partition's data shows, so an absurd one (2^63-1) is refused with its manifest and never recorded.
        let shipped_end = valid
            .iter()
            .map(|(_, m)| data_end(m))
            .chain(installed.last().map(|s| s.next_offset))
            .max()
            .unwrap_or(0);
        for (key, manifest) in valid {
            if manifest.log_start_offset > shipped_end {
                candidates.push(Candidate::Invalid {
                    base_offset: manifest.base_offset,
                    refusal: Refusal::InvalidManifest {
                        reason: format!(
                            "{key}: log start offset {} lies beyond every offset shipped for this partition (up to \
                             {shipped_end}); if a seed is still shipping, the next run picks it up",
                            manifest.log_start_offset
                        ),
                    },
                    key,
                });
            } else {
                log_start_offset = log_start_offset.max(manifest.log_start_offset);
                candidates.push(Candidate::Read { key, manifest });
            }
        }

        Ok(Prepared::Read(Box::new(Read {
            key,
            topic_id,
            log_start_offset,
            installed,
            candidates,
        })))
    }

    /// Record or confirm the partitions `read` in the catalog, all in one transaction; if that transaction fails
    /// (the database, not a partition), one at a time as before, so that one partition's failure stays its own.
    async fn record_partitions(
        &self,
        read: &[Box<Read>],
    ) -> Result<Vec<std::result::Result<Upsert, segmirror_catalog::Error>>> {
        let batch: Vec<PartitionUpsert> = read
            .iter()
            .map(|r| PartitionUpsert {
                key: r.key.clone(),
                source_topic_id: r.topic_id.to_string(),
                log_start_offset: r.log_start_offset,
            })
            .collect();
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let one_by_one = batch.clone();
        match self
            .catalog
            .try_call("record partitions", move |c| c.upsert_partitions(&batch))
            .await?
        {
            Ok(outcomes) => Ok(outcomes),
            Err(e) => {
                tracing::warn!(error = %e, "recording the partitions together failed; recording them one at a time");
                let mut outcomes = Vec::with_capacity(one_by_one.len());
                for p in one_by_one {
                    let outcome = self
                        .catalog
                        .try_call("upsert partition", move |c| {
                            c.upsert_partition(&p.key, &p.source_topic_id, p.log_start_offset)
                        })
                        .await?;
                    outcomes.push(outcome);
                }
                Ok(outcomes)
            }
        }
    }

    /// Plan a partition once its record is made or confirmed (`upsert`): reconcile its directory, plan its steps.
    async fn plan_recorded(
        &self,
        layout: &MirrorLayout,
        read: Read,
        upsert: std::result::Result<Upsert, segmirror_catalog::Error>,
        report: &mut PartitionReport,
    ) -> Result<Prepared> {
        let Read {
            key,
            topic_id,
            installed,
            candidates,
            ..
        } = read;
        let partition = match upsert {
            Ok(Upsert::Created(p) | Upsert::Existing(p)) => p,
            Ok(Upsert::LineageBreak {
                partition,
                offered_source_topic_id,
            }) => {
                let old = partition.source_topic_id.clone();
                return self
                    .lineage_break(key, Some(partition.id), old, offered_source_topic_id, report)
                    .await;
            }
            Err(segmirror_catalog::Error::Promoted { .. }) => {
                report.outcome = PartitionOutcome::Skipped {
                    reason: SkipReason::LinkPromoted,
                };
                return Ok(Prepared::Done);
            }
            Err(e) => return Err(e.into()),
        };
        if partition.state == PartitionState::Promoted {
            report.outcome = PartitionOutcome::Skipped {
                reason: SkipReason::Promoted,
            };
            return Ok(Prepared::Done);
        }

        // Reconcile.
        let dir = layout.partition_dir(&key.topic, key.partition);
        let (scan_dir, name, checked_installed) = (dir.clone(), report.name(), installed.clone());
        let (removed, dirty) = tokio::task::spawn_blocking(move || -> Result<_> {
            let disk = reconcile::scan(&scan_dir)?;
            let mut removed = Vec::new();
            if let Some(disk) = &disk {
                reconcile::check_lineage(&scan_dir, disk, &topic_id)?;
                removed = reconcile::remove_temp_files(&scan_dir, disk)?;
            }
            let dirty = reconcile::check_installed(&name, &scan_dir, disk.as_ref(), &checked_installed)?;
            Ok((removed, dirty))
        })
        .await
        .map_err(|e| Error::task("reconcile", e))??;
        report.removed.extend(removed);

        let steps = plan(&installed, candidates);
        if let Some(base) = dirty {
            let reinstalled = steps.iter().any(
                |s| matches!(s, Step::Install { manifest, replaces: Some(_), .. } if manifest.base_offset == base),
            );
            if !reinstalled {
                let path = dir.join(segment_format::dir::segment_file_name(
                    base,
                    segment_format::dir::SegmentFileKind::Log,
                ));
                return Err(Error::DiskBehindCatalog {
                    partition: report.name(),
                    base_offset: base,
                    path,
                    reason: "its .log is longer than recorded (an interrupted replacement) and the store holds no \
                             longer version to complete it with"
                        .into(),
                });
            }
        }
        Ok(Prepared::Planned(Box::new(Planned {
            report: report.clone(),
            id: partition.id,
            key,
            topic_id,
            dir,
            steps,
            installed: installed.iter().map(|s| s.base_offset).collect(),
            log_end: installed.last().map(|s| s.next_offset),
        })))
    }

    /// Report a lineage break: log the event, pause the partition (if recorded), skip it.
    async fn lineage_break(
        &self,
        key: PartitionKey,
        id: Option<PartitionId>,
        recorded: String,
        offered: String,
        report: &mut PartitionReport,
    ) -> Result<Prepared> {
        let detail = format!(
            "the store holds source topic id {offered}, the mirror holds {recorded}: the source topic was \
             recreated; not merged, partition paused (start the new lineage to mirror it)"
        );
        self.catalog
            .call("lineage break", move |c| {
                c.append_event(Subject::Partition(&key), EventKind::LineageBreak, &detail)?;
                if let Some(id) = id {
                    c.set_partition_state(id, PartitionState::Paused)?;
                }
                Ok(())
            })
            .await?;
        report.outcome = PartitionOutcome::Skipped {
            reason: SkipReason::LineageBreak { recorded, offered },
        };
        Ok(Prepared::Done)
    }

    /// Steps 5 (installing) and 6 for one planned partition. `Err` only for an injected crash (tests); every other
    /// failure ends up in the partition's report.
    async fn execute(&self, layout: &MirrorLayout, p: Planned, progress: &dyn Progress) -> Result<PartitionReport> {
        let Planned {
            mut report,
            key,
            id,
            topic_id,
            dir,
            steps,
            mut installed,
            mut log_end,
        } = p;
        let mut dir_ready = false;
        let mut failed = false;
        let mut adopted = Vec::new();
        for step in steps {
            match step {
                Step::Skip { base_offset, why } => report.skipped.push(SkippedSegment { base_offset, why }),
                Step::Wait { base_offset, reason } => {
                    report.outcome = PartitionOutcome::Waiting { base_offset, reason };
                }
                Step::Refuse {
                    key: manifest_key,
                    base_offset,
                    refusal,
                } => {
                    self.refused(&key, &mut report, manifest_key, base_offset, refusal)
                        .await;
                    progress.segment_done();
                }
                Step::Install {
                    key: manifest_key,
                    manifest,
                    replaces,
                } => {
                    let outcome = self
                        .install_one(
                            layout,
                            &key,
                            id,
                            &topic_id,
                            &dir,
                            &mut dir_ready,
                            &manifest_key,
                            &manifest,
                            replaces,
                            progress,
                        )
                        .await;
                    progress.segment_done();
                    match outcome {
                        Ok(Ok(segment)) => {
                            if segment.reused_files as usize == manifest.all_files().count() {
                                adopted.push(segment.base_offset);
                            }
                            installed.insert(segment.base_offset);
                            log_end = log_end.max(Some(segment.next_offset));
                            report.bytes_fetched += segment.fetched_bytes;
                            report.bytes_reused += segment.reused_bytes;
                            report.installed.push(segment);
                        }
                        Ok(Err(refusal)) => {
                            self.refused(&key, &mut report, manifest_key, manifest.base_offset, refusal)
                                .await;
                            break;
                        }
                        #[cfg(feature = "failpoints")]
                        Err(e @ Error::Injected(_)) => return Err(e),
                        Err(e) => {
                            report.outcome = PartitionOutcome::Failed { error: e.to_string() };
                            failed = true;
                            break;
                        }
                    }
                }
            }
        }
        if !failed {
            let sweep_dir = dir.clone();
            let keep = installed.clone();
            match tokio::task::spawn_blocking(move || reconcile::sweep(&sweep_dir, &keep, log_end)).await {
                Ok(Ok(removed)) => report.removed.extend(removed),
                Ok(Err(e)) => report.outcome = PartitionOutcome::Failed { error: e.to_string() },
                Err(e) => {
                    report.outcome = PartitionOutcome::Failed {
                        error: Error::task("sweep", e).to_string(),
                    }
                }
            }
        }
        if !report.removed.is_empty() || !adopted.is_empty() {
            let mut parts = Vec::new();
            if !adopted.is_empty() {
                parts.push(format!("adopted segment(s) {adopted:?} found complete on disk"));
            }
            if !report.removed.is_empty() {
                parts.push(format!(
                    "removed {} leftover file(s) of interrupted installs",
                    report.removed.len()
                ));
            }
            let detail = parts.join("; ");
            let event_key = key.clone();
            // Best effort: the event is for people; the state it describes is already durable.
            if let Err(e) = self
                .catalog
                .call("reconciled event", move |c| {
                    c.append_event(Subject::Partition(&event_key), EventKind::Reconciled, &detail)
                })
                .await
            {
                tracing::warn!(partition = %key, error = %e, "could not record the reconciliation event");
            }
        }
        Ok(report)
    }

    /// Record a refusal: the partition's outcome and a `segment_rejected` event.
    async fn refused(
        &self,
        key: &PartitionKey,
        report: &mut PartitionReport,
        manifest_key: String,
        base_offset: i64,
        refusal: Refusal,
    ) {
        let detail = format!("{manifest_key}: {refusal}");
        tracing::warn!(partition = %key, %detail, "segment refused");
        report.outcome = PartitionOutcome::Refused(RefusedSegment {
            base_offset,
            manifest_key,
            refusal,
        });
        let event_key = key.clone();
        if let Err(e) = self
            .catalog
            .call("rejection event", move |c| {
                c.append_event(Subject::Partition(&event_key), EventKind::SegmentRejected, &detail)
            })
            .await
        {
            tracing::warn!(partition = %key, error = %e, "could not record the rejection event");
        }
    }

    /// Install one version and record it. `Ok(Err(_))` is a refusal (including a catalog conflict).
    #[allow(clippy::too_many_arguments)]
    async fn install_one(
        &self,
        layout: &MirrorLayout,
        key: &PartitionKey,
        id: PartitionId,
        topic_id: &Uuid,
        dir: &std::path::Path,
        dir_ready: &mut bool,
        manifest_key: &str,
        manifest: &Manifest,
        replaces: Option<i64>,
        progress: &dyn Progress,
    ) -> Result<std::result::Result<InstalledSegment, Refusal>> {
        if !*dir_ready {
            let (d, t) = (dir.to_path_buf(), *topic_id);
            tokio::task::spawn_blocking(move || install::ensure_partition_dir(&d, &t))
                .await
                .map_err(|e| Error::task("create partition dir", e))??;
            *dir_ready = true;
        }
        let staging_dir = layout.staging_dir(&key.topic, key.partition, manifest.base_offset, manifest.next_offset);
        let target = Target {
            store: self.config.store.as_ref(),
            partition_dir: dir,
            staging_dir: staging_dir.clone(),
            manifest_key,
            manifest,
            replaces: replaces.is_some(),
            verify: &self.config.verify,
            progress,
            appends: self.appends.as_ref(),
            #[cfg(feature = "failpoints")]
            failpoint: self.config.failpoint.clone(),
        };
        let placed = match install::install(&target).await? {
            Ok(placed) => placed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let version = placed.version.clone();
        let source_topic_id = topic_id.to_string();
        let recording = std::time::Instant::now();
        let receipt = self
            .catalog
            .try_call("mark installed", move |c| {
                c.mark_installed(id, &source_topic_id, &version)
            })
            .await?;
        let receipt = match receipt {
            Ok(r) => r,
            Err(segmirror_catalog::Error::Conflict { reason, .. }) => {
                return Ok(Err(Refusal::Conflict {
                    reason: reason.to_string(),
                }))
            }
            Err(e) => return Err(e.into()),
        };
        let recorded = recording.elapsed();
        install::remove_staging(&staging_dir).await?;
        tracing::debug!(
            key = manifest_key,
            record_ms = recorded.as_millis(),
            cleanup_ms = (recording.elapsed() - recorded).as_millis(),
            "recorded"
        );
        Ok(Ok(InstalledSegment {
            base_offset: manifest.base_offset,
            next_offset: manifest.next_offset,
            sealed: manifest.sealed,
            log_bytes: placed.version.size,
            replaced: match receipt.outcome {
                InstallOutcome::Replaced { previous_next_offset } => Some(previous_next_offset),
                _ => replaces,
            },
            reused_files: placed.reused_files,
            already_recorded: receipt.outcome == InstallOutcome::AlreadyInstalled,
            fetched_bytes: placed.fetched_bytes,
            reused_bytes: placed.reused_bytes,
        }))
    }
}
