//! A byte-exact Kafka partition writer, for tests, the demo and benchmarks.
//!
//! segmirror's claim is that what it installs is exactly what a broker would
//! have on disk. Testing that needs partitions whose every byte is known: the
//! writer produces `<log dir>/<topic>-<partition>/` as a Kafka 4.x broker leaves
//! it after appending the given batches and shutting down cleanly (or, with
//! [`WriterConfig::running`], as a live broker has it: the active segment's
//! indexes preallocated with a zero tail, no shutdown snapshot). It follows the
//! broker's own rules, each cited where it is applied: segment rolling, offset
//! and time index entries (one append per batch, which is also what recovery and
//! Kafka 4.1+ write), the aborted-transaction index, producer-state snapshots,
//! the leader-epoch checkpoint and `partition.metadata`; [`log_dir`] adds the
//! log-dir files (`meta.properties`, the offset checkpoints, the clean-shutdown
//! marker). [`sample`] builds on it: a deterministic set of partitions of every
//! shape, and bulk data for benchmarks. [`replay_partition`] re-appends a
//! directory a broker wrote, so conformance tests can compare the writer's files
//! with Kafka's byte for byte (identical against Kafka 4.4.0 for uncompacted
//! partitions: plain, compressed, idempotent, transactional, LogAppendTime).
//!
//! Writing is fast (buffered appends, indexes kept in memory until a segment is
//! sealed, one fsync per file at close), because benchmarks write gigabytes.

use crate::index::{
    DEFAULT_INDEX_INTERVAL_BYTES, DEFAULT_MAX_INDEX_SIZE, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE,
};
use crate::partition_metadata::TopicId;

mod epochs;
pub mod log_dir;
mod partition;
pub mod producer_state;
mod replay;
pub mod sample;
#[cfg(test)]
mod tests;

pub use epochs::LeaderEpochCache;
pub use log_dir::{write_log_dir_files, LogDirIdentity, LogDirState};
pub use partition::{AppendInfo, PartitionWriter, SegmentSummary, WrittenPartition};
pub use producer_state::ProducerState;
pub use replay::replay_partition;

/// `segment.bytes` default (1 GiB).
pub const DEFAULT_SEGMENT_BYTES: u64 = 1024 * 1024 * 1024;
/// `segment.ms` default (7 days): a segment whose batches span more than this
/// in timestamps is rolled.
pub const DEFAULT_SEGMENT_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// Smallest `segment.index.bytes` accepted: two time-index slots. Kafka's own
/// minimum (4) leaves indexes with no room and makes every append roll.
pub const MIN_SEGMENT_INDEX_BYTES: u64 = 2 * TIME_INDEX_ENTRY_SIZE as u64;

/// The topic configuration the writer follows, plus how to leave the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// `segment.bytes`: a segment never grows past it. At most `i32::MAX`
    /// (positions are i32). Kafka 4.x refuses topic configs below 1 MiB, but
    /// loads smaller segments fine, so tests may use small values.
    pub segment_bytes: u64,
    /// `segment.ms` (roll jitter is taken as 0).
    pub segment_ms: i64,
    /// `index.interval.bytes`.
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`: the size of a running segment's preallocated
    /// indexes, and what makes an index "full".
    pub segment_index_bytes: u64,
    /// Leave the active segment as a running broker has it instead of as a
    /// clean shutdown leaves it.
    pub running: bool,
    /// fsync every file (and the directory) at close.
    pub fsync: bool,
    /// The topic id for `partition.metadata`; random when `None`.
    pub topic_id: Option<TopicId>,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            segment_ms: DEFAULT_SEGMENT_MS,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            segment_index_bytes: DEFAULT_MAX_INDEX_SIZE,
            running: false,
            fsync: true,
            topic_id: None,
        }
    }
}

impl WriterConfig {
    /// Check the limits; the error says which value is wrong.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.segment_bytes == 0 || self.segment_bytes > i32::MAX as u64 {
            return Err(format!(
                "segment.bytes {} outside [1, {}]",
                self.segment_bytes,
                i32::MAX
            ));
        }
        if self.segment_ms <= 0 {
            return Err(format!("segment.ms {} must be positive", self.segment_ms));
        }
        if self.segment_index_bytes < MIN_SEGMENT_INDEX_BYTES || self.segment_index_bytes > i32::MAX as u64 {
            return Err(format!(
                "segment.index.bytes {} outside [{MIN_SEGMENT_INDEX_BYTES}, {}]",
                self.segment_index_bytes,
                i32::MAX
            ));
        }
        if self.topic_id.is_some_and(|id| id.is_reserved()) {
            return Err("topic id must not be a reserved id".into());
        }
        Ok(())
    }

    /// Length of a preallocated offset index (`roundDown(maxIndexSize, 8)`).
    pub fn offset_index_file_bytes(&self) -> u64 {
        self.segment_index_bytes / OFFSET_INDEX_ENTRY_SIZE as u64 * OFFSET_INDEX_ENTRY_SIZE as u64
    }

    /// Length of a preallocated time index (`roundDown(maxIndexSize, 12)`).
    pub fn time_index_file_bytes(&self) -> u64 {
        self.segment_index_bytes / TIME_INDEX_ENTRY_SIZE as u64 * TIME_INDEX_ENTRY_SIZE as u64
    }

    /// `OffsetIndex.maxEntries`: the index is full at this many entries.
    pub fn max_offset_index_entries(&self) -> usize {
        (self.offset_index_file_bytes() / OFFSET_INDEX_ENTRY_SIZE as u64) as usize
    }

    /// `TimeIndex.maxEntries`: full at one less (the last slot is kept for the
    /// roll/close entry).
    pub fn max_time_index_entries(&self) -> usize {
        (self.time_index_file_bytes() / TIME_INDEX_ENTRY_SIZE as u64) as usize
    }
}
