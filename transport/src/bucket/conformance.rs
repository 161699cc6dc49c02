//! The transport conformance suites, and fault injection.
//!
//! - [`contract`]: what every transport must do, through the traits only
//!   ([`SegmentSink`](crate::bucket::SegmentSink), [`SegmentSource`](crate::bucket::SegmentSource)).
//!   Run for the local folder, S3 and [`faulty::Faulty`] in pass-through mode.
//! - [`faulty`] and [`faults`]: a wrapper that injects faults into chosen trait
//!   calls, and the checks that they surface as errors, never as accepted bytes.
//! - Below: the object-store backend's own suite ([`run_all`]) — multipart,
//!   retries, create-if-absent atomicity — which only that backend has.
//!
//! Every backend a [`Store`] can sit on must behave the same for segmirror to be
//! correct: round trips are exact, create-if-absent is atomic, listings are
//! complete and component-wise, large files go up in parts, downloads are
//! verified, and a stale lease holder is fenced. [`run_all`] checks all of it
//! against any store (the local folder store in this crate's tests, an S3
//! server in `segmirror-tests`), like object_store's own integration suite and
//! litestream's replica-client tests. Each run works below a fresh random key
//! prefix so runs against a shared bucket do not interfere.
//!
//! [`FlakyStore`] wraps an `ObjectStore` and fails chosen calls with a transient
//! error (before or after doing the work, or in the middle of a download
//! stream), to test the retry loop.
//!
//! Compiled for this crate's tests and with the `conformance` feature; the
//! functions panic on failure, as test helpers do.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use segmirror_contract::manifest::{KeyPrefix, PartitionKey, Sha256Digest};

pub mod contract;
pub mod faults;
pub mod faulty;

use crate::bucket::store::lease::{current_lease, lease_epochs, HeldLease};
use crate::bucket::store::{MultipartPolicy, Store, MIN_PART_SIZE};
use segmirror_contract::digest::digest_of;
use segmirror_contract::error::{Error, MismatchKind};

/// A fresh key prefix for one run: `conformance/<16 hex digits>`.
pub fn fresh_prefix(what: &str) -> String {
    let n = getrandom::u64().unwrap_or(0);
    format!("conformance/{what}-{n:016x}")
}

/// Deterministic pseudo-random bytes (xorshift), so failures are reproducible.
pub fn test_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Run every check of the suite against `store`.
pub async fn run_all(store: &Store) {
    run_all_but_leases(store).await;
    lease_fencing(store).await;
}

/// [`run_all`] for a server whose create-if-absent is not atomic under concurrent puts (moto): the lease checks
/// with the acquirers one after another ([`lease_fencing_sequential`]).
pub async fn run_all_with_sequential_leases(store: &Store) {
    run_all_but_leases(store).await;
    lease_fencing_sequential(store).await;
}

async fn run_all_but_leases(store: &Store) {
    small_objects(store).await;
    put_if_absent(store).await;
    files(store).await;
    multipart(store).await;
    verified_downloads(store).await;
    listing(store).await;
    deletion(store).await;
}

