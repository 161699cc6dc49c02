//! The committed offsets of consumer groups, read from a broker's `__consumer_offsets-N` partition directories on
//! disk, replayed the way Kafka's group coordinator loads them.
//!
//! Why: a mirror's consumers fail over without offset translation only if the offsets their groups committed on
//! the source come along; the source broker's own log holds them, and reading it needs neither a client nor a
//! running broker (see [`crate::group_records`] for the record format).
//!
//! # Semantics (Kafka 4.x `OffsetMetadataManager.replay` / `replayEndTransactionMarker`; 3.x `GroupMetadataManager`
//! loads the same way)
//! - Records are applied in log order, segment by segment. An offset commit outside a transaction replaces the
//!   group's offset for that partition; a tombstone (null value) deletes it, and drops the same key from every open
//!   transaction of that group. Deleting a group (`kafka-consumer-groups --delete`) and expiring offsets write such
//!   tombstones; a group metadata tombstone alone (a classic group converted to a KIP-848 one, or an empty group
//!   removed) leaves the offsets in place, as in Kafka.
//! - An offset commit in a transactional batch (`sendOffsetsToTransaction`) is pending under its producer id until
//!   that producer's COMMIT marker, which moves it into the committed offsets unless a commit at a later log offset
//!   is already there; an ABORT marker (or no marker: a transaction still open) discards it.
//! - Every batch's CRC is checked; compressed batches are decompressed; legacy (magic 0/1) messages left from old
//!   clusters are read too. A batch cut short at the end of the newest segment (a broker stopped mid-write) ends the
//!   read, as Kafka's recovery truncates it; anywhere else it is an error naming the file, byte and offset.
//! - Records of groups the filter does not take are decoded (so corruption is still found) but not kept.
//!
//! # Bounds
//! Files are mapped and scanned frame by frame; the state kept (offsets, pending offsets and groups together) is
//! capped at [`MAX_ENTRIES`], so a hostile log cannot grow it without bound.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::batch::{parse_header, ControlType};
use crate::control::decode_control_batch;
use crate::dir::PartitionDir;
use crate::error::{Defect, Error};
use crate::group_records::{decode_record, GroupRecord, GroupType, OffsetCommitKey, OffsetCommitValue};
use crate::legacy;
use crate::log::LogFile;
use crate::record::{for_each_record, DeepLimits};
use crate::report::Severity;

/// The topic holding committed offsets and group metadata.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Most offsets, pending offsets and groups kept together (a few hundred bytes each at worst).
pub const MAX_ENTRIES: usize = 1 << 22;

/// One committed offset, as the latest record that set it says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CommittedOffset {
    pub offset: i64,
    /// The leader epoch the client sent with the commit (`None` without one). Never to be committed on another
    /// cluster as is: see `docs/promotion.md`.
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Only `OffsetCommitValue` v1 has one.
    pub expire_timestamp: Option<i64>,
    /// Offset of the record in `__consumer_offsets` that set it.
    pub record_offset: i64,
    /// True if it came from a committed transaction (`sendOffsetsToTransaction`).
    pub transactional: bool,
}

impl CommittedOffset {
    fn from_value(value: &OffsetCommitValue, record_offset: i64, transactional: bool) -> Self {
        CommittedOffset {
            offset: value.offset,
            leader_epoch: value.leader_epoch,
            metadata: value.metadata.clone(),
            commit_timestamp: value.commit_timestamp,
            expire_timestamp: value.expire_timestamp,
            record_offset,
            transactional,
        }
    }
}

/// Which groups and topics to keep.
pub struct OffsetsFilter<'a> {
    pub group: Box<dyn Fn(&str) -> bool + 'a>,
    pub topic: Box<dyn Fn(&str) -> bool + 'a>,
}

impl Default for OffsetsFilter<'_> {
    fn default() -> Self {
        OffsetsFilter {
            group: Box::new(|_| true),
            topic: Box::new(|_| true),
        }
    }
}

/// The state replayed from `__consumer_offsets` partitions.
#[derive(Debug, Clone, Default)]
pub struct ConsumerOffsets {
    /// Committed offsets by (group, topic, partition).
    pub offsets: BTreeMap<OffsetCommitKey, CommittedOffset>,
    /// Groups with a live metadata record, and their type(s) (a group being converted may briefly have two).
    pub groups: BTreeMap<String, BTreeSet<GroupType>>,
    /// Offset commits of transactions with no marker yet, by producer id (not counted as committed).
    pending: BTreeMap<i64, BTreeMap<OffsetCommitKey, CommittedOffset>>,
    /// Partition directories read.
    pub partitions_read: Vec<PathBuf>,
    /// Records decoded.
    pub records: u64,
    /// Records of a type Kafka does not define (skipped).
    pub unknown_records: u64,
    entries: usize,
}

