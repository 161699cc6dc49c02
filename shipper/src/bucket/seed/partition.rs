//! Shipping one partition: its segments in offset order, each as data objects
//! first and its manifest last, under a lease.
//!
//! The lease is taken lazily, at the first segment that needs a write, so a
//! run that finds everything shipped writes nothing at all. Taking it re-lists
//! the bucket: a decision is only acted on when it was made from a listing
//! taken while holding the lease, and the lease is checked again right before
//! each manifest is committed ([`HeldLease::check_still_holder`]); a shipper
//! that lost it stops there, leaving at most orphan data objects.
//!
//! A segment that the broker changes under us (rolled, compacted, deleted,
//! truncated) makes the partition start over from a fresh directory listing, up
//! to [`PARTITION_ATTEMPTS`] times; what was committed stays committed and is
//! skipped the next time round.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use segment_format::checkpoint::EpochEntry;
use segment_format::dir::{SegmentFileKind, SegmentFiles};
use segment_format::partition_metadata::Uuid;
use segment_format::report::{Finding, Severity};
use segment_format::Defect;
use segmirror_transport::manifest::{
    EpochStart, KeyPrefix, Lease, LogChunk, Manifest, ManifestFile, PartitionKey, ShipperStamp, MANIFEST_FORMAT_V1,
    MANIFEST_FORMAT_V2, MAX_LOG_CHUNKS,
};

use super::chunks::{previous_chunks, Reading};
use super::plan::{decide, Action, Version};
use super::report::{FailureKind, PartitionReport, PartitionStatus};
use super::Progress;
use crate::error::Error;
use crate::source::incremental::ActiveTail;
use crate::source::{
    self, Outcome, PartitionRead, PrepareOptions, Prepared, SegmentStats, SourceGuard, SourcePartition,
};
use segmirror_transport::{BucketIndex, Error as TransportError, ManifestRead, Transport};

/// Fresh starts of one partition after its source changed under a segment. A
/// broker rolls or compacts a given segment once, so a second look normally
/// succeeds; a third failure means the source changes faster than it can be
/// read, and the next run is a better time.
pub const PARTITION_ATTEMPTS: u32 = 3;

/// What every partition job shares.
pub(crate) struct Context<'a> {
    /// What earlier scans found in active segments (see `memory`).
    pub memory: &'a std::sync::Arc<super::SeedMemory>,
    pub store: &'a dyn Transport,
    pub prefix: &'a KeyPrefix,
    pub link: &'a str,
    pub shipper_id: &'a str,
    pub prepare: &'a PrepareOptions,
    pub progress: &'a dyn Progress,
    /// Leases kept from earlier rounds of a continuous shipper (`None`: a one-shot seed, which takes a lease at the
    /// first write of each partition and lets it go at the end).
    pub held: Option<&'a super::HeldLeases>,
    /// Upload committed records only (`super::committed`).
    pub committed: Option<&'a super::committed::CommittedOnly>,
}

/// Why a partition stops early.
enum Stop {
    /// The source changed; start over.
    Changed(String),
    /// Final.
    Status(PartitionStatus),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        let kind = match &e {
            Error::Transport(TransportError::Fenced { .. } | TransportError::LeaseLost { .. }) => FailureKind::Fenced,
            Error::Io { .. } | Error::Transport(TransportError::Io { .. }) => FailureKind::Source,
            _ => FailureKind::Store,
        };
        failed(kind, e.to_string())
    }
}

impl From<TransportError> for Stop {
    fn from(e: TransportError) -> Stop {
        Stop::from(Error::from(e))
    }
}

fn failed(kind: FailureKind, error: String) -> Stop {
    Stop::Status(PartitionStatus::Failed { kind, error })
}

fn source_error(e: segment_format::Error) -> Stop {
    failed(FailureKind::Source, e.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Run blocking work off the async threads.
async fn blocking<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T, Stop> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Stop::from(Error::Task {
            what: what.to_string(),
            message: e.to_string(),
        })
    })
}

/// The manifests of one lineage, read on demand.
#[derive(Default)]
struct Bucket {
    keys: BTreeMap<i64, String>,
    read: BTreeMap<i64, Option<Manifest>>,
}

