//! Segments a rename handover need not walk: every batch already carries the target's leader epoch.
//!
//! Why: restamping a handed-over `.log` in place reads one header per batch, which from a cold page cache is a random
//! read per batch (about 1.6 s per GiB; docs/BENCHMARKS.md): the failover's install step grew with the data. In the
//! common case — a fresh target topic at epoch 0 and a source whose leader never changed, or any segment written wholly
//! under the epoch the target now has — the walk would write nothing. Such a segment is renamed and left alone, so the
//! handover costs a few reads per segment whatever its size.
//!
//! What is trusted, and why that keeps promotion's guarantee ("every promoted batch carries the target's epoch"):
//! 1. The mirror's `leader-epoch-checkpoint` ([`MirrorEpochs`]) is our own output: install writes it only after
//!    checking every magic-2 batch of the version against the manifest's epochs (`install::validate`,
//!    `install::append`: "each batch carries the epoch in force at its offset") and merging them without conflict.
//!    A segment whose offsets lie in one entry's range, of the target's epoch, was checked batch by batch to hold
//!    that epoch when it was installed. A checkpoint that is missing, unreadable or breaks the invariants Kafka keeps
//!    (`LeaderEpochCheckpoint::check`) skips nothing.
//! 2. Checked again cheaply on the file being handed over ([`confirm`]): its first frame, and every frame from the
//!    offset index's last entry to the end, must be whole magic-2 batches of the target's epoch. Leader epochs never
//!    decrease along a Kafka log (the broker truncates a follower to the new leader's log), so a first and a last
//!    batch of epoch E enclose only batches of epoch E; this catches a checkpoint that does not describe the file
//!    (bytes a direct tail appended, a version installed without epoch claims). The tail walk also yields the last
//!    offset, which `build` compares with the plan (a mirror that changed is refused as before).
//! 3. Every frame's structure was checked (CRC included) at install; the full walk's frame checks are what is
//!    skipped, exactly as the catalog's `verify` results are trusted for files promotion copies unchanged.
//!
//! Anything unconfirmed (an index missing or pointing at no frame, a frame of another epoch or magic, a file
//! shorter than the index says) falls back to the full walk, which restamps and reports any defect as before. The
//! tailed active segment (its bytes past the catalog's end were never installed) and the copied last segment are
//! always walked (`build`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use segment_format::batch::RECORD_BATCH_OVERHEAD;
use segment_format::checkpoint::{leader_epoch_checkpoint_path, LeaderEpochCheckpoint};
use segment_format::index::{OffsetIndex, OFFSET_INDEX_ENTRY_SIZE};

use crate::promote::error::{Error, Result};
use crate::promote::frames::{array, inspect_frame, PARTITION_LEADER_EPOCH_OFFSET};
use crate::promote::restamp::walk_log_from;

/// The mirror partition's leader epochs as install recorded them (`None`: nothing to trust).
#[derive(Debug, Clone, Default)]
pub(in crate::promote) struct MirrorEpochs(Option<LeaderEpochCheckpoint>);

impl MirrorEpochs {
    /// The checkpoint in `partition_dir`; missing, unreadable or inconsistent means none (every segment walked).
    pub(in crate::promote) fn read(partition_dir: &Path) -> Self {
        let path = leader_epoch_checkpoint_path(partition_dir);
        let checkpoint = LeaderEpochCheckpoint::read(&path)
            .ok()
            .filter(|c| !c.entries.is_empty() && c.check(&path).is_empty());
        MirrorEpochs(checkpoint)
    }

    /// The one epoch in force over the offsets `base..end` (a segment's range), or `None` when an epoch starts
    /// inside it or none is known at `base`.
    pub(in crate::promote) fn single_epoch(&self, base: i64, end: i64) -> Option<i32> {
        let checkpoint = self.0.as_ref()?;
        let epoch = checkpoint.epoch_at(base)?;
        let starts_inside = checkpoint
            .entries
            .iter()
            .any(|e| e.start_offset > base && e.start_offset < end);
        (!starts_inside).then_some(epoch)
    }
}

