//! Segments cached by chunks: a chunked segment version too large to hold whole is held a chunk at a time.
//!
//! Why: a continuous shipper uploads a partition's active segment as chunks (`segmirror.manifest.v2`), and Kafka's
//! segments grow to `segment.bytes`, 1 GiB by default. Held whole, a segment larger than the cache could not be
//! served at all (the partition's high watermark stopped where the segment outgrew the cache), and a few growing
//! segments would push every other segment out. A chunk is the unit the bucket vouches for (its own size, CRC-32C
//! and SHA-256 in the manifest) and holds whole batches ending at a known offset, so it can be fetched, verified,
//! served and evicted on its own.
//!
//! Which: a chunked version whose bytes exceed a quarter of the cache ([`SegmentCache::by_chunks`]); smaller
//! versions are held whole as before (their reads then use the segment's indexes). Both count against the same
//! bound and are evicted by the same least-recently-used rule.
//!
//! Layout: `<cache>/.chunks/<topic>-<partition>/<base:020>/` holds the segment's cached chunks, each its own file
//! `<first offset:020>.log` (the offset after the previous chunk, the segment's base for the first), so the
//! mirror's readers (`crate::mirror::segments`) read the directory as a partition of small segments without indexes;
//! `companions/` beside them holds the companions a read needs (the `.txnindex`, the `.snapshot` at the base).
//! Because an evicted chunk leaves a gap such a listing cannot see, a read pins a run of consecutive chunks
//! ([`ChunkRun`]) and never reads past its end. A file becomes visible only by a rename after its size, CRC-32C and
//! SHA-256 matched the manifest.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::manifest::{Manifest, Sha256Digest};
use segmirror_transport::SegmentSource;

use super::{CacheError, Inner, Keep, Piece, SegmentCache, State, TMP_DIR};

/// Name of the directory of segments cached by chunks.
pub(super) const CHUNKS_DIR: &str = ".chunks";
/// Directory, under a segment's chunk directory, of the companions its reads need.
const COMPANIONS: &str = "companions";
/// A chunked version larger than `1 / WHOLE_SHARE` of the cache is cached by chunks.
const WHOLE_SHARE: u64 = 4;

/// A cached chunk or companion: its partition directory's name, its segment's base offset, and its file under
/// the segment's chunk directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PartId {
    pub dir_name: String,
    pub base: i64,
    pub file: String,
}

/// A cached chunk or companion, as the object it was fetched from.
#[derive(Debug)]
pub(super) struct PartEntry {
    key: String,
    sha256: Sha256Digest,
    pub(super) bytes: u64,
    pub(super) pins: u32,
    pub(super) last_used: u64,
    /// Of the partition's newest segment (evicted last).
    pub(super) tail: bool,
}

/// A cached chunk or companion held for a read: not evicted until dropped.
#[derive(Debug)]
pub(crate) struct PinnedPart {
    inner: Arc<Inner>,
    id: PartId,
}

impl Drop for PinnedPart {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = state.parts.get_mut(&self.id) {
            e.pins = e.pins.saturating_sub(1);
        }
    }
}

/// Consecutive chunks of one segment version, held for a read: `dir` lists them (and maybe other cached chunks of
/// the segment, which a read bounded by `next_offset` never reaches).
#[derive(Debug)]
pub(crate) struct ChunkRun {
    /// The segment's chunk directory.
    pub dir: PathBuf,
    /// The offset after the run's last chunk: reads of the run stop there.
    pub next_offset: i64,
    _pins: Vec<PinnedPart>,
}

/// Where a cached part lives.
pub(super) fn part_path(root: &Path, id: &PartId) -> PathBuf {
    segment_dir(root, &id.dir_name, id.base).join(&id.file)
}

fn segment_dir(root: &Path, dir_name: &str, base: i64) -> PathBuf {
    root.join(CHUNKS_DIR).join(dir_name).join(format!("{base:020}"))
}

