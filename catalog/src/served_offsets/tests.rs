//! Offsets committed through the endpoint: a commit replaces only the partitions it names, is all or nothing, is
//! kept per link and group, survives reopening the catalog, and is refused once the link is promoted or deleted.

use crate::error::{Entity, Error};
use crate::link_state::LinkState;
use crate::served_offsets::ServedOffset;
use crate::test_support::link_spec;
use crate::Catalog;

fn offset(topic: &str, partition: i32, offset: i64) -> ServedOffset {
    ServedOffset {
        topic: topic.to_owned(),
        partition,
        offset,
        leader_epoch: Some(4),
        metadata: format!("m{offset}"),
        committed_at_ms: 1_000 + offset,
    }
}

fn positions(cat: &Catalog, link: &str, group: &str) -> Vec<(String, i32, i64)> {
    cat.served_offsets(link, group)
        .unwrap()
        .into_iter()
        .map(|o| (o.topic, o.partition, o.offset))
        .collect()
}

#[test]
fn a_commit_replaces_the_partitions_it_names_and_keeps_the_others() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    cat.commit_served_offsets("l", "g", &[offset("orders", 1, 10), offset("orders", 0, 5)])
        .unwrap();
    cat.commit_served_offsets("l", "g", &[offset("orders", 1, 12), offset("payments", 0, 3)])
        .unwrap();
    assert_eq!(
        positions(&cat, "l", "g"),
        [
            ("orders".into(), 0, 5),
            ("orders".into(), 1, 12),
            ("payments".into(), 0, 3)
        ]
    );
    // Every column round-trips, a missing leader epoch included.
    let mut no_epoch = offset("orders", 2, 7);
    no_epoch.leader_epoch = None;
    cat.commit_served_offsets("l", "g", std::slice::from_ref(&no_epoch))
        .unwrap();
    let all = cat.served_offsets("l", "g").unwrap();
    assert_eq!(all[1], offset("orders", 1, 12));
    assert_eq!(all[2], no_epoch);
    // A partition named twice in one commit keeps the last.
    cat.commit_served_offsets("l", "g", &[offset("orders", 0, 8), offset("orders", 0, 9)])
        .unwrap();
    assert_eq!(positions(&cat, "l", "g")[0], ("orders".into(), 0, 9));
}

#[test]
fn groups_and_links_are_kept_apart() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    cat.create_link(&link_spec("m")).unwrap();
    cat.commit_served_offsets("l", "b", &[offset("orders", 0, 1)]).unwrap();
    cat.commit_served_offsets("l", "a", &[offset("orders", 0, 2)]).unwrap();
    cat.commit_served_offsets("m", "a", &[offset("orders", 0, 3)]).unwrap();
    assert_eq!(cat.served_groups("l").unwrap(), ["a", "b"]);
    assert_eq!(cat.served_groups("m").unwrap(), ["a"]);
    assert_eq!(positions(&cat, "l", "a"), [("orders".into(), 0, 2)]);
    assert_eq!(positions(&cat, "m", "a"), [("orders".into(), 0, 3)]);
    assert!(cat.served_offsets("l", "none").unwrap().is_empty());

    assert_eq!(cat.delete_served_group("l", "a").unwrap(), 1);
    assert_eq!(cat.served_groups("l").unwrap(), ["b"]);
    assert_eq!(
        cat.served_groups("m").unwrap(),
        ["a"],
        "another link's group of the same name stays"
    );
    assert_eq!(cat.delete_served_group("l", "a").unwrap(), 0);
}

#[test]
fn an_invalid_commit_writes_nothing() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    cat.commit_served_offsets("l", "g", &[offset("orders", 0, 5)]).unwrap();
    let bad = [
        (String::new(), vec![offset("orders", 0, 6)]),
        ("g".to_owned(), vec![offset("orders", 0, 6), offset("", 1, 1)]),
        ("g".to_owned(), vec![offset("orders", 0, 6), offset("orders", -1, 1)]),
        ("g".to_owned(), vec![offset("orders", 0, 6), offset("orders", 1, -1)]),
    ];
    for (group, offsets) in bad {
        let err = cat.commit_served_offsets("l", &group, &offsets).unwrap_err();
        assert!(
            matches!(err, Error::Invalid { .. } | Error::InvalidOffset { .. }),
            "{group:?} {offsets:?}: {err:?}"
        );
    }
    assert_eq!(positions(&cat, "l", "g"), [("orders".into(), 0, 5)]);
}

#[test]
fn an_unknown_link_is_not_found() {
    let mut cat = Catalog::open_in_memory().unwrap();
    let not_found = |e: Error| matches!(e, Error::NotFound { entity: Entity::Link(n) } if n == "x");
    assert!(not_found(
        cat.commit_served_offsets("x", "g", &[offset("orders", 0, 1)])
            .unwrap_err()
    ));
    assert!(not_found(cat.served_offsets("x", "g").unwrap_err()));
    assert!(not_found(cat.served_groups("x").unwrap_err()));
    assert!(not_found(cat.delete_served_group("x", "g").unwrap_err()));
}

#[test]
fn a_paused_link_takes_commits_a_promoted_or_deleted_one_refuses_them_and_keeps_what_was_committed() {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("p")).unwrap();
    cat.create_link(&link_spec("d")).unwrap();
    for link in ["p", "d"] {
        cat.set_link_state(link, LinkState::Paused).unwrap();
        cat.commit_served_offsets(link, "g", &[offset("orders", 0, 5)]).unwrap();
    }
    cat.promote_link("p").unwrap();
    cat.delete_link("d").unwrap();
    let err = cat
        .commit_served_offsets("p", "g", &[offset("orders", 0, 6)])
        .unwrap_err();
    assert!(
        matches!(err, Error::Promoted { entity: Entity::Link(ref n) } if n == "p"),
        "{err:?}"
    );
    let err = cat
        .commit_served_offsets("d", "g", &[offset("orders", 0, 6)])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LinkTransition {
                from: LinkState::Deleted,
                ..
            }
        ),
        "{err:?}"
    );
    // Failover reads them after promotion.
    assert_eq!(positions(&cat, "p", "g"), [("orders".into(), 0, 5)]);
    assert_eq!(positions(&cat, "d", "g"), [("orders".into(), 0, 5)]);
}

#[test]
fn commits_survive_reopening_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    {
        let mut cat = Catalog::open(&path).unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        cat.commit_served_offsets("l", "g", &[offset("orders", 3, 42)]).unwrap();
    }
    let cat = Catalog::open(&path).unwrap();
    assert_eq!(cat.served_offsets("l", "g").unwrap(), [offset("orders", 3, 42)]);
    assert_eq!(cat.served_groups("l").unwrap(), ["g"]);
}
