//! `segmirror verify` on a store URL: the bucket audited as a scrubber would.

use std::path::Path;
use std::process::Command;

fn segmirror(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .args(args)
        .output()
        .expect("run segmirror");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "segmirror panicked: {stderr}");
    (
        out.status.code().expect("exit code, not a signal"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Generate the sample set and seed it into a local folder store; returns the store URL.
fn seeded_store(tmp: &Path) -> String {
    let log_dir = tmp.join("source");
    let store = tmp.join("store");
    let (code, _) = segmirror(&["generate", "--out", log_dir.to_str().unwrap(), "--no-fsync"]);
    assert_eq!(code, 0);
    let (code, out) = segmirror(&[
        "seed",
        "--log-dir",
        log_dir.to_str().unwrap(),
        "--store",
        store.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    format!("file://{}", store.display())
}

fn find(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(find(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn seeded_store_is_sound_and_a_flipped_byte_is_found() {
    let tmp = tempfile::tempdir().unwrap();
    let url = seeded_store(tmp.path());
    let (code, out) = segmirror(&["verify", &url]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("SOUND: store prefix"), "{out}");

    let (code, out) = segmirror(&["verify", "--json", &url]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["sound"], true);
    assert!(doc["stores"][0]["objects"].as_u64().unwrap() > 100);

    let logs = find(&tmp.path().join("store"), ".log");
    let victim = &logs[0];
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(victim, bytes).unwrap();
    let (code, out) = segmirror(&["verify", "--json", &url]);
    assert_eq!(code, 1, "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let findings = doc["stores"][0]["findings"].as_array().unwrap();
    let key = victim
        .strip_prefix(tmp.path().join("store"))
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        findings
            .iter()
            .any(|f| f["check"] == "hash_mismatch" && f["path"] == key.as_str()),
        "no hash_mismatch naming {key}: {out}"
    );
}

#[test]
fn missing_data_object_and_missing_manifest_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let url = seeded_store(tmp.path());
    let store = tmp.path().join("store");
    let index = find(&store, ".timeindex").into_iter().next().unwrap();
    std::fs::remove_file(&index).unwrap();
    let (code, out) = segmirror(&["verify", &url]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("[missing_object]"), "{out}");

    // A manifest removed from the middle of a partition leaves a gap between its neighbours.
    let manifests: Vec<_> = find(&store, ".json")
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/manifests/"))
        .collect();
    let dir = manifests[0].parent().unwrap().to_path_buf();
    let in_dir: Vec<_> = manifests.iter().filter(|m| m.parent() == Some(dir.as_path())).collect();
    assert!(in_dir.len() >= 3, "sample partitions have several segments");
    std::fs::remove_file(in_dir[1]).unwrap();
    let (code, out) = segmirror(&["verify", &url]);
    assert_eq!(code, 1);
    assert!(out.contains("[offset_gap]"), "{out}");
    assert!(
        out.contains("[orphan_object]"),
        "data without a manifest is reported: {out}"
    );
}

#[test]
fn unreachable_store_is_a_usage_or_io_error() {
    let (code, _) = segmirror(&["verify", "s3://"]);
    assert_eq!(code, 2);
}
