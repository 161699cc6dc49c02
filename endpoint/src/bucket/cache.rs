//! The local segment cache of the remote read replica: whole segment versions fetched from the bucket on demand,
//! verified, kept under a byte bound.
//!
//! Layout: `<cache>/<topic>-<partition>/` is a Kafka partition directory holding the cached segments only
//! (`<base:020>.log` and the companions its manifest lists), so the mirror's readers (`crate::mirror::segments`)
//! serve it unchanged; `<cache>/.tmp/` holds downloads in flight. A file becomes visible in a partition directory
//! only by a rename, after its size, CRC-32C and SHA-256 matched the manifest (a chunked `.log`: every chunk, then
//! the assembled file), so no byte is ever served that the manifest did not vouch for.
//!
//! Why whole segments: the readers find batches through a segment's `.index` and `.timeindex` and walk its `.log`;
//! a segment is also the unit a manifest describes and digests. A chunked version larger than a quarter of the
//! cache is the exception, cached by chunks (`chunks`). A grown version of a cached active segment (a v2
//! manifest naming the cached chunks plus new ones) downloads the new chunks only and appends them in place; the
//! readers never look past the served high watermark, so bytes appended beyond it are invisible until the view
//! moves.
//!
//! The bound: the bytes of every cached file plus the downloads in flight stay at or under `cache_size`. Room is
//! made by evicting whole segments, least recently used first, never one a read holds (a [`Pinned`]) and the
//! partitions' newest segments last (the last stable offset is followed in them); chunks count and are evicted
//! alike. A segment or chunk larger than the whole cache, or a cache whose every item is held, is a storage error
//! for that read only, naming the `--cache-size` it would need. The cache starts empty:
//! what an earlier run left is removed, because which version of a segment those files were is not recorded. Only a
//! directory this cache created (it holds [`MARKER`]) is emptied; another non-empty directory is refused.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use segment_format::dir::SegmentFileKind;
use segmirror_transport::digest::Hasher;
use segmirror_transport::manifest::{Manifest, ManifestFile, Sha256Digest};
use segmirror_transport::{Digest, SegmentSource};

mod chunks;

pub(crate) use chunks::{chunk_first, chunk_holding, ChunkRun, PinnedPart};

/// The file that marks a directory as a segment cache: only a marked directory is emptied at start.
pub(crate) const MARKER: &str = ".segmirror-cache";
/// Name of the directory of downloads in flight.
const TMP_DIR: &str = ".tmp";
/// Bytes copied at a time when a chunk is appended.
const COPY_BYTES: usize = 1 << 20;

/// A segment: its partition directory's name and base offset.
pub(crate) type SegmentId = (String, i64);

/// One object of a version as the cache fetches it: where it ends up, and what the manifest says of it.
#[derive(Debug, Clone)]
struct Piece {
    key: String,
    size: u64,
    crc32c: u32,
    sha256: Sha256Digest,
}

impl From<&ManifestFile> for Piece {
    fn from(f: &ManifestFile) -> Self {
        Piece {
            key: f.key.clone(),
            size: f.size,
            crc32c: f.crc32c,
            sha256: f.sha256,
        }
    }
}

/// A cached segment version.
#[derive(Debug)]
struct Entry {
    /// The version: its next offset and its `.log`'s SHA-256.
    next: i64,
    log_sha256: Sha256Digest,
    /// The `.log` as the objects it was assembled from (one for a whole `.log`), for a grown version to append to.
    log_objects: Vec<(String, Sha256Digest, u64)>,
    /// File names in the partition directory, and their bytes.
    files: Vec<String>,
    bytes: u64,
    pins: u32,
    last_used: u64,
    /// The partition's newest segment (evicted last).
    tail: bool,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<SegmentId, Entry>,
    /// Chunks and companions of the segments cached by chunks (`chunks`).
    parts: HashMap<chunks::PartId, chunks::PartEntry>,
    /// Bytes of the cached files plus the downloads in flight.
    used: u64,
}

