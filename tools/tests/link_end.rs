//! A promoted or deleted link is the expected end of the services that move its data: `ship`, `ship --store`,
//! `apply --listen` and `apply --follow` stop with exit 0 and one line naming the link's state, whether the link
//! was closed before they started or while they ran (a supervisor must neither restart them nor record a failure).
//! A one-shot `seed` asked to ship under a closed link is still refused (exit 2). And the lifecycle's own promise:
//! asking for the state a link is in (deleting a deleted link) is a no-op, and creating a link whose name is taken
//! says the existing link's state.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::service::{wait_mirrored, Service, PATIENCE};
use common::{data_batches, segmirror, write_log_dir, PartitionSpec, Run, SegmentSpec};

fn partition(topic: &str) -> PartitionSpec {
    PartitionSpec::new(topic, 0, vec![SegmentSpec::new(data_batches(0, 10, 3, 0))]).index_interval(4096)
}

/// `segmirror link ARGS --catalog CATALOG`.
fn link(catalog: &Path, args: &[&str]) -> Run {
    let mut all = vec!["link", "--catalog", catalog.to_str().unwrap()];
    all.extend_from_slice(args);
    segmirror(all)
}

fn create(catalog: &Path, name: &str, transport: &str, address: &str) {
    link(
        catalog,
        &["create", name, "--transport", transport, "--address", address],
    )
    .expect_code(0);
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Waits for `service` to exit on its own; its exit code and log.
fn wait_exit(service: &mut Service) -> (Option<i32>, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = service.child.try_wait().unwrap() {
            // Let the reader thread drain the pipe.
            std::thread::sleep(Duration::from_millis(200));
            return (status.code(), service.log());
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{} kept running:\n{}",
            service.name,
            service.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Exit 0 with exactly one line naming the link and its state, and no error line.
#[track_caller]
fn assert_ended(code: Option<i32>, log: &str, state: &str) {
    assert_eq!(code, Some(0), "{log}");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("is {state}")) && l.contains("stopped"))
        .collect();
    assert_eq!(lines.len(), 1, "one line saying the link is {state}:\n{log}");
    assert!(!log.contains("error"), "{log}");
}

#[test]
fn direct_services_end_with_exit_0_when_their_link_is_promoted_or_deleted() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(&source, &[partition("orders")]);
    let mirror = root.path().join("mirror");
    let ship_cat = root.path().join("source-host.sqlite");
    let apply_cat = root.path().join("mirror-host.sqlite");
    let apply_args = |listen: &str| {
        strings(&[
            "apply",
            "--listen",
            listen,
            "--mirror",
            mirror.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
            "--catalog",
            apply_cat.to_str().unwrap(),
        ])
    };
    let ship_args = |addr: &str| {
        strings(&[
            "ship",
            "--log-dir",
            source.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
            "--upto",
            "log-end",
            "--connect",
            addr,
            "--catalog",
            ship_cat.to_str().unwrap(),
        ])
    };
    create(&ship_cat, "dr", "direct", "127.0.0.1:1");
    create(&apply_cat, "dr", "direct", "127.0.0.1:1");
    let mut applier = Service::start_quiet("apply", &apply_args("127.0.0.1:0"));
    let addr = applier.bound();
    let mut shipper = Service::start_quiet("ship", &ship_args(&addr));
    wait_mirrored(&source, &mirror, "orders-0", &mut [&mut applier, &mut shipper]);

    // While running: the source host's record promoted ends `ship`, the mirror host's deleted ends the applier.
    link(&ship_cat, &["promote", "dr"]).expect_code(0);
    let (code, log) = wait_exit(&mut shipper);
    assert_ended(code, &log, "promoted");
    link(&apply_cat, &["delete", "dr"]).expect_code(0);
    let (code, log) = wait_exit(&mut applier);
    assert_ended(code, &log, "deleted");

    // At start: each is told at once, exit 0.
    let mut applier = Service::start_quiet("apply", &apply_args("127.0.0.1:0"));
    let (code, log) = wait_exit(&mut applier);
    assert_ended(code, &log, "deleted");
    let mut shipper = Service::start_quiet("ship", &ship_args("127.0.0.1:1"));
    let (code, log) = wait_exit(&mut shipper);
    assert_ended(code, &log, "promoted");
}

