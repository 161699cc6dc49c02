//! The bucket's backend: one [`Store`] over a local folder or an S3 bucket.
//!
//! Everything segmirror puts into or takes out of a bucket goes through this
//! module, so the properties the rest of the system relies on hold in one place:
//!
//! - **Bounded memory.** Segments (up to 2 GiB) are streamed: uploads read the
//!   file in parts on a blocking thread and hand them to the uploader through a
//!   bounded channel; downloads stream to disk. Between a local folder store and
//!   local files the kernel copies the bytes (see the `local` module). Small
//!   documents ([`Store::get_bytes`]) are refused above a caller-given limit
//!   before their body is read.
//! - **Integrity computed on the bytes transferred.** Size, CRC-32C and SHA-256
//!   are computed while the bytes go through (for a local folder: of each piece
//!   where it landed, right after the kernel copied it), never by reading the
//!   source a second time; a download is checked against the size and SHA-256 a
//!   manifest promised, and a mismatch removes the file and fails with
//!   [`Error::Mismatch`].
//! - **Retries in one place.** Each operation is retried as a whole (a broken
//!   download restarts, a failed multipart upload is aborted and restarted) with
//!   exponential backoff and full jitter, only when [`Error::is_transient`] says
//!   so, at most [`RetryPolicy::max_attempts`] times.
//! - **Create-if-absent** ([`Store::put_if_absent`]) maps to `PutMode::Create`:
//!   an atomic no-replace link on a local folder, `If-None-Match: *` on S3. It is
//!   what fences a stale shipper (see `lease`).
//!
//! Blocking file I/O and hashing run in `spawn_blocking`; network I/O on tokio.
//! Keys are plain `/`-separated strings relative to the store's root (the folder,
//! or `bucket/prefix`); build them with the contract's `manifest`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{GetResultPayload, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use segmirror_contract::manifest::Sha256Digest;
use tokio::sync::mpsc;

use self::error::{from_store, PUT_IF_ABSENT};
use segmirror_contract::error::{Error, MismatchKind, Result};

mod error;
mod io;
pub mod lease;
mod listing;
mod local;
mod sink_source;
mod url;

pub use crate::bucket::traits::{Digest, Listing, ObjectInfo, SkippedEntry};
use io::{hash_range, read_exact_hashing, read_parts, Dest};
pub use listing::{is_temporary_name, S3_PAGE_KEYS};
pub use url::{S3Options, StoreUrl};

/// Files at least this large are uploaded in parts. Below it one PUT is cheaper
/// than the three requests of a multipart upload, and a retry re-sends at most
/// this much.
pub const DEFAULT_MULTIPART_THRESHOLD: u64 = 64 << 20;
/// Size of each uploaded part. S3 requires at least 5 MiB (except the last) and
/// allows 10,000 parts: 16 MiB parts cover 156 GiB, far above Kafka's 2 GiB
/// segment limit.
pub const DEFAULT_PART_SIZE: usize = 16 << 20;
/// Parts in flight per upload: 4 × 16 MiB bounds an upload's memory to ~80 MiB
/// (plus one part being read) while keeping a high-latency link busy.
pub const DEFAULT_UPLOAD_CONCURRENCY: usize = 4;
/// The [`MultipartPolicy`] of a local folder. There a part is one piece of the
/// file being assembled next to the object (renamed into place when complete),
/// copied by the kernel and then hashed: no request to pay for and no minimum
/// size, so parts are small enough to be hashed while the copy is still in the
/// CPU's cache. (A store wrapped by [`Store::from_object_store`] uses the
/// default policy and goes through `object_store` with it, holding at most
/// `(2 × max_concurrency + 2) × part_size` bytes per upload.)
pub const LOCAL_MULTIPART: MultipartPolicy = MultipartPolicy {
    threshold: 4 << 20,
    part_size: 2 << 20,
    max_concurrency: 2,
};
/// Smallest part size S3 accepts for any part but the last.
pub const MIN_PART_SIZE: usize = 5 << 20;
/// Read buffer for hashing and for small uploads read from disk.
pub(crate) const READ_CHUNK: usize = 1 << 20;
/// Chunks buffered between a download stream and the disk writer.
const DOWNLOAD_QUEUE: usize = 8;
/// Attempts per operation: with the default backoff the last one starts ~6 s
/// after the first failure, long enough for a restarted endpoint or a throttled
/// bucket, short enough that a real outage is reported promptly.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// First retry delay (before jitter).
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Cap on a single retry delay.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How often and how patiently an operation is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, including the first (at least 1).
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
        }
    }
}

