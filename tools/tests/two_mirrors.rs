//! Two mirrors on one host with default flags (one `SEGMIRROR_HOME`, the default link name): each gets its own
//! catalog, both complete byte for byte, `status` shows both; a catalog opened for another mirror root is refused.
//! One store applied one partition at a time and sixteen at a time gives the same two mirrors.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn segmirror(home: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .args(args)
        .env("SEGMIRROR_HOME", home)
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("run segmirror");
    let run = Run {
        code: out.status.code().expect("exit code, not a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!run.stderr.contains("panicked"), "segmirror panicked: {}", run.stderr);
    run
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// A generated source log dir (seed `seed`), seeded with default flags into its own store folder.
fn seeded_source(home: &Path, tmp: &Path, name: &str, seed: u64) -> (PathBuf, PathBuf) {
    let source = tmp.join(format!("{name}-source"));
    let store = tmp.join(format!("{name}-store"));
    let run = segmirror(
        home,
        &[
            "generate",
            "--out",
            s(&source),
            "--seed",
            &seed.to_string(),
            "--no-fsync",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = segmirror(home, &["seed", "--log-dir", s(&source), "--store", s(&store)]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    (source, store)
}

fn apply(home: &Path, store: &Path, mirror: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["apply", "--store", s(store), "--mirror", s(mirror)];
    args.extend_from_slice(extra);
    segmirror(home, &args)
}

/// Partition directories of a log dir or mirror (hidden staging folders and top-level files left out).
fn partitions(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    out.sort();
    out
}

/// Every file of every mirror partition equals its twin in the source, and every source `.log` is in the mirror:
/// the mirror is complete and byte-identical. Returns the number of files compared.
fn assert_identical(source: &Path, mirror: &Path) -> usize {
    let source_parts = partitions(source);
    let mirror_parts = partitions(mirror);
    let names = |v: &[PathBuf]| v.iter().map(|p| p.file_name().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(&mirror_parts), names(&source_parts), "same partitions");
    let mut compared = 0;
    for (src, dst) in source_parts.iter().zip(&mirror_parts) {
        for file in std::fs::read_dir(src).unwrap().map(|e| e.unwrap().path()) {
            if file.extension().is_some_and(|e| e == "log") {
                let twin = dst.join(file.file_name().unwrap());
                assert!(twin.is_file(), "{} is missing from the mirror", twin.display());
            }
        }
        for file in std::fs::read_dir(dst).unwrap().map(|e| e.unwrap().path()) {
            let twin = src.join(file.file_name().unwrap());
            assert_eq!(
                std::fs::read(&file).unwrap(),
                std::fs::read(&twin).unwrap_or_default(),
                "{} differs from {}",
                file.display(),
                twin.display()
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn two_mirrors_on_one_host_each_have_their_own_catalog() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path().canonicalize().unwrap();
    let home = tmp.join("segmirror-home");
    let (source_a, store_a) = seeded_source(&home, &tmp, "a", 1);
    let (source_b, store_b) = seeded_source(&home, &tmp, "b", 2);
    let (mirror_a, mirror_b) = (tmp.join("mirror-a"), tmp.join("mirror-b"));

    let run = apply(&home, &store_a, &mirror_a, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // Before per-mirror catalogs this second apply refused: "the catalog lists segment 0 as installed, but ...".
    let run = apply(&home, &store_b, &mirror_b, &[]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(assert_identical(&source_a, &mirror_a) > 0);
    assert!(assert_identical(&source_b, &mirror_b) > 0);
    let first_log = |source: &Path| std::fs::read(source.join("sample-codecs-0/00000000000000000000.log")).unwrap();
    assert_ne!(
        first_log(&source_a),
        first_log(&source_b),
        "the two sources differ (same names)"
    );

    // The first mirror keeps the data directory's catalog; the second has its own under mirrors/.
    let shared = home.join("catalog.sqlite");
    let catalogs: Vec<PathBuf> = std::fs::read_dir(home.join("mirrors"))
        .unwrap()
        .map(|e| e.unwrap().path().join("catalog.sqlite"))
        .collect();
    assert!(shared.is_file());
    assert_eq!(catalogs.len(), 1, "{catalogs:?}");
    let own_b = &catalogs[0];
    assert!(own_b.is_file());
    let folder = own_b.parent().unwrap().file_name().unwrap().to_str().unwrap();
    assert!(folder.starts_with("mirror-b-"), "{folder}");

    // Reruns find their own catalogs and have nothing left to do.
    for (store, mirror) in [(&store_a, &mirror_a), (&store_b, &mirror_b)] {
        let run = apply(&home, store, mirror, &["--json"]);
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
        let installed: usize = report["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["installed"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(installed, 0, "a rerun installs nothing new: {}", run.stdout);
    }

    // `status` without --mirror shows every catalog with its mirror root.
    let run = segmirror(&home, &["status"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let a_header = format!("catalog {} (mirror root {})", shared.display(), mirror_a.display());
    let b_header = format!("catalog {} (mirror root {})", own_b.display(), mirror_b.display());
    assert!(run.stdout.contains(&a_header), "{}", run.stdout);
    assert!(run.stdout.contains(&b_header), "{}", run.stdout);
    assert!(run.stdout.matches("sample-codecs-0").count() >= 2, "{}", run.stdout);

    let run = segmirror(&home, &["status", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let docs: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let docs = docs.as_array().expect("several catalogs: an array");
    assert_eq!(docs.len(), 2);
    for (doc, mirror, source) in [(&docs[0], &mirror_a, &source_a), (&docs[1], &mirror_b, &source_b)] {
        assert_eq!(doc["mirror_root"], s(mirror));
        let parts = doc["links"][0]["partitions"].as_array().unwrap();
        assert_eq!(parts.len(), partitions(source).len());
        assert!(
            parts.iter().all(|p| p["installed_end_offset"].as_i64().is_some()),
            "{doc}"
        );
    }

    // `status --mirror` shows that mirror's catalog only.
    let run = segmirror(&home, &["status", "--mirror", s(&mirror_b)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with(&b_header), "{}", run.stdout);
    assert!(!run.stdout.contains(s(&shared)), "{}", run.stdout);
}

#[test]
fn a_catalog_opened_for_another_mirror_root_exits_2_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path().canonicalize().unwrap();
    let home = tmp.join("segmirror-home");
    let (_, store) = seeded_source(&home, &tmp, "a", 1);
    let (mirror_a, mirror_b) = (tmp.join("mirror-a"), tmp.join("mirror-b"));
    let catalog = tmp.join("explicit/catalog.sqlite");
    let run = apply(&home, &store, &mirror_a, &["--catalog", s(&catalog)]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);

    // The same catalog for another mirror: refused before anything is installed.
    let run = apply(&home, &store, &mirror_b, &["--catalog", s(&catalog)]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "catalog {} belongs to mirror root {}, not to {}",
            catalog.display(),
            mirror_a.display(),
            mirror_b.display()
        )),
        "{}",
        run.stderr
    );
    assert!(!mirror_b.exists(), "nothing was installed into {}", mirror_b.display());

    // A relative spelling of the recorded root is the same root.
    let run = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .current_dir(&tmp)
        .env("SEGMIRROR_HOME", &home)
        .args(["status", "--mirror", "./mirror-a/../mirror-a"])
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(2),
        "no default catalog for mirror-a: it used --catalog"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .current_dir(&tmp)
        .env("SEGMIRROR_HOME", &home)
        .args([
            "apply",
            "--store",
            s(&store),
            "--mirror",
            "./mirror-a/../mirror-a",
            "--catalog",
        ])
        .arg(&catalog)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
}

#[test]
fn apply_one_partition_at_a_time_or_sixteen_installs_the_same_mirror() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path().canonicalize().unwrap();
    let home = tmp.join("segmirror-home");
    let (source, store) = seeded_source(&home, &tmp, "a", 3);
    let (one, sixteen) = (tmp.join("mirror-one"), tmp.join("mirror-sixteen"));

    let run = apply(&home, &store, &one, &["--parallel", "1", "--json"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let report_one: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let run = apply(&home, &store, &sixteen, &["--parallel", "16", "--json"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let report_sixteen: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();

    let compared = assert_identical(&source, &one);
    assert!(compared > 0);
    assert_eq!(assert_identical(&source, &sixteen), compared);
    // The reports list the same partitions, in the same order, with the same installs and notes.
    let installs = |r: &serde_json::Value| -> Vec<(String, usize)> {
        r["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    format!("{}-{}", p["topic"].as_str().unwrap(), p["partition"]),
                    p["installed"].as_array().map_or(0, Vec::len),
                )
            })
            .collect()
    };
    assert_eq!(installs(&report_one), installs(&report_sixteen));
    assert!(installs(&report_one).iter().all(|(_, n)| *n > 0), "{report_one}");
    assert_eq!(report_one["notes"], report_sixteen["notes"]);

    // Zero partitions at a time is no setting: refused before the mirror is touched.
    let zero = tmp.join("mirror-zero");
    let run = apply(&home, &store, &zero, &["--parallel", "0"]);
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("--parallel"), "{}", run.stderr);
    assert!(run.stderr.contains("must be at least 1"), "{}", run.stderr);
    assert!(!zero.exists(), "nothing created for a refused flag");

    // The same for `seed`, which once read 0 as 1 without a word.
    let store_zero = tmp.join("store-zero");
    let run = segmirror(
        &home,
        &[
            "seed",
            "--log-dir",
            s(&source),
            "--store",
            s(&store_zero),
            "--parallel",
            "0",
        ],
    );
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("--parallel"), "{}", run.stderr);
    assert!(run.stderr.contains("must be at least 1"), "{}", run.stderr);
    assert!(!store_zero.exists(), "nothing created for a refused flag");
}
