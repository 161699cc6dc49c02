//! `segmirror offsets` against real brokers: what it reads from a stopped broker's `__consumer_offsets` segments is
//! exactly what `kafka-consumer-groups --describe` said before the stop.
//!
//! On Kafka 3.9 (its classic group coordinator) and 4.4 (the new coordinator), with the groups an operator meets:
//! a classic group of the Java console consumer, a classic group of librdkafka, on 4.4 KIP-848 groups of both
//! clients (`group.protocol=consumer`), a transactional producer's sendOffsetsToTransaction committed once and
//! aborted once (control batches in `__consumer_offsets`), later commits replacing earlier ones, and a group deleted
//! with `kafka-consumer-groups --delete` (offset tombstones). `__consumer_offsets` has 3 partitions so groups land
//! in several. The CSV export is read back by Kafka's own `--reset-offsets --from-file`.

use std::collections::BTreeMap;

use segmirror_tests::clients::{python_group_commit, python_txn_offsets, GroupProtocol};
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::tools::CONSUMER_GROUP_COMMAND;
use segmirror_tests::*;

const TOPIC: &str = "orders";
const OTHER_TOPIC: &str = "audit";

type Offsets = BTreeMap<(String, String, i32), i64>;

fn parse_csv(out: &str) -> Offsets {
    out.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 4, "CSV line {line:?}");
            (
                (f[0].to_string(), f[1].to_string(), f[2].parse().unwrap()),
                f[3].parse().unwrap(),
            )
        })
        .collect()
}

/// The `--reset-offsets --dry-run` table (`GROUP TOPIC PARTITION NEW-OFFSET`): Kafka 3.9 prints its rows without
/// line breaks, so it is read as a sequence of 4-field rows after the header.
fn parse_reset_plan(out: &str) -> Offsets {
    let words: Vec<&str> = out.split_whitespace().collect();
    let start = words
        .iter()
        .position(|w| *w == "NEW-OFFSET")
        .expect("a NEW-OFFSET header")
        + 1;
    let rows = &words[start..];
    assert_eq!(rows.len() % 4, 0, "reset plan {out:?}");
    rows.chunks(4)
        .map(|r| {
            (
                (r[0].to_string(), r[1].to_string(), r[2].parse().unwrap()),
                r[3].parse().unwrap(),
            )
        })
        .collect()
}

