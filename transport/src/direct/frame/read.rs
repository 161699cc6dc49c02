//! Frame payloads read, one function per frame kind that has more than a few fields: each reads its fields in
//! the order of `docs/direct-protocol.md`, checks every count against the bytes present before allocating by it,
//! and refuses (as [`FrameError`], naming the field and its byte offset) a value the protocol forbids. Trailing
//! bytes are refused by the caller ([`decode_payload`]), once for every kind.

use super::{check_meta_piece, Frame, FrameType};
use crate::direct::codes::FEATURE_CLUSTER_SHIPPERS;
use crate::direct::error::FrameError;
use crate::direct::payload::{check_link_id, LinkId, LinkMetaPiece, MetaPart};
use crate::direct::payload::{
    Chunk, Claim, ClaimResult, ClaimVerdict, ClaimedAt, Companion, CompanionKind, Goodbye, GoodbyeReason, Hello,
    HelloAck, LogEnd, LogStart, Reader, Refuse, RefuseReason, ReplaceEnd, Revoke, Role, Roll, SegmentReplace,
    SegmentSeal, Shipped, SourceProgress, Truncate, TruncateMode, HELLO_MAGIC, LOG_END_LEN, MIN_POSITION_LEN,
};
use crate::direct::payload::{LayoutSegment, MirrorLayout, MAX_LAYOUT_SEGMENTS_PER_FRAME};

pub(super) fn decode_payload(frame_type: FrameType, mut r: Reader) -> Result<Frame, FrameError> {
    let frame = match frame_type {
        FrameType::Hello => read_hello(&mut r)?,
        FrameType::HelloAck => Frame::HelloAck(HelloAck {
            version: r.u16("version")?,
            features: r.u64("features")?,
        }),
        FrameType::Refuse => Frame::Refuse(Refuse {
            reason: RefuseReason::from_code(r.u16("reason")?),
            min_version: r.u16("min_version")?,
            max_version: r.u16("max_version")?,
            link: r.string("link")?,
            message: r.string("message")?,
        }),
        FrameType::Chunk => Frame::Chunk(Chunk {
            partition: r.partition()?,
            segment_base: r.offset("segment_base")?,
            position: r.u64("position")?,
            bytes: r.bytes("bytes")?,
            crcs: Default::default(),
        }),
        FrameType::SegmentSeal => read_segment_seal(&mut r)?,
        FrameType::Ack => Frame::Ack(r.position()?),
        FrameType::Resume => read_resume(&mut r)?,
        FrameType::Truncate => read_truncate(&mut r)?,
        FrameType::Heartbeat => Frame::Heartbeat {
            sequence: r.u64("sequence")?,
        },
        FrameType::Credit => Frame::Credit { bytes: r.u64("bytes")? },
        FrameType::Goodbye => Frame::Goodbye(Goodbye {
            reason: GoodbyeReason::from_code(r.u16("reason")?),
            message: r.string("message")?,
        }),
        FrameType::LogStart => Frame::LogStart(LogStart {
            partition: r.partition()?,
            log_start_offset: r.offset("log_start_offset")?,
        }),
        FrameType::SourceProgress => read_source_progress(&mut r)?,
        FrameType::Claim => Frame::Claim(Claim {
            partition: r.partition()?,
            leader_epoch: r.epoch("leader_epoch")?,
        }),
        FrameType::ClaimResult => read_claim_result(&mut r)?,
        FrameType::Revoke => Frame::Revoke(Revoke {
            partition: r.partition()?,
            holder_node: r.epoch("holder_node")?,
            holder_epoch: r.epoch("holder_epoch")?,
        }),
        FrameType::Roll => read_roll(&mut r)?,
        FrameType::MirrorLayout => read_mirror_layout(&mut r)?,
        FrameType::LinkMeta => read_link_meta(&mut r)?,
        FrameType::LinkId => read_link_id(&mut r)?,
        FrameType::SegmentReplace => read_segment_replace(&mut r)?,
    };
    r.finish()?;
    Ok(frame)
}

