//! Object keys: the builders of every key in the bucket layout (see the parent
//! module) and the strict parser that accepts exactly what they build.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{CHUNK_SUFFIX, DATA_DIR, JSON_SUFFIX, KEY_NUMBER_DIGITS, LEASE_DIR, MANIFESTS_DIR, MAX_LINK_LENGTH};
use segment_format::dir::{
    classify_partition_file, segment_file_name, validate_topic_name, PartitionFile, SegmentFileKind,
};
use segment_format::partition_metadata::Uuid;

use crate::error::{Error, Result};

fn bad_name(key: &str, reason: impl Into<String>) -> Error {
    Error::bad_key(key, reason)
}

/// `[A-Za-z0-9._-]`, the characters of Kafka topic names and of every other
/// component we build.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
}

/// A link name: 1..=[`MAX_LINK_LENGTH`] of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn validate_link_name(link: &str) -> std::result::Result<(), String> {
    if link.is_empty() || link.len() > MAX_LINK_LENGTH {
        return Err(format!("link name must be 1 to {MAX_LINK_LENGTH} characters"));
    }
    if link == "." || link == ".." {
        return Err(format!("link name '{link}' is not allowed"));
    }
    if !link.bytes().all(is_name_byte) {
        return Err(format!(
            "link name '{link}' may only contain ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// A partition number as it appears in a key: canonical decimal.
fn parse_partition(s: &str) -> Option<i32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

/// Exactly [`KEY_NUMBER_DIGITS`] ASCII digits.
fn parse_padded_u64(s: &str) -> Option<u64> {
    if s.len() != KEY_NUMBER_DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Exactly [`KEY_NUMBER_DIGITS`] ASCII digits, at most `i64::MAX`.
fn parse_padded_offset(s: &str) -> Option<i64> {
    parse_padded_u64(s).and_then(|v| i64::try_from(v).ok())
}

fn padded(n: impl fmt::Display) -> String {
    format!("{n:0>width$}", width = KEY_NUMBER_DIGITS)
}

/// A topic id in its canonical text form (what `Uuid.toString` prints), not zero.
/// `Uuid.fromString` also accepts padded and non-canonical spellings of the same
/// id; a key must have exactly one spelling.
pub fn parse_canonical_topic_id(s: &str) -> std::result::Result<Uuid, String> {
    let id = Uuid::from_str(s).map_err(|e| e.to_string())?;
    if id.to_string() != s {
        return Err(format!("'{s}' is not the canonical form of topic id {id}"));
    }
    if id == Uuid::ZERO {
        return Err("the zero topic id is not a topic id".into());
    }
    Ok(id)
}

/// The part of every key chosen by the operator (e.g. a folder shared with other
/// data). Stored normalised: no leading or trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// The empty prefix: keys start with the link name.
    pub fn root() -> Self {
        KeyPrefix(String::new())
    }

    /// Parse `a/b/c` (leading and trailing `/` are ignored). Each component must be
    /// non-empty, not `.` or `..`, and made of `[A-Za-z0-9._=-]`.
    pub fn new(prefix: &str) -> Result<Self> {
        let trimmed = prefix.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(Self::root());
        }
        for part in trimmed.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return Err(bad_name(
                    prefix,
                    format!("key prefix component '{part}' is not allowed"),
                ));
            }
            if !part.bytes().all(|b| is_name_byte(b) || b == b'=') {
                return Err(bad_name(
                    prefix,
                    format!(
                        "key prefix component '{part}' may only contain ASCII alphanumerics, '.', '_', '=' and '-'"
                    ),
                ));
            }
        }
        Ok(KeyPrefix(trimmed.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// `<prefix>/<rest>`, or `<rest>` for the root.
    pub fn join(&self, rest: &str) -> String {
        if self.0.is_empty() {
            rest.to_string()
        } else {
            format!("{}/{rest}", self.0)
        }
    }

    /// The key with this prefix removed, if it is under it.
    pub fn strip<'k>(&self, key: &'k str) -> Option<&'k str> {
        if self.0.is_empty() {
            return Some(key);
        }
        key.strip_prefix(self.0.as_str())?.strip_prefix('/')
    }
}

impl fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `[base, next)`: the offsets a shipped `.log` prefix may hold. `0 <= base <= next`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentRange {
    base: i64,
    next: i64,
}

impl SegmentRange {
    pub fn new(base: i64, next: i64) -> std::result::Result<Self, String> {
        if base < 0 {
            return Err(format!("base offset {base} is negative"));
        }
        if next < base {
            return Err(format!("next offset {next} is below base offset {base}"));
        }
        Ok(SegmentRange { base, next })
    }

    pub fn base(&self) -> i64 {
        self.base
    }

    pub fn next(&self) -> i64 {
        self.next
    }
}

/// A Kafka segment file name, `<base:020>.<ext>`; the only file names a manifest
/// may carry. Serialised as the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentFileName {
    pub base_offset: i64,
    pub kind: SegmentFileKind,
}