/// What [`SegmentCache::reserve`] may not evict: the item the room is for.
#[derive(Clone, Copy)]
enum Keep<'a> {
    Segment(&'a SegmentId),
    Part(&'a chunks::PartId),
}

impl State {
    /// Evict the least recently used unheld item (whole segments and chunks alike, partitions' newest segments
    /// last), other than `keep`; false when every item is held.
    fn evict_one(&mut self, root: &Path, keep: Keep<'_>) -> bool {
        let segment = self
            .entries
            .iter()
            .filter(|(k, e)| !matches!(keep, Keep::Segment(id) if id == *k) && e.pins == 0)
            .map(|(k, e)| ((e.tail, e.last_used), k))
            .min_by_key(|(rank, _)| *rank)
            .map(|(rank, k)| (rank, k.clone()));
        let part = self
            .parts
            .iter()
            .filter(|(k, e)| !matches!(keep, Keep::Part(id) if id == *k) && e.pins == 0)
            .map(|(k, e)| ((e.tail, e.last_used), k))
            .min_by_key(|(rank, _)| *rank)
            .map(|(rank, k)| (rank, k.clone()));
        match (segment, part) {
            (Some((a, victim)), Some((b, _))) if a <= b => self.evict_segment(root, &victim),
            (Some((_, victim)), None) => self.evict_segment(root, &victim),
            (_, Some((_, victim))) => {
                if let Some(e) = self.parts.remove(&victim) {
                    self.used = self.used.saturating_sub(e.bytes);
                    let _ = fs::remove_file(chunks::part_path(root, &victim));
                }
            }
            (None, None) => return false,
        }
        true
    }

    fn evict_segment(&mut self, root: &Path, victim: &SegmentId) {
        if let Some(e) = self.entries.remove(victim) {
            self.used = self.used.saturating_sub(e.bytes);
            remove_files(&root.join(&victim.0), &e.files);
        }
    }
}

/// One download at a time per key: concurrent reads of a missing item wait for the first one's download instead of
/// starting their own.
#[derive(Debug)]
struct Loads<K>(Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>);

impl<K> Default for Loads<K> {
    fn default() -> Self {
        Loads(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + std::hash::Hash + Clone> Loads<K> {
    /// What `cached` holds, else what `load` gives, with `cached` asked again once the key's lock is held (another
    /// read may have loaded it meanwhile).
    async fn once<T>(
        &self,
        key: &K,
        cached: impl Fn() -> Option<T>,
        load: impl std::future::Future<Output = Result<T, CacheError>>,
    ) -> Result<T, CacheError> {
        if let Some(held) = cached() {
            return Ok(held);
        }
        let lock = {
            let mut loading = self.0.lock().unwrap_or_else(|e| e.into_inner());
            loading.entry(key.clone()).or_default().clone()
        };
        let guard = lock.lock().await;
        let result = match cached() {
            Some(held) => Ok(held),
            None => load.await,
        };
        drop(guard);
        let mut loading = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&lock) <= 2 {
            loading.remove(key);
        }
        result
    }
}

/// The cache (see the module docs).
#[derive(Debug)]
pub(crate) struct SegmentCache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    capacity: u64,
    state: Mutex<State>,
    clock: AtomicU64,
    /// One download at a time per segment, so concurrent fetches of a missing segment download it once.
    loading: Loads<SegmentId>,
    /// The same, for chunks and companions of segments cached by chunks.
    loading_parts: Loads<chunks::PartId>,
    tmp_counter: AtomicU64,
    /// Bytes downloaded from the store, in all.
    fetched: AtomicU64,
}

/// A cached segment held for a read: it is not evicted until dropped.
#[derive(Debug)]
pub(crate) struct Pinned {
    inner: Arc<Inner>,
    id: SegmentId,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = state.entries.get_mut(&self.id) {
            e.pins = e.pins.saturating_sub(1);
        }
    }
}

/// Why a segment could not be cached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    /// The bucket's bytes are not what the manifest says: refused, nothing made visible.
    #[error("{0}")]
    Refused(String),
    /// The store or the local disk failed, or there is no room.
    #[error("{0}")]
    Failed(String),
}