/// Forget and delete the unheld parts of `dir_name`'s segments not in `keep` (see `SegmentCache::retain`).
pub(super) fn retain_parts(state: &mut State, root: &Path, dir_name: &str, keep: &dyn Fn(i64) -> bool) {
    let gone: Vec<PartId> = state
        .parts
        .iter()
        .filter(|(id, e)| id.dir_name == dir_name && e.pins == 0 && !keep(id.base))
        .map(|(id, _)| id.clone())
        .collect();
    for id in gone {
        if let Some(e) = state.parts.remove(&id) {
            state.used = state.used.saturating_sub(e.bytes);
            let _ = fs::remove_file(part_path(root, &id));
        }
    }
}

/// The first offset of chunk `i` of `m`: the offset after the chunk before it, the segment's base for the first.
pub(crate) fn chunk_first(m: &Manifest, i: usize) -> i64 {
    i.checked_sub(1)
        .and_then(|p| m.log_chunks.get(p))
        .map_or(m.base_offset, |c| c.next_offset)
}

/// The chunk of `m` holding `offset`: the first whose batches end after it.
pub(crate) fn chunk_holding(m: &Manifest, offset: i64) -> Option<usize> {
    let i = m.log_chunks.partition_point(|c| c.next_offset <= offset);
    (i < m.log_chunks.len()).then_some(i)
}

impl SegmentCache {
    /// Whether `m`'s version is cached by chunks (a chunked version larger than a quarter of the cache) rather than
    /// whole.
    pub fn by_chunks(&self, m: &Manifest) -> bool {
        let bytes: u64 = m.all_files().map(|f| f.size).fold(0, u64::saturating_add);
        m.is_chunked() && !m.log_chunks.is_empty() && bytes > self.inner.capacity / WHOLE_SHARE
    }

    /// Chunks of `m` from chunk `first` on, fetched and verified unless cached, at least one and no more than
    /// reach `max_bytes` or a quarter of the cache (so that concurrent reads share it), held until the returned run
    /// is dropped.
    pub async fn ensure_chunks(
        &self,
        source: &dyn SegmentSource,
        dir_name: &str,
        m: &Manifest,
        first: usize,
        max_bytes: u64,
    ) -> Result<ChunkRun, CacheError> {
        let budget = max_bytes.min(self.inner.capacity / WHOLE_SHARE);
        let mut pins = Vec::new();
        let mut total = 0u64;
        let mut next_offset = None;
        for (i, chunk) in m.log_chunks.iter().enumerate().skip(first) {
            if !pins.is_empty() && total.saturating_add(chunk.size()) > budget {
                break;
            }
            let id = PartId {
                dir_name: dir_name.to_string(),
                base: m.base_offset,
                file: segment_file_name(chunk_first(m, i), SegmentFileKind::Log),
            };
            let piece = Piece {
                key: chunk.key.clone(),
                size: chunk.size(),
                crc32c: chunk.crc32c,
                sha256: chunk.sha256,
            };
            pins.push(self.ensure_part(source, id, &piece).await?);
            total = total.saturating_add(chunk.size());
            next_offset = Some(chunk.next_offset);
        }
        let Some(next_offset) = next_offset else {
            return Err(CacheError::Failed(format!(
                "segment {} of {dir_name} has no chunk {first} ({} chunks)",
                m.base_offset,
                m.log_chunks.len()
            )));
        };
        Ok(ChunkRun {
            dir: segment_dir(&self.inner.root, dir_name, m.base_offset),
            next_offset,
            _pins: pins,
        })
    }

    /// `m`'s companion of `kind` (its `.txnindex`, its `.snapshot`), fetched and verified unless cached, with its
    /// path; `None` when the version has none.
    pub async fn ensure_companion(
        &self,
        source: &dyn SegmentSource,
        dir_name: &str,
        m: &Manifest,
        kind: SegmentFileKind,
    ) -> Result<Option<(PathBuf, PinnedPart)>, CacheError> {
        let Some(file) = m.all_files().find(|f| f.name.kind == kind) else {
            return Ok(None);
        };
        let id = PartId {
            dir_name: dir_name.to_string(),
            base: m.base_offset,
            file: format!("{COMPANIONS}/{}", file.name),
        };
        let pinned = self.ensure_part(source, id.clone(), &Piece::from(file)).await?;
        Ok(Some((part_path(&self.inner.root, &id), pinned)))
    }

