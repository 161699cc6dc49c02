//! `segmirror link` as an operator runs it, and the services following their link records: the lifecycle with its
//! refusals (exit 2 naming the state), list/describe as table and JSON, a paused link on either side moving
//! nothing until resumed (then the mirror catches up byte for byte), the shipper following a changed topics regex
//! without a restart, promoted links ending `ship` (exit 0) and deleted ones refused by `seed`. No broker: the source log dirs are
//! written by the test-data writer. Each test has its own catalogs (`--catalog`), never the user's data directory.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::service::{wait_mirrored, Service, PATIENCE};
use common::{create_partition, data_batches, segmirror, write_log_dir, PartitionSpec, Run, SegmentSpec};

fn partition(topic: &str) -> PartitionSpec {
    PartitionSpec::new(topic, 0, vec![SegmentSpec::new(data_batches(0, 10, 3, 0))]).index_interval(4096)
}

/// `segmirror link ARGS --catalog CATALOG`.
fn link(catalog: &Path, args: &[&str]) -> Run {
    let mut all = vec!["link", "--catalog", catalog.to_str().unwrap()];
    all.extend_from_slice(args);
    segmirror(all)
}

/// Longer than a gate interval and a rediscovery round several times over: what a paused link must not move in.
const QUIET: Duration = Duration::from_secs(3);

#[test]
fn the_lifecycle_refuses_what_it_must_and_lists_as_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let cat = dir.path().join("catalog.sqlite");
    let out = link(&cat, &["list"]);
    out.expect_code(2);
    assert!(out.stderr.contains("does not exist"), "{out}");

    link(
        &cat,
        &[
            "create",
            "dr",
            "--transport",
            "direct",
            "--address",
            "mirror:9400",
            "--source",
            "dc1",
            "--target",
            "dc2",
            "--topics-regex",
            "orders.*",
            "--consumer-groups-regex",
            "app-.*",
        ],
    )
    .expect_code(0)
    .expect_stdout("created link dr (id ");
    link(&cat, &["create", "dr", "--transport", "store", "--address", "/b"]).expect_code(2);
    link(
        &cat,
        &[
            "create",
            "bad",
            "--transport",
            "store",
            "--address",
            "/b",
            "--topics-regex",
            "a(",
        ],
    )
    .expect_code(2);
    link(
        &cat,
        &["create", "bad", "--transport", "direct", "--address", "no-port"],
    )
    .expect_code(2);
    link(&cat, &["create", "a/b", "--transport", "store", "--address", "/b"]).expect_code(2);
    link(
        &cat,
        &["create", "bk", "--transport", "store", "--address", "s3://bucket/p"],
    )
    .expect_code(0);

    let out = link(&cat, &["list"]);
    out.expect_code(0);
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("dr "))
        .unwrap_or_else(|| panic!("{out}"));
    for field in ["active", "direct", "mirror:9400", "dc1", "dc2", "orders.*", "app-.*"] {
        assert!(row.contains(field), "{field} missing from {row:?}");
    }
    let json: serde_json::Value = serde_json::from_str(&link(&cat, &["list", "--json"]).stdout).unwrap();
    let links = json.as_array().unwrap();
    assert_eq!(links.len(), 2);
    assert_eq!(links[0]["name"], "bk");
    assert_eq!(
        (links[0]["transport"].as_str(), links[0]["address"].as_str()),
        (Some("store"), Some("s3://bucket/p"))
    );
    let first_id = links[1]["id"].as_str().unwrap().to_string();
    assert_eq!(first_id.len(), 32);

    link(&cat, &["pause", "dr"])
        .expect_code(0)
        .expect_stdout("active -> paused");
    link(&cat, &["pause", "dr"])
        .expect_code(0)
        .expect_stdout("already paused");
    link(&cat, &["resume", "dr"])
        .expect_code(0)
        .expect_stdout("paused -> active");
    link(&cat, &["alter", "dr", "--topics-regex", "orders.*,pay.*"]).expect_code(0);
    let out = link(&cat, &["promote", "dr"]);
    out.expect_code(0)
        .expect_stdout("active -> promoted")
        .expect_stdout("segmirror promote --mirror");
    for refused in [
        &["resume", "dr"][..],
        &["pause", "dr"],
        &["alter", "dr", "--topics-regex", "x"],
    ] {
        let out = link(&cat, refused);
        out.expect_code(2);
        assert!(out.stderr.contains("promoted"), "{refused:?} names the state:\n{out}");
    }
    link(&cat, &["delete", "dr"])
        .expect_code(0)
        .expect_stdout("promoted -> deleted");
    for refused in [&["resume", "dr"][..], &["pause", "dr"], &["promote", "dr"]] {
        let out = link(&cat, refused);
        out.expect_code(2);
        assert!(out.stderr.contains("is deleted"), "{refused:?} names the state:\n{out}");
    }
    // Asking for the state it is in is a no-op, as for every state.
    link(&cat, &["delete", "dr"])
        .expect_code(0)
        .expect_stdout("already deleted");
    let described: serde_json::Value = serde_json::from_str(&link(&cat, &["describe", "dr", "--json"]).stdout).unwrap();
    assert_eq!(described["state"], "deleted");
    assert_eq!(described["topics_regex"], "orders.*,pay.*");
    assert!(described["deleted_at_ms"].is_i64());
    let kinds: Vec<&str> = described["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[0], "link_state_changed");
    assert!(
        kinds.contains(&"link_config_changed") && kinds.contains(&"link_created"),
        "{kinds:?}"
    );
    link(&cat, &["describe", "nope"]).expect_code(2);

    // Nothing of the deleted link is recorded (no partitions): its name can be used again, by a new link.
    link(&cat, &["create", "dr", "--transport", "store", "--address", "/b"]).expect_code(0);
    let again: serde_json::Value = serde_json::from_str(&link(&cat, &["describe", "dr", "--json"]).stdout).unwrap();
    assert_eq!(again["state"], "active");
    assert_ne!(again["id"].as_str().unwrap(), first_id);
}

