//! `segmirror failover` without a broker: a step that fails stops the failover there (exit 2, naming the step and
//! why), the journal (`--status`) shows what is done and what was cut short, and a rerun skips the finished steps
//! and starts the interrupted one again (its attempts counted). The whole sequence against real brokers, with a
//! process killed mid-step: `tests/tests/e2e_failover.rs`.

mod common;

use std::path::Path;

use common::{data_batches, segmirror, write_log_dir, PartitionSpec, Run, SegmentSpec};

fn failover(mirror: &Path, catalog: &Path, extra: &[&str]) -> Run {
    let mut args = vec![
        "failover",
        "--link",
        "dr",
        "--mirror",
        mirror.to_str().unwrap(),
        "--catalog",
        catalog.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    segmirror(args)
}

/// The journal line of `step` in `failover --status`, split into words.
fn journal_line(status: &str, step: &str) -> Vec<String> {
    status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(step))
        .unwrap_or_else(|| panic!("no {step} in\n{status}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn a_failed_step_stops_the_failover_and_a_rerun_skips_what_is_done_and_redoes_it() {
    let root = tempfile::tempdir().unwrap();
    let (source, store, mirror, target) = (
        root.path().join("source"),
        root.path().join("store"),
        root.path().join("mirror"),
        root.path().join("target"),
    );
    let catalog = root.path().join("catalog.sqlite");
    write_log_dir(
        &source,
        &[PartitionSpec::new(
            "orders",
            0,
            vec![SegmentSpec::new(data_batches(0, 10, 3, 0))],
        )],
    );
    std::fs::create_dir_all(&store).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    segmirror(["seed", "--log-dir", &s(&source), "--store", &s(&store), "--link", "dr"]).expect_code(0);
    segmirror([
        "apply",
        "--store",
        &s(&store),
        "--mirror",
        &s(&mirror),
        "--catalog",
        &s(&catalog),
        "--link",
        "dr",
    ])
    .expect_code(0);
    // Nothing listens on the discard port; the topics step fails before it would connect anyway: the link carries
    // no metadata (the source had no metadata log).
    let cut_now = [
        "--now",
        "--bootstrap",
        "127.0.0.1:9",
        "--log-dir",
        target.to_str().unwrap(),
    ];

    let first = failover(&mirror, &catalog, &cut_now);
    first.expect_code(2);
    assert!(first.stdout.contains("[cut] link dr is promoted"), "{first}");
    assert!(
        first
            .stdout
            .contains("[cut] RPO: 0 record offset(s), 0 byte(s) and 0 shipped version(s)")
            && first.stdout.contains("(30 offsets installed;"),
        "{first}"
    );
    assert!(
        first.stderr.contains("step topics failed") && first.stderr.contains("no metadata of link dr recorded"),
        "{first}"
    );
    let status = failover(&mirror, &catalog, &["--status"]);
    status.expect_code(0);
    assert!(status.stdout.contains("link dr: state promoted"), "{status}");
    assert_eq!(journal_line(&status.stdout, "cut")[1..3], ["done", "1"], "{status}");
    assert_eq!(
        journal_line(&status.stdout, "topics")[1..5],
        ["started,", "not", "finished", "1"],
        "{status}"
    );
    assert_eq!(
        journal_line(&status.stdout, "install")[1..3],
        ["not", "started"],
        "{status}"
    );

    let rerun = failover(&mirror, &catalog, &cut_now);
    rerun.expect_code(2);
    assert!(
        rerun.stdout.contains("[cut] done earlier: RPO: 0 record offset(s)"),
        "{rerun}"
    );
    assert!(
        rerun
            .stdout
            .contains("[topics] interrupted earlier; redoing it (attempt 2)"),
        "{rerun}"
    );
    assert!(
        !rerun.stdout.contains("[cut] link dr is promoted"),
        "the cut is not redone: {rerun}"
    );
    let status = failover(&mirror, &catalog, &["--status"]);
    assert_eq!(journal_line(&status.stdout, "cut")[1..3], ["done", "1"], "{status}");
    assert_eq!(journal_line(&status.stdout, "topics")[4], "2", "{status}");

    // Without --drain or --now (and not --status), nothing runs.
    let bare = failover(&mirror, &catalog, &["--bootstrap", "127.0.0.1:9", "--log-dir", "x"]);
    bare.expect_code(2);
    assert!(bare.stderr.contains("--drain"), "{bare}");
}
