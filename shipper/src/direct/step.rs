//! One partition's next step while streaming: what the feed sends next of it, if anything, computed on a blocking
//! thread from a copy of its state ([`super::TailFeed`]'s cancel safety rests on that copy).
//!
//! A step goes in this order, each stage able to end it with an item or with nothing to send yet:
//! 1. a pending Truncate, or a stopped partition ([`super::diverge`]);
//! 2. the listing, taken before the read so that a segment sealed now ends where the read sees it end, and with it
//!    the log start moved by retention ([`super::log_start`]);
//! 3. where the tail stands: not started yet, or past segments retention deleted;
//! 4. the cleaner's rewrites of sealed segments, sent before anything of the next one ([`super::replace`]);
//! 5. the read at the position ([`read_tail_into`]): a chunk, a seal when the segment rolled, or the file changed
//!    under the tail (restarted, waited for, covered by the cleaner's rewrite, or a divergence).

use std::ops::ControlFlow;
use std::path::Path;

use bytes::Bytes;
use segmirror_transport::direct::payload::{Chunk, ChunkCrcs, PartitionRef, TruncateMode};
use segmirror_transport::direct::session::FeedItem;

use super::{log_start, name, rediscover, replace, resume, seal, PartState};
use crate::error::{Error, Result};
use crate::source::growing::{self, read_tail_into, ChunkContent, TailOptions, TailPosition, TailRead};
use crate::source::read::{read_partition, PartitionRead, PartitionView, SegmentView};

/// One partition's next step: its new state and the item, if any.
pub(super) fn step(mut part: PartState, options: &TailOptions) -> Result<(PartState, Option<FeedItem>)> {
    let item = next(&mut part, options)?;
    Ok((part, item))
}

/// The stages of a step in order (see the module doc); `part` is left as the step leaves it.
fn next(part: &mut PartState, options: &TailOptions) -> Result<Option<FeedItem>> {
    if let Some(truncate) = part.truncate.take() {
        // Before anything else of the partition; in high-watermark mode it is the last thing of it.
        part.stopped = truncate.mode == TruncateMode::HighWatermark;
        return Ok(Some(FeedItem::Truncate(truncate)));
    }
    if part.stopped {
        return Ok(None);
    }
    let dir = part.target.dir.clone();
    // A partition not started whose directory does not exist yet (the broker has not created it: a topic being
    // created while the feed starts) is waited for, not taken as deleted. One that was shipped from and is gone
    // was deleted (`rediscover`); with rediscovery a directory gone before its first step is dropped by the
    // listing too.
    if part.at.is_none() && rediscover::is_gone(&dir) {
        return Ok(None);
    }
    let (view, swapping) = list(&dir)?;
    if swapping {
        tracing::debug!(dir = %dir.display(), "a segment swap is in progress; retention and rewrites wait for it");
    } else if let Some(item) = log_start::moved(part, &view) {
        if let FeedItem::LogStart(l) = &item {
            replace::forget_below(&mut part.sealed, l.log_start_offset);
        }
        return Ok(Some(item));
    }
    let Some(at) = position(part, &view, swapping)? else {
        return Ok(None);
    };
    let at = match rewrites_first(part, &view, at, swapping, options)? {
        ControlFlow::Break(item) => return Ok(item),
        ControlFlow::Continue(at) => at,
    };
    read_on(part, &view, at, swapping, options)
}

/// The partition's listing, and whether the cleaner is swapping segments in.
fn list(dir: &Path) -> Result<(PartitionView, bool)> {
    // A swap that began before the listing is seen here even if it ends before the check after it.
    let swapping_before = replace::swap_in_progress(dir)?;
    // Listed before the read: a segment sealed now ends where the read sees it end.
    let view = match read_partition(dir)? {
        PartitionRead::View(view) => view,
        PartitionRead::Refused(findings) => {
            return Err(Error::InvalidSetting {
                setting: "tail partition",
                reason: format!("{} is not shippable: {findings:?}", dir.display()),
            })
        }
    };
    // While the cleaner swaps segments in, the listing misses the old ones and the new ones alike: it says nothing
    // about retention or rewrites until the swap is done. Checked before and after the listing: a listing taken
    // inside a swap that ended before the check after it still misses segments (a cleaner merging the first
    // segment away for a moment looked like retention, and a LogStart above the first segment reached the mirror).
    let swapping = swapping_before || replace::swap_in_progress(dir)?;
    Ok((view, swapping))
}

