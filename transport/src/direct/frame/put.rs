//! Frame payloads written, one function per frame kind that has more than a few fields: each writes its fields
//! in the order of `docs/direct-protocol.md` and refuses (as [`FrameError::Encode`], naming the field) a value its
//! encoding cannot carry or the receiver would refuse, so a side never sends what its peer must reject.

use bytes::{BufMut, BytesMut};

use super::{check_layout, check_meta_piece, check_replaced_bases, Frame};
use crate::direct::codes::FEATURE_CLUSTER_SHIPPERS;
use crate::direct::error::FrameError;
use crate::direct::payload::{
    check_link_id, Chunk, ClaimResult, ClaimVerdict, Companion, CompanionKind, Hello, LinkId, LinkMetaPiece, LogEnd,
    MirrorLayout, Position, Refuse, Role, Roll, SegmentReplace, SegmentSeal, SourceProgress, Truncate, Writer,
    HELLO_MAGIC,
};

pub(super) fn encode_payload(frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
    let mut w = Writer {
        out,
        frame: frame.name(),
    };
    match frame {
        Frame::Hello(h) => put_hello(&mut w, h)?,
        Frame::HelloAck(a) => {
            w.out.put_u16(a.version);
            w.out.put_u64(a.features);
        }
        Frame::Refuse(r) => put_refuse(&mut w, r)?,
        Frame::Chunk(c) => {
            put_chunk_head(&mut w, c)?;
            w.out.put_slice(&c.bytes);
        }
        Frame::SegmentSeal(s) => put_segment_seal(&mut w, s)?,
        Frame::Ack(p) => w.position(p)?,
        Frame::Resume(points) => put_resume(&mut w, points)?,
        Frame::ResumeWithEnds { positions, ends } => put_resume_with_ends(&mut w, positions, ends)?,
        Frame::Truncate(t) => put_truncate(&mut w, t)?,
        Frame::Heartbeat { sequence } => w.out.put_u64(*sequence),
        Frame::Credit { bytes } => w.out.put_u64(*bytes),
        Frame::Goodbye(g) => {
            w.out.put_u16(g.reason.code());
            w.string("message", &g.message)?;
        }
        Frame::LogStart(l) => {
            w.partition(&l.partition)?;
            w.offset("log_start_offset", l.log_start_offset)?;
        }
        Frame::SourceProgress(p) => put_source_progress(&mut w, p)?,
        Frame::Claim(c) => {
            w.partition(&c.partition)?;
            w.epoch("leader_epoch", c.leader_epoch)?;
        }
        Frame::ClaimResult(c) => put_claim_result(&mut w, c)?,
        Frame::Revoke(r) => {
            w.partition(&r.partition)?;
            w.epoch("holder_node", r.holder_node)?;
            w.epoch("holder_epoch", r.holder_epoch)?;
        }
        Frame::Roll(r) => put_roll(&mut w, r)?,
        Frame::MirrorLayout(l) => put_mirror_layout(&mut w, l)?,
        Frame::LinkMeta(m) => put_link_meta(&mut w, m)?,
        Frame::LinkId(l) => put_link_id(&mut w, l)?,
        Frame::SegmentReplace(r) => put_segment_replace(&mut w, r)?,
    }
    Ok(())
}

fn put_hello(w: &mut Writer<'_>, h: &Hello) -> Result<(), FrameError> {
    w.out.put_slice(&HELLO_MAGIC);
    w.out.put_u16(h.min_version);
    w.out.put_u16(h.max_version);
    w.out.put_u64(h.features_supported);
    w.out.put_u64(h.features_required);
    w.out.put_u8(h.role.code());
    w.string("link", &h.link)?;
    w.opt_string("source_cluster_id", h.source_cluster_id.as_deref())?;
    w.string("software", &h.software)?;
    let wants_node = h.role == Role::Shipper && h.features_supported & FEATURE_CLUSTER_SHIPPERS != 0;
    match (h.shipper_node_id, wants_node) {
        (Some(node), true) if node >= 0 => w.out.put_i32(node),
        (None, false) => {}
        (node, _) => {
            return Err(FrameError::Encode {
                frame: "Hello",
                field: "shipper_node_id",
                reason: format!(
                    "{node:?} with role {} and features {:#x}: a shipper offering bit 6 names its node (≥ 0), nobody else does",
                    h.role, h.features_supported
                ),
            })
        }
    }
    Ok(())
}

fn put_refuse(w: &mut Writer<'_>, r: &Refuse) -> Result<(), FrameError> {
    w.out.put_u16(r.reason.code());
    w.out.put_u16(r.min_version);
    w.out.put_u16(r.max_version);
    w.string("link", &r.link)?;
    w.string("message", &r.message)?;
    Ok(())
}

