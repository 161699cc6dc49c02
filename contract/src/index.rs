//! The bucket index: one listing grouped into partitions → lineages → versions,
//! and the one way to read a manifest.
//!
//! The applier (what to install), the audit (is the bucket sound) and a resuming
//! shipper (what is shipped already) all need the same view of a bucket, and
//! each used to list and group it, and read manifests, on its own. Here it is
//! done once: keys are parsed by [`crate::manifest`], anything that does not
//! parse is kept aside as [`ForeignKey`] (reported by callers, never fatal), and
//! a manifest is size-capped before it is read, validated, and checked against
//! the key it was found at, so a bucket writer can neither point a reader at
//! another partition's data nor make it build a path from a string it chose.

use std::collections::BTreeMap;

use segment_format::partition_metadata::Uuid;

use crate::error::{DocumentProblem, Error, Result};
use crate::manifest::{KeyPrefix, Lease, Manifest, ObjectKey, ObjectKind, PartitionKey};
use crate::objects::{Listing, ObjectInfo, SkippedEntry};

/// A listed key that is not one of the contract's, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKey {
    pub key: String,
    pub reason: String,
}

/// One lineage (source topic id) of a partition: its manifests by base offset, and its data objects by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexedLineage {
    pub manifests: BTreeMap<i64, ObjectInfo>,
    pub data: BTreeMap<String, ObjectInfo>,
}

impl IndexedLineage {
    /// When the newest manifest was written (the transport's clock); `i64::MIN` without one.
    pub fn last_modified_ms(&self) -> i64 {
        self.manifests
            .values()
            .map(|o| o.last_modified_ms)
            .max()
            .unwrap_or(i64::MIN)
    }
}

/// One partition: its lease objects by epoch and its lineages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexedPartition {
    pub leases: BTreeMap<u64, ObjectInfo>,
    pub lineages: BTreeMap<Uuid, IndexedLineage>,
}

/// Everything a listing held, grouped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketIndex {
    pub partitions: BTreeMap<PartitionKey, IndexedPartition>,
    /// Objects whose key the contract does not build.
    pub foreign: Vec<ForeignKey>,
    /// Link metadata objects (`<link>/_meta/...`, [`crate::link_meta`]): the contract's, not a partition's.
    pub meta: Vec<ObjectInfo>,
    /// Entries that are not objects at all (a FIFO, a link, a name that is no legal key).
    pub skipped: Vec<SkippedEntry>,
    /// Upload leftovers of a local folder (`<key>#<n>`).
    pub temporary: Vec<ObjectInfo>,
    /// The link identity objects ([`crate::link_identity`]), by link.
    pub link_identities: BTreeMap<String, ObjectInfo>,
    /// The link change notices ([`crate::link_changes`]), by link.
    pub link_changes: BTreeMap<String, ObjectInfo>,
    /// Objects and bytes listed (contract keys and foreign keys; not skipped entries).
    pub objects: u64,
    pub bytes: u64,
}

impl BucketIndex {
    /// Group `listing` (made under `prefix`).
    pub fn build(prefix: &KeyPrefix, listing: Listing) -> BucketIndex {
        let mut index = BucketIndex {
            skipped: listing.skipped,
            ..BucketIndex::default()
        };
        for object in listing.objects {
            index.objects += 1;
            index.bytes += object.size;
            if let Some(link) = crate::link_identity::link_of_identity_key(prefix, &object.key) {
                index.link_identities.insert(link.to_string(), object);
                continue;
            }
            if let Some(link) = crate::link_changes::link_of_changes_key(prefix, &object.key) {
                index.link_changes.insert(link.to_string(), object);
                continue;
            }
            match ObjectKey::parse(prefix, &object.key) {
                Ok(ObjectKey { partition, kind }) => {
                    let entry = index.partitions.entry(partition).or_default();
                    match kind {
                        ObjectKind::Lease { epoch } => {
                            entry.leases.insert(epoch, object);
                        }
                        ObjectKind::Manifest { topic_id, base_offset } => {
                            entry
                                .lineages
                                .entry(topic_id)
                                .or_default()
                                .manifests
                                .insert(base_offset, object);
                        }
                        ObjectKind::Data { topic_id, .. } | ObjectKind::Chunk { topic_id, .. } => {
                            entry
                                .lineages
                                .entry(topic_id)
                                .or_default()
                                .data
                                .insert(object.key.clone(), object);
                        }
                    }
                }
                Err(_) if crate::manifest::parse_meta_key(prefix, &object.key).is_some() => index.meta.push(object),
                Err(e) => index.foreign.push(ForeignKey {
                    reason: match e {
                        Error::BadKey { reason, .. } => reason,
                        other => other.to_string(),
                    },
                    key: object.key,
                }),
            }
        }
        index.temporary = listing.temporary;
        index
    }