fn read_hello(r: &mut Reader) -> Result<Frame, FrameError> {
    let magic: [u8; 4] = [r.u8("magic")?, r.u8("magic")?, r.u8("magic")?, r.u8("magic")?];
    if magic != HELLO_MAGIC {
        r.back(4);
        return Err(r.fail(
            "magic",
            format!("{magic:02x?}, expected {HELLO_MAGIC:02x?}: not a segmirror peer"),
        ));
    }
    let min_version = r.u16("min_version")?;
    let max_version = r.u16("max_version")?;
    if min_version == 0 || min_version > max_version {
        r.back(4);
        return Err(r.fail(
            "min_version",
            format!("empty version range {min_version}..={max_version}"),
        ));
    }
    let features_supported = r.u64("features_supported")?;
    let features_required = r.u64("features_required")?;
    let role = r.role()?;
    let link = r.string("link")?;
    let source_cluster_id = r.opt_string("source_cluster_id")?;
    let software = r.string("software")?;
    // Feature bit 6: a shipper offering it names its broker; anything else after `software` is trailing.
    let shipper_node_id = if role == Role::Shipper && features_supported & FEATURE_CLUSTER_SHIPPERS != 0 {
        Some(r.epoch("shipper_node_id")?)
    } else {
        None
    };
    Ok(Frame::Hello(Hello {
        min_version,
        max_version,
        features_supported,
        features_required,
        role,
        link,
        source_cluster_id,
        software,
        shipper_node_id,
    }))
}

fn read_segment_seal(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let segment_base = r.offset("segment_base")?;
    let final_size = r.u64("final_size")?;
    let log_sha256 = r.sha256("log_sha256")?;
    let companions = read_companions(r)?;
    Ok(Frame::SegmentSeal(SegmentSeal {
        partition,
        segment_base,
        final_size,
        log_sha256,
        companions,
    }))
}

fn read_resume(r: &mut Reader) -> Result<Frame, FrameError> {
    let count = r.u32("count")? as usize;
    // Never trust the count for an allocation: each position takes at least MIN_POSITION_LEN bytes.
    if count > r.remaining() / MIN_POSITION_LEN {
        r.back(4);
        return Err(r.fail(
            "count",
            format!("{count} positions cannot fit in the {} bytes left", r.remaining() - 4),
        ));
    }
    let mut points = Vec::with_capacity(count);
    for _ in 0..count {
        points.push(r.position()?);
    }
    // Feature bit 5: a log end per position follows (an older applier's frame ends here).
    if r.remaining() == 0 {
        return Ok(Frame::Resume(points));
    }
    if count == 0 || r.remaining() != count * LOG_END_LEN {
        return Err(r.fail(
            "ends",
            format!(
                "{} bytes after {count} positions: the log ends take exactly {} bytes ({LOG_END_LEN} per position)",
                r.remaining(),
                count * LOG_END_LEN
            ),
        ));
    }
    let mut ends = Vec::with_capacity(count);
    for _ in 0..count {
        let end_offset = r.offset("end_offset")?;
        let last_epoch = r.i32("last_epoch")?;
        if last_epoch < -1 {
            r.back(4);
            return Err(r.fail("last_epoch", format!("{last_epoch}: an epoch is -1 (none) or above")));
        }
        ends.push(LogEnd { end_offset, last_epoch });
    }
    Ok(Frame::ResumeWithEnds {
        positions: points,
        ends,
    })
}

fn read_truncate(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let truncate_to = r.offset("truncate_to")?;
    let segment_base = r.offset("segment_base")?;
    if segment_base > truncate_to {
        r.back(8);
        return Err(r.fail(
            "segment_base",
            format!("{segment_base} is above truncate_to {truncate_to}: the segment cannot hold it"),
        ));
    }
    let position = r.u64("position")?;
    let mode = r.u8("mode")?;
    let Some(mode) = TruncateMode::from_code(mode) else {
        r.back(1);
        return Err(r.fail("mode", format!("{mode}, expected 1 (log end) or 2 (high watermark)")));
    };
    let mirror_end_offset = r.offset("mirror_end_offset")?;
    let mirror_epoch = r.i32("mirror_epoch")?;
    let source_epoch = r.i32("source_epoch")?;
    let source_end_offset = r.offset("source_end_offset")?;
    for (field, epoch) in [("mirror_epoch", mirror_epoch), ("source_epoch", source_epoch)] {
        if epoch < -1 {
            return Err(r.fail(field, format!("{epoch}: an epoch is -1 (none) or above")));
        }
    }
    Ok(Frame::Truncate(Truncate {
        partition,
        truncate_to,
        segment_base,
        position,
        mode,
        mirror_end_offset,
        mirror_epoch,
        source_epoch,
        source_end_offset,
    }))
}

