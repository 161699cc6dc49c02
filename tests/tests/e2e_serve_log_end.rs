//! `segmirror serve` over a mirror that `ship --upto log-end` fills: records above the source's high watermark reach
//! the mirror, and no reader of serve sees them until the source commits them, as no consumer of the source does.
//!
//! A 3-broker KRaft cluster; the topic's one partition is replicated on A=1 and B=2, with `min.insync.replicas` 1.
//! Failure detection is slowed down (`broker.session.timeout.ms` and `replica.lag.time.max.ms` 120 s) so that a
//! follower that stops fetching stays in the ISR, holding the high watermark back, as a slow follower does.
//!
//! 1. `P` records with `acks=all`: committed, on both replicas; ship (`--upto log-end`, `--source-bootstrap` A) →
//!    apply --listen → serve: both isolation levels read the P records, as the source serves them.
//! 2. B is frozen (SIGSTOP); `X` records with `acks=1` reach A (its log end moves, its high watermark stays at P:
//!    B is still in the ISR) and the mirror, byte for byte. The source serves its consumers the P records only, at
//!    both isolation levels; so does serve: it stops at the high watermark the shipper reported, so a leader change
//!    that truncated X (a clean election of B) could never take back a record a reader of serve was shown.
//! 3. B thaws and catches up; the high watermark moves to P+X, and serve's readers get X.

use std::path::Path;
use std::time::{Duration, Instant};

use segmirror_tests::service::Service;
use segmirror_tests::unclean::{create_topic_on, wait_partition};
use segmirror_tests::*;

const TOPIC: &str = "log-end";
const LINK: &str = "fast";
const A: i32 = 1;
const B: i32 = 2;
const P: usize = 30;
const X: usize = 20;
/// Failure guard for anything waited for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(200);

fn send(bootstrap: &str, tag: &str, n: usize, acks: &str) -> Vec<Record> {
    let records = (0..n)
        .map(|i| OutRecord {
            partition: Some(0),
            key: Some(format!("{tag}-{i}").into_bytes()),
            value: Some(format!("{tag}-value-{i}").into_bytes()),
            ..OutRecord::default()
        })
        .collect();
    let plan = ProducePlan::new(TOPIC)
        .config("acks", acks)
        .config("enable.idempotence", "false")
        .config("linger.ms", 1)
        .config("batch.size", 1024)
        .step(ProduceStep::Send(records));
    python_produce(bootstrap, &plan).unwrap()
}

fn keys(records: &[Record]) -> Vec<(i64, String)> {
    let mut keys: Vec<(i64, String)> = records
        .iter()
        .map(|r| {
            (
                r.offset,
                String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned(),
            )
        })
        .collect();
    keys.sort();
    keys
}

/// What `bootstrap` serves of the topic at `isolation`, as (offset, key).
fn read(bootstrap: &str, isolation: Isolation) -> Vec<(i64, String)> {
    keys(&kcat_consume(bootstrap, TOPIC, isolation).unwrap())
}

