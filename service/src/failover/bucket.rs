//! A bucket link's store, for the cut: per partition the newest version shipped (`crate::bucket_ends`), compared with
//! what is installed. Without it a drain that trusted the catalog plus a quiet period would cut with a version
//! uploaded after the applier's last poll left behind and report an RPO of 0: a partition is drained when its newest
//! manifest's end is installed, and what lies between is the left-behind (RPO) a report must show.

use segmirror_catalog::Link;
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::Store;

use super::FailoverConfig;
use crate::bucket_ends::{newest_versions, open_link_store, BucketEnds};
use crate::runtime::Runtime;

/// The store a link's record names, or `None` for a direct link.
pub fn open(config: &FailoverConfig, link: &Link) -> anyhow::Result<Option<(Store, KeyPrefix)>> {
    open_link_store(&config.s3, &config.prefix, &link.name, &link.store_url)
}

/// Per partition of `link`, the newest version the bucket holds ([`newest_versions`]).
pub fn newest(runtime: &Runtime, store: &Store, prefix: &KeyPrefix, link: &str) -> anyhow::Result<BucketEnds> {
    runtime.block_on(newest_versions(store, prefix, link))?
}
