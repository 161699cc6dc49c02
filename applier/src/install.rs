//! Installing one segment version: the crash-safe protocol.
//!
//! 1. **Stage.** Every file the manifest lists is downloaded into `<mirror>/.staging/<topic>-<partition>.<base>-<next>/`,
//!    its size, SHA-256 and CRC-32C checked against the manifest while it streams. A file already in the partition
//!    directory with the manifest's size and hashes (left there by an interrupted run) is used as is, not fetched
//!    again: this is how a crash between the renames and the catalog commit is recovered without a re-download.
//! 2. **Validate.** The verification engine checks the version as a whole (every batch CRC, offsets inside
//!    `[base, next)`, the offset, time and transaction indexes, the producer snapshot) and the data is compared with
//!    the manifest's description of it. The leader epochs are merged with the installed ones and must stay
//!    increasing. Anything wrong is a [`Refusal`] and nothing under the partition directory has changed.
//! 3. **Make durable.** Each staged file gets the source's modification time (Kafka uses a `.log`'s mtime for
//!    time-based retention when its time index is empty) and is fsynced: the one fsync of each file (a download
//!    is not fsynced by the transport, so the time is set before the only fsync, not after a first one).
//! 4. **Rename into place**, in an order that keeps the partition directory loadable after a crash at any point:
//!    for a new segment the indexes, snapshot and transaction index first and the `.log` last, so a `.log` never
//!    appears without its indexes; for a longer version replacing the installed one, the `.log` first, because the
//!    old (shorter) indexes are still correct for a longer log while new index entries would point past an old
//!    one. The log-end producer snapshot (`<next>.snapshot`, only on the last, unsealed version) comes after all of
//!    them — a snapshot at the log end is legal whatever else is there — and then the stale log-end snapshots of
//!    shorter versions (offsets strictly inside `(base, next)`) are removed; a crash in between leaves files the
//!    next run's sweep or reinstall deals with. Then the partition's new `leader-epoch-checkpoint` (staged and
//!    fsynced in step 3 with the version's files) is renamed over the old one, and the directory is fsynced once
//!    for every rename of the version (see [`place`] for why one fsync is enough).
//! 5. The caller records the version in the catalog, in one transaction — only now, so the catalog never claims
//!    more than is durable on disk.
//!
//! A half-written file is never visible under a final name: downloads land in staging, renames are atomic. Files
//! are addressed by the parsed manifest's Kafka file names only.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use segment_format::checkpoint::{leader_epoch_checkpoint_path, EpochEntry, LeaderEpochCheckpoint};
use segment_format::dir::{
    classify_partition_file, PartitionFile, SegmentFileKind, SegmentFiles, PARTITION_METADATA_FILE,
};
use segment_format::durable::{drop_cached, fsync_dir, write_atomically_unflushed, write_synced};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::report::{Finding, Severity};
use segment_format::snapshot::ProducerSnapshot;
use segment_format::verify::{check_segment_against_epochs, TailPolicy, VerifyOptions};
use segmirror_catalog::SegmentVersion;
use segmirror_transport::manifest::{EpochStart, Manifest, ManifestFile};
use segmirror_transport::store::digest_file;
use segmirror_transport::SegmentSource;

use crate::error::{Error, Result};
use crate::report::{Refusal, MAX_REPORTED_FINDINGS};
use segment_format::progress::Progress;

/// Largest producer snapshot read for validation: the bucket contract's limit (46 bytes per producer, room for ~5.8
/// million producers, far beyond any real partition, while a hostile object cannot make the applier read gigabytes
/// into memory).
pub const MAX_SNAPSHOT_BYTES: u64 = segmirror_transport::manifest::MAX_SNAPSHOT_BYTES;

/// The smallest frame a `.log` can hold: a magic-0 message with no key and no value (`LOG_OVERHEAD` 12 +
/// `RECORD_OVERHEAD_V0` 14). Bounds how many batches, hence index entries, a log of a given size can have.
const MIN_FRAME_BYTES: u64 = 26;

/// Rename order of a new segment: the `.log` last, so it never appears without its indexes.
const NEW_SEGMENT_ORDER: [SegmentFileKind; 5] = [
    SegmentFileKind::Snapshot,
    SegmentFileKind::TxnIndex,
    SegmentFileKind::TimeIndex,
    SegmentFileKind::Index,
    SegmentFileKind::Log,
];

