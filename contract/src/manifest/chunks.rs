//! Appendable chunks (`segmirror.manifest.v2`): an active segment's `.log` as a list of chunk objects, so a grown
//! version uploads only its new bytes.
//!
//! Why: a v1 version of an active segment holds its whole prefix in one object, so each rerun of `seed` against a
//! growing segment uploaded everything again — quadratic over a 1 GiB segment. A v2 version lists its `.log` as
//! byte ranges `[from, to)`, each ending on a batch boundary, each its own object with its CRC-32C and SHA-256. A
//! later version of the same segment (grown, or sealed) lists the earlier chunks by reference (same keys, same
//! digests) plus new chunks for the new bytes only. The `.log` entry of `files` still describes the assembled file
//! (size, CRC-32C, SHA-256, mtime), so everything that compares versions by their `.log` (the succession rule, the
//! catalog, a mirror file reused after a crash) works unchanged; in a v2 manifest its key names no object.
//!
//! A chunk's key is either a chunk key ([`PartitionKey::chunk_key`]) or, for the first chunk, the `.log` data key of
//! an earlier v1 version of the same segment (its whole prefix): a bucket written by an older `seed` turns into a
//! chunked one without uploading its prefix again.
//!
//! Only a grown version is v2; a segment's first version (and every sealed segment shipped whole) stays v1, which
//! older appliers read. An older applier refuses a v2 manifest by its `format`, naming it.

use serde::{Deserialize, Serialize};

use segment_format::dir::SegmentFileKind;

use super::{manifest_defect, KeyPrefix, Manifest, ManifestFile, PartitionKey, SegmentFileName, SegmentRange};
use super::{Sha256Digest, MANIFEST_FORMAT_V1};
use crate::error::DocumentProblem;

/// `format` of a manifest whose `.log` is a list of chunks ([`Manifest::log_chunks`]).
pub const MANIFEST_FORMAT_V2: &str = "segmirror.manifest.v2";
/// Suffix of a chunk object's name, `<from:020>.logchunk`.
pub const CHUNK_SUFFIX: &str = ".logchunk";
/// Most chunks one version may list. A chunk entry of pretty JSON with the longest legal key is under 900 bytes, so
/// this keeps a manifest under [`super::MAX_MANIFEST_BYTES`] (1 MiB) whatever the names; a shipper that would need
/// more ships the segment whole once (one v1 version) and starts chunking again from there.
pub const MAX_LOG_CHUNKS: usize = 1000;

/// One chunk of a v2 version's `.log`: the bytes `[from, to)`, whole batches, ending where `next_offset` starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogChunk {
    /// First byte (inclusive), a batch boundary.
    pub from: u64,
    /// End (exclusive), a batch boundary.
    pub to: u64,
    /// The offset after the chunk's last batch.
    pub next_offset: i64,
    /// The object holding exactly these bytes, relative to the store root.
    pub key: String,
    /// CRC-32C (Castagnoli) of the chunk's bytes.
    pub crc32c: u32,
    pub sha256: Sha256Digest,
}

impl LogChunk {
    pub fn size(&self) -> u64 {
        self.to - self.from.min(self.to)
    }
}

impl Manifest {
    /// Whether the `.log` travels as chunks (a v2 manifest).
    pub fn is_chunked(&self) -> bool {
        self.format == MANIFEST_FORMAT_V2
    }

    /// Every object the manifest names, as files: its files (in a v2 manifest without the `.log` entry, which names
    /// no object), each chunk (named `.log`, the segment file it is part of), then the end snapshot. What an audit
    /// checks exists and hashes.
    pub fn objects(&self) -> Vec<ManifestFile> {
        let chunked = self.is_chunked();
        let log_mtime = self.file(SegmentFileKind::Log).map_or(0, |f| f.mtime_ms);
        let mut out: Vec<ManifestFile> = self
            .files
            .iter()
            .filter(|f| !(chunked && f.name.kind == SegmentFileKind::Log))
            .cloned()
            .collect();
        out.extend(self.log_chunks.iter().map(|c| ManifestFile {
            name: SegmentFileName::new(self.base_offset, SegmentFileKind::Log),
            key: c.key.clone(),
            size: c.size(),
            crc32c: c.crc32c,
            sha256: c.sha256,
            mtime_ms: log_mtime,
        }));
        out.extend(self.end_snapshot.iter().cloned());
        out
    }

