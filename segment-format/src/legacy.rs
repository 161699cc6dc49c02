//! Legacy magic 0/1 messages (`LegacyRecord`, `AbstractLegacyRecordBatch`).
//!
//! Brokers since 4.0 always write magic 2, but segments written before that may
//! still hold v0/v1 messages, and 4.x still serves them, so a replicator must
//! read and verify them. One frame is one message:
//! `offset i64 | size i32 | crc u32 | magic i8 | attributes i8 | [timestamp i64, v1] |
//! keyLength i32 | key | valueLength i32 | value`, lengths of -1 meaning null.
//! The CRC is CRC-32 (IEEE) over `[magic, end)`, i.e. from byte 16 of the frame.
//!
//! A compressed message set is a *wrapper* message whose value is a compressed
//! stream of inner messages in the same frame layout. The wrapper's offset is the
//! last inner offset; v1 inner offsets are relative
//! (absolute = wrapperOffset - lastInnerOffset + innerOffset), v0 ones absolute.
//! Knowing the first offset of a wrapper therefore needs decompression: the
//! shallow [`shallow_info`] reports `base_offset = last_offset` and
//! `records_count = -1` for wrappers, and [`deep_batch_info`] the exact values.

use std::io::{BufReader, Read};
use std::ops::ControlFlow;

use crate::batch::{
    be_i32, be_i64, be_u32, read_frame_prefix, BatchInfo, Compression, TimestampType, LOG_OVERHEAD, MAGIC_OFFSET,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_TIMESTAMP,
};
use crate::compression;
use crate::error::{Defect, ParseError};
use crate::record::{DeepLimits, STREAM_BUFFER_BYTES};

/// Position of the CRC in a legacy frame.
pub const LEGACY_CRC_OFFSET: usize = 12;
/// Position of the attributes byte in a legacy frame.
pub const LEGACY_ATTRIBUTES_OFFSET: usize = 17;
/// Position of the v1 timestamp in a legacy frame.
pub const LEGACY_TIMESTAMP_OFFSET: usize = 18;
/// `LegacyRecord.RECORD_OVERHEAD_V0`: smallest v0 message (size field value).
pub const RECORD_OVERHEAD_V0: usize = 14;
/// `LegacyRecord.RECORD_OVERHEAD_V1`: smallest v1 message (size field value).
pub const RECORD_OVERHEAD_V1: usize = 22;
/// Timestamp-type attribute bit (v1).
const TIMESTAMP_TYPE_MASK: i8 = 0x08;
/// Codec attribute bits.
const CODEC_MASK: i8 = 0x07;

/// Smallest message size for `magic` (0 or 1).
pub fn record_overhead(magic: i8) -> usize {
    if magic == 0 {
        RECORD_OVERHEAD_V0
    } else {
        RECORD_OVERHEAD_V1
    }
}

/// One legacy message, borrowed from its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyMessage<'a> {
    pub offset: i64,
    /// The frame's size field: bytes after it.
    pub size: i32,
    pub crc: u32,
    pub magic: i8,
    pub attributes: i8,
    /// v1 only.
    pub timestamp: Option<i64>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

impl LegacyMessage<'_> {
    pub fn codec_id(&self) -> u8 {
        (self.attributes & CODEC_MASK) as u8
    }

    pub fn compression(&self) -> Option<Compression> {
        Compression::from_id(self.codec_id())
    }

    pub fn is_compressed(&self) -> bool {
        self.codec_id() != 0
    }

    /// `None` for magic 0, which has no timestamps.
    pub fn timestamp_type(&self) -> Option<TimestampType> {
        match (self.magic, self.attributes & TIMESTAMP_TYPE_MASK != 0) {
            (0, _) => None,
            (_, true) => Some(TimestampType::LogAppendTime),
            (_, false) => Some(TimestampType::CreateTime),
        }
    }

    /// Bytes the frame occupies.
    pub fn frame_size(&self) -> usize {
        LOG_OVERHEAD + self.size as usize
    }
}