/// Ship one partition (see the module doc). Never fails: the outcome is in the report.
pub(crate) async fn ship_partition(ctx: &Context<'_>, source: SourcePartition) -> PartitionReport {
    let mut report = PartitionReport::new(&source.topic, source.partition, &source.dir);
    report.source_topic_id = Some(source.topic_id.to_string());
    let key = match PartitionKey::new(ctx.prefix.clone(), ctx.link, &source.topic, source.partition) {
        Ok(k) => k,
        Err(e) => {
            report.status = PartitionStatus::Failed {
                kind: FailureKind::Source,
                error: e.to_string(),
            };
            return report;
        }
    };
    if ctx.held.is_some_and(|h| h.is_fenced(&key)) {
        report.status = PartitionStatus::Failed {
            kind: FailureKind::Fenced,
            error: format!(
                "{}: fenced by a newer lease earlier in this run; another shipper owns it now",
                report.name()
            ),
        };
        return report;
    }
    let lease = ctx.held.and_then(|h| h.get(&key));
    let mut shipper = PartitionShipper {
        ctx,
        source: &source,
        key,
        lease,
        bucket: Bucket::default(),
        counted: BTreeSet::new(),
        report,
    };
    let mut attempt = 1;
    loop {
        match shipper.attempt().await {
            Ok(()) => break,
            Err(Stop::Status(status)) => {
                if let (
                    Some(held),
                    PartitionStatus::Failed {
                        kind: FailureKind::Fenced,
                        ..
                    },
                ) = (ctx.held, &status)
                {
                    // A newer lease took the partition: this shipper never writes it again under the old one.
                    held.forget(&shipper.key);
                }
                shipper.report.status = status;
                break;
            }
            Err(Stop::Changed(reason)) if attempt < PARTITION_ATTEMPTS => {
                tracing::info!(partition = %shipper.report.name(), reason, "source changed; starting the partition over");
                attempt += 1;
            }
            Err(Stop::Changed(reason)) => {
                shipper.report.status = PartitionStatus::Failed {
                    kind: FailureKind::SourceChanged,
                    error: reason,
                };
                break;
            }
        }
    }
    shipper.report
}

struct PartitionShipper<'c, 's> {
    ctx: &'c Context<'c>,
    source: &'s SourcePartition,
    key: PartitionKey,
    lease: Option<Lease>,
    bucket: Bucket,
    /// Segments already counted in progress (a restart must not count them twice).
    counted: BTreeSet<i64>,
    report: PartitionReport,
}

/// What one segment's manifest is built from, besides its files.
struct Common<'e> {
    epochs: &'e [EpochEntry],
    log_start_offset: i64,
}

impl PartitionShipper<'_, '_> {
    fn topic_id(&self) -> Uuid {
        self.source.topic_id
    }

    async fn attempt(&mut self) -> Result<(), Stop> {
        let path = self.source.dir.clone();
        let view = match blocking("read partition", move || source::read_partition(&path))
            .await?
            .map_err(source_error)?
        {
            PartitionRead::View(view) => view,
            PartitionRead::Refused(findings) => {
                return Err(Stop::Status(PartitionStatus::Refused {
                    base_offset: None,
                    findings,
                }))
            }
        };
        let common = Common {
            epochs: &view.epochs,
            log_start_offset: view.log_start_offset(self.source.log_start_checkpoint),
        };
        self.list_bucket().await?;
        for segment in &view.segments {
            let (next_base, snapshot) = (segment.next_base, segment.snapshot.clone());
            self.segment(&segment.files, next_base, snapshot, &segment.later_snapshots, &common)
                .await?;
        }
        Ok(())
    }

    /// List the lineage's manifests (again).
    async fn list_bucket(&mut self) -> Result<(), Stop> {
        let listed = self.ctx.store.list(&self.key.manifests_dir(&self.topic_id())).await?;
        let index = BucketIndex::build(self.ctx.prefix, listed);
        let keys = index
            .partitions
            .get(&self.key)
            .and_then(|p| p.lineages.get(&self.topic_id()))
            .map(|l| l.manifests.iter().map(|(&base, o)| (base, o.key.clone())).collect())
            .unwrap_or_default();
        self.bucket = Bucket {
            keys,
            read: BTreeMap::new(),
        };
        Ok(())
    }

