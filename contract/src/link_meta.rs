//! A link's metadata besides segments: the source's topics (partition counts, topic-level configs, topic ids, from
//! its KRaft metadata log) and the committed offsets of the consumer groups the link carries (from its
//! `__consumer_offsets`). The shapes are defined once here: the shipper writes them, the applier records them, the
//! target side (creating/checking topics, committing offsets) reads the same shape, over a bucket or the direct
//! protocol.
//!
//! Why documents of their own, not fields of segment manifests: they are per link, not per partition, they change
//! when nothing is appended to a mirrored topic (a group commits, a config is altered), and a target needs them as
//! one consistent picture (every group's offsets of one read).
//!
//! # Bucket layout (part of the public contract, beside `manifest`)
//!
//! ```text
//! <prefix>/<link>/_meta/manifest.json                       the commit point, rewritten by each new version
//! <prefix>/<link>/_meta/data/<version:020>/topics.json      a TopicsDoc
//! <prefix>/<link>/_meta/data/<version:020>/offsets.json     an OffsetsDoc
//! ```
//!
//! - A shipper writes both data objects of a version, then the manifest naming them with their sizes and SHA-256
//!   (the order segment versions use): a reader that sees a manifest finds its objects. Data keys carry the version,
//!   so a new version never overwrites bytes an older manifest points at; the manifest is rewritten in place, so a
//!   reader needs no listing (one document read per poll, whatever the number of versions shipped).
//! - `_meta` is a legal Kafka topic name, but `data` and `manifest.json` are not partition numbers, so no segment
//!   key is ever a metadata key ([`parse_meta_key`]); the index sets metadata keys apart from foreign ones, and a
//!   listing of versions leaves `_meta/data` out like a lineage's data directory.
//! - Untrusted: every document is size-capped before it is parsed, its `format` checked by name, and every field
//!   checked ([`TopicsDoc::validate`], [`OffsetsDoc::validate`], [`MetaManifest::validate`]); a refusal names the key
//!   and the field.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use segment_format::dir::validate_topic_name;
/// The entries of the documents: one shape for every origin of a failover's source data (see
/// `segment_format::failover_source`).
pub use segment_format::failover_source::{GroupOffset, TopicMeta};

use crate::digest::digest_of;
use crate::error::{DocumentProblem, Error, MismatchKind, Result};
pub use crate::manifest::{
    in_meta_data_dir, is_meta_data_dir, meta_data_key as data_key, meta_manifest_key as manifest_key, parse_meta_key,
    MetaKey, META_DATA_DIR, META_DIR, META_MANIFEST_NAME, OFFSETS_NAME, TOPICS_NAME,
};
use crate::manifest::{parse_canonical_topic_id, KeyPrefix, Sha256Digest};

pub const META_MANIFEST_FORMAT: &str = "segmirror.link-meta.v1";
pub const TOPICS_FORMAT: &str = "segmirror.topics.v1";
pub const OFFSETS_FORMAT: &str = "segmirror.offsets.v1";

/// A metadata manifest is a few hundred bytes.
pub const MAX_META_MANIFEST_BYTES: u64 = 64 * 1024;
/// Topics, partition counts and configs of a large cluster (tens of thousands of topics) fit well below this.
pub const MAX_TOPICS_BYTES: u64 = 64 * 1024 * 1024;
/// A million committed offsets at ~200 bytes each.
pub const MAX_OFFSETS_BYTES: u64 = 256 * 1024 * 1024;
/// Most topics in one document.
pub const MAX_TOPICS: usize = 1 << 20;
/// Most offsets in one document.
pub const MAX_OFFSETS: usize = 1 << 22;
/// Kafka's limit on partitions per topic is practical, not in the protocol; no real topic has this many.
pub const MAX_PARTITIONS_PER_TOPIC: u32 = 1 << 20;
/// Kafka strings (group ids, config names and values, commit metadata) are int16-length-prefixed on the wire.
pub const MAX_KAFKA_STRING: usize = i16::MAX as usize;

/// The link's topics: those of the source that match the link's topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicsDoc {
    pub format: String,
    pub link: String,
    pub version: u64,
    /// Offset after the last metadata record applied (where in the source's metadata log this picture is from).
    pub metadata_end_offset: i64,
    /// Sorted by name, names unique.
    pub topics: Vec<TopicMeta>,
}

/// The committed offsets of the link's groups for the link's topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetsDoc {
    pub format: String,
    pub link: String,
    pub version: u64,
    /// The group filter the shipper applied (a regular expression matching whole group ids).
    pub groups_regex: String,
    /// Sorted by (group, topic, partition), unique.
    pub offsets: Vec<GroupOffset>,
}

/// A data object a metadata manifest names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaObject {
    pub key: String,
    pub size: u64,
    pub sha256: Sha256Digest,
}

/// The commit point of one metadata version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaManifest {
    pub format: String,
    pub link: String,
    pub version: u64,
    pub shipper_id: String,
    pub created_at_ms: i64,
    pub topics: MetaObject,
    pub offsets: MetaObject,
}

