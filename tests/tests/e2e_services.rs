//! `segmirror ship` and `segmirror apply --listen` as processes against a live broker: a topic created while both
//! run is mirrored without a restart, and a topic deleted while they run (the broker renames its directory
//! `<topic>-<p>.<uuid>-delete`) is dropped by the shipper without an error while the other topics go on. The
//! broker's files are the ground truth: every `.log` of a live partition equals its mirror byte for byte.

use std::path::Path;
use std::time::{Duration, Instant};

use segmirror_tests::clients::{admin, kcat_produce};
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

#[test]
fn ship_follows_topics_created_and_deleted_on_a_live_broker() {
    let broker = KafkaBroker::start(BrokerConfig::new("e2e-services")).unwrap();
    let bootstrap = broker.bootstrap();
    admin(&bootstrap, &[TopicSpec::new("alpha", 1)], &[]).unwrap();
    produce(&bootstrap, "alpha", "a", 50);

    let mirror = tempfile::tempdir().unwrap();
    let mirror_root = mirror.path().to_str().unwrap().to_string();
    let mut applier = Service::start(
        "apply",
        [
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--mirror",
            &mirror_root,
            "--link",
            "dr",
            "--plaintext",
        ],
    )
    .patience(PATIENCE);
    let addr = applier.wait_for("listening on ").trim().to_string();
    let log_dir = broker.log_dir().to_str().unwrap().to_string();
    let mut shipper = Service::start(
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
