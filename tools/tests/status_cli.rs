//! `segmirror status --bucket`: a bucket link's newest versions read from its store, against what is installed —
//! a version shipped after the applier's last run shows as lag; without `--bucket` the store is not read.

mod common;

use std::path::Path;

use common::{data_batches, segmirror, write_log_dir, PartitionSpec, Run, SegmentSpec};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn status_json(catalog: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["status", "--catalog", s(catalog), "--json"];
    args.extend_from_slice(extra);
    let run = segmirror(args);
    run.expect_code(0);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"))
}

fn seed(source: &Path, store: &Path) {
    segmirror(["seed", "--log-dir", s(source), "--store", s(store), "--link", "dr"]).expect_code(0);
}

fn apply(store: &Path, mirror: &Path, catalog: &Path) -> Run {
    segmirror([
        "apply",
        "--store",
        s(store),
        "--mirror",
        s(mirror),
        "--catalog",
        s(catalog),
        "--link",
        "dr",
    ])
}

#[test]
fn status_bucket_shows_what_the_bucket_holds_beyond_what_is_installed() {
    let root = tempfile::tempdir().unwrap();
    let at = |name: &str| root.path().join(name);
    let (source, store, mirror, catalog) = (at("source"), at("store"), at("mirror"), at("catalog.sqlite"));
    std::fs::create_dir_all(&store).unwrap();
    let first = || SegmentSpec::new(data_batches(0, 10, 3, 0));
    write_log_dir(&source, &[PartitionSpec::new("orders", 0, vec![first()])]);
    seed(&source, &store);
    apply(&store, &mirror, &catalog).expect_code(0);

    // Caught up: the bucket's end is installed.
    let doc = status_json(&catalog, &["--bucket"]);
    let link = &doc["bucket"][0];
    assert_eq!(link["link"], "dr", "{doc:#}");
    assert!(link["error"].is_null(), "{doc:#}");
    let row = &link["partitions"][0];
    assert_eq!(
        (&row["topic"], &row["partition"], &row["shipped_end_offset"]),
        (
            &serde_json::json!("orders"),
            &serde_json::json!(0),
            &serde_json::json!(30)
        ),
        "{doc:#}"
    );
    assert_eq!(
        (&row["installed_end_offset"], &row["lag_offsets"], &row["lag_seconds"]),
        (&30.into(), &0.into(), &0.into())
    );

    // The source grows and is shipped; no applier runs: the bucket is 30 offsets ahead.
    write_log_dir(
        &source,
        &[PartitionSpec::new(
            "orders",
            0,
            vec![first(), SegmentSpec::new(data_batches(30, 10, 3, 0))],
        )],
    );
    seed(&source, &store);
    let doc = status_json(&catalog, &["--bucket"]);
    let row = &doc["bucket"][0]["partitions"][0];
    assert_eq!(
        (
            &row["shipped_end_offset"],
            &row["installed_end_offset"],
            &row["lag_offsets"]
        ),
        (&60.into(), &30.into(), &30.into()),
        "{doc:#}"
    );
    assert!(row["uploaded_at_ms"].as_i64().unwrap() > 0, "{doc:#}");
    let table = segmirror(["status", "--catalog", s(&catalog), "--bucket"]);
    table.expect_code(0);
    assert!(table.stdout.contains("bucket of link dr"), "{table}");
    let line = table
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("orders-0") && l.split_whitespace().count() == 5)
        .unwrap_or_else(|| panic!("no bucket row in\n{table}"));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>()[1..4],
        ["60", "30", "30"],
        "{table}"
    );

    // Without --bucket nothing is read from the store.
    let doc = status_json(&catalog, &[]);
    assert!(doc.get("bucket").is_none(), "{doc:#}");

    // Applied: no lag again.
    apply(&store, &mirror, &catalog).expect_code(0);
    let doc = status_json(&catalog, &["--bucket"]);
    assert_eq!(doc["bucket"][0]["partitions"][0]["lag_offsets"], 0, "{doc:#}");

    // A store that cannot be read is reported on its link; status still exits 0 with the catalog's figures.
    std::fs::rename(&store, at("store-moved")).unwrap();
    let doc = status_json(&catalog, &["--bucket"]);
    let error = doc["bucket"][0]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {doc:#}"));
    assert!(error.contains("store"), "{error}");
    assert_eq!(doc["links"][0]["partitions"][0]["installed_end_offset"], 60, "{doc:#}");
}
