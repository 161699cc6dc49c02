//! Follow mode: a follower keeps installing what is committed to the bucket, holds the mirror for its whole run,
//! never writes to the bucket, refuses a lying version naming its key and field (and installs the honest one
//! committed after it), and stops cleanly.

mod common;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};
use segment_format::partition_metadata::Uuid;
use segmirror_applier::bucket::follow::{follow, FollowConfig};
use segmirror_applier::{ApplyConfig, ApplyReport, Error, NoProgress, PartitionOutcome, Refusal};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{Store, StoreUrl};

/// A bucket view that refuses (and counts) every write: what a follower gets, so a write would fail the test.
#[derive(Debug)]
struct ReadOnly {
    inner: LocalFileSystem,
    writes: AtomicU64,
}

impl fmt::Display for ReadOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReadOnly({})", self.inner)
    }
}

impl ReadOnly {
    fn refuse<T>(&self, what: &str) -> object_store::Result<T> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        Err(object_store::Error::NotSupported {
            source: format!("a follower must not {what}").into(),
        })
    }
}

#[async_trait::async_trait]
impl ObjectStore for ReadOnly {
    async fn put_opts(&self, _: &ObjectPath, _: PutPayload, _: PutOptions) -> object_store::Result<PutResult> {
        self.refuse("put")
    }

    async fn put_multipart_opts(
        &self,
        _: &ObjectPath,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.refuse("put")
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        futures::StreamExt::boxed(futures::StreamExt::map(locations, |_| {
            Err(object_store::Error::NotSupported {
                source: "a follower must not delete".into(),
            })
        }))
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, _: &ObjectPath, _: &ObjectPath, _: CopyOptions) -> object_store::Result<()> {
        self.refuse("copy")
    }
}