fn put_segment_seal(w: &mut Writer<'_>, s: &SegmentSeal) -> Result<(), FrameError> {
    w.partition(&s.partition)?;
    w.offset("segment_base", s.segment_base)?;
    w.out.put_u64(s.final_size);
    w.out.put_slice(&s.log_sha256);
    put_companions(w, &s.companions)?;
    Ok(())
}

fn put_resume(w: &mut Writer<'_>, points: &[Position]) -> Result<(), FrameError> {
    let n = u32::try_from(points.len()).map_err(|_| FrameError::Encode {
        frame: "Resume",
        field: "count",
        reason: format!("{} positions", points.len()),
    })?;
    w.out.put_u32(n);
    for p in points {
        w.position(p)?;
    }
    Ok(())
}

fn put_resume_with_ends(w: &mut Writer<'_>, positions: &[Position], ends: &[LogEnd]) -> Result<(), FrameError> {
    if positions.is_empty() || positions.len() != ends.len() {
        return Err(FrameError::Encode {
            frame: "Resume",
            field: "ends",
            reason: format!(
                "{} log ends for {} positions: one per position, and at least one",
                ends.len(),
                positions.len()
            ),
        });
    }
    let n = u32::try_from(positions.len()).map_err(|_| FrameError::Encode {
        frame: "Resume",
        field: "count",
        reason: format!("{} positions", positions.len()),
    })?;
    w.out.put_u32(n);
    for p in positions {
        w.position(p)?;
    }
    for e in ends {
        w.offset("end_offset", e.end_offset)?;
        w.out.put_i32(e.last_epoch);
    }
    Ok(())
}

fn put_truncate(w: &mut Writer<'_>, t: &Truncate) -> Result<(), FrameError> {
    w.partition(&t.partition)?;
    w.offset("truncate_to", t.truncate_to)?;
    w.offset("segment_base", t.segment_base)?;
    w.out.put_u64(t.position);
    w.out.put_u8(t.mode.code());
    w.offset("mirror_end_offset", t.mirror_end_offset)?;
    w.out.put_i32(t.mirror_epoch);
    w.out.put_i32(t.source_epoch);
    w.offset("source_end_offset", t.source_end_offset)?;
    Ok(())
}

fn put_source_progress(w: &mut Writer<'_>, p: &SourceProgress) -> Result<(), FrameError> {
    w.partition(&p.partition)?;
    w.offset("log_end_offset", p.log_end_offset)?;
    match p.high_watermark {
        None => w.out.put_u8(0),
        Some(hw) => {
            w.out.put_u8(1);
            w.offset("high_watermark", hw)?;
        }
    }
    w.offset("active_segment_base", p.active_segment_base)?;
    w.out.put_u64(p.active_segment_size);
    w.out.put_u64(p.shipper_time_ms);
    if let Some(shipped) = &p.shipped {
        w.offset("shipped_segment_base", shipped.segment_base)?;
        w.out.put_u64(shipped.position);
        w.offset("shipped_end_offset", shipped.end_offset)?;
    }
    Ok(())
}

fn put_claim_result(w: &mut Writer<'_>, c: &ClaimResult) -> Result<(), FrameError> {
    w.partition(&c.partition)?;
    match &c.verdict {
        ClaimVerdict::Granted { durable } => {
            w.out.put_u8(1);
            match durable {
                None => w.out.put_u8(0),
                Some(at) => {
                    w.out.put_u8(1);
                    w.offset("segment_base", at.segment_base)?;
                    w.out.put_u64(at.position);
                    w.offset("end_offset", at.end_offset)?;
                    if let Some(crc) = at.last_batch_crc {
                        w.out.put_u32(crc);
                    }
                }
            }
        }
        ClaimVerdict::Refused {
            holder_node,
            holder_epoch,
        } => {
            w.out.put_u8(0);
            w.epoch("holder_node", *holder_node)?;
            w.epoch("holder_epoch", *holder_epoch)?;
        }
    }
    Ok(())
}

fn put_roll(w: &mut Writer<'_>, r: &Roll) -> Result<(), FrameError> {
    w.partition(&r.partition)?;
    w.offset("segment_base", r.segment_base)?;
    w.out.put_u64(r.final_size);
    w.offset("next_offset", r.next_offset)?;
    if r.next_offset <= r.segment_base {
        return Err(FrameError::Encode {
            frame: "Roll",
            field: "next_offset",
            reason: format!("{} is not above the segment base {}", r.next_offset, r.segment_base),
        });
    }
    match &r.log_sha256 {
        None => w.out.put_u8(0),
        Some(d) => {
            w.out.put_u8(1);
            w.out.put_slice(d);
        }
    }
    Ok(())
}