/// One version of a link's metadata, as shipped and as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMeta {
    pub topics: TopicsDoc,
    pub offsets: OffsetsDoc,
}

impl LinkMeta {
    /// A new version's documents.
    pub fn new(
        link: &str,
        version: u64,
        metadata_end_offset: i64,
        mut topics: Vec<TopicMeta>,
        groups_regex: &str,
        mut offsets: Vec<GroupOffset>,
    ) -> Self {
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        offsets.sort_by(|a, b| (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition)));
        LinkMeta {
            topics: TopicsDoc {
                format: TOPICS_FORMAT.into(),
                link: link.into(),
                version,
                metadata_end_offset,
                topics,
            },
            offsets: OffsetsDoc {
                format: OFFSETS_FORMAT.into(),
                link: link.into(),
                version,
                groups_regex: groups_regex.into(),
                offsets,
            },
        }
    }

    /// Both documents valid, of `link`, of one version.
    pub fn validate(&self, link: &str) -> std::result::Result<(), String> {
        self.topics.validate(link)?;
        self.offsets.validate(link)?;
        if self.topics.version != self.offsets.version {
            return Err(format!(
                "topics version {} and offsets version {} differ",
                self.topics.version, self.offsets.version
            ));
        }
        Ok(())
    }

    /// The same topics, configs, offsets and group filter, whatever the version and wherever in the source's
    /// metadata log they were read: a shipper publishes a new version (to a bucket or over the direct protocol)
    /// only when this changed. `metadata_end_offset` is left out on purpose: a live KRaft controller appends a
    /// record every half second or so (no-ops, broker registrations), so the log's end moves while nothing a target
    /// needs changed, and comparing it would publish a version per read.
    pub fn same_content(&self, other: &LinkMeta) -> bool {
        self.topics.topics == other.topics.topics
            && self.offsets.offsets == other.offsets.offsets
            && self.offsets.groups_regex == other.offsets.groups_regex
    }
}

fn check_format(found: &str, expected: &str) -> std::result::Result<(), String> {
    if found != expected {
        return Err(format!("format: {found:?} is not {expected:?}"));
    }
    Ok(())
}

fn check_link(field: &str, found: &str, link: &str) -> std::result::Result<(), String> {
    if found != link {
        return Err(format!("{field}: belongs to link {found:?}, not {link:?}"));
    }
    Ok(())
}

fn check_kafka_string(field: &str, value: &str, allow_empty: bool) -> std::result::Result<(), String> {
    if !allow_empty && value.is_empty() {
        return Err(format!("{field}: empty"));
    }
    if value.len() > MAX_KAFKA_STRING {
        return Err(format!("{field}: {} bytes, more than {MAX_KAFKA_STRING}", value.len()));
    }
    Ok(())
}

impl TopicsDoc {
    pub fn validate(&self, link: &str) -> std::result::Result<(), String> {
        check_format(&self.format, TOPICS_FORMAT)?;
        check_link("link", &self.link, link)?;
        if self.metadata_end_offset < 0 {
            return Err(format!("metadata_end_offset: {} is negative", self.metadata_end_offset));
        }
        if self.topics.len() > MAX_TOPICS {
            return Err(format!("topics: {} entries, more than {MAX_TOPICS}", self.topics.len()));
        }
        let mut ids = BTreeSet::new();
        for (i, t) in self.topics.iter().enumerate() {
            let at = |field: &str| format!("topics[{i}].{field}");
            validate_topic_name(&t.name).map_err(|e| format!("{}: {e}", at("name")))?;
            if i > 0 && self.topics[i - 1].name >= t.name {
                return Err(format!(
                    "{}: {:?} is not after {:?} (sorted, unique)",
                    at("name"),
                    t.name,
                    self.topics[i - 1].name
                ));
            }
            let id = parse_canonical_topic_id(&t.topic_id).map_err(|e| format!("{}: {e}", at("topic_id")))?;
            if !ids.insert(id) {
                return Err(format!("{}: {} is another topic's id too", at("topic_id"), t.topic_id));
            }
            if t.partitions == 0 || t.partitions > MAX_PARTITIONS_PER_TOPIC {
                return Err(format!(
                    "{}: {} is not in 1..={MAX_PARTITIONS_PER_TOPIC}",
                    at("partitions"),
                    t.partitions
                ));
            }
            for (key, value) in &t.configs {
                check_kafka_string(&at("configs key"), key, false)?;
                if !key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
                {
                    return Err(format!("{}: {key:?} is not a config name", at("configs")));
                }
                check_kafka_string(&format!("{}[{key}]", at("configs")), value, true)?;
            }
        }
        Ok(())
    }

    /// The topic named `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicMeta> {
        self.topics
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.topics[i])
    }
}

