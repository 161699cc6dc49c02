//! The bucket scrubber: is what the bucket holds a complete, consistent mirror?
//!
//! A bucket outlives the processes that wrote it, is written by several of them
//! over time, and can be damaged by people and by software. The audit reads
//! everything under a prefix and reports, like `segmirror verify` does for a log
//! dir, every problem rather than the first, each as a [`Finding`] whose path is
//! the object key, tagged with the [`Check`] that found it.
//!
//! What is checked, per partition and lineage (topic id):
//! - **Keys**: anything under the prefix that is not a contract key, or not an
//!   object at all (a FIFO, a link, a name that is no legal key in a local
//!   folder) ([`Check::UnknownKey`], warning); upload temp files a killed upload
//!   left in a local folder (`<key>#<n>`, [`Check::UploadLeftover`], warning).
//! - **Leases**: the current (highest) lease is read and validated; older epochs
//!   are normal history. A manifest committed under an epoch above every lease
//!   ([`Check::UnleasedCommit`], error); a manifest committed under an older
//!   epoch after one committed under a newer epoch ([`Check::StaleLeaseCommit`],
//!   warning: a fenced shipper's last write, or clock skew between hosts).
//! - **Manifests**: size cap, JSON, format version, internal consistency and
//!   location ([`Check::InvalidManifest`]); each named data object exists
//!   ([`Check::MissingObject`]), has the recorded size ([`Check::SizeMismatch`])
//!   and, unless disabled, the recorded SHA-256 and CRC-32C, by downloading and
//!   hashing it as a stream ([`Check::HashMismatch`]).
//! - **Orphans**: data objects no valid manifest names ([`Check::OrphanObject`],
//!   warning): superseded versions of a re-shipped active segment, interrupted
//!   uploads. Safe to delete, never needed by the applier.
//! - **Offset chain** (valid manifests in base-offset order). Kafka treats a
//!   segment's upper bound as the next segment's base offset (retention and the
//!   cleaner reason about `[base_i, base_{i+1})`; a base offset is only a lower
//!   bound on the offsets inside, which compaction or a follower fetching a
//!   compacted leader may skip, and the cleaner keeps the first merged segment's
//!   base offset). A sealed manifest's `next_offset` is that upper bound, so
//!   consecutive manifests chain exactly, `next_i == base_{i+1}`, however the
//!   offsets inside were compacted. Departures:
//!   - `next_i > base_{i+1}` where manifest `i` is newer and covers `i+1`
//!     entirely: the cleaner merged `i+1` into `i`, and the old manifest is
//!     stale ([`Check::SupersededManifest`], warning; the applier must skip it);
//!     any other overlap is an error ([`Check::OffsetOverlap`]).
//!   - `next_i < base_{i+1}` after an unsealed manifest: the active segment was
//!     shipped up to its end at the time and has not been re-shipped sealed yet
//!     ([`Check::UnshippedTail`], warning: incomplete, not corrupt).
//!   - `next_i < base_{i+1}` after a sealed manifest, with every offset of the
//!     gap below the source's log start offset recorded by a later shipment:
//!     retention deleted them at the source before they were shipped
//!     ([`Check::RetentionGap`], warning).
//!   - any other gap: offsets the source had and the bucket lacks — data loss
//!     ([`Check::OffsetGap`], error).
//! - **Leader epochs** must not go backwards from one segment to the next
//!   ([`Check::EpochRegression`], error; reported where the offsets chain or
//!   leave a hole retention explains: an overlap or offset gap is already an
//!   error on that key).
//!
//!   Both chain checks are the one succession rule
//!   (`segmirror_transport::succession`) applied to each manifest and the one
//!   before it; this module maps its verdict to a finding.
//! - **Lineages**: more than one topic id under a partition means the source
//!   topic was recreated; reported ([`Check::LineageBreak`], warning), never
//!   merged.
//! - **Deep** (optional): each valid segment is downloaded to a temporary
//!   directory and verified with `segment_format::verify` (every batch CRC,
//!   records, indexes, snapshot) ([`Check::DeepVerify`]), and its batch and
//!   record counts and offsets are compared with the manifest
//!   ([`Check::ManifestDataMismatch`]).
//!
//! Objects that cannot be read are [`Check::Unreadable`] findings; only a failed
//! listing aborts the audit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::bucket::traits::SegmentSource;
use segment_format::dir::SegmentFileKind;
use segment_format::partition_metadata::Uuid;
use segment_format::report::{Finding, Severity};
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::Defect;
use segmirror_contract::index::{IndexedLineage, IndexedPartition, ManifestRead};
use segmirror_contract::manifest::{KeyPrefix, Lease, Manifest, ObjectKey, ObjectKind, PartitionKey};
use segmirror_contract::succession::{self, succession, EpochSpan, Gap, Verdict};

