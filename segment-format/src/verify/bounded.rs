//! Reading a segment's index files for checking, with memory bounded by design.
//!
//! The checkers in [`crate::index`] and [`crate::txn_index`] take the index
//! bytes whole (they sort and match entries against the batches), so what they
//! are given must be small whatever the file on disk says. Three facts bound it
//! before a byte is read:
//!
//! * Kafka never writes an index over `Int.MaxValue` bytes
//!   ([`MAX_INDEX_FILE_BYTES`]): a larger file is rejected by its size (a 4 GiB
//!   sparse `.index` costs a `stat`, not 4 GiB of memory).
//! * A segment of `L` bytes holds at most one batch per [`MIN_BATCH_BYTES`], and
//!   the broker writes at most one entry per batch (plus the time index's entry
//!   at roll): anything past that is preallocation, which must be zero. It is
//!   checked for zeros in small pieces, never held, and only the part that can
//!   hold entries goes to the checker.
//! * What still exceeds [`MAX_INDEX_CHECK_BYTES`] (a legitimately huge index of
//!   a segment with tiny batches and `index.interval.bytes=0`) is not checked, with
//!   a warning saying so, rather than read whole.

use std::io::Read;
use std::path::Path;

use crate::batch::{LOG_OVERHEAD, MIN_FRAME_LENGTH};
use crate::dir::SegmentRole;
use crate::error::{Defect, Error, IndexKind};
use crate::open::{open_regular, MAX_INDEX_FILE_BYTES};
use crate::report::Finding;

/// Smallest frame in a `.log` (a magic-0 message with no key and no value):
/// a segment of `L` bytes holds at most `L / MIN_BATCH_BYTES` batches.
pub const MIN_BATCH_BYTES: u64 = LOG_OVERHEAD as u64 + MIN_FRAME_LENGTH as u64;

/// Most index bytes held in memory to check one index (64 MiB, six times
/// Kafka's default `segment.index.bytes` of 10 MiB): beyond it the index is
/// reported as not checked rather than read whole.
pub const MAX_INDEX_CHECK_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes read at once when checking that a preallocated tail is zero.
const ZERO_CHECK_PIECE: usize = 64 * 1024;

fn kind_name(kind: IndexKind) -> &'static str {
    match kind {
        IndexKind::Offset => "offset index",
        IndexKind::Time => "time index",
        IndexKind::Transaction => "transaction index",
    }
}

/// The most bytes of entries an index with `entry_size`-byte entries can hold
/// for a segment of `log_len` bytes.
pub fn max_index_bytes(log_len: u64, entry_size: usize) -> u64 {
    (log_len / MIN_BATCH_BYTES + 2).saturating_mul(entry_size as u64)
}

/// The start of the next data region at or after `at` (`SEEK_DATA`): holes of
/// a sparse file (how a broker's preallocated index usually looks) are skipped
/// without reading. `None` when only holes follow; `at` itself where the file
/// system cannot tell.
#[cfg(target_os = "linux")]
fn next_data(file: &std::fs::File, at: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let Ok(offset) = libc::off_t::try_from(at) else {
        return Some(at);
    };
    // SAFETY: a valid open descriptor; lseek reads no memory of ours.
    let found = unsafe { libc::lseek(file.as_raw_fd(), offset, libc::SEEK_DATA) };
    if found >= 0 {
        return Some(u64::try_from(found).unwrap_or(at).max(at));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENXIO) => None,
        _ => Some(at),
    }
}

#[cfg(not(target_os = "linux"))]
fn next_data(_file: &std::fs::File, at: u64) -> Option<u64> {
    Some(at)
}

/// Where the first non-zero byte of `[from, to)` is, read in small pieces.
fn first_non_zero(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; ZERO_CHECK_PIECE];
    let mut at = from;
    while at < to {
        match next_data(file, at) {
            Some(data) => at = data,
            None => return Ok(None),
        }
        if at >= to {
            break;
        }
        let n = (to - at).min(ZERO_CHECK_PIECE as u64) as usize;
        let Some(piece) = buf.get_mut(..n) else { break };
        let got = file.read_at(piece, at)?;
        if got == 0 {
            // Shrank meanwhile: what is left was zero.
            return Ok(None);
        }
        if let Some(i) = piece.iter().take(got).position(|&b| b != 0) {
            return Ok(Some(at + i as u64));
        }
        at += got as u64;
    }
    Ok(None)
}

