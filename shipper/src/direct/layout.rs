//! Where a new leader's shipper continues the mirror: the mirror's position translated into this broker's own
//! replica of the partition.
//!
//! Why: with a source of several brokers the mirror is written by whichever broker led the partition when each
//! byte was shipped. Replicas hold the same batches byte for byte, but each broker rolls its segments at its own
//! offsets (a follower appends what it fetched in whole fetches and rolls when its own segment is full), so the
//! mirror's active segment (base `D`, durable size `d`) usually is no file of this broker. What the replicas share
//! is offsets: the mirror ends at offset `O` (the offset after its last batch, from the applier's `ClaimResult`),
//! and this broker's replica holds the batch that starts at `O` at some byte `p` of some segment `S`. The shipper
//! then sends the bytes of `S` from `p` on addressed to the mirror's `D` from `d` on (the mirror's segment grows
//! with the same batches the source has, only cut elsewhere), and when `S` ends it sends a `Roll` of `D` (final
//! size `d` + the bytes shipped from `S`, next offset `S`'s successor's base); from `S`'s successor on, the mirror
//! follows this broker's layout exactly and ordinary seals apply.
//!
//! Nothing is guessed: the position is proven from the replica's bytes — the batch at `p` starts exactly at `O`,
//! and the batch before it (in `S`, or the last of `S`'s predecessor when `p` is 0) ends exactly at `O - 1`; when
//! the applier tells the CRC of the mirror's last batch, it must be that batch's CRC. A replica whose batches do
//! not line up with `O` has diverged from what the mirror holds ([`Error::Diverged`], naming both sides); it is
//! reported, never shipped. A replica that does not reach `O` yet is waited for; an `O` below the replica's first
//! segment is retention's case (the existing log-start path: the mirror's next segment starts at the log start).
//!
//! Blocking: it reads batch headers (61 bytes each, one seek per batch) of at most two segments.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use segment_format::batch::{read_frame_prefix, CRC_OFFSET, RECORD_BATCH_OVERHEAD};

use crate::error::{Error, Result};

/// Where the mirror stands for a partition (an applier's `ClaimResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorEnd {
    /// The mirror's active segment (`D`).
    pub segment_base: i64,
    /// Its durable size (`d`).
    pub position: u64,
    /// The offset after the mirror's last batch (`O`).
    pub end_offset: i64,
    /// The CRC of the mirror's last batch, when the applier tells it: the replica's batch ending at `O - 1` must
    /// carry the same.
    pub last_batch_crc: Option<u32>,
}

/// One segment of this broker's replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSegment {
    pub base_offset: i64,
    pub log: PathBuf,
}

/// How this broker continues the mirror.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// The mirror's active segment is this broker's segment `base` up to `position` (same base, same size): the
    /// ordinary tail continues it, and its seal is an ordinary seal.
    Aligned { base: i64, position: u64 },
    /// Ship this broker's segment `replica_base` from `replica_position` addressed to the mirror's segment
    /// `mirror_base` from `mirror_position` ([`Translation`]), until the replica's segment ends; then `Roll`.
    Translate(Translation),
    /// The batch at the mirror's end offset starts this broker's segment `next_base`, but the mirror's segment is
    /// not empty: `Roll` it now at its size (`final_size`, next offset `next_base`), then continue at
    /// (`next_base`, 0) in this broker's layout.
    RollFirst {
        mirror_base: i64,
        final_size: u64,
        next_base: i64,
    },
    /// This replica does not reach the mirror's end offset yet (it ends at `replica_end`): wait and look again.
    Wait { replica_end: i64 },
    /// The mirror's end offset is below this replica's first segment (retention deleted it here): the existing
    /// log-start path continues at `log_start`.
    BelowLogStart { log_start: i64 },
}

/// Replica bytes addressed to a mirror segment of another layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    pub mirror_base: i64,
    pub mirror_position: u64,
    pub replica_base: i64,
    pub replica_position: u64,
}

impl Translation {
    /// The mirror position of the replica byte at `replica_position` (at or after the start of the translation).
    pub fn mirror_position_of(&self, replica_position: u64) -> Option<u64> {
        replica_position
            .checked_sub(self.replica_position)
            .and_then(|shipped| self.mirror_position.checked_add(shipped))
    }

    /// The mirror segment's final size when the replica's segment ends at `replica_size` bytes.
    pub fn final_size(&self, replica_size: u64) -> Option<u64> {
        self.mirror_position_of(replica_size)
    }
}

