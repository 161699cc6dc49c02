//! Recording a link's metadata: versions replace each other in order, and a committed offset is exposed clamped to
//! the installed data until that data is installed.

use std::collections::BTreeMap;

use segmirror_contract::link_meta::{GroupOffset, LinkMeta, TopicMeta};

use crate::key::PartitionKey;
use crate::test_support::{created, link_spec, seg};
use crate::Catalog;

fn meta(version: u64, offsets: &[(&str, i32, i64)]) -> LinkMeta {
    LinkMeta::new(
        "l",
        version,
        10,
        vec![TopicMeta {
            name: "orders".into(),
            topic_id: "MZ3ezZJvTAWUZ0oR9yzcCQ".into(),
            partitions: 2,
            configs: BTreeMap::from([
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("retention.ms".to_string(), "1000".to_string()),
            ]),
        }],
        ".*",
        offsets
            .iter()
            .map(|(group, partition, offset)| GroupOffset {
                group: group.to_string(),
                topic: "orders".into(),
                partition: *partition,
                offset: *offset,
                leader_epoch: Some(3),
                metadata: String::new(),
                commit_timestamp: 1,
            })
            .collect(),
    )
}

fn committable(cat: &Catalog) -> Vec<(String, i32, i64, Option<i64>, bool)> {
    cat.link_offsets("l")
        .unwrap()
        .into_iter()
        .map(|o| (o.group, o.partition, o.source_offset, o.committable, o.clamped))
        .collect()
}

#[test]
fn offsets_are_clamped_to_the_installed_end_until_the_data_arrives() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    let id = created(
        cat.upsert_partition(&PartitionKey::new("l", "orders", 0), "src", 0)
            .unwrap(),
    )
    .id;
    cat.mark_installed(id, "src", &seg(0, 100)).unwrap();
    assert!(cat
        .record_link_meta(&meta(1, &[("a", 0, 150), ("b", 0, 60), ("c", 1, 5), ("d", 1, 0)]))
        .unwrap());
    assert_eq!(
        committable(&cat),
        [
            ("a".into(), 0, 150, Some(100), true),
            ("b".into(), 0, 60, Some(60), false),
            ("c".into(), 1, 5, None, true),
            ("d".into(), 1, 0, Some(0), false),
        ]
    );
    // The data arrives: the committable offset rises to the received one, and no further.
    cat.mark_installed(id, "src", &seg(0, 200)).unwrap();
    let rows = committable(&cat);
    assert_eq!(rows[0], ("a".into(), 0, 150, Some(150), false));

    // Topics and configs as sent.
    let topics = cat.link_topics("l").unwrap();
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].partitions, 2);
    assert_eq!(topics[0].configs["cleanup.policy"], "compact");
}

#[test]
fn a_newer_version_replaces_and_an_older_or_invalid_one_changes_nothing() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    assert!(cat.record_link_meta(&meta(2, &[("a", 0, 1), ("b", 0, 2)])).unwrap());
    assert!(!cat.record_link_meta(&meta(2, &[("a", 0, 9)])).unwrap());
    assert!(!cat.record_link_meta(&meta(1, &[("a", 0, 9)])).unwrap());
    assert_eq!(committable(&cat).len(), 2);
    // Version 3 no longer has group b (deleted at the source): gone here too.
    assert!(cat.record_link_meta(&meta(3, &[("a", 0, 4)])).unwrap());
    let rows = cat.link_offsets("l").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].source_offset, rows[0].leader_epoch), (4, Some(3)));
    assert_eq!(cat.link_meta("l").unwrap().unwrap().version, 3);

    let mut bad = meta(4, &[("a", 0, 4)]);
    bad.offsets.offsets[0].partition = -1;
    let err = cat.record_link_meta(&bad).unwrap_err().to_string();
    assert!(err.contains("offsets[0].partition"), "{err}");
    let mut other = meta(5, &[]);
    other.topics.link = "m".into();
    other.offsets.link = "m".into();
    assert!(cat.record_link_meta(&other).is_err(), "an unknown link is refused");
    assert_eq!(cat.link_meta("l").unwrap().unwrap().version, 3);
}

#[test]
fn recorded_as_next_continues_the_catalogs_versions_whatever_version_the_sender_counts() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    // A direct shipper counts from 1 in each process; the catalog's versions go on.
    assert_eq!(cat.record_link_meta_as_next(&meta(5, &[("a", 0, 1)])).unwrap(), 1);
    assert_eq!(cat.record_link_meta_as_next(&meta(1, &[("a", 0, 7)])).unwrap(), 2);
    assert_eq!(cat.link_meta("l").unwrap().unwrap().version, 2);
    assert_eq!(committable(&cat)[0].2, 7, "the later document replaced the earlier");
    // The same checks: a document of another link is refused.
    let mut other = meta(1, &[]);
    other.topics.link = "x".into();
    other.offsets.link = "x".into();
    assert!(cat.record_link_meta_as_next(&other).is_err());
    assert_eq!(cat.link_meta("l").unwrap().unwrap().version, 2);
}
