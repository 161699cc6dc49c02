//! Frames of the direct protocol: the envelope, the typed frames and a
//! `tokio_util` codec.
//!
//! Layout (all big-endian): `type: u8 | flags: u8 | length: u32 | payload | crc: u32`,
//! where `crc` is the CRC-32C of the six header bytes and the payload. The
//! decoder trusts nothing before the CRC: it refuses a declared length over the
//! maximum as soon as the six header bytes are there (so a hostile length never
//! makes it buffer or allocate more than the maximum), waits for the whole frame,
//! checks the CRC, and only then looks at the type, the flags and the payload.
//! TLS already protects the bytes in flight; the CRC is there for the plaintext
//! mode, for bugs in either side's buffering, and because a chunk's CRC-32C is
//! the same check the applier and the bucket keep.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::codes::FEATURE_CLUSTER_SHIPPERS;
use super::error::FrameError;
use super::payload::{check_link_id, LinkId, LinkMetaPiece, MetaPart};
use super::payload::{
    Chunk, Claim, ClaimResult, ClaimVerdict, ClaimedAt, Companion, CompanionKind, Goodbye, GoodbyeReason, Hello,
    HelloAck, LogEnd, LogStart, Position, Reader, Refuse, RefuseReason, ReplaceEnd, Revoke, Role, Roll, SegmentReplace,
    SegmentSeal, Shipped, SourceProgress, Truncate, TruncateMode, Writer, HELLO_MAGIC, LOG_END_LEN, MIN_POSITION_LEN,
};
use super::payload::{ChunkCrcs, LayoutSegment, MirrorLayout, MAX_LAYOUT_SEGMENTS_PER_FRAME};
use segment_format::crc_combine::{PrefixCrc, COMBINE_MIN_FRAME_BYTES};
use segment_format::log::KnownCrc;

/// Header bytes: type, flags, payload length.
pub const HEADER_LEN: usize = 6;
/// Trailer bytes: the CRC-32C.
pub const TRAILER_LEN: usize = 4;
/// Bytes a frame adds to its payload.
pub const FRAME_OVERHEAD: usize = HEADER_LEN + TRAILER_LEN;

/// Hard maximum payload of a frame, whatever a side configures. 8 MiB: a chunk
/// must hold at least one whole batch, and a broker with default settings
/// accepts batches of about 1 MiB (`message.max.bytes`), so 8 MiB leaves room
/// for raised limits while bounding what one connection may make a side buffer.
pub const MAX_PAYLOAD_LEN: u32 = 8 << 20;

/// Chunks from this size (4 KiB) with a known CRC get the frame's CRC combined from it rather than hashed, and
/// chunk frames from this size are decoded batch by batch ([`hash_batches`]): below it a combine (a few
/// carry-less multiplications, `segment_format::crc_combine`) costs more than hashing the bytes again.
const COMBINE_MIN_CHUNK_BYTES: usize = COMBINE_MIN_FRAME_BYTES;

/// The flags byte. Version 1 defines no flag; a receiver refuses set bits, so a
/// later version can give them a meaning that an old peer does not misread.
pub const KNOWN_FLAGS: u8 = 0;

/// TLS record content types, recognised at the start of a plaintext stream.
const TLS_ALERT: u8 = 0x15;
const TLS_HANDSHAKE: u8 = 0x16;

/// The frame types. Codes are stable across versions; new types get new codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameType {
    Hello = 1,
    HelloAck = 2,
    Refuse = 3,
    Chunk = 4,
    SegmentSeal = 5,
    Ack = 6,
    Resume = 7,
    Heartbeat = 8,
    Credit = 9,
    Goodbye = 10,
    LogStart = 11,
    SegmentReplace = 12,
    SourceProgress = 13,
    Truncate = 14,
    Claim = 15,
    ClaimResult = 16,
    Revoke = 17,
    Roll = 18,
    MirrorLayout = 19,
    LinkMeta = 20,
    LinkId = 21,
}

