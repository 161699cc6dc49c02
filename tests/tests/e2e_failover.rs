//! `segmirror failover` end to end, on one Kafka 4.4 source broker and one target broker: a link
//! replicates continuously through a bucket (`ship --store` with `--metadata-log-dir`/`--groups`, `apply --follow`);
//! a Java console group and a librdkafka group consume part of `orders` on the source and commit; more records
//! arrive; then `segmirror failover --link dr --drain` runs with hooks that stop and start the target broker (the
//! test process owns the broker: a hook signals through files and the test stops or starts it).
//!
//! - **Crash and resume:** the first failover is SIGKILLed while it drains (step `cut` started, not finished);
//!   `--status` shows that; the rerun redoes `cut` (attempt 2) and finishes; a third run finds every step done
//!   and changes nothing.
//! - **End state:** the target topic has the source's partition count and configs; both groups resume on the
//!   target at exactly their committed offsets (record by record, none twice, none skipped) up to the source's
//!   end (drained: nothing left behind); a new producer appends on the target after the mirrored records.
//! - **Figures:** the test prints the RPO the failover reported and the RTO (from the start of the failover run
//!   that finished to the librdkafka group's records read on the target).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use segmirror_catalog::Catalog;
use segmirror_tests::clients::{python_group_commit, python_group_resume, GroupProtocol, ResumedRecord};
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::service::Service;
use segmirror_tests::*;

const ORDERS: &str = "orders";
const LINK: &str = "dr";
const PATIENCE: Duration = Duration::from_secs(90);

fn orders_configs() -> [(&'static str, &'static str); 3] {
    [
        ("retention.ms", "604800123"),
        ("cleanup.policy", "delete"),
        ("max.message.bytes", "2000000"),
    ]
}