impl SegmentCache {
    /// A cache in `root`, emptied of what an earlier run left (see the module docs).
    pub fn open(root: &Path, capacity: u64) -> io::Result<SegmentCache> {
        fs::create_dir_all(root)?;
        let marker = root.join(MARKER);
        if !marker.exists() {
            // Emptying a directory that is not a cache (a mistyped path) would delete someone's files.
            if fs::read_dir(root)?.next().is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is not empty and not a segment cache (no {MARKER}): choose an empty or new directory",
                        root.display()
                    ),
                ));
            }
            fs::write(&marker, b"segmirror serve: segment cache\n")?;
        }
        for entry in fs::read_dir(root)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // Only what this cache writes: partition directories and the download directory. A catalog or any
            // other file beside them stays.
            let is_ours = name == TMP_DIR
                || name == chunks::CHUNKS_DIR
                || segment_format::dir::PartitionDirName::parse(name).is_ok();
            if is_ours && entry.file_type()?.is_dir() {
                fs::remove_dir_all(entry.path())?;
            }
        }
        fs::create_dir_all(root.join(TMP_DIR))?;
        Ok(SegmentCache {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                capacity,
                state: Mutex::new(State::default()),
                clock: AtomicU64::new(0),
                loading: Loads::default(),
                loading_parts: Loads::default(),
                tmp_counter: AtomicU64::new(0),
                fetched: AtomicU64::new(0),
            }),
        })
    }

    /// The partition directory of `dir_name` (`<topic>-<partition>`).
    pub fn partition_dir(&self, dir_name: &str) -> PathBuf {
        self.inner.root.join(dir_name)
    }

    /// Bytes cached (and reserved for downloads in flight).
    pub fn used(&self) -> u64 {
        self.inner.state.lock().map(|s| s.used).unwrap_or(0)
    }

    /// Bytes downloaded from the store since the cache was opened.
    pub fn fetched(&self) -> u64 {
        self.inner.fetched.load(Ordering::Relaxed)
    }

    /// Forget and delete every cached segment of `dir_name` not in `keep` (a base offset the bucket no longer
    /// names, or the whole partition when its lineage changed), unless a read holds it.
    pub fn retain(&self, dir_name: &str, keep: &dyn Fn(i64) -> bool) {
        let dir = self.partition_dir(dir_name);
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        chunks::retain_parts(&mut state, &self.inner.root, dir_name, keep);
        let gone: Vec<SegmentId> = state
            .entries
            .iter()
            .filter(|(id, e)| id.0 == dir_name && e.pins == 0 && !keep(id.1))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(e) = state.entries.remove(&id) {
                state.used = state.used.saturating_sub(e.bytes);
                remove_files(&dir, &e.files);
            }
        }
    }

    /// Mark which segment is `dir_name`'s newest (evicted last).
    pub fn set_tail(&self, dir_name: &str, base: i64) {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        for (id, e) in state.entries.iter_mut() {
            if id.0 == dir_name {
                e.tail = id.1 == base;
            }
        }
        for (id, e) in state.parts.iter_mut() {
            if id.dir_name == dir_name {
                e.tail = id.base == base;
            }
        }
    }

    /// `m`'s version of its segment in the partition directory `dir_name`, fetched and verified if it is not
    /// cached yet, held until the returned [`Pinned`] is dropped.
    pub async fn ensure(&self, source: &dyn SegmentSource, dir_name: &str, m: &Manifest) -> Result<Pinned, CacheError> {
        let id: SegmentId = (dir_name.to_string(), m.base_offset);
        self.inner
            .loading
            .once(&id, || self.pin_if_cached(&id, m), self.load(source, &id, m))
            .await
    }

    /// `m`'s version of its segment held for a read if it is cached whole (nothing is fetched).
    pub fn cached(&self, dir_name: &str, m: &Manifest) -> Option<Pinned> {
        self.pin_if_cached(&(dir_name.to_string(), m.base_offset), m)
    }

    fn pin_if_cached(&self, id: &SegmentId, m: &Manifest) -> Option<Pinned> {
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        // The version asked for, or a newer one that extends it (a read holding an older view while the refresh
        // appended to the segment): the reader never looks past the older version's end.
        let e = state
            .entries
            .get_mut(id)
            .filter(|e| same_version(e, m) || extends(e, m))?;
        e.pins += 1;
        e.last_used = self.inner.clock.fetch_add(1, Ordering::Relaxed);
        Some(Pinned {
            inner: self.inner.clone(),
            id: id.clone(),
        })
    }

    /// Fetch `m`'s version: appending the new chunks to the cached older version when it is a prefix of this one,
    /// else downloading every file.
    async fn load(&self, source: &dyn SegmentSource, id: &SegmentId, m: &Manifest) -> Result<Pinned, CacheError> {
        let log = m
            .file(SegmentFileKind::Log)
            .ok_or_else(|| CacheError::Refused(format!("manifest of segment {} lists no .log", m.base_offset)))?;
        let log_objects = log_objects(m, log);
        let companions: Vec<&ManifestFile> = m.all_files().filter(|f| f.name.kind != SegmentFileKind::Log).collect();
        let companion_bytes: u64 = companions.iter().map(|f| f.size).sum();
        let total = log.size.saturating_add(companion_bytes);
        let appendable = self.appendable_prefix(id, &log_objects);
        // Room for the version (the old version's bytes are given back when it is replaced).
        self.reserve(id, total)?;
        let dir = self.partition_dir(&id.0);
        let tmp = self.inner.root.join(TMP_DIR);
        let outcome = async {
            fs::create_dir_all(&dir).map_err(|e| failed(&dir, e))?;
            let mut staged = Vec::new();
            for f in &companions {
                let path = self.tmp_path(&tmp);
                self.fetch_verified(source, &Piece::from(*f), &path).await?;
                staged.push((path, f.name.to_string()));
            }
            let log_name = log.name.to_string();
            let log_path = dir.join(&log_name);
            match appendable {
                Some(covered) => {
                    // Append the new chunks to the cached `.log` in place; on any failure it is cut back.
                    let before = covered_size(&log_objects, covered);
                    let appended = async {
                        for (i, chunk) in m.log_chunks.iter().enumerate().skip(covered) {
                            let part = self.tmp_path(&tmp);
                            let piece = Piece {
                                key: chunk.key.clone(),
                                size: chunk.size(),
                                crc32c: chunk.crc32c,
                                sha256: chunk.sha256,
                            };
                            self.fetch_verified(source, &piece, &part).await?;
                            let at = log_objects.get(i.wrapping_sub(1)).map_or(0, |o| o.2);
                            append_file(&part, &log_path, at).map_err(|e| failed(&log_path, e))?;
                        }
                        Ok::<_, CacheError>(())
                    }
                    .await;
                    if let Err(e) = appended {
                        let _ = OpenOptions::new()
                            .write(true)
                            .open(&log_path)
                            .and_then(|f| f.set_len(before));
                        return Err(e);
                    }
                }
                None => {
                    let path = self.tmp_path(&tmp);
                    if m.is_chunked() {
                        assemble(source, m, &path, &tmp, self).await?;
                    } else {
                        self.fetch_verified(source, &Piece::from(log), &path).await?;
                    }
                    staged.push((path, log_name.clone()));
                }
            }
            // Companions first, the `.log` last: a listing never sees a `.log` without its indexes.
            for (path, name) in &staged {
                let dest = dir.join(name);
                fs::rename(path, &dest).map_err(|e| failed(&dest, e))?;
            }
            let mut files: Vec<String> = companions.iter().map(|f| f.name.to_string()).collect();
            files.push(log_name);
            Ok::<_, CacheError>(files)
        }
        .await;
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let old = state.entries.remove(id);
        // The reservation becomes the entry's bytes; the old version's go.
        if let Some(old) = &old {
            state.used = state.used.saturating_sub(old.bytes);
        }
        match outcome {
            Ok(files) => {
                if let Some(old) = &old {
                    let stale: Vec<String> = old.files.iter().filter(|f| !files.contains(f)).cloned().collect();
                    remove_files(&dir, &stale);
                }
                // Reads holding the old version hold this one now (same files, grown or replaced by renames).
                let held = old.as_ref().map_or(0, |o| o.pins);
                state.entries.insert(
                    id.clone(),
                    Entry {
                        next: m.next_offset,
                        log_sha256: log.sha256,
                        log_objects,
                        files,
                        bytes: total,
                        pins: held + 1,
                        last_used: self.inner.clock.fetch_add(1, Ordering::Relaxed),
                        tail: old.as_ref().is_some_and(|o| o.tail),
                    },
                );
                Ok(Pinned {
                    inner: self.inner.clone(),
                    id: id.clone(),
                })
            }
            Err(e) => {
                state.used = state.used.saturating_sub(total);
                if let Some(old) = old {
                    if appendable.is_some() {
                        // Its `.log` was appended to and cut back: not served again.
                        remove_files(&dir, &old.files);
                    } else {
                        state.used = state.used.saturating_add(old.bytes);
                        state.entries.insert(id.clone(), old);
                    }
                }
                Err(e)
            }
        }
    }

    /// How many of `objects` (the new version's `.log` objects) the cached version of `id` holds as its whole
    /// `.log`, when the new version only adds objects after them.
    fn appendable_prefix(&self, id: &SegmentId, objects: &[(String, Sha256Digest, u64)]) -> Option<usize> {
        let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let e = state.entries.get(id)?;
        let n = e.log_objects.len();
        (n > 0 && n < objects.len() && objects.get(..n) == Some(&e.log_objects[..]) && e.pins == 0).then_some(n)
    }

    /// Count `bytes` as used, evicting least recently used segments (not `id`, not held, tails last) for room.
    fn reserve(&self, id: &SegmentId, bytes: u64) -> Result<(), CacheError> {
        let capacity = self.inner.capacity;
        if bytes > capacity {
            return Err(CacheError::Failed(format!(
                "segment {} of {} needs {bytes} bytes, more than the whole cache ({capacity} bytes): serve it with a \
                 --cache-size of at least {} MiB",
                id.1,
                id.0,
                bytes.div_ceil(1 << 20)
            )));
        }
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        // The version being replaced counts as free: its bytes are given back when the new one is in.
        let replaced = state.entries.get(id).map_or(0, |e| e.bytes);
        while state.used.saturating_sub(replaced).saturating_add(bytes) > capacity {
            if !state.evict_one(&self.inner.root, Keep::Segment(id)) {
                return Err(CacheError::Failed(format!(
                    "no room in the cache for segment {} of {} ({bytes} bytes): every cached segment is being read",
                    id.1, id.0
                )));
            }
        }
        state.used = state.used.saturating_add(bytes);
        Ok(())
    }

    /// [`fetch_verified`], counted.
    async fn fetch_verified(&self, source: &dyn SegmentSource, piece: &Piece, path: &Path) -> Result<(), CacheError> {
        fetch_verified(source, piece, path).await?;
        self.inner.fetched.fetch_add(piece.size, Ordering::Relaxed);
        Ok(())
    }

    fn tmp_path(&self, tmp: &Path) -> PathBuf {
        let n = self.inner.tmp_counter.fetch_add(1, Ordering::Relaxed);
        tmp.join(format!("{n}.part"))
    }
}

