//! The target side of a failover against real brokers: `segmirror topics` creates and checks the source's topics
//! on the target cluster, and `segmirror offsets commit` commits the source groups' offsets there, so each group
//! resumes exactly where it stopped.
//!
//! One source broker and one target broker (Kafka 4.4) serve every case (a leaner run on Kafka 3.9, librdkafka
//! groups only, follows at the end):
//! 1. **Topics.** `orders` (2 partitions; `retention.ms`, `cleanup.policy`, `max.message.bytes`) and `ledger`
//!    (compacted, `min.compaction.lag.ms`) are read from the source broker's metadata log on disk; `topics plan`
//!    lists them as to create, `topics create` creates them, and Kafka's own `TopicCommand --describe` on the
//!    target shows the source's partition counts and configs. A config changed on the target, and a partition
//!    count that differs (a `--from` JSON file), are reported by `topics check` with exit 2 (0 with
//!    `--allow-differences`).
//! 2. **Offsets.** On the source, groups consume part of `orders` and commit: a classic and a KIP-848 group of the
//!    Java console consumer, a classic and a KIP-848 group of librdkafka. The topic is seeded and applied into a
//!    mirror while the source runs; then 10 more records reach `orders-0` and a group (`ahead`) commits past what
//!    was shipped. The mirror is promoted into the stopped target broker, which is started; `offsets commit
//!    --dry-run` commits nothing, `offsets commit` commits every group (the `ahead` one clamped to the installed log
//!    end, and said so), the read-back shows no leader epoch, and each group resumes on the target at exactly its
//!    committed offset: the records it reads are, record by record, the source's from there to the installed end
//!    (none twice, none skipped). The clamped group reads exactly the records the target gets next. Groups with an
//!    active member on the target (classic and KIP-848) are refused and reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use segmirror_tests::clients::{
    python_group_commit, python_group_member, python_group_resume, GroupProtocol, ResumedRecord,
};
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::segmirror_cli::{run_segmirror, CliRun};
use segmirror_tests::*;

const ORDERS: &str = "orders";
const LEDGER: &str = "ledger";
const PER_PARTITION: usize = 40;

/// The source's explicit configs of each topic.
fn orders_configs() -> [(&'static str, &'static str); 3] {
    [
        ("retention.ms", "604800123"),
        ("cleanup.policy", "delete"),
        ("max.message.bytes", "2000000"),
    ]
}
fn ledger_configs() -> [(&'static str, &'static str); 2] {
    [("cleanup.policy", "compact"), ("min.compaction.lag.ms", "1000")]
}

fn produce(bootstrap: &str, topic: &str, partitions: &[i32], from: usize, count: usize) {
    let records: Vec<OutRecord> = partitions
        .iter()
        .flat_map(|&p| {
            (from..from + count).map(move |i| OutRecord {
                partition: Some(p),
                key: Some(format!("k{p}-{i}").into_bytes()),
                value: Some(format!("{topic}-{p}-{i}").into_bytes()),
                headers: vec![],
                timestamp: None,
            })
        })
        .collect();
    python_produce(bootstrap, &ProducePlan::new(topic).step(ProduceStep::Send(records))).unwrap();
}

fn segmirror(args: &[&str]) -> CliRun {
    let run = run_segmirror(args).unwrap();
    eprintln!("$ segmirror {}\n{}{}", args.join(" "), run.stdout, run.stderr);
    run
}