    /// The committed manifest at `base`, if there is a valid one. An invalid
    /// manifest is reported and treated as absent (the new one replaces it).
    async fn shipped(&mut self, base: i64) -> Result<Option<Manifest>, Stop> {
        if let Some(m) = self.bucket.read.get(&base) {
            return Ok(m.clone());
        }
        let Some(key) = self.bucket.keys.get(&base).cloned() else {
            return Ok(None);
        };
        if let Some(m) = self.ctx.held.and_then(|h| h.sealed_manifest(&key)) {
            self.bucket.read.insert(base, Some(m.clone()));
            return Ok(Some(m));
        }
        let manifest = match self.ctx.store.read_manifest(self.ctx.prefix, &key).await? {
            ManifestRead::Valid(m) => Some(*m),
            ManifestRead::Invalid(e) => {
                let mut finding = e.finding(&key, Some(base));
                finding.severity = Severity::Warning;
                self.warn(finding);
                None
            }
            ManifestRead::Gone => None,
        };
        if let Some(held) = self.ctx.held {
            held.note_manifest(&key, manifest.as_ref());
        }
        self.bucket.read.insert(base, manifest.clone());
        Ok(manifest)
    }

    fn warn(&mut self, finding: Finding) {
        tracing::warn!(partition = %self.report.name(), %finding, "seed warning");
        self.report.warnings.push(finding);
    }

    /// Count a segment in the progress once, however many attempts see it.
    fn progress(&mut self, base: i64, bytes: u64) {
        if self.counted.insert(base) {
            self.ctx.progress.advance(bytes);
            self.ctx.progress.segment_done();
        }
    }

    /// Take the lease if not held yet; re-list the bucket under it.
    async fn ensure_lease(&mut self) -> Result<bool, Stop> {
        if self.lease.is_some() {
            return Ok(false);
        }
        let lease = self.ctx.store.acquire_lease(&self.key, self.ctx.shipper_id).await?;
        self.report.lease_epoch = Some(lease.epoch);
        if let Some(held) = self.ctx.held {
            held.keep(&self.key, &lease);
        }
        self.lease = Some(lease);
        self.list_bucket().await?;
        Ok(true)
    }

    async fn segment(
        &mut self,
        segment: &SegmentFiles,
        next_base: Option<i64>,
        snapshot: Option<PathBuf>,
        later_snapshots: &[(i64, PathBuf)],
        common: &Common<'_>,
    ) -> Result<(), Stop> {
        let base = segment.base_offset;
        // A continuous shipper's round of the active segment from the state kept since the last: the reading of
        // the new bytes and the state after them, kept once the version is committed.
        let mut incremental: Option<(Reading, ActiveTail)> = None;
        // The source version: cheap for a sealed segment (its range is known
        // from the listing), a full preparation for the active one.
        let (source, prepared) = match next_base {
            Some(next) => {
                let log_size = match tokio::fs::metadata(&segment.log).await {
                    Ok(m) => m.len(),
                    Err(e) => return Err(Stop::Changed(format!("{}: {e}", segment.log.display()))),
                };
                let source = Version {
                    next,
                    sealed: true,
                    log_size,
                };
                (source, None)
            }
            None => {
                let from_state = self.incremental(segment, snapshot.clone()).await?;
                if let Some((prepared, reading, state)) = from_state {
                    incremental = Some((reading, state));
                    self.report.excluded_tail_bytes = prepared.excluded_tail;
                    (active_version(&prepared), Some(prepared))
                } else {
                    let (log, verify) = (segment.log.clone(), self.ctx.prepare.verify.clone());
                    let memory = self.ctx.memory;
                    // The file exactly as an earlier scan found it: its version from the identity and the bytes
                    // around the prefix's end, without reading the rest (see `memory`).
                    let recalled = blocking("stat segment", {
                        let memory = Arc::clone(memory);
                        move || memory.recall(&log, &verify)
                    })
                    .await?;
                    self.report.tail_check_bytes += recalled.checked_bytes;
                    match recalled.fact {
                        Some(fact) => {
                            self.report.excluded_tail_bytes = fact.excluded_tail();
                            let source = Version {
                                next: fact.next,
                                sealed: false,
                                log_size: fact.prefix,
                            };
                            (source, None)
                        }
                        None => {
                            if let Some(held) = self.ctx.held {
                                held.count_full_read();
                            }
                            let prepared = self.prepare(segment, None, snapshot.clone()).await?;
                            self.report.excluded_tail_bytes = prepared.excluded_tail;
                            (active_version(&prepared), Some(prepared))
                        }
                    }
                }
            }
        };
        let end = match later_snapshots
            .iter()
            .find(|(o, _)| *o == source.next && source.next > base)
        {
            Some((_, path)) if !source.sealed => {
                let (path, next) = (path.clone(), source.next);
                let (end, warning) = blocking("read end snapshot", move || source::end_snapshot(&path, next))
                    .await?
                    .map_err(source_error)?;
                if let Some(w) = warning {
                    self.warn(w);
                }
                end
            }
            _ => None,
        };
        // Progress counts the whole `.log`, the unshipped tail included.
        let progress_bytes = source.log_size
            + if next_base.is_none() {
                self.report.excluded_tail_bytes
            } else {
                0
            };
        let mut shipped = self.shipped(base).await?;
        let mut action = decide(shipped.as_ref().map(version_of), source);
        if matches!(action, Action::Ship | Action::Seal) && self.ensure_lease().await? {
            shipped = self.shipped(base).await?;
            action = decide(shipped.as_ref().map(version_of), source);
        }
        if let (Action::Skip, Some(m), Some(end)) = (action, &shipped, &end) {
            if !m.sealed && m.end_snapshot.is_none() {
                // The source has written its log-end snapshot since this version was shipped (a clean shutdown).
                self.add_end_snapshot(m.clone(), end.clone(), common).await?;
                self.progress(base, progress_bytes);
                return Ok(());
            }
        }
        let active = next_base.is_none();
        let (reading, state) = match incremental {
            Some((reading, state)) => (Some(reading), Some(state)),
            None => (None, None),
        };
        let outcome = self
            .act(
                segment,
                snapshot,
                common,
                (action, shipped, source),
                prepared,
                next_base,
                end,
                reading,
            )
            .await;
        if outcome.is_ok() && active {
            match state {
                // Committed (or nothing new): the bucket's version is the state's.
                Some(state) => {
                    if let Some(held) = self.ctx.held {
                        held.keep_tail(&self.source.dir, state);
                    }
                }
                None => self.establish(segment).await?,
            }
        }
        if outcome.is_ok() {
            self.progress(base, progress_bytes);
        }
        outcome
    }