fn read_source_progress(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let log_end_offset = r.offset("log_end_offset")?;
    let high_watermark = match r.u8("high_watermark")? {
        0 => None,
        1 => Some(r.offset("high_watermark")?),
        other => {
            r.back(1);
            return Err(r.fail("high_watermark", format!("presence byte {other}, expected 0 or 1")));
        }
    };
    Ok(Frame::SourceProgress(SourceProgress {
        partition,
        log_end_offset,
        high_watermark,
        active_segment_base: r.offset("active_segment_base")?,
        active_segment_size: r.u64("active_segment_size")?,
        shipper_time_ms: r.u64("shipper_time_ms")?,
        // Feature bit 4: present when bytes follow (an older shipper's frame ends here).
        shipped: if r.remaining() > 0 {
            Some(Shipped {
                segment_base: r.offset("shipped_segment_base")?,
                position: r.u64("shipped_position")?,
                end_offset: r.offset("shipped_end_offset")?,
            })
        } else {
            None
        },
    }))
}

fn read_claim_result(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let verdict = match r.u8("granted")? {
        1 => match r.u8("durable")? {
            0 => ClaimVerdict::Granted { durable: None },
            1 => ClaimVerdict::Granted {
                durable: Some(ClaimedAt {
                    segment_base: r.offset("segment_base")?,
                    position: r.u64("position")?,
                    end_offset: r.offset("end_offset")?,
                    // Trailing: absent when the payload ends here; more bytes than a CRC are refused as
                    // trailing bytes below.
                    last_batch_crc: if r.remaining() > 0 {
                        Some(r.u32("last_batch_crc")?)
                    } else {
                        None
                    },
                }),
            },
            other => {
                r.back(1);
                return Err(r.fail("durable", format!("presence byte {other}, expected 0 or 1")));
            }
        },
        0 => ClaimVerdict::Refused {
            holder_node: r.epoch("holder_node")?,
            holder_epoch: r.epoch("holder_epoch")?,
        },
        other => {
            r.back(1);
            return Err(r.fail("granted", format!("{other}, expected 0 (refused) or 1 (granted)")));
        }
    };
    Ok(Frame::ClaimResult(ClaimResult { partition, verdict }))
}

fn read_roll(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let segment_base = r.offset("segment_base")?;
    let final_size = r.u64("final_size")?;
    let next_offset = r.offset("next_offset")?;
    if next_offset <= segment_base {
        r.back(8);
        return Err(r.fail(
            "next_offset",
            format!("{next_offset} is not above the segment base {segment_base}"),
        ));
    }
    let log_sha256 = match r.u8("log_sha256")? {
        0 => None,
        1 => Some(r.sha256("log_sha256")?),
        other => {
            r.back(1);
            return Err(r.fail("log_sha256", format!("presence byte {other}, expected 0 or 1")));
        }
    };
    Ok(Frame::Roll(Roll {
        partition,
        segment_base,
        final_size,
        next_offset,
        log_sha256,
    }))
}

fn read_mirror_layout(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let last = match r.u8("last")? {
        0 => false,
        1 => true,
        other => {
            r.back(1);
            return Err(r.fail("last", format!("flag byte {other}, expected 0 or 1")));
        }
    };
    let count = r.u32("count")? as usize;
    // Never trust the count for an allocation: each segment takes 16 bytes.
    if count > MAX_LAYOUT_SEGMENTS_PER_FRAME || count > r.remaining() / 16 {
        r.back(4);
        return Err(r.fail(
            "count",
            format!(
                "{count} segments: at most {MAX_LAYOUT_SEGMENTS_PER_FRAME}, and they must fit the {} bytes left",
                r.remaining() - 4
            ),
        ));
    }
    let mut segments: Vec<LayoutSegment> = Vec::with_capacity(count);
    for _ in 0..count {
        let base = r.offset("base")?;
        if segments.last().is_some_and(|prev| prev.base >= base) {
            r.back(8);
            return Err(r.fail("base", format!("{base} is not above the previous base")));
        }
        segments.push(LayoutSegment {
            base,
            size: r.u64("size")?,
        });
    }
    Ok(Frame::MirrorLayout(MirrorLayout {
        partition,
        last,
        segments,
    }))
}

