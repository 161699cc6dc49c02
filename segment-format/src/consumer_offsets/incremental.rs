//! Replaying `__consumer_offsets` incrementally: a continuous shipper re-reads the committed offsets every time the
//! source's offsets partitions change, and must not pay for the whole log each time.
//!
//! Why per partition, with the files' identities: a group's records all live in one `__consumer_offsets`
//! partition (and transactions do not span partitions), so each partition's replay state is independent and can be
//! continued on its own. Continuing is only right while the bytes already applied are still the bytes on disk:
//! Kafka appends to the newest segment, rolls new ones, and otherwise only *replaces* files (the log cleaner swaps
//! in a rewritten segment under a new inode; retention deletes from the front). So a partition is continued from
//! the position after its last complete frame as long as every segment it read is still there with the same inode
//! and at least the length it had; anything else (a segment cleaned, deleted or shrunk) replays that partition from
//! its first segment again into a fresh state. The result always equals a full replay of the partition as it is on
//! disk now (tested after appends, rolls and cleaning).
//!
//! Bounds: one [`ConsumerOffsets`] per partition, each capped at [`super::MAX_ENTRIES`]; per partition a list of
//! the segments read (as many as the partition has).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{open_partition_dir, replay_segment, ConsumerOffsets, OffsetsFilter, CONSUMER_OFFSETS_TOPIC};
use crate::error::Error;
use crate::group_records::OffsetCommitKey;
use crate::log::LogFile;

use super::CommittedOffset;

/// A segment applied so far: which file, and how far.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SegmentRead {
    base_offset: i64,
    identity: (u64, u64),
    /// Position after the last complete frame applied.
    end: u64,
}

/// One partition's state and the segments it came from.
#[derive(Debug, Default)]
struct PartitionReplay {
    state: ConsumerOffsets,
    read: Vec<SegmentRead>,
}

/// What the last [`IncrementalOffsets::refresh`] did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefreshStats {
    /// Partitions replayed from their first segment (new, or a segment cleaned/deleted/shrunk under them).
    pub replayed_from_start: u64,
    /// Partitions continued from their last position.
    pub continued: u64,
    /// Bytes of segments scanned by this refresh.
    pub bytes_scanned: u64,
}

/// The committed offsets of every `__consumer_offsets-N` directory of some log dirs, kept up to date by
/// [`refresh`](Self::refresh).
#[derive(Debug, Default)]
pub struct IncrementalOffsets {
    partitions: BTreeMap<PathBuf, PartitionReplay>,
}

impl IncrementalOffsets {
    /// Bring the state up to what the log dirs hold now. The filter must be the same at every call (a changed
    /// filter needs a new `IncrementalOffsets`: records it dropped before are not read again).
    pub fn refresh(&mut self, log_dirs: &[PathBuf], filter: &OffsetsFilter<'_>) -> Result<RefreshStats, Error> {
        let mut dirs = Vec::new();
        for log_dir in log_dirs {
            dirs.extend(offsets_partition_dirs(log_dir)?);
        }
        self.partitions.retain(|path, _| dirs.contains(path));
        let mut stats = RefreshStats::default();
        for dir in dirs {
            let replay = self.partitions.entry(dir.clone()).or_default();
            match refresh_partition(replay, &dir, filter, &mut stats) {
                Ok(()) => {}
                Err(e) => {
                    // Nothing half-applied is kept: the next refresh starts this partition over.
                    self.partitions.remove(&dir);
                    return Err(e);
                }
            }
        }
        Ok(stats)
    }

    /// The committed offsets of every partition read, by (group, topic, partition). A key is in one partition
    /// only (Kafka places a group by its name's hash); if two claim one, the later commit wins.
    pub fn offsets(&self) -> BTreeMap<OffsetCommitKey, CommittedOffset> {
        let mut all: BTreeMap<OffsetCommitKey, CommittedOffset> = BTreeMap::new();
        for replay in self.partitions.values() {
            for (key, offset) in &replay.state.offsets {
                match all.get(key) {
                    Some(have) if have.commit_timestamp >= offset.commit_timestamp => {}
                    _ => {
                        all.insert(key.clone(), offset.clone());
                    }
                }
            }
        }
        all
    }
}

/// The `__consumer_offsets-N` directories of a log dir, sorted.
fn offsets_partition_dirs(log_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(log_dir).map_err(|e| Error::io(log_dir, e))? {
        let entry = entry.map_err(|e| Error::io(log_dir, e))?;
        let is_offsets = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix(CONSUMER_OFFSETS_TOPIC))
            .and_then(|n| n.strip_prefix('-'))
            .is_some_and(|n| n.parse::<i32>().is_ok());
        let path = entry.path();
        if is_offsets && entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

fn refresh_partition(
    replay: &mut PartitionReplay,
    dir: &Path,
    filter: &OffsetsFilter<'_>,
    stats: &mut RefreshStats,
) -> Result<(), Error> {
    let listing = open_partition_dir(dir)?;
    let mut files = Vec::with_capacity(listing.segments.len());
    for segment in &listing.segments {
        match LogFile::open(&segment.log) {
            Ok(file) => files.push((segment.base_offset, file)),
            // Deleted between the listing and the open (retention, cleaning): start over next time.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                *replay = PartitionReplay::default();
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
    if replay.read.is_empty() || !continues(&replay.read, &files)? {
        *replay = PartitionReplay::default();
        stats.replayed_from_start += 1;
    } else {
        stats.continued += 1;
    }
    let last = files.len().saturating_sub(1);
    let already = replay.read.len();
    for (i, (base_offset, file)) in files.iter_mut().enumerate() {
        // Segments read before stay as they were, except the last one read, which may have grown.
        let from = match replay.read.get(i) {
            Some(seen) if i + 1 < already => {
                debug_assert_eq!(seen.base_offset, *base_offset);
                continue;
            }
            Some(seen) => seen.end,
            None => 0,
        };
        let end = replay_segment(&mut replay.state, file, from, i == last, filter)?;
        stats.bytes_scanned += end - from;
        let read = SegmentRead {
            base_offset: *base_offset,
            identity: file.identity()?,
            end,
        };
        match replay.read.get_mut(i) {
            Some(seen) => *seen = read,
            None => replay.read.push(read),
        }
    }
    Ok(())
}

/// Whether the segments on disk (`files`, in base order) still begin with every segment read before, each the same
/// file, none shorter than what was read.
fn continues(read: &[SegmentRead], files: &[(i64, LogFile)]) -> Result<bool, Error> {
    if files.len() < read.len() {
        return Ok(false);
    }
    for (seen, (base_offset, file)) in read.iter().zip(files) {
        if seen.base_offset != *base_offset || seen.identity != file.identity()? || file.len() < seen.end {
            return Ok(false);
        }
    }
    // A segment read as the newest but not to its end, then rolled past, is read on from its position; a sealed
    // one read before must not have grown (Kafka never appends to a rolled segment).
    for (seen, (_, file)) in read.iter().zip(files).take(read.len().saturating_sub(1)) {
        if file.len() != seen.end {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
