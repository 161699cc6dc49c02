use segmirror_catalog::{LinkSpec, SegmentVersion, Upsert};

use super::*;

fn lag(topic: &str, partition: i32, installed: Option<i64>) -> TailLag {
    TailLag {
        topic: topic.into(),
        partition,
        source_log_end_offset: None,
        source_high_watermark: None,
        source_seen_at_ms: None,
        shipped_end_offset: None,
        installed_end_offset: installed,
        lag_offsets: None,
        lag_bytes: None,
        lag_seconds: None,
        claim_node: None,
        claim_epoch: None,
        lag_unknown: None,
        problem: None,
    }
}

#[test]
fn a_catalog_that_does_not_exist_is_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let e = open(&path).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.starts_with("no catalog at"), "{e}");
    assert!(!path.exists());
    assert_eq!(catalog_paths(Some(path.clone()), None).unwrap(), [path]);
}

#[test]
fn the_installed_end_is_the_greater_of_the_catalog_and_the_tail_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let mut catalog = Catalog::open(&path).unwrap();
    catalog
        .create_link(&LinkSpec {
            name: "east".into(),
            store_url: "file:///bucket".into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
    let key = PartitionKey::new("east", "orders", 0);
    let Upsert::Created(p) = catalog.upsert_partition(&key, "src", 0).unwrap() else {
        panic!("created")
    };
    let version = SegmentVersion {
        base_offset: 0,
        next_offset: 120,
        last_offset: 119,
        size: 1 << 20,
        sha256: [0; 32],
        manifest_key: "m".into(),
        sealed: true,
    };
    catalog.mark_installed(p.id, "src", &version).unwrap();
    let status = catalog.status().unwrap();
    let p = &status.links[0].partitions[0];
    assert_eq!(
        true_end(p, Some(&lag("orders", 0, Some(150)))).installed_end_offset,
        Some(150)
    );
    assert_eq!(
        true_end(p, Some(&lag("orders", 0, Some(100)))).installed_end_offset,
        Some(120)
    );
    assert_eq!(true_end(p, None).installed_end_offset, Some(120));

    let doc = status_doc(&catalog, &path, &status).unwrap();
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(json["links"][0]["partitions"][0]["installed_end_offset"], 120);
    assert_eq!(
        json["links"][0]["partitions"][0]["last_event"]["kind"],
        "segment_installed"
    );
    assert!(json["links"][0]["last_event"]["kind"].is_string(), "{json}");
    assert!(json.get("bucket").is_none(), "only with --bucket: {json}");
}