/// Rename order of a longer version of the installed segment: the `.log` first (old indexes stay correct for it).
const REPLACEMENT_ORDER: [SegmentFileKind; 5] = [
    SegmentFileKind::Log,
    SegmentFileKind::Index,
    SegmentFileKind::TimeIndex,
    SegmentFileKind::TxnIndex,
    SegmentFileKind::Snapshot,
];

/// One version to install.
pub(crate) struct Target<'a> {
    pub store: &'a dyn SegmentSource,
    pub partition_dir: &'a Path,
    pub staging_dir: PathBuf,
    pub manifest_key: &'a str,
    pub manifest: &'a Manifest,
    /// A longer version of the installed segment at the same base.
    pub replaces: bool,
    pub verify: &'a VerifyOptions,
    pub progress: &'a dyn Progress,
    /// Follow mode: a grown active segment is appended to in place (`append`) when it can be.
    pub appends: Option<&'a append::AppendCache>,
    #[cfg(feature = "failpoints")]
    pub failpoint: Option<std::sync::Arc<crate::failpoint::Armed>>,
}

/// A version whose files are in place and durable; the catalog is not told yet.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub version: SegmentVersion,
    pub fetched_bytes: u64,
    pub reused_bytes: u64,
    pub reused_files: u32,
}

/// Where one file of the version comes from.
#[derive(Debug, Clone)]
enum Source {
    /// Already in the partition directory with the right size and hashes.
    Reuse(PathBuf),
    /// To be downloaded to this staging path.
    Fetch(PathBuf),
}

impl Source {
    fn path(&self) -> &Path {
        match self {
            Source::Reuse(p) | Source::Fetch(p) => p,
        }
    }
}

/// Run `f` on a blocking thread.
async fn blocking<T: Send + 'static>(what: &str, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::task(what.to_string(), e))?
}

#[cfg(feature = "failpoints")]
fn kill_point(armed: Option<&crate::failpoint::Armed>, point: crate::failpoint::FailPoint) -> Result<()> {
    Ok(crate::failpoint::hit(armed, point)?)
}

