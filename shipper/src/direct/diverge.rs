//! Where the mirror and the source part ways: the leader-epoch comparison a Kafka follower makes with
//! `OffsetsForLeaderEpoch` before it fetches, made by the shipper at the start of every session that agreed
//! `FEATURE_TRUNCATE` (the applier's Resume names, per partition, the mirror's end offset `O` and the leader epoch
//! `E` of its last batch, read off the mirror's own bytes).
//!
//! Why epochs and not the bytes: the shipper has no copy of the mirror, only its end; and a source that truncated
//! (a leader change, an unclean election) and then appended under a new epoch may be as long as the mirror again,
//! so no length comparison tells. The epoch history in the source's `leader-epoch-checkpoint` does: the source's
//! log agrees with the mirror up to where the source's epoch `E` ends ([`end_offset_for`], Kafka's
//! `LeaderEpochFileCache.endOffsetFor`); below `O` that end means the mirror holds batches the source no longer has.
//!
//! What is then sent: in `--upto log-end` mode a Truncate to the source batch that holds that end (so the mirror
//! ends on one of the source's batch boundaries, in the source's segment), from where the feed continues; in
//! `--upto high-watermark` mode only committed records were shipped, so the source lost committed data: a Truncate
//! in mode `HighWatermark` tells the applier to record it, and the partition ships nothing more (logged at error).
//!
//! What cannot be proved is refused ([`Error::ResumeInvalid`], the partition refused for the session): an epoch
//! the source's checkpoint does not answer for (above its latest), and a truncation point at or beyond the Resume
//! position (the source's batches reach the mirror's position but end at fewer offsets than the mirror says it
//! holds: its bytes below the position are not the source's, and a Truncate only moves the mirror back).
//!
//! What this does not see (as a Kafka follower does not): a source rewritten under the *same* epoch to at least the
//! mirror's length. A broker bumps the epoch whenever leadership moves, including a restart, so only a hand-edited
//! log does that; the feed's tripwire sees it while streaming.

use segment_format::checkpoint::EpochEntry;
use segmirror_transport::direct::payload::{LogEnd, Position, Truncate, TruncateMode};

use super::{log_path, name, TailPartition};
use crate::error::{Error, Result};
use crate::source::bound_hw::UptoPolicy;
use crate::source::growing::{read_tail, TailOptions, TailPosition, TailRead};
use crate::source::read::{read_partition, PartitionRead, PartitionView};

/// The source's answer for an epoch: the largest epoch it has at or below the one asked for, and the offset where
/// that epoch's records end in its log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: i64,
}

/// Kafka's `LeaderEpochFileCache.endOffsetFor(requested, logEndOffset)` over a checkpoint's entries (strictly
/// increasing epochs and start offsets, as the segment-format reader checks): the latest epoch ends at the log end;
/// an older epoch ends where the first later epoch starts, answered with the largest epoch at or below the one asked
/// (an epoch the source never had answers for the epoch before it); one below every known epoch ends where the
/// first known one starts. `None` (Kafka's `UNDEFINED_EPOCH_OFFSET`): `-1` asked, or an epoch above the latest.
pub fn end_offset_for(epochs: &[EpochEntry], requested: i32, log_end: i64) -> Option<EpochEndOffset> {
    if requested < 0 {
        return None;
    }
    let latest = epochs.last()?;
    if latest.epoch == requested {
        return Some(EpochEndOffset {
            epoch: requested,
            end_offset: log_end,
        });
    }
    let higher = epochs.iter().find(|e| e.epoch > requested)?;
    let floor = epochs.iter().rev().find(|e| e.epoch <= requested);
    Some(EpochEndOffset {
        epoch: floor.map_or(requested, |f| f.epoch),
        end_offset: higher.start_offset,
    })
}

/// What the comparison at a session start found for one partition.
#[derive(Debug)]
pub(super) enum Verdict {
    /// The source holds the mirror's end: resume as usual.
    Agrees,
    /// The source diverged below the mirror's end: send `truncate` first, then continue at `at` (log-end mode) or
    /// ship nothing more (high-watermark mode).
    Diverged { truncate: Box<Truncate>, at: TailPosition },
}

