//! Follow mode's install of a grown active segment: the new chunks appended to the installed `.log` in place,
//! instead of a staged copy of the whole version renamed over it.
//!
//! Why: a follower installs a new version of the same active segment every poll. Through [`super::install`] each
//! one costs a local copy of the installed prefix into staging, a hash of it against the chunk digests, and a
//! validation of the whole version: proportional to the segment (up to a GiB) for every few KiB shipped. The direct
//! tail's appender (`crate::direct`) shows the other way: check the new bytes on their own, then write → fsync →
//! record. Here the record is the catalog's version, as for every install, so the order is: every new chunk
//! downloaded and checked (size, SHA-256, CRC-32C, whole CRC-valid batches, offsets, its `next_offset`: the checks
//! of [`super::chunks`]), the assembled file's size, CRC-32C and SHA-256 (from a running hash of the installed
//! prefix, kept between runs) compared with the manifest's `.log` entry, every claim of the manifest (batches,
//! records, offsets, max timestamp, each batch's leader epoch) compared with the batches, the version's offset and
//! time index compared with the ones rebuilt from those batches — all before a byte is written. Then the chunks
//! are appended to the installed `.log` and it is fsynced, the indexes replaced atomically (the `.log` first, as a
//! replacement's rename order has it: old, shorter indexes stay correct for a longer log), the epochs merged, and
//! the caller records the version in the catalog.
//!
//! A crash between the append and the catalog leaves a `.log` longer than the catalog's version: what a crash after
//! the `.log` rename of a replacement leaves too. The next run proves the file again against the chunk digests (a
//! file ending on a chunk boundary continues; a torn append does not end on one and goes through the staged
//! install, which downloads what it cannot prove), so nothing is trusted that was not checked.
//!
//! What the state kept between runs ([`AppendCache`], per installed `.log`) holds: the file's inode and size, the
//! chunks it was proven to consist of, the running CRC-32C/SHA-256, the index builders and the batch totals. It is
//! used only while the file is the same inode at the same size and the new manifest lists the same chunks first;
//! anything else proves the installed bytes again by reading them once (still no copy).
//!
//! Not done here (the staged install handles them, as before): a sealed version (its `.log` is the installed one;
//! only companions are added), a version with a transaction index or a log-end snapshot, new batches with a
//! transaction marker other than COMMIT (an ABORT needs its `.txnindex` entry checked), legacy frames or offsets an
//! index cannot hold, deep validation, an index
//! the shipper built with another interval than [`APPEND_INDEX_INTERVAL_BYTES`] (its digest then differs from the
//! rebuild), and an installed file that does not end on one of the version's chunk boundaries.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use segment_format::batch::{BatchInfo, ControlType};
use segment_format::checkpoint::{leader_epoch_checkpoint_path, LeaderEpochCheckpoint};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::durable::{fsync_dir, write_atomically};
use segment_format::file_record::FileRecord;
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder, DEFAULT_INDEX_INTERVAL_BYTES};
use segment_format::log::LogFile;
use segment_format::txn_ends::TxnEndsBuilder;
use segmirror_catalog::SegmentVersion;
use segmirror_transport::digest::{digest_file, digest_of, Hasher};
use segmirror_transport::manifest::{LogChunk, Manifest, ManifestFile};

use super::chunks::{append, check_chunk, compare, fetch_chunk};
use super::{blocking, merged_checkpoint, set_mtime_and_sync, stale_end_snapshots, PageCache, Placed, Target};
use crate::error::{Error, Result};
use crate::report::Refusal;
use crate::segment_log;

/// Interval of the indexes rebuilt from the appended batches and compared with the version's: the shipper's default
/// (`seed`'s `index_interval_bytes`, Kafka's default `index.interval.bytes`). A shipper run with another one makes
/// the digests differ, and its versions take the staged install.
pub const APPEND_INDEX_INTERVAL_BYTES: u64 = DEFAULT_INDEX_INTERVAL_BYTES;

/// Totals of a `.log`'s batches, as a manifest states them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Totals {
    first_offset: Option<i64>,
    last_offset: Option<i64>,
    batches: u64,
    records: u64,
    max_timestamp: i64,
}