    /// What `segment` decided, done.
    #[allow(clippy::too_many_arguments)]
    async fn act(
        &mut self,
        segment: &SegmentFiles,
        snapshot: Option<PathBuf>,
        common: &Common<'_>,
        (action, shipped, source): (Action, Option<Manifest>, Version),
        mut prepared: Option<Box<Prepared>>,
        next_base: Option<i64>,
        end: Option<source::EndSnapshot>,
        reading: Option<Reading>,
    ) -> Result<(), Stop> {
        let base = segment.base_offset;
        match (action, shipped) {
            (Action::Skip, shipped) => {
                self.report.segments_already_shipped += 1;
                self.report.shipped_through = shipped.map(|m| m.next_offset);
                Ok(())
            }
            (Action::Diverged(d), Some(shipped)) => Err(Stop::Status(PartitionStatus::Diverged {
                base_offset: base,
                shipped_next_offset: shipped.next_offset,
                source_next_offset: source.next,
                reason: d.describe().to_string(),
            })),
            (Action::Seal, Some(shipped)) => self.seal(segment, snapshot, shipped, common).await,
            (_, shipped) => {
                let prepared = match (prepared.take(), next_base) {
                    (Some(p), _) => p,
                    (None, next) => {
                        let p = self.prepare(segment, next, snapshot.clone()).await?;
                        if next.is_none() && p.range.next() != source.next {
                            // The active segment grew since the remembered scan: decide on what it holds now.
                            return Err(Stop::Changed(format!(
                                "{}: grew while its shipped version was compared",
                                segment.log.display()
                            )));
                        }
                        p
                    }
                };
                // A grown version of a shipped active segment references what was shipped and uploads the rest.
                let reuse = match &shipped {
                    Some(m) if !m.sealed => previous_chunks(m),
                    _ => Vec::new(),
                };
                self.ship(segment, snapshot, *prepared, end, common, reuse, reading)
                    .await
            }
        }
    }

