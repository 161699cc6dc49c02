//! Continuous replication end to end: a real Kafka 4.4 broker is produced to while the library's tail
//! pieces follow it: `TailFeed` over the broker's log dir (bounded by the high watermark from
//! `replication-offset-checkpoint`) → `ShipperSession` ↔ `ApplierSession` over mutual TLS through a `FaultProxy`
//! that cuts (FIN), resets (RST) and stalls the connection several times while data flows → `TailAppender` over a
//! temporary mirror root.
//!
//! After the producers stop and the mirror has caught up with every partition's log end, the mirror must hold the
//! source's segments byte for byte (sealed ones whole, SHA-256 equal; the active one up to the shipped position, which
//! is then its end), the companions it installed at the seals must equal the broker's, its batches must carry
//! contiguous offsets from 0 to the log end with no repeat, and the verify engine (strict, deep) must find nothing
//! at all in it, active segments included (the appender keeps their `.txnindex`, offset and time index right as it
//! appends); `segmirror verify --deep --strict` on the stopped mirror exits 0.
//!
//! Two directions: push (the shipper dials the applier) and pull (the applier dials the shipper).
//!
//! Then the tailed mirror is promoted (the appender records its partitions and sealed segments in a catalog, as
//! `segmirror tail-apply` does): `segmirror promote` into a stopped target broker completes the active segments'
//! companions, `verify --deep --strict` finds the promoted partitions sound, consumers of the restarted target
//! read every record exactly once at the source's offsets (`read_committed` without the aborted ones, as on the
//! source), and a new idempotent producer's record lands right after the mirrored ones (`promote_and_check`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segment_format::index::{OffsetIndexBuilder, DEFAULT_INDEX_INTERVAL_BYTES};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::PartitionMetadata;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segmirror_applier::direct::{TailAppender, TailCatalog};
use segmirror_catalog::Catalog;
use segmirror_shipper::direct::{TailFeed, TailFeedConfig, TailPartition};
use segmirror_shipper::source::{CheckpointHighWatermarks, HighWatermarkSource, UptoPolicy};
use segmirror_tests::clients::record_identities;
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::segmirror_cli::segmirror_verify;
use segmirror_tests::service::{Settle, Settling};
use segmirror_tests::*;
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::{PartitionRef, Role};
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Backoff, Dialer, LinkConfig, LinkEvent};
use segmirror_transport::direct::session::{ApplierSession, ChunkApplier, SessionConfig, ShipperSession};
use segmirror_transport::direct::testing::FaultProxy;
use segmirror_transport::direct::tls::{client_config, server_config, TlsFiles};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 2;
/// Producer rounds (one Python producer process each, a few flushed steps): spread over seconds so the tail
/// follows a growing log and the proxy's faults land while data flows.
const ROUNDS: usize = 6;
const STEPS_PER_ROUND: usize = 4;
const RECORDS_PER_STEP: usize = 30;
const VALUE_BYTES: usize = 300;
/// Small segments: many rolls, so many seals, during the run.
const SEGMENT_BYTES: u64 = 64 * 1024;
/// Time between two faults of the proxy while the producers run.
const FAULT_EVERY: Duration = Duration::from_millis(1200);
/// A stall longer than the sessions' idle timeout, so the stalled session ends on its own and a new one starts.
const STALL: Duration = Duration::from_millis(2500);
/// Failure guard on the catch-up after the producers stop (the broker checkpoints high watermarks every second in
/// the harness); nothing is asserted about speed.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(90);
/// How often the test looks at the mirror's durable positions and reloads the high watermarks.
const POLL: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Direction {
    /// The shipper dials the applier (through the proxy).
    Push,
    /// The applier dials the shipper (through the proxy).
    Pull,
}

fn session_config() -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(2),
        credit_window: 64 << 10,
        max_bandwidth: None,
        observer: None,
    }
}

/// Every link event of both sides, with the time since the start, for the failure messages.
type EventLog = Arc<std::sync::Mutex<Vec<String>>>;