/// The objects `m`'s `.log` is made of: its chunks, or the whole `.log`; each with its digest and end.
fn log_objects(m: &Manifest, log: &ManifestFile) -> Vec<(String, Sha256Digest, u64)> {
    if m.is_chunked() {
        m.log_chunks.iter().map(|c| (c.key.clone(), c.sha256, c.to)).collect()
    } else {
        vec![(log.key.clone(), log.sha256, log.size)]
    }
}

/// Whether the cached version holds `m`'s `.log` as its prefix (same objects, more after them).
fn extends(e: &Entry, m: &Manifest) -> bool {
    let Some(log) = m.file(SegmentFileKind::Log) else {
        return false;
    };
    let wanted = log_objects(m, log);
    e.next >= m.next_offset
        && e.log_objects.len() >= wanted.len()
        && e.log_objects.get(..wanted.len()) == Some(&wanted[..])
}

fn same_version(e: &Entry, m: &Manifest) -> bool {
    e.next == m.next_offset && m.file(SegmentFileKind::Log).is_some_and(|l| l.sha256 == e.log_sha256)
}

fn covered_size(objects: &[(String, Sha256Digest, u64)], covered: usize) -> u64 {
    covered.checked_sub(1).and_then(|i| objects.get(i)).map_or(0, |o| o.2)
}

