//! `segmirror seed` reruns with the memory it keeps by default in the data directory: a rerun with nothing new reads
//! no byte of any segment beyond the bounded window around each active segment's shipped end (the report's
//! `tail_check_bytes`) and ships nothing; `--memory FILE` names another memory.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How long the files must be left alone before a seed records facts about them (the seed memory's racy margin,
/// `segmirror_shipper::bucket::seed::RACY_MARGIN`, plus a little).
const PAST_RACY_MARGIN: Duration = Duration::from_millis(2100);

fn segmirror(home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", home)
        .args(args)
        .output()
        .expect("run segmirror");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "segmirror panicked: {stderr}");
    (
        out.status.code().expect("exit code, not a signal"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    )
}

/// Sums over a seed's JSON report: (segments shipped, bytes uploaded, log bytes scanned, tail check bytes).
fn sums(stdout: &str) -> (u64, u64, u64, u64) {
    let report: serde_json::Value = serde_json::from_str(stdout).expect("a JSON report");
    let parts = report["partitions"].as_array().expect("partitions");
    assert!(!parts.is_empty());
    let sum = |field: &str| parts.iter().map(|p| p[field].as_u64().expect(field)).sum::<u64>();
    for p in parts {
        assert_eq!(p["status"]["status"], "complete", "{p}");
    }
    (
        sum("segments_shipped"),
        sum("bytes_uploaded"),
        sum("log_bytes_scanned"),
        sum("tail_check_bytes"),
    )
}

#[test]
fn a_rerun_without_flags_reads_only_the_window_of_each_active_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, source, store) = (
        tmp.path().join("home"),
        tmp.path().join("source"),
        tmp.path().join("store"),
    );
    std::fs::create_dir_all(&home).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (code, _, err) = segmirror(&home, &["generate", "--out", &s(&source), "--no-fsync"]);
    assert_eq!(code, 0, "{err}");
    std::thread::sleep(PAST_RACY_MARGIN);
    let seed = ["seed", "--json", "--log-dir", &s(&source), "--store", &s(&store)];

    let (code, out, err) = segmirror(&home, &seed);
    assert_eq!(code, 0, "{err}");
    let (shipped, uploaded, scanned, checked) = sums(&out);
    assert!(shipped > 0 && uploaded > 0 && scanned > 0, "{out}");
    assert_eq!(checked, 0, "nothing remembered yet: {out}");
    let memory = home.join("seed-memory").join("default.json");
    assert!(memory.is_file(), "no default memory at {}", memory.display());

    // Nothing new: no segment byte read but the windows, nothing uploaded.
    let (code, out, err) = segmirror(&home, &seed);
    assert_eq!(code, 0, "{err}");
    let (shipped, uploaded, scanned, checked) = sums(&out);
    assert_eq!((shipped, uploaded, scanned), (0, 0, 0), "{out}");
    assert!(checked > 0, "{out}");
    let partitions = serde_json::from_str::<serde_json::Value>(&out).unwrap()["partitions"]
        .as_array()
        .unwrap()
        .len() as u64;
    assert!(checked <= partitions * 128 * 1024, "{out}");

    // `--memory FILE` names another memory: empty, so this rerun scans (and still ships nothing).
    let other = tmp.path().join("other-memory.json");
    let mut with_file = seed.to_vec();
    let other_arg = s(&other);
    with_file.extend(["--memory", &other_arg]);
    let (code, out, err) = segmirror(&home, &with_file);
    assert_eq!(code, 0, "{err}");
    let (shipped, _, scanned, checked) = sums(&out);
    assert_eq!((shipped, checked), (0, 0), "{out}");
    assert!(scanned > 0, "{out}");
    assert!(other.is_file());
}