fn corrupt(position: usize, offset: i64, defect: Defect) -> ParseError {
    ParseError::Corrupt {
        position: position as u64,
        offset: Some(offset),
        defect,
    }
}

fn malformed(position: usize, offset: i64, message: String) -> ParseError {
    corrupt(position, offset, Defect::MalformedRecord { message })
}

/// Prefix checks shared by the shallow and the full parser: the whole frame is
/// present, magic 0/1, size at least the magic's overhead.
fn check_frame(frame: &[u8]) -> Result<(i64, i32, i8), ParseError> {
    let prefix = read_frame_prefix(frame)?;
    if !(0..=1).contains(&prefix.magic) {
        return Err(corrupt(
            MAGIC_OFFSET,
            prefix.base_offset,
            Defect::BadMagic { magic: prefix.magic },
        ));
    }
    if (prefix.length as usize) < record_overhead(prefix.magic) {
        return Err(corrupt(
            8,
            prefix.base_offset,
            Defect::BadLength {
                field: "message size",
                value: i64::from(prefix.length),
            },
        ));
    }
    let size = prefix.size_in_bytes();
    if (frame.len() as u64) < size {
        return Err(ParseError::Incomplete {
            position: 0,
            offset: Some(prefix.base_offset),
            needed: size,
            available: frame.len() as u64,
        });
    }
    Ok((prefix.base_offset, prefix.length, prefix.magic))
}

/// Read a `length i32 | bytes` field at `at`; -1 is null. Returns (value, end).
fn delimited<'a>(msg: &'a [u8], at: usize, offset: i64, field: &str) -> Result<(Option<&'a [u8]>, usize), ParseError> {
    let Some(len_bytes) = msg.get(at..at + 4) else {
        return Err(malformed(at, offset, format!("message ends before its {field} length")));
    };
    let len = be_i32(len_bytes, 0);
    if len == -1 {
        return Ok((None, at + 4));
    }
    if len < 0 {
        return Err(malformed(at, offset, format!("{field} length {len} is negative")));
    }
    let start = at + 4;
    match msg.get(start..start + len as usize) {
        Some(b) => Ok((Some(b), start + len as usize)),
        None => Err(malformed(
            at,
            offset,
            format!(
                "{field} length {len} exceeds the {} bytes left in the message",
                msg.len() - start
            ),
        )),
    }
}

/// Parse the legacy message at the start of `frame` (which may extend past it).
/// Checks the structure (magic, size, key/value lengths, no bytes after the value),
/// not the CRC ([`verify_crc`]). Positions are relative to `frame`.
pub fn parse_message(frame: &[u8]) -> Result<LegacyMessage<'_>, ParseError> {
    let (offset, size, magic) = check_frame(frame)?;
    let msg = &frame[..LOG_OVERHEAD + size as usize];
    let timestamp = (magic == 1).then(|| be_i64(msg, LEGACY_TIMESTAMP_OFFSET));
    let key_at = if magic == 0 { 18 } else { 26 };
    let (key, value_at) = delimited(msg, key_at, offset, "key")?;
    let (value, end) = delimited(msg, value_at, offset, "value")?;
    if end != msg.len() {
        return Err(malformed(
            end,
            offset,
            format!("{} bytes after the value, inside the message size", msg.len() - end),
        ));
    }
    Ok(LegacyMessage {
        offset,
        size,
        crc: be_u32(msg, LEGACY_CRC_OFFSET),
        magic,
        attributes: msg[LEGACY_ATTRIBUTES_OFFSET] as i8,
        timestamp,
        key,
        value,
    })
}

/// CRC-32 (IEEE) over `[16, 12 + size)` of a whole legacy frame (`frame` is exactly it).
pub fn compute_crc(frame: &[u8]) -> u32 {
    crc32fast::hash(frame.get(MAGIC_OFFSET..).unwrap_or_default())
}

