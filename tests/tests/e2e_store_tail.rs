//! Continuous replication through a bucket (`ship --store`, `apply --follow`, the follower stopped and resumed): a
//! single Kafka 4.4 broker with small segments is produced to (idempotent producers, and a transactional one that
//! commits and aborts) while `segmirror ship --store URL --upto log-end` uploads tail chunks and two
//! `segmirror apply --store URL --follow` (fan-out: each with its own mirror and catalog) install them, all as child
//! processes. One applier is stopped with SIGTERM (exit 0) while the producers run and started again later; it
//! catches up on its own.
//!
//! After the producers stop and both mirrors hold exactly the broker's segments with the active one as long as the
//! broker's, every service stops on SIGTERM with exit 0; the two mirrors are byte-identical to each other, every
//! `.log` equals the source's and every sealed segment's companions (`.index`, `.timeindex`, `.txnindex`) equal
//! the broker's; `verify --strict` finds a mirror sound; `segmirror promote` installs one mirror into a stopped
//! target broker, `verify --deep --strict` finds the promoted partitions sound and consumers of the target read
//! (uncommitted and committed) exactly what the source serves, at identical offsets.
//!
//! Two stores: the real S3-compatible server (moto), with the follower stopped for a minute, and a
//! local folder, with a short stop (the fast variant of the same shape).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segment_format::log::scan_frames;
use segmirror_tests::clients::record_identities;
use segmirror_tests::mirror::{assert_same_files, segmirror_promote};
use segmirror_tests::s3::MotoServer;
use segmirror_tests::segmirror_cli::segmirror_verify;
use segmirror_tests::service::{follow_args, Service, Settle, Settling};
use segmirror_tests::*;

const PARTITIONS: i32 = 2;
/// Small segments: several rolls (sealed versions) during the run.
const SEGMENT_BYTES: u64 = 16 * 1024;
const STEPS_PER_ROUND: usize = 3;
const RECORDS_PER_STEP: usize = 30;
const VALUE_BYTES: usize = 300;
/// Producer rounds before the second applier is stopped, and at least after it was restarted.
const ROUNDS_BEFORE_STOP: usize = 2;
const ROUNDS_AFTER_RESTART: usize = 2;
/// A follower stopped for a whole minute, through the real S3-compatible server.
const S3_STOPPED_FOR: Duration = Duration::from_secs(60);
/// The local-folder variant stops the applier only while the producers run a round or two.
const LOCAL_STOPPED_FOR: Duration = Duration::from_secs(3);
/// Failure guard for anything the test waits for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);
/// The compared state must hold this long (a few upload and poll intervals) to count as settled.
const SETTLED_FOR: Duration = Duration::from_millis(1500);

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
/// aborts another.
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

/// The `.log` files of a partition directory, by base offset (none if it does not exist yet).
fn logs(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(base) = name.strip_suffix(".log").and_then(|s| s.parse::<i64>().ok()) {
            out.insert(base, path);
        }
    }
    out
}

/// Per partition: the segment bases and the active segment's length.
type DirState = Vec<(Vec<i64>, u64)>;

fn dir_state(dirs: &[PathBuf]) -> DirState {
    dirs.iter()
        .map(|d| {
            let l = logs(d);
            let len = l
                .values()
                .next_back()
                .and_then(|p| std::fs::metadata(p).ok())
                .map_or(0, |m| m.len());
            (l.keys().copied().collect(), len)
        })
        .collect()
}

/// The log end offset of a partition directory: its last segment's last batch + 1.
fn log_end(dir: &Path) -> i64 {
    let l = logs(dir);
    let (&base, path) = l.last_key_value().unwrap();
    let bytes = std::fs::read(path).unwrap();
    scan_frames(&bytes, 0)
        .filter_map(|f| f.ok())
        .last()
        .map_or(base, |f| f.info.last_offset + 1)
}

/// Where the bucket is.
enum Bucket {
    S3(MotoServer),
    Local(PathBuf),
}

impl Bucket {
    fn url(&self) -> String {
        match self {
            Bucket::S3(server) => server.store_url("fanout"),
            Bucket::Local(dir) => dir.display().to_string(),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Bucket::S3(server) => server.env(),
            Bucket::Local(_) => Vec::new(),
        }
    }
}

