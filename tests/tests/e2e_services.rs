//! `segmirror ship` and `segmirror apply --listen` as processes against a live broker: a topic created while both
//! run is mirrored without a restart, and a topic deleted while they run (the broker renames its directory
//! `<topic>-<p>.<uuid>-delete`) is dropped by the shipper without an error while the other topics go on. A topic
//! deleted and recreated while they run (another topic id) stops its own partition, reported by `status`, while
//! the other topics keep replicating; `segmirror link reset-partition` then mirrors the new topic from its start.
//! The broker's files are the ground truth: every `.log` of a live partition equals its mirror byte for byte.

use std::path::Path;
use std::time::{Duration, Instant};

use segmirror_tests::clients::{admin, kcat_produce};
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::service::{wait_until, Service};
use segmirror_tests::tools::TOPIC_COMMAND;
use segmirror_tests::{BrokerConfig, KafkaBroker, TopicSpec};

/// How long the test waits for something that should happen (a guard against hangs, not a speed assertion).
const PATIENCE: Duration = Duration::from_secs(120);

fn produce(bootstrap: &str, topic: &str, tag: &str, n: usize) {
    let values: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    let records: Vec<(Option<&str>, Option<&str>)> = values.iter().map(|v| (None, Some(v.as_str()))).collect();
    kcat_produce(bootstrap, topic, 0, &records, &[]).unwrap();
}

/// Waits until every `.log` of the source partition dir is in the mirror's with the same bytes.
fn wait_mirrored(source: &Path, mirror: &Path, services: &mut [&mut Service]) {
    let what = format!("{} mirrored", source.display());
    wait_until(&what, PATIENCE, services, || {
        let logs: Vec<_> = std::fs::read_dir(source)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        let same = !logs.is_empty()
            && logs
                .iter()
                .all(|f| std::fs::read(mirror.join(f.file_name().unwrap())).ok() == Some(std::fs::read(f).unwrap()));
        (same, logs.len())
    });
}

/// The applier's catalog: beside the mirror, one per test (the tests of this file run at the same time).
fn catalog_of(mirror: &Path) -> std::path::PathBuf {
    mirror.with_extension("catalog.sqlite")
}

/// `segmirror apply --listen` into `mirror` and `segmirror ship --connect` from the broker's log dir, plaintext,
/// link `dr`, up to the log end.
fn start_services(broker: &KafkaBroker, mirror: &Path) -> (Service, Service) {
    let catalog = catalog_of(mirror);
    let mut applier = Service::start(
        "apply",
        [
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--mirror",
            mirror.to_str().unwrap(),
            "--catalog",
            catalog.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
        ],
    )
    .patience(PATIENCE);
    let addr = applier.wait_for("listening on ").trim().to_string();
    let log_dir = broker.log_dir().to_str().unwrap().to_string();
    let shipper = Service::start(
        "ship",
        [
            "ship",
            "--log-dir",
            &log_dir,
            "--link",
            "dr",
            "--plaintext",
            "--connect",
            &addr,
            "--upto",
            "log-end",
        ],
    )
    .patience(PATIENCE);
    (applier, shipper)
}

