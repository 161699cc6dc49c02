//! Reading the bucket: which partitions and lineages a link has, and their manifests.
//!
//! The bucket is untrusted input. Listing and grouping it, and reading a manifest (size-capped, validated, checked
//! against the key it was found at), are the transport's, shared with the audit and the shipper
//! ([`segmirror_transport::index`]); here the applier takes the one link it mirrors, reports foreign keys as
//! [`IgnoredKey`]s, and turns a manifest the transport found invalid into [`Refusal::InvalidManifest`] — data turned
//! down — while a store that cannot be reached is an [`Error`].
//!
//! Lineages: a partition may hold several source topic ids (the topic was deleted and recreated). Which one the
//! applier mirrors is decided by [`choose_lineage`], from the listing alone.

use std::collections::BTreeMap;

use segment_format::partition_metadata::Uuid;
use segmirror_transport::index::{self, IndexedLineage, IndexedPartition};
use segmirror_transport::manifest::{KeyPrefix, Manifest};
use segmirror_transport::SegmentSource;

use crate::error::{Error, Result};
use crate::report::{IgnoredKey, Refusal};

/// Manifests read from the store at once: enough to hide a high-latency store's round trips, few enough not to be
/// throttled.
pub const MANIFEST_READ_CONCURRENCY: usize = 16;

/// Everything listed under a prefix (or one link of it).
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub links: BTreeMap<String, LinkObjects>,
    pub ignored: Vec<IgnoredKey>,
    /// The link identity objects listed, by link (`segmirror_transport::bucket::link_identity`).
    pub identities: BTreeMap<String, segmirror_transport::ObjectInfo>,

    /// Links whose metadata manifest (`<link>/_meta/manifest.json`) was listed: only those are asked for it.
    pub meta_links: std::collections::BTreeSet<String>,
}

/// The partitions of one link, by (topic, partition).
#[derive(Debug, Default)]
pub(crate) struct LinkObjects {
    pub partitions: BTreeMap<(String, i32), PartitionObjects>,
}

/// One partition's lineages (and leases, which the applier does not read).
pub(crate) type PartitionObjects = IndexedPartition;

/// The manifests (and data objects) of one lineage, by base offset.
pub(crate) type Lineage = IndexedLineage;

/// List `prefix`, or only `prefix/<link>` when a link is named, through the transport's one bucket index, and sort
/// the partitions by link. Only manifests and leases are listed ([`SegmentSource::index_versions`]): the applier
/// reads the manifests and fetches what they name, so the chunks a continuous shipper adds every round cost a poll
/// nothing.
pub(crate) async fn list(source: &dyn SegmentSource, prefix: &KeyPrefix, link: Option<&str>) -> Result<Listing> {
    let index = source.index_versions(prefix, link).await?;
    let mut listing = Listing {
        identities: index.link_identities,
        ..Listing::default()
    };
    // Entries the store cannot even call objects (a FIFO, a link, a name that is no legal key) are reported like
    // keys that are not segmirror's: skipped, and nothing else stops.
    listing.ignored.extend(index.skipped.into_iter().map(|s| IgnoredKey {
        key: s.key,
        reason: s.reason,
    }));
    listing.ignored.extend(index.foreign.into_iter().map(|f| IgnoredKey {
        key: f.key,
        reason: f.reason,
    }));
    for object in &index.meta {
        if let Some(segmirror_transport::bucket::link_meta::MetaKey::Manifest { link }) =
            segmirror_transport::bucket::link_meta::parse_meta_key(prefix, &object.key)
        {
            listing.meta_links.insert(link);
        }
    }
    for (partition, objects) in index.partitions {
        listing
            .links
            .entry(partition.link().to_string())
            .or_default()
            .partitions
            .insert((partition.topic().to_string(), partition.partition()), objects);
    }
    Ok(listing)
}

/// What reading one manifest gave.
#[derive(Debug)]
pub(crate) enum ManifestRead {
    /// Parsed, valid, and where it claims to be.
    Valid(Box<Manifest>),
    /// Turned down.
    Invalid(Refusal),
    /// Listed but gone when read (a superseded manifest cleaned up meanwhile).
    Gone,
}

impl From<index::ManifestRead> for ManifestRead {
    fn from(read: index::ManifestRead) -> Self {
        match read {
            index::ManifestRead::Valid(m) => ManifestRead::Valid(m),
            index::ManifestRead::Invalid(e) => {
                ManifestRead::Invalid(Refusal::InvalidManifest { reason: e.to_string() })
            }
            index::ManifestRead::Gone => ManifestRead::Gone,
        }
    }
}

/// Read and check the manifest at `key` (listed under `prefix`).
pub(crate) async fn read_manifest(source: &dyn SegmentSource, prefix: &KeyPrefix, key: &str) -> Result<ManifestRead> {
    source
        .read_manifest(prefix, key)
        .await
        .map(ManifestRead::from)
        .map_err(Error::Store)
}

/// The pure half of [`read_manifest`].
#[cfg(test)]
pub(crate) fn check_manifest(prefix: &KeyPrefix, key: &str, bytes: &[u8]) -> ManifestRead {
    index::check_manifest(prefix, key, bytes).into()
}

/// Which lineage of a partition to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineageChoice {
    /// Apply this lineage. `older` lists other lineages present in the store that are older than it (leftovers of
    /// a deleted topic), to be noted and ignored.
    Use { topic_id: Uuid, older: Vec<Uuid> },
    /// The catalog records `recorded`, and the store's newest lineage is another one: the source topic was
    /// recreated. Reported, never merged.
    Break { recorded: String, offered: Uuid },
    /// No manifest in any lineage yet.
    Nothing,
}

/// The lineage rule: with nothing recorded, the lineage whose newest manifest is newest (the live topic; older
/// lineages are leftovers of a deleted one). With a recorded lineage, keep it while no other lineage has a newer
/// manifest; a newer one is a lineage break.
pub(crate) fn choose_lineage(recorded: Option<&str>, lineages: &BTreeMap<Uuid, Lineage>) -> LineageChoice {
    let with_manifests = || lineages.iter().filter(|(_, l)| !l.manifests.is_empty());
    let Some((newest_id, newest)) = with_manifests().max_by_key(|(id, l)| (l.last_modified_ms(), **id)) else {
        return LineageChoice::Nothing;
    };
    let older = |keep: &Uuid| with_manifests().map(|(id, _)| *id).filter(|id| id != keep).collect();
    let Some(recorded) = recorded else {
        return LineageChoice::Use {
            topic_id: *newest_id,
            older: older(newest_id),
        };
    };
    let recorded_entry = with_manifests().find(|(id, _)| id.to_string() == recorded);
    match recorded_entry {
        Some((id, l)) if id == newest_id || l.last_modified_ms() >= newest.last_modified_ms() => LineageChoice::Use {
            topic_id: *id,
            older: older(id),
        },
        _ => LineageChoice::Break {
            recorded: recorded.to_string(),
            offered: *newest_id,
        },
    }
}

#[cfg(test)]
mod tests;
