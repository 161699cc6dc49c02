//! # segment-format
//!
//! Bytes on disk <-> typed values for everything a Kafka broker keeps in a log
//! directory: record batches (magic 2 and legacy 0/1), records, the offset, time
//! and transaction indexes, text checkpoints, `partition.metadata`, producer-state
//! snapshots, and the naming of partition directories and segment files.
//!
//! It also validates (the engine behind `segmirror verify`) and, behind the
//! `writer` feature, writes (a byte-exact partition writer used by tests, the
//! demo and benchmarks; not part of the library's core).
//!
//! ## Invariants
//! - Synchronous and policy-free: it reads and writes the files it is given.
//! - Hostile input never panics and never drives an allocation from an unchecked
//!   length field; reads never go past the end of a file.
//! - Every error names the file, the byte position and, where known, the offset
//!   ([`Error`]). *Incomplete* (a partial trailing batch, normal in an active
//!   segment) is distinct from *corrupt*.
//!
//! ## Crash behaviour
//! Readers are side-effect free. Writers of small files (checkpoints, metadata)
//! write a temporary file, fsync, rename and fsync the directory, as Kafka does.

pub mod batch;
pub mod checkpoint;
pub mod closed_log;
pub mod compression;
pub mod consumer_offsets;
pub mod control;
pub mod crc_combine;
pub mod dir;
pub mod durable;
pub mod error;
pub mod failover_source;
pub mod file_record;
pub mod group_records;
pub mod index;
mod java_text;
pub mod legacy;
pub mod log;
pub mod metadata_log;
pub mod open;
pub mod partition_metadata;
pub mod progress;
pub mod record;
pub mod report;
pub mod snapshot;
pub mod time;
pub mod topic_partition;
pub mod txn_ends;
pub mod txn_index;
pub mod varint;

pub use error::{Defect, Error, IndexKind, ParseError, Result};
pub use time::now_ms;
pub use topic_partition::TopicPartition;
pub mod verify;
#[cfg(feature = "writer")]
pub mod writer;