fn segmirror_offsets(log_dir: &std::path::Path, extra: &[&str]) -> Offsets {
    let mut args = vec![
        "offsets".to_string(),
        "--log-dir".into(),
        log_dir.display().to_string(),
        "--csv".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let run = run_segmirror(&args).unwrap();
    assert_eq!(run.code, 0, "segmirror {:?}: {}", run.args, run.stderr);
    parse_csv(&run.stdout)
}

fn produce(bootstrap: &str, topic: &str, per_partition: usize) {
    let records: Vec<OutRecord> = (0..2)
        .flat_map(|p| {
            (0..per_partition).map(move |i| OutRecord {
                partition: Some(p),
                key: Some(format!("k{i}").into_bytes()),
                value: Some(format!("v{i}").into_bytes()),
                headers: vec![],
                timestamp: None,
            })
        })
        .collect();
    python_produce(bootstrap, &ProducePlan::new(topic).step(ProduceStep::Send(records))).unwrap();
}

fn run(version: &str) {
    let mut broker = KafkaBroker::start(
        BrokerConfig::new(&format!("offsets-{version}"))
            .kafka_version(version)
            .property("offsets.topic.num.partitions", 3),
    )
    .unwrap();
    let bootstrap = broker.bootstrap();
    let tools = broker.tools();
    let kip848 = broker.install().major() >= 4;
    admin(
        &bootstrap,
        &[TopicSpec::new(TOPIC, 2), TopicSpec::new(OTHER_TOPIC, 2)],
        &[],
    )
    .unwrap();
    produce(&bootstrap, TOPIC, 10);
    produce(&bootstrap, OTHER_TOPIC, 10);

    // Classic groups: the Java console consumer (commits what it consumed when it exits) and librdkafka.
    let consumed = tools.console_consume_group(TOPIC, "java-classic", 7, &[]).unwrap();
    assert_eq!(consumed, 7);
    python_group_commit(
        &bootstrap,
        TOPIC,
        "py-classic",
        GroupProtocol::Classic,
        &[(0, 3), (1, 4)],
    )
    .unwrap();
    // A later commit replaces an earlier one; another topic of the same group.
    python_group_commit(&bootstrap, TOPIC, "py-classic", GroupProtocol::Classic, &[(0, 5)]).unwrap();
    python_group_commit(&bootstrap, OTHER_TOPIC, "py-classic", GroupProtocol::Classic, &[(1, 9)]).unwrap();
    if kip848 {
        tools
            .console_consume_group(TOPIC, "java-848", 5, &[("group.protocol", "consumer")])
            .unwrap();
        python_group_commit(&bootstrap, TOPIC, "py-848", GroupProtocol::Consumer, &[(0, 6), (1, 2)]).unwrap();
    }
    // sendOffsetsToTransaction: committed, then a later one aborted (the committed one stays).
    python_txn_offsets(
        &bootstrap,
        TOPIC,
        "txn-group",
        "offsets-txn",
        &[(&[(0, 8), (1, 8)], true), (&[(0, 9), (1, 10)], false)],
    )
    .unwrap();
    // A deleted group: its offsets are gone.
    python_group_commit(&bootstrap, TOPIC, "doomed", GroupProtocol::Classic, &[(0, 1), (1, 1)]).unwrap();
    tools.delete_group("doomed").unwrap();

    let described = tools.describe_group_offsets().unwrap();
    let group = |g: &str| described.keys().filter(|k| k.0 == g).count();
    assert_eq!(group("py-classic"), 3, "{described:?}");
    assert_eq!(group("txn-group"), 2, "{described:?}");
    assert_eq!(group("doomed"), 0, "{described:?}");
    assert!(group("java-classic") > 0, "{described:?}");
    if kip848 {
        assert!(group("java-848") > 0 && group("py-848") == 2, "{described:?}");
    }
    assert_eq!(described[&("txn-group".into(), TOPIC.into(), 1)], 8);
    assert_eq!(described[&("py-classic".into(), TOPIC.into(), 0)], 5);

    broker.stop().unwrap();
    let log_dir = broker.log_dir().to_path_buf();
    assert_eq!(
        segmirror_offsets(&log_dir, &[]),
        described,
        "segmirror offsets vs kafka-consumer-groups --describe"
    );

    // Filters: a group regex and a topic regex, each matching whole names.
    let filtered = segmirror_offsets(&log_dir, &["--groups", "py-.*|txn-group", "--topics", TOPIC]);
    let expected: Offsets = described
        .iter()
        .filter(|((g, t, _), _)| (g.starts_with("py-") || g == "txn-group") && t == TOPIC)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(filtered, expected);
    assert!(
        segmirror_offsets(&log_dir, &["--groups", "py"]).is_empty(),
        "a regex matches whole ids"
    );

    // The table names every group and says where it read from.
    let table = run_segmirror(["offsets", "--log-dir", &log_dir.display().to_string()]).unwrap();
    assert_eq!(table.code, 0, "{}", table.stderr);
    eprintln!("Kafka {version}: segmirror offsets\n{}", table.stdout);
    assert!(table.stdout.starts_with("GROUP"), "{}", table.stdout);
    assert!(
        table.stdout.contains(&format!("{} offset(s) of", described.len())),
        "{}",
        table.stdout
    );

    // Kafka's own tool reads the CSV: reset every group listed to what it says (a dry run prints the plan).
    let csv = run_segmirror([
        "offsets",
        "--log-dir",
        &log_dir.display().to_string(),
        "--csv",
        "--groups",
        "py-classic",
    ])
    .unwrap();
    let file = log_dir.parent().unwrap().join("reset.csv");
    std::fs::write(&file, &csv.stdout).unwrap();
    broker.restart().unwrap();
    let plan = broker
        .tools()
        .run(
            CONSUMER_GROUP_COMMAND,
            &[
                "--bootstrap-server",
                &broker.bootstrap(),
                "--reset-offsets",
                "--group",
                "py-classic",
                "--from-file",
                &file.display().to_string(),
                "--dry-run",
            ]
            .map(String::from),
        )
        .unwrap();
    let planned = parse_reset_plan(&plan);
    let expected: Offsets = described
        .into_iter()
        .filter(|((g, _, _), _)| g == "py-classic")
        .collect();
    assert_eq!(
        planned, expected,
        "kafka-consumer-groups --reset-offsets --from-file plan:\n{plan}"
    );
}

#[test]
fn kafka_3_9_offsets_read_from_disk_match_describe() {
    run("3.9.1");
}

#[test]
fn kafka_4_4_offsets_read_from_disk_match_describe() {
    run("4.4.0");
}