use crate::bucket::store::lease::read_lease;
use crate::bucket::store::Store;
use segmirror_contract::error::{Error, Result};

/// What an audit does beyond reading manifests and listings.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Download and hash every data object named by a manifest.
    pub verify_hashes: bool,
    /// Download each segment and run the verification engine on it.
    pub deep: bool,
    /// Where deep verification stages segments (default: the system temp dir).
    pub temp_dir: Option<PathBuf>,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            verify_hashes: true,
            deep: false,
            temp_dir: None,
        }
    }
}

/// Which check produced a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    UnknownKey,
    InvalidLease,
    InvalidManifest,
    Unreadable,
    MissingObject,
    SizeMismatch,
    HashMismatch,
    OrphanObject,
    OffsetGap,
    RetentionGap,
    UnshippedTail,
    OffsetOverlap,
    SupersededManifest,
    EpochRegression,
    UnleasedCommit,
    StaleLeaseCommit,
    LineageBreak,
    DeepVerify,
    ManifestDataMismatch,
    UploadLeftover,
}

/// A finding and the check behind it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditFinding {
    pub check: Check,
    #[serde(flatten)]
    pub finding: Finding,
}

/// One lineage (source topic id) of a partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LineageSummary {
    pub topic_id: String,
    pub manifests: u64,
    pub valid_manifests: u64,
    /// Lowest base offset among valid manifests.
    pub base_offset: Option<i64>,
    /// Highest next offset among valid manifests.
    pub next_offset: Option<i64>,
    /// Bytes of data objects under the lineage.
    pub data_bytes: u64,
    /// Newest `created_at_ms` among valid manifests.
    pub last_commit_ms: Option<i64>,
}

/// One partition of one link.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionSummary {
    pub link: String,
    pub topic: String,
    pub partition: i32,
    /// Lease objects present (history plus the current one).
    pub lease_epochs: u64,
    /// The highest-epoch lease, if readable.
    pub current_lease: Option<Lease>,
    /// Oldest lineage first (by last commit).
    pub lineages: Vec<LineageSummary>,
}

/// Everything an audit found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AuditReport {
    pub prefix: String,
    pub objects: u64,
    pub bytes: u64,
    /// Bytes downloaded to check hashes (and for deep verification).
    pub bytes_downloaded: u64,
    pub partitions: Vec<PartitionSummary>,
    pub findings: Vec<AuditFinding>,
}

impl AuditReport {
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.finding.severity == Severity::Error)
            .count()
    }

    pub fn warnings(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.finding.severity == Severity::Warning)
            .count()
    }

    /// No error findings (warnings allowed).
    pub fn is_sound(&self) -> bool {
        self.errors() == 0
    }

    /// Findings of one check.
    pub fn of(&self, check: Check) -> impl Iterator<Item = &AuditFinding> {
        self.findings.iter().filter(move |f| f.check == check)
    }

    fn push(&mut self, check: Check, finding: Finding) {
        self.findings.push(AuditFinding { check, finding });
    }

    fn error(&mut self, check: Check, key: &str, offset: Option<i64>, defect: Defect) {
        self.push(check, Finding::error(key, None, offset, defect));
    }

    fn warning(&mut self, check: Check, key: &str, offset: Option<i64>, defect: Defect) {
        self.push(check, Finding::warning(key, None, offset, defect));
    }
}

fn other(message: String) -> Defect {
    Defect::Other { message }
}

