//! The closed log: every transaction a COMMIT or ABORT marker closed in a segment, as the tracker saw it close,
//! one fixed-size entry per marker in offset order.
//!
//! Why: a consistent cut inside a transaction must know where that transaction began and what it held before the
//! cut. The batches after the cut name the producer's first marker after it; the entry of that marker says the
//! rest. A marker does not say where its transaction began, and Kafka's `.txnindex` lists aborted transactions
//! only, so without this record promotion read back from the cut to the producer's previous event, which for a
//! producer quiet before the cut and committing twice after it is anywhere up to the segment's base (D0059).
//!
//! Entry (52 bytes, big-endian like Kafka's own files): `producerId i64 | markerOffset i64 | firstOffset i64 |
//! records i64 | batches i64 | bytes i64 | producerEpoch i16 | flags i8 | reserved i8 (0)`. Flag bit 0: the marker
//! closed a transaction with data (`firstOffset` is its first offset, else -1); bit 1: the tally (epoch, records,
//! batches, bytes) is known (the tracker saw the transaction begin; else those fields are 0). Marker offsets strictly
//! increase from one entry to the next. Nothing here trusts a length or a count from the file: [`parse`] refuses
//! a torn entry, unknown flags, a reserved byte that is not 0, and offsets out of order.
//!
//! Two kinds of log share the entry:
//! - **the tail appender's active segment log** ([`parse`], [`find`]): the transactions as its tracker saw them
//!   close, from wherever they began (`ClosedTransaction`);
//! - **a segment's log** ([`parse_segment`], [`find_in_segment`]), written once per segment by the install that
//!   reads its batches (or by the tail appender's seal, from its active log): the transaction as far as the segment
//!   shows it ([`SegmentClosing`]). Flag bit 2 (`WHOLE`) says the transaction began in the segment (or the marker
//!   closed none), so the first offset and tally are all of it; without it they are its batches in the segment
//!   only, and the transaction open at the segment's base, if any, precedes them. A segment's log is what a sealed
//!   or bucket-installed segment keeps for a consistent cut, as the active log is for the tail (D0060).
//!
//! Both are written without an fsync and trusted only where their bytes are the ones recorded
//! (`crate::file_record`): [`read_recorded`] reads the recorded prefix of a regular file and checks it.

use std::io::Read;
use std::path::Path;

use crate::file_record::FileRecord;
use crate::txn_index::{ClosedTransaction, TxnTally};

/// Size of one entry.
pub const CLOSED_ENTRY_SIZE: usize = 52;

/// Most entries of one log (13.6 MB): a reader reads the recorded entries whole to check them. A writer logs no
/// marker past it; a cut whose producer's first marker after it is one of them reads back from the cut instead. A
/// 1 GiB segment reaches it only when its transactions average under 4 KiB.
pub const MAX_ENTRIES: u64 = 1 << 18;

const HAS_FIRST: u8 = 1;
const HAS_TALLY: u8 = 2;
/// In a segment's log only: the entry's first offset and tally are the whole transaction (module docs).
const WHOLE: u8 = 4;

/// Why bytes are not a closed log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClosedLogError {
    #[error("{0} bytes is not a whole number of {CLOSED_ENTRY_SIZE}-byte entries")]
    Torn(usize),
    #[error("entry {0}: unknown flags or a reserved byte that is not 0")]
    BadFlags(usize),
    #[error("entry {0}: marker offset {1} does not follow the previous entry's {2}")]
    OutOfOrder(usize, i64, i64),
    #[error("entry {0}: a tally of a marker that closed no transaction, or counts out of range")]
    BadTally(usize),
    #[error("entry {0}: a first offset without a tally, or not before its marker")]
    BadRun(usize),
}

/// One marker of a segment's log: the transaction it closed, as far as the segment shows it (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentClosing {
    pub producer_id: i64,
    pub marker_offset: i64,
    /// The transaction began in the segment, or the marker closed none: `data` is all of it. Otherwise the
    /// transaction open at the segment's base, if any, precedes `data`.
    pub whole: bool,
    /// First offset and tally of the transaction's batches in the segment before the marker; `None`: none.
    pub data: Option<(i64, TxnTally)>,
}

/// A segment's log from the tail appender's active log of that segment (`closed`, in marker order), for its markers
/// in `[base, end)`: the transactions the tracker saw begin in the segment, each whole. The others (one begun before
/// the segment, one whose start the tracker did not see, a marker that closed none as far as it knew) are left out:
/// a cut reads back for them instead.
pub fn segment_closings_from(closed: &[ClosedTransaction], base: i64, end: i64) -> Vec<SegmentClosing> {
    closed
        .iter()
        .filter(|c| c.marker_offset >= base && c.marker_offset < end)
        .filter_map(|c| match (c.first_offset, c.tally) {
            (Some(first), Some(tally)) if first >= base && first < c.marker_offset => Some(SegmentClosing {
                producer_id: c.producer_id,
                marker_offset: c.marker_offset,
                whole: true,
                data: Some((first, tally)),
            }),
            _ => None,
        })
        .collect()
}