impl FrameType {
    pub const ALL: [FrameType; 21] = [
        FrameType::Hello,
        FrameType::HelloAck,
        FrameType::Refuse,
        FrameType::Chunk,
        FrameType::SegmentSeal,
        FrameType::Ack,
        FrameType::Resume,
        FrameType::Heartbeat,
        FrameType::Credit,
        FrameType::Goodbye,
        FrameType::LogStart,
        FrameType::SegmentReplace,
        FrameType::SourceProgress,
        FrameType::Truncate,
        FrameType::Claim,
        FrameType::ClaimResult,
        FrameType::Revoke,
        FrameType::Roll,
        FrameType::MirrorLayout,
        FrameType::LinkMeta,
        FrameType::LinkId,
    ];

    pub const fn from_code(code: u8) -> Option<FrameType> {
        match code {
            1 => Some(FrameType::Hello),
            2 => Some(FrameType::HelloAck),
            3 => Some(FrameType::Refuse),
            4 => Some(FrameType::Chunk),
            5 => Some(FrameType::SegmentSeal),
            6 => Some(FrameType::Ack),
            7 => Some(FrameType::Resume),
            8 => Some(FrameType::Heartbeat),
            9 => Some(FrameType::Credit),
            10 => Some(FrameType::Goodbye),
            11 => Some(FrameType::LogStart),
            12 => Some(FrameType::SegmentReplace),
            13 => Some(FrameType::SourceProgress),
            14 => Some(FrameType::Truncate),
            15 => Some(FrameType::Claim),
            16 => Some(FrameType::ClaimResult),
            17 => Some(FrameType::Revoke),
            18 => Some(FrameType::Roll),
            19 => Some(FrameType::MirrorLayout),
            20 => Some(FrameType::LinkMeta),
            21 => Some(FrameType::LinkId),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            FrameType::Hello => "Hello",
            FrameType::HelloAck => "HelloAck",
            FrameType::Refuse => "Refuse",
            FrameType::Chunk => "Chunk",
            FrameType::SegmentSeal => "SegmentSeal",
            FrameType::Ack => "Ack",
            FrameType::Resume => "Resume",
            FrameType::Heartbeat => "Heartbeat",
            FrameType::Credit => "Credit",
            FrameType::Goodbye => "Goodbye",
            FrameType::LogStart => "LogStart",
            FrameType::SegmentReplace => "SegmentReplace",
            FrameType::SourceProgress => "SourceProgress",
            FrameType::Claim => "Claim",
            FrameType::ClaimResult => "ClaimResult",
            FrameType::Revoke => "Revoke",
            FrameType::Roll => "Roll",
            FrameType::Truncate => "Truncate",
            FrameType::MirrorLayout => "MirrorLayout",
            FrameType::LinkMeta => "LinkMeta",
            FrameType::LinkId => "LinkId",
        }
    }
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    HelloAck(HelloAck),
    Refuse(Refuse),
    Chunk(Chunk),
    SegmentSeal(SegmentSeal),
    /// Applier → shipper: everything of the partition's segment before `position` is durable.
    Ack(Position),
    /// Applier → shipper after the handshake: per partition, the acknowledged position to resume from.
    Resume(Vec<Position>),
    /// A Resume on a session that agreed `FEATURE_TRUNCATE`: each position followed by the mirror's [`LogEnd`]
    /// (`ends[i]` belongs to `positions[i]`; both non-empty and of one length, else it is a plain [`Frame::Resume`]).
    ResumeWithEnds {
        positions: Vec<Position>,
        ends: Vec<LogEnd>,
    },
    /// Either way; `sequence` counts up per sender.
    Heartbeat {
        sequence: u64,
    },
    /// Applier → shipper: `bytes` more Chunk payload bytes may be sent.
    Credit {
        bytes: u64,
    },
    Goodbye(Goodbye),
    /// Shipper → applier (feature `FEATURE_LOG_START`): the source's log start offset.
    LogStart(LogStart),
    /// Shipper → applier (feature `FEATURE_SEGMENT_REPLACE`): a piece of a compacted replacement.
    SegmentReplace(SegmentReplace),
    /// Shipper → applier (feature `FEATURE_SOURCE_PROGRESS`): where the source stands, for lag reporting.
    SourceProgress(SourceProgress),
    /// Shipper → applier (feature `FEATURE_CLUSTER_SHIPPERS`): claim a partition at a leader epoch.
    Claim(Claim),
    /// Applier → shipper (feature `FEATURE_CLUSTER_SHIPPERS`): the answer to a Claim.
    ClaimResult(ClaimResult),
    /// Applier → shipper (feature `FEATURE_CLUSTER_SHIPPERS`): another node holds the partition now.
    Revoke(Revoke),
    /// Shipper → applier (feature `FEATURE_CLUSTER_SHIPPERS`): a mirror-layout segment ends here.
    Roll(Roll),
    /// Shipper → applier (feature `FEATURE_TRUNCATE`): the source no longer holds the mirror's end.
    Truncate(Truncate),
    /// Applier → shipper right after Resume (feature `FEATURE_MIRROR_LAYOUT`): a partition's sealed segments.
    MirrorLayout(MirrorLayout),
    /// Shipper → applier (feature `FEATURE_LINK_META`): a piece of a link metadata document.
    LinkMeta(LinkMetaPiece),
    /// Shipper → applier right after HelloAck (feature `FEATURE_LINK_ID`): the shipper's link record id.
    LinkId(LinkId),
}

