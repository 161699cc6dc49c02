//! A link carries the source's topic metadata and its consumer groups' offsets (the
//! shipping side), on one Kafka 4.4 broker: while `segmirror ship --store` and `segmirror apply --follow` run,
//! groups commit on the source; the applier's catalog gets the offsets of the link's groups for the link's topics,
//! equal to what `kafka-consumer-groups --describe` says, and the topic's partition count and configs, equal to
//! what `kafka-configs --describe` says. An offset committed ahead of the installed data is shown clamped (by
//! `segmirror offsets --link`) until the data arrives.
//!
//! Then the same over the direct transport, on the same broker (`ship --connect` / `apply --listen`, feature bits 8
//! and 9): the applier's catalog gets the same offsets and configs, a later commit follows, the applier adopts the
//! shipper's link id, and a shipper of the link deleted and recreated on the source host is refused naming both
//! ids.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use segmirror_catalog::Catalog;
use segmirror_tests::clients::{python_group_commit, GroupProtocol};
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::service::{follow_args, wait_until, Service};
use segmirror_tests::*;

const TOPIC: &str = "orders";
const UNLINKED_TOPIC: &str = "audit";
const PATIENCE: Duration = Duration::from_secs(60);

type Offsets = BTreeMap<(String, String, i32), i64>;
/// (group, topic, partition) -> (source offset, committable, clamped).
type Recorded = BTreeMap<(String, String, i32), (i64, Option<i64>, bool)>;

fn produce(bootstrap: &str, topic: &str, partition: i32, n: usize, tag: &str) {
    let records: Vec<OutRecord> = (0..n)
        .map(|i| OutRecord {
            partition: Some(partition),
            key: Some(format!("{tag}-{i}").into_bytes()),
            value: Some(format!("v{i}").into_bytes()),
            headers: vec![],
            timestamp: None,
        })
        .collect();
    python_produce(bootstrap, &ProducePlan::new(topic).step(ProduceStep::Send(records))).unwrap();
}

/// `segmirror offsets --link dr` against the applier's catalog: the table, and the CSV of committable offsets.
fn link_offsets(mirror: &Path, catalog: &Path, csv: bool) -> String {
    let mut args = vec![
        "offsets".to_string(),
        "--link".into(),
        "dr".into(),
        "--mirror".into(),
        mirror.display().to_string(),
        "--catalog".into(),
        catalog.display().to_string(),
    ];
    if csv {
        args.push("--csv".into());
    }
    let run = run_segmirror(&args).unwrap();
    assert_eq!(run.code, 0, "segmirror {:?}: {}", run.args, run.stderr);
    run.stdout
}

/// The committable offsets `segmirror offsets --link dr --csv` gives.
fn csv_offsets(mirror: &Path, catalog: &Path) -> Offsets {
    link_offsets(mirror, catalog, true)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            ((f[0].into(), f[1].into(), f[2].parse().unwrap()), f[3].parse().unwrap())
        })
        .collect()
}

/// What the catalog says of the link's offsets.
fn recorded(catalog: &Path) -> Recorded {
    let Ok(catalog) = Catalog::open(catalog) else {
        return BTreeMap::new();
    };
    let Ok(rows) = catalog.link_offsets("dr") else {
        return BTreeMap::new();
    };
    rows.into_iter()
        .map(|o| {
            (
                (o.group, o.topic, o.partition),
                (o.source_offset, o.committable, o.clamped),
            )
        })
        .collect()
}

fn wait_for<T: std::fmt::Debug>(what: &str, services: &mut [&mut Service], probe: impl FnMut() -> (bool, T)) {
    wait_until(what, PATIENCE, services, probe);
}