    async fn prepare(
        &mut self,
        segment: &SegmentFiles,
        next_base: Option<i64>,
        snapshot: Option<PathBuf>,
    ) -> Result<Box<Prepared>, Stop> {
        let segment = segment.clone();
        let segment_log = segment.log.clone();
        let options = self.ctx.prepare.clone();
        let base = segment.base_offset;
        let (outcome, footprint) = blocking("prepare segment", move || {
            // Before the check reads the `.log`: which of its pages the broker had cached (`source::footprint`).
            let footprint = source::CacheFootprint::before_reading(&segment.log);
            let outcome = match next_base {
                Some(next) => source::bound_sealed(&segment, next, snapshot.as_deref(), &options),
                None => source::bound_active(&segment, snapshot.as_deref(), &options),
            };
            (outcome, footprint)
        })
        .await?;
        match outcome.map_err(source_error)? {
            Outcome::Ready(mut p) => {
                p.cache_footprint = footprint;
                self.report.log_bytes_scanned += p.log_bytes_scanned;
                if let (None, Some((identity, taken))) = (next_base, p.source_identity) {
                    let scanned = super::memory::Scanned {
                        identity,
                        prefix: p.log_len(),
                        next: p.range.next(),
                        deep: self.ctx.prepare.verify.is_deep(),
                        strict: self.ctx.prepare.verify.is_strict(),
                    };
                    let memory = Arc::clone(self.ctx.memory);
                    blocking("remember the segment", move || {
                        memory.remember(&segment_log, scanned, taken)
                    })
                    .await?;
                }
                Ok(p)
            }
            Outcome::Refused(findings) => Err(Stop::Status(PartitionStatus::Refused {
                base_offset: Some(base),
                findings,
            })),
            Outcome::Changed(reason) => Err(Stop::Changed(reason)),
        }
    }

    /// Upload a prepared version, check the source did not change, commit. `reading`: the new bytes an incremental
    /// round read already.
    #[allow(clippy::too_many_arguments)]
    async fn ship(
        &mut self,
        segment: &SegmentFiles,
        snapshot: Option<PathBuf>,
        prepared: Prepared,
        end: Option<source::EndSnapshot>,
        common: &Common<'_>,
        reuse: Vec<LogChunk>,
        mut reading: Option<Reading>,
    ) -> Result<(), Stop> {
        let base = segment.base_offset;
        let next = prepared.range.next();
        // Committed records only: nothing of the version leaves before the high watermark covers its last batch.
        if let (Some(gate), Some(last)) = (self.ctx.committed, prepared.stats.last_offset) {
            let started = std::time::Instant::now();
            if let super::committed::Admission::NotYet(bound) =
                gate.wait(self.key.topic(), self.key.partition(), last).await
            {
                return Err(failed(
                    FailureKind::NotCommitted,
                    format!(
                        "segment {base}: offsets up to {last} are not committed at the source yet (high watermark: \
                         {bound:?} after {:?}); nothing uploaded, a later round ships them",
                        started.elapsed()
                    ),
                ));
            }
        }
        let log_len = prepared.log_len();
        // Chunked when there is something to reference, the source grew past it, and the list stays bounded (else
        // the segment is shipped whole once, v1, and chunking starts again from that version).
        let mut chunked = reuse.last().is_some_and(|c| c.to < log_len) && reuse.len() < MAX_LOG_CHUNKS;
        let mut files = Vec::with_capacity(prepared.files.len());
        let mut chunks = Vec::new();
        for file in &prepared.files {
            let shipped = if chunked && file.kind == SegmentFileKind::Log {
                let chunk_next = prepared.stats.last_offset.map_or(next, |l| l.saturating_add(1));
                match self
                    .upload_chunked(base, next, chunk_next, file, &reuse, prepared.sealed, reading.take())
                    .await?
                {
                    Some((log, all)) => {
                        chunks = all;
                        log
                    }
                    None => {
                        chunked = false;
                        self.upload(base, next, file).await?
                    }
                }
            } else {
                self.upload(base, next, file).await?
            };
            if let (SegmentFileKind::Log, SourceGuard::LogCrc32c(crc)) = (file.kind, &prepared.guard) {
                if shipped.crc32c != *crc {
                    return Err(Stop::Changed(format!(
                        "{}: the uploaded prefix differs from the verified one (rewritten while shipped)",
                        file.path.display()
                    )));
                }
            }
            files.push(shipped);
        }
        if let SourceGuard::Stamps(before) = &prepared.guard {
            let (segment, before) = (segment.clone(), before.clone());
            let unchanged = blocking("stat segment", move || {
                source::stamps(&segment, snapshot.as_deref()) == before
            })
            .await?;
            if !unchanged {
                return Err(Stop::Changed(format!(
                    "segment {base}: replaced, truncated or deleted at the source while shipped"
                )));
            }
        }
        // Shipped: the pages the check and the upload brought into the cache go (the broker's own stay).
        let footprint = prepared.cache_footprint;
        if footprint.uncached_bytes() > 0 {
            blocking("drop the segment's pages", move || footprint.release()).await?;
        }
        for warning in prepared.warnings {
            self.warn(warning);
        }
        let mut manifest = self.manifest(base, next, prepared.sealed, files, common, prepared.stats);
        if chunked {
            manifest.format = MANIFEST_FORMAT_V2.to_string();
            manifest.log_chunks = chunks;
        }
        if let Some(end) = end.filter(|_| !prepared.sealed && next > base) {
            manifest.end_snapshot = Some(self.upload_end_snapshot(base, next, end).await?);
        }
        self.commit(manifest).await
    }

