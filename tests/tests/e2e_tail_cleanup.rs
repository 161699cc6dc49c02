//! Retention and compaction on a tailed mirror, end to end: a real Kafka 4.4 broker deletes
//! (retention) or rewrites and merges (the cleaner) sealed segments of a topic while it is produced to and tailed
//! (`TailFeed` → `ShipperSession` ↔ `ApplierSession` over loopback → `TailAppender`). For retention the feed tells
//! the source's log start (a LogStart frame, feature bit 0) and the appender deletes what the broker deleted; for
//! compaction the feed notices each rewrite and ships the new version as SegmentReplace pieces (feature bit 1),
//! which the appender validates and installs atomically.
//!
//! After the producer stops, the broker's retention or cleaner has settled and the mirror has caught up, the mirror
//! must hold exactly the broker's segments (same base offsets and SHA-256: what the broker deleted or merged away is
//! gone; the active one up to the shipped position, which is then its end), every batch CRC-valid, and strict
//! verify must find no error on a sealed segment. Per kind: after retention the recorded log start is the broker's
//! first base, offsets run contiguously from it and no file below it survives; after compaction the broker's log
//! shows the cleaner ran (offset gaps) and the mirror's offsets strictly increase.
//!
//! One driver, two scenarios ([`Cleanup`]): what differs is the topic's config, the keys produced, how long the
//! broker needs to settle, and the checks specific to each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segment_format::log::scan_frames;
use segment_format::partition_metadata::PartitionMetadata;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segmirror_applier::direct::{tailed_log_start, TailAppender};
use segmirror_shipper::direct::{TailFeed, TailFeedConfig, TailPartition};
use segmirror_shipper::source::{CheckpointHighWatermarks, UptoPolicy};
use segmirror_tests::service::{Settle, Settling};
use segmirror_tests::*;
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::{PartitionRef, Role};
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Dialer, LinkConfig};
use segmirror_transport::direct::session::{ApplierSession, ChunkApplier, SessionConfig, ShipperSession};
use sha2::Digest;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 2;
const ROUNDS: usize = 8;
const STEPS_PER_ROUND: usize = 4;
const RECORDS_PER_STEP: usize = 40;
const VALUE_BYTES: usize = 300;
/// Small segments: many rolls while producing.
const SEGMENT_BYTES: u64 = 16 * 1024;
/// Retention keeps about four segments per partition: the broker deletes many while the tail runs.
const RETENTION_BYTES: u64 = 4 * SEGMENT_BYTES;
/// Distinct keys per partition under compaction: each is overwritten many times, so the cleaner has much to remove.
const KEYS: usize = 60;
/// Failure guard on the catch-up; nothing is asserted about speed.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the test looks at the mirror and the broker's directories.
const POLL: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cleanup {
    Retention,
    Compaction,
}

impl Cleanup {
    fn topic(self) -> &'static str {
        match self {
            Cleanup::Retention => "tail-retention",
            Cleanup::Compaction => "tail-compaction",
        }
    }

    fn spec(self, broker: &KafkaBroker) -> TopicSpec {
        let spec = TopicSpec::new(self.topic(), PARTITIONS)
            .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
            .config("retention.ms", -1);
        match self {
            Cleanup::Retention => spec.config("retention.bytes", RETENTION_BYTES),
            Cleanup::Compaction => spec
                .config("cleanup.policy", "compact")
                .config("min.cleanable.dirty.ratio", "0.01")
                .config("segment.ms", 2000),
        }
    }

    /// Retention: every key distinct. Compaction: [`KEYS`] keys, each overwritten many times.
    fn key(self, round: usize, step: usize, i: usize) -> Vec<u8> {
        match self {
            Cleanup::Retention => format!("k-{round}-{step}-{i}").into_bytes(),
            Cleanup::Compaction => format!("k-{}", (round * STEPS_PER_ROUND + step + i) % KEYS).into_bytes(),
        }
    }

    /// How long the compared state must hold before the test stops the link: three of the harness's retention
    /// checks (500 ms apart), or ten of its cleaner backoffs (200 ms). The broker has then settled.
    fn settled_for(self) -> Duration {
        match self {
            Cleanup::Retention => Duration::from_millis(1500),
            Cleanup::Compaction => Duration::from_millis(2000),
        }
    }
}

fn session_config() -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(5),
        credit_window: 64 << 10,
        max_bandwidth: None,
        observer: None,
    }
}

fn link(role: Role) -> LinkConfig {
    LinkConfig::new(HandshakeConfig::new(
        role,
        "dr",
        (role == Role::Shipper).then(|| "source-cluster".to_string()),
    ))
}

/// The `.log` files of a partition directory, by base offset.
fn logs(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".log") {
            if let Ok(base) = stem.parse::<i64>() {
                out.insert(base, path);
            }
        }
    }
    out
}

