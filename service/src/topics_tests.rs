use segmirror_catalog::{Catalog, LinkSpec};

use super::*;

#[test]
fn topics_are_read_from_a_file_and_selected_by_whole_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("source.json");
    std::fs::write(
        &file,
        r#"{"topics": [{"name": "orders", "partitions": 3, "configs": {"cleanup.policy": "compact"}},
                       {"name": "orders-dlq", "partitions": 1, "configs": {}}]}"#,
    )
    .unwrap();
    let topics = read_source_topics(TopicsSource::File(&file)).unwrap().unwrap();
    assert_eq!(topics.len(), 2);
    let kept = select(topics, &Selection::new(None, Some("orders")).unwrap());
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].name.as_str(), kept[0].partitions), ("orders", 3));
}

#[test]
fn a_missing_metadata_log_is_a_format_error_and_an_unrecorded_link_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone");
    assert!(read_source_topics(TopicsSource::MetadataLog(&gone)).unwrap().is_err());
    let mut catalog = Catalog::open(dir.path().join("catalog.sqlite")).unwrap();
    catalog
        .create_link(&LinkSpec {
            name: "east".into(),
            store_url: "file:///b".into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
    let e = read_source_topics(TopicsSource::Link { catalog, link: "east" }).unwrap_err();
    assert!(
        e.to_string().starts_with("no metadata of link east recorded yet"),
        "{e}"
    );
}