/// Audit everything under `prefix` (see the module doc).
pub async fn audit_store(store: &Store, prefix: &KeyPrefix, options: &AuditOptions) -> Result<AuditReport> {
    let mut report = AuditReport {
        prefix: prefix.to_string(),
        ..Default::default()
    };
    let index = SegmentSource::index(store, prefix, None).await?;
    for skipped in &index.skipped {
        report.warning(
            Check::UnknownKey,
            &skipped.key,
            None,
            other(format!("not an object segmirror can read: {}", skipped.reason)),
        );
    }
    for leftover in &index.temporary {
        report.objects += 1;
        report.bytes += leftover.size;
        report.warning(
            Check::UploadLeftover,
            &leftover.key,
            None,
            other(format!(
                "an upload's temporary file ({} bytes): left by a killed upload unless one is under way; \
                 the next `segmirror seed` removes it",
                leftover.size
            )),
        );
    }
    report.objects += index.objects;
    report.bytes += index.bytes;
    for foreign in &index.foreign {
        report.warning(
            Check::UnknownKey,
            &foreign.key,
            None,
            other(format!("not a segmirror key: {}", foreign.reason)),
        );
    }
    let partitions = index.partitions;
    for (partition, objects) in partitions {
        let summary = audit_partition(store, &partition, objects, options, &mut report).await;
        report.partitions.push(summary);
    }
    Ok(report)
}

async fn audit_partition(
    store: &Store,
    partition: &PartitionKey,
    objects: IndexedPartition,
    options: &AuditOptions,
    report: &mut AuditReport,
) -> PartitionSummary {
    let max_lease_epoch = objects.leases.keys().next_back().copied();
    let mut current_lease = None;
    if let Some(epoch) = max_lease_epoch {
        match read_lease(store, partition, epoch).await {
            Ok(lease) => current_lease = Some(lease),
            Err(e) => push_error(report, Check::InvalidLease, &partition.lease_key(epoch), None, &e),
        }
    }

    let mut lineages = Vec::new();
    let mut all_valid: Vec<(String, Manifest)> = Vec::new();
    for (topic_id, lineage) in objects.lineages {
        let (summary, valid) = audit_lineage(store, partition, &topic_id, lineage, options, report).await;
        for (key, m) in &valid {
            if max_lease_epoch.is_none_or(|max| m.shipper.lease_epoch > max) {
                report.error(
                    Check::UnleasedCommit,
                    key,
                    Some(m.base_offset),
                    other(format!(
                        "committed under lease epoch {} but the highest lease in the bucket is {}",
                        m.shipper.lease_epoch,
                        max_lease_epoch.map_or_else(|| "none".to_string(), |e| e.to_string())
                    )),
                );
            }
        }
        all_valid.extend(valid);
        lineages.push((topic_id, summary));
    }
    stale_lease_commits(&all_valid, report);

    // Oldest lineage first; every later one is a recreated topic.
    lineages.sort_by_key(|(id, l)| (l.last_commit_ms.unwrap_or(i64::MIN), *id));
    for pair in lineages.windows(2) {
        if let [(_, old), (new_id, new)] = pair {
            report.warning(
                Check::LineageBreak,
                &partition.lineage_dir(new_id),
                new.base_offset,
                other(format!(
                    "topic id {} follows topic id {} under {}-{} (the source topic was recreated); lineages are kept apart",
                    new.topic_id,
                    old.topic_id,
                    partition.topic(),
                    partition.partition()
                )),
            );
        }
    }

    PartitionSummary {
        link: partition.link().to_string(),
        topic: partition.topic().to_string(),
        partition: partition.partition(),
        lease_epochs: objects.leases.len() as u64,
        current_lease,
        lineages: lineages.into_iter().map(|(_, l)| l).collect(),
    }
}

/// Manifests in commit order must not go back to an older lease epoch.
fn stale_lease_commits(manifests: &[(String, Manifest)], report: &mut AuditReport) {
    let mut by_time: Vec<&(String, Manifest)> = manifests.iter().collect();
    by_time.sort_by_key(|(key, m)| (m.created_at_ms, key.clone()));
    let mut newest: Option<(u64, &str)> = None;
    for (key, m) in by_time {
        let epoch = m.shipper.lease_epoch;
        match newest {
            Some((seen, seen_key)) if epoch < seen => report.warning(
                Check::StaleLeaseCommit,
                key,
                Some(m.base_offset),
                other(format!(
                    "committed under lease epoch {epoch} after {seen_key} was committed under epoch {seen} \
                     (a fenced shipper's last write, or clock skew between shippers)"
                )),
            ),
            Some((seen, _)) if epoch == seen => {}
            _ => newest = Some((epoch, key)),
        }
    }
}

fn push_error(report: &mut AuditReport, check: Check, key: &str, offset: Option<i64>, err: &Error) {
    report.push(check, err.finding(key, offset));
}