impl RetryPolicy {
    /// Delay before attempt `failed + 1`: uniformly random in
    /// `[0, min(max, initial × 2^(failed-1))]` ("full jitter"), so shippers that
    /// failed together do not retry together.
    pub fn backoff(&self, failed: u32) -> Duration {
        let exp = failed.saturating_sub(1).min(30);
        let cap = self.initial_backoff.saturating_mul(1 << exp).min(self.max_backoff);
        let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        if cap_nanos == 0 {
            return Duration::ZERO;
        }
        let random = getrandom::u64().unwrap_or(cap_nanos);
        Duration::from_nanos(random % (cap_nanos + 1).max(1))
    }
}

/// When and how files are uploaded in parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultipartPolicy {
    /// Files of at least this many bytes use a multipart upload.
    pub threshold: u64,
    /// Bytes per part (S3 needs at least [`MIN_PART_SIZE`]).
    pub part_size: usize,
    /// Parts uploaded at once.
    pub max_concurrency: usize,
}

impl Default for MultipartPolicy {
    fn default() -> Self {
        MultipartPolicy {
            threshold: DEFAULT_MULTIPART_THRESHOLD,
            part_size: DEFAULT_PART_SIZE,
            max_concurrency: DEFAULT_UPLOAD_CONCURRENCY,
        }
    }
}

/// What [`Store::put_file`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutSummary {
    pub digest: Digest,
    /// `None` for a single PUT, else the number of parts uploaded.
    pub multipart_parts: Option<u32>,
}

fn task_error(what: &str, e: tokio::task::JoinError) -> Error {
    Error::Task {
        what: what.to_string(),
        message: e.to_string(),
    }
}

/// The object path of `key`, which must already be in canonical form (no leading
/// or trailing `/`, no empty, `.` or `..` components): a key is never rewritten.
fn object_path(key: &str) -> Result<ObjectPath> {
    let bad = |reason: String| Error::bad_key(key, reason);
    let path = ObjectPath::parse(key).map_err(|e| bad(format!("not a valid object key: {e}")))?;
    if path.as_ref() != key {
        return Err(bad(format!("not a canonical object key (would be stored as '{path}')")));
    }
    Ok(path)
}

/// An object store with segmirror's transfer rules. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// The same store when it is a local folder: files are then copied to and
    /// from it directly (see the `local` module).
    local: Option<Arc<LocalFileSystem>>,
    /// The folder of a local store: listed and checked here, not through `object_store` (see `listing`).
    local_root: Option<PathBuf>,
    /// An S3 store and the key prefix the store URL names (`""` for the bucket root): listed page by page.
    s3_lister: Option<(Arc<dyn object_store::list::PaginatedListStore>, String)>,
    description: String,
    retry: RetryPolicy,
    multipart: MultipartPolicy,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("store", &self.description)
            .field("retry", &self.retry)
            .field("multipart", &self.multipart)
            .finish()
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

impl Store {
    /// Open the store `url` names, creating a local folder if missing (what a
    /// shipper wants). S3 settings come from the `AWS_*` environment, overridden by
    /// `s3`; conditional puts use `If-None-Match` (object_store's default).
    pub fn open(url: &StoreUrl, s3: &S3Options) -> Result<Store> {
        if let StoreUrl::Local { root } = url {
            std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        }
        Store::open_existing(url, s3)
    }

