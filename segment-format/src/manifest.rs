//! The bucket contract: every object key segmirror reads or writes in an object
//! store, and the JSON documents (manifests, leases) stored there.
//!
//! Shipper, applier, auditor and any future tool agree on the bucket only through
//! this module, so every key is built here (as litestream keeps all object names in
//! one file) and every key read back is parsed here. A bucket is untrusted input:
//! whoever can write to it must not be able to make the applier write outside its
//! mirror root. Parsing therefore accepts exactly the names this module builds —
//! Kafka topic names, canonical numbers, canonical topic ids, Kafka segment file
//! names — and nothing else (no `..`, no empty or absolute components, no stray
//! characters), and a parsed name is safe to use as a file-system path component.
//!
//! # Layout (v1)
//!
//! ```text
//! <prefix>/<link>/<topic>/<partition>/lease/<epoch:020>.json
//! <prefix>/<link>/<topic>/<partition>/<source-topic-id>/data/<base:020>/<next:020>/<kafka file name>
//! <prefix>/<link>/<topic>/<partition>/<source-topic-id>/manifests/<base:020>.json
//! ```
//!
//! - `<prefix>`: optional, `/`-separated; each component non-empty, not `.`/`..`,
//!   made of `[A-Za-z0-9._=-]`. May be empty (keys then start with `<link>`).
//! - `<link>`: the mirror link's name, `[A-Za-z0-9._-]`, 1 to 249 characters, not `.`/`..`.
//! - `<topic>`: a legal Kafka topic name (`Topic.validate`); `<partition>`: decimal,
//!   no sign, no leading zero, at most `i32::MAX`.
//! - `lease/<epoch>.json`: a [`Lease`]; the epoch is 20 zero-padded digits. Leases
//!   are created with a create-if-absent put, which is what fences a stale shipper.
//! - `<source-topic-id>`: the source topic's Kafka `Uuid` in its canonical 22
//!   character form; the **lineage**. A recreated topic (new id) is a new lineage,
//!   never merged with the old one.
//! - `data/<base>/<next>/<file>`: one file of one segment version; the segment's
//!   `.log` prefix holds offsets in `[base, next)`. `<file>` is the Kafka file name
//!   `<base:020>.{log,index,timeindex,txnindex,snapshot}`. Because `next` is in the
//!   key, re-shipping a grown active segment writes new keys and never overwrites
//!   bytes an older manifest points at.
//! - `manifests/<base>.json`: a [`Manifest`], the commit point of a segment
//!   version, written after all its data objects. A later version of the same
//!   segment (the active segment grew, or was sealed) replaces it; a reader uses
//!   whichever manifest is there.
//!
//! # Documents
//!
//! Both documents carry a `format` string (`segmirror.manifest.v1`,
//! `segmirror.lease.v1`). A reader rejects any other format with an error that
//! names it, so an old segmirror never misreads a newer bucket. Within a format,
//! new fields may be added: readers ignore fields they do not know. Documents are
//! size-capped ([`MAX_MANIFEST_BYTES`], [`MAX_LEASE_BYTES`]) before parsing.
//!
//! What [`Manifest::validate`] guarantees is listed on it; a valid manifest still
//! has to be checked against its location with [`Manifest::check_location`] before
//! any of its keys is used.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::dir::{classify_partition_file, segment_file_name, validate_topic_name, PartitionFile, SegmentFileKind};
use crate::error::{Defect, Error, Result};
use crate::partition_metadata::Uuid;

/// `format` of a v1 manifest.
pub const MANIFEST_FORMAT_V1: &str = "segmirror.manifest.v1";
/// `format` of a v1 lease.
pub const LEASE_FORMAT_V1: &str = "segmirror.lease.v1";
/// Largest manifest a reader accepts. A manifest lists at most five files and the
/// leader epochs of one segment; 1 MiB leaves room for tens of thousands of epochs
/// while keeping a hostile object from exhausting memory.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Largest lease a reader accepts: a lease is three short fields.
pub const MAX_LEASE_BYTES: u64 = 16 << 10;
/// Longest link name: as long as a topic name, so `<link>` fits one path component.
pub const MAX_LINK_LENGTH: usize = 249;
/// Longest free-text identifier (cluster id, shipper id, lease owner).
pub const MAX_ID_LENGTH: usize = 255;
/// Digits of every zero-padded number in a key (offsets and lease epochs), as in
/// Kafka's segment file names: lexicographic order equals numeric order.
pub const KEY_NUMBER_DIGITS: usize = 20;
/// Directory of leases under a partition.
pub const LEASE_DIR: &str = "lease";
/// Directory of segment data under a lineage.
pub const DATA_DIR: &str = "data";
/// Directory of manifests under a lineage.
pub const MANIFESTS_DIR: &str = "manifests";
/// Suffix of manifest and lease objects.
pub const JSON_SUFFIX: &str = ".json";

fn bad_name(key: &str, reason: impl Into<String>) -> Error {
    Error::BadName {
        path: PathBuf::from(key),
        reason: reason.into(),
    }
}

fn manifest_defect(message: impl Into<String>) -> Defect {
    Defect::Manifest {
        message: message.into(),
    }
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
        return Err(format!("link name '{link}' may only contain ASCII alphanumerics, '.', '_' and '-'"));
    }
    Ok(())
}