/// Stage, validate, place (steps 1 to 4 of the module docs). `Ok(Err(_))` is a refusal; the staging directory is
/// then removed and the partition directory is as it was.
pub(crate) async fn install(t: &Target<'_>) -> Result<std::result::Result<Placed, Refusal>> {
    let m = t.manifest;
    if let Some(refusal) = implausible_sizes(m) {
        return Ok(Err(refusal));
    }
    if let Some(cache) = t.appends {
        if let Some(outcome) = append::try_append(t, cache).await? {
            return Ok(outcome);
        }
    }
    // The segment's files, then the log-end snapshot if the version has one (always last: `validate` and `place`
    // tell it from the base snapshot by position).
    let files: Vec<ManifestFile> = m.all_files().cloned().collect();

    // 1. Stage.
    let started = std::time::Instant::now();
    let sources = {
        let (dir, staging, files) = (t.partition_dir.to_path_buf(), t.staging_dir.clone(), files.clone());
        blocking("prepare staging", move || prepare(&dir, &staging, &files)).await?
    };
    let mut fetched_bytes = 0;
    let mut reused_bytes = 0;
    let mut reused_files = 0;
    let mut downloads = Vec::new();
    let mut chunked_log = None;
    for (f, source) in files.iter().zip(&sources) {
        match source {
            Source::Reuse(_) => {
                reused_bytes += f.size;
                reused_files += 1;
                t.progress.advance(f.size);
            }
            // A chunked `.log` names no object: it is assembled from the installed prefix and its new chunks.
            Source::Fetch(path) if m.is_chunked() && f.name.kind == SegmentFileKind::Log => {
                chunked_log = Some(path.clone());
            }
            Source::Fetch(path) => downloads.push(fetch(t.store, f, path, t.progress)),
        }
    }
    for outcome in futures::future::join_all(downloads).await {
        match outcome? {
            Ok(size) => fetched_bytes += size,
            Err(refusal) => return refuse(&t.staging_dir, refusal).await,
        }
    }
    if let Some(path) = chunked_log {
        match chunks::assemble(t.store, m, t.partition_dir, &path, t.progress).await? {
            Ok(assembled) => {
                fetched_bytes += assembled.fetched;
                reused_bytes += assembled.reused;
            }
            Err(refusal) => return refuse(&t.staging_dir, refusal).await,
        }
    }

    // 2. Validate.
    let staged = started.elapsed();
    let checked = {
        let (manifest, key, dir, sources, verify) = (
            m.clone(),
            t.manifest_key.to_string(),
            t.partition_dir.to_path_buf(),
            sources.clone(),
            t.verify.clone(),
        );
        blocking("validate", move || validate(&manifest, &key, &dir, &sources, &verify)).await?
    };
    let epochs = match checked {
        Ok(epochs) => epochs,
        Err(refusal) => return refuse(&t.staging_dir, refusal).await,
    };

    // 3. Make durable (the partition's new leader-epoch checkpoint is staged with the version's files).
    let validated = started.elapsed();
    let staged_checkpoint = epochs.map(|cp| (leader_epoch_checkpoint_path(&t.staging_dir), cp.encode()));
    {
        let (sources, files, checkpoint) = (sources.clone(), files.clone(), staged_checkpoint.clone());
        let sealed = m.sealed;
        blocking("sync staged files", move || {
            for (f, source) in files.iter().zip(&sources) {
                set_mtime_and_sync(source.path(), f.mtime_ms, sealed)?;
            }
            if let Some((path, text)) = &checkpoint {
                write_synced(path, text.as_bytes())?;
            }
            Ok(())
        })
        .await?;
    }
    #[cfg(feature = "failpoints")]
    kill_point(t.failpoint.as_deref(), crate::failpoint::FailPoint::AfterStaging)?;

    // 4. Rename into place, fsync, epochs.
    let synced = started.elapsed();
    {
        let dir = t.partition_dir.to_path_buf();
        let kinds: Vec<(SegmentFileKind, Source, String)> = m
            .files
            .iter()
            .zip(&sources)
            .map(|(f, s)| (f.name.kind, s.clone(), f.name.to_string()))
            .collect();
        let end = m
            .end_snapshot
            .as_ref()
            .zip(sources.get(m.files.len()))
            .map(|(f, s)| (s.clone(), f.name.to_string()));
        let range = (m.base_offset, m.next_offset);
        let replaces = t.replaces;
        #[cfg(feature = "failpoints")]
        let armed = t.failpoint.clone();
        let checkpoint = staged_checkpoint.map(|(path, _)| path);
        blocking("rename into place", move || {
            place(
                &dir,
                range,
                &kinds,
                end.as_ref(),
                replaces,
                checkpoint.as_deref(),
                &|_n| {
                    #[cfg(feature = "failpoints")]
                    kill_point(armed.as_deref(), crate::failpoint::FailPoint::AfterRename(_n))?;
                    Ok(())
                },
            )
        })
        .await?;
    }
    #[cfg(feature = "failpoints")]
    kill_point(t.failpoint.as_deref(), crate::failpoint::FailPoint::BeforeCatalog)?;

    tracing::debug!(
        key = t.manifest_key,
        fetched_bytes,
        stage_ms = staged.as_millis(),
        validate_ms = (validated - staged).as_millis(),
        sync_ms = (synced - validated).as_millis(),
        place_ms = (started.elapsed() - synced).as_millis(),
        "placed"
    );
    let log = m.file(SegmentFileKind::Log);
    let version = SegmentVersion {
        base_offset: m.base_offset,
        next_offset: m.next_offset,
        last_offset: m.last_offset.unwrap_or(m.base_offset),
        size: log.map_or(0, |f| f.size),
        sha256: log.map_or([0; 32], |f| f.sha256.0),
        manifest_key: t.manifest_key.to_string(),
        sealed: m.sealed,
    };
    Ok(Ok(Placed {
        version,
        fetched_bytes,
        reused_bytes,
        reused_files,
    }))
}

/// Remove the staging directory and report the refusal.
async fn refuse(staging: &Path, refusal: Refusal) -> Result<std::result::Result<Placed, Refusal>> {
    remove_staging(staging).await?;
    Ok(Err(refusal))
}

/// Remove one version's staging directory (after a refusal, or once the catalog recorded the version).
pub(crate) async fn remove_staging(staging: &Path) -> Result<()> {
    let staging = staging.to_path_buf();
    blocking("remove staging", move || match fs::remove_dir_all(&staging) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(&staging, e)),
    })
    .await
}

