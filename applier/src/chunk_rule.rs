//! The rule a chunk of a growing segment must pass before any of its bytes is written, on both delivery paths: a
//! chunk frame of the direct link (`crate::direct`, appended as it arrives) and a chunk object of a bucket version
//! (`crate::install::chunks`, appended to the staged `.log`). A compacted replacement of sealed segments the
//! direct link sends whole (`crate::direct`'s replace) passes it too, bounded above by the next segment's base.
//!
//! Why one rule: a chunk grows a segment no whole-file digest vouches for yet, so each batch is checked on its own
//! and a chunk accepted by one path must not be refused by the other. The rule, batch by batch in file order:
//! - the CRC stored in the batch matches its bytes;
//! - a legacy (magic 0 or 1) frame only where the path takes them ([`LegacyFrames`]): the direct link tails v2
//!   batches only, a bucket version may hold a topic's older frames;
//! - offsets increase: the first batch's base offset at or above the floor the caller gives (the offset after the
//!   last durable batch, or the segment base), every later one above the previous batch's last offset;
//! - a batch's last offset is not below its base offset;
//!
//! and for the chunk as a whole ([`ChunkRule::finish`]): it ends exactly on a batch boundary and holds a batch.
//!
//! Only the checks live here: how the bytes are scanned (from memory, or from a file with bounded memory) and how
//! a refusal is worded (a peer's `BadBatch`, a bucket's `InvalidManifest` naming the chunk's key) stay with each
//! path, so both keep the errors they gave before.

use segment_format::log::Frame;

/// Whether a chunk may hold legacy (magic 0 or 1) frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegacyFrames {
    /// Refused: only v2 batches are appended (the direct link).
    Refuse,
    /// Taken as any batch (a bucket version of a topic that still holds older frames).
    Accept,
}

/// Where the first batch of a chunk may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Floor {
    /// Exactly after a durable batch: its base offset at least this (the offset after that batch).
    After(i64),
    /// Anywhere in a new segment: its base offset at least the segment's base.
    SegmentBase(i64),
}

/// Why a batch breaks the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchDefect {
    /// The stored CRC does not match the bytes.
    Crc { stored: u32, computed: u32 },
    /// A legacy frame where [`LegacyFrames::Refuse`].
    Legacy { magic: i8 },
    /// The base offset is below the offset after the previous batch (or after the durable end).
    BaseBelowExpected { base: i64, last: i64, expected: i64 },
    /// The first batch of a new segment starts below the segment's base.
    BaseBelowSegment { base: i64, last: i64, segment_base: i64 },
    /// The last offset is below the base offset.
    LastBelowBase { base: i64, last: i64 },
}

/// Why a chunk as a whole breaks the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkDefect {
    /// The batches end at `end`, not at the chunk's end.
    NotOnBoundary { end: u64 },
    /// The chunk holds no batch.
    NoBatch,
}

/// The rule applied to one chunk, fed its batches in order.
#[derive(Debug, Clone)]
pub(crate) struct ChunkRule {
    legacy: LegacyFrames,
    floor: Floor,
    /// The offset after the last batch accepted (saturating); `None` before the first.
    next: Option<i64>,
    /// The last batch's last offset; `None` before the first.
    last: Option<i64>,
}

impl ChunkRule {
    pub(crate) fn new(floor: Floor, legacy: LegacyFrames) -> ChunkRule {
        ChunkRule {
            legacy,
            floor,
            next: None,
            last: None,
        }
    }

    /// The lowest base offset the next batch may have.
    pub(crate) fn next_floor(&self) -> i64 {
        match (self.next, self.floor) {
            (Some(next), _) => next,
            (None, Floor::After(floor) | Floor::SegmentBase(floor)) => floor,
        }
    }

    /// Checks the next batch of the chunk; an accepted batch moves the floor past its last offset.
    pub(crate) fn accept(&mut self, frame: &Frame<'_>) -> Result<(), BatchDefect> {
        let info = &frame.info;
        if !frame.crc_matches() {
            return Err(BatchDefect::Crc {
                stored: frame.stored_crc,
                computed: frame.computed_crc,
            });
        }
        if self.legacy == LegacyFrames::Refuse && info.magic < 2 {
            return Err(BatchDefect::Legacy { magic: info.magic });
        }
        let (base, last) = (info.base_offset, info.last_offset);
        match (self.next, self.floor) {
            (Some(expected), _) | (None, Floor::After(expected)) if base < expected => {
                return Err(BatchDefect::BaseBelowExpected { base, last, expected })
            }
            (None, Floor::SegmentBase(segment_base)) if base < segment_base => {
                return Err(BatchDefect::BaseBelowSegment {
                    base,
                    last,
                    segment_base,
                })
            }
            _ => {}
        }
        if last < base {
            return Err(BatchDefect::LastBelowBase { base, last });
        }
        self.next = Some(last.saturating_add(1));
        self.last = Some(last);
        Ok(())
    }

    /// The chunk is over: its batches ended at `batches_end`, the chunk at `chunk_end`. Returns the last batch's
    /// last offset.
    pub(crate) fn finish(&self, batches_end: u64, chunk_end: u64) -> Result<i64, ChunkDefect> {
        if batches_end != chunk_end {
            return Err(ChunkDefect::NotOnBoundary { end: batches_end });
        }
        self.last.ok_or(ChunkDefect::NoBatch)
    }
}

#[cfg(test)]
mod tests;
