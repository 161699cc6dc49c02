//! `segmirror promote` refusals that need no broker: a mistyped mirror root, link or catalog is exit 2 and creates
//! nothing; every reason of one run is listed; `--help` documents the exit status. (Against real brokers:
//! `tests/tests/e2e_promote_retention.rs`.)

use std::path::Path;
use std::process::Command;

use segment_format::metadata_log::encode::{write_metadata_log, TopicSpec};
use segment_format::partition_metadata::Uuid;
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_catalog::{Catalog, LinkSpec};

const TOPIC_ID: Uuid = Uuid([7; 16]);

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn promote(args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .arg("promote")
        .args(args)
        .output()
        .unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A stopped broker's log dir with topic `orders` (one empty partition) and its metadata log.
fn target(dir: &Path) {
    let config = WriterConfig {
        fsync: false,
        topic_id: Some(TOPIC_ID),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(dir, "orders", 0, 0, config).unwrap();
    w.become_leader(1);
    let written = w.close().unwrap();
    let identity = LogDirIdentity {
        cluster_id: Uuid([1; 16]).to_string(),
        node_id: 1,
        directory_id: Uuid([2; 16]),
    };
    write_log_dir_files(
        dir,
        &identity,
        &[written],
        LogDirState::CleanShutdown { broker_epoch: 1 },
    )
    .unwrap();
    let topics = [TopicSpec {
        name: "orders",
        id: TOPIC_ID,
        partitions: 1,
        configs: &[],
    }];
    write_metadata_log(dir, &topics).unwrap();
}

fn catalog(path: &Path) {
    Catalog::open(path)
        .unwrap()
        .create_link(&LinkSpec {
            name: "prod".into(),
            store_url: "file:///unused".into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
}

#[test]
fn a_missing_mirror_and_an_unknown_link_are_refused_together_and_nothing_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let (log_dir, catalog_path) = (tmp.path().join("target"), tmp.path().join("catalog.sqlite"));
    target(&log_dir);
    catalog(&catalog_path);
    let mirror = tmp.path().join("no-such-mirror");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (m, l, c) = (s(&mirror), s(&log_dir), s(&catalog_path));
    let base = ["--mirror", &m, "--log-dir", &l, "--catalog", &c];

    let mut args = base.to_vec();
    args.extend(["--link", "typo", "--json"]);
    let run = promote(&args);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let kinds: Vec<&str> = json["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["mirror_root_missing", "unknown_link"], "{json:#}");
    assert!(run.stderr.contains("no-such-mirror does not exist"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("link \"typo\" is not in the catalog (it holds: prod)"),
        "{}",
        run.stderr
    );
    assert!(!mirror.exists(), "the mirror root is never created");
    let links: Vec<String> = Catalog::open(&catalog_path)
        .unwrap()
        .links()
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(links, ["prod"], "the link is never created");

    // A catalog that does not exist is an error too, and is not created.
    let missing_catalog = tmp.path().join("no-such.sqlite");
    let mc = s(&missing_catalog);
    let run = promote(&["--mirror", &m, "--log-dir", &l, "--catalog", &mc]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(!missing_catalog.exists());
}

#[test]
fn help_documents_the_exit_status_and_the_retention_flags() {
    let run = promote(&["--help"]);
    assert_eq!(run.code, Some(0));
    for needle in [
        "--allow-retention-delete",
        "--target-config",
        "Exit status: 0 promoted",
        "2 refused (every reason for every partition is listed",
        "without it Kafka's defaults are assumed",
    ] {
        assert!(run.stdout.contains(needle), "{needle:?} in\n{}", run.stdout);
    }
}