fn link(role: Role, log: &EventLog, start: Instant) -> LinkConfig {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<LinkEvent>(1024);
    let log = log.clone();
    tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            let line = format!("{:>6} ms {role:?}: {e:?}", start.elapsed().as_millis());
            log.lock().unwrap().push(line);
        }
    });
    let mut config = LinkConfig::new(HandshakeConfig::new(
        role,
        "dr",
        (role == Role::Shipper).then(|| "source-cluster".to_string()),
    ));
    // Quick reconnects: the test cuts the link many times in a few seconds.
    config.backoff = Backoff::new(
        Duration::from_millis(50),
        Duration::from_millis(500),
        Duration::from_secs(5),
    );
    config.events = Some(tx);
    config
}

/// Test certificates: a CA and two leaves signed by it, written as PEM files (as `transport/tests/support`).
struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        Ca {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    fn leaf(&self, dir: &Path, name: &str) -> TlsFiles {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = TlsFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
            ca: dir.join(format!("{name}-ca.crt")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, self.issuer.pem()).unwrap();
        files
    }
}

fn record(round: usize, step: usize, i: usize, tag: &str) -> OutRecord {
    OutRecord {
        partition: Some((i % PARTITIONS as usize) as i32),
        key: Some(format!("{tag}-{round}-{step}-{i}").into_bytes()),
        value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
        headers: Vec::new(),
        timestamp: None,
    }
}

/// One round: an idempotent producer in flushed steps, then a transactional one that commits one transaction and
/// aborts another (so the log holds transactional batches and both kinds of control batch).
fn produce_round(bootstrap: &str, topic: &str, round: usize) {
    let mut plan = ProducePlan::new(topic)
        .config("enable.idempotence", "true")
        .config("linger.ms", "2")
        .config("batch.size", "8192");
    for step in 0..STEPS_PER_ROUND {
        let records = (0..RECORDS_PER_STEP).map(|i| record(round, step, i, "idem")).collect();
        plan = plan.step(ProduceStep::Send(records));
    }
    python_produce(bootstrap, &plan).unwrap();
    let txn = |step: usize| -> Vec<OutRecord> {
        (0..RECORDS_PER_STEP / 2)
            .map(|i| record(round, step, i, "txn"))
            .collect()
    };
    let plan = ProducePlan::new(topic)
        .config("transactional.id", format!("{topic}-txn"))
        .config("linger.ms", "2")
        .step(ProduceStep::InitTransactions)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(txn(0)))
        .step(ProduceStep::CommitTransaction)
        .step(ProduceStep::BeginTransaction)
        .step(ProduceStep::Send(txn(1)))
        .step(ProduceStep::AbortTransaction);
    python_produce(bootstrap, &plan).unwrap();
}

/// The `.log` files of a partition directory, by base offset.
fn logs(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
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

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The offset index a rebuild of the `.log` at `path` with `interval` gives.
fn rebuilt_offset_index(path: &Path, base: i64, interval: u64) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let mut builder = OffsetIndexBuilder::new(base, interval);
    for frame in scan_frames(&bytes, 0) {
        builder.push(&frame.unwrap().info).unwrap();
    }
    builder.to_bytes()
}