/// What a batch's header tells about it (the fixed 61 bytes: the records need not be read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchHeader {
    base_offset: i64,
    last_offset_delta: i32,
    crc: u32,
    size: u64,
}

/// Where `lastOffsetDelta` sits in a v2 batch header (after the CRC and the attributes).
const LAST_OFFSET_DELTA_OFFSET: usize = CRC_OFFSET + 4 + 2;

impl BatchHeader {
    fn parse(buf: &[u8; RECORD_BATCH_OVERHEAD]) -> std::result::Result<BatchHeader, String> {
        let prefix = read_frame_prefix(buf).map_err(|e| format!("{e:?}"))?;
        if prefix.magic != 2 {
            return Err(format!("magic {} (only v2 batches are shipped)", prefix.magic));
        }
        let be4 = |at: usize| [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
        let last_offset_delta = i32::from_be_bytes(be4(LAST_OFFSET_DELTA_OFFSET));
        if last_offset_delta < 0 {
            return Err(format!("lastOffsetDelta {last_offset_delta}"));
        }
        Ok(BatchHeader {
            base_offset: prefix.base_offset,
            last_offset_delta,
            crc: u32::from_be_bytes(be4(CRC_OFFSET)),
            size: prefix.size_in_bytes(),
        })
    }

    fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }

    fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
}

/// What scanning one segment's batch headers for an offset found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// A batch starts at the offset, at this byte; `before`: the batch before it in this segment.
    Starts { position: u64, before: Option<BatchHeader> },
    /// The offset lies inside the batch at this byte (the batch starts below it).
    Inside { position: u64, header: BatchHeader },
    /// The segment's whole batches end before the offset: their size and the last one.
    Ends { size: u64, last: Option<BatchHeader> },
}

/// Scans `log`'s batch headers until the batch holding `offset`. An incomplete batch at the file's end (being
/// appended) ends the scan.
fn scan(partition: &str, base: i64, log: &Path, offset: i64) -> Result<Scan> {
    let mut file = File::open(log).map_err(|e| Error::io(log, e))?;
    let len = file.metadata().map_err(|e| Error::io(log, e))?.len();
    let mut position = 0u64;
    let mut before: Option<BatchHeader> = None;
    let mut buf = [0u8; RECORD_BATCH_OVERHEAD];
    while position + RECORD_BATCH_OVERHEAD as u64 <= len {
        file.seek(SeekFrom::Start(position)).map_err(|e| Error::io(log, e))?;
        file.read_exact(&mut buf).map_err(|e| Error::io(log, e))?;
        let header = BatchHeader::parse(&buf).map_err(|e| Error::Diverged {
            partition: partition.to_string(),
            segment_base: base,
            position,
            reason: format!("not a batch header at byte {position} of {}: {e}", log.display()),
        })?;
        let size = header.size;
        if position + size > len {
            break;
        }
        if header.base_offset == offset {
            return Ok(Scan::Starts { position, before });
        }
        if header.base_offset < offset && offset <= header.last_offset() {
            return Ok(Scan::Inside { position, header });
        }
        if header.base_offset > offset {
            // A gap at the offset (offsets removed here): the batch before it is the evidence.
            return Ok(Scan::Inside { position, header });
        }
        before = Some(header);
        position += size;
    }
    Ok(Scan::Ends {
        size: position,
        last: before,
    })
}