    fn manifest(
        &self,
        base: i64,
        next: i64,
        sealed: bool,
        files: Vec<ManifestFile>,
        common: &Common<'_>,
        stats: SegmentStats,
    ) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT_V1.to_string(),
            link: self.ctx.link.to_string(),
            topic: self.source.topic.clone(),
            partition: self.source.partition,
            source_topic_id: self.topic_id(),
            source_cluster_id: self.source.cluster_id.clone(),
            base_offset: base,
            first_offset: stats.first_offset,
            last_offset: stats.last_offset,
            next_offset: next,
            batches: stats.batches,
            records: stats.records,
            max_timestamp: stats.max_timestamp,
            sealed,
            epochs: epochs_for(common.epochs, base, next),
            log_start_offset: common.log_start_offset,
            files,
            end_snapshot: None,
            log_chunks: Vec::new(),
            shipper: ShipperStamp {
                id: self.ctx.shipper_id.to_string(),
                lease_epoch: self.lease.as_ref().map_or(0, |l| l.epoch),
            },
            created_at_ms: now_ms(),
        }
    }

    /// Validate, check the lease, write the manifest: the commit point.
    async fn commit(&mut self, manifest: Manifest) -> Result<(), Stop> {
        let base = manifest.base_offset;
        let key = self
            .key
            .manifest_key(&self.topic_id(), base)
            .map_err(|e| failed(FailureKind::Source, e.to_string()))?;
        if let Err(problem) = manifest
            .validate()
            .and_then(|()| manifest.check_location(self.ctx.prefix, &key))
        {
            return Err(Stop::Status(PartitionStatus::Refused {
                base_offset: Some(base),
                findings: vec![Finding::error(
                    Path::new(&key),
                    None,
                    Some(base),
                    Defect::Other {
                        message: format!("the source does not make a valid manifest: {problem}"),
                    },
                )],
            }));
        }
        let Some(lease) = &self.lease else {
            return Err(failed(FailureKind::Store, "no lease held at commit".into()));
        };
        // The transport checks the lease (a newer one fences this shipper) and writes the manifest.
        self.ctx.store.commit(self.ctx.prefix, lease, &manifest).await?;
        tracing::debug!(partition = %self.report.name(), base, next = manifest.next_offset, sealed = manifest.sealed, "committed");
        self.report.segments_shipped += 1;
        self.report.shipped_through = Some(manifest.next_offset);
        if let Some(held) = self.ctx.held {
            held.note_manifest(&key, Some(&manifest));
        }
        self.bucket.keys.insert(base, key);
        self.bucket.read.insert(base, Some(manifest));
        Ok(())
    }
}

fn version_of(m: &Manifest) -> Version {
    Version {
        next: m.next_offset,
        sealed: m.sealed,
        log_size: m.file(SegmentFileKind::Log).map_or(0, |f| f.size),
    }
}

/// The leader epochs a manifest of `[base, next)` carries: the one in force at
/// `base` (which may start earlier) and each one starting inside the range.
pub(crate) fn epochs_for(entries: &[EpochEntry], base: i64, next: i64) -> Vec<EpochStart> {
    let in_force = entries.iter().rev().find(|e| e.start_offset <= base);
    in_force
        .into_iter()
        .chain(
            entries
                .iter()
                .filter(|e| e.start_offset > base && e.start_offset < next),
        )
        .map(|e| EpochStart {
            epoch: e.epoch,
            start_offset: e.start_offset,
        })
        .collect()
}

mod incremental;
mod recommit;
mod upload;

/// The version of the active segment a preparation describes: its offsets and the `.log` prefix it ships.
fn active_version(prepared: &Prepared) -> Version {
    Version {
        next: prepared.range.next(),
        sealed: false,
        log_size: prepared.files.first().map_or(0, |f| f.len),
    }
}

#[cfg(test)]
#[path = "partition_tests.rs"]
mod tests;
