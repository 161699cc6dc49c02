//! `leader-epoch-checkpoint`: reading, the strictly-increasing check, and the
//! streaming check of batches' `partitionLeaderEpoch` against it.

use std::path::{Path, PathBuf};

use super::{encode_checkpoint, parse_checkpoint, read_file, CheckpointEntry};
use crate::batch::BatchInfo;
use crate::durable::write_atomically;
use crate::error::{Defect, ParseError, Result};
use crate::java_text::java_split;
use crate::report::Finding;

/// One line of `leader-epoch-checkpoint`: the first offset written in `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

impl CheckpointEntry for EpochEntry {
    fn from_line(line: &str) -> Option<Self> {
        match java_split(line, None).as_slice() {
            [epoch, start] => Some(EpochEntry {
                epoch: epoch.parse().ok()?,
                start_offset: start.parse().ok()?,
            }),
            _ => None,
        }
    }

    fn to_line(&self) -> String {
        format!("{} {}", self.epoch, self.start_offset)
    }
}

/// The contents of a partition's `leader-epoch-checkpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCheckpoint {
    pub entries: Vec<EpochEntry>,
    /// Byte position of each entry's line when parsed; empty when built in memory.
    line_positions: Vec<u64>,
}

impl LeaderEpochCheckpoint {
    pub fn new(entries: Vec<EpochEntry>) -> Self {
        LeaderEpochCheckpoint {
            entries,
            line_positions: Vec::new(),
        }
    }

    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (line_positions, entries) = parse_checkpoint::<EpochEntry>(bytes)?.into_iter().unzip();
        Ok(LeaderEpochCheckpoint {
            entries,
            line_positions,
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

    /// The epoch in force at `offset`: the entry with the largest start offset <= `offset`.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }

    fn position_of(&self, index: usize) -> Option<u64> {
        self.line_positions.get(index).copied()
    }

    /// The invariants `LeaderEpochFileCache.assign` maintains: no negative values,
    /// epochs strictly increasing, start offsets strictly increasing.
    pub fn check(&self, path: &Path) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut report = |i: usize, offset: i64, message: String| {
            findings.push(Finding::error(
                path,
                self.position_of(i),
                Some(offset),
                Defect::Epoch {
                    message: format!("entry {}: {message}", i + 1),
                },
            ));
        };
        let mut prev: Option<EpochEntry> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.epoch < 0 || e.start_offset < 0 {
                report(
                    i,
                    e.start_offset,
                    format!("negative epoch or start offset ({} {})", e.epoch, e.start_offset),
                );
            }
            if let Some(p) = prev {
                if e.epoch <= p.epoch {
                    report(
                        i,
                        e.start_offset,
                        format!("epoch {} does not increase (previous {})", e.epoch, p.epoch),
                    );
                }
                if e.start_offset <= p.start_offset {
                    report(
                        i,
                        e.start_offset,
                        format!(
                            "start offset {} does not increase (epoch {} starts at {})",
                            e.start_offset, p.epoch, p.start_offset
                        ),
                    );
                }
            }
            prev = Some(*e);
        }
        findings
    }
}

/// What the checkpoint allows the epoch of a batch to be.
enum Allowed {
    /// The checkpoint has no entries: no epoch.
    Nothing,
    /// The batch is before the first entry: that entry's epoch or lower.
    AtMost(EpochEntry),
    /// The epoch of the entry in force at the batch's offset.
    Exactly(EpochEntry),
}

impl Allowed {
    fn admits(&self, epoch: i32) -> bool {
        match self {
            Allowed::Nothing => false,
            Allowed::AtMost(first) => epoch <= first.epoch,
            Allowed::Exactly(entry) => epoch == entry.epoch,
        }
    }

    /// The checkpoint's epoch the batch is held to.
    fn epoch(&self) -> Option<i32> {
        match self {
            Allowed::Nothing => None,
            Allowed::AtMost(e) | Allowed::Exactly(e) => Some(e.epoch),
        }
    }

    fn refusal(&self, epoch: i32) -> String {
        match self {
            Allowed::Nothing => format!("batch epoch {epoch} but leader-epoch-checkpoint has no entries"),
            Allowed::AtMost(first) => format!(
                "batch epoch {epoch} before the first checkpoint entry (epoch {} from offset {}) is higher than it",
                first.epoch, first.start_offset
            ),
            Allowed::Exactly(e) => format!(
                "batch epoch {epoch} but leader-epoch-checkpoint has epoch {} in force from offset {}",
                e.epoch, e.start_offset
            ),
        }
    }
}

/// Streaming check of batches' `partitionLeaderEpoch` against the checkpoint.
///
/// Feed every batch of the partition in offset order (all segments). Only magic-2
/// batches with an epoch >= 0 take part, as in `LogSegment.recover`. A run of
/// batches with the same disagreement is reported once, at its first batch, so a
/// wrong checkpoint does not produce one finding per batch.
#[derive(Debug)]
pub struct LeaderEpochChecker {
    entries: Vec<EpochEntry>,
    /// Index of the entry in force for the last batch.
    current: usize,
    previous: Option<(i32, i64)>,
    last_reported: Option<(i32, Option<i32>)>,
    findings: Vec<Finding>,
}

impl LeaderEpochChecker {
    pub fn new(checkpoint: &LeaderEpochCheckpoint) -> Self {
        LeaderEpochChecker {
            entries: checkpoint.entries.clone(),
            current: 0,
            previous: None,
            last_reported: None,
            findings: Vec::new(),
        }
    }

    /// `log_path` is the `.log` file `batch` was read from.
    pub fn on_batch(&mut self, log_path: &Path, batch: &BatchInfo) {
        let epoch = batch.partition_leader_epoch;
        if batch.magic < 2 || epoch < 0 {
            return;
        }
        let error = |message: String| {
            Finding::error(
                log_path,
                Some(batch.position),
                Some(batch.base_offset),
                Defect::Epoch { message },
            )
        };
        if let Some((prev_epoch, prev_offset)) = self.previous {
            if epoch < prev_epoch {
                self.findings.push(error(format!(
                    "batch epoch {epoch} is lower than epoch {prev_epoch} of the batch at offset {prev_offset}"
                )));
            }
        }
        self.previous = Some((epoch, batch.base_offset));
        while self
            .entries
            .get(self.current + 1)
            .is_some_and(|next| next.start_offset <= batch.base_offset)
        {
            self.current += 1;
        }
        let allowed = match self.entries.get(self.current) {
            None => Allowed::Nothing,
            Some(&first) if batch.base_offset < first.start_offset => Allowed::AtMost(first),
            Some(&entry) => Allowed::Exactly(entry),
        };
        if allowed.admits(epoch) {
            self.last_reported = None;
        } else if self.last_reported != Some((epoch, allowed.epoch())) {
            self.last_reported = Some((epoch, allowed.epoch()));
            // Formatted for a failing batch only: this runs once per batch of every segment.
            self.findings.push(error(allowed.refusal(epoch)));
        }
    }

    pub fn finish(self) -> Vec<Finding> {
        self.findings
    }
}

/// Where the checkpoint of a partition directory lives.
pub fn leader_epoch_checkpoint_path(partition_dir: &Path) -> PathBuf {
    partition_dir.join(crate::dir::LEADER_EPOCH_CHECKPOINT_FILE)
}
