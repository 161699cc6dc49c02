//! The direct applier prepared as a library call: the mirror locked for the whole run, a closed link refused at
//! start.

use std::path::Path;

use segmirror_catalog::{LinkSpec, LinkState};

use super::*;
use crate::link_gate::ClosedLink;

fn config(root: &Path) -> DirectApplyConfig {
    DirectApplyConfig {
        mirror: root.join("mirror"),
        source_cluster_id: None,
        catalog: Some(root.join("catalog.sqlite")),
        retain_deleted_for: std::time::Duration::ZERO,
        nodes: SourceNodes::One,
        endpoint: EndpointConfig {
            link: "dr".into(),
            listen: Some("127.0.0.1:0".into()),
            plaintext: true,
            ..EndpointConfig::default()
        },
        metrics_addr: None,
    }
}

#[test]
fn a_prepared_applier_holds_the_mirror_until_it_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let first = DirectApplyService::prepare(config.clone()).unwrap();
    let refused = match DirectApplyService::prepare(config.clone()) {
        Ok(_) => panic!("a second applier prepared on a held mirror"),
        Err(e) => format!("{e:#}"),
    };
    assert!(refused.contains("lock") || refused.contains("held"), "{refused}");
    drop(first);
    DirectApplyService::prepare(config).unwrap();
}

#[test]
fn a_promoted_link_is_refused_at_start_as_closed() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    std::fs::create_dir_all(&config.mirror).unwrap();
    let (_, mut catalog) = crate::catalog::open_mirror_catalog(config.catalog.clone(), &config.mirror, false).unwrap();
    catalog
        .create_link(&LinkSpec {
            name: "dr".into(),
            store_url: "direct:127.0.0.1:1".into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
    catalog.promote_link("dr").unwrap();
    drop(catalog);
    let e = match DirectApplyService::prepare(config) {
        Ok(_) => panic!("a promoted link was prepared"),
        Err(e) => e,
    };
    let closed = e.chain().find_map(|c| c.downcast_ref::<ClosedLink>());
    assert_eq!(closed.map(|c| c.state), Some(LinkState::Promoted), "{e:#}");
}