struct Follower {
    mirror: PathBuf,
    catalog: PathBuf,
    dirs: Vec<PathBuf>,
    args: Vec<String>,
}

impl Follower {
    fn new(work: &Path, name: &str, topic: &str, url: &str) -> Follower {
        let mirror = work.join(format!("mirror-{name}"));
        std::fs::create_dir_all(&mirror).unwrap();
        let catalog = work.join(format!("catalog-{name}.sqlite"));
        let args = follow_args(url, &mirror, &catalog, "dr");
        let dirs = (0..PARTITIONS).map(|p| mirror.join(format!("{topic}-{p}"))).collect();
        Follower {
            mirror,
            catalog,
            dirs,
            args,
        }
    }
}

fn replicate(bucket: Bucket, stopped_for: Duration, topic: &str) {
    let started = Instant::now();
    let mut broker = KafkaBroker::start(BrokerConfig::new(&format!("e2e-store-{topic}"))).unwrap();
    let bootstrap = broker.bootstrap();
    let spec = TopicSpec::new(topic, PARTITIONS)
        .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
        .config("retention.ms", -1);
    admin(&bootstrap, &[spec], &[]).unwrap();
    let source_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| broker.partition_dir(topic, p)).collect();

    let work = tempfile::tempdir().unwrap();
    if let Bucket::Local(dir) = &bucket {
        std::fs::create_dir_all(dir).unwrap();
    }
    let (url, env) = (bucket.url(), bucket.env());
    let ship_args = [
        "ship",
        "--store",
        &url,
        "--log-dir",
        broker.log_dir().to_str().unwrap(),
        "--link",
        "dr",
        "--upto",
        "log-end",
    ];
    let mut shipper = Service::start_with_env("ship", ship_args, &env);
    let a = Follower::new(work.path(), "a", topic, &url);
    let b = Follower::new(work.path(), "b", topic, &url);
    let mut applier_a = Service::start_with_env("apply a", &a.args, &env);
    let mut applier_b = Service::start_with_env("apply b", &b.args, &env);

    let stop = Arc::new(AtomicBool::new(false));
    let rounds_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let producer = {
        let (stop, done, bootstrap, topic) = (stop.clone(), rounds_done.clone(), bootstrap.clone(), topic.to_string());
        std::thread::spawn(move || {
            let mut round = 0;
            while !stop.load(Ordering::SeqCst) {
                produce_round(&bootstrap, &topic, round);
                round += 1;
                done.store(round, Ordering::SeqCst);
            }
            round
        })
    };
    let wait_rounds = |n: usize| {
        let start = Instant::now();
        while rounds_done.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < PATIENCE, "the producer is stuck");
            std::thread::sleep(POLL);
        }
    };
    wait_rounds(ROUNDS_BEFORE_STOP);
    applier_b.assert_running();
    let (code, log) = applier_b.stop();
    assert_eq!(code, Some(0), "apply b on SIGTERM:\n{log}");
    let behind_at = rounds_done.load(Ordering::SeqCst);
    std::thread::sleep(stopped_for);
    let mut applier_b = Service::start_with_env("apply b (restarted)", &b.args, &env);
    wait_rounds(rounds_done.load(Ordering::SeqCst) + ROUNDS_AFTER_RESTART);
    stop.store(true, Ordering::SeqCst);
    let rounds = producer.join().unwrap();
    assert!(rounds > behind_at, "the producers ran on while apply b was stopped");

    let mut settle = Settle::new(SETTLED_FOR, PATIENCE);
    loop {
        shipper.assert_running();
        applier_a.assert_running();
        applier_b.assert_running();
        let src = dir_state(&source_dirs);
        let (ma, mb) = (dir_state(&a.dirs), dir_state(&b.dirs));
        match settle.observe(src == ma && src == mb, src.clone()) {
            Settling::Settled => break,
            Settling::Waiting => {}
            Settling::TimedOut => panic!(
                "never caught up: source {src:?}, a {ma:?}, b {mb:?}\n--- ship ---\n{}\n--- apply a ---\n{}\n--- apply \
                 b ---\n{}",
                shipper.log(),
                applier_a.log(),
                applier_b.log()
            ),
        }
        std::thread::sleep(POLL);
    }
    let caught_up = started.elapsed();
    for service in [shipper, applier_a, applier_b] {
        let name = service.name().to_string();
        let (code, log) = service.stop();
        assert_eq!(code, Some(0), "{name} on SIGTERM:\n{log}");
    }

    // Fan-out: the two mirrors are byte-identical (the lock file aside), whatever order their versions came in.
    let content = |rel: &Path| !rel.to_string_lossy().starts_with('.');
    let files = assert_same_files(&a.mirror, &b.mirror, content).unwrap();
    assert!(files > 0);
    // Equal to the source: every `.log`, and every sealed segment's companions as the broker wrote them.
    for (m, s) in a.dirs.iter().zip(&source_dirs) {
        let source_logs = logs(s);
        assert!(source_logs.len() >= 3, "{}: too few rolls to test seals", s.display());
        let active = *source_logs.keys().next_back().unwrap();
        for (base, path) in &source_logs {
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            let mut kinds = vec!["log"];
            if *base != active {
                kinds.extend(["index", "timeindex", "txnindex"]);
            }
            for kind in kinds {
                let name = format!("{stem}.{kind}");
                let source = s.join(&name);
                if kind == "txnindex" && !source.exists() {
                    assert!(!m.join(&name).exists(), "{name}: a txnindex the source does not have");
                    continue;
                }
                let (x, y) = (std::fs::read(&source).unwrap(), std::fs::read(m.join(&name)).unwrap());
                assert!(x == y, "{}: {name} differs from the source's", m.display());
            }
        }
    }
    let verify = segmirror_verify(&a.dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(), &["--strict"]).unwrap();
    assert_eq!(verify.code, 0, "{verify}");

    let leos: Vec<i64> = source_dirs.iter().map(|d| log_end(d)).collect();
    let uncommitted = consume_all(&bootstrap, topic, None, Isolation::ReadUncommitted).unwrap();
    let committed = consume_all(&bootstrap, topic, None, Isolation::ReadCommitted).unwrap();
    assert!(committed.len() < uncommitted.len(), "no aborted records on the source");
    broker.stop().unwrap();
    eprintln!(
        "{topic}: {rounds} producer rounds, apply b stopped for {stopped_for:?}, caught up after {caught_up:?}, log \
         ends {leos:?}, {files} mirror files identical"
    );

    // Promote mirror b (the one that was stopped) into a stopped target.
    let mut target = KafkaBroker::start(BrokerConfig::new(&format!("e2e-store-target-{topic}"))).unwrap();
    let spec = TopicSpec::new(topic, PARTITIONS).config("retention.ms", -1);
    admin(&target.bootstrap(), &[spec], &[]).unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(&b.mirror, target.log_dir(), &b.catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    for p in report["partitions"].as_array().unwrap() {
        let partition = p["partition"].as_i64().unwrap() as usize;
        assert_eq!(p["log_end_offset"].as_i64(), Some(leos[partition]), "{p}");
    }
    let dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| target.partition_dir(topic, p)).collect();
    let verify = segmirror_verify(
        &dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    target.restart().unwrap();
    let tb = target.bootstrap();
    let t_uncommitted = consume_all(&tb, topic, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        record_identities(&t_uncommitted),
        record_identities(&uncommitted),
        "read_uncommitted on the target"
    );
    let t_committed = consume_all(&tb, topic, None, Isolation::ReadCommitted).unwrap();
    assert_eq!(
        record_identities(&t_committed),
        record_identities(&committed),
        "read_committed on the target"
    );
    target.stop().unwrap();
}

#[test]
fn through_a_local_folder_two_followers_one_stopped_and_restarted_promote_exactly_once() {
    let bucket = tempfile::tempdir().unwrap();
    replicate(
        Bucket::Local(bucket.path().join("bucket")),
        LOCAL_STOPPED_FOR,
        "store-local",
    );
}

#[test]
fn through_s3_two_followers_one_stopped_for_a_minute_promote_exactly_once() {
    let server = MotoServer::start().unwrap();
    replicate(Bucket::S3(server), S3_STOPPED_FOR, "store-s3");
}
