//! Re-append an existing partition directory through a [`PartitionWriter`].
//!
//! A broker's own output is the reference for the writer: appending the batches
//! of a partition a broker wrote (as its leader did, one batch per append) must
//! give back the same files — segment boundaries, indexes, transaction indexes,
//! producer snapshots, leader-epoch checkpoint — byte for byte. [`replay_partition`]
//! does the re-append, so conformance tests against a real Kafka need only
//! compare directories.

use std::ops::ControlFlow;
use std::path::Path;

use super::{PartitionWriter, WriterConfig, WrittenPartition};
use crate::dir::{PartitionDir, PARTITION_METADATA_FILE};
use crate::error::{Error, Result};
use crate::log::LogFile;
use crate::partition_metadata::PartitionMetadata;

/// Append every complete frame of the partition directory `source` (in segment
/// order) into a new partition of the same name under `log_dir`, starting at the
/// source's first segment base offset. The topic id is taken from the source's
/// `partition.metadata` unless `config` names one. Stops at the first frame the
/// writer refuses (or a framing error in the source).
pub fn replay_partition(source: &Path, log_dir: &Path, mut config: WriterConfig) -> Result<WrittenPartition> {
    let dir = PartitionDir::open(source)?;
    if config.topic_id.is_none() {
        let metadata = source.join(PARTITION_METADATA_FILE);
        if metadata.exists() {
            config.topic_id = Some(PartitionMetadata::read(&metadata)?.topic_id);
        }
    }
    let base = dir.segments.first().map_or(0, |s| s.base_offset);
    let mut w = PartitionWriter::create(log_dir, &dir.name.topic, dir.name.partition, base, config)?;
    for segment in &dir.segments {
        let mut log = LogFile::open(&segment.log)?;
        let mut failed: Option<Error> = None;
        log.scan(|frame| match w.append_raw(frame.bytes) {
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    w.close()
}
