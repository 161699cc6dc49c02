//! Leader epochs from `leader-epoch-checkpoint`: OffsetForLeaderEpoch and the epoch Metadata reports.
//!
//! A partition without the file (the direct applier writes none: promotion builds it) has its epochs learned from
//! its batch headers by [`EpochHistory`], as a broker rebuilds its epoch cache on recovery: the first batch stamped
//! with an epoch higher than every earlier one starts that epoch.
//!
//! Entries that start past the served bound are left out: they describe batches not served yet, and a client must
//! not learn an end offset past the high watermark from them. Entries starting exactly at the bound stay (a leader
//! assigns its epoch at its log end offset before it appends anything, and Kafka answers for it then too).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use segment_format::checkpoint::{leader_epoch_checkpoint_path, LeaderEpochCheckpoint};

use super::walk::{Segment, Step, Walker};
use super::{format_error, Listing};

/// `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET`.
const UNDEFINED: (i32, i64) = (-1, -1);

/// The checkpoint's entries starting at or below `upper`, as epoch -> start offset (empty without the file).
fn epochs(dir: &Path, upper: i64) -> io::Result<BTreeMap<i32, i64>> {
    let checkpoint = match LeaderEpochCheckpoint::read(&leader_epoch_checkpoint_path(dir)) {
        Ok(c) => c,
        Err(segment_format::Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            return Ok(BTreeMap::new())
        }
        Err(e) => return Err(format_error(e)),
    };
    Ok(checkpoint
        .entries
        .iter()
        .filter(|e| e.start_offset <= upper)
        .map(|e| (e.epoch, e.start_offset))
        .collect())
}

/// The newest leader epoch starting at or below `upper`, -1 when there is none.
pub fn latest_epoch(dir: &Path, upper: i64) -> io::Result<i32> {
    Ok(epochs(dir, upper)?.keys().next_back().copied().unwrap_or(UNDEFINED.0))
}

/// The answer of [`epoch_end`] from `epochs` (epoch -> start offset).
fn end_for(epochs: &BTreeMap<i32, i64>, requested: i32, upper: i64) -> (i32, i64) {
    if requested == UNDEFINED.0 {
        return UNDEFINED;
    }
    if epochs.keys().next_back() == Some(&requested) {
        return (requested, upper);
    }
    let Some((_, &higher_start)) = epochs.range(requested.saturating_add(1)..).next() else {
        return UNDEFINED;
    };
    match epochs.range(..=requested).next_back() {
        Some((&floor, _)) => (floor, higher_start),
        None => (requested, higher_start),
    }
}

/// Most epochs an [`EpochHistory`] keeps (a leader change each; far more than a partition ever sees).
const MAX_EPOCHS: usize = 100_000;

/// A partition's leader epochs, from its `leader-epoch-checkpoint` when it has one, else learned from its batch
/// headers, walking only what was appended since the last [`EpochHistory::advance`].
#[derive(Debug, Default)]
pub struct EpochHistory {
    epochs: BTreeMap<i32, i64>,
    /// Where the header walk stopped: (segment base, byte position, offset after the last batch walked).
    at: Option<(i64, u64, i64)>,
}

impl EpochHistory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bring the history up to `upper` (exclusive, a batch boundary): the checkpoint's entries when the file
    /// exists, else the epochs of the batch headers below `upper`. Starts over when the walk's position is gone
    /// (its segment deleted, or `upper` below it after a truncation).
    pub fn advance(&mut self, dir: &Path, upper: i64) -> io::Result<()> {
        let from_file = epochs(dir, upper)?;
        if !from_file.is_empty() || leader_epoch_checkpoint_path(dir).exists() {
            self.epochs = from_file;
            self.at = None;
            return Ok(());
        }
        let listing = Listing::of(dir)?;
        let stale = self
            .at
            .is_some_and(|(base, _, next)| next > upper || !listing.segments.contains(&base));
        if stale {
            self.epochs.clear();
            self.at = None;
        }
        let (mut base, mut pos) = match self.at {
            Some((base, pos, _)) => (base, pos),
            None => match listing.segments.first() {
                Some(&first) => (first, 0),
                None => return Ok(()),
            },
        };
        loop {
            let Some(seg) = Segment::open(dir, base)? else {
                return Ok(());
            };
            let mut walker = Walker::new(&seg, pos, upper);
            loop {
                match walker.next_step()? {
                    Step::Batch(h) if h.last_offset >= upper => return Ok(()),
                    Step::Batch(h) => {
                        let newer = self.epochs.keys().next_back().is_none_or(|&last| h.leader_epoch > last);
                        if h.magic >= 2 && h.leader_epoch >= 0 && newer && self.epochs.len() < MAX_EPOCHS {
                            self.epochs.insert(h.leader_epoch, h.base_offset);
                        }
                        self.at = Some((base, h.end(), h.next_offset()));
                    }
                    Step::End => break,
                    Step::Partial => return Ok(()),
                }
            }
            // The segment is walked to its end: on to the next one.
            let Some(&next) = listing.segments.iter().find(|&&b| b > base) else {
                return Ok(());
            };
            let walked = self.at.map_or(next, |(_, _, walked)| walked);
            self.at = Some((next, 0, walked));
            base = next;
            pos = 0;
        }
    }

    /// The newest epoch, -1 when none is known.
    pub fn latest(&self) -> i32 {
        self.epochs.keys().next_back().copied().unwrap_or(UNDEFINED.0)
    }

    /// OffsetForLeaderEpoch from this history (see [`epoch_end`]).
    pub fn end_for(&self, requested: i32, upper: i64) -> (i32, i64) {
        end_for(&self.epochs, requested, upper)
    }
}

/// OffsetForLeaderEpoch, as Kafka's `LeaderEpochFileCache.endOffsetFor(requested, logEndOffset)` with the high
/// watermark `upper` as the log end: `(-1, -1)` for epoch -1 or one above every known epoch; `(requested, upper)`
/// for the newest epoch; otherwise the largest epoch at or below `requested` and the start offset of the first
/// epoch after it, or, when `requested` is below every known epoch, `(requested, start of the first epoch)`.
pub fn epoch_end(dir: &Path, requested: i32, upper: i64) -> io::Result<(i32, i64)> {
    Ok(end_for(&epochs(dir, upper)?, requested, upper))
}