/// Where the tail reads next: the first segment when not started, the first one retention left when the segment
/// it was at is gone; `None` (nothing to read yet) when the listing has no segment or it was deleted since.
fn position(part: &mut PartState, view: &PartitionView, swapping: bool) -> Result<Option<TailPosition>> {
    let at = match part.at.take() {
        Some(at) => at,
        None => match view.segments.first() {
            None => return Ok(None),
            Some(first) => match log_start::start_at(&first.files.log, first.base_offset())? {
                Some(at) => at,
                None => return Ok(None), // deleted since the listing: the next one shows what follows
            },
        },
    };
    match log_start::skip_deleted(view, at.base_offset, at.position).filter(|_| !swapping) {
        Some(first) => match log_start::start_at(&first.files.log, first.base_offset())? {
            Some(fresh) => Ok(Some(fresh)),
            None => {
                part.at = Some(at);
                Ok(None)
            }
        },
        None => Ok(Some(at)),
    }
}

/// The cleaner's rewrites before the tail: the next piece of a replacement, or the wait for the replacement
/// covering the mirror's merged-away unsealed segment (`Break`, the step's item); otherwise `Continue` at `at`.
fn rewrites_first(
    part: &mut PartState,
    view: &PartitionView,
    at: TailPosition,
    swapping: bool,
    options: &TailOptions,
) -> Result<ControlFlow<Option<FeedItem>, TailPosition>> {
    // The replacement covering the mirror's merged-away unsealed segment goes before anything of the next segment.
    part.awaits = part.awaits.filter(|b| part.sealed.get(b).is_some_and(|f| f.unsealed));
    if swapping {
        // Nothing below; the tail of the active segment is not the cleaner's business and goes on.
    } else if let Some(item) = replace::next_piece(
        &part.target.partition,
        view,
        at.base_offset,
        &mut part.sealed,
        &mut part.replacing,
        options.max_chunk_bytes,
    )? {
        part.at = Some(at);
        return Ok(ControlFlow::Break(Some(item)));
    }
    if part.awaits.is_none() {
        return Ok(ControlFlow::Continue(at));
    }
    // The tail waits at byte 0 of the segment after the covering one, and nothing of it is shipped yet. When
    // the cleaner merges that segment into the covering one too, the wait moves on to the new successor: the
    // covering segment now holds the feed's position, and `replace::detect` passes over a segment holding it,
    // so without the move its replacement was never found and the partition stalled (seen in e2e_tail_processes).
    let mut at = at;
    if at.position == 0 && !swapping {
        if let Some(s) = resume::covering(view, at.base_offset).filter(|s| *s < at.base_offset) {
            if let Some(next) = resume::successor(view, s)? {
                tracing::info!(partition = %name(&part.target.partition), from = at.base_offset,
                    covered_by = s, to = next.base_offset,
                    "the segment the tail waits at was merged into the covering segment too: waiting at its successor");
                at = next;
            }
        }
    }
    part.at = Some(at);
    Ok(ControlFlow::Break(None))
}

/// The tail read at `at`, and what its outcome sends: the bytes appended, the seal of a rolled segment, or (the
/// file changed under the tail) nothing while it is restarted or covered, else a divergence.
fn read_on(
    part: &mut PartState,
    view: &PartitionView,
    at: TailPosition,
    swapping: bool,
    options: &TailOptions,
) -> Result<Option<FeedItem>> {
    let segment = view.segments.iter().find(|s| s.base_offset() == at.base_offset);
    let next_segment = segment
        .and_then(|s| s.next_base)
        .and_then(|nb| view.segments.iter().find(|s| s.base_offset() == nb));
    let mut content = ChunkContent::default();
    match read_tail_into(&at, options, &mut content)? {
        TailRead::Appended { chunk, next } if !chunk.is_empty() => {
            ship_chunk(part, at, &chunk, next, content).map(Some)
        }
        TailRead::Appended { chunk, .. } => match (segment, next_segment) {
            (Some(segment), Some(next_seg)) if chunk.pending == 0 => seal_rolled(part, at, segment, next_seg),
            _ => {
                part.at = Some(at);
                Ok(None)
            }
        },
        // Nothing of it shipped yet: retention (or a rewrite) raced the listing; the next step starts it afresh.
        TailRead::Truncated { .. } | TailRead::Replaced { .. } if at.position == 0 => {
            let fresh = match log_start::start_at(&at.path, at.base_offset)? {
                Some(fresh) => Some(fresh),
                // Merged into an earlier sealed segment by the cleaner: nothing of it was sent, so the tail goes on
                // after the segment that holds it, whose replacement follows from the memory.
                None if !swapping => match resume::covering(view, at.base_offset) {
                    Some(s) if s < at.base_offset => resume::successor(view, s)?,
                    _ => None,
                },
                None => None,
            };
            part.at = Some(fresh.unwrap_or(at));
            Ok(None)
        }
        // The segment changed under the tail while the cleaner swaps files in: the swap's end shows what it is.
        TailRead::Truncated { .. } | TailRead::Replaced { .. } | TailRead::Changed { .. } if swapping => {
            part.at = Some(at);
            Ok(None)
        }
        // A segment the source rolled and its cleaner rewrote or merged before the tail reached its end: covered by
        // the sealed segment that holds it now, as at a resume (`resume`).
        TailRead::Truncated { .. } | TailRead::Replaced { .. } | TailRead::Changed { .. }
            if resume::covering(view, at.base_offset).is_some() =>
        {
            cover_rewritten(part, view, at).map(|()| None)
        }
        TailRead::Truncated { len, .. } => Err(diverged(
            &part.target.partition,
            &at,
            format!("the file is {len} bytes now (truncated)"),
        )),
        TailRead::Replaced { reason, .. } => Err(diverged(&part.target.partition, &at, format!("replaced: {reason}"))),
        TailRead::Changed { reason, .. } => Err(diverged(&part.target.partition, &at, reason)),
        TailRead::Corrupt(e) => Err(e.into()),
    }
}