impl Totals {
    fn add(&mut self, info: &BatchInfo) {
        self.first_offset.get_or_insert(info.base_offset);
        self.last_offset = Some(info.last_offset);
        self.batches += 1;
        self.records += u64::try_from(info.records_count).unwrap_or(0);
        self.max_timestamp = self.max_timestamp.max(info.max_timestamp);
    }
}

/// What is known, and proven, of one installed active `.log` (module doc).
#[derive(Clone)]
struct Proven {
    inode: u64,
    size: u64,
    /// The chunks `[0, size)` consists of, proven by their digests.
    chunks: Vec<LogChunk>,
    whole: Hasher,
    offset_index: OffsetIndexBuilder,
    time_index: TimeIndexBuilder,
    totals: Totals,
    /// How the batches so far leave each transactional producer (the catalog records it with the version), logging
    /// every marker for the segment's log.
    txn_ends: TxnEndsBuilder,
    /// The segment's log (`crate::segment_log`) as written up to the markers already taken from `txn_ends`; `None`
    /// when it could not be kept for this segment (a cut inside it reads back instead).
    segment_log: Option<FileRecord>,
    /// A batch this path leaves to the staged install's full validation: a legacy frame (its record count), a
    /// control batch other than a decoded COMMIT (an ABORT marker needs its `.txnindex` entry; an undecodable key
    /// is a defect), an offset the indexes cannot hold relative to the base.
    needs_full: bool,
}

impl Proven {
    fn push(&mut self, info: &BatchInfo) {
        let indexed = self.offset_index.push(info).and_then(|_| self.time_index.push(info));
        self.totals.add(info);
        self.txn_ends.on_batch(info);
        self.needs_full |= info.magic < 2
            || (info.is_control && !matches!(info.control, Some(ControlType::Commit)))
            || indexed.is_err();
    }
}

/// The per-file state follow mode keeps between its runs (module doc). One per applier.
#[derive(Default)]
pub struct AppendCache {
    entries: Mutex<HashMap<PathBuf, Proven>>,
    /// Bytes of installed `.log`s read to prove them (a cache miss): a test hook and a log figure.
    proof_bytes_read: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for AppendCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendCache")
            .field("proof_bytes_read", &self.proof_bytes_read())
            .finish_non_exhaustive()
    }
}

impl AppendCache {
    /// Bytes of installed `.log`s read back to prove them so far.
    pub fn proof_bytes_read(&self) -> u64 {
        self.proof_bytes_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn take(&self, log: &Path) -> Option<Proven> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).remove(log)
    }

    fn keep(&self, log: &Path, proven: Proven) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(log.to_path_buf(), proven);
    }
}

fn inode_of(meta: &fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0
    }
}