/// The entries of `closed` (in marker offset order), serialized.
pub fn serialize(closed: &[ClosedTransaction]) -> Vec<u8> {
    let mut out = Vec::with_capacity(closed.len() * CLOSED_ENTRY_SIZE);
    for c in closed {
        put(&mut out, c, 0);
    }
    out
}

/// The entries of a segment's log (in marker offset order), serialized.
pub fn serialize_segment(closings: &[SegmentClosing]) -> Vec<u8> {
    let mut out = Vec::with_capacity(closings.len() * CLOSED_ENTRY_SIZE);
    for c in closings {
        let closed = ClosedTransaction {
            producer_id: c.producer_id,
            marker_offset: c.marker_offset,
            first_offset: c.data.map(|(first, _)| first),
            tally: c.data.map(|(_, tally)| tally),
        };
        put(&mut out, &closed, if c.whole { WHOLE } else { 0 });
    }
    out
}

fn put(out: &mut Vec<u8>, c: &ClosedTransaction, flags: u8) {
    let tally = c.tally.unwrap_or_default();
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    out.extend_from_slice(&c.producer_id.to_be_bytes());
    out.extend_from_slice(&c.marker_offset.to_be_bytes());
    out.extend_from_slice(&c.first_offset.unwrap_or(-1).to_be_bytes());
    out.extend_from_slice(&count(tally.records).to_be_bytes());
    out.extend_from_slice(&count(tally.batches).to_be_bytes());
    out.extend_from_slice(&count(tally.bytes).to_be_bytes());
    out.extend_from_slice(&tally.producer_epoch.to_be_bytes());
    let flags =
        flags | if c.first_offset.is_some() { HAS_FIRST } else { 0 } | if c.tally.is_some() { HAS_TALLY } else { 0 };
    out.extend_from_slice(&[flags, 0]);
}

/// The entries `bytes` hold, checked (module docs).
pub fn parse(bytes: &[u8]) -> Result<Vec<ClosedTransaction>, ClosedLogError> {
    Ok(parse_with(bytes, 0)?.into_iter().map(|(c, _)| c).collect())
}

/// The entries of a segment's log `bytes` holds, checked (module docs): besides [`parse`]'s checks, each entry's
/// first offset comes with a tally and lies before its marker.
pub fn parse_segment(bytes: &[u8]) -> Result<Vec<SegmentClosing>, ClosedLogError> {
    parse_with(bytes, WHOLE)?
        .into_iter()
        .enumerate()
        .map(|(i, (c, flags))| {
            let data = match (c.first_offset, c.tally) {
                (None, None) => None,
                (Some(first), Some(tally)) if first >= 0 && first < c.marker_offset => Some((first, tally)),
                _ => return Err(ClosedLogError::BadRun(i)),
            };
            Ok(SegmentClosing {
                producer_id: c.producer_id,
                marker_offset: c.marker_offset,
                whole: flags & WHOLE != 0,
                data,
            })
        })
        .collect()
}

/// The entries `bytes` hold with their flags, `extra` the flags allowed besides [`HAS_FIRST`] and [`HAS_TALLY`].
fn parse_with(bytes: &[u8], extra: u8) -> Result<Vec<(ClosedTransaction, u8)>, ClosedLogError> {
    let chunks = bytes.chunks_exact(CLOSED_ENTRY_SIZE);
    if !chunks.remainder().is_empty() {
        return Err(ClosedLogError::Torn(bytes.len()));
    }
    let mut out: Vec<(ClosedTransaction, u8)> = Vec::with_capacity(bytes.len() / CLOSED_ENTRY_SIZE);
    for (i, e) in chunks.enumerate() {
        let i64_at = |at: usize| {
            let mut a = [0u8; 8];
            if let Some(src) = e.get(at..at + 8) {
                a.copy_from_slice(src);
            }
            i64::from_be_bytes(a)
        };
        let (producer_id, marker_offset, first) = (i64_at(0), i64_at(8), i64_at(16));
        let (records, batches, size) = (i64_at(24), i64_at(32), i64_at(40));
        let (epoch, flags, reserved) = match e.get(48..52) {
            Some(&[a, b, flags, reserved]) => (i16::from_be_bytes([a, b]), flags, reserved),
            _ => return Err(ClosedLogError::Torn(bytes.len())),
        };
        if flags & !(HAS_FIRST | HAS_TALLY | extra) != 0 || reserved != 0 {
            return Err(ClosedLogError::BadFlags(i));
        }
        if let Some(prev) = out.last().map(|(c, _)| c.marker_offset) {
            if marker_offset <= prev {
                return Err(ClosedLogError::OutOfOrder(i, marker_offset, prev));
            }
        }
        let first_offset = (flags & HAS_FIRST != 0).then_some(first);
        let tally = if flags & HAS_TALLY != 0 {
            let count = |n: i64| u64::try_from(n).map_err(|_| ClosedLogError::BadTally(i));
            if first_offset.is_none() {
                return Err(ClosedLogError::BadTally(i));
            }
            Some(TxnTally {
                producer_epoch: epoch,
                records: count(records)?,
                batches: count(batches)?,
                bytes: count(size)?,
            })
        } else {
            None
        };
        let closed = ClosedTransaction {
            producer_id,
            marker_offset,
            first_offset,
            tally,
        };
        out.push((closed, flags));
    }
    Ok(out)
}

