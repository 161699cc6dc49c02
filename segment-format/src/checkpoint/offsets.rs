//! Root offset checkpoints (`recovery-point-offset-checkpoint` and its three
//! siblings): `<topic> <partition> <offset>` per line.

use std::collections::HashMap;
use std::path::Path;

use super::{encode_checkpoint, parse_checkpoint, read_file, CheckpointEntry};
use crate::durable::write_atomically;
use crate::error::{ParseError, Result};
use crate::java_text::java_split;

/// One line of a root offset checkpoint: `<topic> <partition> <offset>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OffsetCheckpointEntry {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl CheckpointEntry for OffsetCheckpointEntry {
    fn from_line(line: &str) -> Option<Self> {
        match java_split(line, None).as_slice() {
            [topic, partition, offset] => Some(OffsetCheckpointEntry {
                topic: (*topic).to_string(),
                partition: partition.parse().ok()?,
                offset: offset.parse().ok()?,
            }),
            _ => None,
        }
    }

    fn to_line(&self) -> String {
        format!("{} {} {}", self.topic, self.partition, self.offset)
    }
}

/// A root offset checkpoint (`recovery-point-offset-checkpoint`,
/// `log-start-offset-checkpoint`, `replication-offset-checkpoint`,
/// `cleaner-offset-checkpoint`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetCheckpoint {
    pub entries: Vec<OffsetCheckpointEntry>,
}

impl OffsetCheckpoint {
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        Ok(OffsetCheckpoint {
            entries: parse_checkpoint(bytes)?.into_iter().map(|(_, e)| e).collect(),
        })
    }

    pub fn encode(&self) -> String {
        encode_checkpoint(&self.entries)
    }

    pub fn read(path: &Path) -> Result<Self> {
        Self::parse(&read_file(path)?).map_err(|e| e.at(path))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.encode().as_bytes())
    }

    /// Every partition's offset, by (topic, partition): the last one where a partition is listed twice, as
    /// [`OffsetCheckpoint::get`] and the broker's map.
    pub fn into_offsets(self) -> HashMap<(String, i32), i64> {
        self.entries
            .into_iter()
            .map(|e| ((e.topic, e.partition), e.offset))
            .collect()
    }

    /// The offset recorded for a partition (the last one if listed twice, as the
    /// broker's map keeps the last).
    pub fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.topic == topic && e.partition == partition)
            .map(|e| e.offset)
    }
}
