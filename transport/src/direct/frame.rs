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
//!
//! Here: the envelope, the frame types and the codec; each frame kind's payload is written by `put` and read by
//! `read`, one function per kind.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::error::FrameError;
use super::payload::{
    Chunk, ChunkCrcs, Claim, ClaimResult, Goodbye, Hello, HelloAck, LayoutSegment, LinkId, LinkMetaPiece, LogEnd,
    LogStart, MetaPart, MirrorLayout, Position, Reader, Refuse, Revoke, Roll, SegmentReplace, SegmentSeal,
    SourceProgress, Truncate, Writer, MAX_LAYOUT_SEGMENTS_PER_FRAME,
};
use segment_format::crc_combine::{PrefixCrc, COMBINE_MIN_FRAME_BYTES};
use segment_format::log::KnownCrc;

mod put;
mod read;

use put::{encode_payload, put_chunk_head};
use read::decode_payload;

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
/// once a frame failed), and the link resumes on a new one.
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
