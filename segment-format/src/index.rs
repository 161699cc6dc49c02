//! Offset index (`.index`) and time index (`.timeindex`): parsing, checking
//! beside a log scan, and building from batches.
//!
//! Both are sparse, fixed-width, big-endian and unchecksummed:
//! offset index entries are `relativeOffset i32 | position i32` (8 bytes), time
//! index entries `timestamp i64 | relativeOffset i32` (12 bytes), offsets relative
//! to the segment's base offset. A broker preallocates the active segment's files
//! to `segment.index.bytes` and trims them on roll or close, so a copy of the
//! newest segment normally ends in zero-filled slots. Kafka cannot tell those from
//! entries once the file is reopened (every slot counts), which is why a zero
//! tail in a *sealed* segment is an error: the broker would take `(0, base)` as
//! its last time-index entry (segment eligible for retention at once) and as its
//! last offset-index entry (binary search and log-end-offset go wrong).
//!
//! Telling the tail from entries: Kafka's DumpLogSegments stops at the first slot
//! after the first whose offset equals the base offset. We take the trailing run of
//! all-zero slots as the tail. Slot 0 alone stays ambiguous — `(base, position 0)`
//! and `(timestamp 0, base)` are legal entries — and the checkers decide it from
//! the batches: it is an entry if it is consistent with the log, tail otherwise.
//!
//! The checkers run beside a scan of the `.log`, fed one [`BatchInfo`] at a time,
//! so checking a 1 GiB segment keeps only the index bytes (at most
//! `segment.index.bytes`) and no per-batch list. They report what breaks broker
//! behaviour, not what differs from the bytes one particular broker version would
//! write: index bytes differ between leader, follower (pre-KAFKA-806 follower
//! entries pair a chunk's last offset with its first position) and recovery.
//!
//! The builders write what `LogSegment.recover` (and the per-batch append path of
//! Kafka 4.1+) writes, for rebuilding indexes and for the partition writer.

use std::path::Path;

use crate::batch::BatchInfo;
use crate::error::{Defect, ParseError, Result};

/// Bytes per offset-index entry.
pub const OFFSET_INDEX_ENTRY_SIZE: usize = 8;
/// Bytes per time-index entry.
pub const TIME_INDEX_ENTRY_SIZE: usize = 12;
/// `index.interval.bytes` default: an entry once more than this many log bytes
/// were appended since the previous entry.
pub const DEFAULT_INDEX_INTERVAL_BYTES: u64 = 4096;
/// `segment.index.bytes` default: the size an active segment's index is preallocated to.
pub const DEFAULT_MAX_INDEX_SIZE: u64 = 10 * 1024 * 1024;

/// `(offset, position)`: the batch holding offsets up to `offset` is at or after
/// `position` in the `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetIndexEntry {
    pub relative_offset: i32,
    pub position: i32,
}

impl OffsetIndexEntry {
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.saturating_add(i64::from(self.relative_offset))
    }

    pub fn to_bytes(&self) -> [u8; OFFSET_INDEX_ENTRY_SIZE] {
        let mut out = [0u8; OFFSET_INDEX_ENTRY_SIZE];
        let (a, b) = out.split_at_mut(4);
        a.copy_from_slice(&self.relative_offset.to_be_bytes());
        b.copy_from_slice(&self.position.to_be_bytes());
        out
    }

    pub fn from_bytes(b: &[u8; OFFSET_INDEX_ENTRY_SIZE]) -> Self {
        let [a0, a1, a2, a3, b0, b1, b2, b3] = *b;
        OffsetIndexEntry {
            relative_offset: i32::from_be_bytes([a0, a1, a2, a3]),
            position: i32::from_be_bytes([b0, b1, b2, b3]),
        }
    }
}

/// `(timestamp, offset)`: the largest timestamp up to and including `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeIndexEntry {
    pub timestamp: i64,
    pub relative_offset: i32,
}

impl TimeIndexEntry {
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.saturating_add(i64::from(self.relative_offset))
    }

    pub fn to_bytes(&self) -> [u8; TIME_INDEX_ENTRY_SIZE] {
        let mut out = [0u8; TIME_INDEX_ENTRY_SIZE];
        let (a, b) = out.split_at_mut(8);
        a.copy_from_slice(&self.timestamp.to_be_bytes());
        b.copy_from_slice(&self.relative_offset.to_be_bytes());
        out
    }

    pub fn from_bytes(b: &[u8; TIME_INDEX_ENTRY_SIZE]) -> Self {
        let [t0, t1, t2, t3, t4, t5, t6, t7, o0, o1, o2, o3] = *b;
        TimeIndexEntry {
            timestamp: i64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            relative_offset: i32::from_be_bytes([o0, o1, o2, o3]),
        }
    }
}