impl Frame {
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::HelloAck(_) => FrameType::HelloAck,
            Frame::Refuse(_) => FrameType::Refuse,
            Frame::Chunk(_) => FrameType::Chunk,
            Frame::SegmentSeal(_) => FrameType::SegmentSeal,
            Frame::Ack(_) => FrameType::Ack,
            Frame::Resume(_) | Frame::ResumeWithEnds { .. } => FrameType::Resume,
            Frame::Heartbeat { .. } => FrameType::Heartbeat,
            Frame::Credit { .. } => FrameType::Credit,
            Frame::Goodbye(_) => FrameType::Goodbye,
            Frame::LogStart(_) => FrameType::LogStart,
            Frame::SegmentReplace(_) => FrameType::SegmentReplace,
            Frame::SourceProgress(_) => FrameType::SourceProgress,
            Frame::Claim(_) => FrameType::Claim,
            Frame::ClaimResult(_) => FrameType::ClaimResult,
            Frame::Revoke(_) => FrameType::Revoke,
            Frame::Roll(_) => FrameType::Roll,
            Frame::Truncate(_) => FrameType::Truncate,
            Frame::MirrorLayout(_) => FrameType::MirrorLayout,
            Frame::LinkMeta(_) => FrameType::LinkMeta,
            Frame::LinkId(_) => FrameType::LinkId,
        }
    }

    pub fn name(&self) -> &'static str {
        self.frame_type().name()
    }
}