/// Compares the mirror's end (`resume`, `end`) with the source partition `target` (see the module doc). Blocking.
pub(super) fn compare(target: &TailPartition, resume: &Position, end: LogEnd, upto: UptoPolicy) -> Result<Verdict> {
    let refuse = |reason: String| Error::ResumeInvalid {
        partition: name(&target.partition),
        segment_base: resume.segment_base,
        position: resume.position,
        reason,
    };
    if end.last_epoch < 0 {
        // No v2 batch in the mirror (nothing shipped, or only legacy batches): nothing to compare, as in Kafka.
        return Ok(Verdict::Agrees);
    }
    let view = match read_partition(&target.dir)? {
        PartitionRead::View(view) => view,
        PartitionRead::Refused(findings) => {
            return Err(refuse(format!("the source partition is not readable: {findings:?}")))
        }
    };
    let log_end = log_end(&view)?;
    let Some(answer) = end_offset_for(&view.epochs, end.last_epoch, log_end) else {
        return Err(refuse(format!(
            "the mirror ends at offset {} in leader epoch {}, which the source's leader-epoch-checkpoint ({:?}) does not answer for: cannot tell where the logs agree",
            end.end_offset,
            end.last_epoch,
            view.epochs.last()
        )));
    };
    let agree_below = answer.end_offset.min(log_end);
    if agree_below >= end.end_offset {
        return Ok(Verdict::Agrees);
    }
    let (segment_base, position, truncate_to) = batch_at(&view, agree_below).map_err(|e| refuse(e.to_string()))?;
    if (segment_base, position) >= (resume.segment_base, resume.position) {
        // The source's batches reach the mirror's position, yet end at fewer offsets than the mirror says its bytes
        // hold: the mirror's bytes below its position are not the source's (a source rewritten under the same
        // epoch, or a wrong Resume). A Truncate can only move the mirror back, and there is no point below its
        // position where the two provably agree.
        return Err(refuse(format!(
            "the mirror says its bytes end at offset {} in leader epoch {}, but the source's epoch {} ends at offset \
             {} in a batch at segment {segment_base} byte {position}, at or beyond the mirror's position: the bytes \
             below that position differ and no truncation point is provable",
            end.end_offset, end.last_epoch, answer.epoch, answer.end_offset
        )));
    }
    let at = super::resume_at(target, segment_base, position)?;
    let mode = match upto {
        UptoPolicy::LogEnd => TruncateMode::LogEnd,
        UptoPolicy::HighWatermark => TruncateMode::HighWatermark,
    };
    Ok(Verdict::Diverged {
        truncate: Box::new(Truncate {
            partition: target.partition.clone(),
            truncate_to,
            segment_base,
            position,
            mode,
            mirror_end_offset: end.end_offset,
            mirror_epoch: end.last_epoch,
            source_epoch: answer.epoch,
            source_end_offset: answer.end_offset,
        }),
        at,
    })
}

/// The source's log end offset: the offset after the last complete, CRC-valid batch of its newest segment
/// (its base when it holds none).
fn log_end(view: &PartitionView) -> Result<i64> {
    let Some(last) = view.segments.last() else {
        return Ok(0);
    };
    let mut at = TailPosition::start(&last.files.log, last.base_offset())?;
    loop {
        match read_tail(&at, &TailOptions::default())? {
            TailRead::Appended { chunk, next } if !chunk.is_empty() => at = next,
            TailRead::Appended { .. } => return Ok(at.next_offset),
            TailRead::Corrupt(e) => return Err(e.into()),
            other => {
                return Err(Error::Diverged {
                    partition: view.dir.display().to_string(),
                    segment_base: at.base_offset,
                    position: at.position,
                    reason: format!("the source's newest segment changed while its end was read: {other:?}"),
                })
            }
        }
    }
}

/// Where the source batch holding `offset` starts: (segment base, byte position, its base offset); the end of
/// the segment's batches when no batch of it reaches `offset` (then the offset named is the one after its last).
fn batch_at(view: &PartitionView, offset: i64) -> Result<(i64, u64, i64)> {
    let Some(segment) = view.segments.iter().rev().find(|s| s.base_offset() <= offset) else {
        return Err(Error::InvalidSetting {
            setting: "truncation point",
            reason: format!(
                "offset {offset} lies below the source's first segment ({:?}): nothing of the mirror would remain",
                view.segments.first().map(|s| s.base_offset())
            ),
        });
    };
    let base = segment.base_offset();
    let path = log_path(&view.dir, base);
    let mut at = TailPosition::start(&path, base)?;
    loop {
        if at.next_offset > offset {
            // The batch ending at `next_offset` holds `offset`: it starts at the mark's position.
            let mark = at.last_batch.map_or(0, |m| m.position);
            return Ok((base, mark, batch_base(&path, mark)?));
        }
        if at.next_offset == offset {
            return Ok((base, at.position, offset));
        }
        let options = TailOptions {
            upto: None,
            max_chunk_bytes: 1, // one batch per read: the batch holding `offset` is the last one read
            ..TailOptions::default()
        };
        match read_tail(&at, &options)? {
            TailRead::Appended { chunk, next } if !chunk.is_empty() => at = next,
            TailRead::Appended { .. } => return Ok((base, at.position, at.next_offset)),
            TailRead::Corrupt(e) => return Err(e.into()),
            other => {
                return Err(Error::Diverged {
                    partition: view.dir.display().to_string(),
                    segment_base: base,
                    position: at.position,
                    reason: format!("changed while the truncation point was looked for: {other:?}"),
                })
            }
        }
    }
}

/// The base offset of the batch at `position` of `path` (its first 8 bytes).
fn batch_base(path: &std::path::Path, position: u64) -> Result<i64> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |e| Error::from(segment_format::Error::io(path, e));
    let mut file = std::fs::File::open(path).map_err(io)?;
    file.seek(SeekFrom::Start(position)).map_err(io)?;
    let mut head = [0u8; 8];
    file.read_exact(&mut head).map_err(io)?;
    Ok(i64::from_be_bytes(head))
}

#[cfg(test)]
#[path = "diverge_tests.rs"]
mod tests;