/// A fresh staging directory, and where each file comes from.
fn prepare(partition_dir: &Path, staging: &Path, files: &[ManifestFile]) -> Result<Vec<Source>> {
    match fs::remove_dir_all(staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(staging, e)),
    }
    fs::create_dir_all(staging).map_err(|e| Error::io(staging, e))?;
    let mut sources = Vec::with_capacity(files.len());
    for f in files {
        let name = f.name.to_string();
        let placed = partition_dir.join(&name);
        let reusable = match fs::metadata(&placed) {
            Ok(meta) if meta.is_file() && meta.len() == f.size => {
                let on_disk = digest_file(&placed)?;
                on_disk.size == f.size && on_disk.crc32c == f.crc32c && on_disk.sha256 == f.sha256
            }
            _ => false,
        };
        sources.push(if reusable {
            Source::Reuse(placed)
        } else {
            Source::Fetch(staging.join(&name))
        });
    }
    Ok(sources)
}

/// What a store's failure to deliver an object the manifest names means: a refusal of the manifest (its object
/// is not what it promised, missing, or not a regular file; `object` names its kind), or this side's error.
pub(crate) fn store_refusal(e: segmirror_transport::Error, object: &str) -> Result<Refusal> {
    use segmirror_transport::Error as StoreError;
    match e {
        StoreError::Mismatch {
            key,
            what,
            expected,
            found,
        } => Ok(Refusal::Mismatch {
            key,
            what: what.to_string(),
            expected,
            found,
        }),
        StoreError::NotFound { key } => Ok(Refusal::InvalidManifest {
            reason: format!("it names {object} {key}, which is not in the store"),
        }),
        e @ StoreError::NotRegularFile { .. } => Ok(Refusal::InvalidManifest {
            reason: format!("it names {object} {e}"),
        }),
        e => Err(Error::Store(e)),
    }
}

/// Download one file to its staging path; `Ok(Err(_))` when the store's object is not what the manifest promised.
async fn fetch(
    store: &dyn SegmentSource,
    f: &ManifestFile,
    path: &Path,
    progress: &dyn Progress,
) -> Result<std::result::Result<u64, Refusal>> {
    match store.fetch_manifest_file(f, path).await {
        // The staging directory, and this file with it, is removed by the caller on a refusal.
        Ok(digest) if digest.crc32c != f.crc32c => Ok(Err(Refusal::Mismatch {
            key: f.key.clone(),
            what: "crc32c".into(),
            expected: format!("{:08x}", f.crc32c),
            found: format!("{:08x}", digest.crc32c),
        })),
        Ok(digest) => {
            progress.advance(digest.size);
            Ok(Ok(digest.size))
        }
        Err(e) => store_refusal(e, "data object").map(Err),
    }
}

/// Refuse, before a byte is downloaded, a version whose index or snapshot sizes cannot be true. The verification
/// engine reads indexes whole and the snapshot is read whole, so a lie here would cost memory (and disk), not just
/// time. Kafka adds at most one offset-index and one time-index entry per append (plus the time index's closing
/// entry) and one transaction-index entry per abort marker, so no index outgrows its segment's batches, and no
/// batch is smaller than [`MIN_FRAME_BYTES`].
fn implausible_sizes(m: &Manifest) -> Option<Refusal> {
    let log_size = m.file(SegmentFileKind::Log).map_or(0, |f| f.size);
    let max_entries = m.batches.min(log_size / MIN_FRAME_BYTES + 1);
    for (kind, entry_size, extra) in [
        (SegmentFileKind::Index, 8u64, 0u64),
        (SegmentFileKind::TimeIndex, 12, 1),
        (SegmentFileKind::TxnIndex, 34, 0),
    ] {
        if let Some(f) = m.file(kind) {
            let limit = entry_size.saturating_mul(max_entries.saturating_add(extra));
            if f.size > limit {
                return Some(Refusal::InvalidManifest {
                    reason: format!(
                        "{}: {} bytes is more than {} batches of a {log_size}-byte log can index ({limit} bytes)",
                        f.name, f.size, m.batches
                    ),
                });
            }
        }
    }
    m.file(SegmentFileKind::Snapshot)
        .into_iter()
        .chain(&m.end_snapshot)
        .find(|f| f.size > MAX_SNAPSHOT_BYTES)
        .map(|f| Refusal::InvalidManifest {
            reason: format!(
                "{} ({}): a producer snapshot of {} bytes exceeds the limit of {MAX_SNAPSHOT_BYTES}",
                f.name, f.key, f.size
            ),
        })
}

