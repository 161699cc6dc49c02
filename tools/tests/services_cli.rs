//! The services as an operator runs them: `segmirror ship --config FILE` streaming to `segmirror apply --listen`
//! (the tail applier under its documented name), a topic created while both run mirrored without a restart, JSON
//! log lines from `--log-format json`, and the usage errors of `apply --listen` and of a config file (exit 2, one
//! line naming the flag, or the key and the file).

mod common;

use common::service::{wait_mirrored, Service};
use common::{create_partition, data_batches, segmirror, write_log_dir, PartitionSpec, SegmentSpec};

fn partition(topic: &str) -> PartitionSpec {
    PartitionSpec::new(
        topic,
        0,
        vec![
            SegmentSpec::new(data_batches(0, 10, 3, 0)),
            SegmentSpec::new(data_batches(30, 5, 3, 0)),
        ],
    )
    .index_interval(4096)
}

#[test]
fn ship_from_a_config_file_to_apply_listen_mirrors_a_topic_created_while_running() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(&source, &[partition("orders")]);
    let mirror = root.path().join("mirror");
    // A catalog of the test's own: the tests of this binary run at once and share one SEGMIRROR_HOME, whose
    // default catalog belongs to the first mirror root an applier opens.
    let catalog = root.path().join("catalog.sqlite");

    // The applier under its documented name, logging JSON lines.
    let mut applier = Service::start_quiet(
        "apply",
        &[
            "--log-format",
            "json",
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
        ]
        .map(String::from),
    );
    let addr = applier.wait_for("listening on ").trim().to_string();

    // The shipper from a config file (relative log dir, resolved against the file's directory); --connect given
    // as a flag, the file's `listen` is overridden by it.
    let config = root.path().join("ship.toml");
    std::fs::write(
        &config,
        "link = \"dr\"\nlisten = \"127.0.0.1:1\"\nplaintext = true\nlog-dir = [\"source\"]\nupto = \"log-end\"\n",
    )
    .unwrap();
    let mut shipper = Service::start_quiet(
        "ship",
        &["ship", "--config", config.to_str().unwrap(), "--connect", &addr].map(String::from),
    );
    wait_mirrored(&source, &mirror, "orders-0", &mut [&mut applier, &mut shipper]);

    // A topic created while both run: written aside, then renamed into the log dir as a broker's directory
    // appears whole.
    create_partition(&root.path().join("staging"), &source, &partition("fresh"));
    wait_mirrored(&source, &mirror, "fresh-0", &mut [&mut applier, &mut shipper]);

    let (code, ship_log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{ship_log}");
    let (code, apply_log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{apply_log}");
    // `--log-format json`: the tracing events are JSON objects with a level and a message.
    let events: Vec<serde_json::Value> = apply_log
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["level"] == "INFO" && e["message"] == "listening"),
        "no JSON `listening` event:\n{apply_log}"
    );
    assert!(
        events
            .iter()
            .all(|e| e["level"].is_string() && e["message"].is_string()),
        "{apply_log}"
    );
}

#[test]
fn apply_listen_with_a_store_flag_exits_2_with_one_line() {
    let out = segmirror([
        "apply",
        "--listen",
        "127.0.0.1:0",
        "--mirror",
        "m",
        "--store",
        "file:///s",
    ]);
    assert_eq!(out.code, Some(2));
    let err = out.stderr.clone();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--store") && err.contains("--listen"), "{err}");
}

#[test]
fn a_config_file_with_an_unknown_key_exits_2_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ship.toml");
    std::fs::write(&config, "link = \"dr\"\nlog-dirs = [\"/x\"]\n").unwrap();
    let out = segmirror(["ship", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    let err = out.stderr.clone();
    assert!(
        err.contains("unknown key `log-dirs`") && err.contains("ship.toml"),
        "{err}"
    );
    // A value the flag refuses is refused from the file too.
    std::fs::write(&config, "upto = \"sometimes\"\n").unwrap();
    let out = segmirror([
        "ship",
        "--config",
        config.to_str().unwrap(),
        "--log-dir",
        "/x",
        "--link",
        "l",
    ]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.clone().contains("sometimes"));
}

#[test]
fn a_shipper_started_before_its_topic_exists_waits_and_ships_it_once_created() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(&source, &[partition("orders")]);
    let mirror = root.path().join("mirror");
    // A catalog of the test's own: the tests of this binary run at once and share one SEGMIRROR_HOME, whose
    // default catalog belongs to the first mirror root an applier opens.
    let catalog = root.path().join("catalog.sqlite");
    let mut applier = Service::start_quiet(
        "apply",
        &[
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
        ]
        .map(String::from),
    );
    let addr = applier.wait_for("listening on ").trim().to_string();
    let mut shipper = Service::start_quiet(
        "ship",
        &[
            "ship",
            "--log-dir",
            source.to_str().unwrap(),
            "--topics",
            "later",
            "--upto",
            "log-end",
            "--link",
            "dr",
            "--plaintext",
            "--connect",
            &addr,
        ]
        .map(String::from),
    );
    shipper.wait_for("waiting for one");
    shipper.wait_for("connected: session started");
    create_partition(&root.path().join("staging"), &source, &partition("later"));
    wait_mirrored(&source, &mirror, "later-0", &mut [&mut applier, &mut shipper]);
    assert!(
        !mirror.join("orders-0").exists(),
        "a topic --topics does not select is not shipped"
    );
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship:\n{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{log}");
}
