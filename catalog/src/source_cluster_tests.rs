//! A link follows one source cluster: the first id offered is adopted (with an event), the same id is accepted
//! again, another is answered with the recorded one, and nothing changes it afterwards; it survives a reopen.

use crate::test_support::link_spec;
use crate::{Catalog, EventKind, PeerLink, Subject};

#[test]
fn a_link_adopts_its_first_source_cluster_and_answers_another_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let mut cat = Catalog::open(&path).unwrap();
    cat.create_link(&link_spec("dr")).unwrap();
    assert_eq!(cat.source_cluster_id("dr").unwrap(), None);
    assert_eq!(
        cat.adopt_source_cluster_id("dr", "cluster-A").unwrap(),
        PeerLink::Adopted
    );
    assert_eq!(cat.adopt_source_cluster_id("dr", "cluster-A").unwrap(), PeerLink::Same);
    assert_eq!(
        cat.adopt_source_cluster_id("dr", "cluster-B").unwrap(),
        PeerLink::Other {
            recorded: "cluster-A".into()
        }
    );
    drop(cat);
    let mut cat = Catalog::open(&path).unwrap();
    assert_eq!(cat.source_cluster_id("dr").unwrap().as_deref(), Some("cluster-A"));
    assert_eq!(
        cat.adopt_source_cluster_id("dr", "cluster-B").unwrap(),
        PeerLink::Other {
            recorded: "cluster-A".into()
        }
    );
    let notes: Vec<_> = cat
        .events(Some(Subject::Link("dr")), 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::Note && e.detail.contains("cluster-A"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    // An unknown link is an error, not an adoption.
    assert!(cat.adopt_source_cluster_id("nope", "cluster-A").is_err());
}
