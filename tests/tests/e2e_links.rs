//! Replication links with a lifecycle against a real Kafka 4.4 broker: one broker, `segmirror
//! ship` and `segmirror apply --listen` as child processes, each host with its own link record (`segmirror link
//! create`, the source host's catalog and the mirror's).
//!
//! - A topic created on the source after the link started and matching the link's topics regex is replicated
//!   byte for byte; one that does not match is not.
//! - A link paused on the mirror host installs nothing while records are produced (the mirror's files stay as
//!   they were), and on resume catches up to byte-identical; the same for a pause on the source host (nothing
//!   shipped).
//!
//! One broker for every case, so the file stays well under its 90 s budget on a loaded machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use segmirror_tests::segmirror_cli::{run_segmirror, CliRun};
use segmirror_tests::service::{wait_until, Service};
use segmirror_tests::*;

/// Small segments, so every case rolls a few and the comparison covers sealed and active segments.
const SEGMENT_BYTES: u64 = 32 * 1024;
const RECORDS: usize = 200;
const VALUE_BYTES: usize = 300;
/// Guard for what the test waits for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(60);
/// How long a paused link is watched for moving nothing: several of the services' 500 ms state reads and of the
/// shipper's 1 s rediscovery rounds.
const QUIET: Duration = Duration::from_secs(3);

/// `segmirror link ARGS --catalog CATALOG`, expected to exit 0.
fn link(catalog: &Path, args: &[&str]) -> CliRun {
    let mut all = vec!["link", "--catalog", catalog.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = run_segmirror(all).unwrap();
    assert_eq!(run.code, 0, "{run}");
    run
}

fn produce(bootstrap: &str, topic: &str, tag: &str) {
    let records = (0..RECORDS)
        .map(|i| OutRecord {
            partition: Some(0),
            key: Some(format!("{tag}-{i}").into_bytes()),
            value: Some(vec![b'a' + (i % 26) as u8; VALUE_BYTES]),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect();
    let plan = ProducePlan::new(topic)
        .config("enable.idempotence", "true")
        .config("linger.ms", "2")
        .config("batch.size", "8192")
        .step(ProduceStep::Send(records));
    python_produce(bootstrap, &plan).unwrap();
}

/// A partition directory's `.log` files: name → bytes.
fn log_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}

/// Waits until the mirror's `topic-0` holds the source's `.log` files byte for byte.
fn wait_identical(broker: &KafkaBroker, mirror: &Path, topic: &str, services: &mut [&mut Service]) {
    let source = broker.partition_dir(topic, 0);
    let mirrored = mirror.join(format!("{topic}-0"));
    let what = format!("{topic}-0 byte-identical on the mirror");
    wait_until(&what, PATIENCE, services, || {
        let (want, got) = (log_files(&source), log_files(&mirrored));
        (!want.is_empty() && got == want, (want.len(), got.len()))
    });
}

/// Every file of the mirror with its length: what must not change while a link is paused.
fn mirror_state(mirror: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    for dir in std::fs::read_dir(mirror).unwrap().map(|e| e.unwrap().path()) {
        if dir.is_dir() && !dir.file_name().unwrap().to_string_lossy().starts_with('.') {
            for f in std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
                out.insert(f.clone(), std::fs::metadata(&f).map_or(0, |m| m.len()));
            }
        }
    }
    out
}

#[test]
fn new_matching_topics_are_replicated_and_a_paused_link_moves_nothing_until_resumed() {
    let broker = KafkaBroker::start(BrokerConfig::new("e2e-links")).unwrap();
    let bootstrap = broker.bootstrap();
    let segment = |t: &str| {
        TopicSpec::new(t, 1)
            .config(broker.install().segment_bytes_config(), SEGMENT_BYTES)
            .config("retention.ms", -1)
    };
    admin(&bootstrap, &[segment("orders")], &[]).unwrap();
    produce(&bootstrap, "orders", "first");

    let work = tempfile::tempdir().unwrap();
    let mirror = work.path().join("mirror");
    let source_catalog = work.path().join("source-host.sqlite");
    let mirror_catalog = work.path().join("mirror-host.sqlite");
    for (catalog, side) in [(&source_catalog, "source"), (&mirror_catalog, "mirror")] {
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
                "e2e-links",
                "--target",
                side,
                "--topics-regex",
                "orders.*",
            ],
        );
    }
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
            mirror_catalog.to_str().unwrap(),
        ],
    )
    .patience(PATIENCE);
    let addr = applier.wait_for("listening on ").trim().to_string();
    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--connect",
            &addr,
            "--plaintext",
            "--link",
            "dr",
            "--upto",
            "log-end",
            "--log-dir",
            broker.log_dir().to_str().unwrap(),
            "--catalog",
            source_catalog.to_str().unwrap(),
        ],
    )
    .patience(PATIENCE);
    wait_identical(&broker, &mirror, "orders", &mut [&mut applier, &mut shipper]);

    // Topics created on the source after the link started: the matching one is replicated, the other is not.
    admin(&bootstrap, &[segment("orders-late"), segment("misc")], &[]).unwrap();
    produce(&bootstrap, "orders-late", "late");
    produce(&bootstrap, "misc", "misc");
    wait_identical(&broker, &mirror, "orders-late", &mut [&mut applier, &mut shipper]);
    std::thread::sleep(QUIET);
    assert!(
        !mirror.join("misc-0").exists(),
        "misc does not match the link's topics regex but was mirrored"
    );

    // Paused on the mirror host: records produced meanwhile are not installed; resumed, the mirror catches up.
    link(&mirror_catalog, &["pause", "dr"]);
    applier.wait_for("link \"dr\" is paused");
    let before = mirror_state(&mirror);
    produce(&bootstrap, "orders", "while-applier-paused");
    std::thread::sleep(QUIET);
    assert_eq!(mirror_state(&mirror), before, "a paused link installed something");
    link(&mirror_catalog, &["resume", "dr"]);
    wait_identical(&broker, &mirror, "orders", &mut [&mut applier, &mut shipper]);

    // Paused on the source host: nothing is shipped; resumed, it catches up.
    link(&source_catalog, &["pause", "dr"]);
    shipper.wait_for("link \"dr\" is paused");
    let before = mirror_state(&mirror);
    produce(&bootstrap, "orders-late", "while-shipper-paused");
    std::thread::sleep(QUIET);
    assert_eq!(mirror_state(&mirror), before, "a paused shipper shipped something");
    link(&source_catalog, &["resume", "dr"]);
    wait_identical(&broker, &mirror, "orders-late", &mut [&mut applier, &mut shipper]);
    wait_identical(&broker, &mirror, "orders", &mut [&mut applier, &mut shipper]);

    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "{log}");
    // The mirror's catalog recorded the partitions under the link the operator created, not a new implicit one.
    let described = link(&mirror_catalog, &["describe", "dr", "--json"]).json().unwrap();
    assert_eq!(described["partitions"], 2, "{described}");
    assert_eq!(described["state"], "active");
}
