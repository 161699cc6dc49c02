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
//! Beside the partitions, a link holds objects whose names are no topic names (`@`): its identity
//! (`crate::link_identity`) and its change notice (`crate::link_changes`), and its metadata under `_meta/`.
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
//! - `data/<base>/<next>/<next:020>.snapshot`: the producer snapshot a broker writes
//!   at its log end on clean shutdown, shipped with the unsealed (last) version whose
//!   `next` is that log end ([`Manifest::end_snapshot`]). It is the one data file not
//!   named after `base`: without it a mirror's producer state at its end would depend
//!   on whether the source was running when `seed` read it.
//! - `data/<base>/<next>/<from:020>.logchunk`: one chunk of a segment's `.log`, the bytes
//!   `[from, to)` (whole batches) ending where offset `next` starts; listed by a
//!   [`MANIFEST_FORMAT_V2`] manifest's [`Manifest::log_chunks`] (see `chunks`). A grown
//!   version of an active segment references the chunks already shipped and adds one for
//!   the new bytes only, so a rerun of `seed` uploads what was appended, not the prefix.
//! - `manifests/<base>.json`: a [`Manifest`], the commit point of a segment
//!   version, written after all its data objects. A later version of the same
//!   segment (the active segment grew, or was sealed) replaces it; a reader uses
//!   whichever manifest is there.
//!
//! # Documents
//!
//! Both documents carry a `format` string (`segmirror.manifest.v1` or
//! `segmirror.manifest.v2`, `segmirror.lease.v1`). A reader rejects any other format
//! with an error that names it, so an old segmirror never misreads a newer bucket. A v2
//! manifest is a v1 manifest plus `log_chunks`: its `.log` entry in `files` describes the
//! assembled `.log` (size, CRC-32C, SHA-256, mtime) and names no object; the chunks are the
//! objects. Only grown versions are written as v2, so a segment's first version (and every
//! segment shipped whole) stays readable by a v1-only reader. Within a format,
//! new fields may be added: readers ignore fields they do not know. Documents are
//! size-capped ([`MAX_MANIFEST_BYTES`], [`MAX_LEASE_BYTES`]) before parsing.
//!
//! What [`Manifest::validate`] guarantees is listed on it; a valid manifest still
//! has to be checked against its location with [`Manifest::check_location`] before
//! any of its keys is used.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use segment_format::dir::SegmentFileKind;
use segment_format::partition_metadata::Uuid;

use crate::error::{DocumentProblem, Error, Result};

mod chunks;
mod keys;

pub use chunks::{LogChunk, CHUNK_SUFFIX, MANIFEST_FORMAT_V2, MAX_LOG_CHUNKS};

pub use keys::{
    in_data_dir, in_meta_data_dir, is_data_dir, is_meta_data_dir, meta_data_key, meta_manifest_key,
    parse_canonical_topic_id, parse_meta_key, validate_link_name, KeyPrefix, MetaKey, ObjectKey, ObjectKind,
    PartitionKey, SegmentFileName, SegmentRange, META_DATA_DIR, META_DIR, META_MANIFEST_NAME, OFFSETS_NAME,
    TOPICS_NAME,
};

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
/// Largest producer snapshot a manifest may list: 46 bytes per producer, so room
/// for ~5.8 million producers, far beyond any real partition, while a hostile
/// object cannot make a reader (who reads a snapshot whole) take gigabytes.
pub const MAX_SNAPSHOT_BYTES: u64 = 256 << 20;
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