fn topics(action: &str, bootstrap: &str, source: &[&str], extra: &[&str]) -> CliRun {
    let mut args = vec!["topics", action, "--bootstrap", bootstrap];
    args.extend_from_slice(source);
    args.extend_from_slice(extra);
    segmirror(&args)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `seed` the source log dir into a local folder store and `apply` it into a mirror: (mirror, catalog).
fn seed_and_apply(source_log_dir: &Path, work: &Path) -> (PathBuf, PathBuf) {
    let (store, mirror, catalog) = (work.join("store"), work.join("mirror"), work.join("catalog.sqlite"));
    std::fs::create_dir(&store).unwrap();
    let seed = segmirror(&[
        "seed",
        "--log-dir",
        &path(source_log_dir),
        "--store",
        &path(&store),
        "--link",
        "failover",
    ]);
    assert_eq!(seed.code, 0, "{seed}");
    let apply = segmirror(&[
        "apply",
        "--store",
        &path(&store),
        "--mirror",
        &path(&mirror),
        "--catalog",
        &path(&catalog),
        "--link",
        "failover",
    ]);
    assert_eq!(apply.code, 0, "{apply}");
    (mirror, catalog)
}

/// Stop `target`, promote the mirror into it, start it again: each partition's installed log end.
fn promote(target: &mut KafkaBroker, mirror: &Path, catalog: &Path) -> BTreeMap<(String, i32), i64> {
    target.stop().unwrap();
    let promote = segmirror_promote(mirror, target.log_dir(), catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let mut installed = BTreeMap::new();
    for p in promote.json().unwrap()["partitions"].as_array().unwrap() {
        installed.insert(
            (
                p["topic"].as_str().unwrap().to_string(),
                p["partition"].as_i64().unwrap() as i32,
            ),
            p["log_end_offset"].as_i64().unwrap(),
        );
    }
    target.restart().unwrap();
    installed
}

#[test]
fn kafka_4_4_topics_and_group_offsets_fail_over_to_the_target() {
    let mut source = KafkaBroker::start(BrokerConfig::new("failover-source")).unwrap();
    let source_bootstrap = source.bootstrap();
    let tools = source.tools();
    admin(
        &source_bootstrap,
        &[
            orders_configs()
                .iter()
                .fold(TopicSpec::new(ORDERS, 2), |s, (k, v)| s.config(k, v)),
            ledger_configs()
                .iter()
                .fold(TopicSpec::new(LEDGER, 1), |s, (k, v)| s.config(k, v)),
        ],
        &[],
    )
    .unwrap();
    produce(&source_bootstrap, ORDERS, &[0, 1], 0, PER_PARTITION);
    produce(&source_bootstrap, LEDGER, &[0], 0, 10);

    // Groups consume part of `orders` and commit.
    tools.console_consume_group(ORDERS, "java-classic", 30, &[]).unwrap();
    tools
        .console_consume_group(ORDERS, "java-848", 50, &[("group.protocol", "consumer")])
        .unwrap();
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "py-classic",
        GroupProtocol::Classic,
        &[(0, 20), (1, 15)],
    )
    .unwrap();
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "py-848",
        GroupProtocol::Consumer,
        &[(0, 10), (1, 33)],
    )
    .unwrap();
    for busy in ["busy-classic", "busy-848"] {
        python_group_commit(
            &source_bootstrap,
            ORDERS,
            busy,
            GroupProtocol::Classic,
            &[(0, 5), (1, 5)],
        )
        .unwrap();
    }

    // Seed and apply while the source runs (a local folder as the store).
    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = seed_and_apply(source.log_dir(), work.path());
    // After the last shipment: more records, and a group that read them all.
    produce(&source_bootstrap, ORDERS, &[0], PER_PARTITION, 10);
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "ahead",
        GroupProtocol::Classic,
        &[(0, 50), (1, 12)],
    )
    .unwrap();
    let committed = tools.describe_group_offsets().unwrap();
    let source_records = consume_all(&source_bootstrap, ORDERS, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(committed[&("ahead".into(), ORDERS.into(), 0)], 50);
    source.stop().unwrap();
    let source_log_dir = path(source.log_dir());
    let from_metadata = ["--source-metadata-log", source_log_dir.as_str()];

    // 1. Topics.
    let mut target = KafkaBroker::start(BrokerConfig::new("failover-target")).unwrap();
    let target_bootstrap = target.bootstrap();
    let target_tools = target.tools();
    let plan = topics("plan", &target_bootstrap, &from_metadata, &["--json"]);
    assert_eq!(plan.code, 0, "{plan}");
    let verdicts = |run: &CliRun| -> BTreeMap<String, String> {
        run.json().unwrap()["topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["topic"].as_str().unwrap().to_string(),
                    t["verdict"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        verdicts(&plan),
        [
            (LEDGER.to_string(), "missing".to_string()),
            (ORDERS.to_string(), "missing".to_string())
        ]
        .into()
    );
    let check = topics("check", &target_bootstrap, &from_metadata, &[]);
    assert_eq!(check.code, 2, "check: missing topics are a mismatch\n{check}");
    let create = topics("create", &target_bootstrap, &from_metadata, &["--json"]);
    assert_eq!(create.code, 0, "{create}");
    assert_eq!(
        verdicts(&create),
        [
            (LEDGER.to_string(), "created".to_string()),
            (ORDERS.to_string(), "created".to_string())
        ]
        .into()
    );
    // Kafka's own view of the target topics.
    for (topic, partitions, configs) in [
        (ORDERS, 2, orders_configs().to_vec()),
        (LEDGER, 1, ledger_configs().to_vec()),
    ] {
        let described = target_tools.describe_topic(topic).unwrap();
        assert_eq!(described.partitions, partitions, "{topic}: {described:?}");
        for (k, v) in configs {
            assert_eq!(
                described.configs.get(k).map(String::as_str),
                Some(v),
                "{topic} {k}: {described:?}"
            );
        }
    }
    let check = topics("check", &target_bootstrap, &from_metadata, &[]);
    assert_eq!(check.code, 0, "{check}");
    let again = topics("create", &target_bootstrap, &from_metadata, &["--json"]);
    assert_eq!(again.code, 0, "{again}");
    assert!(verdicts(&again).values().all(|v| v == "matches"), "{again}");

    // A config changed on the target, and one set on the target only: both reported.
    target_tools
        .alter_topic_config(ORDERS, &[("max.message.bytes", "3000000"), ("segment.jitter.ms", "7")])
        .unwrap();
    let check = topics("check", &target_bootstrap, &from_metadata, &["--json"]);
    assert_eq!(check.code, 2, "{check}");
    let report = check.json().unwrap();
    let orders = report["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == ORDERS)
        .unwrap();
    assert_eq!(orders["verdict"], "differs");
    let differences: Vec<(String, Option<String>, Option<String>)> = orders["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["field"].as_str().unwrap().to_string(),
                d["source"].as_str().map(String::from),
                d["target"].as_str().map(String::from),
            )
        })
        .collect();
    assert_eq!(
        differences,
        [
            (
                "max.message.bytes".into(),
                Some("2000000".into()),
                Some("3000000".into())
            ),
            ("segment.jitter.ms".into(), None, Some("7".into())),
        ]
    );
    let table = topics("check", &target_bootstrap, &from_metadata, &[]);
    assert_eq!(table.code, 2);
    assert!(
        table
            .stdout
            .contains("orders max.message.bytes: source 2000000, target 3000000"),
        "{table}"
    );
    let allowed = topics("check", &target_bootstrap, &from_metadata, &["--allow-differences"]);
    assert_eq!(allowed.code, 0, "{allowed}");
    // A partition count that differs, from a JSON file; --topics selects.
    let file = work.path().join("source.json");
    std::fs::write(
        &file,
        serde_json::json!({"topics": [
            {"name": ORDERS, "partitions": 3, "configs": {"cleanup.policy": "delete"}},
            {"name": "fresh", "partitions": 1}
        ]})
        .to_string(),
    )
    .unwrap();
    let from_file = ["--from", file.to_str().unwrap()];
    let check = topics("check", &target_bootstrap, &from_file, &["--topics", ORDERS]);
    assert_eq!(check.code, 2, "{check}");
    assert!(
        check.stdout.contains("orders partitions: source 3, target 2"),
        "{check}"
    );
    assert!(!check.stdout.contains("fresh"), "--topics selects: {check}");
    let plan = topics("plan", &target_bootstrap, &from_file, &["--topics", "fresh"]);
    assert_eq!(plan.code, 0, "{plan}");
    assert!(plan.stdout.contains("to create"), "{plan}");

    // 2. Offsets: promote the mirror into the stopped target, start it, commit.
    let installed = promote(&mut target, &mirror, &catalog);
    let orders_end = |p: i32| installed[&(ORDERS.to_string(), p)];
    assert!(orders_end(0) < 50, "the extra records were not shipped: {installed:?}");
    let target_bootstrap = target.bootstrap();
    let target_tools = target.tools();
    let target_log_dir = path(target.log_dir());
    let commit = |extra: &[&str]| {
        let mut args = vec![
            "offsets",
            "commit",
            "--bootstrap",
            &target_bootstrap,
            "--log-dir",
            &source_log_dir,
            "--installed",
            &target_log_dir,
            "--topics",
            ORDERS,
        ];
        args.extend_from_slice(extra);
        segmirror(&args)
    };
    let dry = commit(&["--dry-run", "--json"]);
    assert_eq!(dry.code, 0, "{dry}");
    assert!(
        dry.json().unwrap()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["outcome"] == "planned"),
        "{dry}"
    );
    assert!(
        target_tools.describe_group_offsets().unwrap().is_empty(),
        "a dry run commits nothing"
    );

    let run = commit(&[]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains(&format!(
            "group ahead orders-0: clamped: 50 is beyond the installed log end {}",
            orders_end(0)
        )),
        "{run}"
    );
    let json = commit(&["--json", "--groups", "ahead"]).json().unwrap();
    let ahead = &json["groups"][0];
    assert_eq!(ahead["outcome"], "committed", "{json}");
    let clamped: Vec<(i64, i64, i64)> = ahead["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["clamped"] == true)
        .map(|o| {
            (
                o["partition"].as_i64().unwrap(),
                o["wanted"].as_i64().unwrap(),
                o["commit"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(clamped, [(0, 50, orders_end(0))]);

    // The target holds each source offset, clamped to the installed end; no leader epoch.
    let expected: BTreeMap<(String, String, i32), i64> = committed
        .iter()
        .filter(|((_, t, _), _)| t == ORDERS)
        .map(|((g, t, p), o)| ((g.clone(), t.clone(), *p), (*o).min(orders_end(*p))))
        .collect();
    assert_eq!(target_tools.describe_group_offsets().unwrap(), expected);

    // Active members on the target: refused, reported, nothing forced.
    let members: Vec<std::process::Child> = [
        ("busy-classic", GroupProtocol::Classic),
        ("busy-848", GroupProtocol::Consumer),
    ]
    .into_iter()
    .map(|(g, protocol)| {
        python_group_member(&target_bootstrap, ORDERS, 2, g, protocol, Duration::from_secs(90)).unwrap()
    })
    .collect();
    let refused = commit(&["--groups", "busy-.*", "--json"]);
    for mut m in members {
        let _ = m.kill();
        let _ = m.wait();
    }
    assert_eq!(refused.code, 2, "{refused}");
    let groups = refused.json().unwrap();
    for g in groups["groups"].as_array().unwrap() {
        assert_eq!(g["outcome"], "refused", "{g}");
        assert_eq!(g["target_members"], 1, "{g}");
    }
    let kinds: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["consumer", "classic"], "busy-848 then busy-classic");

    // Each group resumes on the target exactly at its committed offset: record by record, the source's records
    // from there to the installed end.
    let expected_from = |group: &str| -> Vec<ResumedRecord> {
        source_records
            .iter()
            .filter(|r| {
                let c = expected[&(group.to_string(), ORDERS.to_string(), r.partition)];
                r.offset >= c && r.offset < orders_end(r.partition)
            })
            .map(|r| (r.partition, r.offset, r.value.clone()))
            .collect()
    };
    let sorted = |mut v: Vec<ResumedRecord>| {
        v.sort();
        v
    };
    for (group, protocol) in [
        ("py-classic", GroupProtocol::Classic),
        ("py-848", GroupProtocol::Consumer),
    ] {
        let read = python_group_resume(&target_bootstrap, ORDERS, 2, group, protocol).unwrap();
        let want = expected_from(group);
        assert_eq!(read.len(), want.len(), "{group}: no record twice, none skipped");
        assert_eq!(sorted(read), want, "{group}");
    }
    for (group, properties) in [
        ("java-classic", vec![]),
        ("java-848", vec![("group.protocol", "consumer")]),
    ] {
        let want = expected_from(group);
        let read: Vec<ResumedRecord> = target_tools
            .console_resume_group(ORDERS, group, want.len(), &properties)
            .unwrap()
            .into_iter()
            .map(|r| (r.partition, r.offset, Some(r.record.value.into_bytes())))
            .collect();
        assert_eq!(read.len(), want.len(), "{group}: no record twice, none skipped");
        assert_eq!(sorted(read), want, "{group}");
    }
    // The clamped group reads exactly what the target gets next.
    produce(&target_bootstrap, ORDERS, &[0], 1000, 5);
    let read = sorted(python_group_resume(&target_bootstrap, ORDERS, 2, "ahead", GroupProtocol::Classic).unwrap());
    let new_on_target: Vec<ResumedRecord> = (0..5)
        .map(|i| {
            (
                0,
                orders_end(0) + i,
                Some(format!("{ORDERS}-0-{}", 1000 + i).into_bytes()),
            )
        })
        .collect();
    let mut want = expected_from("ahead");
    want.extend(new_on_target);
    assert_eq!(read, sorted(want), "ahead");
    target.stop().unwrap();
}

/// Kafka 3.9 (its classic group coordinator, its metadata log and admin API versions), source and target, with
/// librdkafka groups only (no JVM tool runs: cheap): topics created from the 3.9 metadata log match, a group
/// resumes on the target at exactly its committed offset, and a group ahead of the installed data is clamped.
#[test]
fn kafka_3_9_topics_and_group_offsets_fail_over_to_the_target() {
    let version = segmirror_tests::install::compat_kafka_versions()
        .into_iter()
        .find(|v| v.starts_with("3."))
        .expect("tests/kafka/kafka-compat.versions lists a Kafka 3.x version");
    let config = |name: &str| BrokerConfig::new(name).kafka_version(version);
    let mut source = KafkaBroker::start(config("failover-source-3")).unwrap();
    let source_bootstrap = source.bootstrap();
    let spec = orders_configs()
        .iter()
        .fold(TopicSpec::new(ORDERS, 2), |s, (k, v)| s.config(k, v));
    admin(&source_bootstrap, &[spec], &[]).unwrap();
    produce(&source_bootstrap, ORDERS, &[0, 1], 0, 20);
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "py-classic",
        GroupProtocol::Classic,
        &[(0, 8), (1, 12)],
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let (mirror, catalog) = seed_and_apply(source.log_dir(), work.path());
    produce(&source_bootstrap, ORDERS, &[0], 20, 5);
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "ahead",
        GroupProtocol::Classic,
        &[(0, 25), (1, 3)],
    )
    .unwrap();
    let source_records = consume_all(&source_bootstrap, ORDERS, None, Isolation::ReadUncommitted).unwrap();
    source.stop().unwrap();
    let source_log_dir = path(source.log_dir());
    let from_metadata = ["--source-metadata-log", source_log_dir.as_str()];

    let mut target = KafkaBroker::start(config("failover-target-3")).unwrap();
    let create = topics("create", &target.bootstrap(), &from_metadata, &[]);
    assert_eq!(create.code, 0, "{create}");
    assert!(create.stdout.contains("created"), "{create}");
    let check = topics("check", &target.bootstrap(), &from_metadata, &[]);
    assert_eq!(check.code, 0, "{check}");
    let installed = promote(&mut target, &mirror, &catalog);
    let end = |p: i32| installed[&(ORDERS.to_string(), p)];
    assert_eq!((end(0), end(1)), (20, 20), "{installed:?}");
    let bootstrap = target.bootstrap();
    let run = segmirror(&[
        "offsets",
        "commit",
        "--bootstrap",
        &bootstrap,
        "--log-dir",
        &source_log_dir,
        "--installed",
        &path(target.log_dir()),
    ]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout
            .contains("group ahead orders-0: clamped: 25 is beyond the installed log end 20"),
        "{run}"
    );
    for (group, committed) in [("py-classic", [8, 12]), ("ahead", [20, 3])] {
        let read = python_group_resume(&bootstrap, ORDERS, 2, group, GroupProtocol::Classic).unwrap();
        let mut want: Vec<ResumedRecord> = source_records
            .iter()
            .filter(|r| r.offset >= committed[r.partition as usize] && r.offset < end(r.partition))
            .map(|r| (r.partition, r.offset, r.value.clone()))
            .collect();
        want.sort();
        let mut got = read.clone();
        got.sort();
        assert_eq!(read.len(), want.len(), "{group}: no record twice, none skipped");
        assert_eq!(got, want, "{group}");
    }
    target.stop().unwrap();
}
