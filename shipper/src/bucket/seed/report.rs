//! What a seed did, partition by partition.
//!
//! The report is data, not log lines: a front end prints it as a table or JSON
//! and derives its exit status from it ([`SeedReport::has_failures`],
//! [`SeedReport::has_refusals`]). Every partition the pattern selected appears
//! exactly once, in [`SeedReport::partitions`]; directories excluded by rule
//! (internal topics, `-delete`/`-future`/`-stray`, no topic id) appear in
//! [`SeedReport::skipped`].

use std::path::{Path, PathBuf};

use segment_format::report::Finding;
use serde::Serialize;

pub use crate::source::discover::{SkipReason, SkippedPartition};

/// Why a partition stopped with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Another shipper took a newer lease: this one stopped before its next commit.
    Fenced,
    /// The source kept changing while a segment was read (a broker rolled,
    /// compacted, deleted or truncated it); a later run picks it up.
    SourceChanged,
    /// The source directory or its metadata could not be read or is unusable.
    Source,
    /// The object store failed (after retries) or the lease could not be taken.
    Store,
    /// `--upto high-watermark`: the source's high watermark did not reach the version's last offset in time
    /// (`seed::committed`); nothing of it was uploaded, a later round ships it.
    NotCommitted,
}

/// How a partition ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PartitionStatus {
    /// Every segment of the source is in the bucket (the active one up to its
    /// last complete batch).
    Complete,
    /// A source segment (or the partition's metadata, `base_offset: None`) is
    /// corrupt and was not shipped; nothing after it was shipped either, so the
    /// bucket never has a hole. `findings` are the verification errors.
    Refused {
        base_offset: Option<i64>,
        findings: Vec<Finding>,
    },
    /// The bucket holds a version of the segment at `base_offset` that the
    /// source no longer matches (truncated or rewritten at the source, e.g.
    /// after an unclean leader election). Nothing is overwritten; an operator
    /// decides.
    Diverged {
        base_offset: i64,
        shipped_next_offset: i64,
        source_next_offset: i64,
        reason: String,
    },
    /// Stopped by an error; what was committed before it stays valid.
    Failed { kind: FailureKind, error: String },
}

/// One selected partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    pub path: PathBuf,
    /// The lineage shipped under (canonical text form).
    pub source_topic_id: Option<String>,
    pub status: PartitionStatus,
    /// Segment versions committed by this run (new manifests, including
    /// re-shipped active segments and segments re-committed as sealed).
    pub segments_shipped: u64,
    /// Segments the bucket already had.
    pub segments_already_shipped: u64,
    /// Bytes uploaded (all files of all shipped versions).
    pub bytes_uploaded: u64,
    /// The bucket's manifests for this partition now reach up to this offset
    /// (exclusive), as far as this run saw; `None` if nothing is there.
    pub shipped_through: Option<i64>,
    /// Bytes after the last complete batch of the active segment, not shipped
    /// (a batch the broker is still writing, or a preallocated zero tail).
    pub excluded_tail_bytes: u64,
    /// Bytes of source `.log` files the passes of this run covered (verification, index rebuilding, hashing
    /// referenced chunks); uploads are counted in `bytes_uploaded`. A rerun with nothing new and the seed's
    /// memory reads none.
    pub log_bytes_scanned: u64,
    /// Bytes of active `.log` files the seed's memory read to confirm a remembered scan still holds (a bounded
    /// window around the end of the shipped prefix, at most 128 KiB per segment, whatever its size).
    pub tail_check_bytes: u64,
    /// The lease epoch this run held, if it needed one.
    pub lease_epoch: Option<u64>,
    /// Things worth knowing that did not stop the partition (a producer
    /// snapshot that does not parse and was left out, an invalid manifest in
    /// the bucket that was replaced, ...).
    pub warnings: Vec<Finding>,
}

impl PartitionReport {
    pub(crate) fn new(topic: &str, partition: i32, path: &Path) -> Self {
        PartitionReport {
            topic: topic.to_string(),
            partition,
            path: path.to_path_buf(),
            source_topic_id: None,
            status: PartitionStatus::Complete,
            segments_shipped: 0,
            segments_already_shipped: 0,
            bytes_uploaded: 0,
            shipped_through: None,
            excluded_tail_bytes: 0,
            log_bytes_scanned: 0,
            tail_check_bytes: 0,
            lease_epoch: None,
            warnings: Vec::new(),
        }
    }

    /// `topic-partition`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

/// Everything a seed did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SeedReport {
    /// Selected partitions, sorted by topic and partition.
    pub partitions: Vec<PartitionReport>,
    /// Directories excluded by rule, in discovery order.
    pub skipped: Vec<SkippedPartition>,
    /// Partition directories the pattern did not select.
    pub not_selected: u64,
    /// Log dirs that could not be used at all.
    pub log_dir_errors: Vec<String>,
}

impl SeedReport {
    pub fn segments_shipped(&self) -> u64 {
        self.partitions.iter().map(|p| p.segments_shipped).sum()
    }

    pub fn segments_already_shipped(&self) -> u64 {
        self.partitions.iter().map(|p| p.segments_already_shipped).sum()
    }

    pub fn bytes_uploaded(&self) -> u64 {
        self.partitions.iter().map(|p| p.bytes_uploaded).sum()
    }

    /// The partition `topic-partition`, if selected.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionReport> {
        self.partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
    }

    /// Some source data was refused as corrupt.
    pub fn has_refusals(&self) -> bool {
        self.partitions
            .iter()
            .any(|p| matches!(p.status, PartitionStatus::Refused { .. }))
    }

    /// Some partition stopped on an error or a divergence, or a log dir was unusable.
    pub fn has_failures(&self) -> bool {
        !self.log_dir_errors.is_empty()
            || self.partitions.iter().any(|p| {
                matches!(
                    p.status,
                    PartitionStatus::Failed { .. } | PartitionStatus::Diverged { .. }
                )
            })
    }

    /// Every selected partition is complete and every log dir was usable.
    pub fn is_complete(&self) -> bool {
        !self.has_failures() && !self.has_refusals()
    }
}