/// Waits until serve's answer at `isolation` has `n` records; returns them.
fn wait_served(endpoint: &str, isolation: Isolation, n: usize, services: &mut [&mut Service]) -> Vec<(i64, String)> {
    let start = Instant::now();
    loop {
        let got = read(endpoint, isolation);
        if got.len() >= n {
            return got;
        }
        for s in services.iter_mut() {
            s.assert_running();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "serve's {} answer has {} of {n} records:\n{}",
            isolation.as_str(),
            got.len(),
            services.iter().map(|s| s.log()).collect::<Vec<_>>().join("\n---\n")
        );
        std::thread::sleep(POLL);
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

#[test]
fn no_reader_sees_what_a_log_end_shipper_shipped_above_the_high_watermark() {
    let slow_follower = 120_000;
    let mut cluster = KafkaCluster::start(
        ClusterConfig::new("log-end")
            .property("broker.session.timeout.ms", slow_follower)
            .property("replica.lag.time.max.ms", slow_follower),
    )
    .unwrap();
    create_topic_on(
        &mut cluster,
        TOPIC,
        &[vec![A, B]],
        &[("min.insync.replicas", "1".to_string())],
    )
    .unwrap();
    wait_partition(&mut cluster, TOPIC, 0, "led by A with B in sync", |s| {
        s.leader == A && s.isr.contains(&B)
    })
    .unwrap();
    let a = cluster.node(A).unwrap();
    let (a_bootstrap, a_log_dir) = (a.bootstrap(), a.log_dir().to_path_buf());

    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = (work.path().join("mirror"), work.path().join("catalog.sqlite"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let mut apply = Service::start(
        "apply --listen",
        [
            "apply",
            "--mirror",
            &s(&mirror),
            "--catalog",
            &s(&catalog),
            "--link",
            LINK,
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
        ],
    )
    .patience(PATIENCE);
    let addr = apply.wait_for("listening on ").trim().to_string();
    let mut ship = Service::start(
        "ship",
        [
            "ship",
            "--log-dir",
            &s(&a_log_dir),
            "--topics",
            TOPIC,
            "--link",
            LINK,
            "--upto",
            "log-end",
            "--source-bootstrap",
            &a_bootstrap,
            "--connect",
            &addr,
            "--plaintext",
        ],
    )
    .patience(PATIENCE);

    // 1. Committed records: both isolation levels read them on serve as on the source.
    let p = send(&a_bootstrap, "p", P, "all");
    assert_eq!(p.last().map(|r| r.offset), Some(P as i64 - 1));
    let start = Instant::now();
    while !mirror.join(format!("{TOPIC}-0")).exists() {
        ship.assert_running();
        apply.assert_running();
        assert!(
            start.elapsed() < PATIENCE,
            "no mirror partition:\n{}\n{}",
            ship.log(),
            apply.log()
        );
        std::thread::sleep(POLL);
    }
    let mut serve = Service::start(
        "serve",
        [
            "serve",
            "--mirror",
            &s(&mirror),
            "--catalog",
            &s(&catalog),
            "--link",
            LINK,
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
        ],
    )
    .patience(PATIENCE);
    let endpoint = serve
        .wait_for(&format!("segmirror serve: link {LINK} on "))
        .trim()
        .to_string();
    let committed_p = read(&a_bootstrap, Isolation::ReadCommitted);
    assert_eq!(committed_p.len(), P);
    for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        let got = wait_served(&endpoint, isolation, P, &mut [&mut ship, &mut apply, &mut serve]);
        assert_eq!(got, committed_p, "serve at {}", isolation.as_str());
    }

    // 2. B frozen: X reaches A's log and the mirror, above the high watermark.
    let b_pid = cluster.node(B).unwrap().pid().expect("B runs");
    signal(b_pid, "-STOP");
    let x = send(&a_bootstrap, "x", X, "1");
    assert_eq!(x.first().map(|r| r.offset), Some(P as i64));
    let a_log = a_log_dir.join(format!("{TOPIC}-0")).join("00000000000000000000.log");
    let mirror_log = mirror.join(format!("{TOPIC}-0")).join("00000000000000000000.log");
    let start = Instant::now();
    while std::fs::read(&mirror_log).ok() != std::fs::read(&a_log).ok() {
        ship.assert_running();
        apply.assert_running();
        assert!(
            start.elapsed() < PATIENCE,
            "the mirror never got X:\n{}\n{}",
            ship.log(),
            apply.log()
        );
        std::thread::sleep(POLL);
    }
    for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        assert_eq!(
            read(&a_bootstrap, isolation),
            committed_p,
            "the source serves P while B holds its high watermark back"
        );
    }
    // A few progress reports later (one a second), serve still answers what the source answers.
    std::thread::sleep(Duration::from_secs(3));
    for _ in 0..3 {
        for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
            assert_eq!(
                read(&endpoint, isolation),
                committed_p,
                "serve shows no record above the source's high watermark ({})",
                isolation.as_str()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let state = cluster.partition(TOPIC, 0).unwrap();
    assert!(state.isr.contains(&B), "B stayed in the ISR: {state:?}");

    // 3. B thaws and catches up: X is committed, and serve's readers get it.
    signal(b_pid, "-CONT");
    let start = Instant::now();
    while read(&a_bootstrap, Isolation::ReadCommitted).len() < P + X {
        assert!(start.elapsed() < PATIENCE, "A's high watermark never reached P+X");
        std::thread::sleep(POLL);
    }
    let all = read(&a_bootstrap, Isolation::ReadCommitted);
    for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        let got = wait_served(&endpoint, isolation, P + X, &mut [&mut ship, &mut apply, &mut serve]);
        assert_eq!(got, all, "serve at {}", isolation.as_str());
    }
    for service in [serve, ship, apply] {
        let (code, log) = service.stop();
        assert_eq!(code, Some(0), "{log}");
    }
}
