//! Compaction on a tailed mirror, end to end (issue 9, item 5): a real Kafka 4.4 broker's cleaner rewrites (and
//! merges) sealed segments of a compacted topic while it is produced to and tailed (`TailFeed` → `ShipperSession`
//! ↔ `ApplierSession` over loopback → `TailAppender`). The feed notices each rewrite and ships the new version as
//! SegmentReplace pieces (feature bit 1); the appender validates and installs it atomically.
//!
//! After the producer stops, the cleaner has settled and the mirror has caught up, the mirror must hold exactly
//! the broker's segments (same base offsets: merged ones gone), each byte for byte (sealed ones whole; the active
//! one up to the shipped position, which is then its end), the broker's log must show the cleaner ran (offset gaps),
//! the mirror's offsets must strictly increase, and strict verify must find no error on a sealed segment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segment_format::log::scan_frames;
use segment_format::partition_metadata::PartitionMetadata;
use segment_format::verify::{verify_paths, NoProgress, VerifyOptions};
use segmirror_applier::tail::TailAppender;
use segmirror_shipper::source::{CheckpointHighWatermarks, UptoPolicy};
use segmirror_shipper::tail::{TailFeed, TailFeedConfig, TailPartition};
use segmirror_tests::*;
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::{PartitionRef, Role};
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Dialer, LinkConfig};
use segmirror_transport::direct::session::{ApplierSession, ChunkApplier, SessionConfig, ShipperSession};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "tail-compaction";
const PARTITIONS: i32 = 2;
const ROUNDS: usize = 8;
const STEPS_PER_ROUND: usize = 4;
const RECORDS_PER_STEP: usize = 40;
const VALUE_BYTES: usize = 300;
/// Small segments: many rolls while producing.
const SEGMENT_BYTES: u64 = 16 * 1024;
/// Distinct keys per partition: each is overwritten many times, so the cleaner has much to remove.
const KEYS: usize = 60;
/// Failure guard on the catch-up; nothing is asserted about speed.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the test looks at the mirror and the broker's directories.
const POLL: Duration = Duration::from_millis(200);
/// The state compared must hold this long (ten of the harness's cleaner backoffs, 200 ms) before the test stops
/// the link: the broker's cleaner has then settled.
const SETTLED_FOR: Duration = Duration::from_millis(2000);

fn session_config() -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(5),
        credit_window: 64 << 10,
        max_bandwidth: None,
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

fn produce(bootstrap: &str) {
    for round in 0..ROUNDS {
        let mut plan = ProducePlan::new(TOPIC)
            .config("enable.idempotence", "true")
            .config("linger.ms", "2")
            .config("batch.size", "8192");
        for step in 0..STEPS_PER_ROUND {
            let records = (0..RECORDS_PER_STEP)
                .map(|i| OutRecord {
                    partition: Some((i % PARTITIONS as usize) as i32),
                    key: Some(format!("k-{}", (round * STEPS_PER_ROUND + step + i) % KEYS).into_bytes()),
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

fn digests(logs: &BTreeMap<i64, PathBuf>) -> Vec<(i64, [u8; 32])> {
    use sha2::Digest;
    logs.iter()
        .map(|(b, p)| (*b, sha2::Sha256::digest(std::fs::read(p).unwrap_or_default()).into()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tailed_mirror_installs_what_the_brokers_cleaner_rewrote() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("e2e-tail-compaction")).unwrap();
    let bootstrap = broker.bootstrap();
    let spec = TopicSpec::new(TOPIC, PARTITIONS)
        .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
        .config("cleanup.policy", "compact")
        .config("min.cleanable.dirty.ratio", "0.01")
        .config("segment.ms", 2000)
        .config("retention.ms", -1);
    admin(&bootstrap, &[spec], &[]).unwrap();
    let source_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| broker.partition_dir(TOPIC, p)).collect();
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
                topic: TOPIC.to_string(),
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

    let producer = std::thread::spawn(move || produce(&bootstrap));
    while !producer.is_finished() {
        tokio::time::sleep(POLL).await;
    }
    producer.join().unwrap();

    // Caught up and settled: the mirror holds the broker's segments and is durable to the broker's log end, and
    // that held for SETTLED_FOR.
    let end = Instant::now() + CATCH_UP_TIMEOUT;
    let mut same_since: Option<(Instant, Snapshot)> = None;
    loop {
        let durable = watcher.durable_positions().await.unwrap();
        let mut now: Snapshot = Vec::new();
        for p in 0..PARTITIONS {
            let src = logs(&source_dirs[p as usize]);
            let active = src
                .values()
                .next_back()
                .map_or(0, |path| std::fs::metadata(path).unwrap().len());
            let mir = logs(&mirror.path().join(format!("{TOPIC}-{p}")));
            let at = durable
                .iter()
                .find(|d| d.position.partition.partition == p)
                .map(|d| (d.position.segment_base, d.position.position));
            now.push((digests(&src), active, digests(&mir), at));
        }
        let matches = now
            .iter()
            .all(|(src, active, mir, at)| src == mir && src.last().map(|(b, _)| (*b, *active)) == *at);
        match (&same_since, matches) {
            (Some((since, before)), true) if *before == now => {
                if since.elapsed() >= SETTLED_FOR {
                    break;
                }
            }
            (_, true) => same_since = Some((Instant::now(), now.clone())),
            (_, false) => same_since = None,
        }
        if Instant::now() >= end {
            // The link's own ending says why (a refusal, a divergence): stop both sides and show it.
            shutdown.cancel();
            let listened = listening.await.unwrap();
            let dialed = dialing.await.unwrap();
            panic!(
                "not caught up: (source bases, active size, mirror bases, durable) {now:?}; applier link: \
                 {listened:?}; shipper link: {dialed:?}"
            );
        }
        tokio::time::sleep(POLL).await;
    }
    shutdown.cancel();
    listening.await.unwrap().unwrap();
    dialing.await.unwrap().unwrap();

    for p in 0..PARTITIONS {
        let src_dir = &source_dirs[p as usize];
        let mir_dir = mirror.path().join(format!("{TOPIC}-{p}"));
        let src = logs(src_dir);
        let mir = logs(&mir_dir);
        assert_eq!(
            mir.keys().collect::<Vec<_>>(),
            src.keys().collect::<Vec<_>>(),
            "partition {p}: the mirror's segments are the broker's"
        );
        let mut prev: Option<i64> = None;
        let mut gaps = 0u64;
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
                if let Some(prev) = prev {
                    assert!(
                        frame.info.base_offset > prev,
                        "partition {p} segment {base}: offsets go back"
                    );
                    gaps += u64::from(frame.info.base_offset > prev + 1);
                }
                prev = Some(frame.info.last_offset);
            }
        }
        assert!(gaps > 0, "partition {p}: the broker's cleaner removed nothing");
        let next = prev.map_or(0, |p| p + 1);
        eprintln!(
            "partition {p}: mirror segments {:?}, log end {next}",
            mir.keys().collect::<Vec<_>>()
        );
    }

    let paths: Vec<PathBuf> = (0..PARTITIONS)
        .map(|p| mirror.path().join(format!("{TOPIC}-{p}")))
        .collect();
    let report = verify_paths(
        &paths,
        &VerifyOptions {
            deep: true,
            strict: true,
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
