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
//!    more than is durable on disk — with how its batches leave each transactional producer, gathered in step 2's
//!    pass over them (`segment_format::txn_ends`): promotion folds these records instead of reading the segments
//!    again to find open transactions (`promote`, "Applied partitions").
//!
//! A half-written file is never visible under a final name: downloads land in staging, renames are atomic. Files
//! are addressed by the parsed manifest's Kafka file names only.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use segment_format::checkpoint::leader_epoch_checkpoint_path;
use segment_format::dir::{SegmentFileKind, PARTITION_METADATA_FILE};
use segment_format::durable::{drop_cached, fsync_dir, write_atomically_unflushed, write_synced};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::progress::Progress;
use segment_format::txn_ends::TxnEnds;
use segment_format::verify::VerifyOptions;
use segmirror_catalog::SegmentVersion;
use segmirror_transport::digest::digest_file;
use segmirror_transport::manifest::{Manifest, ManifestFile};
use segmirror_transport::SegmentSource;

use crate::error::{Error, Result};
use crate::report::Refusal;
use crate::segment_log;
use place::{place, stale_end_snapshots, Placement};
use validate::{implausible_sizes, merged_checkpoint, validate, Validated};

/// Largest producer snapshot read for validation: the bucket contract's limit (46 bytes per producer, room for ~5.8
/// million producers, far beyond any real partition, while a hostile object cannot make the applier read gigabytes
/// into memory).
pub const MAX_SNAPSHOT_BYTES: u64 = segmirror_transport::manifest::MAX_SNAPSHOT_BYTES;

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
    /// How the version's batches leave each transactional producer, for the catalog (`None`: not recorded).
    pub txn_ends: Option<TxnEnds>,
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
    let staged = match stage(t, &files).await? {
        Ok(staged) => staged,
        Err(refusal) => return refuse(&t.staging_dir, refusal).await,
    };
    let sources = staged.sources;

    // 2. Validate.
    let staged_at = started.elapsed();
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
    let Validated {
        epochs,
        mut txn_ends,
        closings,
    } = match checked {
        Ok(validated) => validated,
        Err(refusal) => return refuse(&t.staging_dir, refusal).await,
    };

    // 3. Make durable (the partition's new leader-epoch checkpoint is staged with the version's files).
    let validated = started.elapsed();
    let staged_checkpoint = epochs.map(|cp| (leader_epoch_checkpoint_path(&t.staging_dir), cp.encode()));
    let cache = PageCache::after_sync(m.sealed);
    make_durable(cache, &files, &sources, staged_checkpoint.clone()).await?;
    #[cfg(feature = "failpoints")]
    kill_point(t.failpoint.as_deref(), crate::failpoint::FailPoint::AfterStaging)?;

    // 4. Rename into place, fsync, epochs.
    let synced = started.elapsed();
    place_version(t, &sources, staged_checkpoint.map(|(path, _)| path)).await?;
    if let Some(ends) = &mut txn_ends {
        let (dir, base) = (t.partition_dir.to_path_buf(), m.base_offset);
        let log = blocking("write the segment's log", move || {
            let written = segment_log::write(&dir, base, &closings).map(Some);
            Ok(segment_log::kept(&dir, base, written))
        })
        .await?;
        ends.log = segment_log::recorded(log);
    }
    #[cfg(feature = "failpoints")]
    kill_point(t.failpoint.as_deref(), crate::failpoint::FailPoint::BeforeCatalog)?;

    tracing::debug!(
        key = t.manifest_key,
        fetched_bytes = staged.fetched_bytes,
        stage_ms = staged_at.as_millis(),
        validate_ms = (validated - staged_at).as_millis(),
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
        txn_ends,
        fetched_bytes: staged.fetched_bytes,
        reused_bytes: staged.reused_bytes,
        reused_files: staged.reused_files,
    }))
}

/// A version's files after step 1: where each one is (in the manifest's order), and what staging cost.
struct Staged {
    sources: Vec<Source>,
    fetched_bytes: u64,
    reused_bytes: u64,
    reused_files: u32,
}

