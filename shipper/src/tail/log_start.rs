//! Retention as the feed sees it: the source's first segment moved up, so the segments before it are gone, and
//! the applier is told with a [`LogStart`] to delete them on the mirror too (`applier::tail::retention`).
//!
//! What is sent is the base offset of the source's first segment, taken from the same listing as the step's read:
//! a broker deletes whole segments, so that is exactly the boundary below which the source holds nothing. (A log
//! start moved *inside* the first segment by `DeleteRecords` deletes no file and is not sent.)
//!
//! When: whenever it differs from the last one this feed sent in this session, and is above 0 (a log start of 0
//! deletes nothing, so a partition that never lost a segment never carries the frame). After [`ChunkFeed::seek`]
//! nothing counts as sent, so every session tells it once: the applier takes it idempotently, and an applier that
//! missed one (a cut before it was applied) learns it again.
//!
//! [`ChunkFeed::seek`]: segmirror_transport::direct::session::ChunkFeed::seek

use segmirror_transport::direct::payload::{LogStart, PartitionRef};
use segmirror_transport::direct::session::FeedItem;

use std::path::Path;

use crate::error::{Error, Result};
use crate::source::read::{read_partition, PartitionRead};

use super::{log_path, name, resume_at, TailPartition};
use crate::source::read::{PartitionView, SegmentView};
use crate::source::tail::TailPosition;

#[cfg(test)]
#[path = "log_start_tests.rs"]
mod tests;

/// What the feed knows of a partition's log start.
#[derive(Debug, Clone, Default)]
pub(super) struct Track {
    /// Last sent in this session.
    pub sent: Option<i64>,
    /// Seen by the previous listing: a move is sent only when two consecutive listings agree, since a listing
    /// taken while the broker swapped segments in can miss segments that are still there.
    seen: Option<i64>,
}

impl Track {
    /// A track whose previous listing saw `first`: the next step sends the LogStart `first` before anything else.
    pub(super) fn seen(first: i64) -> Track {
        Track {
            sent: None,
            seen: Some(first),
        }
    }
}

/// Where a session resumes the partition the applier acknowledged up to byte `position` of segment `base`: there
/// ([`resume_at`]), or, when retention deleted that segment at the source (its file is gone and the source's first
/// segment `B` starts above it, so every record of it is deleted at the source too), at byte 0 of `B`, with the
/// LogStart `B` sent first: the applier drops its unsealed copy of the segment on it (`applier::tail::retention`),
/// as a follower follows the leader's log start. A segment gone without a later first segment to explain it
/// (a truncation, not retention) stays refused, as does a position that is not a batch boundary.
///
/// On a session that did not agree `FEATURE_LOG_START` the session drops the LogStart, and the applier refuses
/// the first chunk of `B` (its segment is not sealed): the refusal stays clear, on the applier's side.
pub(super) fn resume_or_skip(
    target: &TailPartition,
    base: i64,
    position: u64,
) -> Result<(Option<TailPosition>, Track)> {
    let path = log_path(&target.dir, base);
    if path.exists() {
        return Ok((Some(resume_at(target, base, position)?), Track::default()));
    }
    let first = match read_partition(&target.dir)? {
        PartitionRead::View(view) => view.segments.first().map(|s| (s.base_offset(), s.files.log.clone())),
        PartitionRead::Refused(_) => None,
    };
    let Some((first, first_log)) = first.filter(|(b, _)| *b > base) else {
        // Not retention: today's refusal, naming the missing file.
        return Err(resume_at(target, base, position)
            .err()
            .unwrap_or_else(|| Error::ResumeInvalid {
                partition: name(&target.partition),
                segment_base: base,
                position,
                reason: format!("{} no longer exists", path.display()),
            }));
    };
    tracing::warn!(partition = %name(&target.partition), segment_base = base, position, log_start = first,
        "the segment the mirror was appending to was deleted by the source's retention: the mirror loses the \
         offsets after its durable position up to {first} (deleted at the source too) and continues at {first}");
    Ok((start_at(&first_log, first)?, Track::seen(first)))
}

/// The LogStart to send before anything else of this step, if the source's log start moved since the last one
/// sent (and the previous listing saw the same); updates `track`.
pub(super) fn moved(partition: &PartitionRef, view: &PartitionView, track: &mut Track) -> Option<FeedItem> {
    let first = view.segments.first()?.base_offset();
    let seen = track.seen.replace(first);
    if first <= 0 || track.sent == Some(first) || seen != Some(first) {
        return None;
    }
    track.sent = Some(first);
    tracing::info!(partition = %name(partition), log_start = first,
        "the source's first segment moved (retention): sending LogStart");
    Some(FeedItem::LogStart(LogStart {
        partition: partition.clone(),
        log_start_offset: first,
    }))
}

/// The segment to start at instead of `base` when retention deleted it before any byte of it was shipped (the
/// feed lagged behind the source's retention): the source's first segment, if it lies beyond `base`. The applier
/// takes it as a retention gap after the previous segment's seal. A segment deleted *after* some of it was shipped
/// is not skipped: its seal can no longer be made, and the feed reports the divergence.
pub(super) fn skip_deleted(view: &PartitionView, base: i64, position: u64) -> Option<&SegmentView> {
    if position != 0 || view.segments.iter().any(|s| s.base_offset() == base) {
        return None;
    }
    view.segments.first().filter(|first| first.base_offset() > base)
}

/// A tail position at byte 0 of the segment at `path`, or `None` when retention deleted it since the listing.
pub(super) fn start_at(path: &Path, base: i64) -> Result<Option<TailPosition>> {
    match TailPosition::start(path, base) {
        Ok(at) => Ok(Some(at)),
        Err(segment_format::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}
