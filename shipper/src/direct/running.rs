//! The running digest of the segment being shipped: the SHA-256 of the chunks as they go, and the offset and time
//! index Kafka's default `index.interval.bytes` makes of their batches, so that a seal needs no second pass over the
//! segment.
//!
//! Why: a seal used to read the sealed `.log` whole again (SHA-256 and CRC-32C of every byte, then a header scan
//! with every batch CRC to fit the index interval): for a tail catching up on 1 GiB segments that is a second and a
//! third pass over bytes the feed had just read and shipped, on the feed's one step thread, while nothing else of
//! any partition shipped. The bytes the running digest covers are the very bytes that went out (`read_tail_into`
//! hands over what its scan CRC-checked), so its SHA-256 is the one the applier must find; what it cannot see is a
//! rewrite of the source file *after* a chunk was read. Kafka never rewrites a segment in place (it truncates,
//! renames or deletes), and those are what [`Running::usable`] checks before the seal trusts it: the same inode,
//! a size equal to the position shipped (the tail read of the same step just saw the last batch where it was), and
//! the modification time the file had after the last chunk was read. Anything else (a mismatch, no running state
//! because the segment was resumed mid-way or the state was copied, a batch the default index rule refuses) takes
//! the full read of before, which compares the file's CRC-32C with the chunks'.
//!
//! The state is never copied: [`RunningSlot`]'s clone is empty, so a copy of a partition's state (a stale step, a
//! position computed on the side) seals through the full read, never with a digest of other bytes. The step that
//! owns the slot takes it out of the partition and hands it back with its result.
//!
//! `SEGMIRROR_SEAL_FULL_READ=1` in the environment turns the running digest off (every seal reads the file, as
//! before): for an operator who wants the source file itself checked at every seal, and for benchmarks comparing
//! both ways in one build (the applier reads the same variable).
//!
//! Memory: the index entries of the unsealed segment, one per 4 KiB of it at most (about 0.4 % of the segment).

use std::path::Path;
use std::time::SystemTime;

use segment_format::batch::BatchInfo;
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder, DEFAULT_INDEX_INTERVAL_BYTES};

use crate::error::{Error, Result};
use crate::source::growing::TailPosition;

/// The running digest of one segment from byte 0 to `position`.
pub(super) struct Running {
    base_offset: i64,
    inode: u64,
    /// End of the bytes hashed (the tail's position after the last chunk).
    position: u64,
    sha: aws_lc_rs::digest::Context,
    offsets: OffsetIndexBuilder,
    times: TimeIndexBuilder,
    /// The index builders took every batch (`false`: one was refused; the seal fits the indexes from the file).
    indexable: bool,
    /// The file's modification time after the last chunk was read.
    modified: Option<SystemTime>,
}

/// What a seal takes from a usable [`Running`].
pub(super) struct Finished {
    pub sha256: [u8; 32],
    /// The offset and time index bytes at [`DEFAULT_INDEX_INTERVAL_BYTES`] (the time index sealed as at a roll);
    /// `None` when a batch was refused.
    pub default_indexes: Option<(Vec<u8>, Vec<u8>)>,
}

/// A partition's running digest, if it has one; a clone is always empty (see the module doc).
#[derive(Default)]
pub(super) struct RunningSlot(Option<Box<Running>>);

impl Clone for RunningSlot {
    fn clone(&self) -> Self {
        RunningSlot(None)
    }
}

impl std::fmt::Debug for RunningSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("RunningSlot(none)"),
            Some(r) => write!(f, "RunningSlot(segment {} to {})", r.base_offset, r.position),
        }
    }
}

impl RunningSlot {
    /// Takes the state out, leaving the slot empty.
    pub(super) fn take(&mut self) -> RunningSlot {
        RunningSlot(self.0.take())
    }

    /// Whether the slot holds a digest of segment `base_offset` up to `position`.
    #[cfg(test)]
    pub(super) fn covers(&self, base_offset: i64, position: u64) -> bool {
        self.0
            .as_ref()
            .is_some_and(|r| r.base_offset == base_offset && r.position == position)
    }

    /// The chunk `bytes` (with its `batches`), read at `at` and now shipped, added. A chunk at byte 0 starts a new
    /// digest; one that does not continue the digest held (another segment, file or position) empties the slot.
    pub(super) fn advance(&mut self, at: &TailPosition, bytes: &[u8], batches: &[BatchInfo]) -> Result<()> {
        let continues = self
            .0
            .as_ref()
            .is_some_and(|r| r.base_offset == at.base_offset && r.inode == at.inode && r.position == at.position);
        if at.position == 0 && !continues {
            self.0 = Some(Box::new(Running {
                base_offset: at.base_offset,
                inode: at.inode,
                position: 0,
                sha: aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256),
                offsets: OffsetIndexBuilder::new(at.base_offset, DEFAULT_INDEX_INTERVAL_BYTES),
                times: TimeIndexBuilder::new(at.base_offset, DEFAULT_INDEX_INTERVAL_BYTES),
                indexable: true,
                modified: None,
            }));
        } else if !continues {
            self.0 = None;
            return Ok(());
        }
        let Some(r) = self.0.as_mut() else { return Ok(()) };
        r.sha.update(bytes);
        for b in batches {
            if r.indexable && (r.offsets.push(b).is_err() || r.times.push(b).is_err()) {
                r.indexable = false;
            }
        }
        r.position = at.position + bytes.len() as u64;
        r.modified = modified(&at.path)?;
        Ok(())
    }

    /// The digest for sealing the segment `at` is at the end of, when it is usable (see the module doc), taking
    /// the slot's state; `None`: the seal reads the file.
    pub(super) fn finish_for(&mut self, at: &TailPosition) -> Result<Option<Finished>> {
        let Some(r) = self.0.take() else { return Ok(None) };
        if full_read_forced() || !r.usable(at)? {
            return Ok(None);
        }
        let Running {
            sha,
            offsets,
            mut times,
            indexable,
            ..
        } = *r;
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(sha.finish().as_ref());
        let default_indexes = indexable.then(|| {
            times.seal();
            (offsets.to_bytes(), times.to_bytes())
        });
        Ok(Some(Finished {
            sha256,
            default_indexes,
        }))
    }
}

impl Running {
    /// Whether this digest is the one of the file `at` ends: the same segment, inode and position, and the file
    /// now as the last chunk left it (its size the position, its modification time unchanged).
    fn usable(&self, at: &TailPosition) -> Result<bool> {
        if self.base_offset != at.base_offset || self.inode != at.inode || self.position != at.position {
            return Ok(false);
        }
        let meta = match std::fs::metadata(&at.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io(&at.path, e)),
        };
        #[cfg(unix)]
        let same_inode = std::os::unix::fs::MetadataExt::ino(&meta) == at.inode;
        #[cfg(not(unix))]
        let same_inode = true;
        Ok(same_inode && meta.len() == at.position && self.modified.is_some() && meta.modified().ok() == self.modified)
    }
}

fn modified(path: &Path) -> Result<Option<SystemTime>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok(meta.modified().ok())
}

/// `SEGMIRROR_SEAL_FULL_READ=1`: every seal reads the file (see the module doc); read once per process.
fn full_read_forced() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os("SEGMIRROR_SEAL_FULL_READ").is_some_and(|v| v == "1"))
}