    /// Open the store `url` names; a local folder must exist and be a directory
    /// (a reader given a mistyped path must fail, not create an empty store and
    /// report it sound).
    pub fn open_existing(url: &StoreUrl, s3: &S3Options) -> Result<Store> {
        let bad = |reason: String| Error::BadUrl {
            url: url.to_string(),
            reason,
        };
        let mut local = None;
        let mut local_root = None;
        let mut s3_lister = None;
        let inner: Arc<dyn ObjectStore> = match url {
            StoreUrl::Local { root } => {
                match std::fs::metadata(root) {
                    Ok(meta) if meta.is_dir() => {}
                    Ok(_) => return Err(bad(format!("{} is not a directory", root.display()))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(bad(format!("the store folder {} does not exist", root.display())))
                    }
                    Err(e) => return Err(Error::io(root, e)),
                }
                local_root = Some(std::fs::canonicalize(root).map_err(|e| Error::io(root, e))?);
                let folder = Arc::new(
                    LocalFileSystem::new_with_prefix(root)
                        .map_err(|e| bad(e.to_string()))?
                        .with_automatic_cleanup(true),
                );
                local = Some(Arc::clone(&folder));
                folder
            }
            StoreUrl::S3 { bucket, prefix } => {
                let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(v) = &s3.endpoint {
                    builder = builder.with_endpoint(v);
                }
                if let Some(v) = &s3.region {
                    builder = builder.with_region(v);
                }
                if let Some(v) = &s3.access_key_id {
                    builder = builder.with_access_key_id(v);
                }
                if let Some(v) = &s3.secret_access_key {
                    builder = builder.with_secret_access_key(v);
                }
                if let Some(v) = &s3.session_token {
                    builder = builder.with_token(v);
                }
                if let Some(v) = s3.allow_http {
                    builder = builder.with_allow_http(v);
                }
                let s3 = Arc::new(builder.build().map_err(|e| bad(e.to_string()))?);
                let lister: Arc<dyn object_store::list::PaginatedListStore> = s3.clone();
                s3_lister = Some((lister, prefix.trim_matches('/').to_string()));
                if prefix.is_empty() {
                    s3
                } else {
                    Arc::new(PrefixStore::new(Arc::unwrap_or_clone(s3), prefix.as_str()))
                }
            }
        };
        let store = Store {
            local,
            local_root,
            s3_lister,
            ..Store::from_object_store(inner, url.to_string())
        };
        Ok(match url {
            StoreUrl::Local { .. } => store.with_multipart(LOCAL_MULTIPART),
            StoreUrl::S3 { .. } => store,
        })
    }