impl SegmentFileName {
    pub fn new(base_offset: i64, kind: SegmentFileKind) -> Self {
        SegmentFileName { base_offset, kind }
    }
}

impl fmt::Display for SegmentFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&segment_file_name(self.base_offset, self.kind))
    }
}

impl FromStr for SegmentFileName {
    type Err = String;

    /// Exactly what `segment_file_name` builds for a non-negative base offset.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match classify_partition_file(s) {
            PartitionFile::Segment { base_offset, kind } if base_offset >= 0 => {
                Ok(SegmentFileName { base_offset, kind })
            }
            _ => Err(format!(
                "'{s}' is not a Kafka segment file name (<20-digit offset>.log|index|timeindex|txnindex|snapshot)"
            )),
        }
    }
}

impl Serialize for SegmentFileName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SegmentFileName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One partition of one link under a prefix: the root of its leases and lineages.
/// Every accessor returns a key relative to the store's root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    prefix: KeyPrefix,
    link: String,
    topic: String,
    partition: i32,
}

impl PartitionKey {
    pub fn new(prefix: KeyPrefix, link: &str, topic: &str, partition: i32) -> Result<Self> {
        let what = format!("{}/{link}/{topic}/{partition}", prefix.as_str());
        validate_link_name(link).map_err(|r| bad_name(&what, r))?;
        validate_topic_name(topic).map_err(|r| bad_name(&what, format!("topic: {r}")))?;
        if partition < 0 {
            return Err(bad_name(&what, format!("partition {partition} is negative")));
        }
        Ok(PartitionKey {
            prefix,
            link: link.to_string(),
            topic: topic.to_string(),
            partition,
        })
    }

    pub fn prefix(&self) -> &KeyPrefix {
        &self.prefix
    }

