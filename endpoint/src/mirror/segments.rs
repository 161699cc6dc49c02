//! Reading one mirror partition directory (`<topic>-<partition>/`) as a broker reads its own log.
//!
//! A mirror partition directory is laid out exactly like a Kafka partition directory (`<base:020>.log`, `.index`,
//! `.timeindex`, `.txnindex`, `<offset:020>.snapshot`, `leader-epoch-checkpoint`), and an applier appends to it
//! while these functions read. So every function takes an exclusive upper offset `upper` (the served high
//! watermark or last stable offset, always at a batch boundary) and stops at the batch that ends there: a batch at
//! or past `upper` is never returned and nothing is decided from its bytes (a buffered read may fetch some of them
//! with the bytes before, but the walk stops before it looks at them). Index files are hints: an entry past
//! `upper`, past the end of the `.log` or that does not land on a batch is ignored and the walk starts earlier.
//!
//! Why reads and not mmap: a segment can be truncated or replaced under the reader, and a mapped page past the end
//! is a SIGBUS that kills the process; a `pread` past it is a short read. Files are opened as
//! [`segment_format::open::open_regular`] does (regular files only, no symlink followed), every length read from a
//! file is checked before it sizes anything, and faults come back as `io::Error`s (`InvalidData` for bytes that
//! are not what Kafka writes, `NotFound` for an offset below the first segment).
//!
//! The functions are synchronous and blocking; the endpoint runs them off its async runtime. Each call lists the
//! directory (one `readdir`), so a segment deleted by retention or rolled in by the applier is seen at the next call.
//!
//! - [`read_batches`]: whole batches from an offset (Fetch).
//! - [`aborted_between`]: the aborted transactions of a fetched range (`read_committed` Fetch).
//! - [`offset_for_timestamp`], [`max_timestamp`]: ListOffsets by time and `MAX_TIMESTAMP`.
//! - [`log_start`], [`epoch_end`], [`latest_epoch`]: the log start and OffsetForLeaderEpoch.
//! - [`OpenTransactions`]: the last stable offset, followed incrementally.
//!
//! Batches of every magic are walked (v2 batches and legacy v0/v1 messages and wrappers, whose frame offset is
//! their last offset), as the broker serves them.

use std::io;
use std::path::Path;

use segment_format::dir::{classify_partition_file, PartitionFile, SegmentFileKind};

mod epochs;
mod fetch;
mod time;
mod txn;
mod walk;

pub use epochs::{epoch_end, latest_epoch, EpochHistory};
pub use fetch::{read_batches, span_batches, Fetched, MAX_BATCH_BYTES};
pub use time::{max_timestamp, offset_for_timestamp, TimestampOffset};
pub use txn::{aborted_between, aborted_in_index, track_file, OpenTransactions, Scan};

/// The segments and producer snapshots of a partition directory, by base offset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Base offsets of the `.log` files, ascending.
    pub segments: Vec<i64>,
    /// Offsets of the `.snapshot` files, ascending.
    pub snapshots: Vec<i64>,
}

impl Listing {
    /// List `dir`: only names Kafka gives live segment files and snapshots count (not `.deleted`, `.cleaned`,
    /// `.swap` or temporary files, which are never served).
    pub fn of(dir: &Path) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if let PartitionFile::Segment { base_offset, kind } = classify_partition_file(&name) {
                match kind {
                    SegmentFileKind::Log => listing.segments.push(base_offset),
                    SegmentFileKind::Snapshot => listing.snapshots.push(base_offset),
                    _ => {}
                }
            }
        }
        listing.segments.sort_unstable();
        listing.snapshots.sort_unstable();
        Ok(listing)
    }

    /// Index in `segments` of the segment that holds `offset`: the last whose base is at or below it.
    pub fn holding(&self, offset: i64) -> Option<usize> {
        self.segments.partition_point(|&base| base <= offset).checked_sub(1)
    }

    /// The base offset of the segment after `segments[i]`.
    pub fn next_base(&self, i: usize) -> Option<i64> {
        self.segments.get(i + 1).copied()
    }
}

/// The base offset of the first segment: the first offset the directory holds (`None` without segments). The
/// caller may hold a higher log start (a `DeleteRecords` the source made, carried by the link).
pub fn log_start(dir: &Path) -> io::Result<Option<i64>> {
    Ok(Listing::of(dir)?.segments.first().copied())
}

/// An `io::Error` for bytes that are not what Kafka writes.
pub(crate) fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A `segment_format` error as an `io::Error`: an I/O failure keeps its kind, anything else is `InvalidData`; the
/// message names the file and the position.
pub(crate) fn format_error(e: segment_format::Error) -> io::Error {
    let kind = match &e {
        segment_format::Error::Io { source, .. } => source.kind(),
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e.to_string())
}

#[cfg(test)]
mod tests;