/// Each segment's base and SHA-256 (a file gone between the listing and the read digests as empty).
fn digests(logs: &BTreeMap<i64, PathBuf>) -> Vec<(i64, [u8; 32])> {
    logs.iter()
        .map(|(b, p)| (*b, sha2::Sha256::digest(std::fs::read(p).unwrap_or_default()).into()))
        .collect()
}

fn produce(bootstrap: &str, cleanup: Cleanup) {
    for round in 0..ROUNDS {
        let mut plan = ProducePlan::new(cleanup.topic())
            .config("enable.idempotence", "true")
            .config("linger.ms", "2")
            .config("batch.size", "8192");
        for step in 0..STEPS_PER_ROUND {
            let records = (0..RECORDS_PER_STEP)
                .map(|i| OutRecord {
                    partition: Some((i % PARTITIONS as usize) as i32),
                    key: Some(cleanup.key(round, step, i)),
                    value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
                    headers: Vec::new(),
                    timestamp: None,
                })
                .collect();
            plan = plan.step(ProduceStep::Send(records));
        }
        python_produce(bootstrap, &plan).unwrap();
    }
}

/// What the test compares per partition: the broker's segments (base, SHA-256) and active segment size, the
/// mirror's segments (base, SHA-256) and durable position.
type Snapshot = Vec<(Vec<(i64, [u8; 32])>, u64, Vec<(i64, [u8; 32])>, Option<(i64, u64)>)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tailed_mirror_deletes_what_the_brokers_retention_deleted() {
    tail_through(Cleanup::Retention).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tailed_mirror_installs_what_the_brokers_cleaner_rewrote() {
    tail_through(Cleanup::Compaction).await;
}

async fn tail_through(cleanup: Cleanup) {
    // The sessions' logs, captured by the test harness: a failure prints what the feed and the appender did.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "segmirror_shipper=debug,segmirror_applier=debug,segmirror_transport=debug".into()),
        )
        .with_test_writer()
        .try_init();
    let topic = cleanup.topic();
    let mut broker = KafkaBroker::start(BrokerConfig::new(&format!("e2e-{topic}"))).unwrap();
    let bootstrap = broker.bootstrap();
    admin(&bootstrap, &[cleanup.spec(&broker)], &[]).unwrap();
    let source_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| broker.partition_dir(topic, p)).collect();
    let topic_id = {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            match std::fs::read(source_dirs[0].join("partition.metadata")) {
                Ok(bytes) => break PartitionMetadata::parse(&bytes).unwrap().topic_id.0,
                Err(_) if Instant::now() < end => std::thread::sleep(POLL),
                Err(e) => panic!("no partition.metadata: {e}"),
            }
        }
    };
    let partitions: Vec<TailPartition> = (0..PARTITIONS)
        .map(|p| TailPartition {
            partition: PartitionRef {
                topic: topic.to_string(),
                partition: p,
                topic_id,
            },
            dir: source_dirs[p as usize].clone(),
        })
        .collect();
    // Log-end mode: a single broker never truncates, and the mirror then follows without the checkpoint's delay.
    let mut feed_config = TailFeedConfig::new(Arc::new(CheckpointHighWatermarks::new(vec![broker
        .log_dir()
        .to_path_buf()])));
    feed_config.upto = UptoPolicy::LogEnd;
    feed_config.poll_interval = Duration::from_millis(20);
    let mut shipper = ShipperSession::new(TailFeed::new(partitions, feed_config), session_config()).unwrap();
    let mirror = tempfile::tempdir().unwrap();
    let appender = TailAppender::open(mirror.path()).unwrap();
    let mut watcher = appender.clone();
    let applier = ApplierSession::new(appender, session_config()).unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let listening = tokio::spawn(async move {
        let (_, r) = listen(listener, Acceptor::Plain, link(Role::Applier), applier, stop).await;
        r
    });
    let stop = shutdown.clone();
    let dialing =
        tokio::spawn(async move { dial(&addr, &Dialer::Plain, &link(Role::Shipper), &mut shipper, &stop).await });

    let producer = std::thread::spawn(move || produce(&bootstrap, cleanup));
    while !producer.is_finished() {
        tokio::time::sleep(POLL).await;
    }
    producer.join().unwrap();

    // Caught up and settled: the mirror holds the broker's segments and is durable to the broker's log end, and
    // that held for the scenario's settling time.
    let mut settle = Settle::new(cleanup.settled_for(), CATCH_UP_TIMEOUT);
    loop {
        let durable = watcher.durable_positions().await.unwrap();
        let mut now: Snapshot = Vec::new();
        for p in 0..PARTITIONS {
            let src = logs(&source_dirs[p as usize]);
            let active = src
                .values()
                .next_back()
                .map_or(0, |path| std::fs::metadata(path).unwrap().len());
            let mir = logs(&mirror.path().join(format!("{topic}-{p}")));
            let at = durable
                .iter()
                .find(|d| d.position.partition.partition == p)
                .map(|d| (d.position.segment_base, d.position.position));
            now.push((digests(&src), active, digests(&mir), at));
        }
        let matches = now
            .iter()
            .all(|(src, active, mir, at)| src == mir && src.last().map(|(b, _)| (*b, *active)) == *at);
        match settle.observe(matches, now.clone()) {
            Settling::Settled => break,
            Settling::Waiting => {}
            Settling::TimedOut => {
                // The link's own ending says why (a refusal, a divergence): stop both sides and show it.
                shutdown.cancel();
                let listened = listening.await.unwrap();
                let dialed = dialing.await.unwrap();
                panic!(
                    "not caught up: (source segments, active size, mirror segments, durable) {now:?}; applier link: \
                 {listened:?}; shipper link: {dialed:?}"
                );
            }
        }
        tokio::time::sleep(POLL).await;
    }
    shutdown.cancel();
    listening.await.unwrap().unwrap();
    dialing.await.unwrap().unwrap();

    for p in 0..PARTITIONS {
        let mir_dir = mirror.path().join(format!("{topic}-{p}"));
        let src = logs(&source_dirs[p as usize]);
        let mir = logs(&mir_dir);
        assert_eq!(
            mir.keys().collect::<Vec<_>>(),
            src.keys().collect::<Vec<_>>(),
            "partition {p}: the mirror's segments are the broker's"
        );
        // Every batch of the mirror, in order: (base offset, last offset).
        let mut batches: Vec<(i64, i64)> = Vec::new();
        for (base, mpath) in &mir {
            let m = std::fs::read(mpath).unwrap();
            let s = std::fs::read(&src[base]).unwrap();
            assert!(
                m == s,
                "partition {p} segment {base}: bytes ({} vs {})",
                m.len(),
                s.len()
            );
            for frame in scan_frames(&m, 0) {
                let frame = frame.unwrap();
                assert!(frame.crc_matches(), "partition {p} segment {base}: CRC");
                batches.push((frame.info.base_offset, frame.info.last_offset));
            }
        }
        let first = *src.keys().next().unwrap();
        match cleanup {
            Cleanup::Retention => {
                assert!(first > 0, "partition {p}: the broker's retention deleted nothing");
                assert_eq!(
                    tailed_log_start(mirror.path(), topic, p).unwrap(),
                    Some(first),
                    "partition {p}: recorded log start"
                );
                let mut next = first;
                for (base, last) in &batches {
                    assert_eq!(*base, next, "partition {p}: a gap or a repeat at offset {base}");
                    next = last + 1;
                }
                // No file of a deleted segment is left behind.
                for entry in std::fs::read_dir(&mir_dir).unwrap() {
                    let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                    if let Some(offset) = name.split('.').next().and_then(|s| s.parse::<i64>().ok()) {
                        assert!(offset >= first, "partition {p}: {name} survived the broker's retention");
                    }
                }
            }
            Cleanup::Compaction => {
                let mut gaps = 0u64;
                for pair in batches.windows(2) {
                    let ((_, prev_last), (base, _)) = (pair[0], pair[1]);
                    assert!(base > prev_last, "partition {p}: offsets go back at {base}");
                    gaps += u64::from(base > prev_last + 1);
                }
                assert!(gaps > 0, "partition {p}: the broker's cleaner removed nothing");
            }
        }
        eprintln!(
            "partition {p}: mirror segments {:?}, log end {}",
            mir.keys().collect::<Vec<_>>(),
            batches.last().map_or(first, |(_, last)| last + 1)
        );
    }

    let paths: Vec<PathBuf> = (0..PARTITIONS)
        .map(|p| mirror.path().join(format!("{topic}-{p}")))
        .collect();
    let report = verify_paths(
        &paths,
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    for f in &report.findings {
        eprintln!("verify: {:?} {} {:?}", f.severity, f.path.display(), f.defect);
    }
    assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
    // Only the active segment's offset index (written at the seal) may be missing; nothing on a sealed segment.
    let actives: Vec<PathBuf> = paths
        .iter()
        .map(|dir| {
            let (&base, _) = logs(dir).last_key_value().unwrap();
            dir.join(format!("{base:020}"))
        })
        .collect();
    for f in &report.findings {
        let on_active = actives.iter().any(|a| f.path.with_extension("") == *a);
        let text = format!("{:?}", f.defect);
        let expected = on_active && f.path.extension().is_some_and(|e| e == "index") && text.contains("missing");
        assert!(expected, "unexpected verify finding: {f:?}");
    }
    broker.stop().unwrap();
}
