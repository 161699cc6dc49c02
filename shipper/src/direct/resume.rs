//! Where a session resumes a partition when the source no longer holds the segment the applier's position names
//! as it was: the broker's cleaner rewrote or merged it while the link was down or no shipper ran.
//!
//! Why this is not an error: a Kafka follower in the same place simply fetches from its end offset out of whatever
//! segment now holds it. The mirror does the equivalent at segment granularity: the source segment `S` that now
//! covers the mirror's position (`S.base ≤ base < S`'s successor's base, `S` sealed, since the cleaner never touches
//! the active segment) replaces every mirror segment in `[S.base, successor)`, the unsealed one being appended to
//! included, and the tail continues at byte 0 of the successor. The applier installs such a replacement like any
//! other, ending sealed at the end of `S` (`applier::tail::replace`, "The segment being appended to").
//!
//! The cases, for a position `(base, position)`:
//! - the file of `base` is there and the position is a batch boundary of it: resume there ([`resume_at`]), as
//!   always; with the mirror's layout saying `base` is sealed at `position` but the file now being another size,
//!   the cleaner rewrote it: continue at its successor, and the rewrite goes as a replacement (the layout is in
//!   the feed's memory);
//! - the file is there but not what the mirror holds up to `position` (not a batch boundary, shorter), it is
//!   sealed and it bears the cleaner's trace (offsets of its range no batch holds, [`cleaned`]): the cleaner
//!   rewrote the segment the mirror was appending to (alone, keeping its base): covered by it; without the trace
//!   nothing explains the position (beyond the end or inside a batch of bytes the cleaner never changed): refused;
//! - the file is gone and a sealed source segment covers `base`: covered by it (a merge);
//! - the file is gone and the source's first segment lies above `base`: retention ([`log_start::resume_or_skip`]);
//! - anything else stays a refusal naming the file.
//!
//! What a covering replacement needs: the mirror's segments in `[S.base, successor)`. The applier's MirrorLayout
//! (feature bit 7) lists them; without it the feed knows only what this process shipped, and a range whose first
//! segment it does not know stays today's refusal. Records the mirror held and the cleaner removed are gone from
//! the mirror too, as on any replica of a compacted topic.

use std::collections::BTreeMap;

use super::log_start::{self, Track};
use super::replace::Fingerprint;
use super::{log_path, name, resume_at, TailPartition};
use crate::error::{Error, Result};
use crate::source::growing::TailPosition;
use crate::source::read::{read_partition, PartitionRead, PartitionView};

#[cfg(test)]
#[path = "resume_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "resume_session_tests.rs"]
mod session_tests;

/// A partition positioned for a session.
pub(super) struct Resumed {
    pub at: Option<TailPosition>,
    pub track: Track,
    /// The feed's memory of the mirror's sealed versions (see `replace`).
    pub sealed: BTreeMap<i64, Fingerprint>,
    /// The mirror's unsealed segment a replacement must cover before the tail goes on.
    pub awaits: Option<i64>,
}

impl Resumed {
    /// A partition the applier holds nothing of.
    pub(super) fn fresh(sealed: BTreeMap<i64, Fingerprint>) -> Resumed {
        Resumed {
            at: None,
            track: Track::default(),
            sealed,
            awaits: None,
        }
    }
}

/// Positions a partition the applier holds up to byte `position` of segment `base` (see the module doc). `sealed`
/// is the feed's memory of the mirror's sealed segments; `layout_known`: it comes from the applier's MirrorLayout
/// (and so also says whether `base` itself is sealed).
pub(super) fn resume(
    target: &TailPartition,
    base: i64,
    position: u64,
    sealed: BTreeMap<i64, Fingerprint>,
    layout_known: bool,
) -> Result<Resumed> {
    let mirror_sealed = layout_known && sealed.get(&base).is_some_and(|f| f.size == position);
    let path = log_path(&target.dir, base);
    let view = || -> Result<Option<PartitionView>> {
        Ok(match read_partition(&target.dir)? {
            PartitionRead::View(view) => Some(view),
            PartitionRead::Refused(_) => None,
        })
    };
    if path.exists() {
        if mirror_sealed && std::fs::metadata(&path).is_ok_and(|m| m.len() != position) {
            // Sealed on the mirror, rewritten at the source: the replacement follows from the memory.
            if let Some(view) = view()? {
                if let Some(at) = successor(&view, base)? {
                    return Ok(Resumed {
                        at: Some(at),
                        ..Resumed::fresh(sealed)
                    });
                }
            }
        }
        return match resume_at(target, base, position) {
            Ok(at) => Ok(Resumed {
                at: Some(at),
                ..Resumed::fresh(sealed)
            }),
            Err(e @ Error::ResumeInvalid { .. }) => match view()? {
                // Not the bytes the mirror holds, sealed, and bearing the cleaner's trace: the cleaner rewrote the
                // segment being appended to. Without the trace the position is impossible (beyond the end, inside
                // a batch of the bytes the mirror copied): refused, not skipped.
                Some(view) if covering(&view, base).is_some_and(|s| s == base) => match next_base(&view, base) {
                    Some(next) if cleaned(&path, base, next) => {
                        cover(target, &view, base, base, position, sealed, mirror_sealed)
                    }
                    _ => Err(Error::ResumeInvalid {
                        partition: name(&target.partition),
                        segment_base: base,
                        position,
                        reason: format!(
                            "{e}; and the cleaner did not rewrite it (its batches hold every offset from {base} to \
                             the next segment's base): the position is not one the mirror can hold"
                        ),
                    }),
                },
                _ => Err(e),
            },
            Err(e) => Err(e),
        };
    }
    if let Some(view) = view()? {
        if let Some(s) = covering(&view, base) {
            return cover(target, &view, s, base, position, sealed, mirror_sealed);
        }
    }
    let (at, track) = log_start::resume_or_skip(target, base, position)?;
    Ok(Resumed {
        at,
        track,
        ..Resumed::fresh(sealed)
    })
}

