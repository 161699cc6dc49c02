use crate::test_support::{created, link_spec};
use crate::{Catalog, Error, EventKind, PartitionId, PartitionKey, PartitionState, PromotionRecord, Subject};

fn two_partitions(cat: &mut Catalog) -> (PartitionKey, PartitionId, PartitionKey, PartitionId) {
    cat.create_link(&link_spec("l")).unwrap();
    let a = PartitionKey::new("l", "orders", 0);
    let b = PartitionKey::new("l", "orders", 1);
    let ida = created(cat.upsert_partition(&a, "src-A", 0).unwrap()).id;
    let idb = created(cat.upsert_partition(&b, "src-A", 0).unwrap()).id;
    (a, ida, b, idb)
}

fn details(cat: &Catalog, key: &PartitionKey) -> Vec<(EventKind, String)> {
    let mut events = cat.events(Some(Subject::Partition(key)), 100).unwrap();
    events.reverse();
    events.into_iter().map(|e| (e.kind, e.detail)).collect()
}

#[test]
fn every_partition_is_recorded_promoted_with_its_facts_and_a_rerun_changes_nothing() {
    let mut cat = Catalog::open_in_memory().unwrap();
    let (a, ida, b, idb) = two_partitions(&mut cat);
    let records = [
        PromotionRecord {
            id: ida,
            mirror_topic_id: "tgt-1",
            handed_over_to: Some("/t/logs"),
            notes: vec!["first".into(), "second".into()],
        },
        PromotionRecord {
            id: idb,
            mirror_topic_id: "tgt-1",
            handed_over_to: None,
            notes: Vec::new(),
        },
    ];
    assert_eq!(cat.record_promotions(&records).unwrap(), 2);
    let pa = cat.partition(&a).unwrap();
    assert_eq!(pa.state, PartitionState::Promoted);
    assert_eq!(pa.mirror_topic_id.as_deref(), Some("tgt-1"));
    assert_eq!(cat.handed_over_to(ida).unwrap().as_deref(), Some("/t/logs"));
    assert_eq!(cat.partition(&b).unwrap().state, PartitionState::Promoted);
    assert_eq!(cat.handed_over_to(idb).unwrap(), None);
    let after_a: Vec<_> = details(&cat, &a).into_iter().skip(1).collect();
    assert_eq!(
        after_a,
        [
            (EventKind::MirrorTopicIdSet, "tgt-1".to_owned()),
            (
                EventKind::Note,
                "mirror files handed over by rename into /t/logs; the mirror no longer holds them".to_owned()
            ),
            (EventKind::Note, "first".to_owned()),
            (EventKind::Note, "second".to_owned()),
            (EventKind::PartitionStateChanged, "mirroring -> promoted".to_owned()),
        ]
    );
    let before = details(&cat, &a).len() + details(&cat, &b).len();
    assert_eq!(
        cat.record_promotions(&records).unwrap(),
        0,
        "already promoted: left as it is"
    );
    assert_eq!(details(&cat, &a).len() + details(&cat, &b).len(), before);
}

#[test]
fn a_failure_on_one_partition_records_none() {
    let mut cat = Catalog::open_in_memory().unwrap();
    let (a, ida, _, _) = two_partitions(&mut cat);
    let events = details(&cat, &a).len();
    let records = [
        PromotionRecord {
            id: ida,
            mirror_topic_id: "tgt-1",
            handed_over_to: None,
            notes: vec!["promoted".into()],
        },
        PromotionRecord {
            id: PartitionId(9_999),
            mirror_topic_id: "tgt-1",
            handed_over_to: None,
            notes: Vec::new(),
        },
    ];
    assert!(matches!(cat.record_promotions(&records), Err(Error::NotFound { .. })));
    let pa = cat.partition(&a).unwrap();
    assert_eq!(pa.state, PartitionState::Mirroring);
    assert_eq!(pa.mirror_topic_id, None);
    assert_eq!(details(&cat, &a).len(), events);
}

#[test]
fn partitions_change_state_together_or_not_at_all() {
    let mut cat = Catalog::open_in_memory().unwrap();
    let (a, ida, b, idb) = two_partitions(&mut cat);
    let paused = cat.set_partitions_state(&[ida, idb], PartitionState::Paused).unwrap();
    assert!(paused.iter().all(|p| p.state == PartitionState::Paused));
    cat.set_partition_state(idb, PartitionState::Promoted).unwrap();
    assert!(matches!(
        cat.set_partitions_state(&[ida, idb], PartitionState::Mirroring),
        Err(Error::Promoted { .. })
    ));
    assert_eq!(
        cat.partition(&a).unwrap().state,
        PartitionState::Paused,
        "rolled back with the refusal"
    );
    assert_eq!(cat.partition(&b).unwrap().state, PartitionState::Promoted);
}