/// Step 2: the verification engine on the version's files, the manifest's claims, the snapshot, the epochs.
/// Returns the new `leader-epoch-checkpoint` when it changes.
fn validate(
    m: &Manifest,
    manifest_key: &str,
    partition_dir: &Path,
    sources: &[Source],
    verify: &VerifyOptions,
) -> Result<std::result::Result<Option<LeaderEpochCheckpoint>, Refusal>> {
    let path_of = |kind: SegmentFileKind| {
        m.files
            .iter()
            .zip(sources)
            .find(|(f, _)| f.name.kind == kind)
            .map(|(_, s)| s.path().to_path_buf())
    };
    // Name findings by object key (staged files) so a report points at the bucket, not at a staging path.
    let names: HashMap<PathBuf, PathBuf> = m
        .all_files()
        .zip(sources)
        .filter_map(|(f, s)| match s {
            Source::Fetch(p) => Some((p.clone(), PathBuf::from(&f.key))),
            Source::Reuse(_) => None,
        })
        .collect();
    let rename = |mut finding: Finding| {
        if let Some(key) = names.get(&finding.path) {
            finding.path = key.clone();
        }
        finding
    };
    let corrupt = |findings: Vec<Finding>, suppressed: u64| {
        let total = findings.len() as u64 + suppressed;
        let kept: Vec<Finding> = findings.into_iter().take(MAX_REPORTED_FINDINGS).map(rename).collect();
        Refusal::Corrupt {
            more: total - kept.len() as u64,
            findings: kept,
        }
    };
    let (Some(log), Some(index), Some(time_index)) = (
        path_of(SegmentFileKind::Log),
        path_of(SegmentFileKind::Index),
        path_of(SegmentFileKind::TimeIndex),
    ) else {
        // `Manifest::validate` requires all three.
        return Ok(Err(Refusal::InvalidManifest {
            reason: format!("{manifest_key} lacks a .log, .index or .timeindex"),
        }));
    };
    let segment = SegmentFiles {
        base_offset: m.base_offset,
        log: log.clone(),
        index: Some(index),
        time_index: Some(time_index),
        txn_index: path_of(SegmentFileKind::TxnIndex),
    };
    // A shipped version ends at a complete batch: strict. An unsealed one is the source's active segment, whose time
    // index has no closing entry yet.
    let options = VerifyOptions {
        deep: verify.deep,
        strict: true,
    };
    // The manifest's leader epochs are checked against every magic-2 batch's `partitionLeaderEpoch` in the same pass,
    // as `verify` checks a partition against its `leader-epoch-checkpoint`: each batch carries the epoch in force at
    // its offset. A manifest without epochs (a source without a checkpoint) claims nothing to check.
    let claimed_epochs = (!m.epochs.is_empty()).then(|| {
        LeaderEpochCheckpoint::new(
            m.epochs
                .iter()
                .map(|e| EpochEntry {
                    epoch: e.epoch,
                    start_offset: e.start_offset,
                })
                .collect(),
        )
    });
    let check = match check_segment_against_epochs(
        &segment,
        Some(m.next_offset),
        // An unsealed version is the source's active segment (preallocated indexes), cut at a complete batch.
        if m.sealed {
            TailPolicy::Sealed
        } else {
            TailPolicy::ActiveStrict
        },
        &options,
        claimed_epochs.as_ref(),
    ) {
        Ok(check) => check,
        Err(e) if e.is_corrupt() || e.is_incomplete() => return Ok(Err(corrupt(vec![Finding::from_error(&e)], 0))),
        Err(e) => return Err(Error::Format(e)),
    };
    if !check.is_sound() {
        let errors: Vec<Finding> = check.errors().cloned().collect();
        return Ok(Err(corrupt(errors, check.suppressed_findings)));
    }
    let s = &check.summary;
    let log_size = m.file(SegmentFileKind::Log).map_or(0, |f| f.size);
    // Without decompression a legacy (magic 0/1) compressed wrapper counts as one record at its last offset, so a
    // shallow check only bounds the record count from below and the first offset from above; a deep one (and any
    // magic-2 segment) gives the exact values the shipper recorded.
    let exact = options.deep;
    let first_offset_wrong = match (m.first_offset, s.first_offset) {
        (Some(claimed), Some(found)) => claimed > found || (exact && claimed != found),
        (claimed, found) => claimed != found,
    };
    let claims = [
        (
            "batches",
            m.batches.to_string(),
            s.batches.to_string(),
            m.batches != s.batches,
        ),
        (
            "records",
            m.records.to_string(),
            s.records.to_string(),
            m.records < s.records || (exact && m.records != s.records),
        ),
        (
            "first offset",
            format!("{:?}", m.first_offset),
            format!("{:?}", s.first_offset),
            first_offset_wrong,
        ),
        (
            "last offset",
            format!("{:?}", m.last_offset),
            format!("{:?}", s.last_offset),
            m.last_offset != s.last_offset,
        ),
        (
            "well-framed .log bytes",
            log_size.to_string(),
            s.bytes.to_string(),
            log_size != s.bytes,
        ),
    ];
    // An active-segment prefix ends right after its last batch (an empty one at its base); a sealed segment's next is
    // the following segment's base, which the chain checks.
    let next_from_data = s.last_offset.map_or(m.base_offset, |l| l.saturating_add(1));
    let claims = claims.into_iter().chain([
        (
            "max timestamp",
            m.max_timestamp.to_string(),
            s.max_timestamp.unwrap_or(-1).to_string(),
            m.max_timestamp != s.max_timestamp.unwrap_or(-1),
        ),
        (
            "next offset of an unsealed segment",
            m.next_offset.to_string(),
            next_from_data.to_string(),
            !m.sealed && m.next_offset != next_from_data,
        ),
    ]);
    if let Some((what, manifest, data, _)) = claims.into_iter().find(|claim| claim.3) {
        return Ok(Err(Refusal::ManifestDataMismatch {
            what: format!("{what} (in {manifest_key})"),
            manifest,
            data,
        }));
    }
    if let Some(message) = epoch_disagreements(&check.epoch_findings) {
        return Ok(Err(Refusal::Epochs {
            message: format!("{manifest_key}: the manifest's leader epochs disagree with its batches: {message}"),
        }));
    }
    // The base snapshot and the log-end one (the source after position `files.len()`) must parse.
    let end_snapshot = m
        .end_snapshot
        .as_ref()
        .and(sources.get(m.files.len()))
        .map(|s| s.path().to_path_buf());
    for snapshot in path_of(SegmentFileKind::Snapshot).into_iter().chain(end_snapshot) {
        let size = fs::metadata(&snapshot).map_err(|e| Error::io(&snapshot, e))?.len();
        if size > MAX_SNAPSHOT_BYTES {
            let name = names.get(&snapshot).unwrap_or(&snapshot);
            return Ok(Err(Refusal::InvalidManifest {
                reason: format!(
                    "{}: producer snapshot of {size} bytes exceeds the limit of {MAX_SNAPSHOT_BYTES}",
                    name.display()
                ),
            }));
        }
        match ProducerSnapshot::read(&snapshot) {
            Ok(_) => {}
            Err(e) if e.is_corrupt() || e.is_incomplete() => return Ok(Err(corrupt(vec![Finding::from_error(&e)], 0))),
            Err(e) => return Err(Error::Format(e)),
        }
    }
    merged_checkpoint(m, partition_dir)
}