/// How an index file's bytes divide into entries, zero tail and partial bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexLayout {
    /// Whole slots in the file.
    pub slots: usize,
    /// Slots before the trailing run of all-zero slots.
    pub entries: usize,
    /// Trailing all-zero slots. When `entries == 0` this includes slot 0, which
    /// may also be a real entry (see the module docs).
    pub zero_tail: usize,
    /// Bytes after the last whole slot (length not a multiple of the entry size).
    pub partial_bytes: usize,
}

impl IndexLayout {
    pub fn of(bytes: &[u8], entry_size: usize) -> Self {
        let slots = bytes.len() / entry_size;
        let partial_bytes = bytes.len() % entry_size;
        let whole = bytes.get(..slots * entry_size).unwrap_or_default();
        let zero_tail = whole
            .rchunks_exact(entry_size)
            .take_while(|slot| slot.iter().all(|&b| b == 0))
            .count();
        IndexLayout {
            slots,
            entries: slots - zero_tail,
            zero_tail,
            partial_bytes,
        }
    }

    /// True when the whole file is zero slots, so slot 0 may be an entry.
    fn first_slot_ambiguous(&self) -> bool {
        self.entries == 0 && self.slots > 0
    }
}

fn slot<const N: usize>(bytes: &[u8], i: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = bytes.get(i * N..(i + 1) * N) {
        out.copy_from_slice(src);
    }
    out
}

fn offset_entry(bytes: &[u8], i: usize) -> OffsetIndexEntry {
    OffsetIndexEntry::from_bytes(&slot(bytes, i))
}

fn time_entry(bytes: &[u8], i: usize) -> TimeIndexEntry {
    TimeIndexEntry::from_bytes(&slot(bytes, i))
}

/// A parsed offset index: the entries before the zero tail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    pub entries: Vec<OffsetIndexEntry>,
    pub layout: IndexLayout,
}

impl OffsetIndex {
    /// Split `bytes` per [`IndexLayout`]; an all-zero file has no entries.
    pub fn parse(bytes: &[u8]) -> Self {
        let layout = IndexLayout::of(bytes, OFFSET_INDEX_ENTRY_SIZE);
        OffsetIndex {
            entries: (0..layout.entries).map(|i| offset_entry(bytes, i)).collect(),
            layout,
        }
    }
}

/// A parsed time index: the entries before the zero tail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    pub entries: Vec<TimeIndexEntry>,
    pub layout: IndexLayout,
}

impl TimeIndex {
    /// Split `bytes` per [`IndexLayout`]; an all-zero file has no entries.
    pub fn parse(bytes: &[u8]) -> Self {
        let layout = IndexLayout::of(bytes, TIME_INDEX_ENTRY_SIZE);
        TimeIndex {
            entries: (0..layout.entries).map(|i| time_entry(bytes, i)).collect(),
            layout,
        }
    }
}

/// Offset index file bytes for `entries` (trimmed: no preallocated tail).
pub fn serialize_offset_index(entries: &[OffsetIndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_bytes()).collect()
}

/// Time index file bytes for `entries` (trimmed: no preallocated tail).
pub fn serialize_time_index(entries: &[TimeIndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_bytes()).collect()
}

/// Read a whole index file. Plain reads rather than mmap: the active segment's
/// index is mmapped and written by a running broker, and a Rust slice over a file
/// that changes underneath is undefined behaviour. Index files are at most
/// `segment.index.bytes` (10 MiB by default); a regular file of at most
/// [`MAX_INDEX_READ_BYTES`] is read, anything else refused (see [`crate::open`]).
/// `verify` reads indexes bounded by their segment instead.
pub fn read_index_file(path: &Path) -> Result<Vec<u8>> {
    crate::open::read_capped(path, "index file", MAX_INDEX_READ_BYTES)
}

/// Largest index [`read_index_file`] reads whole (64 MiB, six times Kafka's
/// default `segment.index.bytes`).
pub const MAX_INDEX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// `RecordBatch.NO_TIMESTAMP`: the initial "largest timestamp" of an empty time index.
const NO_TIMESTAMP: i64 = -1;

fn ensure_in_range(batch: &BatchInfo, base_offset: i64) -> Result<(), ParseError> {
    let rel = batch.last_offset.checked_sub(base_offset);
    if !rel.is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r)) || batch.base_offset < base_offset {
        return Err(ParseError::Corrupt {
            position: batch.position,
            offset: Some(batch.last_offset),
            defect: Defect::OffsetOverflow {
                base_offset,
                found: batch.last_offset,
            },
        });
    }
    if i32::try_from(batch.position).is_err() {
        return Err(ParseError::Corrupt {
            position: batch.position,
            offset: Some(batch.base_offset),
            defect: Defect::BadLength {
                field: "log position",
                value: i64::try_from(batch.position).unwrap_or(i64::MAX),
            },
        });
    }
    Ok(())
}

mod build;
mod check;
mod interval;

pub use build::{OffsetIndexBuilder, TimeIndexBuilder};
pub use check::{OffsetIndexChecker, TimeIndexChecker};
pub use interval::{pick_interval, IntervalFit, MAX_INDEX_INTERVAL_BYTES};

#[cfg(test)]
mod tests;
