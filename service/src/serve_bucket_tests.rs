//! `serve --store` as the command line runs it: prepared over a local-folder store the shipper's seed filled, it
//! answers Kafka clients, follows the shipper's next rounds, keeps group offsets across restarts, and refuses a
//! store that does not exist.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_endpoint::group::{CommittedOffset, OffsetStore};
use segmirror_endpoint::{Limits, Replica};
use segmirror_shipper::bucket::seed::{self, HeldLeases, SeedConfig};
use segmirror_transport::{Store, StoreUrl};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use super::{ServeBucketOptions, ServeBucketService};
use crate::serve::Stopped;

pub(crate) const LINK: &str = "east";
pub(crate) const TOPIC: &str = "orders";

fn batch(base: i64, i: i64) -> BatchBuilder {
    BatchBuilder::new(base)
        .partition_leader_epoch(0)
        .record(RecordSpec::new(0, 1_700_000_000_000 + i).with_value(vec![b'v'; 200]))
}

/// A running source of one partition with `batches` one-record batches (log end `batches`), its bucket, and a
/// shipper. Also the bucket of `bucket_ends`' tests.
pub(crate) struct World {
    tmp: tempfile::TempDir,
    pub(crate) store: Store,
    shipper: SeedConfig,
    held: HeldLeases,
}

impl World {
    pub(crate) fn new(batches: i64) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let log_dir = tmp.path().join("source");
        let config = WriterConfig {
            segment_bytes: 8192,
            running: true,
            fsync: false,
            topic_id: Some(Uuid([7; 16])),
            ..WriterConfig::default()
        };
        let mut w = PartitionWriter::create(&log_dir, TOPIC, 0, 0, config).unwrap();
        w.become_leader(0);
        for i in 0..batches {
            w.append(batch(0, i)).unwrap();
        }
        let written = w.close().unwrap();
        let identity = LogDirIdentity {
            cluster_id: "test-cluster-id".into(),
            node_id: 1,
            directory_id: Uuid([9; 16]),
        };
        write_log_dir_files(
            &log_dir,
            &identity,
            std::slice::from_ref(&written),
            LogDirState::Running,
        )
        .unwrap();
        std::fs::create_dir_all(tmp.path().join("bucket")).unwrap();
        let store = Store::open(
            &StoreUrl::parse(tmp.path().join("bucket").to_str().unwrap()).unwrap(),
            &Default::default(),
        )
        .unwrap();
        let mut shipper = SeedConfig::new(vec![log_dir], LINK).unwrap();
        shipper.shipper_id = "test-shipper".into();
        World {
            tmp,
            store,
            shipper,
            held: HeldLeases::default(),
        }
    }

    pub(crate) async fn ship(&self) {
        let report = seed::seed_round(&self.store, &self.shipper, &seed::NoProgress, Some(&self.held))
            .await
            .unwrap();
        assert!(report.is_complete(), "{report:#?}");
    }

    /// The source's newest `.log` (its active segment).
    fn active_log(&self) -> PathBuf {
        let dir = self.tmp.path().join("source").join(format!("{TOPIC}-0"));
        let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        logs.sort();
        logs.pop().unwrap()
    }

    fn options(&self) -> ServeBucketOptions {
        ServeBucketOptions {
            store: self.tmp.path().join("bucket").display().to_string(),
            s3: Default::default(),
            prefix: String::new(),
            link: LINK.into(),
            cache_dir: self.tmp.path().join("cache"),
            cache_size: 16 << 20,
            poll_interval: Duration::from_millis(20),
            listen: "127.0.0.1:0".into(),
            advertised: None,
            tls: None,
            limits: Limits::default(),
        }
    }
}

/// An ApiVersions v0 request with `correlation` over `addr`: the correlation id and error code answered.
async fn api_versions(addr: std::net::SocketAddr, correlation: i32) -> (i32, i16) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut body = Vec::new();
    body.extend_from_slice(&18i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&correlation.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes());
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    conn.write_all(&frame).await.unwrap();
    let size = conn.read_i32().await.unwrap();
    assert!(size >= 6, "{size}");
    (conn.read_i32().await.unwrap(), conn.read_i16().await.unwrap())
}