    /// The keys a chunk may have under `prefix`: its chunk key, and for a chunk from byte 0 the `.log` data key of
    /// the v1 version that ended at the chunk's `next_offset`.
    pub(super) fn chunk_keys(&self, partition: &PartitionKey, chunk: &LogChunk) -> Result<Vec<String>, String> {
        let range = SegmentRange::new(self.base_offset, chunk.next_offset)?;
        let mut keys = vec![partition.chunk_key(&self.source_topic_id, range, chunk.from)];
        if chunk.from == 0 {
            let log = SegmentFileName::new(self.base_offset, SegmentFileKind::Log);
            keys.push(
                partition
                    .data_key(&self.source_topic_id, range, log)
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(keys)
    }

    /// The chunk rules (see [`Manifest::validate`]); `partition` carries the prefix every key must be under.
    pub(super) fn validate_chunks(&self, partition: &PartitionKey) -> Result<(), DocumentProblem> {
        let fail = |m: String| Err(manifest_defect(m));
        if self.format == MANIFEST_FORMAT_V1 {
            return match self.log_chunks.first() {
                None => Ok(()),
                Some(c) => fail(format!(
                    "log_chunks (chunk '{}') in a {MANIFEST_FORMAT_V1} manifest; chunks need {MANIFEST_FORMAT_V2}",
                    c.key
                )),
            };
        }
        let log_size = self.file(SegmentFileKind::Log).map_or(0, |f| f.size);
        if self.log_chunks.len() > MAX_LOG_CHUNKS {
            return fail(format!(
                "log_chunks: {} chunks exceed the limit of {MAX_LOG_CHUNKS}",
                self.log_chunks.len()
            ));
        }
        if log_size > 0 && self.log_chunks.is_empty() {
            return fail(format!("log_chunks: none, for a .log of {log_size} bytes"));
        }
        let (mut at, mut previous_next) = (0u64, self.base_offset);
        for (i, c) in self.log_chunks.iter().enumerate() {
            let what = format!("chunk {i} ('{}')", c.key);
            if c.from != at {
                return fail(format!(
                    "{what}: field from is byte {}, expected {at}: chunks must be contiguous, in order and not overlap",
                    c.from
                ));
            }
            if c.to <= c.from {
                return fail(format!("{what}: field to {} is not above from {}", c.to, c.from));
            }
            if c.next_offset <= previous_next || c.next_offset > self.next_offset {
                return fail(format!(
                    "{what}: field next_offset {} must be above {previous_next} and at most the version's next offset {}",
                    c.next_offset, self.next_offset
                ));
            }
            let keys = self.chunk_keys(partition, c).map_err(manifest_defect)?;
            if !keys.contains(&c.key) {
                return fail(format!(
                    "{what}: field key is not its chunk key '{}'",
                    keys.join("' or '")
                ));
            }
            at = c.to;
            previous_next = c.next_offset;
        }
        if at != log_size {
            return fail(format!("log_chunks end at byte {at}, the .log is {log_size} bytes"));
        }
        if !self.sealed && !self.log_chunks.is_empty() && previous_next != self.next_offset {
            return fail(format!(
                "log_chunks end at offset {previous_next}, the unsealed version at its next offset {}",
                self.next_offset
            ));
        }
        Ok(())
    }

    /// The prefix the manifest's `.log` entry key is under (the one all its keys share), for [`Self::validate_chunks`].
    pub(super) fn files_prefix(&self, root: &PartitionKey) -> Option<KeyPrefix> {
        let log = self.file(SegmentFileKind::Log)?;
        let range = self.range().ok()?;
        let suffix = root.data_key(&self.source_topic_id, range, log.name).ok()?;
        if log.key == suffix {
            return Some(KeyPrefix::root());
        }
        let p = log.key.strip_suffix(suffix.as_str())?.strip_suffix('/')?;
        KeyPrefix::new(p).ok()
    }
}

#[cfg(test)]
mod tests;