async fn audit_lineage(
    store: &Store,
    partition: &PartitionKey,
    topic_id: &Uuid,
    lineage: IndexedLineage,
    options: &AuditOptions,
    report: &mut AuditReport,
) -> (LineageSummary, Vec<(String, Manifest)>) {
    let mut valid: Vec<(String, Manifest)> = Vec::new();
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    let mut invalid_bases: BTreeSet<i64> = BTreeSet::new();
    for (&base, info) in &lineage.manifests {
        let key = info.key.as_str();
        let manifest = match read_manifest(store, partition.prefix(), key).await {
            Ok(m) => m,
            Err((check, e)) => {
                push_error(report, check, key, Some(base), &e);
                invalid_bases.insert(base);
                continue;
            }
        };
        let mut intact = true;
        // Chunks are objects like files: referenced (not orphans), checked to exist, sized and hashed.
        for file in &manifest.objects() {
            referenced.insert(file.key.clone());
            let Some(object) = lineage.data.get(&file.key) else {
                report.error(
                    Check::MissingObject,
                    &file.key,
                    Some(base),
                    other(format!("named by {key} but not in the bucket")),
                );
                intact = false;
                continue;
            };
            if object.size != file.size {
                report.error(
                    Check::SizeMismatch,
                    &file.key,
                    Some(base),
                    other(format!(
                        "object is {} bytes, manifest {key} says {}",
                        object.size, file.size
                    )),
                );
                intact = false;
                continue;
            }
            if options.verify_hashes {
                match store.hash_object(&file.key).await {
                    Ok(digest) => {
                        report.bytes_downloaded += digest.size;
                        if digest.sha256 != file.sha256 {
                            report.error(
                                Check::HashMismatch,
                                &file.key,
                                Some(base),
                                other(format!(
                                    "sha256 is {}, manifest {key} says {}",
                                    digest.sha256, file.sha256
                                )),
                            );
                            intact = false;
                        }
                        if digest.crc32c != file.crc32c {
                            report.error(
                                Check::HashMismatch,
                                &file.key,
                                Some(base),
                                Defect::CrcMismatch {
                                    stored: file.crc32c,
                                    computed: digest.crc32c,
                                },
                            );
                            intact = false;
                        }
                    }
                    Err(Error::NotFound { .. }) => {
                        report.error(
                            Check::MissingObject,
                            &file.key,
                            Some(base),
                            other(format!("named by {key}; deleted during the audit")),
                        );
                        intact = false;
                    }
                    Err(e) => {
                        push_error(report, Check::Unreadable, &file.key, Some(base), &e);
                        intact = false;
                    }
                }
            }
        }
        if options.deep && intact {
            deep_verify(store, key, &manifest, options, report).await;
        }
        valid.push((key.to_string(), manifest));
    }

    // Data nobody points at.
    for (data_key, _) in lineage.data.iter().filter(|(k, _)| !referenced.contains(*k)) {
        let base = match ObjectKey::parse(partition.prefix(), data_key) {
            Ok(ObjectKey {
                kind: ObjectKind::Data { range, .. },
                ..
            }) => Some(range.base()),
            _ => None,
        };
        let why = match base {
            Some(b) if invalid_bases.contains(&b) => "named only by an invalid manifest".to_string(),
            Some(b) => match valid.iter().find(|(_, m)| m.base_offset == b) {
                Some((_, m)) => format!(
                    "an older version of segment {b}: the manifest now covers [{b}, {}); safe to delete",
                    m.next_offset
                ),
                None => format!("no manifest for segment {b} (an interrupted upload?)"),
            },
            None => "not a data key".to_string(),
        };
        report.warning(Check::OrphanObject, data_key, base, other(format!("orphan: {why}")));
    }

    check_chain(&valid, report);

    let summary = LineageSummary {
        topic_id: topic_id.to_string(),
        manifests: lineage.manifests.len() as u64,
        valid_manifests: valid.len() as u64,
        base_offset: valid.iter().map(|(_, m)| m.base_offset).min(),
        next_offset: valid.iter().map(|(_, m)| m.next_offset).max(),
        data_bytes: lineage.data.values().map(|o| o.size).sum(),
        last_commit_ms: valid.iter().map(|(_, m)| m.created_at_ms).max(),
    };
    (summary, valid)
}