#[test]
fn a_link_carries_topic_configs_and_group_offsets_and_offsets_wait_for_their_data() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("link-meta").kafka_version("4.4.0")).unwrap();
    let bootstrap = broker.bootstrap();
    let tools = broker.tools();
    let spec = TopicSpec::new(TOPIC, 2)
        .config("retention.ms", 86_400_000)
        .config("cleanup.policy", "delete")
        .config("max.message.bytes", 200_000);
    admin(&bootstrap, &[spec, TopicSpec::new(UNLINKED_TOPIC, 1)], &[]).unwrap();
    for p in 0..2 {
        produce(&bootstrap, TOPIC, p, 10, "first");
    }
    produce(&bootstrap, UNLINKED_TOPIC, 0, 5, "audit");

    let work = tempfile::tempdir().unwrap();
    let bucket = work.path().join("bucket");
    std::fs::create_dir_all(&bucket).unwrap();
    let mirror = work.path().join("mirror");
    std::fs::create_dir_all(&mirror).unwrap();
    let catalog = work.path().join("catalog.sqlite");
    let log_dir = broker.log_dir().display().to_string();
    let url = bucket.display().to_string();
    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--store",
            &url,
            "--log-dir",
            &log_dir,
            "--metadata-log-dir",
            &log_dir,
            "--link",
            "dr",
            "--upto",
            "log-end",
            "--topics",
            TOPIC,
            "--groups",
            "app-.*",
            "--meta-interval-ms",
            "200",
            "--upload-interval-ms",
            "200",
        ],
    );
    let mut applier = Service::start("apply", follow_args(&url, &mirror, &catalog, "dr"));

    // Groups commit while both run: two of the link's groups (one on two topics), one group the link does not
    // carry. Partition 1's offset 14 is ahead of the 10 records there: it must stay clamped to the installed end.
    python_group_commit(&bootstrap, TOPIC, "app-a", GroupProtocol::Classic, &[(0, 4), (1, 14)]).unwrap();
    python_group_commit(&bootstrap, TOPIC, "app-b", GroupProtocol::Consumer, &[(0, 7)]).unwrap();
    python_group_commit(&bootstrap, UNLINKED_TOPIC, "app-b", GroupProtocol::Consumer, &[(0, 3)]).unwrap();
    python_group_commit(&bootstrap, TOPIC, "elsewhere", GroupProtocol::Classic, &[(0, 2)]).unwrap();
    // A later commit replaces an earlier one.
    python_group_commit(&bootstrap, TOPIC, "app-a", GroupProtocol::Classic, &[(0, 6)]).unwrap();

    let described = tools.describe_group_offsets().unwrap();
    let expected: Offsets = described
        .iter()
        .filter(|((g, t, _), _)| g.starts_with("app-") && t == TOPIC)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    assert_eq!(expected.len(), 3, "{described:?}");
    assert_eq!(expected[&("app-a".into(), TOPIC.into(), 0)], 6);

    wait_for(
        "the link's offsets in the catalog",
        &mut [&mut shipper, &mut applier],
        || {
            let got: Offsets = recorded(&catalog).into_iter().map(|(k, (o, _, _))| (k, o)).collect();
            (got == expected, got)
        },
    );
    let rows = recorded(&catalog);
    assert_eq!(rows[&("app-a".into(), TOPIC.into(), 0)], (6, Some(6), false));
    // Ahead of the data: clamped to the installed end (10), and said so.
    wait_for(
        "partition 1 installed through 10",
        &mut [&mut shipper, &mut applier],
        || {
            let row = recorded(&catalog)[&("app-a".to_string(), TOPIC.to_string(), 1)];
            (row.1 == Some(10), row)
        },
    );
    assert_eq!(
        recorded(&catalog)[&("app-a".into(), TOPIC.into(), 1)],
        (14, Some(10), true)
    );
    let table = link_offsets(&mirror, &catalog, false);
    eprintln!("segmirror offsets --link dr (before the data):\n{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("app-a") && l.contains("clamped: 4 record(s) not installed yet")),
        "{table}"
    );

    // Topics: partition count and configs as the source's admin tools say.
    let topics = Catalog::open(&catalog).unwrap().link_topics("dr").unwrap();
    assert_eq!(topics.len(), 1, "only the link's topic: {topics:?}");
    assert_eq!(topics[0].name, TOPIC);
    let described_topic = tools.describe_topic(TOPIC).unwrap();
    assert_eq!(topics[0].partitions as i32, described_topic.partitions);
    assert_eq!(topics[0].topic_id, described_topic.topic_id);
    let configs = tools.describe_topic_configs(TOPIC).unwrap();
    assert_eq!(
        configs.get("max.message.bytes").map(String::as_str),
        Some("200000"),
        "{configs:?}"
    );
    assert_eq!(topics[0].configs, configs, "configs vs kafka-configs --describe");

    // The data arrives: the committable offset rises to the committed one.
    produce(&bootstrap, TOPIC, 1, 10, "second");
    wait_for(
        "partition 1's offset no longer clamped",
        &mut [&mut shipper, &mut applier],
        || {
            let row = recorded(&catalog)[&("app-a".to_string(), TOPIC.to_string(), 1)];
            (row == (14, Some(14), false), row)
        },
    );
    assert_eq!(
        csv_offsets(&mirror, &catalog),
        expected,
        "the CSV once everything is installed"
    );

    // A config altered on the source reaches the catalog.
    tools.alter_topic_config(TOPIC, &[("retention.ms", "3600000")]).unwrap();
    wait_for("the altered config", &mut [&mut shipper, &mut applier], || {
        let topics = Catalog::open(&catalog).unwrap().link_topics("dr").unwrap();
        let value = topics[0].configs.get("retention.ms").cloned();
        (value.as_deref() == Some("3600000"), value)
    });
    assert_eq!(
        Catalog::open(&catalog).unwrap().link_topics("dr").unwrap()[0].configs,
        tools.describe_topic_configs(TOPIC).unwrap()
    );

    for service in [shipper, applier] {
        let name = service.name().to_string();
        let (code, log) = service.stop();
        assert_eq!(code, Some(0), "{name} on SIGTERM:\n{log}");
    }
    over_the_direct_transport(&broker, &expected);
    broker.stop().unwrap();
}