/// put/get/overwrite of small objects; size cap; missing objects.
pub async fn small_objects(store: &Store) {
    let p = fresh_prefix("small");
    let key = format!("{p}/doc.json");
    store.put_bytes(&key, &b"{\"v\":1}"[..]).await.unwrap();
    assert_eq!(
        store.get_bytes(&key, 1024).await.unwrap(),
        Bytes::from_static(b"{\"v\":1}")
    );
    store.put_bytes(&key, &b"{\"v\":22}"[..]).await.unwrap();
    assert_eq!(
        store.get_bytes(&key, 1024).await.unwrap(),
        Bytes::from_static(b"{\"v\":22}")
    );
    assert_eq!(store.head(&key).await.unwrap().size, 8);

    let hundred = format!("{p}/hundred");
    store.put_bytes(&hundred, vec![7u8; 100]).await.unwrap();
    assert_eq!(store.get_bytes(&hundred, 100).await.unwrap().len(), 100);
    match store.get_bytes(&hundred, 99).await {
        Err(Error::TooLarge {
            size: 100, limit: 99, ..
        }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }

    let empty = format!("{p}/empty");
    store.put_bytes(&empty, Bytes::new()).await.unwrap();
    assert!(store.get_bytes(&empty, 0).await.unwrap().is_empty());

    let missing = format!("{p}/missing");
    assert!(matches!(
        store.get_bytes(&missing, 10).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(store.head(&missing).await, Err(Error::NotFound { .. })));
}

/// Create-if-absent creates once, never replaces, and exactly one of several
/// concurrent creators wins.
pub async fn put_if_absent(store: &Store) {
    let p = fresh_prefix("create");
    let key = format!("{p}/once");
    assert!(store.put_if_absent(&key, &b"first"[..]).await.unwrap());
    assert!(!store.put_if_absent(&key, &b"second"[..]).await.unwrap());
    assert_eq!(store.get_bytes(&key, 64).await.unwrap(), Bytes::from_static(b"first"));

    let race = format!("{p}/race");
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let store = store.clone();
        let race = race.clone();
        tasks.push(tokio::spawn(async move {
            let body = format!("writer {i}");
            let won = store.put_if_absent(&race, body.clone()).await.unwrap();
            (won, body)
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (won, body) = t.await.unwrap();
        if won {
            winners.push(body);
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "create-if-absent is not atomic on {store}: winners {winners:?}"
    );
    assert_eq!(
        store.get_bytes(&race, 64).await.unwrap(),
        Bytes::from(winners.remove(0))
    );
}

/// Single-PUT file uploads, prefix uploads, verified downloads, hashing.
pub async fn files(store: &Store) {
    let p = fresh_prefix("files");
    let dir = tempfile::tempdir().unwrap();
    let data = test_bytes(300_000, 1);
    let src = dir.path().join("src.log");
    std::fs::write(&src, &data).unwrap();
    let expected = digest_of(&data);

    let key = format!("{p}/00000000000000000000.log");
    let summary = store.put_file(&key, &src).await.unwrap();
    assert_eq!(summary.digest, expected);
    assert_eq!(summary.multipart_parts, None);
    assert_eq!(store.head(&key).await.unwrap().size, data.len() as u64);
    assert_eq!(store.hash_object(&key).await.unwrap(), expected);

    let dst = dir.path().join("dst.log");
    let got = store
        .get_to_file(&key, &dst, expected.size, &expected.sha256)
        .await
        .unwrap();
    assert_eq!(got, expected);
    assert_eq!(std::fs::read(&dst).unwrap(), data);

    // A prefix of a growing file (the active segment up to its last complete batch).
    let prefix_key = format!("{p}/prefix.log");
    let summary = store.put_file_prefix(&prefix_key, &src, Some(1000)).await.unwrap();
    assert_eq!(summary.digest, digest_of(&data[..1000]));
    assert_eq!(
        store.get_bytes(&prefix_key, 1000).await.unwrap(),
        Bytes::copy_from_slice(&data[..1000])
    );
    let too_long = store
        .put_file_prefix(&format!("{p}/too-long"), &src, Some(data.len() as u64 + 1))
        .await;
    assert!(matches!(too_long, Err(Error::Io { .. })), "{too_long:?}");
    assert!(matches!(
        store.head(&format!("{p}/too-long")).await,
        Err(Error::NotFound { .. })
    ));

    // Empty file.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let summary = store.put_file(&format!("{p}/empty"), &empty).await.unwrap();
    assert_eq!(summary.digest, digest_of(b""));
}

/// Files above the threshold go up in parts and come back identical.
pub async fn multipart(store: &Store) {
    let p = fresh_prefix("multipart");
    let store = store.clone().with_multipart(MultipartPolicy {
        threshold: MIN_PART_SIZE as u64,
        part_size: MIN_PART_SIZE,
        max_concurrency: 2,
    });
    let dir = tempfile::tempdir().unwrap();
    let data = test_bytes(2 * MIN_PART_SIZE + 12_345, 2);
    let src = dir.path().join("big.log");
    std::fs::write(&src, &data).unwrap();
    let expected = digest_of(&data);
    let key = format!("{p}/00000000000000000000.log");
    let summary = store.put_file(&key, &src).await.unwrap();
    assert_eq!(summary.multipart_parts, Some(3));
    assert_eq!(summary.digest, expected);
    assert_eq!(store.head(&key).await.unwrap().size, data.len() as u64);
    let dst = dir.path().join("back.log");
    store
        .get_to_file(&key, &dst, expected.size, &expected.sha256)
        .await
        .unwrap();
    assert!(std::fs::read(&dst).unwrap() == data, "multipart round trip differs");
    // Exactly at the threshold: one part.
    let exact = dir.path().join("exact.log");
    std::fs::write(&exact, &data[..MIN_PART_SIZE]).unwrap();
    let summary = store.put_file(&format!("{p}/exact.log"), &exact).await.unwrap();
    assert_eq!(summary.multipart_parts, Some(1));
    assert_eq!(summary.digest, digest_of(&data[..MIN_PART_SIZE]));
}

/// A download that does not match the manifest fails and leaves no file.
pub async fn verified_downloads(store: &Store) {
    let p = fresh_prefix("verify");
    let dir = tempfile::tempdir().unwrap();
    let data = test_bytes(10_000, 3);
    let key = format!("{p}/seg.log");
    store.put_bytes(&key, data.clone()).await.unwrap();
    let right = digest_of(&data);
    let dst = dir.path().join("seg.log");

    let wrong_sha = Sha256Digest([0x55; 32]);
    match store.get_to_file(&key, &dst, right.size, &wrong_sha).await {
        Err(Error::Mismatch {
            what: MismatchKind::Sha256,
            found,
            ..
        }) => assert_eq!(found, right.sha256.to_string()),
        other => panic!("expected a sha256 mismatch, got {other:?}"),
    }
    assert!(!dst.exists(), "a mismatching download must not stay on disk");

    match store.get_to_file(&key, &dst, right.size + 1, &right.sha256).await {
        Err(Error::Mismatch {
            what: MismatchKind::Size,
            ..
        }) => {}
        other => panic!("expected a size mismatch, got {other:?}"),
    }
    assert!(!dst.exists());

    let missing = store.get_to_file(&format!("{p}/missing"), &dst, 1, &right.sha256).await;
    assert!(matches!(missing, Err(Error::NotFound { .. })), "{missing:?}");
    assert!(!dst.exists());
}

/// Listing is complete, sorted, component-wise, with sizes.
pub async fn listing(store: &Store) {
    let p = fresh_prefix("list");
    for (k, len) in [("a/b/1", 1usize), ("a/b/2", 2), ("a/bc/3", 3), ("a/b/c/4", 4), ("z", 5)] {
        store.put_bytes(&format!("{p}/{k}"), vec![0u8; len]).await.unwrap();
    }
    let listed: Vec<(String, u64)> = store
        .list(&format!("{p}/a/b"))
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    assert_eq!(
        listed,
        vec![
            (format!("{p}/a/b/1"), 1),
            (format!("{p}/a/b/2"), 2),
            (format!("{p}/a/b/c/4"), 4)
        ]
    );
    assert_eq!(store.list(&p).await.unwrap().len(), 5);
    assert_eq!(store.list(&format!("{p}/")).await.unwrap().len(), 5);
    assert!(store.list(&format!("{p}/nothing-here")).await.unwrap().is_empty());
}

/// Delete removes; deleting again is fine.
pub async fn deletion(store: &Store) {
    let p = fresh_prefix("delete");
    let key = format!("{p}/x");
    store.put_bytes(&key, &b"x"[..]).await.unwrap();
    store.delete(&key).await.unwrap();
    assert!(matches!(store.get_bytes(&key, 10).await, Err(Error::NotFound { .. })));
    store.delete(&key).await.unwrap();
    assert!(store.list(&p).await.unwrap().is_empty());
}

/// Epochs increase, a newer holder fences an older one, concurrent acquirers
/// get distinct epochs.
pub async fn lease_fencing(store: &Store) {
    lease_fencing_with(store, Racers::Concurrent).await;
}

/// [`lease_fencing`] with the four later acquirers one after another: for S3 servers whose create-if-absent is
/// checked but not atomic under concurrent requests (moto: two racing `If-None-Match: *` puts of one key can both
/// succeed), which real S3 and the local folder are.
pub async fn lease_fencing_sequential(store: &Store) {
    lease_fencing_with(store, Racers::OneAfterAnother).await;
}

/// How the four later acquirers of [`lease_fencing_with`] run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Racers {
    Concurrent,
    OneAfterAnother,
}

async fn lease_fencing_with(store: &Store, racers: Racers) {
    let p = fresh_prefix("lease");
    let partition = PartitionKey::new(KeyPrefix::new(&p).unwrap(), "link-a", "orders", 0).unwrap();
    assert!(current_lease(store, &partition).await.unwrap().is_none());

    let a = HeldLease::acquire(store, &partition, "shipper-a").await.unwrap();
    assert_eq!(a.epoch(), 1);
    a.check_still_holder(store).await.unwrap();

    let b = HeldLease::acquire(store, &partition, "shipper-b").await.unwrap();
    assert_eq!(b.epoch(), 2);
    match a.check_still_holder(store).await {
        Err(Error::Fenced {
            held_epoch: 1,
            newer_epoch: 2,
            ..
        }) => {}
        other => panic!("shipper-a must be fenced, got {other:?}"),
    }
    b.check_still_holder(store).await.unwrap();
    let current = current_lease(store, &partition).await.unwrap().unwrap();
    assert_eq!((current.epoch, current.owner.as_str()), (2, "shipper-b"));

    let mut tasks = Vec::new();
    let mut epochs = Vec::new();
    for i in 0..4 {
        let store = store.clone();
        let partition = partition.clone();
        let acquire = async move {
            HeldLease::acquire(&store, &partition, &format!("racer-{i}"))
                .await
                .unwrap()
                .epoch()
        };
        match racers {
            Racers::Concurrent => tasks.push(tokio::spawn(acquire)),
            Racers::OneAfterAnother => epochs.push(acquire.await),
        }
    }
    for t in tasks {
        epochs.push(t.await.unwrap());
    }
    epochs.sort_unstable();
    assert_eq!(
        epochs,
        vec![3, 4, 5, 6],
        "concurrent acquirers must get distinct epochs"
    );
    assert_eq!(lease_epochs(store, &partition).await.unwrap(), vec![1, 2, 3, 4, 5, 6]);
    assert!(matches!(
        b.check_still_holder(store).await,
        Err(Error::Fenced {
            held_epoch: 2,
            newer_epoch: 6,
            ..
        })
    ));

    // A holder whose lease object vanished must not carry on.
    let last = HeldLease::acquire(store, &partition, "shipper-c").await.unwrap();
    store.delete(&partition.lease_key(last.epoch())).await.unwrap();
    assert!(matches!(
        last.check_still_holder(store).await,
        Err(Error::LeaseLost { epoch: 7, .. })
    ));
}

/// When a [`FlakyStore`] fails a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Fail before touching the inner store.
    Before,
    /// Do the work, then report a failure (a lost answer).
    After,
    /// For gets: deliver the first chunk, then break the stream.
    MidStream,
}

/// An `ObjectStore` that fails its next N calls with a transient error
/// (connection reset), then behaves. Counts calls and multipart uploads.
#[derive(Debug)]
pub struct FlakyStore {
    inner: Arc<dyn ObjectStore>,
    failures: AtomicU32,
    mode: std::sync::Mutex<FailMode>,
    calls: AtomicU64,
    injected: AtomicU64,
    multipart_uploads: AtomicU64,
}

impl fmt::Display for FlakyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FlakyStore({})", self.inner)
    }
}

fn injected_error() -> object_store::Error {
    object_store::Error::Generic {
        store: "FlakyStore",
        source: Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "injected failure",
        )),
    }
}