/// The chunk of the bytes appended since `at`, which the tail read checked batch by batch.
fn ship_chunk(
    part: &mut PartState,
    at: TailPosition,
    chunk: &growing::Chunk,
    next: TailPosition,
    content: ChunkContent,
) -> Result<FeedItem> {
    // The bytes the scan checked, batch by batch, are the ones shipped: nothing to read or hash again.
    let bytes = content.bytes;
    if bytes.len() as u64 != chunk.len() {
        return Err(diverged(
            &part.target.partition,
            &at,
            format!(
                "the tail read handed over {} bytes for a chunk of {}",
                bytes.len(),
                chunk.len()
            ),
        ));
    }
    part.running.advance(&at, &bytes, &content.batches)?;
    let item = FeedItem::Chunk(Chunk {
        partition: part.target.partition.clone(),
        segment_base: at.base_offset,
        position: chunk.from,
        bytes: Bytes::from(bytes),
        crcs: ChunkCrcs::of_bytes(chunk.crc32c),
    });
    part.at = Some(next);
    Ok(item)
}

/// The seal of `segment`, rolled (`next_seg` follows it) and read to its end; the tail moves to `next_seg`'s byte 0.
fn seal_rolled(
    part: &mut PartState,
    at: TailPosition,
    segment: &SegmentView,
    next_seg: &SegmentView,
) -> Result<Option<FeedItem>> {
    let running = part.running.finish_for(&at)?;
    #[cfg(test)]
    {
        part.running_seals += u64::from(running.is_some());
    }
    // The listing named the segment's files; the cleaner (or retention) may delete them before they are
    // read here. Not an error of the source: the next step lists again and finds what replaced them.
    let seal = match seal::seal(&part.target.partition, &at, segment, running) {
        Ok(seal) => seal,
        Err(e) if e.is_source_changed() => {
            tracing::info!(partition = %name(&part.target.partition), segment = at.base_offset,
                "a file of the segment changed while it was sealed, listing again: {e}");
            part.at = Some(at);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    part.sealed
        .insert(at.base_offset, replace::Fingerprint::of(at.inode, at.position));
    part.at = Some(TailPosition::start(&next_seg.files.log, next_seg.base_offset())?);
    Ok(Some(FeedItem::Seal(seal)))
}

/// A segment changed under the tail that a sealed segment of the listing covers now (the cleaner rewrote or merged
/// it after the roll): continued as at a resume ([`resume::cover`]), else a divergence.
fn cover_rewritten(part: &mut PartState, view: &PartitionView, at: TailPosition) -> Result<()> {
    let s = resume::covering(view, at.base_offset).unwrap_or(at.base_offset);
    match resume::cover(
        &part.target,
        view,
        s,
        at.base_offset,
        at.position,
        part.sealed.clone(),
        false,
    ) {
        Ok(r) => {
            part.at = r.at.or(Some(at));
            part.sealed = r.sealed;
            part.awaits = r.awaits;
            Ok(())
        }
        Err(e) => Err(diverged(
            &part.target.partition,
            &at,
            format!("rewritten by the cleaner after the roll, and not covered: {e}"),
        )),
    }
}

/// The feed's refusal of bytes at `at` that are not the ones shipped (or not what the position says).
fn diverged(partition: &PartitionRef, at: &TailPosition, reason: String) -> Error {
    Error::Diverged {
        partition: name(partition),
        segment_base: at.base_offset,
        position: at.position,
        reason,
    }
}