/// Install `t`'s version by appending (module doc). `Ok(None)`: this path does not apply (or the installed bytes
/// cannot be proven); the caller installs through staging. `Ok(Some(Err(_)))`: a refusal naming the key and field;
/// nothing was written.
pub(crate) async fn try_append(
    t: &Target<'_>,
    cache: &AppendCache,
) -> Result<Option<std::result::Result<Placed, Refusal>>> {
    let m = t.manifest;
    let Some(files) = VersionFiles::appendable(t) else {
        return Ok(None);
    };
    let installed = t
        .partition_dir
        .join(segment_file_name(m.base_offset, SegmentFileKind::Log));
    let Some(proven) = prove_installed(t, cache, &installed).await? else {
        return Ok(None);
    };
    let new_chunks: Vec<LogChunk> = m.log_chunks.iter().skip(proven.chunks.len()).cloned().collect();
    if new_chunks.is_empty() || proven.needs_full {
        cache.keep(&installed, proven);
        return Ok(None);
    }
    let run = Appending {
        t,
        cache,
        before: proven.clone(),
        installed,
        staging: t.staging_dir.clone(),
    };

    // Download and check every new chunk before anything is written.
    run.prepare_staging().await?;
    let checked = match run.fetch_and_check(proven, &new_chunks).await? {
        Ok(checked) => checked,
        Err(refusal) => return run.abandon(Some(Err(refusal))).await,
    };
    if checked.proven.needs_full {
        // Legacy frames, transaction markers, offsets the indexes cannot hold: the full validation's to judge.
        return run.abandon(None).await;
    }
    if let Some(refusal) = run.wrong_claim(&files.log, &checked) {
        return run.abandon(Some(Err(refusal))).await;
    }
    // The version's indexes must be exactly the ones its batches give; otherwise the staged install validates them.
    let Some(indexes) = checked.proven.rebuilt_indexes_if(&files) else {
        return run.abandon(None).await;
    };
    let epochs = {
        let (m, dir) = (m.clone(), t.partition_dir.to_path_buf());
        blocking("merge epochs", move || merged_checkpoint(&m, &dir)).await?
    };
    let epochs = match epochs {
        Ok(e) => e,
        Err(refusal) => return run.abandon(Some(Err(refusal))).await,
    };

    // Write: the `.log` (append, fsync), then the indexes (atomically), the epochs, the directory.
    let Checked {
        mut proven,
        parts,
        fetched,
        ..
    } = checked;
    let written = run.write(&files, parts, indexes, epochs).await;
    super::remove_staging(&run.staging).await?;
    written?;
    proven.size = files.log.size;
    proven.chunks = m.log_chunks.clone();
    let reused = run.before.size;
    let closings = proven.txn_ends.take_log();
    if let Some(from) = proven.segment_log {
        let (dir, base) = (t.partition_dir.to_path_buf(), m.base_offset);
        proven.segment_log = blocking("append to the segment's log", move || {
            let written = segment_log::append(&dir, base, from, &closings);
            Ok(segment_log::kept(&dir, base, written))
        })
        .await?;
    }
    let mut txn_ends = proven.txn_ends.finish();
    if let Some(ends) = &mut txn_ends {
        ends.log = segment_log::recorded(proven.segment_log);
    }
    cache.keep(&run.installed, proven);
    t.progress.advance(reused + fetched);
    Ok(Some(Ok(Placed {
        version: SegmentVersion {
            base_offset: m.base_offset,
            next_offset: m.next_offset,
            last_offset: m.last_offset.unwrap_or(m.base_offset),
            size: files.log.size,
            sha256: files.log.sha256.0,
            manifest_key: t.manifest_key.to_string(),
            sealed: false,
        },
        txn_ends,
        fetched_bytes: fetched,
        reused_bytes: reused,
        reused_files: 0,
    })))
}

/// The files of a version this path installs: its `.log` (grown by chunks), and the indexes rebuilt beside it.
struct VersionFiles {
    log: ManifestFile,
    index: ManifestFile,
    time_index: ManifestFile,
}

impl VersionFiles {
    /// `None` when the version is not for this path (module doc): not a longer chunked version of the installed
    /// active segment, or one with files (a log-end snapshot, a transaction index) or checks (deep) it leaves to the
    /// staged install.
    fn appendable(t: &Target<'_>) -> Option<Self> {
        let m = t.manifest;
        if !t.replaces
            || !m.is_chunked()
            || m.sealed
            || m.end_snapshot.is_some()
            || m.file(SegmentFileKind::TxnIndex).is_some()
            || t.verify.is_deep()
        {
            return None;
        }
        Some(VersionFiles {
            log: m.file(SegmentFileKind::Log)?.clone(),
            index: m.file(SegmentFileKind::Index)?.clone(),
            time_index: m.file(SegmentFileKind::TimeIndex)?.clone(),
        })
    }
}

/// The installed `.log` at `installed` proven (from the cache, or read once) to be the version's first chunks, with
/// companions this path keeps as they are; `None` when it cannot be.
async fn prove_installed(t: &Target<'_>, cache: &AppendCache, installed: &Path) -> Result<Option<Proven>> {
    let m = t.manifest;
    // Companions this path keeps as they are must be the version's: the snapshot at the base, no transaction index.
    let companions_fit = {
        let (dir, m) = (t.partition_dir.to_path_buf(), m.clone());
        blocking("check installed companions", move || companions_fit(&dir, &m)).await?
    };
    if !companions_fit {
        return Ok(None);
    }
    let cached = cache.take(installed);
    let proven = {
        let (path, chunks) = (installed.to_path_buf(), m.log_chunks.clone());
        let base = m.base_offset;
        blocking("prove the installed prefix", move || {
            prove(&path, base, &chunks, cached)
        })
        .await?
    };
    let Some((proven, read)) = proven else {
        return Ok(None);
    };
    cache
        .proof_bytes_read
        .fetch_add(read, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(proven))
}