/// A free-text identifier stored in a document: 1..=[`MAX_ID_LENGTH`] printable
/// ASCII characters.
fn validate_id(what: &str, id: &str) -> std::result::Result<(), String> {
    if id.is_empty() || id.len() > MAX_ID_LENGTH {
        return Err(format!("{what} must be 1 to {MAX_ID_LENGTH} characters"));
    }
    if !id.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(format!("{what} must be printable ASCII"));
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
                return Err(bad_name(prefix, format!("key prefix component '{part}' is not allowed")));
            }
            if !part.bytes().all(|b| is_name_byte(b) || b == b'=') {
                return Err(bad_name(
                    prefix,
                    format!("key prefix component '{part}' may only contain ASCII alphanumerics, '.', '_', '=' and '-'"),
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
            PartitionFile::Segment { base_offset, kind } if base_offset >= 0 => Ok(SegmentFileName { base_offset, kind }),
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

/// A SHA-256 digest, written as 64 lowercase hex digits (the only accepted form).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest(pub [u8; 32]);

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({self})")
    }
}

impl FromStr for Sha256Digest {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        fn nibble(b: u8) -> Option<u8> {
            match b {
                b'0'..=b'9' => Some(b - b'0'),
                b'a'..=b'f' => Some(b - b'a' + 10),
                _ => None,
            }
        }
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(format!("sha256 must be 64 lowercase hex digits, got {} characters", bytes.len()));
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            match (pair.first().copied().and_then(nibble), pair.get(1).copied().and_then(nibble)) {
                (Some(hi), Some(lo)) => *o = (hi << 4) | lo,
                _ => return Err(format!("sha256 '{s}' is not 64 lowercase hex digits")),
            }
        }
        Ok(Sha256Digest(out))
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Serde for topic ids: the canonical text form only.
mod topic_id_text {
    use super::*;

    pub fn serialize<S: serde::Serializer>(id: &Uuid, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(id)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Uuid, D::Error> {
        let s = String::deserialize(d)?;
        parse_canonical_topic_id(&s).map_err(serde::de::Error::custom)
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
            return Err(bad_name(&self.manifests_dir(topic_id), format!("base offset {base_offset} is negative")));
        }
        Ok(format!("{}/{}{JSON_SUFFIX}", self.manifests_dir(topic_id), padded(base_offset)))
    }

    /// `<lineage>/data/<base:020>/<next:020>`: the folder of one segment version.
    pub fn data_dir(&self, topic_id: &Uuid, range: SegmentRange) -> String {
        format!("{}/{}/{}", self.data_root(topic_id), padded(range.base), padded(range.next))
    }

    /// `<lineage>/data/<base:020>/<next:020>/<file>`; the file must be named after `base`.
    pub fn data_key(&self, topic_id: &Uuid, range: SegmentRange, file: SegmentFileName) -> Result<String> {
        let dir = self.data_dir(topic_id, range);
        if file.base_offset != range.base {
            return Err(bad_name(
                &dir,
                format!("file {file} is not named after the segment's base offset {}", range.base),
            ));
        }
        Ok(format!("{dir}/{file}"))
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
}

/// A parsed object key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub partition: PartitionKey,
    pub kind: ObjectKind,
}

impl ObjectKey {
    /// Parse a key listed under `prefix`. Accepts exactly the keys the builders of
    /// [`PartitionKey`] produce; anything else is [`Error::BadName`] with the reason.
    pub fn parse(prefix: &KeyPrefix, key: &str) -> Result<ObjectKey> {
        let rest = prefix
            .strip(key)
            .ok_or_else(|| bad_name(key, format!("key is not under prefix '{prefix}'")))?;
        let parts: Vec<&str> = rest.split('/').collect();
        let (link, topic, partition, tail) = match parts.as_slice() {
            [link, topic, partition, tail @ ..] => (*link, *topic, *partition, tail),
            _ => return Err(bad_name(key, "too few components for a segmirror key")),
        };
        let partition =
            parse_partition(partition).ok_or_else(|| bad_name(key, format!("'{partition}' is not a partition number")))?;
        let partition = PartitionKey::new(prefix.clone(), link, topic, partition).map_err(|e| match e {
            Error::BadName { reason, .. } => bad_name(key, reason),
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
                let base_offset = name.strip_suffix(JSON_SUFFIX).and_then(parse_padded_offset).ok_or_else(|| {
                    bad_name(key, format!("'{name}' is not a manifest name (<20-digit base offset>.json)"))
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
                let file: SegmentFileName = name.parse().map_err(|r: String| bad_name(key, r))?;
                if file.base_offset != base {
                    return Err(bad_name(key, format!("file {file} is not named after base offset {base}")));
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
        }
    }
}

/// A leader-epoch entry: `epoch` starts at `start_offset` (as in `leader-epoch-checkpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EpochStart {
    pub epoch: i32,
    pub start_offset: i64,
}

/// One shipped file of a segment version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub name: SegmentFileName,
    /// The data key, relative to the store root.
    pub key: String,
    pub size: u64,
    /// CRC-32C (Castagnoli) of the whole object.
    pub crc32c: u32,
    pub sha256: Sha256Digest,
    /// The source file's modification time (Kafka uses a `.log`'s mtime for
    /// retention when its time index has no timestamp, and for legacy cleaning).
    pub mtime_ms: i64,
}

/// Who committed a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShipperStamp {
    pub id: String,
    /// The lease epoch the shipper held when it committed.
    pub lease_epoch: u64,
}

/// The commit point of one segment version (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT_V1`].
    pub format: String,
    pub link: String,
    pub topic: String,
    pub partition: i32,
    #[serde(with = "topic_id_text")]
    pub source_topic_id: Uuid,
    pub source_cluster_id: String,
    pub base_offset: i64,
    /// Base offset of the first batch; `None` iff the segment holds no batch.
    pub first_offset: Option<i64>,
    /// Last offset of the last batch; `None` iff the segment holds no batch.
    pub last_offset: Option<i64>,
    /// Exclusive end of the shipped range: for a sealed segment the base offset of
    /// the source's next segment, for an active-segment prefix the offset after its
    /// last complete batch.
    pub next_offset: i64,
    pub batches: u64,
    pub records: u64,
    /// Largest batch max timestamp, `-1` if none.
    pub max_timestamp: i64,
    /// The source had rolled past this segment: it will not grow any more.
    pub sealed: bool,
    /// Leader epochs in force in `[base, next)`: the one in force at `base` (which
    /// may start earlier) and each one starting inside the range.
    pub epochs: Vec<EpochStart>,
    /// The source partition's log start offset when this was shipped.
    pub log_start_offset: i64,
    pub files: Vec<ManifestFile>,
    pub shipper: ShipperStamp,
    pub created_at_ms: i64,
}

/// Reads `format` alone, so that an unknown version is reported as such rather
/// than as whatever field it changed.
#[derive(Deserialize)]
struct FormatProbe {
    format: Option<String>,
}

/// A byte position from serde_json's 1-based line and column.
fn json_position(bytes: &[u8], err: &serde_json::Error) -> u64 {
    let (line, column) = (err.line(), err.column());
    if line == 0 {
        return 0;
    }
    let mut pos = 0usize;
    let mut current = 1usize;
    for (i, &b) in bytes.iter().enumerate() {
        if current == line {
            pos = i;
            break;
        }
        if b == b'\n' {
            current += 1;
            pos = i + 1;
        }
    }
    (pos + column.saturating_sub(1)).min(bytes.len()) as u64
}

/// Shared reader: size cap, format check, typed parse.
fn parse_document<T: serde::de::DeserializeOwned>(key: &str, bytes: &[u8], format: &str, max: u64) -> Result<T> {
    let corrupt = |position: u64, defect: Defect| Error::corrupt(key, position, None, defect);
    if bytes.len() as u64 > max {
        return Err(corrupt(
            0,
            Defect::BadLength {
                field: "document size",
                value: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
            },
        ));
    }
    let probe: FormatProbe = serde_json::from_slice(bytes)
        .map_err(|e| corrupt(json_position(bytes, &e), manifest_defect(format!("not a JSON document: {e}"))))?;
    match probe.format.as_deref() {
        Some(f) if f == format => {}
        Some(other) => {
            return Err(corrupt(
                0,
                manifest_defect(format!(
                    "unsupported format '{other}': this segmirror reads '{format}' (written by a newer segmirror?)"
                )),
            ))
        }
        None => return Err(corrupt(0, manifest_defect(format!("no 'format' field (expected '{format}')")))),
    }
    serde_json::from_slice(bytes)
        .map_err(|e| corrupt(json_position(bytes, &e), manifest_defect(format!("invalid {format}: {e}"))))
}

impl Manifest {
    /// Parse and [`validate`](Self::validate) a manifest read from `key`. Fails with
    /// [`Error::Corrupt`] ([`Defect::Manifest`], or [`Defect::BadLength`] above
    /// [`MAX_MANIFEST_BYTES`]); never panics on hostile bytes.
    pub fn from_json(key: &str, bytes: &[u8]) -> Result<Manifest> {
        let manifest: Manifest = parse_document(key, bytes, MANIFEST_FORMAT_V1, MAX_MANIFEST_BYTES)?;
        manifest.validate().map_err(|d| Error::corrupt(key, 0, None, d))?;
        Ok(manifest)
    }

    /// Pretty JSON (manifests are read by people during incidents).
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain structs with string map keys cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// The partition this manifest belongs to, under `prefix`.
    pub fn partition_key(&self, prefix: KeyPrefix) -> Result<PartitionKey> {
        PartitionKey::new(prefix, &self.link, &self.topic, self.partition)
    }

    pub fn range(&self) -> std::result::Result<SegmentRange, String> {
        SegmentRange::new(self.base_offset, self.next_offset)
    }

    /// The file of the given kind, if shipped.
    pub fn file(&self, kind: SegmentFileKind) -> Option<&ManifestFile> {
        self.files.iter().find(|f| f.name.kind == kind)
    }

    /// Internal consistency, everything that can be checked without the data:
    /// - `format` is [`MANIFEST_FORMAT_V1`]; link, topic, partition and ids legal;
    /// - `0 <= base <= next`; with batches `base <= first <= last < next`,
    ///   `last - base <= i32::MAX` (Kafka's relative offsets), and
    ///   `batches <= records-or-offsets`: `batches` and `records` at most
    ///   `last - first + 1`; without batches no first/last, no records, empty `.log`;
    /// - files: exactly one `.log`, one `.index`, one `.timeindex`, at most one
    ///   `.txnindex` and one `.snapshot`, all named after `base`; sizes fit their
    ///   format (`.log` at most `i32::MAX` bytes, indexes whole entries, snapshot a
    ///   whole header plus entries); each key is this manifest's data key under some
    ///   valid prefix, the same prefix for all files;
    /// - epochs strictly increasing in epoch and start offset, non-negative, none
    ///   starting after `next`, at most one starting at or before `base`;
    /// - `max_timestamp >= -1`, `log_start_offset >= 0`, `created_at_ms >= 0`.
    pub fn validate(&self) -> std::result::Result<(), Defect> {
        let fail = |m: String| Err(manifest_defect(m));
        if self.format != MANIFEST_FORMAT_V1 {
            return fail(format!("format '{}' is not '{MANIFEST_FORMAT_V1}'", self.format));
        }
        let partition_key = match self.partition_key(KeyPrefix::root()) {
            Ok(k) => k,
            Err(e) => return fail(e.to_string()),
        };
        if self.source_topic_id == Uuid::ZERO {
            return fail("source topic id is the zero id".into());
        }
        validate_id("source cluster id", &self.source_cluster_id).map_err(manifest_defect)?;
        validate_id("shipper id", &self.shipper.id).map_err(manifest_defect)?;
        let range = self.range().map_err(manifest_defect)?;
        let (base, next) = (self.base_offset, self.next_offset);
        match (self.first_offset, self.last_offset) {
            (Some(first), Some(last)) => {
                if !(base <= first && first <= last && last < next) {
                    return fail(format!(
                        "offsets must satisfy base {base} <= first {first} <= last {last} < next {next}"
                    ));
                }
                if last - base > i64::from(i32::MAX) {
                    return fail(format!(
                        "last offset {last} cannot be expressed relative to base offset {base}"
                    ));
                }
                let span = u64::try_from(last - first).unwrap_or(u64::MAX).saturating_add(1);
                if self.batches == 0 || self.batches > span {
                    return fail(format!(
                        "{} batches cannot hold offsets {first}..={last}",
                        self.batches
                    ));
                }
                if self.records > span {
                    return fail(format!(
                        "{} records do not fit in offsets {first}..={last}",
                        self.records
                    ));
                }
            }
            (None, None) => {
                if self.batches != 0 || self.records != 0 {
                    return fail("batches or records without a first and last offset".into());
                }
            }
            _ => return fail("first_offset and last_offset must both be present or both absent".into()),
        }
        if self.max_timestamp < -1 {
            return fail(format!("max timestamp {} is below -1", self.max_timestamp));
        }
        if self.log_start_offset < 0 {
            return fail(format!("log start offset {} is negative", self.log_start_offset));
        }
        if self.created_at_ms < 0 {
            return fail(format!("created_at_ms {} is negative", self.created_at_ms));
        }
        self.validate_epochs()?;
        self.validate_files(&partition_key, range)
    }

    fn validate_epochs(&self) -> std::result::Result<(), Defect> {
        let mut previous: Option<EpochStart> = None;
        let mut at_or_before_base = 0;
        for e in &self.epochs {
            if e.epoch < 0 || e.start_offset < 0 {
                return Err(manifest_defect(format!(
                    "leader epoch entry ({}, {}) is negative",
                    e.epoch, e.start_offset
                )));
            }
            if let Some(p) = previous {
                if e.epoch <= p.epoch || e.start_offset <= p.start_offset {
                    return Err(Defect::Epoch {
                        message: format!(
                            "entry ({}, {}) does not follow ({}, {}) in increasing epoch and start offset",
                            e.epoch, e.start_offset, p.epoch, p.start_offset
                        ),
                    });
                }
            }
            if e.start_offset > self.next_offset {
                return Err(manifest_defect(format!(
                    "leader epoch {} starts at {}, after the segment's next offset {}",
                    e.epoch, e.start_offset, self.next_offset
                )));
            }
            if e.start_offset <= self.base_offset {
                at_or_before_base += 1;
            }
            previous = Some(*e);
        }
        if at_or_before_base > 1 {
            return Err(manifest_defect(format!(
                "{at_or_before_base} leader epochs start at or before base offset {}; only the one in force there belongs here",
                self.base_offset
            )));
        }
        Ok(())
    }

    fn validate_files(&self, partition: &PartitionKey, range: SegmentRange) -> std::result::Result<(), Defect> {
        let fail = |m: String| Err(manifest_defect(m));
        let mut seen: Vec<SegmentFileKind> = Vec::new();
        let mut file_prefix: Option<&str> = None;
        for f in &self.files {
            if seen.contains(&f.name.kind) {
                return fail(format!("more than one .{} file", f.name.kind.extension()));
            }
            seen.push(f.name.kind);
            if f.name.base_offset != self.base_offset {
                return fail(format!("file {} is not named after base offset {}", f.name, self.base_offset));
            }
            if let Some(reason) = size_problem(f.name.kind, f.size) {
                return fail(format!("{}: {reason}", f.name));
            }
            // The key must be exactly our data key, below one valid prefix.
            let suffix = partition
                .data_key(&self.source_topic_id, range, f.name)
                .map_err(|e| manifest_defect(e.to_string()))?;
            let prefix = if f.key == suffix {
                ""
            } else {
                match f.key.strip_suffix(suffix.as_str()).and_then(|p| p.strip_suffix('/')) {
                    Some(p) if !p.is_empty() && KeyPrefix::new(p).is_ok_and(|k| k.as_str() == p) => p,
                    _ => return fail(format!("file {} has key '{}', not its data key '{suffix}'", f.name, f.key)),
                }
            };
            match file_prefix {
                None => file_prefix = Some(prefix),
                Some(p) if p == prefix => {}
                Some(p) => return fail(format!("file keys use different prefixes '{p}' and '{prefix}'")),
            }
        }
        for required in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            if !seen.contains(&required) {
                return fail(format!("no .{} file", required.extension()));
            }
        }
        let log_size = self.file(SegmentFileKind::Log).map_or(0, |f| f.size);
        if (self.batches == 0) != (log_size == 0) {
            return fail(format!("{} batches in a .log of {log_size} bytes", self.batches));
        }
        Ok(())
    }

    /// The manifest is where it claims to be: `manifest_key` (relative to the store
    /// root, listed under `prefix`) is the manifest key of this manifest's link,
    /// topic, partition, topic id and base offset, and every file key is the data
    /// key under the same prefix. A manifest copied or written to another place is
    /// refused, so a bucket writer cannot point the applier at another partition's
    /// data.
    pub fn check_location(&self, prefix: &KeyPrefix, manifest_key: &str) -> std::result::Result<(), Defect> {
        let partition = self
            .partition_key(prefix.clone())
            .map_err(|e| manifest_defect(e.to_string()))?;
        let expected = partition
            .manifest_key(&self.source_topic_id, self.base_offset)
            .map_err(|e| manifest_defect(e.to_string()))?;
        if manifest_key != expected {
            return Err(manifest_defect(format!(
                "manifest for {}-{} topic id {} base {} is stored at '{manifest_key}', not '{expected}'",
                self.topic, self.partition, self.source_topic_id, self.base_offset
            )));
        }
        let range = self.range().map_err(manifest_defect)?;
        for f in &self.files {
            let key = partition
                .data_key(&self.source_topic_id, range, f.name)
                .map_err(|e| manifest_defect(e.to_string()))?;
            if f.key != key {
                return Err(manifest_defect(format!("file {} has key '{}', expected '{key}'", f.name, f.key)));
            }
        }
        Ok(())
    }
}