fn manifest_defect(message: impl Into<String>) -> DocumentProblem {
    DocumentProblem::Invalid {
        message: message.into(),
    }
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
            return Err(format!(
                "sha256 must be 64 lowercase hex digits, got {} characters",
                bytes.len()
            ));
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            match (
                pair.first().copied().and_then(nibble),
                pair.get(1).copied().and_then(nibble),
            ) {
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
    /// [`MANIFEST_FORMAT_V1`], or [`MANIFEST_FORMAT_V2`] when the `.log` travels as [`Manifest::log_chunks`].
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
    /// The producer snapshot the source wrote at `next_offset` (its log end, at a
    /// clean shutdown), named `<next:020>.snapshot`; only on an unsealed version
    /// with `next > base`. Absent from manifests written before it was shipped, and
    /// left out of the JSON when absent, so both read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_snapshot: Option<ManifestFile>,
    /// The `.log` as chunk objects ([`MANIFEST_FORMAT_V2`] only; see `chunks`): contiguous byte ranges from 0 to
    /// the `.log` entry's size. Left out of the JSON when empty, so a v1 manifest reads and writes as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_chunks: Vec<LogChunk>,
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
fn parse_document<T: serde::de::DeserializeOwned>(key: &str, bytes: &[u8], formats: &[&str], max: u64) -> Result<T> {
    let format = formats.join("' or '");
    let corrupt = |position: u64, problem: DocumentProblem| Error::bad_document(key, position, problem);
    if bytes.len() as u64 > max {
        return Err(corrupt(
            0,
            DocumentProblem::TooLarge {
                size: bytes.len() as u64,
                limit: max,
            },
        ));
    }
    let probe: FormatProbe = serde_json::from_slice(bytes).map_err(|e| {
        corrupt(
            json_position(bytes, &e),
            manifest_defect(format!("not a JSON document: {e}")),
        )
    })?;
    match probe.format.as_deref() {
        Some(f) if formats.contains(&f) => {}
        Some(other) => {
            return Err(corrupt(
                0,
                manifest_defect(format!(
                    "unsupported format '{other}': this segmirror reads '{format}' (written by a newer segmirror?)"
                )),
            ))
        }
        None => {
            return Err(corrupt(
                0,
                manifest_defect(format!("no 'format' field (expected '{format}')")),
            ))
        }
    }
    serde_json::from_slice(bytes).map_err(|e| {
        corrupt(
            json_position(bytes, &e),
            manifest_defect(format!("invalid {format}: {e}")),
        )
    })
}

impl Manifest {
    /// What the succession rule needs of this version: its range, sealing and `.log` content. Leader epochs and the
    /// commit time are left out; a caller that weighs them (the audit) adds them.
    pub fn succession_version(&self) -> crate::succession::Version {
        let log = self.file(SegmentFileKind::Log);
        crate::succession::Version::new(
            self.base_offset,
            self.next_offset,
            self.sealed,
            crate::succession::Content {
                log_size: log.map_or(0, |f| f.size),
                last_offset: self.last_offset,
                sha256: log.map(|f| f.sha256.0),
            },
        )
    }

    /// Parse and [`validate`](Self::validate) a manifest read from `key`. Fails with
    /// [`Error::BadDocument`] ([`DocumentProblem::Invalid`], or [`DocumentProblem::TooLarge`]
    /// above [`MAX_MANIFEST_BYTES`]); never panics on hostile bytes.
    pub fn from_json(key: &str, bytes: &[u8]) -> Result<Manifest> {
        let manifest: Manifest = parse_document(
            key,
            bytes,
            &[MANIFEST_FORMAT_V1, MANIFEST_FORMAT_V2],
            MAX_MANIFEST_BYTES,
        )?;
        manifest.validate().map_err(|d| Error::bad_document(key, 0, d))?;
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

    /// The file of the given kind named after the base offset, if shipped.
    pub fn file(&self, kind: SegmentFileKind) -> Option<&ManifestFile> {
        self.files.iter().find(|f| f.name.kind == kind)
    }

    /// Every shipped file: the segment's files, then the end snapshot if any.
    pub fn all_files(&self) -> impl Iterator<Item = &ManifestFile> {
        self.files.iter().chain(self.end_snapshot.as_ref())
    }

    /// Internal consistency, everything that can be checked without the data:
    /// - `format` is [`MANIFEST_FORMAT_V1`] or [`MANIFEST_FORMAT_V2`]; link, topic, partition and ids legal;
    /// - `0 <= base <= next`; with batches `base <= first <= last < next`,
    ///   `last - base <= i32::MAX` (Kafka's relative offsets), and
    ///   `batches <= records-or-offsets`: `batches` and `records` at most
    ///   `last - first + 1`; without batches no first/last, no records, empty `.log`;
    /// - files: exactly one `.log`, one `.index`, one `.timeindex`, at most one
    ///   `.txnindex` and one `.snapshot`, all named after `base`; sizes fit their
    ///   format (`.log` at most `i32::MAX` bytes, indexes whole entries, snapshot a
    ///   whole header plus entries); each key is this manifest's data key under some
    ///   valid prefix, the same prefix for all files;
    /// - an end snapshot only on an unsealed version with `next > base`, named
    ///   `<next>.snapshot`, a whole snapshot of at most [`MAX_SNAPSHOT_BYTES`], keyed
    ///   `data/<base>/<next>/<next>.snapshot` under the same prefix;
    /// - chunks (v2 only, at most [`MAX_LOG_CHUNKS`]): contiguous from byte 0 to the `.log`
    ///   size, each non-empty, `next_offset` strictly increasing and at most `next` (equal to
    ///   `next` at the last chunk of an unsealed version), each key its chunk key under the
    ///   same prefix (or, for a chunk from byte 0, the `.log` data key of the v1 version that
    ///   ended at its `next_offset`); a v1 manifest has none;
    /// - epochs strictly increasing in epoch and start offset, non-negative, none
    ///   starting after `next`, at most one starting at or before `base`;
    /// - `max_timestamp >= -1`, `log_start_offset >= 0`, `created_at_ms >= 0`.
    pub fn validate(&self) -> std::result::Result<(), DocumentProblem> {
        let fail = |m: String| Err(manifest_defect(m));
        if self.format != MANIFEST_FORMAT_V1 && self.format != MANIFEST_FORMAT_V2 {
            return fail(format!(
                "format '{}' is neither '{MANIFEST_FORMAT_V1}' nor '{MANIFEST_FORMAT_V2}'",
                self.format
            ));
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
                    return fail(format!("{} batches cannot hold offsets {first}..={last}", self.batches));
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
        self.validate_files(&partition_key, range)?;
        let files_prefix = self.files_prefix(&partition_key).unwrap_or_default();
        let prefixed = self
            .partition_key(files_prefix)
            .map_err(|e| manifest_defect(e.to_string()))?;
        self.validate_chunks(&prefixed)
    }

    fn validate_epochs(&self) -> std::result::Result<(), DocumentProblem> {
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
                    return Err(DocumentProblem::Epoch {
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

    fn validate_files(
        &self,
        partition: &PartitionKey,
        range: SegmentRange,
    ) -> std::result::Result<(), DocumentProblem> {
        let fail = |m: String| Err(manifest_defect(m));
        let mut seen: Vec<SegmentFileKind> = Vec::new();
        let mut file_prefix: Option<&str> = None;
        for f in &self.files {
            if seen.contains(&f.name.kind) {
                return fail(format!("more than one .{} file", f.name.kind.extension()));
            }
            seen.push(f.name.kind);
            if f.name.base_offset != self.base_offset {
                return fail(format!(
                    "file {} is not named after base offset {}",
                    f.name, self.base_offset
                ));
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
                    _ => {
                        return fail(format!(
                            "file {} has key '{}', not its data key '{suffix}'",
                            f.name, f.key
                        ))
                    }
                }
            };
            match file_prefix {
                None => file_prefix = Some(prefix),
                Some(p) if p == prefix => {}
                Some(p) => return fail(format!("file keys use different prefixes '{p}' and '{prefix}'")),
            }
        }
        if let Some(f) = &self.end_snapshot {
            let what = format!("end snapshot {}", f.name);
            if self.sealed {
                return fail(format!(
                    "{what}: a sealed version has no end snapshot (its end is the next segment's base)"
                ));
            }
            if range.next() == range.base() {
                return fail(format!(
                    "{what}: an empty version's end is its base; its snapshot is the base snapshot"
                ));
            }
            if f.name.kind != SegmentFileKind::Snapshot || f.name.base_offset != self.next_offset {
                return fail(format!(
                    "{what} is not named after next offset {} (.snapshot)",
                    self.next_offset
                ));
            }
            if let Some(reason) = size_problem(f.name.kind, f.size) {
                return fail(format!("{what}: {reason}"));
            }
            if f.size > MAX_SNAPSHOT_BYTES {
                return fail(format!(
                    "{what}: {} bytes exceed the limit of {MAX_SNAPSHOT_BYTES}",
                    f.size
                ));
            }
            let suffix = partition.end_snapshot_key(&self.source_topic_id, range);
            let expected = match file_prefix {
                Some(p) if !p.is_empty() => format!("{p}/{suffix}"),
                _ => suffix,
            };
            if f.key != expected {
                return fail(format!("{what} has key '{}', not its data key '{expected}'", f.key));
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
    pub fn check_location(&self, prefix: &KeyPrefix, manifest_key: &str) -> std::result::Result<(), DocumentProblem> {
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
                return Err(manifest_defect(format!(
                    "file {} has key '{}', expected '{key}'",
                    f.name, f.key
                )));
            }
        }
        self.validate_chunks(&partition)?;
        if let Some(f) = &self.end_snapshot {
            let key = partition.end_snapshot_key(&self.source_topic_id, range);
            if f.key != key {
                return Err(manifest_defect(format!(
                    "end snapshot {} has key '{}', expected '{key}'",
                    f.name, f.key
                )));
            }
        }
        Ok(())
    }
}

/// Why a file of this kind cannot have this size, if it cannot.
fn size_problem(kind: SegmentFileKind, size: u64) -> Option<String> {
    match kind {
        SegmentFileKind::Log if size > i32::MAX as u64 => Some(format!(
            "{size} bytes exceed Kafka's segment limit of {} bytes",
            i32::MAX
        )),
        SegmentFileKind::Index if size % 8 != 0 => {
            Some(format!("{size} bytes is not a whole number of 8-byte entries"))
        }
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
        let lease: Lease = parse_document(key, bytes, &[LEASE_FORMAT_V1], MAX_LEASE_BYTES)?;
        lease.validate().map_err(|d| Error::bad_document(key, 0, d))?;
        Ok(lease)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Format, owner legal, epoch at least 1, time not negative.
    pub fn validate(&self) -> std::result::Result<(), DocumentProblem> {
        if self.format != LEASE_FORMAT_V1 {
            return Err(manifest_defect(format!(
                "format '{}' is not '{LEASE_FORMAT_V1}'",
                self.format
            )));
        }
        validate_id("lease owner", &self.owner).map_err(manifest_defect)?;
        if self.epoch == 0 {
            return Err(manifest_defect("lease epoch 0 is not allowed; epochs start at 1"));
        }
        if self.acquired_at_ms < 0 {
            return Err(manifest_defect(format!(
                "acquired_at_ms {} is negative",
                self.acquired_at_ms
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