fn failed(path: &Path, e: io::Error) -> CacheError {
    CacheError::Failed(format!("{}: {e}", path.display()))
}

fn remove_files(dir: &Path, files: &[String]) {
    for f in files {
        let _ = fs::remove_file(dir.join(f));
    }
}

/// Compare a received digest with what the manifest says; the refusal names the key and the field.
fn check(piece: &Piece, got: &Digest) -> Result<(), CacheError> {
    let refuse = |what: &str, expected: String, found: String| {
        Err(CacheError::Refused(format!(
            "{}: {what} is {found}, the manifest says {expected}",
            piece.key
        )))
    };
    if got.size != piece.size {
        refuse("size", piece.size.to_string(), got.size.to_string())
    } else if got.crc32c != piece.crc32c {
        refuse("crc32c", format!("{:08x}", piece.crc32c), format!("{:08x}", got.crc32c))
    } else if got.sha256 != piece.sha256 {
        refuse("sha256", piece.sha256.to_string(), got.sha256.to_string())
    } else {
        Ok(())
    }
}

/// Download `piece` to `path`, verified against its size and SHA-256 (by the store) and CRC-32C (here); nothing is
/// left at `path` on a refusal.
async fn fetch_verified(source: &dyn SegmentSource, piece: &Piece, path: &Path) -> Result<(), CacheError> {
    let digest = match source.fetch_file(&piece.key, path, piece.size, &piece.sha256).await {
        Ok(d) => d,
        Err(e @ segmirror_transport::Error::Mismatch { .. }) => return Err(CacheError::Refused(e.to_string())),
        Err(e) => return Err(CacheError::Failed(e.to_string())),
    };
    if let Err(e) = check(piece, &digest) {
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(())
}

/// Assemble a chunked `.log` at `dest` from all its chunks, each verified, then the whole against the `.log` entry.
async fn assemble(
    source: &dyn SegmentSource,
    m: &Manifest,
    dest: &Path,
    tmp: &Path,
    cache: &SegmentCache,
) -> Result<(), CacheError> {
    let mut whole = Hasher::new();
    File::create(dest).map_err(|e| failed(dest, e))?;
    let result = async {
        for chunk in &m.log_chunks {
            let part = cache.tmp_path(tmp);
            let piece = Piece {
                key: chunk.key.clone(),
                size: chunk.size(),
                crc32c: chunk.crc32c,
                sha256: chunk.sha256,
            };
            cache.fetch_verified(source, &piece, &part).await?;
            let at = whole.size();
            append_hashing(&part, dest, at, &mut whole).map_err(|e| failed(dest, e))?;
        }
        if let Some(log) = m.file(SegmentFileKind::Log) {
            let piece = Piece {
                key: format!("{} (assembled from {} chunks)", log.key, m.log_chunks.len()),
                ..Piece::from(log)
            };
            check(&piece, &whole.finish())?;
        }
        Ok(())
    }
    .await;
    if result.is_err() {
        let _ = fs::remove_file(dest);
    }
    result
}

/// Append the file `part` to `dest` at byte `at` (cutting whatever lies past it), then remove `part`.
fn append_file(part: &Path, dest: &Path, at: u64) -> io::Result<()> {
    append_hashing(part, dest, at, &mut Hasher::new())
}

fn append_hashing(part: &Path, dest: &Path, at: u64, hasher: &mut Hasher) -> io::Result<()> {
    let mut input = File::open(part)?;
    let mut out = OpenOptions::new().write(true).open(dest)?;
    out.set_len(at)?;
    io::Seek::seek(&mut out, io::SeekFrom::Start(at))?;
    let mut buf = vec![0u8; COPY_BYTES];
    loop {
        let n = input.read(&mut buf)?;
        let Some(piece) = buf.get(..n).filter(|p| !p.is_empty()) else {
            break;
        };
        hasher.update(piece);
        out.write_all(piece)?;
    }
    drop(input);
    fs::remove_file(part)
}