    /// The part `id` as the object `piece`, fetched unless cached (one download per part at a time).
    async fn ensure_part(
        &self,
        source: &dyn SegmentSource,
        id: PartId,
        piece: &Piece,
    ) -> Result<PinnedPart, CacheError> {
        self.inner
            .loading_parts
            .once(&id, || self.pin_part(&id, piece), self.load_part(source, &id, piece))
            .await
    }

    fn pin_part(&self, id: &PartId, piece: &Piece) -> Option<PinnedPart> {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let e = state
            .parts
            .get_mut(id)
            .filter(|e| e.key == piece.key && e.sha256 == piece.sha256)?;
        e.pins += 1;
        e.last_used = self.inner.clock.fetch_add(1, Ordering::Relaxed);
        Some(PinnedPart {
            inner: self.inner.clone(),
            id: id.clone(),
        })
    }

    async fn load_part(
        &self,
        source: &dyn SegmentSource,
        id: &PartId,
        piece: &Piece,
    ) -> Result<PinnedPart, CacheError> {
        let root = &self.inner.root;
        let dest = part_path(root, id);
        let tail = {
            let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            // Another version's bytes under the same name (the segment was replaced in the bucket): dropped first,
            // unless a read holds them.
            let held = state.parts.get(id).map(|e| (e.pins, e.tail));
            match held {
                Some((pins, _)) if pins > 0 => {
                    return Err(CacheError::Failed(format!(
                        "{}: another version of it is being read; retried at the next read",
                        dest.display()
                    )))
                }
                Some((_, tail)) => {
                    if let Some(old) = state.parts.remove(id) {
                        state.used = state.used.saturating_sub(old.bytes);
                    }
                    let _ = fs::remove_file(&dest);
                    tail
                }
                None => state
                    .parts
                    .iter()
                    .any(|(k, e)| e.tail && k.dir_name == id.dir_name && k.base == id.base),
            }
        };
        self.reserve_part(id, piece.size)?;
        let outcome = async {
            let parent = dest.parent().unwrap_or(root);
            fs::create_dir_all(parent).map_err(|e| super::failed(parent, e))?;
            let tmp = self.tmp_path(&root.join(TMP_DIR));
            self.fetch_verified(source, piece, &tmp).await?;
            fs::rename(&tmp, &dest).map_err(|e| {
                let _ = fs::remove_file(&tmp);
                super::failed(&dest, e)
            })
        }
        .await;
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(()) => {
                state.parts.insert(
                    id.clone(),
                    PartEntry {
                        key: piece.key.clone(),
                        sha256: piece.sha256,
                        bytes: piece.size,
                        pins: 1,
                        last_used: self.inner.clock.fetch_add(1, Ordering::Relaxed),
                        tail,
                    },
                );
                Ok(PinnedPart {
                    inner: self.inner.clone(),
                    id: id.clone(),
                })
            }
            Err(e) => {
                state.used = state.used.saturating_sub(piece.size);
                Err(e)
            }
        }
    }

    /// Count `bytes` as used for the part `id`, evicting for room; a part larger than the whole cache is refused
    /// with the size to raise it to.
    fn reserve_part(&self, id: &PartId, bytes: u64) -> Result<(), CacheError> {
        let capacity = self.inner.capacity;
        if bytes > capacity {
            return Err(CacheError::Failed(format!(
                "{} of segment {} of {} is {bytes} bytes, more than the whole cache ({capacity} bytes): serve it \
                 with a --cache-size of at least {} MiB",
                id.file,
                id.base,
                id.dir_name,
                bytes.div_ceil(1 << 20)
            )));
        }
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.used.saturating_add(bytes) > capacity {
            if !state.evict_one(&self.inner.root, Keep::Part(id)) {
                return Err(CacheError::Failed(format!(
                    "no room in the cache for {} of segment {} of {} ({bytes} bytes): every cached segment and \
                     chunk is being read",
                    id.file, id.base, id.dir_name
                )));
            }
        }
        state.used = state.used.saturating_add(bytes);
        Ok(())
    }
}