    pub fn link(&self) -> &str {
        &self.link
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// `<prefix>/<link>/<topic>/<partition>`.
    pub fn dir(&self) -> String {
        self.prefix
            .join(&format!("{}/{}/{}", self.link, self.topic, self.partition))
    }

    /// `<partition dir>/lease`.
    pub fn lease_dir(&self) -> String {
        format!("{}/{LEASE_DIR}", self.dir())
    }

    /// `<partition dir>/lease/<epoch:020>.json`.
    pub fn lease_key(&self, epoch: u64) -> String {
        format!("{}/{}{JSON_SUFFIX}", self.lease_dir(), padded(epoch))
    }

    /// `<partition dir>/<topic id>`: one lineage.
    pub fn lineage_dir(&self, topic_id: &Uuid) -> String {
        format!("{}/{topic_id}", self.dir())
    }

    /// `<lineage>/manifests`.
    pub fn manifests_dir(&self, topic_id: &Uuid) -> String {
        format!("{}/{MANIFESTS_DIR}", self.lineage_dir(topic_id))
    }

    /// `<lineage>/data`.
    pub fn data_root(&self, topic_id: &Uuid) -> String {
        format!("{}/{DATA_DIR}", self.lineage_dir(topic_id))
    }

    /// `<lineage>/manifests/<base:020>.json`.
    pub fn manifest_key(&self, topic_id: &Uuid, base_offset: i64) -> Result<String> {
        if base_offset < 0 {
            return Err(bad_name(
                &self.manifests_dir(topic_id),
                format!("base offset {base_offset} is negative"),
            ));
        }
        Ok(format!(
            "{}/{}{JSON_SUFFIX}",
            self.manifests_dir(topic_id),
            padded(base_offset)
        ))
    }

    /// `<lineage>/data/<base:020>/<next:020>`: the folder of one segment version.
    pub fn data_dir(&self, topic_id: &Uuid, range: SegmentRange) -> String {
        format!(
            "{}/{}/{}",
            self.data_root(topic_id),
            padded(range.base),
            padded(range.next)
        )
    }

    /// `<lineage>/data/<base:020>/<next:020>/<file>`; the file must be named after `base`.
    pub fn data_key(&self, topic_id: &Uuid, range: SegmentRange, file: SegmentFileName) -> Result<String> {
        let dir = self.data_dir(topic_id, range);
        if file.base_offset != range.base {
            return Err(bad_name(
                &dir,
                format!(
                    "file {file} is not named after the segment's base offset {}",
                    range.base
                ),
            ));
        }
        Ok(format!("{dir}/{file}"))
    }

    /// `<lineage>/data/<base:020>/<next:020>/<from:020>.logchunk`: the bytes `[from, ..)` of the `.log` of segment
    /// `base` that end where offset `next` starts (a chunk of a `segmirror.manifest.v2` version). `next` and `from`
    /// are in the key, so a chunk is never overwritten by different bytes: the same key is only ever written again
    /// by a rerun with the same source bytes.
    pub fn chunk_key(&self, topic_id: &Uuid, range: SegmentRange, from: u64) -> String {
        format!("{}/{}{CHUNK_SUFFIX}", self.data_dir(topic_id, range), padded(from))
    }

    /// `<lineage>/data/<base:020>/<next:020>/<next:020>.snapshot`: the producer snapshot a broker wrote at the log
    /// end (`next`) of the version `[base, next)`, the one file of a version not named after its base.
    pub fn end_snapshot_key(&self, topic_id: &Uuid, range: SegmentRange) -> String {
        format!(
            "{}/{}",
            self.data_dir(topic_id, range),
            SegmentFileName::new(range.next, SegmentFileKind::Snapshot)
        )
    }
}

/// What a key under a prefix names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Lease {
        epoch: u64,
    },
    Manifest {
        topic_id: Uuid,
        base_offset: i64,
    },
    Data {
        topic_id: Uuid,
        range: SegmentRange,
        file: SegmentFileName,
    },
    /// A chunk of a segment's `.log` ([`PartitionKey::chunk_key`]).
    Chunk {
        topic_id: Uuid,
        range: SegmentRange,
        from: u64,
    },
}

/// A parsed object key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub partition: PartitionKey,
    pub kind: ObjectKind,
}

