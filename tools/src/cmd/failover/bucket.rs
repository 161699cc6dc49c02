//! What a bucket link's store holds: per partition, the newest segment version shipped (the manifests `apply
//! --follow` reads), for the cut to compare with what is installed.
//!
//! Why the bucket and not only the catalog: the catalog learns of a version when an applier's poll reads its
//! manifest, so a version uploaded after the last poll, or while the applier was down, is invisible to it; a drain
//! that trusted the catalog plus a quiet period alone would cut with it left behind and report an RPO of 0. The
//! bucket's manifests are what the shipper made available: a partition is drained when its newest manifest's end is
//! installed, and what lies between is the left-behind (RPO) a report must show.

use std::collections::BTreeMap;

use anyhow::Context;
use segmirror_catalog::{Link, DIRECT_URL_PREFIX};
use segmirror_transport::index::ManifestRead;
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::SegmentSource;
use segmirror_transport::Store;

use super::Args;
use crate::cli::runtime::Runtime;

/// The newest version of one partition in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Newest {
    /// The offset after its last record (the manifest's `next_offset`).
    pub end_offset: i64,
    /// When its manifest was written (the store's clock).
    pub uploaded_at_ms: i64,
}

/// The store a link's record names, or `None` for a direct link.
pub fn open(args: &Args, link: &Link) -> anyhow::Result<Option<(Store, KeyPrefix)>> {
    if link.store_url.starts_with(DIRECT_URL_PREFIX) {
        return Ok(None);
    }
    let store = args
        .s3
        .open(&link.store_url)
        .with_context(|| format!("opening link {}'s store {}", link.name, link.store_url))?;
    let prefix = KeyPrefix::new(&args.prefix).with_context(|| format!("--prefix {:?}", args.prefix))?;
    Ok(Some((store, prefix)))
}

/// Per partition of `link`, the newest version of its newest lineage (the lineage whose manifest was written
/// last: a recreated topic's new lineage supersedes the old one). A manifest that is gone when read (superseded and
/// cleaned up meanwhile) is skipped; one that is invalid stops the cut, naming its key.
pub fn newest_versions(
    runtime: &Runtime,
    store: &Store,
    prefix: &KeyPrefix,
    link: &str,
) -> anyhow::Result<BTreeMap<(String, i32), Newest>> {
    runtime.block_on(async {
        let index = store
            .index_versions(prefix, Some(link))
            .await
            .with_context(|| format!("listing link {link}'s versions in the store"))?;
        let mut newest = BTreeMap::new();
        for (partition, objects) in index.link(link) {
            let Some(lineage) = objects.lineages.values().max_by_key(|l| l.last_modified_ms()) else {
                continue;
            };
            let Some((_, object)) = lineage.manifests.iter().next_back() else {
                continue;
            };
            match store.read_manifest(prefix, &object.key).await? {
                ManifestRead::Valid(manifest) => {
                    newest.insert(
                        (partition.topic().to_string(), partition.partition()),
                        Newest {
                            end_offset: manifest.next_offset,
                            uploaded_at_ms: object.last_modified_ms,
                        },
                    );
                }
                ManifestRead::Gone => {}
                ManifestRead::Invalid(e) => return Err(anyhow::Error::new(e).context("the bucket's newest manifest")),
            }
        }
        Ok(newest)
    })?
}