/// The transaction `producer`'s marker at `marker_offset` closed, in `closed` (in marker offset order).
pub fn find(closed: &[ClosedTransaction], producer: i64, marker_offset: i64) -> Option<&ClosedTransaction> {
    find_by(closed, |c| (c.producer_id, c.marker_offset), producer, marker_offset)
}

/// The entry of `producer`'s marker at `marker_offset` in a segment's log `closings` (in marker offset order).
pub fn find_in_segment(closings: &[SegmentClosing], producer: i64, marker_offset: i64) -> Option<&SegmentClosing> {
    find_by(closings, |c| (c.producer_id, c.marker_offset), producer, marker_offset)
}

/// Either log's lookup: the entry at `marker_offset` (binary search; `key` gives an entry's producer and marker
/// offset, in marker offset order), when it is `producer`'s.
fn find_by<T>(entries: &[T], key: impl Fn(&T) -> (i64, i64), producer: i64, marker_offset: i64) -> Option<&T> {
    let at = entries.partition_point(|e| key(e).1 < marker_offset);
    entries.get(at).filter(|e| key(e) == (producer, marker_offset))
}

/// The first `recorded.entries` entries' bytes of the log at `path`, when they are the recorded ones (module
/// docs); `None` when they are not (a write a crash lost, a damaged file, another version's), the file is missing
/// or not a regular file, or the record is past [`MAX_ENTRIES`]. A crash's leftovers after them are not read.
pub fn read_recorded(path: &Path, recorded: FileRecord) -> std::io::Result<Option<Vec<u8>>> {
    if recorded.entries == 0 {
        return Ok(Some(Vec::new()));
    }
    if recorded.entries > MAX_ENTRIES {
        return Ok(None);
    }
    let file = match crate::open::open_regular(path) {
        Ok((file, _)) => file,
        Err(crate::error::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(crate::error::Error::Io { source, .. }) => return Err(source),
        // Not a regular file: not the writer's.
        Err(_) => return Ok(None),
    };
    let mut prefix = Vec::new();
    file.take(recorded.entries * CLOSED_ENTRY_SIZE as u64)
        .read_to_end(&mut prefix)?;
    Ok(recorded.matches(&prefix, CLOSED_ENTRY_SIZE, true).then_some(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<ClosedTransaction> {
        let tally = |records, batches, bytes| TxnTally {
            producer_epoch: 3,
            records,
            batches,
            bytes,
        };
        vec![
            ClosedTransaction {
                producer_id: 7,
                marker_offset: 10,
                first_offset: Some(4),
                tally: Some(tally(6, 2, 300)),
            },
            ClosedTransaction {
                producer_id: 9,
                marker_offset: 11,
                first_offset: None,
                tally: None,
            },
            ClosedTransaction {
                producer_id: 7,
                marker_offset: 40,
                first_offset: Some(12),
                tally: None,
            },
            ClosedTransaction {
                producer_id: i64::MAX,
                marker_offset: i64::MAX - 1,
                first_offset: Some(0),
                tally: Some(tally(u64::MAX >> 1, 1, 0)),
            },
        ]
    }

    #[test]
    fn entries_read_back_as_written() {
        let closed = entries();
        let bytes = serialize(&closed);
        assert_eq!(bytes.len(), closed.len() * CLOSED_ENTRY_SIZE);
        assert_eq!(parse(&bytes).unwrap(), closed);
        assert_eq!(parse(&[]).unwrap(), Vec::new());
    }

    #[test]
    fn a_marker_is_found_by_its_offset_and_producer() {
        let closed = entries();
        assert_eq!(find(&closed, 7, 40).map(|c| c.first_offset), Some(Some(12)));
        assert_eq!(find(&closed, 7, 10).map(|c| c.first_offset), Some(Some(4)));
        assert_eq!(find(&closed, 9, 11).map(|c| c.first_offset), Some(None));
        // Another producer's marker at that offset, and an offset without an entry.
        assert!(find(&closed, 9, 40).is_none());
        assert!(find(&closed, 7, 12).is_none());
        assert!(find(&closed, 7, i64::MAX).is_none());
    }

    #[test]
    fn a_segments_entries_read_back_as_written_and_only_as_a_segments() {
        let tally = TxnTally {
            producer_epoch: 2,
            records: 5,
            batches: 2,
            bytes: 400,
        };
        let closings = vec![
            SegmentClosing {
                producer_id: 4,
                marker_offset: 9,
                whole: false,
                data: Some((3, tally)),
            },
            SegmentClosing {
                producer_id: 5,
                marker_offset: 10,
                whole: true,
                data: None,
            },
            SegmentClosing {
                producer_id: 4,
                marker_offset: 20,
                whole: true,
                data: Some((12, tally)),
            },
        ];
        let bytes = serialize_segment(&closings);
        assert_eq!(parse_segment(&bytes).unwrap(), closings);
        assert_eq!(
            find_in_segment(&closings, 4, 20).map(|c| c.data),
            Some(Some((12, tally)))
        );
        assert!(find_in_segment(&closings, 5, 20).is_none() && find_in_segment(&closings, 4, 11).is_none());
        // The whole flag is a segment's only: not an active log.
        assert_eq!(parse(&bytes), Err(ClosedLogError::BadFlags(1)));
        // A first offset without a tally, and one not before its marker.
        let mut lone = bytes.clone();
        lone[50] = HAS_FIRST;
        assert_eq!(parse_segment(&lone), Err(ClosedLogError::BadRun(0)));
        let late = serialize_segment(&[SegmentClosing {
            data: Some((9, tally)),
            ..closings[0]
        }]);
        assert_eq!(parse_segment(&late), Err(ClosedLogError::BadRun(0)));
    }

    #[test]
    fn a_seal_keeps_the_transactions_begun_in_its_segment() {
        let one = TxnTally {
            producer_epoch: 1,
            records: 1,
            batches: 1,
            bytes: 80,
        };
        let tally = Some(one);
        let closed = |producer_id, marker_offset, first_offset: Option<i64>, tally| ClosedTransaction {
            producer_id,
            marker_offset,
            first_offset,
            tally,
        };
        let seen = [
            // Before the segment; begun before it; closed none; begun in it without a tally; begun in it; after it.
            closed(1, 5, Some(2), tally),
            closed(1, 12, Some(8), tally),
            closed(2, 13, None, None),
            closed(3, 14, Some(11), None),
            closed(4, 16, Some(11), tally),
            closed(4, 30, Some(25), tally),
        ];
        let kept = segment_closings_from(&seen, 10, 30);
        assert_eq!(
            kept,
            vec![SegmentClosing {
                producer_id: 4,
                marker_offset: 16,
                whole: true,
                data: Some((11, one)),
            }]
        );
    }

    #[test]
    fn damaged_bytes_are_refused() {
        let bytes = serialize(&entries());
        assert_eq!(
            parse(&bytes[..bytes.len() - 1]),
            Err(ClosedLogError::Torn(bytes.len() - 1))
        );
        let mut flags = bytes.clone();
        flags[CLOSED_ENTRY_SIZE + 50] = 4;
        assert_eq!(parse(&flags), Err(ClosedLogError::BadFlags(1)));
        let mut reserved = bytes.clone();
        reserved[51] = 1;
        assert_eq!(parse(&reserved), Err(ClosedLogError::BadFlags(0)));
        // The second entry's marker offset (11) made 10: not after the first's.
        let mut order = bytes.clone();
        order[CLOSED_ENTRY_SIZE + 15] = 10;
        assert_eq!(parse(&order), Err(ClosedLogError::OutOfOrder(1, 10, 10)));
        // A negative count, and a tally without a first offset.
        let mut count = bytes.clone();
        count[24] = 0x80;
        assert_eq!(parse(&count), Err(ClosedLogError::BadTally(0)));
        let mut lone = bytes;
        lone[CLOSED_ENTRY_SIZE + 50] = HAS_TALLY;
        assert_eq!(parse(&lone), Err(ClosedLogError::BadTally(1)));
    }
}
