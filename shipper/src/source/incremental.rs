//! The active segment between the rounds of a continuous shipper, read once: what a round needs to ship a grown
//! version of it without looking at the bytes it shipped before.
//!
//! Why: [`super::bound_active`] reads a snapshot of the active segment whole (verification from byte 0, the index
//! rebuild, and the seed's hash of the shipped prefix against its chunks), right for a one-shot `seed` but
//! proportional to the segment in every round of `ship --store`, which then spends its interval re-reading a
//! segment that grows to a GiB. An [`ActiveTail`] keeps, for the prefix already validated and shipped, everything a
//! new version is derived from and that only grows: the [`TailPosition`] the direct tail continues from (position,
//! next offset, last epoch, inode, tripwire), the running CRC-32C and SHA-256 of the whole prefix (the manifest's
//! `.log` entry describes the assembled file), the offset and time index builders (their entries for a prefix are
//! a prefix of their entries for a longer one) and the batch totals. [`advance`] reads only the bytes appended
//! since: [`read_tail`] finds the complete batches (CRC, framing, offsets, epochs; truncation, replacement and the
//! tripwire checked), then those bytes are read once more into memory, a bounded piece at a time, and that copy
//! is what is checked again batch by batch, hashed, indexed and written to the staging file that is uploaded: the
//! object holds exactly the bytes that were checked.
//!
//! What does not continue an `ActiveTail` (the caller drops it and prepares the segment from byte 0 as `seed`
//! does, then establishes a new one): the file truncated, replaced or rewritten under the position, a corrupt batch
//! (the full path reports it with its findings), a legacy (magic 0/1) frame (whose record counts only a deep scan
//! knows), an ABORT marker (the broker writes its `.txnindex` entry just after the marker; the full scan checks the
//! entry is there and waits for it, so no version ships a marker without its entry), deep verification (decompressing every record is what `bound_active` does), or a shipped version in the
//! bucket that is not the one this state was established against.
//!
//! Blocking (file reads); async callers run it in `spawn_blocking`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use segment_format::batch::ControlType;
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder};
use segment_format::log::scan_frames;
use segment_format::Error;
use segmirror_transport::digest::Hasher;
use segmirror_transport::Digest;

use super::growing::{read_tail, TailOptions, TailPosition, TailRead};
use super::SegmentStats;

/// Bytes one [`read_tail`] call of [`advance`] returns at most (4 MiB, or one batch if larger): the piece read into
/// memory, checked and hashed at a time, so a round's memory is bounded whatever the backlog. Large enough that
/// the per-call cost (an open, two `stat`s, the tripwire read) is nothing next to the read.
pub const ADVANCE_PIECE_BYTES: u64 = 4 * 1024 * 1024;

/// The validated, shipped prefix of one active segment and what a longer version is derived from (module doc).
#[derive(Clone)]
pub struct ActiveTail {
    /// Where the validated prefix ends, and how to check the bytes after it.
    pub tail: TailPosition,
    /// CRC-32C, SHA-256 and size of `[0, tail.position)`.
    pub whole: Hasher,
    offset_index: OffsetIndexBuilder,
    time_index: TimeIndexBuilder,
    /// Totals of the prefix's batches.
    pub stats: SegmentStats,
}

impl std::fmt::Debug for ActiveTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveTail")
            .field("tail", &self.tail)
            .field("size", &self.whole.size())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl ActiveTail {
    /// Nothing of the segment at `log` read yet (ties the state to the file now at `log`).
    pub fn start(log: &Path, base_offset: i64, index_interval_bytes: u64) -> Result<ActiveTail, Error> {
        Ok(ActiveTail {
            tail: TailPosition::start(log, base_offset)?,
            whole: Hasher::new(),
            offset_index: OffsetIndexBuilder::new(base_offset, index_interval_bytes),
            time_index: TimeIndexBuilder::new(base_offset, index_interval_bytes),
            stats: SegmentStats {
                max_timestamp: -1,
                ..SegmentStats::default()
            },
        })
    }

    /// The segment's `.log`.
    pub fn path(&self) -> &PathBuf {
        &self.tail.path
    }

    /// Bytes of the validated prefix.
    pub fn len(&self) -> u64 {
        self.tail.position
    }

    /// No byte validated yet.
    pub fn is_empty(&self) -> bool {
        self.tail.position == 0
    }

    /// The digest of the validated prefix (the manifest's `.log` entry of a version ending there).
    pub fn digest(&self) -> Digest {
        self.whole.clone().finish()
    }

    /// One past the prefix's last offset (the version's `next`).
    pub fn next_offset(&self) -> i64 {
        self.tail.next_offset
    }

    /// The trimmed offset index of the prefix.
    pub fn offset_index(&self) -> Vec<u8> {
        self.offset_index.to_bytes()
    }

    /// The time index of the prefix in the form a clean shutdown leaves it (with the closing entry), as
    /// [`super::rebuild`] builds it: the builder itself stays open for the batches still to come.
    pub fn time_index(&self) -> Vec<u8> {
        let mut closed = self.time_index.clone();
        closed.seal();
        closed.to_bytes()
    }
}