/// `segmirror link ARGS --catalog CATALOG`, expected to exit 0.
fn link(catalog: &Path, args: &[&str]) -> String {
    let mut all = vec!["link", "--catalog", catalog.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = run_segmirror(all).unwrap();
    assert_eq!(run.code, 0, "{run}");
    run.stdout
}

fn create_link(catalog: &Path) -> String {
    link(
        catalog,
        &[
            "create",
            "dr",
            "--transport",
            "direct",
            "--address",
            "127.0.0.1:9400",
            "--source",
            "link-meta",
            "--target",
            "dr-site",
            "--topics-regex",
            TOPIC,
        ],
    );
    Catalog::open(catalog).unwrap().link("dr").unwrap().id
}

fn direct_shipper(addr: &str, log_dir: &str, source_catalog: &Path) -> Service {
    Service::start(
        "ship",
        [
            "ship",
            "--connect",
            addr,
            "--plaintext",
            "--link",
            "dr",
            "--upto",
            "log-end",
            "--log-dir",
            log_dir,
            "--metadata-log-dir",
            log_dir,
            "--groups",
            "app-.*",
            "--meta-interval-ms",
            "200",
            "--catalog",
            source_catalog.to_str().unwrap(),
        ],
    )
    .patience(PATIENCE)
}

/// The direct case (see the module doc). `expected`: the link's groups' offsets as the source describes them now,
/// every one of them installed already on the source's side.
fn over_the_direct_transport(broker: &KafkaBroker, expected: &Offsets) {
    let bootstrap = broker.bootstrap();
    let tools = broker.tools();
    let work = tempfile::tempdir().unwrap();
    let mirror = work.path().join("mirror");
    let catalog = work.path().join("mirror-host.sqlite");
    let source_catalog = work.path().join("source-host.sqlite");
    let link_id = create_link(&source_catalog);
    let log_dir = broker.log_dir().display().to_string();
    let mut applier = Service::start(
        "apply",
        [
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
            "--link",
            "dr",
            "--mirror",
            mirror.to_str().unwrap(),
            "--catalog",
            catalog.to_str().unwrap(),
        ],
    )
    .patience(PATIENCE);
    let addr = applier.wait_for("listening on ").trim().to_string();
    let mut shipper = direct_shipper(&addr, &log_dir, &source_catalog);

    // Every offset recorded as committed, and committable in full once the data is installed (the mirror's
    // active segments count: `offsets --link --mirror` reads their durable ends).
    wait_for(
        "the link's offsets over the direct transport",
        &mut [&mut shipper, &mut applier],
        || {
            let got: Offsets = recorded(&catalog).into_iter().map(|(k, (o, _, _))| (k, o)).collect();
            let committable = if got == *expected {
                csv_offsets(&mirror, &catalog)
            } else {
                Offsets::new()
            };
            (got == *expected && committable == *expected, (got, committable))
        },
    );
    let topics = Catalog::open(&catalog).unwrap().link_topics("dr").unwrap();
    assert_eq!(topics.len(), 1, "only the link's topic: {topics:?}");
    assert_eq!(
        topics[0].partitions as i32,
        tools.describe_topic(TOPIC).unwrap().partitions
    );
    assert_eq!(
        topics[0].configs,
        tools.describe_topic_configs(TOPIC).unwrap(),
        "configs vs kafka-configs --describe"
    );

    // A later commit follows (the shipper sends a new version only when something changed).
    python_group_commit(&bootstrap, TOPIC, "app-b", GroupProtocol::Consumer, &[(0, 9)]).unwrap();
    let key = ("app-b".to_string(), TOPIC.to_string(), 0);
    wait_for("app-b's new offset", &mut [&mut shipper, &mut applier], || {
        let row = recorded(&catalog).get(&key).map(|r| r.0);
        (row == Some(9), row)
    });
    assert_eq!(csv_offsets(&mirror, &catalog).get(&key), Some(&9));

    // The applier follows the shipper's link id now.
    let mirror_link = Catalog::open(&catalog).unwrap().link("dr").unwrap();
    assert_eq!(mirror_link.peer_link_id.as_deref(), Some(link_id.as_str()));

    // The link deleted and recreated on the source host is another link: its shipper is refused, naming both ids.
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship on SIGTERM:\n{log}");
    link(&source_catalog, &["delete", "dr"]);
    let new_id = create_link(&source_catalog);
    assert_ne!(new_id, link_id);
    let mut shipper = direct_shipper(&addr, &log_dir, &source_catalog);
    let refusal = shipper.wait_for("the peer is not a match");
    assert!(
        refusal.contains(&link_id) && refusal.contains(&new_id),
        "{refusal}\n{}",
        shipper.log()
    );
    applier.assert_running();
    assert_eq!(
        Catalog::open(&catalog)
            .unwrap()
            .link("dr")
            .unwrap()
            .peer_link_id
            .as_deref(),
        Some(link_id.as_str()),
        "the adopted id is kept"
    );

    for service in [shipper, applier] {
        let name = service.name().to_string();
        let (code, log) = service.stop();
        assert_eq!(code, Some(0), "{name} on SIGTERM:\n{log}");
    }
}