/// The new chunks downloaded and checked, not written yet.
struct Checked {
    /// The installed `.log`'s state extended by the new chunks' batches.
    proven: Proven,
    /// The new chunks' staged files, in order.
    parts: Vec<PathBuf>,
    fetched: u64,
    /// The first batch whose leader epoch disagrees with the manifest's.
    epoch_problem: Option<String>,
}

/// The indexes rebuilt from the batches, as the version must hold them.
struct RebuiltIndexes {
    offset: Vec<u8>,
    time: Vec<u8>,
}

impl Proven {
    /// The offset and time indexes rebuilt from the batches, when they are exactly the version's (`files`).
    fn rebuilt_indexes_if(&self, files: &VersionFiles) -> Option<RebuiltIndexes> {
        let offset = self.offset_index.to_bytes();
        let time = {
            let mut closed = self.time_index.clone();
            closed.seal();
            closed.to_bytes()
        };
        let same = |f: &ManifestFile, bytes: &[u8]| {
            let d = digest_of(bytes);
            d.size == f.size && d.sha256 == f.sha256 && d.crc32c == f.crc32c
        };
        (same(&files.index, &offset) && same(&files.time_index, &time)).then_some(RebuiltIndexes { offset, time })
    }
}

/// One append under way: the version, where its chunks are staged, and the installed `.log`'s proven state before
/// it (kept again in the cache when the version is not appended).
struct Appending<'a, 't> {
    t: &'a Target<'t>,
    cache: &'a AppendCache,
    installed: PathBuf,
    staging: PathBuf,
    before: Proven,
}

impl Appending<'_, '_> {
    /// Give the version up (`outcome`: a refusal, or `None` for the staged install): its staging removed, the state
    /// before it kept.
    async fn abandon<T>(self, outcome: T) -> Result<T> {
        super::remove_staging(&self.staging).await?;
        self.cache.keep(&self.installed, self.before);
        Ok(outcome)
    }

    async fn prepare_staging(&self) -> Result<()> {
        let s = self.staging.clone();
        blocking("prepare staging", move || {
            let _ = fs::remove_dir_all(&s);
            fs::create_dir_all(&s).map_err(|e| Error::io(&s, e))
        })
        .await
    }

    /// Download every new chunk into staging and check it (`chunks::check_chunk`), its batches added to `proven`.
    /// `Ok(Err(_))`: a chunk is refused.
    async fn fetch_and_check(
        &self,
        mut proven: Proven,
        new_chunks: &[LogChunk],
    ) -> Result<std::result::Result<Checked, Refusal>> {
        let (t, m) = (self.t, self.t.manifest);
        let mut parts = Vec::with_capacity(new_chunks.len());
        let mut fetched = 0;
        let mut previous_next = proven.chunks.last().map_or(m.base_offset, |c| c.next_offset);
        let mut epoch_problem: Option<String> = None;
        for (i, chunk) in new_chunks.iter().enumerate() {
            let part = self.staging.join(format!("{i}.chunk"));
            if let Err(refusal) = fetch_chunk(t.store, chunk, &part).await? {
                return Ok(Err(refusal));
            }
            let (c, p, epochs) = (chunk.clone(), part.clone(), m.epochs.clone());
            let (state, problem) = (proven, epoch_problem.take());
            let checked = blocking("check chunk", move || {
                let mut state = state;
                let mut problem = problem;
                let outcome = check_chunk(&c, previous_next, &p, &mut |info| {
                    let mut info = *info;
                    info.position += c.from;
                    if problem.is_none() {
                        problem = wrong_epoch(&epochs, &info);
                    }
                    state.push(&info);
                })?;
                if outcome.is_ok() {
                    hash_file(&p, &mut state.whole)?;
                }
                Ok((outcome, state, problem))
            })
            .await?;
            let (outcome, state, problem) = checked;
            proven = state;
            epoch_problem = problem;
            if let Err(refusal) = outcome {
                return Ok(Err(refusal));
            }
            previous_next = chunk.next_offset;
            fetched += chunk.size();
            parts.push(part);
        }
        Ok(Ok(Checked {
            proven,
            parts,
            fetched,
            epoch_problem,
        }))
    }

