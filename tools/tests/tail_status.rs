//! `segmirror status` of a mirror fed by the direct link: one end offset per partition that is true whatever
//! delivered it (the catalog records sealed segments; the tail applier appends to the active one in between), and
//! lag figures that are absent, not 0, while the link is paused and the source grows unheard of.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::service::{log_files, same_files, wait_until, Service, PATIENCE};
use common::{data_batches, segmirror, write_log_dir, PartitionSpec, SegmentSpec};

/// One partition: a sealed segment (offsets 0..60) and an active one (60..90).
fn source(root: &Path) -> std::path::PathBuf {
    let dir = root.join("source");
    write_log_dir(
        &dir,
        &[PartitionSpec::new(
            "orders",
            0,
            vec![
                SegmentSpec::new(data_batches(0, 20, 3, 0)),
                SegmentSpec::new(data_batches(60, 10, 3, 0)),
            ],
        )
        .index_interval(4096)],
    );
    dir
}

/// Appends in place, as a broker does.
fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// `status --json --catalog CATALOG`.
fn status(catalog: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", common::service::test_home())
        .args(["status", "--json", "--catalog"])
        .arg(catalog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (the link's partition row, the tail row) of orders-0.
fn rows(doc: &serde_json::Value) -> (serde_json::Value, serde_json::Value) {
    let partition = doc["links"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == "orders")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let tail = doc["tail"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == "orders")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    (partition, tail)
}

fn wait_status(
    catalog: &Path,
    services: &mut [&mut Service],
    want: impl Fn(&serde_json::Value, &serde_json::Value) -> bool,
) -> (serde_json::Value, serde_json::Value) {
    let start = Instant::now();
    loop {
        let (p, t) = rows(&status(catalog));
        if want(&p, &t) {
            return (p, t);
        }
        for s in services.iter_mut() {
            assert!(s.running(), "{} exited:\n{}", s.name, s.log());
        }
        assert!(start.elapsed() < PATIENCE, "status never showed it: {p:#}\n{t:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_tailed_partitions_end_is_true_and_a_paused_links_lag_is_unknown() {
    let root = tempfile::tempdir().unwrap();
    let source = source(root.path());
    let mirror = root.path().join("mirror");
    let catalog = root.path().join("mirror.sqlite");
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut applier = Service::start_quiet(
        "apply",
        &args(&[
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--mirror",
            mirror.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
            "--catalog",
            catalog.to_str().unwrap(),
        ]),
    );
    let addr = applier.bound();
    let mut shipper = Service::start_quiet(
        "ship",
        &args(&[
            "ship",
            "--log-dir",
            source.to_str().unwrap(),
            "--link",
            "dr",
            "--plaintext",
            "--upto",
            "log-end",
            "--connect",
            &addr,
        ]),
    );
    let files = log_files(&source, &source);
    wait_until("mirrored", &mut [&mut applier, &mut shipper], || {
        same_files(&source, &mirror, &files)
    });

    // Sealed 0..60 in the catalog, appended through 90: the partition's end is 90 in both places.
    let (partition, tail) = wait_status(&catalog, &mut [&mut applier, &mut shipper], |p, t| {
        t["installed_end_offset"] == 90 && t["lag_offsets"] == 0 && p.is_object()
    });
    assert_eq!(partition["installed_end_offset"], 90, "{partition:#}");
    assert_eq!(
        partition["segments_installed"], 1,
        "the catalog records the sealed segment: {partition:#}"
    );
    assert!(tail.get("lag_unknown").is_none(), "{tail:#}");

    // Paused on the mirror host, the source grows: no report comes, so the lag is unknown, not 0.
    segmirror(["link", "--catalog", catalog.to_str().unwrap(), "pause", "dr"]).expect_code(0);
    applier.wait_for("link \"dr\" is paused");
    let active = source.join("orders-0").join("00000000000000000060.log");
    for batch in data_batches(90, 2, 4, 0) {
        append(&active, &batch);
    }
    std::thread::sleep(Duration::from_secs(2));
    let (partition, tail) = rows(&status(&catalog));
    assert_eq!(partition["installed_end_offset"], 90, "{partition:#}");
    for figure in ["lag_offsets", "lag_bytes", "lag_seconds"] {
        assert!(tail[figure].is_null(), "{figure} while paused: {tail:#}");
    }
    let why = tail["lag_unknown"].as_str().unwrap_or_else(|| panic!("{tail:#}"));
    assert!(why.contains("paused"), "{why}");
    // The last report's own figures stay, as what they are.
    assert_eq!(tail["source_log_end_offset"], 90, "{tail:#}");
    let table = segmirror(["status", "--catalog", catalog.to_str().unwrap()]);
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with("orders-0 "))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // partition, source end, seen ("Ns", "ago"), hw, installed, lag offsets, lag bytes, lag s
    assert_eq!(&cells[5..9], &["90", "?", "?", "?"], "{row}");
    assert!(row.contains("paused"), "{row}");

    // Resumed: the mirror catches up and the figures are known again.
    segmirror(["link", "--catalog", catalog.to_str().unwrap(), "resume", "dr"]).expect_code(0);
    wait_until("mirrored again", &mut [&mut applier, &mut shipper], || {
        same_files(&source, &mirror, &files)
    });
    let (partition, tail) = wait_status(&catalog, &mut [&mut applier, &mut shipper], |_, t| {
        t["installed_end_offset"] == 98 && t["lag_offsets"] == 0
    });
    assert_eq!(partition["installed_end_offset"], 98, "{partition:#}");
    assert!(tail.get("lag_unknown").is_none(), "{tail:#}");
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "{log}");
    let (code, log) = applier.stop();
    assert_eq!(code, Some(0), "{log}");
}
