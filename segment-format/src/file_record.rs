//! What a writer records of a file of fixed-size entries that it writes without an fsync: the entry count and the
//! CRC-32C of those entries' bytes.
//!
//! Why: the appliers keep files that only spare promotion a read (indexes, closed logs). An fsync per write would
//! put a disk flush on the latency path; instead the record, written durably with what it describes (a state file,
//! a catalog row), says which bytes the file must begin with. A reader uses the file only where they are those
//! bytes, so a write a crash lost, a damaged file or another version's file costs a read, never a wrong answer.

use serde::{Deserialize, Serialize};

/// The entry count and CRC-32C of a file's entries (serialized, nothing else).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FileRecord {
    pub entries: u64,
    pub crc32c: u32,
}

impl FileRecord {
    /// The file grown by `bytes` holding `entries` more entries.
    pub fn append(self, bytes: &[u8], entries: usize) -> FileRecord {
        FileRecord {
            entries: self.entries + entries as u64,
            crc32c: crc32c::crc32c_append(self.crc32c, bytes),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == FileRecord::default()
    }

    /// The record of a file holding exactly `bytes`, `entries` entries.
    pub fn of(bytes: &[u8], entries: usize) -> FileRecord {
        FileRecord::default().append(bytes, entries)
    }

    /// Whether the first `entries` entries of `bytes` (`entry_size` bytes each) are the ones described; with
    /// `exact`, `bytes` must hold nothing more.
    pub fn matches(&self, bytes: &[u8], entry_size: usize, exact: bool) -> bool {
        let Some(len) = usize::try_from(self.entries)
            .ok()
            .and_then(|n| n.checked_mul(entry_size))
        else {
            return false;
        };
        let Some(prefix) = bytes.get(..len) else {
            return false;
        };
        (!exact || bytes.len() == len) && crc32c::crc32c(prefix) == self.crc32c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_matches_its_bytes_and_only_them() {
        let bytes = [1u8, 2, 3, 4, 5, 6];
        let whole = FileRecord::of(&bytes, 3);
        assert_eq!(whole, FileRecord::of(&bytes[..2], 1).append(&bytes[2..], 2));
        assert!(whole.matches(&bytes, 2, true));
        let mut longer = bytes.to_vec();
        longer.extend_from_slice(&[7, 8]);
        assert!(whole.matches(&longer, 2, false));
        assert!(!whole.matches(&longer, 2, true));
        assert!(!whole.matches(&bytes[..4], 2, false));
        let mut changed = bytes;
        changed[5] = 0;
        assert!(!whole.matches(&changed, 2, true));
        assert!(FileRecord::default().is_empty() && !whole.is_empty());
    }
}