/// What a confirmed segment is: its size and last offset (`None`: an empty file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::promote) struct Settled {
    pub(in crate::promote) size: u64,
    pub(in crate::promote) last_offset: Option<i64>,
}

/// The most of an offset index's end read to find its last entry (a 1 GiB segment's index is ~2 MiB).
const INDEX_TAIL: u64 = 64 << 10;

/// Confirm that the `.log` at `log` (segment `base`, offset index at `index`) starts and ends with whole magic-2
/// batches of `epoch`: its first frame, and the frames from the index's last entry (or the start) to the end. `None`
/// when anything does not confirm it (the caller walks the file); I/O errors opening the `.log` are errors.
pub(in crate::promote) fn confirm(log: &Path, index: &Path, base: i64, epoch: i32) -> Result<Option<Settled>> {
    let file = File::open(log).map_err(|e| Error::io(log, e))?;
    let size = file.metadata().map_err(|e| Error::io(log, e))?.len();
    if size == 0 {
        return Ok(Some(Settled {
            size,
            last_offset: None,
        }));
    }
    if !batch_of_epoch(&file, log, 0, size, epoch) {
        return Ok(None);
    }
    // Without an entry (a segment smaller than `index.interval.bytes` has none) the tail walk is the whole file:
    // still no write, and a small file.
    let position = match last_index_entry(index, base) {
        None => 0,
        Some((_, position)) if position >= size => return Ok(None),
        Some((entry_offset, position)) => {
            // The entry must point at the batch holding its offset.
            let mut header = [0u8; RECORD_BATCH_OVERHEAD];
            let need = (RECORD_BATCH_OVERHEAD as u64).min(size - position) as usize;
            let Some(at) = header.get_mut(..need) else {
                return Ok(None);
            };
            if file.read_exact_at(at, position).is_err() {
                return Ok(None);
            }
            match inspect_frame(log, position, size - position, at) {
                Ok(f) if f.base_offset <= entry_offset && entry_offset <= f.last_offset => position,
                _ => return Ok(None),
            }
        }
    };
    let Ok((walk, Some(last_frame))) = walk_log_from(log, position, None) else {
        return Ok(None);
    };
    if !batch_of_epoch(&file, log, last_frame, size, epoch) || walk.last_offset.is_none_or(|o| o < base) {
        return Ok(None);
    }
    Ok(Some(Settled {
        size,
        last_offset: walk.last_offset,
    }))
}

/// Whether a whole magic-2 batch of `epoch` starts at `position` of `file` (`size` bytes).
fn batch_of_epoch(file: &File, path: &Path, position: u64, size: u64, epoch: i32) -> bool {
    let mut header = [0u8; RECORD_BATCH_OVERHEAD];
    if size.saturating_sub(position) < RECORD_BATCH_OVERHEAD as u64
        || file.read_exact_at(&mut header, position).is_err()
    {
        return false;
    }
    match inspect_frame(path, position, size - position, &header) {
        Ok(frame) => frame.magic == 2 && i32::from_be_bytes(array(&header, PARTITION_LEADER_EPOCH_OFFSET)) == epoch,
        Err(_) => false,
    }
}

/// The last entry of the offset index at `path` as (absolute offset, position), read from the file's end.
fn last_index_entry(path: &Path, base: i64) -> Option<(i64, u64)> {
    let file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let entry = OFFSET_INDEX_ENTRY_SIZE as u64;
    let whole = len / entry * entry;
    // From a slot boundary, so that the slots parse as the file's; the file's start when it is short.
    let start = whole.saturating_sub(INDEX_TAIL) / entry * entry;
    let mut bytes = vec![0u8; usize::try_from(whole - start).ok()?];
    file.read_exact_at(&mut bytes, start).ok()?;
    let last = *OffsetIndex::parse(&bytes).entries.last()?;
    // Slot 0 of the file may be (0, 0); anywhere later an all-zero slot is preallocation, which `parse` dropped.
    let position = u64::try_from(last.position).ok()?;
    Some((last.offset(base), position))
}

#[cfg(test)]
mod tests;