    /// Wrap any `ObjectStore` (tests use this for fault injection).
    pub fn from_object_store(inner: Arc<dyn ObjectStore>, description: impl Into<String>) -> Store {
        Store {
            inner,
            local: None,
            local_root: None,
            s3_lister: None,
            description: description.into(),
            retry: RetryPolicy::default(),
            multipart: MultipartPolicy::default(),
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Store {
        self.retry = RetryPolicy {
            max_attempts: retry.max_attempts.max(1),
            ..retry
        };
        self
    }

    pub fn with_multipart(mut self, multipart: MultipartPolicy) -> Store {
        self.multipart = MultipartPolicy {
            part_size: multipart.part_size.max(1),
            max_concurrency: multipart.max_concurrency.max(1),
            ..multipart
        };
        self
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    pub fn multipart_policy(&self) -> MultipartPolicy {
        self.multipart
    }

    /// Whether this is a local folder (files are then copied to and from it directly, nothing is buffered).
    pub fn is_local_folder(&self) -> bool {
        self.local.is_some()
    }

    /// Run `op` until it succeeds, fails permanently, or the attempts run out.
    /// `op` gets the attempt number (1-based).
    async fn retrying<T, F, Fut>(&self, operation: &'static str, key: &str, mut op: F) -> Result<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut attempt = 1;
        loop {
            match op(attempt).await {
                Err(e) if e.is_transient() && attempt < self.retry.max_attempts => {
                    let delay = self.retry.backoff(attempt);
                    tracing::warn!(store = %self.description, key, operation, attempt, ?delay, error = %e, "retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Write `bytes` to `key`, replacing any object there.
    pub async fn put_bytes(&self, key: &str, bytes: impl Into<Bytes>) -> Result<()> {
        let location = object_path(key)?;
        let payload = PutPayload::from(bytes.into());
        self.retrying("put", key, |_| {
            let payload = payload.clone();
            let location = &location;
            async move {
                self.inner
                    .put(location, payload)
                    .await
                    .map(|_| ())
                    .map_err(|e| from_store(key, "put", e))
            }
        })
        .await
    }

    /// Write `bytes` to `key` only if no object is there. `Ok(true)` if this call
    /// created it, `Ok(false)` if it already existed. If an attempt whose answer
    /// was lost did create it, the retry finds our own bytes there and still
    /// returns `Ok(true)`.
    pub async fn put_if_absent(&self, key: &str, bytes: impl Into<Bytes>) -> Result<bool> {
        let location = object_path(key)?;
        let bytes: Bytes = bytes.into();
        let payload = PutPayload::from(bytes.clone());
        let attempts = AtomicU32::new(0);
        let result = self
            .retrying(PUT_IF_ABSENT, key, |attempt| {
                attempts.store(attempt, Ordering::Relaxed);
                let payload = payload.clone();
                let location = &location;
                async move {
                    let opts = PutOptions {
                        mode: PutMode::Create,
                        ..Default::default()
                    };
                    self.inner
                        .put_opts(location, payload, opts)
                        .await
                        .map(|_| ())
                        .map_err(|e| from_store(key, PUT_IF_ABSENT, e))
                }
            })
            .await;
        match result {
            Ok(()) => Ok(true),
            Err(Error::AlreadyExists { .. }) if attempts.load(Ordering::Relaxed) > 1 => {
                let limit = bytes.len() as u64;
                match self.get_bytes(key, limit).await {
                    Ok(existing) => Ok(existing == bytes),
                    Err(Error::TooLarge { .. }) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Err(Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Upload the whole file at `path` to `key` (see [`Store::put_file_prefix`]).
    pub async fn put_file(&self, key: &str, path: &Path) -> Result<PutSummary> {
        self.put_file_prefix(key, path, None).await
    }

    /// Upload the first `len` bytes of `path` (all of it for `None`, as long as it
    /// is when opened) to `key`, streaming from disk; in parts from
    /// [`MultipartPolicy::threshold`] on. Returns the size and checksums of exactly
    /// what was uploaded. A file shorter than `len` fails with an I/O error.
    pub async fn put_file_prefix(&self, key: &str, path: &Path, len: Option<u64>) -> Result<PutSummary> {
        let location = object_path(key)?;
        self.retrying("put file", key, |_| self.put_file_once(key, &location, path, len))
            .await
    }

    async fn put_file_once(
        &self,
        key: &str,
        location: &ObjectPath,
        path: &Path,
        len: Option<u64>,
    ) -> Result<PutSummary> {
        if let Some(folder) = &self.local {
            return self.put_local(folder, key, location, path, len).await;
        }
        let owned = path.to_path_buf();
        let (file, size) = tokio::task::spawn_blocking(move || -> Result<(std::fs::File, u64)> {
            let file = std::fs::File::open(&owned).map_err(|e| Error::io(&owned, e))?;
            let on_disk = file.metadata().map_err(|e| Error::io(&owned, e))?.len();
            Ok((file, len.unwrap_or(on_disk)))
        })
        .await
        .map_err(|e| task_error(key, e))??;

        if size < self.multipart.threshold || size == 0 {
            let owned = path.to_path_buf();
            let (bytes, digest) = tokio::task::spawn_blocking(move || read_exact_hashing(file, size, &owned))
                .await
                .map_err(|e| task_error(key, e))??;
            self.inner
                .put(location, PutPayload::from(bytes))
                .await
                .map_err(|e| from_store(key, "put", e))?;
            return Ok(PutSummary {
                digest,
                multipart_parts: None,
            });
        }

        let part_size = self.multipart.part_size;
        let concurrency = self.multipart.max_concurrency;
        let upload = self
            .inner
            .put_multipart(location)
            .await
            .map_err(|e| from_store(key, "start multipart upload", e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, part_size);
        let (tx, mut rx) = mpsc::channel::<Bytes>(concurrency);
        let owned = path.to_path_buf();
        let reader = tokio::task::spawn_blocking(move || read_parts(file, size, part_size, &owned, tx));
        let mut parts = 0u32;
        let mut failure: Option<Error> = None;
        while let Some(part) = rx.recv().await {
            if let Err(e) = writer.wait_for_capacity(concurrency).await {
                failure = Some(from_store(key, "upload part", e));
                break;
            }
            writer.put(part);
            parts += 1;
        }
        drop(rx);
        let read = reader.await.map_err(|e| task_error(key, e));
        let digest = match (failure, read) {
            (None, Ok(Ok(digest))) => digest,
            (Some(e), _) | (None, Err(e)) | (None, Ok(Err(e))) => {
                if let Err(abort) = writer.abort().await {
                    tracing::warn!(key, error = %abort, "aborting a failed multipart upload failed");
                }
                return Err(e);
            }
        };
        writer
            .finish()
            .await
            .map_err(|e| from_store(key, "complete multipart upload", e))?;
        Ok(PutSummary {
            digest,
            multipart_parts: Some(parts),
        })
    }

    /// [`Store::put_file_once`] into a local folder: copied by the kernel (see
    /// the `local` module), in parts by the same rule as a multipart upload.
    async fn put_local(
        &self,
        folder: &LocalFileSystem,
        key: &str,
        location: &ObjectPath,
        path: &Path,
        len: Option<u64>,
    ) -> Result<PutSummary> {
        let dest = folder
            .path_to_filesystem(location)
            .map_err(|e| from_store(key, "put", e))?;
        let (source, owned_key, policy) = (path.to_path_buf(), key.to_string(), self.multipart);
        let (digest, multipart_parts) = tokio::task::spawn_blocking(move || {
            let size = match len {
                Some(len) => len,
                None => std::fs::metadata(&source).map_err(|e| Error::io(&source, e))?.len(),
            };
            let part_size = (size >= policy.threshold && size > 0).then_some(policy.part_size as u64);
            local::put(&source, size, &dest, &owned_key, part_size)
        })
        .await
        .map_err(|e| task_error(key, e))??;
        Ok(PutSummary {
            digest,
            multipart_parts,
        })
    }

    /// Download `key` into the file at `path` (created or truncated), checking the
    /// size before the first byte and SHA-256 at the end; the file is not fsynced
    /// (see [`SegmentSource::receive_file`](crate::bucket::SegmentSource::receive_file)).
    /// Never holds more than a few chunks in memory. On any failure the file is
    /// removed; a mismatch is [`Error::Mismatch`] and is not retried.
    pub async fn get_to_file(
        &self,
        key: &str,
        path: &Path,
        expected_size: u64,
        expected_sha256: &Sha256Digest,
    ) -> Result<Digest> {
        let location = object_path(key)?;
        let result = self
            .retrying("get", key, |_| async {
                let sink = Dest::File(path.to_path_buf());
                let digest = self.download(key, &location, Some(expected_size), sink).await?;
                crate::bucket::traits::check_received(key, &digest, expected_size, expected_sha256)?;
                Ok(digest)
            })
            .await;
        if result.is_err() {
            let owned = path.to_path_buf();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(owned)).await;
        }
        result
    }

    /// Stream `key` and return its size and checksums without keeping it (the
    /// auditor's check of a data object).
    pub async fn hash_object(&self, key: &str) -> Result<Digest> {
        let location = object_path(key)?;
        self.retrying("get", key, |_| self.download(key, &location, None, Dest::Discard))
            .await
    }

    /// One download attempt: the stream is consumed here, bytes are hashed and
    /// written on a blocking thread.
    async fn download(&self, key: &str, location: &ObjectPath, expected: Option<u64>, sink: Dest) -> Result<Digest> {
        if let Some(root) = self.local_root.clone() {
            // A local folder: opened, checked and copied on one blocking thread (see `listing::open_regular_file`).
            let owned = key.to_string();
            return tokio::task::spawn_blocking(move || local::download(&root, &owned, expected, sink))
                .await
                .map_err(|e| task_error(key, e))?;
        }
        let get = self.inner.get(location).await.map_err(|e| from_store(key, "get", e))?;
        let size = get.meta.size;
        if let Some(expected) = expected {
            if size != expected {
                return Err(Error::mismatch(key, MismatchKind::Size, expected, size));
            }
        }
        let digest = match get.payload {
            // A local folder: read the file directly, in large pieces.
            GetResultPayload::File(file, object_path) => {
                let start = get.range.start;
                let len = get.range.end.saturating_sub(start);
                tokio::task::spawn_blocking(move || match sink {
                    Dest::File(dest) => local::get(file, &object_path, start, len, &dest),
                    Dest::Discard => hash_range(file, &object_path, start, len),
                })
                .await
                .map_err(|e| task_error(key, e))??
            }
            GetResultPayload::Stream(stream) => self.download_stream(key, stream, size, sink).await?,
        };
        if digest.size != size {
            return Err(Error::mismatch(key, MismatchKind::Size, size, digest.size));
        }
        Ok(digest)
    }

    /// The bytes of a streamed download, hashed and written on a blocking thread.
    async fn download_stream(
        &self,
        key: &str,
        mut stream: futures::stream::BoxStream<'static, object_store::Result<Bytes>>,
        size: u64,
        sink: Dest,
    ) -> Result<Digest> {
        let (tx, rx) = mpsc::channel::<Bytes>(DOWNLOAD_QUEUE);
        let writer = tokio::task::spawn_blocking(move || sink.consume(rx));
        let mut received = 0u64;
        let mut failure = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    received += chunk.len() as u64;
                    if received > size {
                        failure = Some(Error::mismatch(
                            key,
                            MismatchKind::Size,
                            size,
                            format!("more than {size}"),
                        ));
                        break;
                    }
                    // The writer thread only hangs up on a disk error, reported below.
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    failure = Some(from_store(key, "get", e));
                    break;
                }
            }
        }
        drop(tx);
        let written = writer.await.map_err(|e| task_error(key, e))?;
        if let Some(e) = failure {
            return Err(e);
        }
        written
    }

    /// Read a small object whole. Refused with [`Error::TooLarge`] if the store
    /// reports more than `limit` bytes (checked before the body is read) or sends
    /// more than it reported.
    pub async fn get_bytes(&self, key: &str, limit: u64) -> Result<Bytes> {
        let location = object_path(key)?;
        if let Some(root) = self.local_root.clone() {
            let owned = key.to_string();
            return tokio::task::spawn_blocking(move || local::read(&root, &owned, limit))
                .await
                .map_err(|e| task_error(key, e))?;
        }
        self.retrying("get", key, |_| async {
            let get = self.inner.get(&location).await.map_err(|e| from_store(key, "get", e))?;
            let size = get.meta.size;
            if size > limit {
                return Err(Error::TooLarge {
                    key: key.to_string(),
                    size,
                    limit,
                });
            }
            let mut out = BytesMut::with_capacity(usize::try_from(size).unwrap_or(0));
            let mut stream = get.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| from_store(key, "get", e))?;
                if (out.len() + chunk.len()) as u64 > limit {
                    return Err(Error::TooLarge {
                        key: key.to_string(),
                        size: (out.len() + chunk.len()) as u64,
                        limit,
                    });
                }
                out.extend_from_slice(&chunk);
            }
            Ok(out.freeze())
        })
        .await
    }

    /// Size and modification time of `key`.
    pub async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let location = object_path(key)?;
        self.retrying("head", key, |_| async {
            let meta = self
                .inner
                .head(&location)
                .await
                .map_err(|e| from_store(key, "head", e))?;
            Ok(info(meta))
        })
        .await
    }

    /// Remove `key`; removing a missing object succeeds.
    pub async fn delete(&self, key: &str) -> Result<()> {
        let location = object_path(key)?;
        self.retrying("delete", key, |_| async {
            match self.inner.delete(&location).await {
                Ok(()) => Ok(()),
                Err(e) => match from_store(key, "delete", e) {
                    Error::NotFound { .. } => Ok(()),
                    other => Err(other),
                },
            }
        })
        .await
    }
}

fn info(meta: object_store::ObjectMeta) -> ObjectInfo {
    ObjectInfo {
        key: meta.location.to_string(),
        size: meta.size,
        last_modified_ms: meta.last_modified.timestamp_millis(),
        e_tag: meta.e_tag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let p = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for failed in 1..40 {
            let cap = Duration::from_millis(100 * (1u64 << (failed - 1).min(20))).min(Duration::from_secs(1));
            for _ in 0..20 {
                assert!(p.backoff(failed) <= cap);
            }
        }
        let distinct: std::collections::HashSet<Duration> = (0..50).map(|_| p.backoff(5)).collect();
        assert!(distinct.len() > 1, "no jitter");
        let zero = RetryPolicy {
            initial_backoff: Duration::ZERO,
            ..p
        };
        assert_eq!(zero.backoff(3), Duration::ZERO);
    }
}