/// Step 1: a fresh staging directory, every file of `files` reused from the partition directory or downloaded into
/// it (a chunked `.log` assembled from the installed prefix and its new chunks). `Ok(Err(_))`: an object is not what
/// the manifest promised; the caller removes the staging directory.
async fn stage(t: &Target<'_>, files: &[ManifestFile]) -> Result<std::result::Result<Staged, Refusal>> {
    let m = t.manifest;
    let sources = {
        let (dir, staging, files) = (t.partition_dir.to_path_buf(), t.staging_dir.clone(), files.to_vec());
        blocking("prepare staging", move || prepare(&dir, &staging, &files)).await?
    };
    let mut staged = Staged {
        sources: Vec::new(),
        fetched_bytes: 0,
        reused_bytes: 0,
        reused_files: 0,
    };
    let mut downloads = Vec::new();
    let mut chunked_log = None;
    for (f, source) in files.iter().zip(&sources) {
        match source {
            Source::Reuse(_) => {
                staged.reused_bytes += f.size;
                staged.reused_files += 1;
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
            Ok(size) => staged.fetched_bytes += size,
            Err(refusal) => return Ok(Err(refusal)),
        }
    }
    if let Some(path) = chunked_log {
        match chunks::assemble(t.store, m, t.partition_dir, &path, t.progress).await? {
            Ok(assembled) => {
                staged.fetched_bytes += assembled.fetched;
                staged.reused_bytes += assembled.reused;
            }
            Err(refusal) => return Ok(Err(refusal)),
        }
    }
    staged.sources = sources;
    Ok(Ok(staged))
}

/// Step 3: each file of the version gets the source's modification time and is fsynced, and the partition's new
/// `leader-epoch-checkpoint` (`checkpoint`: its staged path and text) is written durably beside them.
async fn make_durable(
    cache: PageCache,
    files: &[ManifestFile],
    sources: &[Source],
    checkpoint: Option<(PathBuf, String)>,
) -> Result<()> {
    let (sources, files) = (sources.to_vec(), files.to_vec());
    blocking("sync staged files", move || {
        for (f, source) in files.iter().zip(&sources) {
            set_mtime_and_sync(source.path(), f.mtime_ms, cache)?;
        }
        if let Some((path, text)) = &checkpoint {
            write_synced(path, text.as_bytes())?;
        }
        Ok(())
    })
    .await
}

/// Step 4: the staged files (and `checkpoint`, the staged `leader-epoch-checkpoint`) renamed into the partition
/// directory in the protocol's order ([`place`]).
async fn place_version(t: &Target<'_>, sources: &[Source], checkpoint: Option<PathBuf>) -> Result<()> {
    let m = t.manifest;
    let dir = t.partition_dir.to_path_buf();
    let kinds: Vec<(SegmentFileKind, Source, String)> = m
        .files
        .iter()
        .zip(sources)
        .map(|(f, s)| (f.name.kind, s.clone(), f.name.to_string()))
        .collect();
    let end = m
        .end_snapshot
        .as_ref()
        .zip(sources.get(m.files.len()))
        .map(|(f, s)| (s.clone(), f.name.to_string()));
    let range = (m.base_offset, m.next_offset);
    let placement = Placement::of(t.replaces);
    #[cfg(feature = "failpoints")]
    let armed = t.failpoint.clone();
    blocking("rename into place", move || {
        place(
            &dir,
            range,
            &kinds,
            end.as_ref(),
            placement,
            checkpoint.as_deref(),
            &|_n| {
                #[cfg(feature = "failpoints")]
                kill_point(armed.as_deref(), crate::failpoint::FailPoint::AfterRename(_n))?;
                Ok(())
            },
        )
    })
    .await
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

/// What becomes of a synced file's pages in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageCache {
    /// Kept: the file is read again soon (an active segment's `.log` is the prefix of its next version).
    Keep,
    /// Dropped: nothing reads the file again until a failover (a sealed segment's files, validated already).
    Drop,
}

impl PageCache {
    /// Dropped for a sealed segment's files, kept for an active one's.
    fn after_sync(sealed: bool) -> Self {
        if sealed {
            PageCache::Drop
        } else {
            PageCache::Keep
        }
    }
}

/// Give a file the source's modification time and force it (data and metadata) to disk; a sealed segment's file
/// then leaves the page cache, its pages freed for the next file's writes (`durable::drop_cached`: validation has
/// read it already, and nothing reads it again until a failover). An active segment's files stay cached: the next
/// version of the segment starts by reading the installed `.log` as its prefix (`chunks`). A file that already has
/// that time is only synced.
fn set_mtime_and_sync(path: &Path, mtime_ms: i64, cache: PageCache) -> Result<()> {
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
    if cache == PageCache::Drop {
        drop_cached(&file, meta.len());
    }
    Ok(())
}

pub(crate) mod append;
mod chunks;
mod place;
#[cfg(test)]
mod tests;
mod validate;