impl ObjectKey {
    /// Parse a key listed under `prefix`. Accepts exactly the keys the builders of
    /// [`PartitionKey`] produce; anything else is [`Error::BadKey`] with the reason.
    pub fn parse(prefix: &KeyPrefix, key: &str) -> Result<ObjectKey> {
        let rest = prefix
            .strip(key)
            .ok_or_else(|| bad_name(key, format!("key is not under prefix '{prefix}'")))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let (link, topic, partition, tail) = match parts.as_slice() {
            [link, topic, partition, tail @ ..] => (*link, *topic, *partition, tail),
            _ => return Err(bad_name(key, "too few components for a segmirror key")),
        };
        let partition = parse_partition(partition)
            .ok_or_else(|| bad_name(key, format!("'{partition}' is not a partition number")))?;
        let partition = PartitionKey::new(prefix.clone(), link, topic, partition).map_err(|e| match e {
            Error::BadKey { reason, .. } => bad_name(key, reason),
            other => other,
        })?;
        let kind = match tail {
            [LEASE_DIR, name] => {
                let epoch = name
                    .strip_suffix(JSON_SUFFIX)
                    .and_then(parse_padded_u64)
                    .ok_or_else(|| bad_name(key, format!("'{name}' is not a lease name (<20-digit epoch>.json)")))?;
                ObjectKind::Lease { epoch }
            }
            [topic_id, MANIFESTS_DIR, name] => {
                let topic_id = parse_canonical_topic_id(topic_id).map_err(|r| bad_name(key, r))?;
                let base_offset = name
                    .strip_suffix(JSON_SUFFIX)
                    .and_then(parse_padded_offset)
                    .ok_or_else(|| {
                        bad_name(
                            key,
                            format!("'{name}' is not a manifest name (<20-digit base offset>.json)"),
                        )
                    })?;
                ObjectKind::Manifest { topic_id, base_offset }
            }
            [topic_id, DATA_DIR, base, next, name] => {
                let topic_id = parse_canonical_topic_id(topic_id).map_err(|r| bad_name(key, r))?;
                let base = parse_padded_offset(base)
                    .ok_or_else(|| bad_name(key, format!("'{base}' is not a 20-digit base offset")))?;
                let next = parse_padded_offset(next)
                    .ok_or_else(|| bad_name(key, format!("'{next}' is not a 20-digit next offset")))?;
                let range = SegmentRange::new(base, next).map_err(|r| bad_name(key, r))?;
                if let Some(from) = name.strip_suffix(CHUNK_SUFFIX) {
                    let from = parse_padded_u64(from).ok_or_else(|| {
                        bad_name(
                            key,
                            format!("'{name}' is not a chunk name (<20-digit byte position>{CHUNK_SUFFIX})"),
                        )
                    })?;
                    return Ok(ObjectKey {
                        partition,
                        kind: ObjectKind::Chunk { topic_id, range, from },
                    });
                }
                let file: SegmentFileName = name.parse().map_err(|r: String| bad_name(key, r))?;
                let end_snapshot = file.kind == SegmentFileKind::Snapshot && file.base_offset == next;
                if file.base_offset != base && !end_snapshot {
                    return Err(bad_name(
                        key,
                        format!(
                            "file {file} is not named after base offset {base} (nor a snapshot at next offset {next})"
                        ),
                    ));
                }
                ObjectKind::Data { topic_id, range, file }
            }
            _ => return Err(bad_name(key, "not a lease, manifest or data key")),
        };
        Ok(ObjectKey { partition, kind })
    }

    /// The key this parses from.
    pub fn to_key(&self) -> String {
        match &self.kind {
            ObjectKind::Lease { epoch } => self.partition.lease_key(*epoch),
            ObjectKind::Manifest { topic_id, base_offset } => format!(
                "{}/{}{JSON_SUFFIX}",
                self.partition.manifests_dir(topic_id),
                padded(base_offset)
            ),
            ObjectKind::Data { topic_id, range, file } => {
                format!("{}/{file}", self.partition.data_dir(topic_id, *range))
            }
            ObjectKind::Chunk { topic_id, range, from } => self.partition.chunk_key(topic_id, *range, *from),
        }
    }
}

/// Components of a lineage's data directory below the prefix: `<link>/<topic>/<partition>/<topic id>/data`.
const DATA_DIR_COMPONENTS: usize = 5;

/// Whether `key` (an object key, or a directory key without its trailing `/`, under `prefix`) is a lineage's data
/// directory or lies inside one (`<link>/<topic>/<partition>/<topic id>/data/...`): a data object or chunk, never a
/// manifest or a lease. Decided by position, as the builders place keys, so a topic named `data` is not mistaken
/// for one. What a listing of versions leaves out (`SegmentSource::list_versions` of the transport).
/// A link's metadata data directory (`<link>/_meta/data`, `crate::link_meta`) counts as one too.
pub fn in_data_dir(prefix: &KeyPrefix, key: &str) -> bool {
    prefix
        .strip(key)
        .is_some_and(|rest| rest.split('/').nth(DATA_DIR_COMPONENTS - 1) == Some(DATA_DIR))
        || in_meta_data_dir(prefix, key)
}

