use segment_format::failover_source::GroupOffset;
use segmirror_catalog::{Catalog, LinkSpec};

use super::*;

fn offset(group: &str, topic: &str, offset: i64) -> GroupOffset {
    GroupOffset {
        group: group.into(),
        topic: topic.into(),
        partition: 0,
        offset,
        leader_epoch: None,
        metadata: String::new(),
        commit_timestamp: 0,
    }
}

#[test]
fn a_selection_matches_whole_names_and_names_its_bad_flag() {
    let s = Selection::new(Some("app-.*"), Some("orders|payments")).unwrap();
    assert!(s.keeps_group("app-1") && !s.keeps_group("my-app-1"));
    assert!(s.keeps_topic("orders") && !s.keeps_topic("orders-dlq"));
    let all = Selection::new(None, None).unwrap();
    assert!(all.keeps_group("anything") && all.keeps_topic("anything"));
    let e = Selection::new(Some("("), None).unwrap_err();
    assert_eq!(e.to_string(), "--groups is not a valid regular expression");
    let e = Selection::new(None, Some("[")).unwrap_err();
    assert_eq!(e.to_string(), "--topics is not a valid regular expression");
}

#[test]
fn commit_inputs_keep_the_selected_offsets_of_a_link() {
    let installed = tempfile::tempdir().unwrap();
    let shipped = vec![
        offset("app", "orders", 5),
        offset("app", "logs", 7),
        offset("batch", "orders", 9),
    ];
    let selection = Selection::new(Some("app"), None).unwrap();
    let (offsets, ends) = read_commit_inputs(&CommitSource::Link(shipped), installed.path(), &selection).unwrap();
    let kept: Vec<(&str, &str, i64)> = offsets
        .iter()
        .map(|o| (o.group.as_str(), o.topic.as_str(), o.offset))
        .collect();
    assert_eq!(kept, [("app", "orders", 5), ("app", "logs", 7)]);
    assert!(ends.is_empty(), "nothing installed: {ends:?}");
}

#[test]
fn a_missing_installed_dir_or_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let all = Selection::default();
    let gone = dir.path().join("gone");
    assert!(read_commit_inputs(&CommitSource::Link(Vec::new()), &gone, &all).is_err());
    assert!(read_commit_inputs(&CommitSource::File(&gone), dir.path(), &all).is_err());
}

#[test]
fn a_link_without_recorded_metadata_has_no_offsets_to_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = Catalog::open(dir.path().join("catalog.sqlite")).unwrap();
    catalog
        .create_link(&LinkSpec {
            name: "east".into(),
            store_url: "file:///b".into(),
            topics_regex: ".*".into(),
            groups_regex: Some(".*".into()),
        })
        .unwrap();
    let e = shipped_offsets(&catalog, "east").unwrap_err();
    assert!(
        e.to_string().starts_with("no metadata of link east recorded yet"),
        "{e}"
    );
    let (rows, recorded) = link_offsets(&catalog, None, "east", &Selection::default()).unwrap();
    assert!(rows.is_empty() && recorded.is_none());
}

#[test]
fn a_failover_commits_the_groups_that_read_the_served_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = Catalog::open(dir.path().join("catalog.sqlite")).unwrap();
    catalog
        .create_link(&LinkSpec {
            name: "east".into(),
            store_url: "file:///b".into(),
            topics_regex: ".*".into(),
            groups_regex: Some(".*".into()),
        })
        .unwrap();
    assert!(failover_offsets(&catalog, "east").unwrap().is_empty());
    let served = |partition: i32, offset: i64, at: i64| segmirror_catalog::ServedOffset {
        topic: "orders".into(),
        partition,
        offset,
        leader_epoch: Some(4),
        metadata: "m".into(),
        committed_at_ms: at,
    };
    catalog
        .commit_served_offsets("east", "readers", &[served(0, 17, 100), served(1, 3, 100)])
        .unwrap();
    // A later commit of the same partition replaces the earlier one.
    catalog
        .commit_served_offsets("east", "readers", &[served(0, 21, 200)])
        .unwrap();
    catalog
        .commit_served_offsets("east", "reports", &[served(0, 5, 150)])
        .unwrap();
    let got: Vec<(String, i32, i64, Option<i32>)> = failover_offsets(&catalog, "east")
        .unwrap()
        .into_iter()
        .map(|o| (o.group, o.partition, o.offset, o.leader_epoch))
        .collect();
    assert_eq!(
        got,
        [
            ("readers".to_string(), 0, 21, Some(4)),
            ("readers".to_string(), 1, 3, Some(4)),
            ("reports".to_string(), 0, 5, Some(4)),
        ]
    );
    // One group's view, as the endpoint's OffsetFetch reads it: that group only.
    let readers: Vec<(i32, i64)> = group_offsets(&catalog, "east", "readers")
        .unwrap()
        .into_iter()
        .map(|o| (o.partition, o.offset))
        .collect();
    assert_eq!(readers, [(0, 21), (1, 3)]);
}
