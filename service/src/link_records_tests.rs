use segmirror_catalog::{Catalog, LinkState, Transport};

use super::*;

fn new_link(name: &str, transport: Transport, address: &str) -> NewLink {
    NewLink {
        name: name.into(),
        source: "src".into(),
        target: String::new(),
        transport,
        address: address.into(),
        topics_regex: ".*".into(),
        groups_regex: None,
    }
}

#[test]
fn only_a_creation_may_create_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let Err(e) = open(&path, false) else {
        panic!("a missing catalog is refused")
    };
    let e = e.to_string();
    assert!(e.contains("does not exist"), "{e}");
    assert!(!path.exists());
    open(&path, true).unwrap();
    assert!(path.is_file());
    open(&path, false).unwrap();
}

#[test]
fn a_creation_checks_name_address_and_regexes() {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = Catalog::open(dir.path().join("catalog.sqlite")).unwrap();
    let e = create(&mut catalog, new_link("a/b", Transport::Store, "file:///b")).unwrap_err();
    assert!(e.to_string().starts_with("link name \"a/b\""), "{e}");
    let e = create(&mut catalog, new_link("east", Transport::Direct, "nohost")).unwrap_err();
    assert!(e.to_string().contains("HOST:PORT"), "{e}");
    let e = create(&mut catalog, new_link("east", Transport::Store, "direct:h:1")).unwrap_err();
    assert!(e.to_string().contains("store URL"), "{e}");
    let mut bad = new_link("east", Transport::Store, "file:///b");
    bad.topics_regex = "(".into();
    assert!(create(&mut catalog, bad)
        .unwrap_err()
        .to_string()
        .starts_with("--topics-regex"));
    let mut bad = new_link("east", Transport::Store, "file:///b");
    bad.groups_regex = Some("[".into());
    assert!(create(&mut catalog, bad)
        .unwrap_err()
        .to_string()
        .starts_with("--consumer-groups-regex"));
    assert!(catalog.links().unwrap().is_empty(), "nothing refused is recorded");

    let link = create(&mut catalog, new_link("east", Transport::Direct, "h:9092")).unwrap();
    assert_eq!(link.transport(), Transport::Direct);
    assert_eq!(link.address(), "h:9092");
    let e = create(&mut catalog, new_link("east", Transport::Direct, "h:9092")).unwrap_err();
    assert!(
        e.to_string().ends_with("`segmirror link describe east` shows it"),
        "{e}"
    );
}

#[test]
fn transitions_report_the_state_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = Catalog::open(dir.path().join("catalog.sqlite")).unwrap();
    create(&mut catalog, new_link("east", Transport::Store, "file:///b")).unwrap();
    let (from, link) = transition(&mut catalog, "east", LinkState::Paused).unwrap();
    assert_eq!((from, link.state), (LinkState::Active, LinkState::Paused));
    let (from, link) = transition(&mut catalog, "east", LinkState::Paused).unwrap();
    assert_eq!((from, link.state), (LinkState::Paused, LinkState::Paused));
    assert_eq!(
        set_state(&mut catalog, "east", LinkState::Active).unwrap().state,
        LinkState::Active
    );
    set_state(&mut catalog, "east", LinkState::Promoted).unwrap();
    assert!(
        set_state(&mut catalog, "east", LinkState::Active).is_err(),
        "promoted is terminal"
    );
    assert!(
        transition(&mut catalog, "west", LinkState::Paused).is_err(),
        "unknown link"
    );
}

#[test]
fn an_alteration_needs_something_to_change_and_valid_regexes() {
    let dir = tempfile::tempdir().unwrap();
    let mut catalog = Catalog::open(dir.path().join("catalog.sqlite")).unwrap();
    create(&mut catalog, new_link("east", Transport::Store, "file:///b")).unwrap();
    assert!(alter(&mut catalog, "east", None, None)
        .unwrap_err()
        .to_string()
        .starts_with("nothing to change"));
    assert!(alter(&mut catalog, "east", Some("("), None).is_err());
    assert!(alter(&mut catalog, "east", None, Some(Some("["))).is_err());
    let link = alter(&mut catalog, "east", Some("orders"), Some(Some("g.*"))).unwrap();
    assert_eq!(
        (link.topics_regex.as_str(), link.groups_regex.as_deref()),
        ("orders", Some("g.*"))
    );
    let link = alter(&mut catalog, "east", None, Some(None)).unwrap();
    assert_eq!(link.groups_regex, None);
    let (link, partitions, events) = describe(&catalog, "east", 10).unwrap();
    assert_eq!((link.name.as_str(), partitions), ("east", 0));
    assert!(!events.is_empty());
}