/// What [`advance`] came to.
#[derive(Debug)]
pub enum Advance {
    /// The state after the batches appended since (possibly none), the bytes read from the source, and the new
    /// bytes copied to the staging file when one was asked for and there were any.
    Grown {
        next: Box<ActiveTail>,
        read: u64,
        pending: u64,
        new_bytes: Option<(tempfile::NamedTempFile, Digest)>,
    },
    /// The state cannot be continued (module doc): why. The caller prepares the segment from byte 0.
    Unusable(String),
}

/// Continue `state` over the complete batches appended since (up to `upto` bytes when given: establishing a state
/// for a prefix already shipped), copying them into a new file in `staging` when given. See the module doc.
pub fn advance(state: &ActiveTail, upto: Option<u64>, staging: Option<&Path>) -> Result<Advance, Error> {
    let mut next = state.clone();
    let mut piece_hash = Hasher::new();
    let mut out: Option<tempfile::NamedTempFile> = None;
    let mut read = 0u64;
    let mut pending;
    loop {
        let room = upto.map_or(ADVANCE_PIECE_BYTES, |u| {
            u.saturating_sub(next.tail.position).min(ADVANCE_PIECE_BYTES)
        });
        let options = TailOptions {
            max_chunk_bytes: room.max(1),
            ..TailOptions::default()
        };
        let (chunk, after) = match read_tail(&next.tail, &options)? {
            TailRead::Appended { chunk, next } => (chunk, next),
            TailRead::Truncated { len, position, .. } => {
                return Ok(Advance::Unusable(format!(
                    "truncated to {len} bytes below the validated {position}"
                )))
            }
            TailRead::Replaced { reason, .. } | TailRead::Changed { reason, .. } => {
                return Ok(Advance::Unusable(reason))
            }
            TailRead::Corrupt(e) => return Ok(Advance::Unusable(e.to_string())),
        };
        pending = chunk.pending;
        if chunk.is_empty() || upto.is_some_and(|u| chunk.to > u) {
            break;
        }
        let bytes = read_range(&next.tail.path, chunk.from, chunk.len())?;
        if crc32c::crc32c(&bytes) != chunk.crc32c {
            return Ok(Advance::Unusable(format!(
                "bytes [{}, {}) changed between two reads",
                chunk.from, chunk.to
            )));
        }
        if let Some(reason) = index_batches(&mut next, &bytes, chunk.from) {
            return Ok(Advance::Unusable(reason));
        }
        next.whole.update(&bytes);
        read += chunk.len();
        if let Some(dir) = staging {
            let file = match out.as_mut() {
                Some(f) => f,
                None => out.insert(tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io(dir, e))?),
            };
            file.write_all(&bytes).map_err(|e| Error::io(file.path(), e))?;
            piece_hash.update(&bytes);
        }
        next.tail = after;
        if upto.is_some_and(|u| next.tail.position >= u) {
            break;
        }
    }
    let new_bytes = match out {
        Some(mut f) => {
            f.as_file_mut().sync_data().map_err(|e| Error::io(f.path(), e))?;
            Some((f, piece_hash.finish()))
        }
        None => None,
    };
    Ok(Advance::Grown {
        next: Box::new(next),
        read,
        pending,
        new_bytes,
    })
}

/// Check the batches of `bytes` (starting at file position `from`) once more on the copy that is shipped, and add
/// them to the state's indexes and totals. `Some(reason)` when they cannot continue it.
fn index_batches(state: &mut ActiveTail, bytes: &[u8], from: u64) -> Option<String> {
    let mut end = from;
    for frame in scan_frames(bytes, from) {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => return Some(format!("byte {end}: {e:?}")),
        };
        let info = &frame.info;
        if !frame.crc_matches() {
            return Some(format!("byte {}: CRC mismatch on the second read", info.position));
        }
        if info.magic < 2 {
            return Some(format!(
                "byte {}: a legacy (magic {}) frame; its records are counted by the full scan",
                info.position, info.magic
            ));
        }
        if info.is_control && !matches!(info.control, Some(ControlType::Commit)) {
            // An ABORT marker needs its `.txnindex` entry, which the broker writes just after the marker: the full
            // scan checks the entry is there (and waits for it), so a version never ships a marker without it.
            return Some(format!(
                "byte {}: a transaction marker at offset {} (its transaction index entry is the full scan's to check)",
                info.position, info.base_offset
            ));
        }
        if let Err(e) = state.offset_index.push(info).and_then(|_| state.time_index.push(info)) {
            return Some(format!("byte {}: {e:?}", info.position));
        }
        let s = &mut state.stats;
        s.first_offset.get_or_insert(info.base_offset);
        s.last_offset = Some(info.last_offset);
        s.batches += 1;
        s.records += u64::try_from(info.records_count).unwrap_or(0);
        s.max_timestamp = s.max_timestamp.max(info.max_timestamp);
        end = info.position + info.size;
    }
    (end != from + bytes.len() as u64).then(|| format!("the batches end at byte {end}, not at a chunk boundary"))
}

/// `len` bytes of `path` at `position` (a short read: the file shrank, reported as changed).
fn read_range(path: &Path, position: u64, len: u64) -> Result<Vec<u8>, Error> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    file.seek(SeekFrom::Start(position)).map_err(|e| Error::io(path, e))?;
    let size = usize::try_from(len).map_err(|_| Error::io(path, std::io::Error::other("chunk too large")))?;
    let mut buf = vec![0u8; size];
    file.read_exact(&mut buf).map_err(|e| Error::io(path, e))?;
    Ok(buf)
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
