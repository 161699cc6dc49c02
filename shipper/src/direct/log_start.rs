//! Retention and `DeleteRecords` as the feed sees them: the source's log start moved up, so the records before it
//! are gone, and the applier is told with a [`LogStart`] to delete them on the mirror too
//! (`applier::tail::retention`) and to give a promoted target the same log start.
//!
//! What is sent is the log start a broker would load: the larger of the source log dir's
//! `log-start-offset-checkpoint` entry for the partition and the base offset of its first segment (taken from the
//! same listing as the step's read). Retention deletes whole segments, so the first segment's base is always a
//! boundary below which the source holds nothing; `DeleteRecords` (and retention by time or size past a segment
//! the broker has not deleted yet) moves the log start *inside* the first segment and deletes no file: only the
//! checkpoint tells it. Both are needed: a promoted target whose log start is the first segment's base serves the
//! records `DeleteRecords` erased.
//!
//! # The checkpoint lags
//! The broker writes `log-start-offset-checkpoint` every `log.flush.start.offset.checkpoint.interval.ms` (60 s by
//! default) and at a clean shutdown, not at each `DeleteRecords`: a log start moved inside a segment reaches the
//! mirror up to that interval (plus [`POLL_INTERVAL`](super::POLL_INTERVAL)) later. A failover inside that window
//! promotes the previous log start. The file is read again only when its modification time or length changed, so
//! a step costs one `stat` of it.
//!
//! # Never ahead of what was shipped
//! A log start inside the first segment is sent only once the feed shipped up to it (its next offset is at or
//! above it); until then the first segment's base is sent. Frames reach the applier in order, so the applier
//! never sees an honest log start above what it installed, except where retention deleted whole segments the
//! mirror had not got yet (the first segment's base, followed by that segment's first chunk): that is the one
//! case the applier holds such a value for (`applier::tail::retention`, "Beyond the installed end").
//!
//! When: whenever it differs from the last one this feed sent in this session, and is above 0 (a log start of 0
//! deletes nothing, so a partition that never lost a record never carries the frame). After [`ChunkFeed::seek`]
//! nothing counts as sent, so every session tells it once: the applier takes it idempotently, and an applier that
//! missed one (a cut before it was applied) learns it again.
//!
//! [`ChunkFeed::seek`]: segmirror_transport::direct::session::ChunkFeed::seek

use segmirror_transport::direct::payload::LogStart;
use segmirror_transport::direct::session::FeedItem;

use std::path::Path;
use std::time::SystemTime;

use segment_format::checkpoint::OffsetCheckpoint;
use segment_format::dir::RootCheckpoint;

use crate::error::{Error, Result};
use crate::source::read::{read_partition, PartitionRead};

use super::{log_path, name, resume_at, PartState, TailPartition};
use crate::source::growing::TailPosition;
use crate::source::read::{PartitionView, SegmentView};

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
    /// The last listing saw a first segment the one before did not: the next listing confirms it, so the feed
    /// steps the partition again soon ([`super::wake`]).
    unconfirmed: bool,
    /// The source log dir's `log-start-offset-checkpoint` as last read.
    checkpoint: CheckpointRead,
}

/// The `log-start-offset-checkpoint` entry of one partition, with the file's stamp when it was read: read again only
/// when the stamp changes (the broker replaces the file whole, by a rename: a new inode each time).
#[derive(Debug, Clone, Default)]
struct CheckpointRead {
    /// Inode (0 off Unix), modification time and length of the file read; `None`: not read yet, or the file was
    /// missing.
    stamp: Option<(u64, SystemTime, u64)>,
    /// The partition's entry (`None`: no entry, so the log start is the first segment's base).
    entry: Option<i64>,
}

impl CheckpointRead {
    /// The partition's entry in the checkpoint of the log dir holding `partition_dir`, reading the file again if it
    /// changed. A file missing or unreadable counts as no entry, as a broker reads it (logged at warn once per
    /// version of the file).
    fn entry(&mut self, partition_dir: &Path, topic: &str, partition: i32) -> Option<i64> {
        let path = partition_dir.parent()?.join(RootCheckpoint::LogStartOffset.file_name());
        let stamp = std::fs::metadata(&path)
            .ok()
            .and_then(|m| Some((inode(&m), m.modified().ok()?, m.len())));
        if stamp.is_none() {
            *self = CheckpointRead::default();
            return None;
        }
        if stamp != self.stamp {
            self.stamp = stamp;
            self.entry = match OffsetCheckpoint::read(&path) {
                Ok(c) => c.get(topic, partition),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring an unreadable log-start-offset-checkpoint");
                    None
                }
            };
        }
        self.entry
    }
}

fn inode(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0
    }
}

impl Track {
    /// Whether a move of the first segment waits for the next listing to confirm it.
    pub(super) fn unconfirmed(&self) -> bool {
        self.unconfirmed
    }

    /// A track whose previous listing saw `first`: the next step sends the LogStart `first` before anything else.
    pub(super) fn seen(first: i64) -> Track {
        Track {
            sent: None,
            seen: Some(first),
            unconfirmed: false,
            checkpoint: CheckpointRead::default(),
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
/// sent (module docs: the checkpoint's entry once the feed shipped up to it, else the first segment's base, and the
/// first segment's base only once the previous listing saw the same); updates the partition's [`Track`].
pub(super) fn moved(part: &mut PartState, view: &PartitionView) -> Option<FeedItem> {
    let (partition, track) = (&part.target.partition, &mut part.log_start);
    let at = part.at.as_ref();
    let first = view.segments.first()?.base_offset();
    let seen = track.seen.replace(first);
    track.unconfirmed = seen != Some(first);
    if track.unconfirmed {
        return None;
    }
    let checkpoint = track.checkpoint.entry(&view.dir, &partition.topic, partition.partition);
    let log_start = exact_or_first(first, checkpoint, at.map(|a| a.next_offset));
    if log_start <= 0 || track.sent.is_some_and(|sent| sent >= log_start) {
        return None;
    }
    track.sent = Some(log_start);
    tracing::info!(partition = %name(partition), log_start, first_segment = first,
        "the source's log start moved: sending LogStart");
    Some(FeedItem::LogStart(LogStart {
        partition: partition.clone(),
        log_start_offset: log_start,
    }))
}

/// The log start to tell (module docs): the checkpoint's entry `checkpoint` when it lies above the first segment's
/// base `first` and the feed's next offset `shipped` reached it, else `first`.
pub(super) fn exact_or_first(first: i64, checkpoint: Option<i64>, shipped: Option<i64>) -> i64 {
    match (checkpoint, shipped) {
        (Some(c), Some(shipped)) if c > first && c <= shipped => c,
        _ => first,
    }
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