/// The shared [`SegmentSource::read_manifest`], with the check a failure is reported under.
async fn read_manifest(store: &Store, prefix: &KeyPrefix, key: &str) -> std::result::Result<Manifest, (Check, Error)> {
    match SegmentSource::read_manifest(store, prefix, key).await {
        Ok(ManifestRead::Valid(m)) => Ok(*m),
        Ok(ManifestRead::Invalid(e @ Error::NotRegularFile { .. })) => Err((Check::Unreadable, e)),
        Ok(ManifestRead::Invalid(e)) => Err((Check::InvalidManifest, e)),
        Ok(ManifestRead::Gone) => Err((Check::Unreadable, Error::NotFound { key: key.to_string() })),
        Err(e) => Err((Check::Unreadable, e)),
    }
}

/// What the succession rule needs of a manifest, with its leader epochs and commit time (the audit weighs both).
fn chain_version(m: &Manifest) -> succession::Version {
    succession::Version {
        epochs: m.epochs.first().zip(m.epochs.last()).map(|(first, last)| EpochSpan {
            first: first.epoch,
            last: last.epoch,
        }),
        committed_at_ms: Some(m.created_at_ms),
        ..m.succession_version()
    }
}

/// The offset-chain and leader-epoch rules of the module doc, over the valid
/// manifests of one lineage in base-offset order: the succession rule's
/// verdict for each manifest against the one before it, mapped to a finding.
fn check_chain(manifests: &[(String, Manifest)], report: &mut AuditReport) {
    let max_log_start = manifests.iter().map(|(_, m)| m.log_start_offset).max().unwrap_or(0);
    let mut previous: Option<&(String, Manifest)> = None;
    for entry in manifests {
        let (key, m) = entry;
        let Some((prev_key, p)) = previous else {
            previous = Some(entry);
            continue;
        };
        match succession(&[chain_version(p)], &chain_version(m), max_log_start) {
            Verdict::Covered { .. } => {
                report.warning(
                    Check::SupersededManifest,
                    key,
                    Some(m.base_offset),
                    other(format!(
                        "[{}, {}) lies inside [{}, {}) of the newer {prev_key} (compaction merged it); \
                         the applier must skip it and it can be deleted",
                        m.base_offset, m.next_offset, p.base_offset, p.next_offset
                    )),
                );
                continue;
            }
            Verdict::Overlap { .. }
            | Verdict::BeforeStart { .. }
            | Verdict::Same
            | Verdict::Replaces { .. }
            | Verdict::GrowsUnderSuccessor { .. }
            | Verdict::SealedGrown { .. }
            | Verdict::Truncated { .. }
            | Verdict::Rewritten { .. } => report.error(
                Check::OffsetOverlap,
                key,
                Some(m.base_offset),
                other(format!(
                    "[{}, {}) overlaps [{}, {}) of {prev_key}",
                    m.base_offset, m.next_offset, p.base_offset, p.next_offset
                )),
            ),
            Verdict::AwaitsSeal {
                gap: Some(Gap { from, to, .. }),
                ..
            } => report.warning(
                Check::UnshippedTail,
                prev_key,
                Some(from),
                other(format!(
                    "segment {} was shipped while active, up to {from}; [{from}, {to}) is not shipped yet",
                    p.base_offset
                )),
            ),
            Verdict::RetentionGap { from, to } => report.warning(
                Check::RetentionGap,
                key,
                Some(from),
                other(format!(
                    "offsets [{from}, {to}) are missing; the source's log start offset reached {max_log_start}, \
                     so retention deleted them before they were shipped"
                )),
            ),
            Verdict::OffsetGap { from, to } => {
                let lost_from = from.max(max_log_start);
                report.error(
                    Check::OffsetGap,
                    key,
                    Some(lost_from),
                    other(format!(
                        "offsets [{lost_from}, {to}) between {prev_key} and this segment are missing \
                         although the source still had them (data loss)"
                    )),
                );
            }
            Verdict::EpochRegression { .. } => {
                if let (Some(last), Some(first)) = (p.epochs.last(), m.epochs.first()) {
                    report.error(
                        Check::EpochRegression,
                        key,
                        Some(m.base_offset),
                        Defect::Epoch {
                            message: format!(
                                "segment starts in epoch {} (at {}) but {prev_key} ends in epoch {} (from {})",
                                first.epoch, first.start_offset, last.epoch, last.start_offset
                            ),
                        },
                    );
                }
            }
            // One lineage per chain, and a chain of one previous manifest is never empty.
            Verdict::Next | Verdict::AwaitsSeal { gap: None, .. } | Verdict::LineageBreak | Verdict::First => {}
        }
        previous = Some(entry);
    }
}

