//! What the direct applier refuses, and whose fault each refusal is ([`TailError::into_direct`]): the peer's data
//! ends the session, a partition an operator must look at stops alone, this side's own failure stops the link.

use std::path::{Path, PathBuf};

use segmirror_transport::direct::error::DirectError;
use segmirror_transport::direct::payload::PartitionRef;

/// Why the appender refused a chunk or a seal, or could not read its state.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("{partition}: topic name {topic:?} is not a valid Kafka topic name; nothing written")]
    BadTopic { partition: String, topic: String },
    #[error("{partition}: chunk at segment {segment} position {position}: {reason}; nothing written")]
    OutOfOrder {
        partition: String,
        segment: i64,
        position: u64,
        reason: String,
    },
    #[error("{partition}: chunk at segment {segment} position {position}: bad batch at byte {at}: {reason}; nothing written")]
    BadBatch {
        partition: String,
        segment: i64,
        position: u64,
        at: u64,
        reason: String,
    },
    #[error("{partition}: chunk at segment {segment} position {position} ({len} bytes) differs from the bytes already durable in {}", path.display())]
    ResendMismatch {
        partition: String,
        segment: i64,
        position: u64,
        len: u64,
        path: PathBuf,
    },
    #[error("{partition}: seal of segment {segment}: {reason}; not sealed")]
    BadSeal {
        partition: String,
        segment: i64,
        reason: String,
    },
    #[error("{partition}: the catalog records the partition {state}; nothing written (a paused or promoted partition is never appended to)")]
    NotWritable {
        partition: String,
        state: String,
        of: PartitionRef,
    },
    #[error("{partition}: the mirror holds source topic id {recorded}, the shipper sends {offered} (the source topic was deleted and recreated); nothing written, the partition stops: `segmirror link reset-partition` mirrors the new topic from its start")]
    LineageBreak {
        partition: String,
        recorded: String,
        offered: String,
        of: PartitionRef,
    },
    /// Writing or reading one partition's files failed on this side (see `Inner::apply_chunks`), or the catalog's
    /// history of it refused a seal (`TailCatalog::record_seal`): that partition stops for the session; the next
    /// session tries it again.
    #[error("{}-{}: {source}; the partition stops, tried again at the next session", of.topic, of.partition)]
    LocalPartition {
        of: PartitionRef,
        #[source]
        source: Box<TailError>,
    },
    /// The partition's directory holds what this appender did not write (the bucket path's install for another
    /// link, files put there by hand): the partition stops until an operator looks.
    #[error("{partition}: {reason}; nothing written, the partition stops")]
    Foreign {
        partition: String,
        reason: String,
        of: PartitionRef,
    },
    #[error("{partition}: cannot continue the mirror `apply` installed: {}: {reason}; nothing written", path.display())]
    HandOver {
        partition: String,
        path: PathBuf,
        reason: String,
    },
    #[error("{partition}: Truncate to offset {truncate_to} (segment {segment} position {position}): {reason}; nothing truncated")]
    Truncate {
        partition: String,
        truncate_to: i64,
        segment: i64,
        position: u64,
        reason: String,
    },
    #[cfg(feature = "failpoints")]
    #[error("failpoint {0:?} hit")]
    Injected(crate::failpoint::FailPoint),
    #[error("catalog: {0}")]
    Catalog(#[from] segmirror_catalog::Error),
    #[error("{}: {reason}", path.display())]
    BadState { path: PathBuf, reason: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] segment_format::Error),
}

impl From<crate::mirror::StateError> for TailError {
    fn from(e: crate::mirror::StateError) -> TailError {
        match e {
            crate::mirror::StateError::BadState { path, reason } => TailError::BadState { path, reason },
            crate::mirror::StateError::Io { path, source } => TailError::Io { path, source },
        }
    }
}

impl TailError {
    pub(super) fn io(path: &Path, source: std::io::Error) -> TailError {
        TailError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whose fault the error is, as the session needs to know it:
    /// - what the shipper sent cannot be applied (a bad batch, a gap, a seal or truncation that does not fit the
    ///   mirror, a name Kafka refuses): [`DirectError::PeerData`], which ends the session only; nothing of it was
    ///   written, and the next session resumes from what is durable;
    /// - one partition cannot be written until an operator acts (recreated source topic, paused or promoted
    ///   partition, files this appender did not write): [`DirectError::PartitionStopped`], and the session goes on
    ///   with the others;
    /// - this side's own failure: one partition's files, or a seal its catalog history refuses
    ///   ([`TailError::LocalPartition`]), stop that partition like the above, until the next session tries it
    ///   again; anything else (the catalog itself, a group's fsync, the mirror's shared state):
    ///   [`DirectError::Local`], which stops the link.
    pub fn into_direct(self, what: &'static str) -> DirectError {
        match self {
            TailError::BadTopic { .. }
            | TailError::OutOfOrder { .. }
            | TailError::BadBatch { .. }
            | TailError::ResendMismatch { .. }
            | TailError::BadSeal { .. }
            | TailError::Truncate { .. } => DirectError::PeerData {
                what,
                reason: self.to_string(),
            },
            TailError::NotWritable { ref of, .. }
            | TailError::LineageBreak { ref of, .. }
            | TailError::Foreign { ref of, .. }
            | TailError::LocalPartition { ref of, .. } => DirectError::PartitionStopped {
                partition: of.clone(),
                reason: self.to_string(),
            },
            e => DirectError::Local {
                what,
                source: Box::new(e),
            },
        }
    }
}

pub(super) type TailResult<T> = std::result::Result<T, TailError>;