/// Check the stored CRC of a legacy frame against the bytes it covers.
/// `frame` may extend past the message.
pub fn verify_crc(frame: &[u8], message: &LegacyMessage<'_>) -> Result<(), ParseError> {
    let whole = frame.get(..message.frame_size()).unwrap_or(frame);
    let computed = compute_crc(whole);
    if computed != message.crc {
        return Err(corrupt(
            LEGACY_CRC_OFFSET,
            message.offset,
            Defect::CrcMismatch {
                stored: message.crc,
                computed,
            },
        ));
    }
    Ok(())
}

/// What the log scan needs from a legacy frame, without decompressing; `position`
/// is the frame's place in its file. Wrappers report `base_offset = last_offset`
/// and `records_count = -1` (unknown). Only the framing is required (magic 0/1,
/// size >= 14, whole frame present): a v1 message too short for its timestamp
/// gets `max_timestamp = -1` here and is reported by [`parse_message`].
pub fn shallow_info(frame: &[u8], position: u64) -> Result<BatchInfo, ParseError> {
    let prefix = read_frame_prefix(frame)?;
    if !(0..=1).contains(&prefix.magic) {
        return Err(corrupt(
            MAGIC_OFFSET,
            prefix.base_offset,
            Defect::BadMagic { magic: prefix.magic },
        ));
    }
    let size = prefix.size_in_bytes();
    if (frame.len() as u64) < size {
        return Err(ParseError::Incomplete {
            position: 0,
            offset: Some(prefix.base_offset),
            needed: size,
            available: frame.len() as u64,
        });
    }
    let attributes = frame[LEGACY_ATTRIBUTES_OFFSET] as i8;
    let compressed = attributes & CODEC_MASK != 0;
    let max_timestamp = match frame.get(LEGACY_TIMESTAMP_OFFSET..LEGACY_TIMESTAMP_OFFSET + 8) {
        Some(ts) if prefix.magic == 1 && size >= (LOG_OVERHEAD + RECORD_OVERHEAD_V1) as u64 => be_i64(ts, 0),
        _ => NO_TIMESTAMP,
    };
    Ok(BatchInfo {
        position,
        size,
        magic: prefix.magic,
        base_offset: prefix.base_offset,
        last_offset: prefix.base_offset,
        max_timestamp,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        is_transactional: false,
        control: None,
        is_control: false,
        records_count: if compressed { -1 } else { 1 },
    })
}

/// [`shallow_info`] with the wrapper's true first offset and message count,
/// from a deep walk.
pub fn deep_batch_info(frame: &[u8], position: u64, limits: &DeepLimits) -> Result<BatchInfo, ParseError> {
    let mut info = shallow_info(frame, position)?;
    let stats = for_each_message(frame, limits, |_| ControlFlow::Continue(()))?;
    if let Some(first) = stats.first_offset {
        info.base_offset = first;
    }
    info.records_count = stats.messages as i32;
    Ok(info)
}

/// One message as a deep walk sees it: the frame itself, or an inner message of
/// a wrapper with its absolute offset.
#[derive(Debug, Clone, Copy)]
pub struct LegacyRecordView<'a> {
    /// 0-based index in the wrapper (0 for an uncompressed message).
    pub index: u32,
    /// Absolute offset.
    pub offset: i64,
    pub magic: i8,
    pub attributes: i8,
    /// Effective timestamp: -1 for magic 0; the wrapper's for LogAppendTime wrappers.
    pub timestamp: i64,
    pub timestamp_type: Option<TimestampType>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// What a deep walk of one legacy frame found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LegacyStats {
    pub messages: u32,
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    pub max_timestamp: Option<i64>,
    pub stopped_early: bool,
}