fn put_mirror_layout(w: &mut Writer<'_>, l: &MirrorLayout) -> Result<(), FrameError> {
    w.partition(&l.partition)?;
    check_layout(&l.segments).map_err(|reason| FrameError::Encode {
        frame: "MirrorLayout",
        field: "segments",
        reason,
    })?;
    w.out.put_u8(u8::from(l.last));
    w.out.put_u32(l.segments.len() as u32);
    for s in &l.segments {
        w.offset("base", s.base)?;
        w.out.put_u64(s.size);
    }
    Ok(())
}

fn put_link_meta(w: &mut Writer<'_>, m: &LinkMetaPiece) -> Result<(), FrameError> {
    check_meta_piece(m.part, m.size, m.position, m.bytes.len() as u64).map_err(|(field, reason)| {
        FrameError::Encode {
            frame: "LinkMeta",
            field,
            reason,
        }
    })?;
    w.out.put_u64(m.version);
    w.out.put_u8(m.part.code());
    w.out.put_u64(m.size);
    w.out.put_slice(&m.sha256);
    w.out.put_u64(m.position);
    w.bytes("bytes", &m.bytes)?;
    Ok(())
}

fn put_link_id(w: &mut Writer<'_>, l: &LinkId) -> Result<(), FrameError> {
    check_link_id(&l.link_id).map_err(|reason| FrameError::Encode {
        frame: "LinkId",
        field: "link_id",
        reason,
    })?;
    w.string("link_id", &l.link_id)?;
    Ok(())
}

fn put_segment_replace(w: &mut Writer<'_>, r: &SegmentReplace) -> Result<(), FrameError> {
    w.partition(&r.partition)?;
    check_replaced_bases(&r.replaced_bases).map_err(|reason| FrameError::Encode {
        frame: "SegmentReplace",
        field: "replaced_bases",
        reason,
    })?;
    w.out.put_u16(r.replaced_bases.len() as u16);
    for base in &r.replaced_bases {
        w.offset("replaced_bases", *base)?;
    }
    w.out.put_u64(r.position);
    w.bytes("bytes", &r.bytes)?;
    match &r.end {
        None => w.out.put_u8(0),
        Some(end) => {
            w.out.put_u8(1);
            w.out.put_u64(end.final_size);
            w.out.put_slice(&end.log_sha256);
            put_companions(w, &end.companions)?;
            if let Some(next_base) = end.next_base {
                w.offset("next_base", next_base)?;
            }
        }
    }
    Ok(())
}

/// A Chunk's payload up to its bytes: partition, segment base, position and the bytes' length prefix.
pub(super) fn put_chunk_head(w: &mut Writer<'_>, c: &Chunk) -> Result<(), FrameError> {
    w.partition(&c.partition)?;
    w.offset("segment_base", c.segment_base)?;
    w.out.put_u64(c.position);
    let len = u32::try_from(c.bytes.len()).map_err(|_| FrameError::Encode {
        frame: "Chunk",
        field: "bytes",
        reason: format!("{} bytes", c.bytes.len()),
    })?;
    w.out.put_u32(len);
    Ok(())
}

/// A seal's companion list: `count: u8`, then per companion kind, size, digest and the inline bytes if any.
fn put_companions(w: &mut Writer<'_>, companions: &[Companion]) -> Result<(), FrameError> {
    let frame = w.frame;
    check_companions(companions).map_err(|reason| FrameError::Encode {
        frame,
        field: "companions",
        reason,
    })?;
    w.out.put_u8(companions.len() as u8);
    for c in companions {
        w.out.put_u8(c.kind.code());
        w.out.put_u64(c.size);
        w.out.put_slice(&c.sha256);
        match (&c.inline, c.index_interval) {
            (None, None) => w.out.put_u8(0),
            (Some(bytes), _) => {
                w.out.put_u8(1);
                w.bytes("inline", bytes)?;
            }
            (None, Some(interval)) => {
                w.out.put_u8(2);
                w.out.put_u32(interval);
            }
        }
    }
    Ok(())
}

/// Companions: in kind order, one per kind, inline bytes as long as the size says.
fn check_companions(companions: &[Companion]) -> Result<(), String> {
    for pair in companions.windows(2) {
        if pair[0].kind >= pair[1].kind {
            return Err(format!(
                "{:?} after {:?}: one per kind, in kind order",
                pair[1].kind, pair[0].kind
            ));
        }
    }
    for c in companions {
        if c.index_interval.is_some()
            && (c.inline.is_some() || !matches!(c.kind, CompanionKind::OffsetIndex | CompanionKind::TimeIndex))
        {
            return Err(format!(
                "{:?}: an index interval goes only with an offset or time index sent as a digest",
                c.kind
            ));
        }
        if let Some(bytes) = &c.inline {
            if bytes.len() as u64 != c.size {
                return Err(format!(
                    "{:?}: {} inline bytes, size says {}",
                    c.kind,
                    bytes.len(),
                    c.size
                ));
            }
        }
    }
    Ok(())
}