/// How long a follower may take to show what the test waits for (it polls every 20 ms here).
const CONVERGE: Duration = Duration::from_secs(60);

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < CONVERGE, "follower never reached: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Copy every object of `from` (a scratch bucket a source was shipped to) into `to`, except manifests.
async fn copy_data(from: &Store, to: &Store) {
    for o in from.list("").await.unwrap() {
        if !o.key.contains("/manifests/") {
            let bytes = from.get_bytes(&o.key, u64::MAX).await.unwrap();
            to.put_bytes(&o.key, bytes).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_waits_for_the_link_installs_new_versions_refuses_a_lie_by_key_and_field_holds_the_mirror_and_never_writes(
) {
    let w = World::new();
    let id = Uuid([1; 16]);
    let src1 = write_partition(&w.path("src1"), "orders", id, 30, 2048);
    std::fs::create_dir_all(w.mirror()).unwrap();

    let ro = Arc::new(ReadOnly {
        inner: LocalFileSystem::new_with_prefix(w.path("bucket")).unwrap(),
        writes: AtomicU64::new(0),
    });
    let apply = ApplyConfig::new(
        Store::from_object_store(ro.clone(), "read-only"),
        w.path("bucket").display().to_string(),
        w.mirror(),
    )
    .with_link(LINK);
    let mut config = FollowConfig::new(apply);
    config.poll_interval = Duration::from_millis(20);
    let reports: Arc<Mutex<Vec<ApplyReport>>> = Arc::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let seen = reports.clone();
    let catalog = w.catalog();
    let follower = tokio::spawn(async move {
        follow(
            &config,
            catalog,
            async move {
                let _ = stopped.await;
            },
            move |r| seen.lock().unwrap().push(r.clone()),
        )
        .await
    });
    // Started before the shipper's first commit: the follower waits for the link, saying so.
    let waiting = |reports: &[ApplyReport]| {
        reports
            .iter()
            .any(|r| r.notes.iter().any(|n| n.starts_with("waiting: ")))
    };
    until("a note that the link is not there yet", || {
        waiting(&reports.lock().unwrap())
    })
    .await;
    let first = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &src1).await;
    assert!(first.len() >= 3);
    let mirror = w.mirror();
    until("the first source", || {
        tree(&mirror.join("orders-0")) == expected_mirror_files(&src1)
    })
    .await;

    // The mirror is the follower's while it runs: another apply is refused.
    match segmirror_applier::apply(&w.config(), w.catalog(), &NoProgress).await {
        Err(Error::MirrorLocked { .. }) => {}
        other => panic!("a second applier ran beside the follower: {other:?}"),
    }

    // The source grows (the active segment sealed, new segments). Its data lands in the bucket, then a version
    // whose manifest lies about its record count is committed first.
    let src2 = write_partition(&w.path("src2"), "orders", id, 60, 2048);
    let scratch = Store::open(
        &StoreUrl::parse(w.path("scratch").to_str().unwrap()).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let second = ship_partition_dir(&scratch, &KeyPrefix::root(), LINK, &src2).await;
    copy_data(&scratch, &w.store).await;
    let resealed = first.len() - 1;
    let mut lie = second[resealed].clone();
    assert!(lie.manifest.sealed && !first[resealed].manifest.sealed);
    lie.manifest.records -= 1;
    put_manifest(&w.store, &lie).await;
    let refused = |reports: &[ApplyReport]| {
        reports.iter().rev().find_map(|r| match &r.partitions.first()?.outcome {
            PartitionOutcome::Refused(refused) => Some(refused.clone()),
            _ => None,
        })
    };
    until("the lie refused", || refused(&reports.lock().unwrap()).is_some()).await;
    let refusal = refused(&reports.lock().unwrap()).unwrap();
    assert_eq!(refusal.manifest_key, lie.key);
    assert!(
        matches!(&refusal.refusal, Refusal::ManifestDataMismatch { what, .. } if what.contains("records")),
        "{:?}",
        refusal.refusal
    );
    assert_eq!(
        tree(&mirror.join("orders-0")),
        expected_mirror_files(&src1),
        "nothing of the lying version was installed"
    );

    // The honest versions follow; the follower catches up on its own.
    for s in &second[resealed..] {
        put_manifest(&w.store, s).await;
    }
    until("the second source", || {
        tree(&mirror.join("orders-0")) == expected_mirror_files(&src2)
    })
    .await;
    stop.send(()).unwrap();
    let stats = follower.await.unwrap().unwrap();
    assert!(stats.runs >= 3, "{stats:?}");
    assert_eq!(stats.segments_installed, second.len() as u64 + 1, "{stats:?}");
    assert_mirrors(&src2, &mirror.join("orders-0"));
    assert_eq!(ro.writes.load(Ordering::SeqCst), 0, "the follower wrote to the bucket");

    // Stopped, it let go of the mirror: a plain apply runs and finds nothing new.
    let after = w.apply().await;
    assert_eq!(after.segments_installed(), 0, "{after:#?}");
}

/// The link's state is read by every run: paused, a follower installs nothing of what the shipper commits (the
/// mirror stays as it was); resumed, it catches up to the source; promoted, it stops with `LinkClosed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_installs_nothing_while_the_link_is_paused_catches_up_on_resume_and_stops_when_promoted() {
    let w = World::new();
    let id = Uuid([2; 16]);
    let src1 = write_partition(&w.path("src1"), "orders", id, 20, 2048);
    ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &src1).await;
    let mut config = FollowConfig::new(w.config());
    config.poll_interval = Duration::from_millis(20);
    let reports: Arc<Mutex<Vec<ApplyReport>>> = Arc::default();
    let seen = reports.clone();
    let catalog = w.catalog();
    let follower = tokio::spawn(async move {
        follow(&config, catalog, std::future::pending(), move |r| {
            seen.lock().unwrap().push(r.clone())
        })
        .await
    });
    let mirror = w.mirror().join("orders-0");
    until("the first source", || tree(&mirror) == expected_mirror_files(&src1)).await;

    w.catalog().pause_link(LINK).unwrap();
    let paused_runs = |r: &[ApplyReport]| {
        r.iter()
            .filter(|r| r.link_skipped == Some(segmirror_applier::SkipReason::LinkPaused))
            .count()
    };
    until("a run that saw the pause", || {
        paused_runs(&reports.lock().unwrap()) >= 1
    })
    .await;
    let src2 = write_partition(&w.path("src2"), "orders", id, 40, 2048);
    ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &src2).await;
    until("five runs while paused", || paused_runs(&reports.lock().unwrap()) >= 5).await;
    assert_eq!(tree(&mirror), expected_mirror_files(&src1), "paused: nothing installed");

    w.catalog().resume_link(LINK).unwrap();
    until("the second source after resume", || {
        tree(&mirror) == expected_mirror_files(&src2)
    })
    .await;
    assert_mirrors(&src2, &mirror);

    w.catalog().promote_link(LINK).unwrap();
    let ended = tokio::time::timeout(CONVERGE, follower)
        .await
        .expect("the follower stops");
    match ended.unwrap() {
        Err(Error::LinkClosed { link, state }) => assert_eq!((link.as_str(), state.as_str()), (LINK, "promoted")),
        other => panic!("expected LinkClosed, got {other:?}"),
    }
}