/// Appends `frame` to `out`, or fails (leaving `out` as it was) when a field
/// does not fit its encoding or the payload exceeds `max_payload`.
pub fn encode(frame: &Frame, max_payload: u32, out: &mut BytesMut) -> Result<(), FrameError> {
    let start = out.len();
    let result = encode_inner(frame, max_payload.min(MAX_PAYLOAD_LEN), out, start);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_inner(frame: &Frame, max_payload: u32, out: &mut BytesMut, start: usize) -> Result<(), FrameError> {
    out.put_u8(frame.frame_type() as u8);
    out.put_u8(0);
    out.put_u32(0);
    encode_payload(frame, out)?;
    let payload_len = out.len() - start - HEADER_LEN;
    let len = u32::try_from(payload_len)
        .ok()
        .filter(|len| *len <= max_payload)
        .ok_or_else(|| FrameError::Encode {
            frame: frame.name(),
            field: "length",
            reason: format!("{payload_len}-byte payload, over the maximum of {max_payload} bytes"),
        })?;
    out[start + 2..start + HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    let crc = match frame {
        // The chunk's bytes end the frame and their CRC is known: hash only what comes before them.
        Frame::Chunk(Chunk {
            bytes,
            crcs: ChunkCrcs {
                bytes: Some(bytes_crc), ..
            },
            ..
        }) if bytes.len() >= COMBINE_MIN_CHUNK_BYTES => {
            let head_end = out.len() - bytes.len();
            segment_format::crc_combine::crc32c_combine(crc32c::crc32c(&out[start..head_end]), *bytes_crc, bytes.len())
        }
        _ => crc32c::crc32c(&out[start..]),
    };
    out.put_u32(crc);
    Ok(())
}

fn encode_payload(frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
    let mut w = Writer {
        out,
        frame: frame.name(),
    };
    match frame {
        Frame::Hello(h) => {
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
        }
        Frame::HelloAck(a) => {
            w.out.put_u16(a.version);
            w.out.put_u64(a.features);
        }
        Frame::Refuse(r) => {
            w.out.put_u16(r.reason.code());
            w.out.put_u16(r.min_version);
            w.out.put_u16(r.max_version);
            w.string("link", &r.link)?;
            w.string("message", &r.message)?;
        }
        Frame::Chunk(c) => {
            put_chunk_head(&mut w, c)?;
            w.out.put_slice(&c.bytes);
        }
        Frame::SegmentSeal(s) => {
            w.partition(&s.partition)?;
            w.offset("segment_base", s.segment_base)?;
            w.out.put_u64(s.final_size);
            w.out.put_slice(&s.log_sha256);
            put_companions(&mut w, &s.companions)?;
        }
        Frame::Ack(p) => w.position(p)?,
        Frame::Resume(points) => {
            let n = u32::try_from(points.len()).map_err(|_| FrameError::Encode {
                frame: "Resume",
                field: "count",
                reason: format!("{} positions", points.len()),
            })?;
            w.out.put_u32(n);
            for p in points {
                w.position(p)?;
            }
        }
        Frame::ResumeWithEnds { positions, ends } => {
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
        }
        Frame::Truncate(t) => {
            w.partition(&t.partition)?;
            w.offset("truncate_to", t.truncate_to)?;
            w.offset("segment_base", t.segment_base)?;
            w.out.put_u64(t.position);
            w.out.put_u8(t.mode.code());
            w.offset("mirror_end_offset", t.mirror_end_offset)?;
            w.out.put_i32(t.mirror_epoch);
            w.out.put_i32(t.source_epoch);
            w.offset("source_end_offset", t.source_end_offset)?;
        }
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
        Frame::SourceProgress(p) => {
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
        }
        Frame::Claim(c) => {
            w.partition(&c.partition)?;
            w.epoch("leader_epoch", c.leader_epoch)?;
        }
        Frame::ClaimResult(c) => {
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
        }
        Frame::Revoke(r) => {
            w.partition(&r.partition)?;
            w.epoch("holder_node", r.holder_node)?;
            w.epoch("holder_epoch", r.holder_epoch)?;
        }
        Frame::Roll(r) => {
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
        }
        Frame::MirrorLayout(l) => {
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
        }
        Frame::LinkMeta(m) => {
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
        }
        Frame::LinkId(l) => {
            check_link_id(&l.link_id).map_err(|reason| FrameError::Encode {
                frame: "LinkId",
                field: "link_id",
                reason,
            })?;
            w.string("link_id", &l.link_id)?;
        }
        Frame::SegmentReplace(r) => {
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
                    put_companions(&mut w, &end.companions)?;
                    if let Some(next_base) = end.next_base {
                        w.offset("next_base", next_base)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// A Chunk's payload up to its bytes: partition, segment base, position and the bytes' length prefix.
fn put_chunk_head(w: &mut Writer<'_>, c: &Chunk) -> Result<(), FrameError> {
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

/// Chunks from this size (64 KiB) are written by [`encode_split`] without being copied into the frame buffer:
/// below it one copy costs less than the extra slices of a vectored write.
pub const SPLIT_MIN_CHUNK_BYTES: usize = 64 << 10;

/// The parts of a frame [`encode_split`] leaves out of the buffer: a large chunk's bytes and the frame's trailer,
/// to be written right after the buffer's bytes (a vectored write), in this order.
#[derive(Debug, Clone)]
pub struct SplitTail {
    pub bytes: Bytes,
    pub trailer: [u8; TRAILER_LEN],
}

/// Like [`encode`], but a Chunk of at least [`SPLIT_MIN_CHUNK_BYTES`] is not copied: `out` gets the frame's header
/// and the payload up to the chunk's bytes, and the returned [`SplitTail`] holds the bytes (a reference to the
/// same memory) and the CRC trailer. `out` followed by the tail's bytes and trailer is byte for byte what
/// [`encode`] writes. Why: the chunk's bytes were copied into the frame buffer only to be copied again by TLS (or
/// the kernel); a vectored write hands them over from where the shipper read them. Other frames: as [`encode`],
/// and `None`. On an error `out` is left as it was.
pub fn encode_split(frame: &Frame, max_payload: u32, out: &mut BytesMut) -> Result<Option<SplitTail>, FrameError> {
    let Frame::Chunk(chunk) = frame else {
        return encode(frame, max_payload, out).map(|()| None);
    };
    if chunk.bytes.len() < SPLIT_MIN_CHUNK_BYTES {
        return encode(frame, max_payload, out).map(|()| None);
    }
    let start = out.len();
    let result = encode_chunk_head(chunk, max_payload.min(MAX_PAYLOAD_LEN), out, start);
    if result.is_err() {
        out.truncate(start);
    }
    result.map(Some)
}

fn encode_chunk_head(
    chunk: &Chunk,
    max_payload: u32,
    out: &mut BytesMut,
    start: usize,
) -> Result<SplitTail, FrameError> {
    out.put_u8(FrameType::Chunk as u8);
    out.put_u8(0);
    out.put_u32(0);
    put_chunk_head(
        &mut Writer {
            out,
            frame: FrameType::Chunk.name(),
        },
        chunk,
    )?;
    let payload_len = out.len() - start - HEADER_LEN + chunk.bytes.len();
    let len = u32::try_from(payload_len)
        .ok()
        .filter(|len| *len <= max_payload)
        .ok_or_else(|| FrameError::Encode {
            frame: FrameType::Chunk.name(),
            field: "length",
            reason: format!("{payload_len}-byte payload, over the maximum of {max_payload} bytes"),
        })?;
    out[start + 2..start + HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    let head_crc = crc32c::crc32c(&out[start..]);
    // The chunk's CRC when the shipper has it (combined, no pass over the bytes), else one pass over them.
    let crc = match chunk.crcs.bytes {
        Some(bytes_crc) => segment_format::crc_combine::crc32c_combine(head_crc, bytes_crc, chunk.bytes.len()),
        None => crc32c::crc32c_append(head_crc, &chunk.bytes),
    };
    Ok(SplitTail {
        bytes: chunk.bytes.clone(),
        trailer: crc.to_be_bytes(),
    })
}

/// A LinkMeta piece's sizes: the document within its part's cap, the piece within the document. `Err` names the
/// field at fault.
fn check_meta_piece(part: MetaPart, size: u64, position: u64, len: u64) -> Result<(), (&'static str, String)> {
    if size > part.max_size() {
        return Err((
            "size",
            format!(
                "a {size}-byte {}, over the maximum of {} bytes",
                part.name(),
                part.max_size()
            ),
        ));
    }
    if position.checked_add(len).is_none_or(|end| end > size) {
        return Err((
            "bytes",
            format!(
                "{len} bytes at position {position} run past the {size}-byte {}",
                part.name()
            ),
        ));
    }
    Ok(())
}

/// A MirrorLayout's segments: at most [`MAX_LAYOUT_SEGMENTS_PER_FRAME`], bases strictly increasing.
fn check_layout(segments: &[LayoutSegment]) -> Result<(), String> {
    if segments.len() > MAX_LAYOUT_SEGMENTS_PER_FRAME {
        return Err(format!(
            "{} segments, at most {MAX_LAYOUT_SEGMENTS_PER_FRAME} per frame",
            segments.len()
        ));
    }
    if segments.windows(2).any(|w| w[0].base >= w[1].base) {
        return Err("segment bases are not strictly increasing".into());
    }
    Ok(())
}

/// Most segments one SegmentReplace may replace: the count travels as a `u16`.
pub const MAX_REPLACED_SEGMENTS: usize = u16::MAX as usize;

/// Replaced bases: at least one, at most [`MAX_REPLACED_SEGMENTS`], strictly increasing.
fn check_replaced_bases(bases: &[i64]) -> Result<(), String> {
    if bases.is_empty() || bases.len() > MAX_REPLACED_SEGMENTS {
        return Err(format!("{} replaced bases (1..={MAX_REPLACED_SEGMENTS})", bases.len()));
    }
    if bases.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("{bases:?} is not strictly increasing"));
    }
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

/// Reads what [`put_companions`] wrote.
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

/// What the header of a complete-enough buffer says.
struct Header {
    frame_type: u8,
    flags: u8,
    length: u32,
}

/// Reads the header at the start of `buf` (at stream offset `offset`) if the six
/// bytes are there, refusing an oversized length at once.
fn peek_header(buf: &[u8], offset: u64, max_payload: u32) -> Result<Option<Header>, FrameError> {
    // TLS records start with their content type (0x15 alert, 0x16 handshake), then
    // major version 3; no frame type has these codes, so the check is unambiguous.
    if let [record @ (TLS_ALERT | TLS_HANDSHAKE), 0x03, ..] = buf {
        if offset == 0 {
            return Err(FrameError::PeerSpeaksTls { record: *record });
        }
    }
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
    let max = max_payload.min(MAX_PAYLOAD_LEN);
    if length > max {
        return Err(FrameError::Oversized {
            offset,
            declared: u64::from(length),
            max: u64::from(max),
        });
    }
    Ok(Some(Header {
        frame_type: header[0],
        flags: header[1],
        length,
    }))
}

/// Checks CRC, type and flags of the complete frame `bytes`, then decodes its payload.
fn decode_complete(bytes: Bytes, header: &Header, offset: u64) -> Result<Frame, FrameError> {
    let end = HEADER_LEN + header.length as usize;
    let stored = u32::from_be_bytes([bytes[end], bytes[end + 1], bytes[end + 2], bytes[end + 3]]);
    if header.frame_type == FrameType::Chunk as u8
        && header.flags == KNOWN_FLAGS
        && header.length as usize >= COMBINE_MIN_CHUNK_BYTES
    {
        if let Some(chunk) = decode_chunk_hashing_batches(&bytes, header, offset, stored) {
            return Ok(chunk);
        }
        // Not decodable, or the CRC does not match: the general path below names the error, as always.
    }
    let computed = crc32c::crc32c(&bytes[..end]);
    if stored != computed {
        return Err(FrameError::Crc {
            offset,
            frame_type: header.frame_type,
            length: header.length,
            stored,
            computed,
        });
    }
    let frame_type = FrameType::from_code(header.frame_type).ok_or(FrameError::UnknownType {
        offset,
        frame_type: header.frame_type,
    })?;
    if header.flags & !KNOWN_FLAGS != 0 {
        return Err(FrameError::UnknownFlags {
            offset,
            frame_type: header.frame_type,
            flags: header.flags,
        });
    }
    let reader = Reader::new(
        bytes.slice(HEADER_LEN..end),
        offset + HEADER_LEN as u64,
        frame_type.name(),
    );
    decode_payload(frame_type, reader)
}

/// A large Chunk frame, its CRC checked in one pass that also gives every large v2 batch's own CRC (recorded in
/// [`ChunkCrcs::batches`] for the applier's batch checks, which then hash nothing again): the chunk's bytes are
/// hashed batch body by batch body and the pieces combined ([`hash_batches`]). `None` when the payload does not
/// decode or the CRC does not match: the caller then checks the frame the general way, which reports the same
/// error as ever. Nothing decoded here is used before the CRC matched.
fn decode_chunk_hashing_batches(bytes: &Bytes, header: &Header, offset: u64, stored: u32) -> Option<Frame> {
    let end = HEADER_LEN + header.length as usize;
    let reader = Reader::new(
        bytes.slice(HEADER_LEN..end),
        offset + HEADER_LEN as u64,
        FrameType::Chunk.name(),
    );
    let Ok(Frame::Chunk(mut chunk)) = decode_payload(FrameType::Chunk, reader) else {
        return None;
    };
    // The chunk's bytes end the payload (the decoder refuses trailing bytes); make sure they are those very bytes.
    let head_end = end.checked_sub(chunk.bytes.len())?;
    let tail = bytes.get(head_end..end)?;
    if tail.as_ptr() != chunk.bytes.as_ptr() {
        return None;
    }
    let (bytes_crc, batches) = hash_batches(&chunk.bytes);
    let crc = segment_format::crc_combine::crc32c_combine(
        crc32c::crc32c(bytes.get(..head_end)?),
        bytes_crc,
        chunk.bytes.len(),
    );
    if crc != stored {
        return None;
    }
    chunk.crcs = ChunkCrcs {
        bytes: Some(bytes_crc),
        batches,
    };
    Some(Frame::Chunk(chunk))
}

/// The CRC-32C of `bytes` (a chunk: whole v2 batches), computed so that each batch of at least
/// [`COMBINE_MIN_FRAME_BYTES`] also gets its own CRC (of its bytes from the attributes on) without a second pass:
/// its first 21 bytes and its body are hashed apart and combined. Smaller batches, and whatever does not parse as
/// a v2 batch (the applier's checks report it), are hashed as they come.
fn hash_batches(bytes: &[u8]) -> (u32, Vec<KnownCrc>) {
    use segment_format::batch::ATTRIBUTES_OFFSET;
    let mut crc = PrefixCrc::default();
    let mut known = Vec::new();
    let mut at = 0usize;
    while let Some(rest) = bytes.get(at..).filter(|r| !r.is_empty()) {
        // Offset (8), length (4), leader epoch (4), magic (1): a v2 batch of `12 + length` bytes.
        let size = match rest.get(8..12) {
            Some(l) => usize::try_from(i32::from_be_bytes([l[0], l[1], l[2], l[3]]))
                .ok()
                .map(|l| l + 12),
            None => None,
        };
        let batch = size
            .filter(|s| *s >= COMBINE_MIN_FRAME_BYTES && rest.get(16) == Some(&2))
            .and_then(|s| rest.get(..s));
        match batch {
            Some(batch) => {
                let body_crc = crc32c::crc32c(batch.get(ATTRIBUTES_OFFSET..).unwrap_or_default());
                crc.append_parts(batch, Some(body_crc));
                known.push(KnownCrc {
                    position: at as u64,
                    size: batch.len() as u64,
                    crc32c: body_crc,
                });
                at += batch.len();
            }
            None => match size.and_then(|s| rest.get(..s)).filter(|b| b.len() > ATTRIBUTES_OFFSET) {
                Some(small) => {
                    crc.append_parts(small, None);
                    at += small.len();
                }
                None => {
                    crc.append_parts(rest, None);
                    break;
                }
            },
        }
    }
    (crc.value(), known)
}

fn decode_payload(frame_type: FrameType, mut r: Reader) -> Result<Frame, FrameError> {
    let frame = match frame_type {
        FrameType::Hello => {
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
            Frame::Hello(Hello {
                min_version,
                max_version,
                features_supported,
                features_required,
                role,
                link,
                source_cluster_id,
                software,
                shipper_node_id,
            })
        }
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
        FrameType::SegmentSeal => {
            let partition = r.partition()?;
            let segment_base = r.offset("segment_base")?;
            let final_size = r.u64("final_size")?;
            let log_sha256 = r.sha256("log_sha256")?;
            let companions = read_companions(&mut r)?;
            Frame::SegmentSeal(SegmentSeal {
                partition,
                segment_base,
                final_size,
                log_sha256,
                companions,
            })
        }
        FrameType::Ack => Frame::Ack(r.position()?),
        FrameType::Resume => {
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
            if r.remaining() > 0 {
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
                Frame::ResumeWithEnds {
                    positions: points,
                    ends,
                }
            } else {
                Frame::Resume(points)
            }
        }
        FrameType::Truncate => {
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
            Frame::Truncate(Truncate {
                partition,
                truncate_to,
                segment_base,
                position,
                mode,
                mirror_end_offset,
                mirror_epoch,
                source_epoch,
                source_end_offset,
            })
        }
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
        FrameType::SourceProgress => {
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
            Frame::SourceProgress(SourceProgress {
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
            })
        }
        FrameType::Claim => Frame::Claim(Claim {
            partition: r.partition()?,
            leader_epoch: r.epoch("leader_epoch")?,
        }),
        FrameType::ClaimResult => {
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
            Frame::ClaimResult(ClaimResult { partition, verdict })
        }
        FrameType::Revoke => Frame::Revoke(Revoke {
            partition: r.partition()?,
            holder_node: r.epoch("holder_node")?,
            holder_epoch: r.epoch("holder_epoch")?,
        }),
        FrameType::Roll => {
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
            Frame::Roll(Roll {
                partition,
                segment_base,
                final_size,
                next_offset,
                log_sha256,
            })
        }
        FrameType::MirrorLayout => {
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
            Frame::MirrorLayout(MirrorLayout {
                partition,
                last,
                segments,
            })
        }
        FrameType::LinkMeta => {
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
            Frame::LinkMeta(LinkMetaPiece {
                version,
                part,
                size,
                sha256,
                position,
                bytes,
            })
        }
        FrameType::LinkId => {
            let link_id = r.string("link_id")?;
            if let Err(reason) = check_link_id(&link_id) {
                r.back(link_id.len() + 2);
                return Err(r.fail("link_id", reason));
            }
            Frame::LinkId(LinkId { link_id })
        }
        FrameType::SegmentReplace => {
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
                    companions: read_companions(&mut r)?,
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
            Frame::SegmentReplace(SegmentReplace {
                partition,
                replaced_bases,
                position,
                bytes,
                end,
            })
        }
    };
    r.finish()?;
    Ok(frame)
}

/// Decodes one frame from the start of `buf`, which begins at stream offset
/// `offset`: `Ok(None)` when more bytes are needed, else the frame and the bytes it took.
pub fn decode(buf: &[u8], offset: u64, max_payload: u32) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(header) = peek_header(buf, offset, max_payload)? else {
        return Ok(None);
    };
    let total = FRAME_OVERHEAD + header.length as usize;
    let Some(bytes) = buf.get(..total) else {
        return Ok(None);
    };
    let frame = decode_complete(Bytes::copy_from_slice(bytes), &header, offset)?;
    Ok(Some((frame, total)))
}

/// `tokio_util` codec for a `Framed` stream. After an error the stream is not
/// resynchronised: the connection is to be closed (a length cannot be trusted
/// once a frame failed), and the future tail driver resumes on a new one.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_payload: u32,
    /// Stream offset of the next byte to decode (for error messages).
    offset: u64,
}

impl FrameCodec {
    /// A codec refusing payloads over `max_payload` (clamped to [`MAX_PAYLOAD_LEN`]).
    pub fn new(max_payload: u32) -> FrameCodec {
        FrameCodec {
            max_payload: max_payload.min(MAX_PAYLOAD_LEN),
            offset: 0,
        }
    }

    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Stream offset of the next byte to decode.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

impl Default for FrameCodec {
    fn default() -> FrameCodec {
        FrameCodec::new(MAX_PAYLOAD_LEN)
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let Some(header) = peek_header(src, self.offset, self.max_payload)? else {
            return Ok(None);
        };
        let total = FRAME_OVERHEAD + header.length as usize;
        if src.len() < total {
            // Bounded: `total` is at most the maximum payload plus the overhead.
            src.reserve(total - src.len());
            return Ok(None);
        }
        let bytes = src.split_to(total).freeze();
        let offset = self.offset;
        self.offset += total as u64;
        decode_complete(bytes, &header, offset).map(Some)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => {
                let need = match peek_header(src, self.offset, self.max_payload)? {
                    Some(h) => FRAME_OVERHEAD as u64 + u64::from(h.length),
                    None => HEADER_LEN as u64,
                };
                let have = src.len() as u64;
                src.advance(src.len());
                Err(FrameError::Truncated {
                    offset: self.offset,
                    have,
                    need,
                })
            }
        }
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        encode(&frame, self.max_payload, dst)
    }
}

impl Encoder<&Frame> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        encode(frame, self.max_payload, dst)
    }
}