impl ConsumerOffsets {
    /// Offset commits of transactions still open at the end of the log (not counted as committed).
    pub fn open_transactions(&self) -> impl Iterator<Item = (i64, &OffsetCommitKey, &CommittedOffset)> {
        self.pending
            .iter()
            .flat_map(|(pid, m)| m.iter().map(move |(k, v)| (*pid, k, v)))
    }

    fn grow(&mut self) -> Result<(), String> {
        self.entries = self.entries.saturating_add(1);
        if self.entries > MAX_ENTRIES {
            return Err(format!(
                "more than {MAX_ENTRIES} offsets, pending offsets and groups: refusing to keep more"
            ));
        }
        Ok(())
    }

    fn shrink(&mut self, by: usize) {
        self.entries = self.entries.saturating_sub(by);
    }

    /// Apply one record of a `__consumer_offsets` partition at log offset `record_offset`; `producer_id` is the
    /// batch's for a transactional batch, `None` otherwise.
    pub fn replay(
        &mut self,
        record_offset: i64,
        producer_id: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        filter: &OffsetsFilter<'_>,
    ) -> Result<(), String> {
        let record = decode_record(key, value)?;
        self.records += 1;
        let Some(group) = record.group() else {
            self.unknown_records += 1;
            return Ok(());
        };
        if !(filter.group)(group) {
            return Ok(());
        }
        match record {
            GroupRecord::OffsetCommit { key, value } => {
                if !(filter.topic)(&key.topic) {
                    return Ok(());
                }
                match (value, producer_id) {
                    (Some(value), None) => {
                        let committed = CommittedOffset::from_value(&value, record_offset, false);
                        if self.offsets.insert(key, committed).is_none() {
                            self.grow()?;
                        }
                    }
                    (Some(value), Some(pid)) => {
                        let pending = CommittedOffset::from_value(&value, record_offset, true);
                        if self.pending.entry(pid).or_default().insert(key, pending).is_none() {
                            self.grow()?;
                        }
                    }
                    (None, _) => {
                        if self.offsets.remove(&key).is_some() {
                            self.shrink(1);
                        }
                        let mut dropped = 0;
                        for pending in self.pending.values_mut() {
                            dropped += usize::from(pending.remove(&key).is_some());
                        }
                        self.shrink(dropped);
                    }
                }
            }
            GroupRecord::GroupMetadata { group, value } => {
                self.set_group(group, GroupType::Classic, value.is_some())?
            }
            GroupRecord::Group {
                group,
                group_type,
                is_group_metadata: true,
                value_version,
                ..
            } => self.set_group(group, group_type, value_version.is_some())?,
            GroupRecord::Group { .. } | GroupRecord::Unknown { .. } => {}
        }
        Ok(())
    }

    fn set_group(&mut self, group: String, group_type: GroupType, live: bool) -> Result<(), String> {
        if live {
            let types = self.groups.entry(group).or_default();
            if types.insert(group_type) {
                self.grow()?;
            }
        } else if let Some(types) = self.groups.get_mut(&group) {
            let removed = types.remove(&group_type);
            if types.is_empty() {
                self.groups.remove(&group);
            }
            if removed {
                self.shrink(1);
            }
        }
        Ok(())
    }

    /// Apply a transaction marker of `producer_id`: a COMMIT makes its pending offset commits count (unless a
    /// later commit is already there), an ABORT discards them.
    pub fn end_transaction(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending.remove(&producer_id) else {
            return;
        };
        self.shrink(pending.len());
        if !commit {
            return;
        }
        for (key, offset) in pending {
            let newer = self
                .offsets
                .get(&key)
                .is_none_or(|existing| offset.record_offset > existing.record_offset);
            if newer && self.offsets.insert(key, offset).is_none() {
                self.entries = self.entries.saturating_add(1);
            }
        }
    }
}

/// Read every `__consumer_offsets-N` directory of a broker's log dir.
pub fn read_log_dir(log_dir: &Path, filter: &OffsetsFilter<'_>) -> Result<ConsumerOffsets, Error> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(log_dir).map_err(|e| Error::io(log_dir, e))? {
        let entry = entry.map_err(|e| Error::io(log_dir, e))?;
        let name = entry.file_name();
        let Some(partition) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CONSUMER_OFFSETS_TOPIC))
            .and_then(|n| n.strip_prefix('-'))
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        if entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
            dirs.push((partition, path));
        }
    }
    dirs.sort();
    let mut state = ConsumerOffsets::default();
    for (_, dir) in dirs {
        read_partition_into(&mut state, &dir, filter)?;
    }
    Ok(state)
}

/// Read one `__consumer_offsets-N` partition directory.
pub fn read_partition_dir(dir: &Path, filter: &OffsetsFilter<'_>) -> Result<ConsumerOffsets, Error> {
    let mut state = ConsumerOffsets::default();
    read_partition_into(&mut state, dir, filter)?;
    Ok(state)
}