/// The base of the segment after the sealed source segment at `base`.
fn next_base(view: &PartitionView, base: i64) -> Option<i64> {
    view.segments
        .iter()
        .find(|s| s.base_offset() == base)
        .and_then(|s| s.next_base)
}

/// Whether the sealed source segment at `path` (offsets `[base, next)`) bears the trace of the broker's cleaner:
/// an offset of its range no batch holds (a batch removed whole, before the first or after the last one), or a v2
/// batch holding fewer records than its offset range (records removed from inside it; the cleaner keeps a
/// batch's base offset and last offset delta). Why: only a rewrite explains a mirror position that is not a
/// batch boundary of the source's file or lies beyond its end, and a segment the cleaner never touched (a topic
/// with `cleanup.policy=delete`, a segment with nothing to clean) holds every offset of its range, batch after
/// batch. Legacy batches, or a file that does not scan, cannot tell: taken as rewritten (the replacement then
/// reads and checks it). Bounded memory: the file is scanned chunk by chunk.
fn cleaned(path: &std::path::Path, base: i64, next: i64) -> bool {
    let Ok(mut log) = segment_format::log::LogFile::open(path) else {
        return true;
    };
    let mut expected = base;
    let mut trace = false;
    let scanned = log.scan(|frame| {
        let info = &frame.info;
        let dense = info.magic >= 2
            && info.base_offset == expected
            && i64::from(info.records_count) == info.last_offset - info.base_offset + 1;
        if !dense {
            trace = true;
            return std::ops::ControlFlow::Break(());
        }
        expected = info.last_offset + 1;
        std::ops::ControlFlow::Continue(())
    });
    match scanned {
        Ok(_) => trace || expected != next,
        Err(_) => true,
    }
}

/// The base of the sealed source segment whose offset range holds `base`.
pub(super) fn covering(view: &PartitionView, base: i64) -> Option<i64> {
    view.segments
        .iter()
        .find(|s| s.base_offset() <= base && s.next_base.is_some_and(|n| n > base))
        .map(|s| s.base_offset())
}

/// Byte 0 of the segment after the one at `base` in `view` (`None`: none, or deleted since the listing).
pub(super) fn successor(view: &PartitionView, base: i64) -> Result<Option<TailPosition>> {
    let next = view
        .segments
        .iter()
        .find(|s| s.base_offset() == base)
        .and_then(|s| s.next_base)
        .and_then(|nb| view.segments.iter().find(|s| s.base_offset() == nb));
    match next {
        Some(next) => log_start::start_at(&next.files.log, next.base_offset()),
        None => Ok(None),
    }
}

/// The mirror's segment `base` (held up to `position`) lies inside the sealed source segment at `s`: continue at
/// its successor, the replacement of the mirror's segments in its range first.
pub(super) fn cover(
    target: &TailPartition,
    view: &PartitionView,
    s: i64,
    base: i64,
    position: u64,
    mut sealed: BTreeMap<i64, Fingerprint>,
    mirror_sealed: bool,
) -> Result<Resumed> {
    let refuse = |reason: String| Error::ResumeInvalid {
        partition: name(&target.partition),
        segment_base: base,
        position,
        reason,
    };
    if s != base && !sealed.contains_key(&s) {
        return Err(refuse(format!(
            "the source merged it into segment {s}, and which mirror segments that replaces is unknown (an \
             applier without the MirrorLayout feature)"
        )));
    }
    let Some(at) = successor(view, s)? else {
        return Err(refuse(format!(
            "the source merged it into segment {s}, whose successor changed while resuming; retried at the next \
             session"
        )));
    };
    let awaits = if mirror_sealed {
        None
    } else {
        sealed.insert(
            base,
            Fingerprint {
                inode: None,
                size: position,
                unsealed: true,
            },
        );
        Some(base)
    };
    tracing::warn!(partition = %name(&target.partition), segment_base = base, position, covered_by = s,
        next = at.base_offset, "the source's cleaner rewrote the segment the mirror was appending to: the mirror's \
        segments from {s} are replaced by the source's segment {s}, and the tail continues at {}", at.base_offset);
    Ok(Resumed {
        at: Some(at),
        track: Track::default(),
        sealed,
        awaits,
    })
}