impl LegacyStats {
    fn add(&mut self, view: &LegacyRecordView<'_>) {
        self.messages += 1;
        self.first_offset.get_or_insert(view.offset);
        self.last_offset = Some(view.offset);
        self.max_timestamp = Some(self.max_timestamp.map_or(view.timestamp, |m| m.max(view.timestamp)));
    }
}

/// Walk the message(s) of one legacy frame: the message itself if uncompressed,
/// else every inner message of the wrapper (decompressing, streaming), each
/// checked: structure, CRC-32, same magic as the wrapper, not itself compressed,
/// inner offsets strictly increasing, at least one, no partial message at the
/// end, and the wrapper offset consistent with the last inner offset. The
/// wrapper's own CRC is not checked here ([`verify_crc`]). Positions are relative
/// to `frame`; problems inside a wrapper are reported at 0 with the inner index
/// and decompressed byte in the message.
pub fn for_each_message<F>(frame: &[u8], limits: &DeepLimits, mut f: F) -> Result<LegacyStats, ParseError>
where
    F: FnMut(&LegacyRecordView<'_>) -> ControlFlow<()>,
{
    let wrapper = parse_message(frame)?;
    let mut stats = LegacyStats::default();
    if !wrapper.is_compressed() {
        let view = LegacyRecordView {
            index: 0,
            offset: wrapper.offset,
            magic: wrapper.magic,
            attributes: wrapper.attributes,
            timestamp: wrapper.timestamp.unwrap_or(NO_TIMESTAMP),
            timestamp_type: wrapper.timestamp_type(),
            key: wrapper.key,
            value: wrapper.value,
        };
        stats.add(&view);
        stats.stopped_early = f(&view).is_break();
        return Ok(stats);
    }
    let codec = match wrapper.compression() {
        None => {
            return Err(corrupt(
                LEGACY_ATTRIBUTES_OFFSET,
                wrapper.offset,
                Defect::UnknownCodec {
                    codec: wrapper.codec_id(),
                },
            ))
        }
        Some(Compression::Zstd) => {
            return Err(malformed(
                LEGACY_ATTRIBUTES_OFFSET,
                wrapper.offset,
                "zstd is not allowed in a magic 0/1 wrapper".into(),
            ))
        }
        Some(c) => c,
    };
    let Some(value) = wrapper.value else {
        return Err(malformed(
            0,
            wrapper.offset,
            "compressed wrapper with a null value".into(),
        ));
    };
    // Pass 1 validates and finds the last inner offset; v1 offsets are relative to it.
    let summary = walk_inner(&wrapper, codec, value, limits, |_, _| ControlFlow::Continue(()))?;
    let Some((_, last_inner)) = summary else {
        return Err(malformed(
            0,
            wrapper.offset,
            "compressed wrapper without inner messages".into(),
        ));
    };
    let shift = if wrapper.magic == 0 {
        if last_inner != wrapper.offset {
            return Err(malformed(
                0,
                wrapper.offset,
                format!(
                    "wrapper offset {} differs from its last inner offset {last_inner}",
                    wrapper.offset
                ),
            ));
        }
        0
    } else if wrapper.offset == 0 {
        // "The outer offset may be 0 if this is produce data from certain versions of librdkafka."
        0
    } else if wrapper.offset < last_inner {
        return Err(malformed(
            0,
            wrapper.offset,
            format!(
                "wrapper offset {} is below its last inner offset {last_inner}",
                wrapper.offset
            ),
        ));
    } else {
        wrapper.offset - last_inner
    };
    walk_inner(&wrapper, codec, value, limits, |view, _| {
        let view = LegacyRecordView {
            offset: view.offset.wrapping_add(shift),
            ..*view
        };
        stats.add(&view);
        let flow = f(&view);
        stats.stopped_early = flow.is_break();
        flow
    })?;
    Ok(stats)
}

/// Stream the inner messages of `wrapper`, checking each; `f` gets them with
/// their stored (for v1: relative) offsets. Returns the first and last stored
/// inner offset, or `None` for an empty stream.
fn walk_inner<F>(
    wrapper: &LegacyMessage<'_>,
    codec: Compression,
    value: &[u8],
    limits: &DeepLimits,
    mut f: F,
) -> Result<Option<(i64, i64)>, ParseError>
where
    F: FnMut(&LegacyRecordView<'_>, u64) -> ControlFlow<()>,
{
    let at_wrapper = |message: String| malformed(0, wrapper.offset, message);
    let decompressor = compression::decompressing_reader_with(codec, value, limits.decompress_options(wrapper.magic))
        .map_err(|defect| corrupt(0, wrapper.offset, defect))?;
    let mut reader = BufReader::with_capacity(STREAM_BUFFER_BYTES, decompressor);
    let io_err = |e: std::io::Error| corrupt(0, wrapper.offset, compression::read_error_defect(codec, &e));
    let mut buf: Vec<u8> = Vec::new();
    let mut stream_pos = 0u64;
    let mut range: Option<(i64, i64)> = None;
    for index in 0u32.. {
        let here = |m: String| {
            at_wrapper(format!(
                "inner message {index} (byte {stream_pos} of the decompressed value): {m}"
            ))
        };
        buf.clear();
        let got = (&mut reader)
            .take(LOG_OVERHEAD as u64)
            .read_to_end(&mut buf)
            .map_err(io_err)?;
        if got == 0 {
            break;
        }
        if got < LOG_OVERHEAD {
            return Err(here(format!("stream ends {got} bytes into a message header")));
        }
        let size = be_i32(&buf, 8);
        if size < RECORD_OVERHEAD_V0 as i32 {
            return Err(here(format!(
                "message size {size} is below the minimum {RECORD_OVERHEAD_V0}"
            )));
        }
        if size as usize > limits.max_record_bytes {
            return Err(here(format!(
                "message size {size} is above the deep-validation limit of {} bytes",
                limits.max_record_bytes
            )));
        }
        let got = (&mut reader).take(size as u64).read_to_end(&mut buf).map_err(io_err)?;
        if got < size as usize {
            return Err(here(format!(
                "message size {size} but the stream ends after {got} bytes"
            )));
        }
        let inner = parse_message(&buf).map_err(|e| match e {
            ParseError::Corrupt { position, defect, .. } => {
                let what = match defect {
                    Defect::MalformedRecord { message } => message,
                    other => other.to_string(),
                };
                here(format!("byte {position} of the message: {what}"))
            }
            ParseError::Incomplete { .. } => here("message truncated".into()),
        })?;
        verify_crc(&buf, &inner).map_err(|e| match e {
            ParseError::Corrupt { defect, .. } => here(defect.to_string()),
            other => other,
        })?;
        if inner.magic != wrapper.magic {
            return Err(here(format!(
                "magic {} differs from the wrapper's magic {}",
                inner.magic, wrapper.magic
            )));
        }
        if inner.is_compressed() {
            return Err(here("inner messages must not be compressed".into()));
        }
        if let Some((_, last)) = range {
            if inner.offset <= last {
                return Err(here(format!("inner offset {} does not follow {last}", inner.offset)));
            }
        }
        range = Some((range.map_or(inner.offset, |r| r.0), inner.offset));
        let wrapper_ts = wrapper.timestamp_type() == Some(TimestampType::LogAppendTime);
        let view = LegacyRecordView {
            index,
            offset: inner.offset,
            magic: inner.magic,
            attributes: inner.attributes,
            timestamp: match (inner.timestamp, wrapper_ts) {
                (None, _) => NO_TIMESTAMP,
                (Some(_), true) => wrapper.timestamp.unwrap_or(NO_TIMESTAMP),
                (Some(t), false) => t,
            },
            timestamp_type: inner.timestamp.and(wrapper.timestamp_type()),
            key: inner.key,
            value: inner.value,
        };
        if f(&view, stream_pos).is_break() {
            return Ok(range);
        }
        stream_pos += buf.len() as u64;
    }
    Ok(range)
}

/// One message to encode with [`encode_wrapper`]: its absolute offset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LegacySpec {
    pub offset: i64,
    /// Ignored for magic 0.
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

fn attributes(magic: i8, codec: Compression, timestamp_type: TimestampType) -> i8 {
    let mut a = codec.id() as i8;
    if magic > 0 && timestamp_type == TimestampType::LogAppendTime {
        a |= TIMESTAMP_TYPE_MASK;
    }
    a
}

fn push_delimited(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(b) => {
            let len = i32::try_from(b.len()).expect("legacy field longer than i32::MAX");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// One frame as `LegacyRecord.write` lays it out (the attributes byte given).
fn encode_raw(
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // size, below
    out.extend_from_slice(&[0; 4]); // crc, below
    out.push(magic as u8);
    out.push(attributes as u8);
    if magic > 0 {
        out.extend_from_slice(&timestamp.to_be_bytes());
    }
    push_delimited(&mut out, key);
    push_delimited(&mut out, value);
    let size = i32::try_from(out.len() - LOG_OVERHEAD).expect("legacy message longer than i32::MAX");
    out[8..12].copy_from_slice(&size.to_be_bytes());
    let crc = compute_crc(&out);
    out[LEGACY_CRC_OFFSET..LEGACY_CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// An uncompressed v0/v1 message frame (`timestamp` ignored for v0).
///
/// # Panics
/// If `magic` is not 0 or 1, or a field exceeds `i32::MAX` bytes.
pub fn encode_message(
    offset: i64,
    magic: i8,
    timestamp: i64,
    timestamp_type: TimestampType,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    assert!(magic == 0 || magic == 1, "legacy magic must be 0 or 1, not {magic}");
    encode_raw(
        offset,
        magic,
        attributes(magic, Compression::None, timestamp_type),
        timestamp,
        key,
        value,
    )
}

/// A compressed wrapper as `MemoryRecordsBuilder` writes one for magic 0/1: inner
/// messages uncompressed, with relative offsets for v1 (absolute for v0) and, for
/// LogAppendTime, `log_append_time` as every timestamp; the wrapper has the last
/// offset, a null key, and as timestamp the append time or the largest inner
/// timestamp. Nothing is validated (tests build odd wrappers with it).
///
/// # Panics
/// If `magic` is not 0 or 1, or a field exceeds `i32::MAX` bytes.
pub fn encode_wrapper(
    magic: i8,
    codec: Compression,
    timestamp_type: TimestampType,
    log_append_time: i64,
    inner: &[LegacySpec],
) -> Vec<u8> {
    assert!(magic == 0 || magic == 1, "legacy magic must be 0 or 1, not {magic}");
    let base = inner.first().map_or(0, |m| m.offset);
    let mut stream = Vec::new();
    let mut max_timestamp = NO_TIMESTAMP;
    for m in inner {
        let timestamp = if timestamp_type == TimestampType::LogAppendTime {
            log_append_time
        } else {
            m.timestamp
        };
        max_timestamp = max_timestamp.max(timestamp);
        let offset = if magic > 0 { m.offset - base } else { m.offset };
        let attrs = attributes(magic, Compression::None, timestamp_type);
        stream.extend_from_slice(&encode_raw(
            offset,
            magic,
            attrs,
            timestamp,
            m.key.as_deref(),
            m.value.as_deref(),
        ));
    }
    let wrapper_ts = if timestamp_type == TimestampType::LogAppendTime {
        log_append_time
    } else {
        max_timestamp
    };
    let value = compression::compress_for_magic(codec, &stream, magic);
    encode_raw(
        inner.last().map_or(0, |m| m.offset),
        magic,
        attributes(magic, codec, timestamp_type),
        wrapper_ts,
        None,
        Some(&value),
    )
}

#[cfg(test)]
#[path = "legacy_tests.rs"]
mod tests;