    /// The assembled `.log` against the manifest's entry, the manifest's claims and its leader epochs against the
    /// batches: the first that disagrees.
    fn wrong_claim(&self, log: &ManifestFile, checked: &Checked) -> Option<Refusal> {
        let (m, manifest_key) = (self.t.manifest, self.t.manifest_key);
        let what = format!("{} (assembled from {} chunks)", log.key, m.log_chunks.len());
        let proven = &checked.proven;
        compare(&what, log.size, log.crc32c, &log.sha256, &proven.whole.clone().finish())
            .or_else(|| claims_disagree(m, &proven.totals, manifest_key))
            .or_else(|| {
                checked.epoch_problem.clone().map(|message| Refusal::Epochs {
                    message: format!(
                        "{manifest_key}: the manifest's leader epochs disagree with its batches: {message}"
                    ),
                })
            })
    }

    /// Append the staged chunks to the installed `.log` and fsync it (cut back to its old size if that fails), then
    /// replace the indexes atomically, write the merged epochs, remove stale log-end snapshots, fsync the directory.
    async fn write(
        &self,
        files: &VersionFiles,
        parts: Vec<PathBuf>,
        indexes: RebuiltIndexes,
        epochs: Option<LeaderEpochCheckpoint>,
    ) -> Result<()> {
        let m = self.t.manifest;
        let (path, dir, range) = (
            self.installed.clone(),
            self.t.partition_dir.to_path_buf(),
            (m.base_offset, m.next_offset),
        );
        let (log_mtime, index_mtime, time_mtime) =
            (files.log.mtime_ms, files.index.mtime_ms, files.time_index.mtime_ms);
        let old_size = self.before.size;
        let cache = PageCache::after_sync(m.sealed);
        blocking("append to the installed segment", move || {
            let appended = (|| -> Result<()> {
                let mut ignored = Hasher::new();
                for part in &parts {
                    append(part, &path, &mut ignored)?;
                }
                set_mtime_and_sync(&path, log_mtime, cache)
            })();
            if let Err(e) = appended {
                // Nothing recorded: cut what was written, so the file is the catalog's version again.
                if let Ok(f) = OpenOptions::new().write(true).open(&path) {
                    let _ = f.set_len(old_size).and_then(|()| f.sync_all());
                }
                return Err(e);
            }
            for (kind, bytes, mtime) in [
                (SegmentFileKind::Index, &indexes.offset, index_mtime),
                (SegmentFileKind::TimeIndex, &indexes.time, time_mtime),
            ] {
                let target = dir.join(segment_file_name(range.0, kind));
                write_atomically(&target, bytes)?;
                set_mtime_and_sync(&target, mtime, cache)?;
            }
            if let Some(epochs) = epochs {
                epochs.write(&leader_epoch_checkpoint_path(&dir))?;
            }
            for stale in stale_end_snapshots(&dir, range.0, range.1)? {
                fs::remove_file(&stale).map_err(|e| Error::io(&stale, e))?;
            }
            fsync_dir(&dir)?;
            Ok(())
        })
        .await
    }
}

/// The installed companions of the segment are the version's: its producer snapshot at the base (if it has one)
/// byte for byte, and no transaction index.
fn companions_fit(dir: &Path, m: &Manifest) -> Result<bool> {
    let path = |kind| dir.join(segment_file_name(m.base_offset, kind));
    if path(SegmentFileKind::TxnIndex).exists() {
        return Ok(false);
    }
    let snapshot = path(SegmentFileKind::Snapshot);
    match (m.file(SegmentFileKind::Snapshot), fs::symlink_metadata(&snapshot)) {
        (None, Err(_)) => Ok(true),
        (Some(f), Ok(meta)) if meta.is_file() && meta.len() == f.size => {
            let d = digest_file(&snapshot)?;
            Ok(d.sha256 == f.sha256 && d.crc32c == f.crc32c)
        }
        _ => Ok(false),
    }
}