fn produce(bootstrap: &str, partitions: &[i32], from: usize, count: usize, tag: &str) {
    let records: Vec<OutRecord> = partitions
        .iter()
        .flat_map(|&p| {
            (from..from + count).map(move |i| OutRecord {
                partition: Some(p),
                key: Some(format!("k{p}-{i}").into_bytes()),
                value: Some(format!("{tag}-{p}-{i}").into_bytes()),
                headers: vec![],
                timestamp: None,
            })
        })
        .collect();
    python_produce(bootstrap, &ProducePlan::new(ORDERS).step(ProduceStep::Send(records))).unwrap();
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The link's group offsets as the applier's catalog recorded them.
fn recorded_offsets(catalog: &Path) -> BTreeMap<(String, i32), i64> {
    let Ok(catalog) = Catalog::open(catalog) else {
        return BTreeMap::new();
    };
    catalog
        .link_offsets(LINK)
        .unwrap_or_default()
        .into_iter()
        .map(|o| ((o.group, o.partition), o.source_offset))
        .collect()
}

/// Serve the failover's hooks until it exits: a hook writes `<step>.requested` and waits for `<step>.done`; the
/// test stops or starts the target broker in between.
fn serve_hooks(failover: &mut Service, target: &mut KafkaBroker, signals: &Path) -> (Option<i32>, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = failover.exited() {
            std::thread::sleep(Duration::from_millis(100));
            return (status.code(), failover.log());
        }
        if signals.join("stop.requested").exists() && !signals.join("stop.done").exists() {
            target.stop().unwrap();
            std::fs::write(signals.join("stop.done"), b"").unwrap();
        }
        if signals.join("start.requested").exists() && !signals.join("start.done").exists() {
            target.restart().unwrap();
            std::fs::write(signals.join("start.done"), b"").unwrap();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the failover did not finish:\n{}",
            failover.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn failover_drains_installs_and_groups_resume_on_the_target_after_a_crash_and_rerun() {
    let source = KafkaBroker::start(BrokerConfig::new("failover-cmd-source")).unwrap();
    let source_bootstrap = source.bootstrap();
    let spec = orders_configs()
        .iter()
        .fold(TopicSpec::new(ORDERS, 2), |s, (k, v)| s.config(k, v));
    admin(&source_bootstrap, &[spec], &[]).unwrap();
    produce(&source_bootstrap, &[0, 1], 0, 40, "first");

    let work = tempfile::tempdir().unwrap();
    let (bucket, mirror, signals) = (
        work.path().join("bucket"),
        work.path().join("mirror"),
        work.path().join("signals"),
    );
    for dir in [&bucket, &mirror, &signals] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let catalog = work.path().join("catalog.sqlite");
    let log_dir = path(source.log_dir());
    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--store",
            &path(&bucket),
            "--log-dir",
            &log_dir,
            "--metadata-log-dir",
            &log_dir,
            "--link",
            LINK,
            "--upto",
            "log-end",
            "--topics",
            ORDERS,
            "--groups",
            "java-.*|py-.*",
            "--meta-interval-ms",
            "200",
            "--upload-interval-ms",
            "200",
        ],
    );
    let mut applier = Service::start(
        "apply",
        [
            "apply",
            "--store",
            &path(&bucket),
            "--mirror",
            &path(&mirror),
            "--catalog",
            &path(&catalog),
            "--link",
            LINK,
            "--follow",
            "--poll-interval-ms",
            "100",
        ],
    );
    let mut target = KafkaBroker::start(BrokerConfig::new("failover-cmd-target")).unwrap();
    let target_bootstrap = target.bootstrap();

    // Groups consume part of the topic on the source and commit: the Java console consumer (30 of the 80 records,
    // spread over both partitions as its fetches go) and librdkafka.
    let source_tools = source.tools();
    source_tools
        .console_consume_group(ORDERS, "java-classic", 30, &[])
        .unwrap();
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "py-classic",
        GroupProtocol::Classic,
        &[(0, 20), (1, 15)],
    )
    .unwrap();
    // The link keeps replicating: more records after the commits.
    produce(&source_bootstrap, &[0, 1], 40, 10, "second");
    let committed: BTreeMap<(String, String, i32), i64> = source_tools.describe_group_offsets().unwrap();
    let expected: BTreeMap<(String, i32), i64> = committed
        .iter()
        .filter(|((_, t, _), _)| t == ORDERS)
        .map(|((g, _, p), o)| ((g.clone(), *p), *o))
        .collect();
    assert_eq!(expected.len(), 4, "{committed:?}");
    let source_records = consume_all(&source_bootstrap, ORDERS, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(source_records.len(), 100);
    // The offsets reach the applier's catalog (what an operator checks with `segmirror offsets --link`).
    let start = Instant::now();
    while recorded_offsets(&catalog) != expected {
        shipper.assert_running();
        applier.assert_running();
        assert!(
            start.elapsed() < PATIENCE,
            "offsets never recorded: {:?}",
            recorded_offsets(&catalog)
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let hook = |step: &str| {
        let s = path(&signals);
        format!(
            "echo \"$SEGMIRROR_FAILOVER_STEP $SEGMIRROR_FAILOVER_LINK $SEGMIRROR_FAILOVER_LOG_DIRS\" > {s}/{step}.requested; \
             while [ ! -e {s}/{step}.done ]; do sleep 0.05; done"
        )
    };
    let target_log_dir = path(target.log_dir());
    let failover_args = |drain_quiet: &str| -> Vec<String> {
        [
            "failover",
            "--link",
            LINK,
            "--mirror",
            &path(&mirror),
            "--catalog",
            &path(&catalog),
            "--drain",
            "--drain-quiet",
            drain_quiet,
            "--bootstrap",
            &target_bootstrap,
            "--log-dir",
            &target_log_dir,
            "--stop-hook",
            &hook("stop"),
            "--start-hook",
            &hook("start"),
        ]
        .map(String::from)
        .to_vec()
    };
    let status = || {
        let run = run_segmirror([
            "failover",
            "--link",
            LINK,
            "--mirror",
            &path(&mirror),
            "--catalog",
            &path(&catalog),
            "--status",
        ])
        .unwrap();
        assert_eq!(run.code, 0, "{run}");
        run.stdout
    };

    // 1. A failover killed while it drains: `cut` started, not finished; nothing else started.
    let mut first = Service::start_with_stdout("failover", failover_args("60"));
    first.wait_for("[cut] draining");
    first.kill();
    let journal = status();
    assert!(journal.contains("state active"), "the link was not cut yet:\n{journal}");
    let line = |journal: &str, step: &str| -> String {
        journal
            .lines()
            .find(|l| l.starts_with(step))
            .unwrap_or_else(|| panic!("no {step} in\n{journal}"))
            .to_string()
    };
    assert!(line(&journal, "cut").contains("started, not finished"), "{journal}");
    assert!(line(&journal, "topics").contains("not started"), "{journal}");

    // 2. The rerun redoes `cut` and finishes; the figures of this run are the RTO.
    let rto_start = Instant::now();
    let mut rerun = Service::start_with_stdout("failover", failover_args("2")).patience(PATIENCE);
    let (code, log) = serve_hooks(&mut rerun, &mut target, &signals);
    println!("--- segmirror failover (rerun) ---\n{log}");
    assert_eq!(code, Some(0), "{log}");
    let failover_seconds = rto_start.elapsed().as_secs_f64();
    assert!(
        log.contains("[cut] interrupted earlier; redoing it (attempt 2)"),
        "{log}"
    );
    assert!(
        log.contains("RPO: 0 record offset(s), 0 byte(s) and 0 shipped version(s)"),
        "drained: {log}"
    );
    assert!(log.contains("2 partition(s) installed"), "{log}");
    assert_eq!(
        std::fs::read_to_string(signals.join("stop.requested")).unwrap().trim(),
        format!("stop-brokers {LINK} {target_log_dir}"),
        "the hook's environment"
    );
    // The applier stopped at the cut (the link is promoted); the shipper, on the source side, keeps running.
    let start = Instant::now();
    while applier.exited().is_none() {
        assert!(start.elapsed() < PATIENCE, "the applier still runs after the cut");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The librdkafka group resumes exactly at its committed offsets, through the source's end (nothing left behind).
    let expected_from = |group: &str| -> Vec<ResumedRecord> {
        let mut v: Vec<ResumedRecord> = source_records
            .iter()
            .filter(|r| r.offset >= expected[&(group.to_string(), r.partition)])
            .map(|r| (r.partition, r.offset, r.value.clone()))
            .collect();
        v.sort();
        v
    };
    let mut read = python_group_resume(&target_bootstrap, ORDERS, 2, "py-classic", GroupProtocol::Classic).unwrap();
    let rto = rto_start.elapsed().as_secs_f64();
    let rpo = log.lines().find(|l| l.contains("RPO:")).unwrap_or_default().to_string();
    println!(
        "FAILOVER FIGURES: {rpo}\nFAILOVER FIGURES: RTO {rto:.1} s from the failover's start to the librdkafka group's \
         records read on the target (the failover command itself: {failover_seconds:.1} s, including --drain-quiet 2 \
         s and the target broker's stop and start)"
    );
    assert_eq!(
        read.len(),
        expected_from("py-classic").len(),
        "no record twice, none skipped"
    );
    read.sort();
    assert_eq!(read, expected_from("py-classic"));
    let target_tools = target.tools();
    let want = expected_from("java-classic");
    let mut read: Vec<ResumedRecord> = target_tools
        .console_resume_group(ORDERS, "java-classic", want.len(), &[])
        .unwrap()
        .into_iter()
        .map(|r| (r.partition, r.offset, Some(r.record.value.into_bytes())))
        .collect();
    assert_eq!(read.len(), want.len(), "java-classic: no record twice, none skipped");
    read.sort();
    assert_eq!(read, want, "java-classic");

    // The target topic: the source's partition count and configs.
    let described = target_tools.describe_topic(ORDERS).unwrap();
    assert_eq!(described.partitions, 2, "{described:?}");
    for (k, v) in orders_configs() {
        assert_eq!(
            described.configs.get(k).map(String::as_str),
            Some(v),
            "{k}: {described:?}"
        );
    }
    // A new producer writes on the target, after the mirrored records.
    produce(&target_bootstrap, &[0], 1000, 3, "target");
    let on_target = consume_all(&target_bootstrap, ORDERS, Some(&[0]), Isolation::ReadUncommitted).unwrap();
    let tail: Vec<(i64, Vec<u8>)> = on_target
        .iter()
        .filter(|r| r.offset >= 50)
        .map(|r| (r.offset, r.value.clone().unwrap()))
        .collect();
    assert_eq!(
        tail,
        (0..3)
            .map(|i| (50 + i, format!("target-0-{}", 1000 + i).into_bytes()))
            .collect::<Vec<_>>()
    );

    // 3. A third run: every step done, nothing changes.
    let journal = status();
    assert!(journal.contains("state promoted"), "{journal}");
    for step in ["cut", "topics", "stop-brokers", "install", "start-brokers", "offsets"] {
        assert!(line(&journal, step).contains("done"), "{journal}");
    }
    assert!(
        line(&journal, "cut").split_whitespace().nth(2) == Some("2"),
        "two attempts of cut:\n{journal}"
    );
    let again = run_segmirror(failover_args("2")).unwrap();
    assert_eq!(again.code, 0, "{again}");
    assert_eq!(again.stdout.matches("done earlier").count(), 6, "{again}");

    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "shipper on SIGTERM:\n{log}");
    target.stop().unwrap();
}