/// Download one segment version and run the verification engine on it.
async fn deep_verify(
    store: &Store,
    manifest_key: &str,
    manifest: &Manifest,
    options: &AuditOptions,
    report: &mut AuditReport,
) {
    let base = manifest.base_offset;
    let temp_root = options.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let staged = tempfile::Builder::new()
        .prefix("segmirror-audit-")
        .tempdir_in(&temp_root)
        .and_then(|t| {
            // A directory name that is not a partition name: the segment is verified alone.
            let dir = t.path().join("segment");
            std::fs::create_dir(&dir).map(|()| (t, dir))
        });
    let (_guard, dir) = match staged {
        Ok(s) => s,
        Err(e) => {
            push_error(
                report,
                Check::Unreadable,
                manifest_key,
                Some(base),
                &Error::io(&temp_root, e),
            );
            return;
        }
    };
    let mut key_of: BTreeMap<PathBuf, String> = BTreeMap::new();
    let chunked = manifest.is_chunked();
    for (i, file) in manifest.objects().iter().enumerate() {
        let mut path = dir.join(file.name.to_string());
        // A chunk is fetched beside the `.log` and appended to it (chunks come in byte order).
        let chunk = chunked && file.name.kind == SegmentFileKind::Log;
        if chunk {
            path = dir.join(format!("chunk-{i}"));
        }
        if let Err(e) = store.get_to_file(&file.key, &path, file.size, &file.sha256).await {
            let check = match e {
                Error::Mismatch { .. } => Check::HashMismatch,
                _ => Check::Unreadable,
            };
            push_error(report, check, &file.key, Some(base), &e);
            return;
        }
        report.bytes_downloaded += file.size;
        if chunk {
            let log = dir.join(file.name.to_string());
            let (p, l) = (path.clone(), log.clone());
            let appended = tokio::task::spawn_blocking(move || append_chunk(&p, &l))
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            if let Err(e) = appended {
                push_error(report, Check::Unreadable, &file.key, Some(base), &Error::io(&log, e));
                return;
            }
            continue;
        }
        key_of.insert(path, file.key.clone());
    }
    let log = dir.join(segment_format::dir::segment_file_name(base, SegmentFileKind::Log));
    let mut paths = vec![log.clone()];
    // The base snapshot and the log-end one, each checked as a producer snapshot.
    for snapshot in manifest
        .file(SegmentFileKind::Snapshot)
        .into_iter()
        .chain(&manifest.end_snapshot)
    {
        paths.push(dir.join(snapshot.name.to_string()));
    }
    let verified = tokio::task::spawn_blocking(move || {
        let options = VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        };
        verify_paths(&paths, &options, &NoProgress)
    })
    .await;
    let verified = match verified {
        Ok(v) => v,
        Err(e) => {
            report.error(
                Check::Unreadable,
                manifest_key,
                Some(base),
                other(format!("verification task failed: {e}")),
            );
            return;
        }
    };
    let rename = |p: &Path| key_of.get(p).map_or_else(|| PathBuf::from(manifest_key), PathBuf::from);
    for mut finding in verified.findings {
        finding.path = rename(&finding.path);
        report.push(Check::DeepVerify, finding);
    }
    for io in verified.io_errors {
        report.error(Check::DeepVerify, manifest_key, Some(base), other(io));
    }
    let Some(summary) = verified
        .partitions
        .iter()
        .find(|s| s.path == log)
        .or(verified.partitions.first())
    else {
        return;
    };
    let mut compare = |what: &str, claimed: String, found: String| {
        if claimed != found {
            report.error(
                Check::ManifestDataMismatch,
                manifest_key,
                Some(base),
                other(format!("manifest says {what} {claimed}, the segment has {found}")),
            );
        }
    };
    compare("batches", manifest.batches.to_string(), summary.batches.to_string());
    compare("records", manifest.records.to_string(), summary.records.to_string());
    compare(
        "first offset",
        format!("{:?}", manifest.first_offset),
        format!("{:?}", summary.first_offset),
    );
    compare(
        "last offset",
        format!("{:?}", manifest.last_offset),
        format!("{:?}", summary.last_offset),
    );
}

#[cfg(test)]
mod tests;

/// Append the downloaded chunk at `chunk` to `log` (created on the first), then remove it.
fn append_chunk(chunk: &Path, log: &Path) -> std::io::Result<()> {
    let mut from = std::fs::File::open(chunk)?;
    let mut to = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    std::io::copy(&mut from, &mut to)?;
    std::fs::remove_file(chunk)
}