    /// The partitions of one link.
    pub fn link<'a>(&'a self, link: &'a str) -> impl Iterator<Item = (&'a PartitionKey, &'a IndexedPartition)> + 'a {
        self.partitions.iter().filter(move |(k, _)| k.link() == link)
    }
}

/// What reading one manifest gave.
#[derive(Debug)]
pub enum ManifestRead {
    /// Parsed, valid, and where it claims to be.
    Valid(Box<Manifest>),
    /// Turned down: too large, not a regular file, not a valid manifest, or not where it claims to be. The error
    /// names the key and the reason.
    Invalid(Error),
    /// Listed but gone when read (a superseded manifest cleaned up meanwhile).
    Gone,
}

/// The pure half of `SegmentSource::read_manifest` (of the transport): parse, validate, check
/// the location.
pub fn check_manifest(prefix: &KeyPrefix, key: &str, bytes: &[u8]) -> ManifestRead {
    let manifest = match Manifest::from_json(key, bytes) {
        Ok(m) => m,
        Err(e) => return ManifestRead::Invalid(e),
    };
    if let Err(problem) = manifest.check_location(prefix, key) {
        return ManifestRead::Invalid(Error::bad_document(key, 0, problem));
    }
    ManifestRead::Valid(Box::new(manifest))
}

/// Parse the lease read from `key` (of `epoch`) and check that it names that epoch.
pub fn check_lease(key: &str, epoch: u64, bytes: &[u8]) -> Result<Lease> {
    let lease = Lease::from_json(key, bytes)?;
    if lease.epoch != epoch {
        return Err(Error::bad_document(
            key,
            0,
            DocumentProblem::Invalid {
                message: format!("lease stored as epoch {epoch} says epoch {}", lease.epoch),
            },
        ));
    }
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn info(key: &str, size: u64) -> ObjectInfo {
        ObjectInfo {
            key: key.to_string(),
            size,
            last_modified_ms: 1,
            e_tag: None,
        }
    }

    #[test]
    fn a_listing_is_grouped_by_partition_and_lineage_and_foreign_keys_are_set_aside() {
        let prefix = KeyPrefix::new("m").unwrap();
        let p = PartitionKey::new(prefix.clone(), "east", "t", 3).unwrap();
        let id = segment_format::partition_metadata::Uuid([9; 16]);
        let manifest = p.manifest_key(&id, 0).unwrap();
        let lease = p.lease_key(2);
        let listing = Listing {
            objects: vec![
                info(&manifest, 10),
                info(&lease, 5),
                info("m/east/t/3/junk", 1),
                info("elsewhere/x", 1),
            ],
            skipped: vec![SkippedEntry {
                key: "m/fifo".into(),
                reason: "a FIFO".into(),
            }],
            temporary: vec![],
        };
        let index = BucketIndex::build(&prefix, listing);
        assert_eq!(index.objects, 4);
        assert_eq!(index.bytes, 17);
        assert_eq!(index.skipped.len(), 1);
        let foreign: Vec<&str> = index.foreign.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(foreign, ["m/east/t/3/junk", "elsewhere/x"]);
        assert!(
            index.foreign[1].reason.contains("not under prefix"),
            "{:?}",
            index.foreign
        );
        let part = &index.partitions[&p];
        assert_eq!(part.leases.keys().copied().collect::<Vec<_>>(), [2]);
        assert_eq!(part.lineages[&id].manifests[&0].key, manifest);
        assert_eq!(index.link("east").count(), 1);
        assert_eq!(index.link("west").count(), 0);
    }

    #[test]
    fn hostile_manifest_bytes_are_invalid_not_errors() {
        let prefix = KeyPrefix::root();
        for bytes in [&b""[..], b"{", b"{\"format\":\"segmirror.manifest.v9\"}", b"[1,2]"] {
            assert!(matches!(
                check_manifest(&prefix, "l/t/0/x/manifests/00000000000000000000.json", bytes),
                ManifestRead::Invalid(Error::BadDocument { .. })
            ));
        }
    }

    #[test]
    fn a_lease_must_name_the_epoch_of_its_key() {
        let bytes = Lease::new("me", 3, 0).to_json();
        assert_eq!(check_lease("k", 3, &bytes).unwrap().epoch, 3);
        let err = check_lease("k", 4, &bytes).unwrap_err();
        assert!(err.to_string().contains("stored as epoch 4 says epoch 3"), "{err}");
    }

    proptest! {
        /// Whatever a bucket holds at a manifest key, reading it never panics, and only a document that is a
        /// valid manifest for exactly that key is accepted.
        #[test]
        fn random_manifest_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let read = check_manifest(&KeyPrefix::root(), "l/t/0/AAAAAAAAAAAAAAAAAAAAAQ/manifests/00000000000000000000.json", &bytes);
            prop_assert!(matches!(read, ManifestRead::Invalid(_)), "{:?}", read);
        }
    }
}