/// Why a file of this kind cannot have this size, if it cannot.
fn size_problem(kind: SegmentFileKind, size: u64) -> Option<String> {
    match kind {
        SegmentFileKind::Log if size > i32::MAX as u64 => {
            Some(format!("{size} bytes exceed Kafka's segment limit of {} bytes", i32::MAX))
        }
        SegmentFileKind::Index if size % 8 != 0 => Some(format!("{size} bytes is not a whole number of 8-byte entries")),
        SegmentFileKind::TimeIndex if size % 12 != 0 => {
            Some(format!("{size} bytes is not a whole number of 12-byte entries"))
        }
        SegmentFileKind::TxnIndex if size % 34 != 0 => {
            Some(format!("{size} bytes is not a whole number of 34-byte entries"))
        }
        SegmentFileKind::Snapshot if size < 10 || (size - 10) % 46 != 0 => Some(format!(
            "{size} bytes is not a 10-byte snapshot header plus 46-byte entries"
        )),
        _ => None,
    }
}

/// A shipper's claim on a partition; stored at `lease/<epoch>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// [`LEASE_FORMAT_V1`].
    pub format: String,
    /// Who holds it (shipper id: host, process, ...).
    pub owner: String,
    pub epoch: u64,
    pub acquired_at_ms: i64,
}

