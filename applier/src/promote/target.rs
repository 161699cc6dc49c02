//! The target broker's log dir as promotion sees it: which partition directories a topic has there, what each one
//! holds (topic id, leader epoch, data), and the root offset checkpoints promotion rewrites.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use segment_format::checkpoint::{LeaderEpochCheckpoint, OffsetCheckpoint, OffsetCheckpointEntry};
use segment_format::dir::{
    DirKind, LogDir, PartitionDir, RootCheckpoint, LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE,
};
use segment_format::durable::read_ahead_together;
use segment_format::partition_metadata::{PartitionMetadata, TopicId};

use segment_format::TopicPartition;

use super::error::{Error, Result};
use super::journal::Planned;
use super::refusal::Refusal;

/// Leader epoch assumed for a target partition whose `leader-epoch-checkpoint` is missing or empty (it never led):
/// no leader epoch is lower, so every later epoch of the partition is at least this.
pub const EPOCH_WHEN_UNKNOWN: i32 = 0;

/// What promotion does with a target partition that already holds data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExistingData {
    /// Refuse it ([`Refusal::TargetNotEmpty`]).
    Refuse,
    /// Replace it (`--force`).
    Replace,
}

impl ExistingData {
    /// [`ExistingData::Replace`] with `force`.
    pub fn of(force: bool) -> Self {
        if force {
            ExistingData::Replace
        } else {
            ExistingData::Refuse
        }
    }
}

/// The normal (`<topic>-<partition>`) directories of a log dir.
#[derive(Debug)]
pub struct TargetLogDir {
    root: PathBuf,
    partitions: BTreeMap<String, Vec<i32>>,
}

/// What a target partition directory says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetFacts {
    pub topic_id: TopicId,
    /// The newest epoch in its `leader-epoch-checkpoint`: the last epoch in which this broker led it. The cluster's
    /// current epoch may be higher (a stop and each leader change raise it), never lower.
    pub leader_epoch: i32,
}

impl TargetLogDir {
    pub fn open(root: &Path) -> Result<Self> {
        let listing = LogDir::open(root)?;
        let mut partitions: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for entry in listing.partitions.iter().filter(|e| e.name.kind == DirKind::Normal) {
            partitions
                .entry(entry.name.topic.clone())
                .or_default()
                .push(entry.name.partition);
        }
        Ok(TargetLogDir {
            root: root.to_path_buf(),
            partitions,
        })
    }

    /// The partition numbers of `topic` with a directory in this log dir.
    pub fn partitions_of(&self, topic: &str) -> &[i32] {
        self.partitions.get(topic).map_or(&[], Vec::as_slice)
    }

    /// Whether this log dir holds a directory for `tp` (its broker is a replica of it).
    pub fn holds(&self, tp: &TopicPartition) -> bool {
        self.partitions_of(&tp.topic).contains(&tp.partition)
    }

    /// Partition directories of `topic` in this log dir.
    pub fn partition_count(&self, topic: &str) -> usize {
        self.partitions.get(topic).map_or(0, Vec::len)
    }

    /// The facts of one target partition, or the refusals that stop it.
    pub fn inspect_partition(
        &self,
        tp: &TopicPartition,
        existing: ExistingData,
        refusals: &mut Vec<Refusal>,
    ) -> Result<Option<TargetFacts>> {
        let dir = self.root.join(tp.dir_name());
        if !dir.is_dir() {
            refusals.push(Refusal::TargetPartitionMissing {
                partition: tp.clone(),
                path: dir,
            });
            return Ok(None);
        }
        let metadata = dir.join(PARTITION_METADATA_FILE);
        let checkpoint = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        // Both are read below: asked for together, a cold disk is waited on once, not twice.
        read_ahead_together([metadata.as_path(), checkpoint.as_path()]);
        if !metadata.is_file() {
            refusals.push(Refusal::TargetTopicIdMissing {
                partition: tp.clone(),
                path: metadata,
            });
            return Ok(None);
        }
        let topic_id = PartitionMetadata::read(&metadata)?.topic_id;
        let listing = PartitionDir::open(&dir)?;
        if existing == ExistingData::Refuse {
            for segment in &listing.segments {
                let size = std::fs::metadata(&segment.log)
                    .map_err(|e| Error::io(&segment.log, e))?
                    .len();
                if size > 0 {
                    refusals.push(Refusal::TargetNotEmpty {
                        partition: tp.clone(),
                        log: segment.log.clone(),
                        size,
                    });
                    return Ok(None);
                }
            }
        }
        let leader_epoch = if checkpoint.is_file() {
            LeaderEpochCheckpoint::read(&checkpoint)?
                .entries
                .last()
                .map_or(EPOCH_WHEN_UNKNOWN, |e| e.epoch.max(EPOCH_WHEN_UNKNOWN))
        } else {
            EPOCH_WHEN_UNKNOWN
        };
        Ok(Some(TargetFacts { topic_id, leader_epoch }))
    }
}

/// The entry each root checkpoint must carry for a promoted partition (`None`: no entry).
fn wanted(kind: RootCheckpoint, p: &Planned) -> Option<i64> {
    match kind {
        // Everything is flushed: nothing to recover at start; an unclean start recovers only the empty active
        // segment at the end, from the empty producer snapshot there (`producer_state`).
        RootCheckpoint::RecoveryPoint => Some(p.end_offset()),
        // Every record is replicated (all replicas are promoted copies).
        RootCheckpoint::ReplicationOffset => Some(p.end_offset()),
        // `LogManager.checkpointLogStartOffsetsInDir` writes only offsets above the first segment's base.
        RootCheckpoint::LogStartOffset => (p.log_start_offset > p.first_base_offset()).then_some(p.log_start_offset),
        // The target's cleaner never saw this data; it starts from the log start.
        RootCheckpoint::CleanerOffset => None,
    }
}

/// Rewrite the root checkpoints of `log_dir` so each planned partition has exactly the entries it needs, keeping
/// every other partition's entries. A missing cleaner checkpoint is left missing (nothing to remove from it).
pub fn write_root_checkpoints(log_dir: &Path, planned: &[Planned]) -> Result<()> {
    for kind in RootCheckpoint::ALL {
        let path = log_dir.join(kind.file_name());
        let mut checkpoint = if path.is_file() {
            OffsetCheckpoint::read(&path)?
        } else if kind == RootCheckpoint::CleanerOffset {
            continue;
        } else {
            OffsetCheckpoint::default()
        };
        let replaced: std::collections::HashSet<(&str, i32)> =
            planned.iter().map(|p| (p.topic.as_str(), p.partition)).collect();
        checkpoint
            .entries
            .retain(|e| !replaced.contains(&(e.topic.as_str(), e.partition)));
        for p in planned {
            if let Some(offset) = wanted(kind, p) {
                checkpoint.entries.push(OffsetCheckpointEntry {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset,
                });
            }
        }
        checkpoint.write(&path)?;
    }
    Ok(())
}
