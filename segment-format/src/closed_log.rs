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

use crate::txn_index::{ClosedTransaction, TxnTally};

/// Size of one entry.
pub const CLOSED_ENTRY_SIZE: usize = 52;

const HAS_FIRST: u8 = 1;
const HAS_TALLY: u8 = 2;

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
}

/// The entries of `closed` (in marker offset order), serialized.
pub fn serialize(closed: &[ClosedTransaction]) -> Vec<u8> {
    let mut out = Vec::with_capacity(closed.len() * CLOSED_ENTRY_SIZE);
    for c in closed {
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
            if c.first_offset.is_some() { HAS_FIRST } else { 0 } | if c.tally.is_some() { HAS_TALLY } else { 0 };
        out.extend_from_slice(&[flags, 0]);
    }
    out
}

/// The entries `bytes` hold, checked (module docs).
pub fn parse(bytes: &[u8]) -> Result<Vec<ClosedTransaction>, ClosedLogError> {
    let chunks = bytes.chunks_exact(CLOSED_ENTRY_SIZE);
    if !chunks.remainder().is_empty() {
        return Err(ClosedLogError::Torn(bytes.len()));
    }
    let mut out: Vec<ClosedTransaction> = Vec::with_capacity(bytes.len() / CLOSED_ENTRY_SIZE);
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
        if flags & !(HAS_FIRST | HAS_TALLY) != 0 || reserved != 0 {
            return Err(ClosedLogError::BadFlags(i));
        }
        if let Some(prev) = out.last().map(|c| c.marker_offset) {
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
        out.push(ClosedTransaction {
            producer_id,
            marker_offset,
            first_offset,
            tally,
        });
    }
    Ok(out)
}

/// The transaction `producer`'s marker at `marker_offset` closed, in `closed` (in marker offset order).
pub fn find(closed: &[ClosedTransaction], producer: i64, marker_offset: i64) -> Option<&ClosedTransaction> {
    let at = closed.partition_point(|c| c.marker_offset < marker_offset);
    closed
        .get(at)
        .filter(|c| c.marker_offset == marker_offset && c.producer_id == producer)
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