/// A Fetch v4 of `TOPIC` partition 0 at `offset` (read_uncommitted) over `addr`: the partition's error code, high
/// watermark and record bytes.
async fn fetch(addr: std::net::SocketAddr, offset: i64) -> (i16, i64, Vec<u8>) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut body = Vec::new();
    body.extend_from_slice(&1i16.to_be_bytes()); // Fetch
    body.extend_from_slice(&4i16.to_be_bytes());
    body.extend_from_slice(&7i32.to_be_bytes());
    body.extend_from_slice(&(-1i16).to_be_bytes());
    body.extend_from_slice(&(-1i32).to_be_bytes()); // replica id
    body.extend_from_slice(&100i32.to_be_bytes()); // max wait
    body.extend_from_slice(&1i32.to_be_bytes()); // min bytes
    body.extend_from_slice(&(1i32 << 20).to_be_bytes());
    body.push(0); // read_uncommitted
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&(TOPIC.len() as i16).to_be_bytes());
    body.extend_from_slice(TOPIC.as_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&offset.to_be_bytes());
    body.extend_from_slice(&(1i32 << 20).to_be_bytes());
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    conn.write_all(&frame).await.unwrap();
    let size = conn.read_i32().await.unwrap();
    let mut response = vec![0u8; size as usize];
    conn.read_exact(&mut response).await.unwrap();
    let mut r = &response[..];
    let mut take = |n: usize| {
        let (head, rest) = r.split_at(n);
        r = rest;
        head.to_vec()
    };
    let i32_at = |b: Vec<u8>| i32::from_be_bytes(b.try_into().unwrap());
    assert_eq!(i32_at(take(4)), 7, "correlation id");
    take(4); // throttle
    assert_eq!(i32_at(take(4)), 1, "one topic");
    let name_len = i16::from_be_bytes(take(2).try_into().unwrap()) as usize;
    assert_eq!(take(name_len), TOPIC.as_bytes());
    assert_eq!(i32_at(take(4)), 1, "one partition");
    assert_eq!(i32_at(take(4)), 0);
    let error = i16::from_be_bytes(take(2).try_into().unwrap());
    let hw = i64::from_be_bytes(take(8).try_into().unwrap());
    take(8); // last stable offset
    let aborted = i32_at(take(4));
    assert!(aborted <= 0, "no aborted transactions read_uncommitted");
    let records = i32_at(take(4));
    (
        error,
        hw,
        if records > 0 {
            take(records as usize)
        } else {
            Vec::new()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_bucket_answers_clients_follows_the_shipper_and_keeps_group_offsets() {
    let w = World::new(40);
    w.ship().await;
    let service = ServeBucketService::prepare(w.options()).await.unwrap();
    let replica = service.replica().clone();
    assert_eq!(replica.ends(TOPIC, 0).unwrap().high_watermark, 40);
    let addr = service.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service.serve(shutdown.clone()));

    assert_eq!(api_versions(addr, 4242).await, (4242, 0));
    // A Fetch over the wire: the records are the source's first segment's bytes, fetched from the bucket.
    let (error, hw, records) = fetch(addr, 0).await;
    assert_eq!((error, hw), (0, 40));
    let first_log = w
        .tmp
        .path()
        .join("source")
        .join(format!("{TOPIC}-0"))
        .join("00000000000000000000.log");
    assert_eq!(records, std::fs::read(first_log).unwrap());

    // The source grows, the shipper ships: the served end follows within a few poll intervals.
    let mut f = std::fs::OpenOptions::new().append(true).open(w.active_log()).unwrap();
    for i in 0..10 {
        f.write_all(&batch(40 + i, 40 + i).build()).unwrap();
    }
    drop(f);
    w.ship().await;
    let mut changes = replica.changes();
    tokio::time::timeout(Duration::from_secs(10), async {
        while replica.ends(TOPIC, 0).unwrap().high_watermark != 50 {
            changes.changed().await.unwrap();
        }
    })
    .await
    .expect("the new manifest version is followed");

    shutdown.cancel();
    assert_eq!(running.await.unwrap().unwrap(), Stopped::Shutdown);

    // Group offsets live in the cache directory's catalog and survive a restart; the segment cache does not.
    let offsets = super::open_offsets(&w.options().cache_dir, LINK, "file:///bucket").unwrap();
    offsets
        .commit(
            "readers",
            &[CommittedOffset {
                topic: TOPIC.into(),
                partition: 0,
                offset: 17,
                leader_epoch: 0,
                metadata: String::new(),
            }],
        )
        .unwrap();
    drop(offsets);
    let again = ServeBucketService::prepare(w.options()).await.unwrap();
    assert_eq!(again.replica().ends(TOPIC, 0).unwrap().high_watermark, 50);
    let fetched = again.offsets.fetch("readers").unwrap();
    assert_eq!(fetched.len(), 1);
    assert_eq!((fetched[0].topic.as_str(), fetched[0].offset), (TOPIC, 17));
    assert_eq!(again.offsets.groups().unwrap(), ["readers"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_bucket_refuses_a_missing_store_a_foreign_cache_directory_and_an_empty_cache() {
    let w = World::new(5);
    w.ship().await;
    let mut missing = w.options();
    missing.store = w.tmp.path().join("no-such-bucket").display().to_string();
    assert!(ServeBucketService::prepare(missing).await.is_err());

    // A non-empty directory that is not a cache is never emptied.
    let foreign = w.tmp.path().join("home");
    std::fs::create_dir_all(foreign.join("photos-1")).unwrap();
    let mut options = w.options();
    options.cache_dir = foreign.clone();
    let refused = ServeBucketService::prepare(options).await.err().expect("refused");
    assert!(format!("{refused:#}").contains("not a segment cache"), "{refused:#}");
    assert!(foreign.join("photos-1").is_dir());

    let mut empty = w.options();
    empty.cache_size = 0;
    assert!(ServeBucketService::prepare(empty).await.is_err());
}