#[test]
fn bucket_services_end_with_exit_0_and_seed_is_still_refused() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(&source, &[partition("orders")]);
    let store = root.path().join("bucket");
    let mirror = root.path().join("mirror");
    let ship_cat = root.path().join("source-host.sqlite");
    let apply_cat = root.path().join("mirror-host.sqlite");
    let s = store.to_str().unwrap();
    create(&ship_cat, "bk", "store", s);
    let ship_args = strings(&[
        "ship",
        "--store",
        s,
        "--log-dir",
        source.to_str().unwrap(),
        "--link",
        "bk",
        "--upto",
        "log-end",
        "--catalog",
        ship_cat.to_str().unwrap(),
    ]);
    let follow_args = strings(&[
        "apply",
        "--store",
        s,
        "--mirror",
        mirror.to_str().unwrap(),
        "--link",
        "bk",
        "--follow",
        "--catalog",
        apply_cat.to_str().unwrap(),
    ]);
    let mut shipper = Service::start_quiet("ship --store", &ship_args);
    // The follower needs the store's folder (a mistyped one is an error), which the shipper creates.
    common::service::wait_until("the store created", &mut [&mut shipper], || store.join("bk").is_dir());
    let mut follower = Service::start_quiet("apply --follow", &follow_args);
    wait_mirrored(&source, &mirror, "orders-0", &mut [&mut shipper, &mut follower]);

    // While running.
    link(&ship_cat, &["delete", "bk"]).expect_code(0);
    let (code, log) = wait_exit(&mut shipper);
    assert_ended(code, &log, "deleted");
    link(&apply_cat, &["promote", "bk"]).expect_code(0);
    let (code, log) = wait_exit(&mut follower);
    assert_ended(code, &log, "promoted");

    // At start.
    let mut shipper = Service::start_quiet("ship --store", &ship_args);
    let (code, log) = wait_exit(&mut shipper);
    assert_ended(code, &log, "deleted");
    let mut follower = Service::start_quiet("apply --follow", &follow_args);
    let (code, log) = wait_exit(&mut follower);
    assert_ended(code, &log, "promoted");

    // A one-shot command asked to ship under a deleted link: refused.
    let out = segmirror([
        "seed",
        "--log-dir",
        source.to_str().unwrap(),
        "--store",
        s,
        "--link",
        "bk",
        "--catalog",
        ship_cat.to_str().unwrap(),
    ]);
    out.expect_code(2);
    assert!(out.stderr.contains("is deleted"), "{out}");
}

/// Every move of the README's lifecycle through the CLI: asking for the current state again is a no-op (exit 0,
/// "already"), `deleted` included; any other move out of `deleted` or back from `promoted` is refused naming the
/// state; a second `create` of a live name says the existing link's state.
#[test]
fn the_lifecycle_is_the_readmes_and_a_duplicate_create_names_the_existing_state() {
    let dir = tempfile::tempdir().unwrap();
    let cat = dir.path().join("catalog.sqlite");
    let verb = |state: &str| match state {
        "active" => "resume",
        "paused" => "pause",
        "promoted" => "promote",
        _ => "delete",
    };
    let states = ["active", "paused", "promoted", "deleted"];
    for from in states {
        for to in states {
            let name = format!("{from}-to-{to}");
            create(&cat, &name, "direct", "h:1");
            match from {
                "active" => {}
                "paused" => {
                    link(&cat, &["pause", &name]).expect_code(0);
                }
                other => {
                    link(&cat, &[verb(other), &name]).expect_code(0);
                }
            }
            let out = link(&cat, &[verb(to), &name]);
            let allowed = from == to
                || matches!(
                    (from, to),
                    ("active", "paused") | ("paused", "active") | ("active" | "paused", "promoted") | (_, "deleted")
                ) && from != "deleted";
            if allowed {
                out.expect_code(0);
                let said = if from == to {
                    format!("already {to}")
                } else {
                    format!("{from} -> {to}")
                };
                assert!(out.stdout.contains(&said), "{from} -> {to}:\n{out}");
            } else {
                out.expect_code(2);
                assert!(out.stderr.contains(from), "{from} -> {to} names the state:\n{out}");
            }
            let state: serde_json::Value =
                serde_json::from_str(&link(&cat, &["describe", &name, "--json"]).stdout).unwrap();
            let expected = if allowed { to } else { from };
            assert_eq!(state["state"], expected, "{from} -> {to}");
        }
    }

    create(&cat, "dup", "direct", "h:1");
    link(&cat, &["pause", "dup"]).expect_code(0);
    let out = link(&cat, &["create", "dup", "--transport", "store", "--address", "/b"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("\"dup\" already exists") && out.stderr.contains("state paused"),
        "{out}"
    );
    // Nothing changed.
    let state: serde_json::Value = serde_json::from_str(&link(&cat, &["describe", "dup", "--json"]).stdout).unwrap();
    assert_eq!(
        (state["state"].as_str(), state["transport"].as_str()),
        (Some("paused"), Some("direct"))
    );
}