/// The partition's `leader-epoch-checkpoint` with the version's epochs merged in (`None`: unchanged), or the refusal
/// when they do not merge into increasing start offsets.
pub(crate) fn merged_checkpoint(
    m: &Manifest,
    partition_dir: &Path,
) -> Result<std::result::Result<Option<LeaderEpochCheckpoint>, Refusal>> {
    let checkpoint_path = leader_epoch_checkpoint_path(partition_dir);
    let existing = match fs::metadata(&checkpoint_path) {
        Ok(_) => LeaderEpochCheckpoint::read(&checkpoint_path)?.entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(&checkpoint_path, e)),
    };
    let merged = merge_epochs(&existing, &m.epochs);
    let problems: Vec<String> = LeaderEpochCheckpoint::new(merged.clone())
        .check(&checkpoint_path)
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.defect.to_string())
        .collect();
    if !problems.is_empty() {
        return Ok(Err(Refusal::Epochs {
            message: format!(
                "the installed epochs {} and this version's {} do not merge: {}",
                show_epochs(&existing),
                show_epochs(
                    &m.epochs
                        .iter()
                        .map(|e| EpochEntry {
                            epoch: e.epoch,
                            start_offset: e.start_offset
                        })
                        .collect::<Vec<_>>()
                ),
                problems.join("; ")
            ),
        }));
    }
    Ok(Ok((merged != existing).then(|| LeaderEpochCheckpoint::new(merged))))
}