impl FlakyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FlakyStore {
            inner,
            failures: AtomicU32::new(0),
            mode: std::sync::Mutex::new(FailMode::Before),
            calls: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            multipart_uploads: AtomicU64::new(0),
        }
    }

    /// Fail the next `n` calls in the given way.
    pub fn fail_next(&self, n: u32, mode: FailMode) {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
        self.failures.store(n, Ordering::SeqCst);
    }

    /// Calls made so far (all operations).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Failures injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Multipart uploads started so far.
    pub fn multipart_uploads(&self) -> u64 {
        self.multipart_uploads.load(Ordering::SeqCst)
    }

    /// Count a call; `Some(mode)` if this one is to fail.
    fn take_failure(&self) -> Option<FailMode> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let took = self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if took {
            self.injected.fetch_add(1, Ordering::SeqCst);
            Some(*self.mode.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        }
    }
}

#[async_trait::async_trait]
impl ObjectStore for FlakyStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match self.take_failure() {
            Some(FailMode::Before) => Err(injected_error()),
            Some(FailMode::After) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(injected_error())
            }
            _ => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.multipart_uploads.fetch_add(1, Ordering::SeqCst);
        match self.take_failure() {
            Some(_) => Err(injected_error()),
            None => self.inner.put_multipart_opts(location, opts).await,
        }
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        match self.take_failure() {
            Some(FailMode::Before) => Err(injected_error()),
            Some(FailMode::After) => {
                self.inner.get_opts(location, options).await?;
                Err(injected_error())
            }
            Some(FailMode::MidStream) => {
                let mut result = self.inner.get_opts(location, options).await?;
                let meta = result.meta.clone();
                let range: Range<u64> = result.range.clone();
                let attributes = std::mem::take(&mut result.attributes);
                let extensions = std::mem::take(&mut result.extensions);
                let broken = result
                    .into_stream()
                    .take(1)
                    .chain(futures::stream::once(async { Err(injected_error()) }))
                    .boxed();
                Ok(GetResult {
                    payload: GetResultPayload::Stream(broken),
                    meta,
                    range,
                    attributes,
                    extensions,
                })
            }
            None => self.inner.get_opts(location, options).await,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        match self.take_failure() {
            Some(_) => futures::stream::once(async { Err(injected_error()) }).boxed(),
            None => self.inner.delete_stream(locations),
        }
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.take_failure() {
            Some(_) => futures::stream::once(async { Err(injected_error()) }).boxed(),
            None => self.inner.list(prefix),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        match self.take_failure() {
            Some(_) => Err(injected_error()),
            None => self.inner.list_with_delimiter(prefix).await,
        }
    }

    async fn copy_opts(&self, from: &ObjectPath, to: &ObjectPath, options: CopyOptions) -> object_store::Result<()> {
        match self.take_failure() {
            Some(_) => Err(injected_error()),
            None => self.inner.copy_opts(from, to, options).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use object_store::local::LocalFileSystem;

    use super::*;
    use crate::bucket::store::{RetryPolicy, StoreUrl};

    fn local(dir: &std::path::Path) -> Store {
        let url = StoreUrl::parse(dir.join("bucket").to_str().unwrap()).unwrap();
        Store::open(&url, &Default::default()).unwrap()
    }

    fn fast_retry(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(5),
        }
    }

    fn flaky(dir: &std::path::Path) -> (Arc<FlakyStore>, Store) {
        let root = dir.join("flaky");
        std::fs::create_dir_all(&root).unwrap();
        let flaky = Arc::new(FlakyStore::new(Arc::new(
            LocalFileSystem::new_with_prefix(&root).unwrap(),
        )));
        let store = Store::from_object_store(flaky.clone(), "flaky").with_retry(fast_retry(4));
        (flaky, store)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn local_folder_store_conforms() {
        let dir = tempfile::tempdir().unwrap();
        let store = local(dir.path());
        assert!(dir.path().join("bucket").is_dir(), "the folder is created on open");
        run_all(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn local_folder_store_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        contract::run_all(&local(dir.path())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_fault_injector_passing_through_keeps_the_contract() {
        let dir = tempfile::tempdir().unwrap();
        let faulty = faulty::Faulty::new(local(dir.path()));
        contract::run_all(&faulty).await;
        assert_eq!(faulty.injected(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn injected_faults_surface_as_errors_on_a_local_folder() {
        let dir = tempfile::tempdir().unwrap();
        let faulty = faulty::Faulty::new(local(dir.path()).with_retry(fast_retry(1)));
        faults::run_all(&faulty).await;
        assert!(faulty.injected() >= 20, "{}", faulty.injected());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn file_url_store_conforms_too() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::parse(&format!("file://{}/b", dir.path().display())).unwrap();
        let store = Store::open(&url, &Default::default()).unwrap();
        small_objects(&store).await;
        listing(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn transient_failures_are_retried_then_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (flaky, store) = flaky(dir.path());
        flaky.fail_next(2, FailMode::Before);
        store.put_bytes("k", &b"v"[..]).await.unwrap();
        assert_eq!((flaky.calls(), flaky.injected()), (3, 2));
        assert_eq!(store.get_bytes("k", 10).await.unwrap(), Bytes::from_static(b"v"));

        // More failures than attempts: the transient error surfaces after exactly 4 calls.
        let before = flaky.calls();
        flaky.fail_next(10, FailMode::Before);
        let err = store.put_bytes("k", &b"w"[..]).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert_eq!(flaky.calls() - before, 4);
        flaky.fail_next(0, FailMode::Before);

        // Permanent errors are not retried.
        let before = flaky.calls();
        assert!(matches!(store.get_bytes("nope", 10).await, Err(Error::NotFound { .. })));
        assert_eq!(flaky.calls() - before, 1);

        flaky.fail_next(1, FailMode::Before);
        assert_eq!(store.list("").await.unwrap().len(), 1);
        flaky.fail_next(1, FailMode::Before);
        store.delete("k").await.unwrap();
        assert!(store.list("").await.unwrap().is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_broken_download_restarts_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let (flaky, store) = flaky(dir.path());
        let data = test_bytes(3 << 20, 9);
        store.put_bytes("seg.log", data.clone()).await.unwrap();
        let d = digest_of(&data);
        let dst = dir.path().join("dst.log");
        flaky.fail_next(2, FailMode::MidStream);
        let got = store.get_to_file("seg.log", &dst, d.size, &d.sha256).await.unwrap();
        assert_eq!(got, d);
        assert_eq!(flaky.injected(), 2);
        assert!(std::fs::read(&dst).unwrap() == data);
        flaky.fail_next(1, FailMode::MidStream);
        assert_eq!(store.hash_object("seg.log").await.unwrap(), d);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_multipart_upload_is_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let (flaky, store) = flaky(dir.path());
        let store = store.with_multipart(MultipartPolicy {
            threshold: 1 << 20,
            part_size: 1 << 20,
            max_concurrency: 2,
        });
        let data = test_bytes((5 << 20) + 7, 4);
        let src = dir.path().join("src.log");
        std::fs::write(&src, &data).unwrap();
        flaky.fail_next(1, FailMode::Before);
        let summary = store.put_file("big.log", &src).await.unwrap();
        assert_eq!(summary.multipart_parts, Some(6));
        assert_eq!(summary.digest, digest_of(&data));
        assert_eq!(flaky.multipart_uploads(), 2, "the failed start is retried");
        assert!(store.get_bytes("big.log", 6 << 20).await.unwrap() == data);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_create_whose_answer_was_lost_is_recognised_as_ours() {
        let dir = tempfile::tempdir().unwrap();
        let (flaky, store) = flaky(dir.path());
        flaky.fail_next(1, FailMode::After);
        assert!(store.put_if_absent("lease", &b"mine"[..]).await.unwrap());
        // Someone else's object under the same key is still "exists".
        flaky.fail_next(1, FailMode::After);
        assert!(!store.put_if_absent("lease", &b"theirs"[..]).await.unwrap());
        assert_eq!(store.get_bytes("lease", 10).await.unwrap(), Bytes::from_static(b"mine"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hostile_keys_never_reach_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = local(dir.path());
        for key in ["../escape", "a/../../b", "/abs", "a//b"] {
            let err = store.put_bytes(key, &b"x"[..]).await.unwrap_err();
            assert!(matches!(err, Error::BadKey { .. }), "{key}: {err}");
        }
        assert!(!dir.path().join("escape").exists());
    }
}