/// The installed `.log` at `path` as the first chunks of `chunks`: the cached state when it still describes the file
/// and those chunks, else proven by reading the file once (each chunk's range hashed and compared, the batches
/// indexed). `None` when it cannot be proven (no such file, not ending on a chunk boundary, bytes that differ).
/// Returns the bytes read.
fn prove(path: &Path, base: i64, chunks: &[LogChunk], cached: Option<Proven>) -> Result<Option<(Proven, u64)>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => meta,
        _ => return Ok(None),
    };
    let (size, inode) = (meta.len(), inode_of(&meta));
    if let Some(c) = cached {
        if c.inode == inode && c.size == size && chunks.starts_with(&c.chunks) {
            return Ok(Some((c, 0)));
        }
    }
    let Some(covered) = chunks.iter().position(|c| c.to == size).map(|i| i + 1) else {
        return Ok(None);
    };
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut whole = Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    for chunk in chunks.iter().take(covered) {
        let mut current = Hasher::new();
        let mut left = chunk.size();
        while left > 0 {
            let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            let piece = buf.get_mut(..want).unwrap_or_default();
            file.read_exact(piece).map_err(|e| Error::io(path, e))?;
            current.update(piece);
            whole.update(piece);
            left -= want as u64;
        }
        let got = current.finish();
        if got.sha256 != chunk.sha256 || got.crc32c != chunk.crc32c || got.size != chunk.size() {
            return Ok(None);
        }
    }
    let mut proven = Proven {
        inode,
        size,
        chunks: chunks.iter().take(covered).cloned().collect(),
        whole,
        offset_index: OffsetIndexBuilder::new(base, APPEND_INDEX_INTERVAL_BYTES),
        time_index: TimeIndexBuilder::new(base, APPEND_INDEX_INTERVAL_BYTES),
        totals: Totals {
            first_offset: None,
            last_offset: None,
            batches: 0,
            records: 0,
            max_timestamp: -1,
        },
        txn_ends: TxnEndsBuilder::logging(),
        // Written whole at the next run, with every marker the proof reads.
        segment_log: Some(FileRecord::default()),
        needs_full: false,
    };
    let mut log = LogFile::open(path).map_err(Error::Format)?;
    let scanned = log.scan_range(0, size, |frame| {
        proven.push(&frame.info);
        ControlFlow::Continue(())
    });
    match scanned {
        Ok(s) if s.end == size => Ok(Some((proven, size.saturating_mul(2)))),
        _ => Ok(None),
    }
}

/// Hash the file at `path` into `whole`.
fn hash_file(path: &Path, whole: &mut Hasher) -> Result<()> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(path, e)),
        };
        whole.update(buf.get(..n).unwrap_or_default());
    }
}

/// A magic-2 batch whose leader epoch is not the one the manifest says is in force at its base offset.
fn wrong_epoch(epochs: &[segmirror_transport::manifest::EpochStart], info: &BatchInfo) -> Option<String> {
    if info.magic < 2 || epochs.is_empty() {
        return None;
    }
    let expected = epochs
        .iter()
        .rev()
        .find(|e| e.start_offset <= info.base_offset)
        .map(|e| e.epoch);
    (expected != Some(info.partition_leader_epoch)).then(|| {
        format!(
            "at offset {}: batch epoch {}, the manifest says {}",
            info.base_offset,
            info.partition_leader_epoch,
            expected.map_or_else(|| "none".to_string(), |e| e.to_string())
        )
    })
}

/// The first claim of `m` its batches contradict (the claims the staged install's validation compares).
fn claims_disagree(m: &Manifest, t: &Totals, manifest_key: &str) -> Option<Refusal> {
    let next_from_data = t.last_offset.map_or(m.base_offset, |l| l.saturating_add(1));
    let claims = [
        ("batches", m.batches.to_string(), t.batches.to_string()),
        ("records", m.records.to_string(), t.records.to_string()),
        (
            "first offset",
            format!("{:?}", m.first_offset),
            format!("{:?}", t.first_offset),
        ),
        (
            "last offset",
            format!("{:?}", m.last_offset),
            format!("{:?}", t.last_offset),
        ),
        (
            "max timestamp",
            m.max_timestamp.to_string(),
            t.max_timestamp.to_string(),
        ),
        (
            "next offset of an unsealed segment",
            m.next_offset.to_string(),
            next_from_data.to_string(),
        ),
    ];
    claims
        .into_iter()
        .find(|(_, manifest, data)| manifest != data)
        .map(|(what, manifest, data)| Refusal::ManifestDataMismatch {
            what: format!("{what} (in {manifest_key})"),
            manifest,
            data,
        })
}
