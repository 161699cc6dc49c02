//! Producer-state snapshots (`<offset>.snapshot`).
//!
//! A snapshot lets a broker skip replaying the whole log to rebuild idempotent and
//! transactional producer state. The file is Kafka's generated `ProducerSnapshot`
//! message, version 1, non-flexible, prefixed with its version:
//!
//! ```text
//! version i16 (=1) | crc u32 | count i32 | count x entry (46 bytes)
//! entry: producerId i64 | epoch i16 | lastSequence i32 | lastOffset i64 |
//!        offsetDelta i32 | timestamp i64 | coordinatorEpoch i32 | currentTxnFirstOffset i64
//! ```
//!
//! The CRC is CRC-32C over `[6, end of file)`. Reading checks, in Kafka's order
//! (`ProducerStateManager.readSnapshot`): the version, the entry count against
//! the bytes present (before any allocation), then the CRC. A corrupt snapshot is
//! deleted by the broker, which falls back to an older one or a full replay.

use std::path::Path;

use crate::durable::write_atomically;
use crate::error::{Defect, ParseError, Result};

/// The only supported version (`validVersions: "1"`).
pub const SNAPSHOT_VERSION: i16 = 1;
/// Byte position of the CRC.
pub const CRC_OFFSET: usize = 2;
/// Byte position of the entry count; the CRC covers `[6, end)`.
pub const PRODUCER_ENTRIES_OFFSET: usize = 6;
/// Version, CRC and count.
pub const HEADER_SIZE: usize = 10;
/// Size of one serialised entry.
pub const ENTRY_SIZE: usize = 46;

/// One producer's state (`ProducerSnapshot.ProducerEntry`). `last_offset == -1`
/// means no batch metadata; `current_txn_first_offset == -1` no open transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerSnapshotEntry {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_sequence: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
    pub coordinator_epoch: i32,
    pub current_txn_first_offset: i64,
}

impl ProducerSnapshotEntry {
    pub fn to_bytes(&self) -> [u8; ENTRY_SIZE] {
        let mut out = [0u8; ENTRY_SIZE];
        let fields: [&[u8]; 8] = [
            &self.producer_id.to_be_bytes(),
            &self.epoch.to_be_bytes(),
            &self.last_sequence.to_be_bytes(),
            &self.last_offset.to_be_bytes(),
            &self.offset_delta.to_be_bytes(),
            &self.timestamp.to_be_bytes(),
            &self.coordinator_epoch.to_be_bytes(),
            &self.current_txn_first_offset.to_be_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            if let Some(dst) = out.get_mut(at..at + f.len()) {
                dst.copy_from_slice(f);
            }
            at += f.len();
        }
        out
    }

    pub fn from_bytes(b: &[u8; ENTRY_SIZE]) -> Self {
        let mut r = Reader { buf: b, at: 0 };
        ProducerSnapshotEntry {
            producer_id: r.i64(),
            epoch: r.i16(),
            last_sequence: r.i32(),
            last_offset: r.i64(),
            offset_delta: r.i32(),
            timestamp: r.i64(),
            coordinator_epoch: r.i32(),
            current_txn_first_offset: r.i64(),
        }
    }

    /// The open transaction's first offset, if any (Kafka treats any value < 0 as none).
    pub fn open_transaction(&self) -> Option<i64> {
        (self.current_txn_first_offset >= 0).then_some(self.current_txn_first_offset)
    }
}

/// Big-endian reader over a slice whose length the caller has checked; reads past
/// the end yield zeros instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.buf.get(self.at..self.at + N) {
            out.copy_from_slice(src);
        }
        self.at += N;
        out
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take())
    }
}

/// A whole snapshot file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerSnapshot {
    pub entries: Vec<ProducerSnapshotEntry>,
}

fn corrupt(position: usize, message: String) -> ParseError {
    ParseError::Corrupt {
        position: position as u64,
        offset: None,
        defect: Defect::Snapshot { message },
    }
}