impl OffsetsDoc {
    pub fn validate(&self, link: &str) -> std::result::Result<(), String> {
        check_format(&self.format, OFFSETS_FORMAT)?;
        check_link("link", &self.link, link)?;
        check_kafka_string("groups_regex", &self.groups_regex, false)?;
        if self.offsets.len() > MAX_OFFSETS {
            return Err(format!(
                "offsets: {} entries, more than {MAX_OFFSETS}",
                self.offsets.len()
            ));
        }
        for (i, o) in self.offsets.iter().enumerate() {
            let at = |field: &str| format!("offsets[{i}].{field}");
            check_kafka_string(&at("group"), &o.group, false)?;
            validate_topic_name(&o.topic).map_err(|e| format!("{}: {e}", at("topic")))?;
            if o.partition < 0 {
                return Err(format!("{}: {} is negative", at("partition"), o.partition));
            }
            if o.offset < 0 {
                return Err(format!("{}: {} is negative", at("offset"), o.offset));
            }
            if o.leader_epoch.is_some_and(|e| e < 0) {
                return Err(format!(
                    "{}: {:?} is negative (none is null)",
                    at("leader_epoch"),
                    o.leader_epoch
                ));
            }
            check_kafka_string(&at("metadata"), &o.metadata, true)?;
            if i > 0 {
                let p = &self.offsets[i - 1];
                if (&p.group, &p.topic, p.partition) >= (&o.group, &o.topic, o.partition) {
                    return Err(format!(
                        "{}: ({:?}, {:?}, {}) is not after the previous entry (sorted, unique)",
                        at("group"),
                        o.group,
                        o.topic,
                        o.partition
                    ));
                }
            }
        }
        Ok(())
    }
}

impl MetaManifest {
    /// Valid, of `link`, its objects where version `self.version`'s keys are under `prefix`, each within its cap.
    pub fn validate(&self, prefix: &KeyPrefix, link: &str) -> std::result::Result<(), String> {
        check_format(&self.format, META_MANIFEST_FORMAT)?;
        check_link("link", &self.link, link)?;
        check_kafka_string("shipper_id", &self.shipper_id, false)?;
        for (field, object, name, cap) in [
            ("topics", &self.topics, TOPICS_NAME, MAX_TOPICS_BYTES),
            ("offsets", &self.offsets, OFFSETS_NAME, MAX_OFFSETS_BYTES),
        ] {
            let expected = data_key(prefix, link, self.version, name);
            if object.key != expected {
                return Err(format!("{field}.key: {:?} is not {expected:?}", object.key));
            }
            if object.size > cap {
                return Err(format!("{field}.size: {} is more than {cap}", object.size));
            }
        }
        Ok(())
    }
}

/// A document at `key` the contract refuses, and why (a field named in `message`).
pub fn invalid(key: &str, message: impl Into<String>) -> Error {
    Error::bad_document(
        key,
        0,
        DocumentProblem::Invalid {
            message: message.into(),
        },
    )
}

/// A JSON document read from `key`; a syntax error names the line and column.
pub fn parse_json<T: for<'de> Deserialize<'de>>(key: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::bad_document(
            key,
            e.column() as u64,
            DocumentProblem::Invalid {
                message: format!("line {} column {}: {e}", e.line(), e.column()),
            },
        )
    })
}

/// The metadata manifest read from `key` for `link`: parsed and validated (its objects where its version's keys are
/// under `prefix`, each within its cap).
pub fn parse_manifest(prefix: &KeyPrefix, link: &str, key: &str, bytes: &[u8]) -> Result<MetaManifest> {
    let manifest: MetaManifest = parse_json(key, bytes)?;
    manifest.validate(prefix, link).map_err(|m| invalid(key, m))?;
    Ok(manifest)
}

/// Do the bytes read for `object` have the size and SHA-256 its manifest promised?
pub fn check_object(object: &MetaObject, bytes: &[u8]) -> Result<()> {
    let digest = digest_of(bytes);
    if digest.size != object.size {
        return Err(Error::mismatch(
            &object.key,
            MismatchKind::Size,
            object.size,
            digest.size,
        ));
    }
    if digest.sha256 != object.sha256 {
        return Err(Error::mismatch(
            &object.key,
            MismatchKind::Sha256,
            object.sha256,
            digest.sha256,
        ));
    }
    Ok(())
}

/// The version `manifest` names, from its two documents' bytes (each already checked with [`check_object`]):
/// parsed, validated, and of the manifest's version. A refusal names the key and the field.
pub fn parse_version(manifest: &MetaManifest, topics_bytes: &[u8], offsets_bytes: &[u8]) -> Result<LinkMeta> {
    let link = &manifest.link;
    let (topics_key, offsets_key) = (&manifest.topics.key, &manifest.offsets.key);
    let topics: TopicsDoc = parse_json(topics_key, topics_bytes)?;
    topics.validate(link).map_err(|m| invalid(topics_key, m))?;
    let offsets: OffsetsDoc = parse_json(offsets_key, offsets_bytes)?;
    offsets.validate(link).map_err(|m| invalid(offsets_key, m))?;
    for (key, version) in [(topics_key, topics.version), (offsets_key, offsets.version)] {
        if version != manifest.version {
            return Err(invalid(
                key,
                format!("version: {version}, the manifest names version {}", manifest.version),
            ));
        }
    }
    Ok(LinkMeta { topics, offsets })
}

#[cfg(test)]
mod tests;
