//! Installs after empty versions (segments the source's cleaner emptied in the middle of the log): their range is no
//! hole when they start exactly at the installed end, and only then.

use super::*;
use crate::error::ConflictReason;
use crate::key::PartitionKey;
use crate::test_support::{created, link_spec, seg};

fn setup() -> (Catalog, PartitionId) {
    let mut cat = Catalog::open_in_memory().unwrap();
    cat.create_link(&link_spec("l")).unwrap();
    let key = PartitionKey::new("l", "orders", 0);
    let id = created(cat.upsert_partition(&key, "src", 0).unwrap()).id;
    (cat, id)
}

fn sealed(base: i64, next: i64) -> SegmentVersion {
    SegmentVersion {
        sealed: true,
        ..seg(base, next)
    }
}

#[test]
fn empty_versions_at_the_installed_end_close_the_hole() {
    let (mut cat, id) = setup();
    cat.mark_installed(id, "src", &sealed(297, 400)).unwrap();
    // Without the empty versions, [400, 429) is a hole.
    assert!(matches!(
        cat.mark_installed(id, "src", &sealed(429, 500)),
        Err(Error::Conflict {
            reason: ConflictReason::Gap { .. },
            ..
        })
    ));
    // Empty versions that do not start at the installed end explain nothing.
    assert!(matches!(
        cat.mark_installed_after(id, "src", &sealed(429, 500), Preceded::ByEmpty { from: 410 }, None),
        Err(Error::Conflict {
            reason: ConflictReason::Gap { .. },
            ..
        })
    ));
    let r = cat
        .mark_installed_after(id, "src", &sealed(429, 500), Preceded::ByEmpty { from: 400 }, None)
        .unwrap();
    assert_eq!(r.outcome, InstallOutcome::New);
    assert_eq!(r.partition.installed_end_offset, Some(500));
    // Again: nothing changes, whichever way it is asked.
    for preceded in [Preceded::ByEmpty { from: 400 }, Preceded::ByInstalled] {
        assert_eq!(
            cat.mark_installed_after(id, "src", &sealed(429, 500), preceded, None)
                .unwrap()
                .outcome,
            InstallOutcome::AlreadyInstalled
        );
    }
    let installed: Vec<_> = cat
        .installed_segments(id)
        .unwrap()
        .into_iter()
        .map(|s| (s.version.base_offset, s.version.next_offset))
        .collect();
    assert_eq!(installed, [(297, 400), (429, 500)]);
}