impl ProducerSnapshot {
    /// Parse and verify a snapshot file's bytes. Bytes after the last entry are
    /// rejected: Kafka never writes them (it would accept them if the CRC,
    /// which covers them, matched).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let mut r = Reader { buf: bytes, at: 0 };
        if bytes.len() < 2 {
            return Err(corrupt(
                0,
                format!("{} bytes is too short for the version", bytes.len()),
            ));
        }
        let version = r.i16();
        if version != SNAPSHOT_VERSION {
            return Err(corrupt(0, format!("unknown file version {version}")));
        }
        if bytes.len() < HEADER_SIZE {
            return Err(corrupt(
                bytes.len(),
                format!("{} bytes is too short for the {HEADER_SIZE}-byte header", bytes.len()),
            ));
        }
        let stored_crc = r.u32();
        let count = r.i32();
        if count < 0 {
            return Err(corrupt(
                PRODUCER_ENTRIES_OFFSET,
                format!("negative entry count {count}"),
            ));
        }
        let available = bytes.len() - HEADER_SIZE;
        let needed = (count as u64) * ENTRY_SIZE as u64;
        if needed > available as u64 {
            return Err(corrupt(
                PRODUCER_ENTRIES_OFFSET,
                format!("entry count {count} needs {needed} bytes, only {available} follow the header"),
            ));
        }
        let computed = crc32c::crc32c(bytes.get(PRODUCER_ENTRIES_OFFSET..).unwrap_or_default());
        if computed != stored_crc {
            return Err(ParseError::Corrupt {
                position: CRC_OFFSET as u64,
                offset: None,
                defect: Defect::CrcMismatch {
                    stored: stored_crc,
                    computed,
                },
            });
        }
        let end = HEADER_SIZE + needed as usize;
        if end != bytes.len() {
            return Err(corrupt(
                end,
                format!("{} bytes after the last entry", bytes.len() - end),
            ));
        }
        let entries = bytes
            .get(HEADER_SIZE..end)
            .unwrap_or_default()
            .chunks_exact(ENTRY_SIZE)
            .filter_map(|c| <&[u8; ENTRY_SIZE]>::try_from(c).ok())
            .map(ProducerSnapshotEntry::from_bytes)
            .collect();
        Ok(ProducerSnapshot { entries })
    }

    /// True when `bytes` are a strict prefix of a snapshot: shorter than the header, or shorter than the entries its
    /// header counts. Kafka writes a snapshot in place (create, then one write), so a running broker's newest one
    /// can be seen like this for a moment; a full-length file with a bad CRC or stray bytes is not such a state.
    pub fn is_torn_write(bytes: &[u8]) -> bool {
        if bytes.len() < 2 {
            return true;
        }
        if i16::from_be_bytes([bytes[0], bytes[1]]) != SNAPSHOT_VERSION {
            return false;
        }
        let Some(count) = bytes.get(PRODUCER_ENTRIES_OFFSET..HEADER_SIZE) else {
            return true;
        };
        let count = i32::from_be_bytes([count[0], count[1], count[2], count[3]]);
        count >= 0 && (count as u64) * ENTRY_SIZE as u64 > (bytes.len() - HEADER_SIZE) as u64
    }

    /// Serialise with the CRC filled in, entries in the given order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_SIZE + self.entries.len() * ENTRY_SIZE);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        let count = i32::try_from(self.entries.len()).unwrap_or(i32::MAX);
        out.extend_from_slice(&count.to_be_bytes());
        for e in self.entries.iter().take(count as usize) {
            out.extend_from_slice(&e.to_bytes());
        }
        let crc = crc32c::crc32c(out.get(PRODUCER_ENTRIES_OFFSET..).unwrap_or_default());
        if let Some(dst) = out.get_mut(CRC_OFFSET..PRODUCER_ENTRIES_OFFSET) {
            dst.copy_from_slice(&crc.to_be_bytes());
        }
        out
    }

    pub fn read(path: &Path) -> Result<Self> {
        let bytes = crate::open::read_capped(path, "producer snapshot", crate::open::MAX_SNAPSHOT_BYTES)?;
        Self::parse(&bytes).map_err(|e| e.at(path))
    }

    /// Write crash-safely (Kafka itself writes snapshots in place; a torn file is
    /// then caught by the CRC, but we prefer never to leave one).
    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, &self.to_bytes())
    }

    /// `(producer id, first offset)` of every open transaction.
    pub fn open_transactions(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.entries
            .iter()
            .filter_map(|e| e.open_transaction().map(|first| (e.producer_id, first)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry() -> ProducerSnapshotEntry {
        ProducerSnapshotEntry {
            producer_id: 0x0102030405060708,
            epoch: 0x090a,
            last_sequence: 0x0b0c0d0e,
            last_offset: 0x0f10111213141516,
            offset_delta: 0x1718191a,
            timestamp: 0x1b1c1d1e1f202122,
            coordinator_epoch: 0x23242526,
            current_txn_first_offset: -1,
        }
    }

    #[test]
    fn exact_layout() {
        let snap = ProducerSnapshot { entries: vec![entry()] };
        let bytes = snap.to_bytes();
        assert_eq!(bytes.len(), 10 + 46);
        assert_eq!(&bytes[0..2], &[0, 1], "version 1");
        assert_eq!(&bytes[6..10], &[0, 0, 0, 1], "count");
        let expected_entry: Vec<u8> = (1u8..=0x26).chain([0xff; 8]).collect();
        assert_eq!(
            &bytes[10..],
            expected_entry.as_slice(),
            "fields in schema order, big-endian"
        );
        let crc = crc32c::crc32c(&bytes[6..]);
        assert_eq!(&bytes[2..6], &crc.to_be_bytes(), "CRC-32C over [6, end)");
        assert_eq!(ProducerSnapshot::parse(&bytes), Ok(snap));
    }

    #[test]
    fn empty_snapshot_is_ten_bytes() {
        let bytes = ProducerSnapshot::default().to_bytes();
        assert_eq!(bytes.len(), 10);
        assert_eq!(ProducerSnapshot::parse(&bytes), Ok(ProducerSnapshot::default()));
    }

    #[test]
    fn every_strict_prefix_is_a_torn_write_and_nothing_else_is() {
        let bytes = ProducerSnapshot {
            entries: vec![entry(), entry()],
        }
        .to_bytes();
        for len in 0..bytes.len() {
            assert!(ProducerSnapshot::is_torn_write(&bytes[..len]), "prefix of {len} bytes");
            assert!(ProducerSnapshot::parse(&bytes[..len]).is_err());
        }
        assert!(!ProducerSnapshot::is_torn_write(&bytes));
        let mut bad_crc = bytes.clone();
        bad_crc[3] ^= 1;
        assert!(!ProducerSnapshot::is_torn_write(&bad_crc));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(!ProducerSnapshot::is_torn_write(&longer));
        let mut other_version = bytes[..4].to_vec();
        other_version[1] ^= 0x40;
        assert!(!ProducerSnapshot::is_torn_write(&other_version));
    }

    fn corrupt_at(bytes: &[u8]) -> (u64, Defect) {
        match ProducerSnapshot::parse(bytes) {
            Err(ParseError::Corrupt { position, defect, .. }) => (position, defect),
            other => panic!("expected corrupt, got {other:?}"),
        }
    }

    #[test]
    fn rejects_corruption_with_positions() {
        let good = ProducerSnapshot { entries: vec![entry()] }.to_bytes();
        assert_eq!(corrupt_at(&[]).0, 0);
        let mut v = good.clone();
        v[1] = 2;
        assert_eq!(corrupt_at(&v).0, 0, "version");
        assert_eq!(corrupt_at(&good[..8]).0, 8, "short header");
        let mut v = good.clone();
        v[6..10].copy_from_slice(&2i32.to_be_bytes());
        assert_eq!(corrupt_at(&v).0, 6, "count beyond the file");
        let mut v = good.clone();
        v[6..10].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(corrupt_at(&v).0, 6, "negative count");
        let mut v = good.clone();
        v[20] ^= 1;
        assert!(matches!(corrupt_at(&v), (2, Defect::CrcMismatch { .. })));
        let mut v = good.clone();
        v.push(0);
        let crc = crc32c::crc32c(&v[6..]);
        v[2..6].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(corrupt_at(&v).0, 56, "trailing bytes with a valid CRC");
    }

    #[test]
    fn huge_count_is_rejected_before_allocating() {
        let mut v = vec![0, 1, 0, 0, 0, 0];
        v.extend_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(corrupt_at(&v).0, 6);
    }

    #[test]
    fn file_round_trip_and_open_transactions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("00000000000000000100.snapshot");
        let mut open = entry();
        open.producer_id = 9;
        open.current_txn_first_offset = 77;
        let snap = ProducerSnapshot {
            entries: vec![entry(), open],
        };
        snap.write(&path).expect("write");
        let back = ProducerSnapshot::read(&path).expect("read");
        assert_eq!(back, snap);
        assert_eq!(back.open_transactions().collect::<Vec<_>>(), vec![(9, 77)]);
    }

    fn any_entry() -> impl Strategy<Value = ProducerSnapshotEntry> {
        (
            any::<i64>(),
            any::<i16>(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
        )
            .prop_map(|(a, b, c, d, e, f, g, h)| ProducerSnapshotEntry {
                producer_id: a,
                epoch: b,
                last_sequence: c,
                last_offset: d,
                offset_delta: e,
                timestamp: f,
                coordinator_epoch: g,
                current_txn_first_offset: h,
            })
    }

    proptest! {
        #[test]
        fn round_trip(entries in proptest::collection::vec(any_entry(), 0..30)) {
            let snap = ProducerSnapshot { entries };
            prop_assert_eq!(ProducerSnapshot::parse(&snap.to_bytes()), Ok(snap));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ProducerSnapshot::parse(&bytes);
        }

        #[test]
        fn never_panics_with_valid_header(count in any::<i32>(), tail in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut v = vec![0, 1, 0, 0, 0, 0];
            v.extend_from_slice(&count.to_be_bytes());
            v.extend_from_slice(&tail);
            let crc = crc32c::crc32c(&v[6..]);
            v[2..6].copy_from_slice(&crc.to_be_bytes());
            let _ = ProducerSnapshot::parse(&v);
        }
    }
}