/// `index_interval`: the topic's `index.interval.bytes` when not Kafka's default.
async fn replicate(direction: Direction, topic: &str, index_interval: Option<u64>) {
    let mut broker = KafkaBroker::start(BrokerConfig::new(&format!("e2e-tail-{topic}"))).unwrap();
    let bootstrap = broker.bootstrap();
    let mut spec = TopicSpec::new(topic, PARTITIONS)
        .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
        .config("retention.ms", -1);
    if let Some(interval) = index_interval {
        spec = spec.config("index.interval.bytes", interval);
    }
    admin(&bootstrap, &[spec], &[]).unwrap();
    let log_dir = broker.log_dir().to_path_buf();
    let source_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| broker.partition_dir(topic, p)).collect();
    // The partitions exist on disk once the topic is created; their topic id is the broker's.
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

    // Shipper: the feed bounded by the high watermark, which the feed refreshes from the checkpoint as it polls.
    let hws = Arc::new(CheckpointHighWatermarks::new(vec![log_dir.clone()]).with_reload_interval(POLL));
    let mut feed_config = TailFeedConfig::new(hws.clone());
    feed_config.upto = UptoPolicy::HighWatermark;
    feed_config.poll_interval = Duration::from_millis(20);
    let shipper = ShipperSession::new(TailFeed::new(partitions, feed_config), session_config()).unwrap();

    // Applier: the appender over an empty mirror root, recording in a catalog bound to it (as `tail-apply`).
    let mirror = tempfile::tempdir().unwrap();
    let catalog_dir = tempfile::tempdir().unwrap();
    let catalog_path = catalog_dir.path().join("catalog.sqlite");
    let mut catalog = Catalog::open(&catalog_path).unwrap();
    catalog
        .bind_mirror_root(&segmirror_catalog::canonical_mirror_root(mirror.path()).unwrap())
        .unwrap();
    let appender = TailAppender::open_with_catalog(mirror.path(), TailCatalog::open(catalog, "dr").unwrap()).unwrap();
    let mut watcher = appender.clone();
    let applier = ApplierSession::new(appender, session_config()).unwrap();

    // Mutual TLS: both leaves signed by one CA, each side checking the other's.
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("e2e-tail-ca");
    let server_files = ca.leaf(certs.path(), "server");
    let client_files = ca.leaf(certs.path(), "client");
    let acceptor = Acceptor::Tls(server_config(&server_files).unwrap());
    let dialer = Dialer::Tls {
        config: client_config(&client_files).unwrap(),
        server_name: "localhost".to_string(),
    };

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = FaultProxy::start(listener.local_addr().unwrap()).await.unwrap();
    let proxy_addr = proxy.addr().to_string();
    let shutdown = CancellationToken::new();
    let events: EventLog = Arc::default();
    let started = Instant::now();
    let applier_link = link(Role::Applier, &events, started);
    let shipper_link = link(Role::Shipper, &events, started);
    let (listening, dialing) = match direction {
        Direction::Push => {
            let stop = shutdown.clone();
            let listening = tokio::spawn(async move {
                let (_, r) = listen(listener, acceptor, applier_link, applier, stop).await;
                r
            });
            let stop = shutdown.clone();
            let mut shipper = shipper;
            let dialing =
                tokio::spawn(async move { dial(&proxy_addr, &dialer, &shipper_link, &mut shipper, &stop).await });
            (listening, dialing)
        }
        Direction::Pull => {
            let stop = shutdown.clone();
            let listening = tokio::spawn(async move {
                let (_, r) = listen(listener, acceptor, shipper_link, shipper, stop).await;
                r
            });
            let stop = shutdown.clone();
            let mut applier = applier;
            let dialing =
                tokio::spawn(async move { dial(&proxy_addr, &dialer, &applier_link, &mut applier, &stop).await });
            (listening, dialing)
        }
    };
    let producer_topic = topic.to_string();
    let producer = std::thread::spawn(move || {
        for round in 0..ROUNDS {
            produce_round(&bootstrap, &producer_topic, round);
        }
    });
    // Faults while the producers run: a FIN cut, an RST, a stall past the idle timeout, in turn.
    let mut faults = 0usize;
    while !producer.is_finished() {
        tokio::time::sleep(FAULT_EVERY).await;
        match faults % 3 {
            0 => proxy.drop_connections(),
            1 => proxy.reset_connections(),
            _ => {
                proxy.stall();
                tokio::time::sleep(STALL).await;
                proxy.pass();
            }
        }
        faults += 1;
    }
    producer.join().unwrap();
    assert!(faults >= 3, "only {faults} faults while producing");

    // Catch up: every partition's durable mirror position is the source's log end (its last segment's end), and
    // the high watermark has reached the log end offset.
    let mut settle = Settle::new(Duration::ZERO, CATCH_UP_TIMEOUT);
    let mut leos = vec![0i64; PARTITIONS as usize];
    loop {
        let durable = watcher.durable_positions().await.unwrap();
        let mut caught_up = true;
        for p in 0..PARTITIONS {
            let src = logs(&source_dirs[p as usize]);
            let (&base, path) = src.last_key_value().unwrap();
            let bytes = std::fs::read(path).unwrap();
            let leo = scan_frames(&bytes, 0)
                .filter_map(|f| f.ok())
                .last()
                .map_or(base, |f| f.info.last_offset + 1);
            leos[p as usize] = leo;
            let at = durable
                .iter()
                .find(|d| d.position.partition.partition == p)
                .map(|d| (d.position.segment_base, d.position.position));
            caught_up &= at == Some((base, bytes.len() as u64));
        }
        match settle.observe(caught_up, ()) {
            Settling::Settled => break,
            Settling::Waiting => {}
            Settling::TimedOut => panic!(
                "mirror at {durable:?}, source log ends {leos:?}, high watermarks {:?}; link events:\n{}",
                (0..PARTITIONS)
                    .map(|p| hws.high_watermark(topic, p).map(|h| h.offset))
                    .collect::<Vec<_>>(),
                events.lock().unwrap().join("\n")
            ),
        }
        tokio::time::sleep(POLL).await;
    }
    let connections = proxy.connections();
    shutdown.cancel();
    listening.await.unwrap().unwrap();
    dialing.await.unwrap().unwrap();
    assert!(
        connections > faults as u64 / 2,
        "{connections} connections through the proxy after {faults} faults"
    );

    let mut stats = Vec::new();
    for p in 0..PARTITIONS {
        let src_dir = &source_dirs[p as usize];
        let mir_dir = mirror.path().join(format!("{topic}-{p}"));
        let src = logs(src_dir);
        let mir = logs(&mir_dir);
        // No retention: the mirror has every segment the broker has, from offset 0.
        assert_eq!(
            mir.keys().collect::<Vec<_>>(),
            src.keys().collect::<Vec<_>>(),
            "partition {p}: segments"
        );
        assert!(
            src.len() >= 3,
            "partition {p}: only {} segments, too few rolls",
            src.len()
        );
        let last = *src.keys().next_back().unwrap();
        let mut next = 0i64;
        let (mut batches, mut control, mut transactional, mut companions) = (0u64, 0u64, 0u64, 0u64);
        let mut differs_from_default = 0u64;
        for (base, mpath) in &mir {
            let m = std::fs::read(mpath).unwrap();
            let s = std::fs::read(&src[base]).unwrap();
            // Sealed: the whole file; active: caught up to its end, so the whole file as well.
            assert_eq!(m.len(), s.len(), "partition {p} segment {base}: length");
            assert_eq!(sha256(&m), sha256(&s), "partition {p} segment {base}: SHA-256");
            assert!(m == s, "partition {p} segment {base}: bytes");
            for frame in scan_frames(&m, 0) {
                let frame = frame.unwrap();
                assert!(
                    frame.crc_matches(),
                    "partition {p} segment {base}: CRC at {}",
                    frame.info.position
                );
                assert_eq!(
                    frame.info.base_offset, next,
                    "partition {p} segment {base}: a gap or a repeat"
                );
                next = frame.info.last_offset + 1;
                batches += 1;
                control += u64::from(frame.info.is_control);
                transactional += u64::from(frame.info.is_transactional);
            }
            // The companions installed at the seal are the broker's files.
            if *base != last {
                for ext in ["index", "timeindex", "txnindex"] {
                    let name = format!("{base:020}.{ext}");
                    if let Ok(mb) = std::fs::read(mir_dir.join(&name)) {
                        let sb = std::fs::read(src_dir.join(&name)).unwrap();
                        assert!(mb == sb, "partition {p}: {name} differs from the broker's");
                        companions += 1;
                    }
                }
                for ext in ["index", "timeindex"] {
                    assert!(
                        mir_dir.join(format!("{base:020}.{ext}")).exists(),
                        "partition {p}: sealed segment {base} has no .{ext}"
                    );
                }
                // With another interval the broker's index is not what Kafka's default would give: the test then
                // proves the mirror took the topic's own interval, not the default.
                if index_interval.is_some() {
                    let default = rebuilt_offset_index(&src[base], *base, DEFAULT_INDEX_INTERVAL_BYTES);
                    let broker_index = std::fs::read(src_dir.join(format!("{base:020}.index"))).unwrap();
                    differs_from_default += u64::from(default != broker_index);
                }
            }
        }
        assert_eq!(next, leos[p as usize], "partition {p}: offsets up to the log end");
        assert!(
            index_interval.is_none() || differs_from_default > 0,
            "partition {p}: every broker index equals a default-interval rebuild; the test proves nothing"
        );
        assert!(
            control >= 2 && transactional >= 2,
            "partition {p}: no transactions seen"
        );
        stats.push((p, mir.len(), batches, control, companions, next));
        let mut files: Vec<String> = std::fs::read_dir(&mir_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        eprintln!("mirror partition {p}: {files:?}");
        // No producer snapshot travels in a v1 seal (a broker names a roll snapshot after the next segment's base,
        // which the seal does not carry; an earlier build installed each one a segment early). None may appear.
        let snapshots: Vec<&String> = files.iter().filter(|f| f.ends_with(".snapshot")).collect();
        assert!(
            snapshots.is_empty(),
            "partition {p}: mirror holds snapshots {snapshots:?}"
        );
    }

    // The verify engine, strict and deep, on the stopped mirror (every finding printed before the assertion).
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
    assert_eq!(report.suppressed_findings, 0);
    // None at all, on sealed or active segments: the appender keeps each active segment's `.txnindex` (an entry
    // per aborted transaction, its first offset possibly segments back), offset and time index right as it
    // appends, so the stopped mirror is sound as it stands.
    assert!(
        report.findings.is_empty(),
        "verify findings on the stopped mirror: {:#?}",
        report.findings
    );
    // The same through the CLI: `segmirror verify --deep --strict` on the stopped mirror exits 0.
    let verify = segmirror_verify(
        &paths.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    // Active segments holding aborted transactions (their `.txnindex` non-empty on the mirror): promotion must
    // keep their entries.
    let mut active_aborts: Vec<(i32, String)> = Vec::new();
    for p in 0..PARTITIONS {
        let dir = mirror.path().join(format!("{topic}-{p}"));
        let (&base, _) = logs(&dir).last_key_value().unwrap();
        let name = format!("{base:020}.txnindex");
        if std::fs::metadata(dir.join(&name)).is_ok_and(|m| m.len() > 0) {
            active_aborts.push((p, name));
        }
    }
    for (p, summary) in report.partitions.iter().enumerate() {
        assert_eq!(
            summary.last_offset,
            Some(leos[p] - 1),
            "verify: partition {p}'s last offset"
        );
    }
    eprintln!(
        "{direction:?}: {faults} faults, {connections} connections; per partition (p, segments, batches, control, \
         companions checked, log end): {stats:?}"
    );
    let source = SourceRecords::read(&broker.bootstrap(), topic);
    broker.stop().unwrap();
    eprintln!("{direction:?}: active segments with aborted transactions: {active_aborts:?}");
    promote_and_check(topic, mirror.path(), &catalog_path, &source, &leos, &active_aborts);
}

/// What consumers of the source read, by isolation level.
struct SourceRecords {
    uncommitted: Vec<Record>,
    committed: Vec<Record>,
}

impl SourceRecords {
    fn read(bootstrap: &str, topic: &str) -> SourceRecords {
        let uncommitted = consume_all(bootstrap, topic, None, Isolation::ReadUncommitted).unwrap();
        let committed = consume_all(bootstrap, topic, None, Isolation::ReadCommitted).unwrap();
        // The producers' aborted transactions are in the log and hidden from read_committed.
        assert!(
            committed.len() < uncommitted.len(),
            "read_committed {} records, read_uncommitted {}",
            committed.len(),
            uncommitted.len()
        );
        SourceRecords { uncommitted, committed }
    }
}

/// Promote the tailed mirror into a stopped target broker and check it as the module docs say.
/// `active_aborts`: (partition, `.txnindex` file name) of the mirror's active segments holding aborted
/// transactions, whose entries the promoted copy must keep.
fn promote_and_check(
    topic: &str,
    mirror: &Path,
    catalog: &Path,
    source: &SourceRecords,
    leos: &[i64],
    active_aborts: &[(i32, String)],
) {
    let mut target = KafkaBroker::start(BrokerConfig::new(&format!("e2e-tail-target-{topic}"))).unwrap();
    let spec = TopicSpec::new(topic, PARTITIONS).config("retention.ms", -1);
    admin(&target.bootstrap(), &[spec], &[]).unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(mirror, target.log_dir(), catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    for p in report["partitions"].as_array().unwrap() {
        let partition = p["partition"].as_i64().unwrap() as usize;
        assert_eq!(p["log_end_offset"].as_i64(), Some(leos[partition]), "{p}");
        // Every transaction was decided on the source: nothing to cut.
        assert_eq!(p["transactions_aborted"].as_array().map(Vec::len), Some(0), "{p}");
    }
    let dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| target.partition_dir(topic, p)).collect();
    // Promotion kept the active segments' `.txnindex` (verify below checks its entries).
    for (p, name) in active_aborts {
        let path = dirs[*p as usize].join(name);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(
            len > 0,
            "{}: no transaction index entries after promotion",
            path.display()
        );
    }
    let verify = segmirror_verify(
        &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");

    target.restart().unwrap();
    let tb = target.bootstrap();
    let uncommitted = consume_all(&tb, topic, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        record_identities(&uncommitted),
        record_identities(&source.uncommitted),
        "read_uncommitted on the target"
    );
    let committed = consume_all(&tb, topic, None, Isolation::ReadCommitted).unwrap();
    assert_eq!(
        record_identities(&committed),
        record_identities(&source.committed),
        "read_committed on the target"
    );

    // A new idempotent producer on the target: its record is stored once, right after the mirrored ones.
    let plan = ProducePlan::new(topic)
        .config("enable.idempotence", "true")
        .config("acks", "all")
        .step(ProduceStep::Send(vec![OutRecord {
            partition: Some(0),
            key: Some(b"after-promotion".to_vec()),
            value: Some(b"target".to_vec()),
            headers: Vec::new(),
            timestamp: None,
        }]));
    let acked = python_produce(&tb, &plan).unwrap();
    assert_eq!(acked.len(), 1);
    assert_eq!(acked[0].offset, leos[0], "the new record follows the mirrored ones");
    let after = consume_all(&tb, topic, Some(&[0]), Isolation::ReadCommitted).unwrap();
    let news: Vec<&Record> = after.iter().filter(|r| r.value.as_deref() == Some(b"target")).collect();
    assert_eq!(news.len(), 1, "stored once");
    assert_eq!(news[0].offset, leos[0]);
    assert_eq!(after.last().map(|r| r.offset), Some(leos[0]));
    target.stop().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_over_mutual_tls_through_faults_mirrors_a_live_broker_byte_for_byte() {
    replicate(Direction::Push, "tail-push", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_over_mutual_tls_through_faults_mirrors_a_live_broker_byte_for_byte() {
    replicate(Direction::Pull, "tail-pull", None).await;
}

/// A topic with `index.interval.bytes=1024`: the sealed segments' indexes on the mirror are still the broker's own,
/// byte for byte, and promotion gives consumers the same offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_of_a_topic_with_a_1024_byte_index_interval_mirrors_the_brokers_indexes() {
    replicate(Direction::Push, "tail-interval", Some(1024)).await;
}