/// The whole gate over the direct transport: the shipper's record selects topics and pauses shipping, the
/// applier's record pauses installing; each resume catches up byte for byte; a promoted shipper link stops `ship`.
#[test]
fn paused_links_move_nothing_resumed_ones_catch_up_and_a_changed_topics_regex_is_followed() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(&source, &[partition("orders"), partition("other")]);
    let mirror = root.path().join("mirror");
    let staging = root.path().join("staging");
    let ship_cat = root.path().join("source-host.sqlite");
    let apply_cat = root.path().join("mirror-host.sqlite");

    link(
        &ship_cat,
        &[
            "create",
            "dr",
            "--transport",
            "direct",
            "--address",
            "127.0.0.1:1",
            "--topics-regex",
            "orders.*",
        ],
    )
    .expect_code(0);
    let mut applier = Service::start(
        "apply",
        &[
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--mirror",
            mirror.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
        ]
        .into_iter()
        .chain(["--catalog", apply_cat.to_str().unwrap()])
        .map(String::from)
        .collect::<Vec<_>>(),
    );
    let addr = applier.bound();
    let mut shipper = Service::start(
        "ship",
        &[
            "ship",
            "--log-dir",
            source.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
            "--upto",
            "log-end",
        ]
        .into_iter()
        .chain(["--connect", &addr, "--catalog", ship_cat.to_str().unwrap()])
        .map(String::from)
        .collect::<Vec<_>>(),
    );
    wait_mirrored(&source, &mirror, "orders-0", &mut [&mut applier, &mut shipper]);
    assert!(
        !mirror.join("other-0").exists(),
        "the link's topics regex does not select `other`"
    );

    // Paused on the source host: a new matching topic is not shipped...
    link(&ship_cat, &["pause", "dr"]).expect_code(0);
    shipper.wait_for("link \"dr\" is paused");
    create_partition(&staging, &source, &partition("orders-late"));
    std::thread::sleep(QUIET);
    assert!(!mirror.join("orders-late-0").exists(), "a paused shipper shipped");
    // ...until resumed.
    link(&ship_cat, &["resume", "dr"]).expect_code(0);
    wait_mirrored(&source, &mirror, "orders-late-0", &mut [&mut applier, &mut shipper]);

    // The topics regex changed while running: `other` is picked up without a restart.
    link(&ship_cat, &["alter", "dr", "--topics-regex", "orders.*,other"]).expect_code(0);
    wait_mirrored(&source, &mirror, "other-0", &mut [&mut applier, &mut shipper]);

    // Paused on the mirror host: nothing is installed while the source grows; resumed, it catches up.
    link(&apply_cat, &["pause", "dr"]).expect_code(0);
    applier.wait_for("link \"dr\" is paused");
    create_partition(&staging, &source, &partition("orders-while-applier-paused"));
    std::thread::sleep(QUIET);
    assert!(
        !mirror.join("orders-while-applier-paused-0").exists(),
        "a paused applier installed"
    );
    link(&apply_cat, &["resume", "dr"]).expect_code(0);
    wait_mirrored(
        &source,
        &mirror,
        "orders-while-applier-paused-0",
        &mut [&mut applier, &mut shipper],
    );

    // Promoted on the source host: the link's end; the shipper stops with exit 0, naming the state.
    link(&ship_cat, &["promote", "dr"]).expect_code(0);
    let start = Instant::now();
    while shipper.running() {
        assert!(start.elapsed() < PATIENCE, "ship kept running:\n{}", shipper.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let code = shipper.child.wait().unwrap().code();
    assert_eq!(code, Some(0), "{}", shipper.log());
    assert!(shipper.log().contains("is promoted"), "{}", shipper.log());
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn seed_ships_nothing_for_a_paused_link_follows_its_topics_and_refuses_a_deleted_one() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(&source, &[partition("orders"), partition("other")]);
    let cat = root.path().join("source-host.sqlite");
    let store: PathBuf = root.path().join("bucket");
    let seed = |extra: &[&str]| {
        let mut args = vec![
            "seed",
            "--log-dir",
            source.to_str().unwrap(),
            "--store",
            store.to_str().unwrap(),
            "--link",
            "bk",
            "--catalog",
            cat.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        segmirror(args)
    };
    // --catalog without the link: an error naming the catalog and the command that records it.
    let out = seed(&[]);
    out.expect_code(2);
    assert!(out.stderr.contains("segmirror link create"), "{out}");

    link(
        &cat,
        &[
            "create",
            "bk",
            "--transport",
            "store",
            "--address",
            store.to_str().unwrap(),
            "--topics-regex",
            "orders",
        ],
    )
    .expect_code(0);
    link(&cat, &["pause", "bk"]).expect_code(0);
    let out = seed(&[]);
    out.expect_code(0);
    assert!(out.stderr.contains("is paused: nothing shipped"), "{out}");
    assert!(!store.join("bk").exists(), "a paused link shipped");

    link(&cat, &["resume", "bk"]).expect_code(0);
    seed(&[]).expect_code(0);
    assert!(store.join("bk/orders/0").is_dir());
    assert!(
        !store.join("bk/other").exists(),
        "the link's topics regex selects orders only"
    );
    // The first shipper of the managed link wrote its identity; the applier adopts it and installs.
    let identity: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.join("bk/link@identity.json")).unwrap()).unwrap();
    let id = link(&cat, &["describe", "bk", "--json"]).stdout;
    let id = serde_json::from_str::<serde_json::Value>(&id).unwrap()["id"].clone();
    assert_eq!(identity["id"], id);
    let mirror = root.path().join("mirror");
    let mirror_cat = root.path().join("mirror-host.sqlite");
    let apply = || {
        segmirror([
            "apply",
            "--store",
            store.to_str().unwrap(),
            "--mirror",
            mirror.to_str().unwrap(),
            "--link",
            "bk",
            "--catalog",
            mirror_cat.to_str().unwrap(),
        ])
    };
    let out = apply();
    out.expect_code(0);
    assert!(
        !out.stderr.contains("ignored"),
        "the identity object is no foreign key: {out}"
    );
    assert!(mirror.join("orders-0").is_dir());
    let adopted: serde_json::Value =
        serde_json::from_str(&link(&mirror_cat, &["describe", "bk", "--json"]).stdout).unwrap();
    assert_eq!(adopted["peer_link_id"], id);

    link(&cat, &["delete", "bk"]).expect_code(0);
    let out = seed(&[]);
    out.expect_code(2);
    assert!(out.stderr.contains("is deleted"), "{out}");

    // Recreated under the same name (nothing of the old one was recorded on the source host): a new id, and the
    // bucket of the old link is refused, naming both ids.
    link(
        &cat,
        &[
            "create",
            "bk",
            "--transport",
            "store",
            "--address",
            store.to_str().unwrap(),
        ],
    )
    .expect_code(0);
    let new_id = serde_json::from_str::<serde_json::Value>(&link(&cat, &["describe", "bk", "--json"]).stdout).unwrap()
        ["id"]
        .clone();
    assert_ne!(new_id, id);
    let out = seed(&[]);
    out.expect_code(2);
    for needle in [id.as_str().unwrap(), new_id.as_str().unwrap(), "recreated"] {
        assert!(out.stderr.contains(needle), "{needle} missing:\n{out}");
    }
    // A bucket claimed by another link id is refused by the applier that follows the first one.
    std::fs::write(
        store.join("bk/link@identity.json"),
        serde_json::json!({"format": "segmirror.link-identity.v1", "link": "bk", "id": new_id}).to_string(),
    )
    .unwrap();
    let out = apply();
    out.expect_code(2);
    for needle in [id.as_str().unwrap(), new_id.as_str().unwrap()] {
        assert!(out.stderr.contains(needle), "{needle} missing:\n{out}");
    }
}