/// Replay one partition directory into `state`. Transactions do not span partitions (each partition has its own
/// markers), so pending commits still open at the end of one stay pending, keyed by producer id.
pub fn read_partition_into(state: &mut ConsumerOffsets, dir: &Path, filter: &OffsetsFilter<'_>) -> Result<(), Error> {
    let listing = open_partition_dir(dir)?;
    let last = listing.segments.len().saturating_sub(1);
    for (i, segment) in listing.segments.iter().enumerate() {
        replay_segment(state, &mut LogFile::open(&segment.log)?, 0, i == last, filter)?;
    }
    state.partitions_read.push(dir.to_path_buf());
    Ok(())
}

/// The listing of a `__consumer_offsets` partition directory, refused if it is another topic's or has errors.
fn open_partition_dir(dir: &Path) -> Result<PartitionDir, Error> {
    let listing = PartitionDir::open(dir)?;
    if listing.name.topic != CONSUMER_OFFSETS_TOPIC {
        return Err(Error::corrupt(
            dir,
            0,
            None,
            Defect::Other {
                message: format!(
                    "a partition of {:?}, not of {CONSUMER_OFFSETS_TOPIC}",
                    listing.name.topic
                ),
            },
        ));
    }
    if let Some(f) = listing.findings.iter().find(|f| f.severity == Severity::Error) {
        return Err(Error::corrupt(
            &f.path,
            f.position.unwrap_or(0),
            f.offset,
            f.defect.clone(),
        ));
    }
    Ok(listing)
}

/// Apply every record of one segment from byte `from` (a frame boundary) to its end, returning the position after
/// the last complete frame. A partial last frame is tolerated only in the newest segment (`tail`).
fn replay_segment(
    state: &mut ConsumerOffsets,
    file: &mut LogFile,
    from: u64,
    tail: bool,
    filter: &OffsetsFilter<'_>,
) -> Result<u64, Error> {
    let path = &file.path().to_path_buf();
    let limits = DeepLimits::default();
    let mut failure: Option<Error> = None;
    let len = file.len();
    let scan = file.scan_range(from, len, |frame| {
        let info = &frame.info;
        let fail =
            |offset: i64, message: String| Error::corrupt(path, info.position, Some(offset), Defect::Other { message });
        if let Some(defect) = frame.crc_defect() {
            failure = Some(Error::corrupt(
                path,
                frame.crc_position(),
                Some(info.base_offset),
                defect,
            ));
            return ControlFlow::Break(());
        }
        let mut record_error: Option<(i64, String)> = None;
        if info.magic < 2 {
            // Legacy messages (clusters that began before Kafka 0.11): never transactional, never control.
            let walked = legacy::for_each_message(frame.bytes, &limits, |m| {
                match state.replay(m.offset, None, m.key, m.value, filter) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(message) => {
                        record_error = Some((m.offset, message));
                        ControlFlow::Break(())
                    }
                }
            });
            if let Err(e) = walked {
                failure = Some(e.shifted(info.position).at(path));
                return ControlFlow::Break(());
            }
        } else {
            let body = frame.bytes;
            let header = match parse_header(body) {
                Ok(h) => h,
                Err(e) => {
                    failure = Some(e.shifted(info.position).at(path));
                    return ControlFlow::Break(());
                }
            };
            if header.is_control() {
                match decode_control_batch(body, &header, &limits) {
                    Ok(Some(control)) => match control.control_type {
                        ControlType::Commit => state.end_transaction(header.producer_id, true),
                        ControlType::Abort => state.end_transaction(header.producer_id, false),
                        ControlType::Other(_) => {}
                    },
                    Ok(None) => {}
                    Err(e) => {
                        failure = Some(e.shifted(info.position).at(path));
                        return ControlFlow::Break(());
                    }
                }
                return ControlFlow::Continue(());
            }
            let producer_id = header.is_transactional().then_some(header.producer_id);
            let walked = for_each_record(body, &header, &limits, |record| {
                match state.replay(record.offset, producer_id, record.key, record.value, filter) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(message) => {
                        record_error = Some((record.offset, message));
                        ControlFlow::Break(())
                    }
                }
            });
            if let Err(e) = walked {
                failure = Some(e.shifted(info.position).at(path));
                return ControlFlow::Break(());
            }
        }
        if let Some((offset, message)) = record_error {
            failure = Some(fail(offset, message));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    if let Some(e) = failure {
        return Err(e);
    }
    match scan {
        Ok(summary) => Ok(summary.end),
        Err(Error::Incomplete { position, .. }) if tail => Ok(position),
        Err(e) => Err(e),
    }
}

mod incremental;
pub use incremental::IncrementalOffsets;

#[cfg(test)]
mod tests;