#[test]
fn ship_follows_topics_created_and_deleted_on_a_live_broker() {
    let broker = KafkaBroker::start(BrokerConfig::new("e2e-services")).unwrap();
    let bootstrap = broker.bootstrap();
    admin(&bootstrap, &[TopicSpec::new("alpha", 1)], &[]).unwrap();
    produce(&bootstrap, "alpha", "a", 50);

    let mirror = tempfile::tempdir().unwrap();
    let (mut applier, mut shipper) = start_services(&broker, mirror.path());
    let alpha = broker.partition_dir("alpha", 0);
    wait_mirrored(
        &alpha,
        &mirror.path().join("alpha-0"),
        &mut [&mut applier, &mut shipper],
    );

    // Created while both run.
    admin(&bootstrap, &[TopicSpec::new("beta", 1)], &[]).unwrap();
    produce(&bootstrap, "beta", "b", 40);
    let beta = broker.partition_dir("beta", 0);
    wait_mirrored(&beta, &mirror.path().join("beta-0"), &mut [&mut applier, &mut shipper]);

    // Deleted while both run: the broker renames alpha-0 `-delete`; the shipper drops it and beta goes on.
    broker
        .tools()
        .run(
            TOPIC_COMMAND,
            &[
                "--bootstrap-server".to_string(),
                bootstrap.clone(),
                "--delete".into(),
                "--topic".into(),
                "alpha".into(),
            ],
        )
        .unwrap();
    let start = Instant::now();
    while alpha.exists() {
        assert!(
            start.elapsed() < PATIENCE,
            "the broker never removed {}",
            alpha.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    produce(&bootstrap, "beta", "c", 30);
    wait_mirrored(&beta, &mirror.path().join("beta-0"), &mut [&mut applier, &mut shipper]);
    shipper.wait_for("no longer shipped");

    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{log}");
    assert!(
        !log.contains("ERROR") && !log.contains("WARN") && !log.contains("ship: error"),
        "ship logged an error or a warning:\n{log}"
    );
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{log}");
    assert!(
        mirror.path().join("alpha-0").exists(),
        "the mirror keeps what it received of a deleted topic"
    );
}

fn delete_topic(broker: &KafkaBroker, topic: &str) {
    let bootstrap = broker.bootstrap();
    broker
        .tools()
        .run(
            TOPIC_COMMAND,
            &[
                "--bootstrap-server".to_string(),
                bootstrap,
                "--delete".into(),
                "--topic".into(),
                topic.into(),
            ],
        )
        .unwrap();
    let dir = broker.partition_dir(topic, 0);
    let start = Instant::now();
    while dir.exists() {
        assert!(start.elapsed() < PATIENCE, "the broker never removed {}", dir.display());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `segmirror status --json --catalog C`: the partition `topic-0`'s document.
fn partition_status(catalog: &str, topic: &str) -> serde_json::Value {
    let run = run_segmirror(["status", "--json", "--catalog", catalog]).unwrap();
    assert_eq!(run.code, 0, "{run}");
    let doc = run.json().unwrap();
    doc["links"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == topic && p["partition"] == 0)
        .cloned()
        .unwrap_or_else(|| panic!("no {topic}-0 in {doc:#}"))
}

#[test]
fn a_recreated_topic_stops_its_partition_alone_until_reset() {
    let broker = KafkaBroker::start(BrokerConfig::new("e2e-recreated")).unwrap();
    let bootstrap = broker.bootstrap();
    admin(
        &bootstrap,
        &[TopicSpec::new("alpha", 1), TopicSpec::new("beta", 1)],
        &[],
    )
    .unwrap();
    produce(&bootstrap, "alpha", "a", 50);
    produce(&bootstrap, "beta", "b", 50);

    let mirror = tempfile::tempdir().unwrap();
    let catalog = catalog_of(mirror.path());
    let catalog = catalog.to_str().unwrap();
    let (mut applier, mut shipper) = start_services(&broker, mirror.path());
    let (alpha, beta) = (broker.partition_dir("alpha", 0), broker.partition_dir("beta", 0));
    let (alpha_mirror, beta_mirror) = (mirror.path().join("alpha-0"), mirror.path().join("beta-0"));
    wait_mirrored(&alpha, &alpha_mirror, &mut [&mut applier, &mut shipper]);
    wait_mirrored(&beta, &beta_mirror, &mut [&mut applier, &mut shipper]);
    let old_alpha = std::fs::read(alpha_mirror.join("00000000000000000000.log")).unwrap();

    // Deleted and recreated while both run: another topic id, new records from offset 0.
    delete_topic(&broker, "alpha");
    admin(&bootstrap, &[TopicSpec::new("alpha", 1)], &[]).unwrap();
    produce(&bootstrap, "alpha", "new", 20);
    // Beta goes on without a gap, in the same run.
    produce(&bootstrap, "beta", "c", 30);
    wait_mirrored(&beta, &beta_mirror, &mut [&mut applier, &mut shipper]);
    // Alpha stops alone: paused, the last event says why and what to do; the old lineage's bytes stay.
    wait_until(
        "alpha-0 reported stopped",
        PATIENCE,
        &mut [&mut applier, &mut shipper],
        || {
            let p = partition_status(catalog, "alpha");
            (p["state"] == "paused", p)
        },
    );
    let status = partition_status(catalog, "alpha");
    let event = status["last_event"]["detail"].as_str().unwrap_or_default().to_string();
    assert_eq!(status["last_event"]["kind"], "lineage_break", "{status:#}");
    assert!(event.contains("reset-partition dr alpha 0"), "{event}");
    assert_eq!(
        std::fs::read(alpha_mirror.join("00000000000000000000.log")).unwrap(),
        old_alpha
    );
    produce(&bootstrap, "beta", "d", 30);
    wait_mirrored(&beta, &beta_mirror, &mut [&mut applier, &mut shipper]);
    applier.assert_running();
    shipper.assert_running();

    // The documented command, with both still running: the new topic is mirrored from its start.
    let reset = run_segmirror(["link", "reset-partition", "dr", "alpha", "0", "--catalog", catalog]).unwrap();
    assert_eq!(reset.code, 0, "{reset}");
    wait_mirrored(&alpha, &alpha_mirror, &mut [&mut applier, &mut shipper]);
    let p = partition_status(catalog, "alpha");
    assert_eq!(p["state"], "mirroring", "{p:#}");
    let archived: Vec<_> = std::fs::read_dir(mirror.path().join(".archive").join("alpha-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(
        std::fs::read(archived[0].join("00000000000000000000.log")).unwrap(),
        old_alpha
    );

    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{log}");
}