impl Lease {
    pub fn new(owner: &str, epoch: u64, acquired_at_ms: i64) -> Self {
        Lease {
            format: LEASE_FORMAT_V1.to_string(),
            owner: owner.to_string(),
            epoch,
            acquired_at_ms,
        }
    }

    /// Parse and validate a lease read from `key`.
    pub fn from_json(key: &str, bytes: &[u8]) -> Result<Lease> {
        let lease: Lease = parse_document(key, bytes, LEASE_FORMAT_V1, MAX_LEASE_BYTES)?;
        lease.validate().map_err(|d| Error::corrupt(key, 0, None, d))?;
        Ok(lease)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Format, owner legal, epoch at least 1, time not negative.
    pub fn validate(&self) -> std::result::Result<(), Defect> {
        if self.format != LEASE_FORMAT_V1 {
            return Err(manifest_defect(format!("format '{}' is not '{LEASE_FORMAT_V1}'", self.format)));
        }
        validate_id("lease owner", &self.owner).map_err(manifest_defect)?;
        if self.epoch == 0 {
            return Err(manifest_defect("lease epoch 0 is not allowed; epochs start at 1"));
        }
        if self.acquired_at_ms < 0 {
            return Err(manifest_defect(format!("acquired_at_ms {} is negative", self.acquired_at_ms)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tid() -> Uuid {
        Uuid([7; 16])
    }

    fn pk(prefix: &str) -> PartitionKey {
        PartitionKey::new(KeyPrefix::new(prefix).unwrap(), "dc1-to-dc2", "orders.v1", 3).unwrap()
    }

    fn manifest(prefix: &str) -> Manifest {
        let p = pk(prefix);
        let range = SegmentRange::new(100, 250).unwrap();
        let file = |kind, size| {
            let name = SegmentFileName::new(100, kind);
            ManifestFile {
                name,
                key: p.data_key(&tid(), range, name).unwrap(),
                size,
                crc32c: 0xdead_beef,
                sha256: Sha256Digest([0xab; 32]),
                mtime_ms: 1_700_000_000_000,
            }
        };
        Manifest {
            format: MANIFEST_FORMAT_V1.into(),
            link: "dc1-to-dc2".into(),
            topic: "orders.v1".into(),
            partition: 3,
            source_topic_id: tid(),
            source_cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            base_offset: 100,
            first_offset: Some(100),
            last_offset: Some(249),
            next_offset: 250,
            batches: 10,
            records: 150,
            max_timestamp: 1_700_000_000_123,
            sealed: true,
            epochs: vec![
                EpochStart { epoch: 3, start_offset: 40 },
                EpochStart { epoch: 5, start_offset: 200 },
            ],
            log_start_offset: 0,
            files: vec![
                file(SegmentFileKind::Log, 9000),
                file(SegmentFileKind::Index, 16),
                file(SegmentFileKind::TimeIndex, 24),
                file(SegmentFileKind::Snapshot, 10 + 46),
            ],
            shipper: ShipperStamp {
                id: "host-a/1234".into(),
                lease_epoch: 2,
            },
            created_at_ms: 1_700_000_001_000,
        }
    }

    #[test]
    fn keys_have_the_documented_layout() {
        let p = pk("backups/kafka");
        assert_eq!(p.dir(), "backups/kafka/dc1-to-dc2/orders.v1/3");
        assert_eq!(p.lease_key(7), "backups/kafka/dc1-to-dc2/orders.v1/3/lease/00000000000000000007.json");
        let id = tid().to_string();
        assert_eq!(id.len(), 22);
        assert_eq!(
            p.manifest_key(&tid(), 100).unwrap(),
            format!("backups/kafka/dc1-to-dc2/orders.v1/3/{id}/manifests/00000000000000000100.json")
        );
        let range = SegmentRange::new(100, 250).unwrap();
        assert_eq!(
            p.data_key(&tid(), range, SegmentFileName::new(100, SegmentFileKind::TimeIndex)).unwrap(),
            format!(
                "backups/kafka/dc1-to-dc2/orders.v1/3/{id}/data/00000000000000000100/00000000000000000250/00000000000000000100.timeindex"
            )
        );
        // Root prefix: keys start with the link.
        assert_eq!(pk("").lease_key(1), "dc1-to-dc2/orders.v1/3/lease/00000000000000000001.json");
        assert_eq!(pk("/a/b/").dir(), "a/b/dc1-to-dc2/orders.v1/3");
    }

    #[test]
    fn builders_refuse_illegal_input() {
        let root = KeyPrefix::root();
        assert!(PartitionKey::new(root.clone(), "..", "t", 0).is_err());
        assert!(PartitionKey::new(root.clone(), "a/b", "t", 0).is_err());
        assert!(PartitionKey::new(root.clone(), "l", "..", 0).is_err());
        assert!(PartitionKey::new(root.clone(), "l", "a/b", 0).is_err());
        assert!(PartitionKey::new(root.clone(), "l", &"x".repeat(250), 0).is_err());
        assert!(PartitionKey::new(root, "l", "t", -1).is_err());
        assert!(KeyPrefix::new("a/../b").is_err());
        assert!(KeyPrefix::new("a//b").is_err());
        assert!(KeyPrefix::new("a/ b").is_err());
        assert!(KeyPrefix::new("a\\b").is_err());
        let p = pk("");
        assert!(p.manifest_key(&tid(), -1).is_err());
        let range = SegmentRange::new(100, 200).unwrap();
        assert!(p.data_key(&tid(), range, SegmentFileName::new(99, SegmentFileKind::Log)).is_err());
        assert!(SegmentRange::new(-1, 5).is_err());
        assert!(SegmentRange::new(5, 4).is_err());
    }

    #[test]
    fn keys_parse_back() {
        for prefix in ["", "a", "a/b=c/d"] {
            let p = pk(prefix);
            let prefix = KeyPrefix::new(prefix).unwrap();
            let range = SegmentRange::new(100, 250).unwrap();
            let cases = [
                (p.lease_key(42), ObjectKind::Lease { epoch: 42 }),
                (
                    p.manifest_key(&tid(), 100).unwrap(),
                    ObjectKind::Manifest { topic_id: tid(), base_offset: 100 },
                ),
                (
                    p.data_key(&tid(), range, SegmentFileName::new(100, SegmentFileKind::Log)).unwrap(),
                    ObjectKind::Data { topic_id: tid(), range, file: SegmentFileName::new(100, SegmentFileKind::Log) },
                ),
            ];
            for (key, kind) in cases {
                let parsed = ObjectKey::parse(&prefix, &key).unwrap();
                assert_eq!(parsed.partition, p);
                assert_eq!(parsed.kind, kind);
                assert_eq!(parsed.to_key(), key);
            }
        }
    }

    #[test]
    fn hostile_keys_are_rejected() {
        let id = tid().to_string();
        let prefix = KeyPrefix::new("p").unwrap();
        let data = |tail: &str| format!("p/l/t/0/{id}/data/{tail}");
        let bad = [
            "other/l/t/0/lease/00000000000000000001.json".to_string(),
            "p/../t/0/lease/00000000000000000001.json".into(),
            "p/l/../0/lease/00000000000000000001.json".into(),
            "p/l/t/00/lease/00000000000000000001.json".into(),
            "p/l/t/-1/lease/00000000000000000001.json".into(),
            "p/l/t/+1/lease/00000000000000000001.json".into(),
            "p/l/t/0/lease/1.json".into(),
            "p/l/t/0/lease/00000000000000000001.json/x".into(),
            "p/l/t/0/lease/../00000000000000000001.json".into(),
            "p/l/t/0/lease".into(),
            "/p/l/t/0/lease/00000000000000000001.json".into(),
            "p//l/t/0/lease/00000000000000000001.json".into(),
            format!("p/l/t/0/{id}/manifests/9223372036854775808.json"),
            format!("p/l/t/0/{id}/manifests/00000000000000000100.JSON"),
            "p/l/t/0/AAAAAAAAAAAAAAAAAAAAAA/manifests/00000000000000000100.json".into(),
            format!("p/l/t/0/{id}==/manifests/00000000000000000100.json"),
            data("00000000000000000100/00000000000000000200/../../../../../../etc/passwd"),
            data("00000000000000000100/00000000000000000200/passwd"),
            data("00000000000000000100/00000000000000000200/00000000000000000100.log.deleted"),
            data("00000000000000000100/00000000000000000200/00000000000000000101.log"),
            data("00000000000000000100/00000000000000000200/100.log"),
            data("00000000000000000100/00000000000000000200/leader-epoch-checkpoint"),
            data("00000000000000000200/00000000000000000100/00000000000000000200.log"),
            data("00000000000000000100/00000000000000000200/00000000000000000100.log/x"),
        ];
        for key in bad {
            let err = ObjectKey::parse(&prefix, &key).expect_err(&key);
            assert!(matches!(err, Error::BadName { ref path, .. } if path == &PathBuf::from(&key)), "{key}: {err}");
        }
    }

    #[test]
    fn a_valid_manifest_round_trips_through_json() {
        for prefix in ["", "backups"] {
            let m = manifest(prefix);
            m.validate().unwrap();
            let key = pk(prefix).manifest_key(&tid(), 100).unwrap();
            let json = m.to_json();
            let back = Manifest::from_json(&key, &json).unwrap();
            assert_eq!(back, m);
            back.check_location(&KeyPrefix::new(prefix).unwrap(), &key).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(v["format"], "segmirror.manifest.v1");
            assert_eq!(v["source_topic_id"], tid().to_string());
            assert_eq!(v["files"][0]["name"], "00000000000000000100.log");
            assert_eq!(v["files"][0]["sha256"], "ab".repeat(32));
            assert_eq!(v["files"][0]["crc32c"], 0xdead_beef_u32);
        }
    }

    #[test]
    fn unknown_fields_are_ignored_and_unknown_formats_rejected() {
        let key = "k.json";
        let mut v: serde_json::Value = serde_json::from_slice(&manifest("").to_json()).unwrap();
        v["added_in_a_later_v1"] = serde_json::json!({"x": 1});
        Manifest::from_json(key, &serde_json::to_vec(&v).unwrap()).unwrap();
        v["format"] = "segmirror.manifest.v2".into();
        let err = Manifest::from_json(key, &serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(err.to_string().contains("unsupported format 'segmirror.manifest.v2'"), "{err}");
        let err = Manifest::from_json(key, b"{\"link\": 1}").unwrap_err();
        assert!(err.to_string().contains("no 'format' field"), "{err}");
        // Syntax errors name the byte: the offending one, or the last one read at EOF.
        for (doc, at) in [(&b"{\n  \"format\" x}"[..], 13), (b"{\n  \"format\": ", 13)] {
            match Manifest::from_json(key, doc).unwrap_err() {
                Error::Corrupt { position, defect: Defect::Manifest { .. }, .. } => assert_eq!(position, at),
                other => panic!("{other}"),
            }
        }
    }

    #[test]
    fn oversized_documents_are_refused_before_parsing() {
        let big = vec![b' '; MAX_MANIFEST_BYTES as usize + 1];
        let err = Manifest::from_json("k", &big).unwrap_err();
        assert!(matches!(err, Error::Corrupt { defect: Defect::BadLength { .. }, .. }), "{err}");
        let big = vec![b' '; MAX_LEASE_BYTES as usize + 1];
        assert!(Lease::from_json("k", &big).is_err());
    }

    fn invalid(mutate: impl FnOnce(&mut Manifest), expect: &str) {
        let mut m = manifest("pre");
        mutate(&mut m);
        let defect = m.validate().expect_err(expect);
        assert!(defect.to_string().contains(expect), "expected '{expect}', got '{defect}'");
        // And the same through JSON, where most hostile manifests arrive.
        assert!(Manifest::from_json("k", &serde_json::to_vec(&m).unwrap()).is_err());
    }

    #[test]
    fn inconsistent_manifests_are_invalid() {
        invalid(|m| m.first_offset = Some(99), "base 100 <= first 99");
        invalid(|m| m.last_offset = Some(250), "last 250 < next 250");
        invalid(|m| m.first_offset = Some(200), "records do not fit");
        invalid(|m| m.last_offset = None, "both be present");
        invalid(|m| m.next_offset = 99, "below base offset");
        invalid(|m| m.base_offset = -1, "negative");
        invalid(|m| m.batches = 0, "batches cannot hold");
        invalid(|m| m.records = 151, "records do not fit");
        invalid(|m| m.topic = "a/b".into(), "topic");
        invalid(|m| m.link = "..".into(), "not allowed");
        invalid(|m| m.partition = -3, "negative");
        invalid(|m| m.source_cluster_id = String::new(), "source cluster id");
        invalid(|m| m.shipper.id = "a\nb".into(), "printable");
        invalid(|m| m.files.retain(|f| f.name.kind != SegmentFileKind::Log), "no .log file");
        invalid(|m| m.files.retain(|f| f.name.kind != SegmentFileKind::TimeIndex), "no .timeindex file");
        invalid(
            |m| {
                let dup = m.files[0].clone();
                m.files.push(dup)
            },
            "more than one .log",
        );
        invalid(|m| m.files[1].size = 12, "8-byte entries");
        invalid(|m| m.files[2].size = 16, "12-byte entries");
        invalid(|m| m.files[3].size = 50, "snapshot header");
        invalid(|m| m.files[0].size = 1 << 31, "segment limit");
        invalid(|m| m.files[0].size = 0, "batches in a .log of 0 bytes");
        invalid(|m| m.files[0].name = SegmentFileName::new(99, SegmentFileKind::Log), "not named after");
        invalid(|m| m.files[0].key = m.files[0].key.replace("orders.v1", "other"), "not its data key");
        invalid(|m| m.files[0].key = format!("../{}", m.files[0].key), "not its data key");
        invalid(|m| m.files[1].key = m.files[1].key.replacen("pre/", "", 1), "different prefixes");
        invalid(|m| m.epochs.push(EpochStart { epoch: 4, start_offset: 220 }), "increasing");
        invalid(|m| m.epochs.push(EpochStart { epoch: 9, start_offset: 251 }), "after the segment's next offset");
        invalid(|m| m.epochs.insert(0, EpochStart { epoch: 1, start_offset: 0 }), "only the one in force");
        invalid(|m| m.max_timestamp = -2, "below -1");
        invalid(|m| m.format = "x".into(), "format");
    }

    #[test]
    fn an_empty_segment_is_valid_without_offsets() {
        let mut m = manifest("");
        m.first_offset = None;
        m.last_offset = None;
        m.batches = 0;
        m.records = 0;
        m.files[0].size = 0;
        m.validate().unwrap();
        m.records = 1;
        assert!(m.validate().is_err());
    }

    #[test]
    fn check_location_refuses_a_moved_manifest() {
        let m = manifest("pre");
        let prefix = KeyPrefix::new("pre").unwrap();
        let right = pk("pre").manifest_key(&tid(), 100).unwrap();
        m.check_location(&prefix, &right).unwrap();
        let other_partition = PartitionKey::new(prefix.clone(), "dc1-to-dc2", "orders.v1", 4).unwrap();
        assert!(m.check_location(&prefix, &other_partition.manifest_key(&tid(), 100).unwrap()).is_err());
        assert!(m.check_location(&prefix, &pk("pre").manifest_key(&tid(), 0).unwrap()).is_err());
        assert!(m.check_location(&KeyPrefix::root(), &right).is_err());
    }

    #[test]
    fn leases_round_trip_and_validate() {
        let lease = Lease::new("host-a/77", 3, 1_700_000_000_000);
        let back = Lease::from_json("k", &lease.to_json()).unwrap();
        assert_eq!(back, lease);
        assert!(Lease::from_json("k", &Lease::new("", 3, 0).to_json()).is_err());
        assert!(Lease::from_json("k", &Lease::new("a", 0, 0).to_json()).is_err());
        let mut v: serde_json::Value = serde_json::from_slice(&lease.to_json()).unwrap();
        v["format"] = "segmirror.lease.v9".into();
        let err = Lease::from_json("k", &serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(err.to_string().contains("unsupported format"), "{err}");
    }

    #[test]
    fn sha256_text_is_strict() {
        let d: Sha256Digest = "00ff".repeat(16).parse().unwrap();
        assert_eq!(d.0[1], 0xff);
        assert_eq!(d.to_string(), "00ff".repeat(16));
        assert!("00FF".repeat(16).parse::<Sha256Digest>().is_err());
        assert!("0".repeat(63).parse::<Sha256Digest>().is_err());
        assert!("g".repeat(64).parse::<Sha256Digest>().is_err());
        assert!("é".repeat(32).parse::<Sha256Digest>().is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_accepted_keys_round_trip(key in "[a-z0-9./_=+-]{0,120}") {
            let prefix = KeyPrefix::root();
            if let Ok(parsed) = ObjectKey::parse(&prefix, &key) {
                prop_assert_eq!(parsed.to_key(), key.clone());
                prop_assert!(!key.split('/').any(|c| c.is_empty() || c == "." || c == ".."));
            }
        }

        #[test]
        fn structured_keys_round_trip(
            link in "[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,20}",
            topic in "[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,20}",
            partition in 0..i32::MAX,
            id in any::<[u8; 16]>(),
            base in 0..i64::MAX / 2,
            len in 0..i64::MAX / 2,
            epoch in any::<u64>(),
            kind in proptest::sample::select(SegmentFileKind::ALL.to_vec()),
        ) {
            prop_assume!(id != [0; 16]);
            let id = Uuid(id);
            let p = PartitionKey::new(KeyPrefix::new("x/y").unwrap(), &link, &topic, partition).unwrap();
            let prefix = p.prefix().clone();
            let range = SegmentRange::new(base, base + len).unwrap();
            let keys = [
                (p.lease_key(epoch), ObjectKind::Lease { epoch }),
                (p.manifest_key(&id, base).unwrap(), ObjectKind::Manifest { topic_id: id, base_offset: base }),
                (
                    p.data_key(&id, range, SegmentFileName::new(base, kind)).unwrap(),
                    ObjectKind::Data { topic_id: id, range, file: SegmentFileName::new(base, kind) },
                ),
            ];
            for (key, kind) in keys {
                let parsed = ObjectKey::parse(&prefix, &key).unwrap();
                prop_assert_eq!(&parsed.partition, &p);
                prop_assert_eq!(parsed.kind, kind);
            }
        }

        #[test]
        fn documents_never_panic_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Manifest::from_json("k", &bytes);
            let _ = Lease::from_json("k", &bytes);
        }

        #[test]
        fn mutated_manifests_never_panic(pos in 0usize..4096, byte in any::<u8>()) {
            let mut json = manifest("p").to_json();
            let len = json.len().max(1);
            if let Some(b) = json.get_mut(pos % len) {
                *b = byte;
            }
            if let Ok(m) = Manifest::from_json("k", &json) {
                prop_assert!(m.validate().is_ok());
            }
        }
    }
}