/// Whether the directory `dir` (no trailing `/`) is exactly a lineage's data directory (not a directory inside
/// one, not anything above): the one a listing of versions need not descend into.
pub fn is_data_dir(prefix: &KeyPrefix, dir: &str) -> bool {
    prefix
        .strip(dir)
        .is_some_and(|rest| rest.split('/').count() == DATA_DIR_COMPONENTS && in_data_dir(prefix, dir))
        || is_meta_data_dir(prefix, dir)
}

/// The directory of a link's metadata (`crate::link_meta`), beside its topics.
pub const META_DIR: &str = "_meta";
/// Where a link's metadata versions' data objects go (left out of a listing of versions).
pub const META_DATA_DIR: &str = "data";

/// Whether `dir` (no trailing `/`) is a link's metadata data directory: a listing of versions need not descend.
pub fn is_meta_data_dir(prefix: &KeyPrefix, dir: &str) -> bool {
    prefix.strip(dir).is_some_and(|rest| {
        let parts: Vec<&str> = rest.split('/').collect();
        matches!(parts.as_slice(), [link, META_DIR, META_DATA_DIR] if validate_link_name(link).is_ok())
    })
}

/// Whether `key` lies inside a link's metadata data directory.
pub fn in_meta_data_dir(prefix: &KeyPrefix, key: &str) -> bool {
    prefix.strip(key).is_some_and(|rest| {
        let mut parts = rest.split('/');
        let (link, meta, data) = (parts.next(), parts.next(), parts.next());
        meta == Some(META_DIR)
            && data == Some(META_DATA_DIR)
            && parts.next().is_some()
            && link.is_some_and(|l| validate_link_name(l).is_ok())
    })
}

/// A link metadata manifest's name (`crate::link_meta`).
pub const META_MANIFEST_NAME: &str = "manifest.json";
/// A metadata version's topics document.
pub const TOPICS_NAME: &str = "topics.json";
/// A metadata version's offsets document.
pub const OFFSETS_NAME: &str = "offsets.json";

/// `<prefix>/<link>/_meta/manifest.json`.
pub fn meta_manifest_key(prefix: &KeyPrefix, link: &str) -> String {
    prefix.join(&format!("{link}/{META_DIR}/{META_MANIFEST_NAME}"))
}

/// `<prefix>/<link>/_meta/data/<version:020>/<name>`.
pub fn meta_data_key(prefix: &KeyPrefix, link: &str, version: u64, name: &str) -> String {
    prefix.join(&format!("{link}/{META_DIR}/{META_DATA_DIR}/{version:020}/{name}"))
}

/// What a metadata key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaKey {
    Manifest {
        link: String,
    },
    Data {
        link: String,
        version: u64,
        name: &'static str,
    },
}

/// Parse a key under `prefix` as a link metadata key: exactly what [`meta_manifest_key`] and [`meta_data_key`] build.
pub fn parse_meta_key(prefix: &KeyPrefix, key: &str) -> Option<MetaKey> {
    let rest = prefix.strip(key)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [link, META_DIR, META_MANIFEST_NAME] if validate_link_name(link).is_ok() => {
            Some(MetaKey::Manifest { link: link.to_string() })
        }
        [link, META_DIR, META_DATA_DIR, version, name] if validate_link_name(link).is_ok() => {
            let name = [TOPICS_NAME, OFFSETS_NAME].into_iter().find(|n| n == name)?;
            if version.len() != 20 || !version.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(MetaKey::Data {
                link: link.to_string(),
                version: version.parse().ok()?,
                name,
            })
        }
        _ => None,
    }
}