/// Read the index at `path` (of `kind`, `entry_size`-byte entries) of a segment
/// whose `.log` has `log_len` bytes, for a checker. `Ok(None)` when it is not to
/// be checked: then `findings` say why (by name, with the limit). I/O errors
/// (a file that vanished) are returned.
pub fn read_index(
    path: &Path,
    kind: IndexKind,
    entry_size: usize,
    log_len: u64,
    role: SegmentRole,
    findings: &mut Vec<Finding>,
) -> Result<Option<Vec<u8>>, Error> {
    let what = kind_name(kind);
    let (file, meta) = match open_regular(path) {
        Ok(opened) => opened,
        Err(e) if e.is_corrupt() => {
            findings.push(Finding::from_error(&e));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let len = meta.len();
    let index = |message: String| Defect::Index { index: kind, message };
    if len > MAX_INDEX_FILE_BYTES {
        findings.push(Finding::error(
            path,
            None,
            None,
            Defect::TooLarge {
                what,
                size: len,
                limit: MAX_INDEX_FILE_BYTES,
            },
        ));
        return Ok(None);
    }
    let can_hold = max_index_bytes(log_len, entry_size);
    let read_len = len.min(can_hold);
    if len > can_hold {
        match first_non_zero(&file, can_hold, len).map_err(|e| Error::io(path, e))? {
            Some(at) => {
                findings.push(Finding::error(
                    path,
                    Some(at),
                    None,
                    index(format!(
                        "{len} bytes with data at byte {at}, but its segment of {log_len} bytes can need at most \
                         {can_hold} (one {entry_size}-byte entry per batch of at least {MIN_BATCH_BYTES} bytes); \
                         not checked further"
                    )),
                ));
                return Ok(None);
            }
            None if role == SegmentRole::Sealed => findings.push(Finding::error(
                path,
                Some(can_hold),
                None,
                index(format!(
                    "zero-filled from byte {can_hold} to the end ({len} bytes) in a sealed segment: a \
                     preallocated index that was not trimmed; the broker counts every slot as an entry"
                )),
            )),
            None => {}
        }
        if len % entry_size as u64 != 0 {
            findings.push(Finding::error(
                path,
                Some(len - len % entry_size as u64),
                None,
                index(format!(
                    "file length {len} is not a multiple of {entry_size} ({} trailing bytes)",
                    len % entry_size as u64
                )),
            ));
        }
    }
    if read_len > MAX_INDEX_CHECK_BYTES {
        findings.push(Finding::warning(
            path,
            None,
            None,
            index(format!(
                "{read_len} bytes of entries exceed the {MAX_INDEX_CHECK_BYTES} bytes segmirror holds in memory \
                 to check an index; not checked"
            )),
        ));
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(read_len as usize);
    file.take(read_len)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_decide_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        // A 4 GiB sparse index: rejected by its size.
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(4 << 30).unwrap();
        let mut findings = vec![];
        let read = read_index(&path, IndexKind::Offset, 8, 1000, SegmentRole::Newest, &mut findings).unwrap();
        assert!(read.is_none());
        assert!(
            findings[0].to_string().contains("exceeds the limit of 2147483647"),
            "{}",
            findings[0]
        );
        // 64 MiB of zeros behind a tiny segment: preallocation, tolerated in the
        // newest segment, and only the part that can hold entries is read.
        f.set_len(64 << 20).unwrap();
        let mut findings = vec![];
        let read = read_index(&path, IndexKind::Offset, 8, 1000, SegmentRole::Newest, &mut findings).unwrap();
        assert_eq!(read.unwrap().len() as u64, max_index_bytes(1000, 8));
        assert!(findings.is_empty(), "{findings:?}");
        // The same in a sealed segment is an error naming where the zeros start.
        let read = read_index(&path, IndexKind::Offset, 8, 1000, SegmentRole::Sealed, &mut findings).unwrap();
        assert!(read.is_some());
        assert!(
            findings[0].to_string().contains("zero-filled from byte"),
            "{}",
            findings[0]
        );
        // Data where the segment could need none.
        use std::os::unix::fs::FileExt;
        f.write_at(&[1], 50 << 20).unwrap();
        let mut findings = vec![];
        let read = read_index(&path, IndexKind::Offset, 8, 1000, SegmentRole::Newest, &mut findings).unwrap();
        assert!(read.is_none());
        assert_eq!(findings[0].position, Some(50 << 20));
    }
}
