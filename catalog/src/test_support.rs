//! Fixtures shared by the unit tests.

use crate::link::LinkSpec;
use crate::partition::{MirrorPartition, Upsert};
use crate::segment::SegmentVersion;

pub(crate) fn link_spec(name: &str) -> LinkSpec {
    LinkSpec {
        name: name.to_owned(),
        store_url: format!("file:///srv/bucket/{name}"),
        topics_regex: "orders|payments".to_owned(),
        groups_regex: None,
    }
}

/// An unsealed version `[base, next)` whose size and hash follow from its offsets.
pub(crate) fn seg(base: i64, next: i64) -> SegmentVersion {
    SegmentVersion {
        base_offset: base,
        next_offset: next,
        last_offset: next - 1,
        size: u64::try_from((next - base).max(0)).unwrap_or(0) * 100,
        sha256: [7; 32],
        manifest_key: format!("l/orders/0/src/manifests/{base:020}.json"),
        sealed: false,
    }
}

pub(crate) fn created(u: Upsert) -> MirrorPartition {
    match u {
        Upsert::Created(p) => p,
        other => panic!("expected a new partition, got {other:?}"),
    }
}