/// Where this broker's replica (`segments`, in offset order, the last the active one) continues the mirror at
/// `mirror` (see the module doc). `partition` names it in errors.
pub fn handover(partition: &str, segments: &[ReplicaSegment], mirror: MirrorEnd) -> Result<Handover> {
    let o = mirror.end_offset;
    let diverged = |segment_base: i64, position: u64, reason: String| Error::Diverged {
        partition: partition.to_string(),
        segment_base,
        position,
        reason: format!(
            "the mirror (segment {} at byte {}) ends at offset {o}, but this broker's replica {reason}",
            mirror.segment_base, mirror.position
        ),
    };
    let Some(first) = segments.first() else {
        return Ok(Handover::Wait { replica_end: 0 });
    };
    if o < first.base_offset {
        return Ok(Handover::BelowLogStart {
            log_start: first.base_offset,
        });
    }
    // The segment that holds O: the last with a base at or below it.
    let idx = segments.iter().rposition(|s| s.base_offset <= o).unwrap_or(0);
    let seg = &segments[idx];
    let is_last = idx + 1 == segments.len();
    // The batch that must end at O - 1, and where the one at O starts.
    let (base, position, before) = match scan(partition, seg.base_offset, &seg.log, o)? {
        Scan::Starts { position, before } => (seg.base_offset, position, before),
        Scan::Inside { position, header } => {
            return Err(diverged(
                seg.base_offset,
                position,
                format!(
                    "has no batch starting there: its batch at byte {position} of segment {} holds offsets {}..={}",
                    seg.base_offset,
                    header.base_offset,
                    header.last_offset()
                ),
            ))
        }
        Scan::Ends { size, last } => {
            let replica_end = last.map_or(seg.base_offset, |l| l.next_offset());
            if replica_end < o {
                return Ok(Handover::Wait { replica_end });
            }
            if replica_end > o {
                return Err(diverged(
                    seg.base_offset,
                    size,
                    format!(
                        "segment {} ends its whole batches at offset {replica_end} without a batch starting at {o}",
                        seg.base_offset
                    ),
                ));
            }
            // The replica's segment ends exactly at O.
            if is_last {
                // O is this replica's log end: continue at the end of its active segment when it grows.
                (seg.base_offset, size, last)
            } else {
                // O is where this replica rolled: its successor must start at O.
                let next = &segments[idx + 1];
                if next.base_offset != o {
                    return Err(diverged(
                        next.base_offset,
                        0,
                        format!(
                            "segment {} ends at offset {o} and its successor starts at {}",
                            seg.base_offset, next.base_offset
                        ),
                    ));
                }
                check_before(&diverged, &mirror, next.base_offset, 0, last)?;
                return Ok(if mirror.position == 0 {
                    aligned_or_translate(mirror, next.base_offset, 0)
                } else {
                    Handover::RollFirst {
                        mirror_base: mirror.segment_base,
                        final_size: mirror.position,
                        next_base: next.base_offset,
                    }
                });
            }
        }
    };
    // The batch before the one at O: in this segment, or the last of the previous one when O starts it.
    let before = match (before, position) {
        (Some(b), _) => Some(b),
        (None, 0) if idx > 0 => match scan(partition, segments[idx - 1].base_offset, &segments[idx - 1].log, o)? {
            Scan::Ends { last, .. } => last,
            Scan::Starts { position, .. } | Scan::Inside { position, .. } => {
                return Err(diverged(
                    segments[idx - 1].base_offset,
                    position,
                    format!(
                        "holds offset {o} in segment {} as well as at the start of segment {base}",
                        segments[idx - 1].base_offset
                    ),
                ))
            }
        },
        (None, _) => None,
    };
    check_before(&diverged, &mirror, base, position, before)?;
    if position == 0 && mirror.position > 0 {
        return Ok(Handover::RollFirst {
            mirror_base: mirror.segment_base,
            final_size: mirror.position,
            next_base: base,
        });
    }
    Ok(aligned_or_translate(mirror, base, position))
}

fn aligned_or_translate(mirror: MirrorEnd, base: i64, position: u64) -> Handover {
    if mirror.segment_base == base && mirror.position == position {
        Handover::Aligned { base, position }
    } else {
        Handover::Translate(Translation {
            mirror_base: mirror.segment_base,
            mirror_position: mirror.position,
            replica_base: base,
            replica_position: position,
        })
    }
}

/// The batch before the one at O must end at O - 1 and, when the mirror's last batch CRC is known, carry it.
/// Without a batch before (O is the replica's first offset) there is nothing to compare.
fn check_before(
    diverged: &impl Fn(i64, u64, String) -> Error,
    mirror: &MirrorEnd,
    base: i64,
    position: u64,
    before: Option<BatchHeader>,
) -> Result<()> {
    let o = mirror.end_offset;
    let Some(b) = before else { return Ok(()) };
    if b.next_offset() != o {
        return Err(diverged(
            base,
            position,
            format!(
                "has a batch of offsets {}..={} just before it (a gap or an overlap)",
                b.base_offset,
                b.last_offset()
            ),
        ));
    }
    if let Some(crc) = mirror.last_batch_crc.filter(|crc| *crc != b.crc) {
        return Err(diverged(
            base,
            position,
            format!(
                "holds a different batch {}..={} before it: CRC {:#010x} here, {crc:#010x} in the mirror",
                b.base_offset,
                b.last_offset(),
                b.crc
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
