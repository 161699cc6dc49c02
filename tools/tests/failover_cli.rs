//! `segmirror failover` without a broker: a step that fails stops the failover there (exit 2, naming the step and
//! why), the journal (`--status`) shows what is done and what was cut short, and a rerun skips the finished steps
//! and starts the interrupted one again (its attempts counted). The whole sequence against real brokers, with a
//! process killed mid-step: `tests/tests/e2e_failover.rs`.

mod common;

use std::path::{Path, PathBuf};

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

/// A link `dr` of one partition (`orders`-0, offsets 0..30 in one segment) seeded into a bucket and applied once.
struct Seeded {
    root: tempfile::TempDir,
    source: PathBuf,
    store: PathBuf,
    mirror: PathBuf,
    target: PathBuf,
    catalog: PathBuf,
}

fn first_segment() -> SegmentSpec {
    SegmentSpec::new(data_batches(0, 10, 3, 0))
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

impl Seeded {
    fn new() -> Seeded {
        let root = tempfile::tempdir().unwrap();
        let at = |name: &str| root.path().join(name);
        let seeded = Seeded {
            source: at("source"),
            store: at("store"),
            mirror: at("mirror"),
            target: at("target"),
            catalog: at("catalog.sqlite"),
            root,
        };
        write_log_dir(
            &seeded.source,
            &[PartitionSpec::new("orders", 0, vec![first_segment()])],
        );
        std::fs::create_dir_all(&seeded.store).unwrap();
        std::fs::create_dir_all(&seeded.target).unwrap();
        seeded.seed();
        let (store, mirror, catalog) = (s(&seeded.store), s(&seeded.mirror), s(&seeded.catalog));
        segmirror([
            "apply",
            "--store",
            &store,
            "--mirror",
            &mirror,
            "--catalog",
            &catalog,
            "--link",
            "dr",
        ])
        .expect_code(0);
        seeded
    }

    fn seed(&self) {
        segmirror([
            "seed",
            "--log-dir",
            &s(&self.source),
            "--store",
            &s(&self.store),
            "--link",
            "dr",
        ])
        .expect_code(0);
    }
}

#[test]
fn a_failed_step_stops_the_failover_and_a_rerun_skips_what_is_done_and_redoes_it() {
    let Seeded {
        root: _root,
        mirror,
        target,
        catalog,
        ..
    } = Seeded::new();
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

    // The rerun with --json: stdout is the report alone (the progress lines go to stderr).
    let rerun = failover(&mirror, &catalog, &[&cut_now[..], &["--json"][..]].concat());
    rerun.expect_code(2);
    assert!(
        rerun.stderr.contains("[cut] done earlier: RPO: 0 record offset(s)"),
        "{rerun}"
    );
    assert!(
        rerun
            .stderr
            .contains("[topics] interrupted earlier; redoing it (attempt 2)"),
        "{rerun}"
    );
    assert!(
        !rerun.stderr.contains("[cut] link dr is promoted"),
        "the cut is not redone: {rerun}"
    );
    let report: serde_json::Value = serde_json::from_str(&rerun.stdout).unwrap_or_else(|e| panic!("{e}: {rerun}"));
    assert_eq!(report["format"], "segmirror.failover-report.v1", "{report:#}");
    assert_eq!(report["link"], "dr");
    assert_eq!(report["link_state_at_start"], "promoted");
    assert_eq!(report["finished"], false);
    let steps = report["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["cut", "topics", "stop-brokers", "install", "start-brokers", "offsets"]
    );
    let status_of = |i: usize| {
        (
            steps[i]["status"].as_str().unwrap(),
            steps[i]["attempts"].as_u64().unwrap(),
        )
    };
    assert_eq!(status_of(0), ("done-earlier", 1), "{report:#}");
    assert!(
        steps[0]["took_ms"].is_null() && steps[0]["journal_took_ms"].is_u64(),
        "{report:#}"
    );
    assert!(
        steps[0]["outcome"]
            .as_str()
            .unwrap()
            .starts_with("RPO: 0 record offset(s)"),
        "{report:#}"
    );
    assert_eq!(status_of(1), ("failed", 2), "{report:#}");
    assert!(
        steps[1]["took_ms"].is_u64() && steps[1]["outcome"].is_null(),
        "{report:#}"
    );
    assert!(
        steps[1]["error"]
            .as_str()
            .unwrap()
            .contains("no metadata of link dr recorded"),
        "{report:#}"
    );
    for i in 2..6 {
        assert_eq!(status_of(i), ("not-run", 0), "{report:#}");
    }
    let cut = &report["cut"];
    assert_eq!(
        cut["rpo"],
        serde_json::json!({
            "left_offsets": 0, "left_bytes": 0, "pending_versions": 0,
            "partitions_behind": 0, "partitions": 1, "installed_offsets": 30
        }),
        "{report:#}"
    );
    assert_eq!(
        cut["left_behind"],
        serde_json::json!([{
            "topic": "orders", "partition": 0, "installed_end": 30, "known_source_end": 30, "bucket_end": 30,
            "left_offsets": 0, "left_bytes": null, "pending_versions": 0
        }]),
        "{report:#}"
    );
    assert!(report["offsets"].is_null(), "{report:#}");
    let status = failover(&mirror, &catalog, &["--status"]);
    assert_eq!(journal_line(&status.stdout, "cut")[1..3], ["done", "1"], "{status}");
    assert_eq!(journal_line(&status.stdout, "topics")[4], "2", "{status}");

    // Without --drain or --now (and not --status), nothing runs.
    let bare = failover(&mirror, &catalog, &["--bootstrap", "127.0.0.1:9", "--log-dir", "x"]);
    bare.expect_code(2);
    assert!(bare.stderr.contains("--drain"), "{bare}");
}

/// A bucket link drains from the bucket's manifests, not only from what the catalog learned: a version shipped
/// after the applier's last run is in no catalog, yet the drain does not count the link drained, and the report
/// (here `--json`) says per partition what the bucket holds beyond the installed end.
#[test]
fn a_bucket_drain_waits_for_the_bucket_s_newest_version_and_reports_it_left_behind() {
    let seeded = Seeded::new();
    let (mirror, target, catalog) = (&seeded.mirror, &seeded.target, &seeded.catalog);
    // The source grows and the shipper ships it; no applier runs again.
    write_log_dir(
        &seeded.source,
        &[PartitionSpec::new(
            "orders",
            0,
            vec![first_segment(), SegmentSpec::new(data_batches(30, 10, 3, 0))],
        )],
    );
    seeded.seed();

    let drain = failover(
        mirror,
        catalog,
        &[
            "--drain",
            "--drain-timeout",
            "1",
            "--drain-quiet",
            "0.2",
            "--bootstrap",
            "127.0.0.1:9",
            "--log-dir",
            target.to_str().unwrap(),
            "--json",
        ],
    );
    drain.expect_code(2);
    assert!(drain.stderr.contains("did not drain within 1 s"), "{drain}");
    assert!(drain.stderr.contains("BUCKET-END"), "the table goes to stderr: {drain}");
    let report: serde_json::Value = serde_json::from_str(&drain.stdout).unwrap_or_else(|e| panic!("{e}: {drain}"));
    assert_eq!(report["steps"][0]["status"], "failed", "{report:#}");
    assert_eq!(report["cut"]["rpo"]["left_offsets"], 30, "{report:#}");
    assert_eq!(report["cut"]["rpo"]["partitions_behind"], 1, "{report:#}");
    let row = &report["cut"]["left_behind"][0];
    assert_eq!(
        (&row["installed_end"], &row["bucket_end"], &row["left_offsets"]),
        (&serde_json::json!(30), &serde_json::json!(60), &serde_json::json!(30)),
        "{report:#}"
    );
    let status = failover(mirror, catalog, &["--status"]);
    assert!(
        status.stdout.contains("link dr: state active"),
        "an undrained link is not cut: {status}"
    );
}

#[test]
fn a_cut_made_now_goes_ahead_when_the_bucket_is_gone_and_says_what_it_could_not_count() {
    let seeded = Seeded::new();
    // The source site, its bucket included, is lost: the operator fails over with what is installed.
    std::fs::remove_dir_all(&seeded.store).unwrap();
    let now = failover(
        &seeded.mirror,
        &seeded.catalog,
        &[
            "--now",
            "--bootstrap",
            "127.0.0.1:9",
            "--log-dir",
            seeded.target.to_str().unwrap(),
            "--json",
        ],
    );
    // The topics step fails (nothing listens there); the cut is done.
    now.expect_code(2);
    assert!(
        now.stderr.contains("[cut] warning: the link's bucket cannot be read"),
        "{now}"
    );
    let report: serde_json::Value = serde_json::from_str(&now.stdout).unwrap_or_else(|e| panic!("{e}: {now}"));
    assert_eq!(report["steps"][0]["status"], "done", "{report:#}");
    assert_eq!(report["cut"]["left_behind"][0]["installed_end"], 30, "{report:#}");
    assert!(report["cut"]["left_behind"][0]["bucket_end"].is_null(), "{report:#}");
    let status = failover(&seeded.mirror, &seeded.catalog, &["--status"]);
    assert!(status.stdout.contains("link dr: state promoted"), "{status}");
}