fn read_link_meta(r: &mut Reader) -> Result<Frame, FrameError> {
    let version = r.u64("version")?;
    let code = r.u8("part")?;
    let Some(part) = MetaPart::from_code(code) else {
        r.back(1);
        return Err(r.fail("part", format!("unknown part {code} (1 topics.json, 2 offsets.json)")));
    };
    let size = r.u64("size")?;
    // The document's size is checked against its cap before a byte of it is buffered.
    if let Err((_, reason)) = check_meta_piece(part, size, 0, 0) {
        r.back(8);
        return Err(r.fail("size", reason));
    }
    let sha256 = r.sha256("sha256")?;
    let position = r.u64("position")?;
    let bytes = r.bytes("bytes")?;
    if let Err((field, reason)) = check_meta_piece(part, size, position, bytes.len() as u64) {
        r.back(bytes.len() + 4 + 8);
        return Err(r.fail(if field == "bytes" { "position" } else { field }, reason));
    }
    Ok(Frame::LinkMeta(LinkMetaPiece {
        version,
        part,
        size,
        sha256,
        position,
        bytes,
    }))
}

fn read_link_id(r: &mut Reader) -> Result<Frame, FrameError> {
    let link_id = r.string("link_id")?;
    if let Err(reason) = check_link_id(&link_id) {
        r.back(link_id.len() + 2);
        return Err(r.fail("link_id", reason));
    }
    Ok(Frame::LinkId(LinkId { link_id }))
}

fn read_segment_replace(r: &mut Reader) -> Result<Frame, FrameError> {
    let partition = r.partition()?;
    let count = usize::from(r.u16("replaced_bases")?);
    // Never trust the count for an allocation: each base takes 8 bytes.
    if count == 0 || count > r.remaining() / 8 {
        r.back(2);
        return Err(r.fail(
            "replaced_bases",
            format!(
                "{count} bases: at least one, and they must fit the {} bytes left",
                r.remaining() - 2
            ),
        ));
    }
    let mut replaced_bases: Vec<i64> = Vec::with_capacity(count);
    for _ in 0..count {
        let base = r.offset("replaced_bases")?;
        if replaced_bases.last().is_some_and(|prev| *prev >= base) {
            r.back(8);
            return Err(r.fail("replaced_bases", format!("{base} is not above the previous base")));
        }
        replaced_bases.push(base);
    }
    let position = r.u64("position")?;
    let bytes = r.bytes("bytes")?;
    let end = match r.u8("end")? {
        0 => None,
        1 => Some(ReplaceEnd {
            final_size: r.u64("final_size")?,
            log_sha256: r.sha256("log_sha256")?,
            companions: read_companions(r)?,
            // Feature bit 7: present when bytes follow (an older shipper's frame ends here).
            next_base: if r.remaining() > 0 {
                Some(r.offset("next_base")?)
            } else {
                None
            },
        }),
        other => {
            r.back(1);
            return Err(r.fail("end", format!("presence byte {other}, expected 0 or 1")));
        }
    };
    Ok(Frame::SegmentReplace(SegmentReplace {
        partition,
        replaced_bases,
        position,
        bytes,
        end,
    }))
}

/// Reads what `put::put_companions` wrote.
fn read_companions(r: &mut Reader) -> Result<Vec<Companion>, FrameError> {
    let count = r.u8("companions")?;
    if usize::from(count) > CompanionKind::ALL.len() {
        r.back(1);
        return Err(r.fail("companions", format!("{count} companions, at most one per kind (4)")));
    }
    let mut companions: Vec<Companion> = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let code = r.u8("kind")?;
        let Some(kind) = CompanionKind::from_code(code) else {
            r.back(1);
            return Err(r.fail("kind", format!("unknown companion kind {code}")));
        };
        if companions.last().is_some_and(|prev| prev.kind >= kind) {
            r.back(1);
            return Err(r.fail("kind", format!("{kind:?} repeated or out of kind order")));
        }
        let size = r.u64("size")?;
        let sha256 = r.sha256("sha256")?;
        let (inline, index_interval) = match r.u8("inline")? {
            0 => (None, None),
            1 => {
                let bytes = r.bytes("inline")?;
                if bytes.len() as u64 != size {
                    return Err(r.fail("inline", format!("{} inline bytes, size says {size}", bytes.len())));
                }
                (Some(bytes), None)
            }
            2 if matches!(kind, CompanionKind::OffsetIndex | CompanionKind::TimeIndex) => {
                (None, Some(r.u32("index_interval")?))
            }
            2 => {
                r.back(1);
                return Err(r.fail("inline", format!("{kind:?} has no index interval to rebuild with")));
            }
            other => {
                r.back(1);
                return Err(r.fail("inline", format!("form byte {other}, expected 0, 1 or 2")));
            }
        };
        companions.push(Companion {
            kind,
            size,
            sha256,
            inline,
            index_interval,
        });
    }
    Ok(companions)
}