/// The batches whose leader epoch disagrees with the manifest's, as one message (`None` when they all agree).
fn epoch_disagreements(findings: &[Finding]) -> Option<String> {
    (!findings.is_empty()).then(|| {
        findings
            .iter()
            .take(MAX_REPORTED_FINDINGS)
            .map(|f| match f.offset {
                Some(offset) => format!("at offset {offset}: {}", f.defect),
                None => f.defect.to_string(),
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
}

fn show_epochs(entries: &[EpochEntry]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|e| format!("{}@{}", e.epoch, e.start_offset))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The leader epochs of the installed segments plus a version's: the union by epoch, keeping the earliest start
/// offset seen for an epoch (the source truncates the first entry's start to its log start offset as retention
/// advances, while the mirror may hold older data of that epoch). Sorted by epoch; whether the result is still
/// increasing in start offsets is for `LeaderEpochCheckpoint::check` to say.
pub(crate) fn merge_epochs(installed: &[EpochEntry], shipped: &[EpochStart]) -> Vec<EpochEntry> {
    let mut by_epoch: BTreeMap<i32, i64> = BTreeMap::new();
    let shipped = shipped.iter().map(|e| EpochEntry {
        epoch: e.epoch,
        start_offset: e.start_offset,
    });
    for e in installed.iter().copied().chain(shipped) {
        by_epoch
            .entry(e.epoch)
            .and_modify(|s| *s = (*s).min(e.start_offset))
            .or_insert(e.start_offset);
    }
    by_epoch
        .into_iter()
        .map(|(epoch, start_offset)| EpochEntry { epoch, start_offset })
        .collect()
}

/// Step 4: rename the staged files of the version `(base, next)` into `dir` in the protocol's order, then its
/// log-end snapshot `end` (a snapshot at the log end is legal whatever else is there), remove files of that segment
/// the version does not have and the stale log-end snapshots of shorter versions (offsets strictly inside
/// `(base, next)`: nothing else the applier installs lives there), rename the staged `leader-epoch-checkpoint`
/// (already fsynced) over the partition's, and fsync the directory once for all of it. `after_rename(n)` runs
/// after the `n`-th segment file's rename. A crash before the catalog records the version leaves at most files the
/// next run's sweep or reinstall replaces.
///
/// The checkpoint is renamed after the segment's files and made durable by the same directory fsync, not by one of
/// its own after them (one fsync fewer per version whose epochs change, a third of a small partition's directory
/// fsyncs). A crash before that fsync leaves the old checkpoint or the new one, and the catalog does not record the
/// version either way; the rerun reinstalls it and merges the same epochs again. Only a file system that persisted
/// a later rename in a directory without an earlier one could leave the new checkpoint with the old segments: an
/// epoch starting past the log end, which a broker drops at load (`LogLoader` truncates the epoch cache to the log
/// end) and the rerun's install covers.
fn place(
    dir: &Path,
    (base, next): (i64, i64),
    files: &[(SegmentFileKind, Source, String)],
    end: Option<&(Source, String)>,
    replaces: bool,
    checkpoint: Option<&Path>,
    after_rename: &dyn Fn(u32) -> Result<()>,
) -> Result<()> {
    let order = if replaces { REPLACEMENT_ORDER } else { NEW_SEGMENT_ORDER };
    // Files of this base the version does not have (a kind an older, interrupted version had): not part of it.
    let stale: Vec<PathBuf> = SegmentFileKind::ALL
        .into_iter()
        .filter(|k| !files.iter().any(|(kind, _, _)| kind == k))
        .map(|k| dir.join(segment_format::dir::segment_file_name(base, k)))
        .filter(|p| p.exists())
        .collect();
    let remove_stale = || -> Result<()> {
        for path in &stale {
            fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        }
        Ok(())
    };
    if !replaces {
        remove_stale()?;
    }
    let mut renamed = 0;
    for kind in order {
        let Some((_, Source::Fetch(staged), name)) = files.iter().find(|(k, _, _)| *k == kind) else {
            continue;
        };
        let target = dir.join(name);
        fs::rename(staged, &target).map_err(|e| Error::io(&target, e))?;
        renamed += 1;
        after_rename(renamed)?;
    }
    if let Some((Source::Fetch(staged), name)) = end {
        let target = dir.join(name);
        fs::rename(staged, &target).map_err(|e| Error::io(&target, e))?;
        renamed += 1;
        after_rename(renamed)?;
    }
    if replaces {
        remove_stale()?;
    }
    for path in stale_end_snapshots(dir, base, next)? {
        fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
    }
    if let Some(staged) = checkpoint {
        let target = leader_epoch_checkpoint_path(dir);
        fs::rename(staged, &target).map_err(|e| Error::io(&target, e))?;
    }
    fsync_dir(dir)?;
    Ok(())
}

/// Producer snapshots in `dir` at offsets strictly between `base` and `next`: log-end snapshots of shorter versions
/// of the segment at `base`, stale once a longer one is placed.
fn stale_end_snapshots(dir: &Path, base: i64, next: i64) -> Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if let PartitionFile::Segment {
            base_offset,
            kind: SegmentFileKind::Snapshot,
        } = classify_partition_file(&name)
        {
            if base < base_offset && base_offset < next {
                stale.push(entry.path());
            }
        }
    }
    Ok(stale)
}

/// Create the partition directories of `dirs` that do not exist yet, then fsync each parent they were created in
/// once (not once per partition: a run that starts a mirror of 200 partitions paid 200 fsyncs of the mirror root),
/// as [`ensure_partition_dir`] does for one, before any of them is recorded in the catalog. A directory that cannot
/// be created is left to [`ensure_partition_dir`], which reports it for its partition alone; a failed fsync fails
/// the run (the directories exist, and a later check would take them for durable).
pub(crate) fn create_partition_dirs(dirs: &[PathBuf]) -> Result<()> {
    let mut parents = std::collections::BTreeSet::new();
    for dir in dirs {
        if !dir.is_dir() && fs::create_dir_all(dir).is_ok() {
            if let Some(parent) = dir.parent() {
                parents.insert(parent.to_path_buf());
            }
        }
    }
    for parent in parents {
        fsync_dir(&parent)?;
    }
    Ok(())
}

/// Create the partition directory if needed (fsyncing the mirror root) and tag it with the lineage in
/// `partition.metadata`, before any segment is renamed into it. A directory tagged with another topic id is refused.
///
/// A new `partition.metadata` is renamed in without a directory fsync of its own: the install that follows fsyncs
/// the directory (see [`place`]) before the catalog records anything in it. A crash before that may lose it, and
/// the rerun writes it again (a directory without one is tagged anew; its segments the catalog does not list are
/// adopted by their hashes or swept).
pub(crate) fn ensure_partition_dir(dir: &Path, topic_id: &Uuid) -> Result<()> {
    if !dir.is_dir() {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        if let Some(parent) = dir.parent() {
            fsync_dir(parent)?;
        }
    }
    let path = dir.join(PARTITION_METADATA_FILE);
    match fs::metadata(&path) {
        Ok(_) => {
            let found = PartitionMetadata::read(&path)?.topic_id;
            if found != *topic_id {
                return Err(Error::ForeignPartitionDir {
                    path: dir.to_path_buf(),
                    found: found.to_string(),
                    expected: topic_id.to_string(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(write_atomically_unflushed(
            &path,
            PartitionMetadata::new(*topic_id).encode().as_bytes(),
        )?),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// The manifest's `mtime_ms` as a time, if representable.
fn system_time(ms: i64) -> Option<SystemTime> {
    if ms >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_millis(ms.unsigned_abs()))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_millis(ms.unsigned_abs()))
    }
}

/// Give a file the source's modification time and force it (data and metadata) to disk; a sealed segment's file
/// then leaves the page cache, its pages freed for the next file's writes (`durable::drop_cached`: validation has
/// read it already, and nothing reads it again until a failover). An active segment's files stay cached: the next
/// version of the segment starts by reading the installed `.log` as its prefix (`chunks`). A file that already has
/// that time is only synced.
fn set_mtime_and_sync(path: &Path, mtime_ms: i64, sealed: bool) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if let Some(time) = system_time(mtime_ms) {
        if meta.modified().ok() != Some(time) {
            file.set_modified(time).map_err(|e| Error::io(path, e))?;
        }
    }
    file.sync_all().map_err(|e| Error::io(path, e))?;
    if sealed {
        drop_cached(&file, meta.len());
    }
    Ok(())
}

pub(crate) mod append;
mod chunks;
#[cfg(test)]
mod tests;
