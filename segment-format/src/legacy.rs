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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> DeepLimits {
        DeepLimits::default()
    }

    /// (offset, timestamp, key, value) of each message.
    type Collected = Vec<(i64, i64, Option<Vec<u8>>, Option<Vec<u8>>)>;

    fn collect(frame: &[u8]) -> Result<Collected, ParseError> {
        let mut out = vec![];
        for_each_message(frame, &limits(), |m| {
            out.push((
                m.offset,
                m.timestamp,
                m.key.map(<[u8]>::to_vec),
                m.value.map(<[u8]>::to_vec),
            ));
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    fn specs() -> Vec<LegacySpec> {
        vec![
            LegacySpec {
                offset: 40,
                timestamp: 1000,
                key: Some(b"a".to_vec()),
                value: Some(b"one".to_vec()),
            },
            LegacySpec {
                offset: 41,
                timestamp: 3000,
                key: None,
                value: Some(vec![9; 500]),
            },
            LegacySpec {
                offset: 43,
                timestamp: 2000,
                key: Some(vec![]),
                value: None,
            },
        ]
    }

    #[test]
    fn v0_and_v1_byte_layout() {
        let v0 = encode_message(7, 0, 999, TimestampType::CreateTime, Some(b"k"), Some(b"val"));
        let mut expected = vec![];
        expected.extend_from_slice(&7i64.to_be_bytes());
        expected.extend_from_slice(&(14i32 + 1 + 3).to_be_bytes());
        expected.extend_from_slice(&[0; 4]);
        expected.extend_from_slice(&[0, 0]); // magic 0, attributes 0
        expected.extend_from_slice(&1i32.to_be_bytes());
        expected.push(b'k');
        expected.extend_from_slice(&3i32.to_be_bytes());
        expected.extend_from_slice(b"val");
        let crc = crc32fast::hash(&expected[16..]);
        expected[12..16].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(v0, expected);

        let v1 = encode_message(8, 1, 1234, TimestampType::LogAppendTime, None, Some(b""));
        assert_eq!(v1.len(), 12 + 22);
        assert_eq!(&v1[16..18], &[1, 0x08]);
        assert_eq!(&v1[18..26], &1234i64.to_be_bytes());
        assert_eq!(&v1[26..30], &(-1i32).to_be_bytes());
        assert_eq!(&v1[30..34], &0i32.to_be_bytes());
        let m = parse_message(&v1).unwrap();
        verify_crc(&v1, &m).unwrap();
        assert_eq!((m.key, m.value, m.timestamp), (None, Some(&b""[..]), Some(1234)));
        assert_eq!(m.timestamp_type(), Some(TimestampType::LogAppendTime));
    }

    #[test]
    fn plain_messages_walk_and_shallow_info() {
        for magic in [0i8, 1] {
            let f = encode_message(5, magic, 77, TimestampType::CreateTime, Some(b"k"), None);
            let ts = if magic == 0 { -1 } else { 77 };
            assert_eq!(collect(&f).unwrap(), vec![(5, ts, Some(b"k".to_vec()), None)]);
            let info = shallow_info(&f, 100).unwrap();
            assert_eq!((info.position, info.size, info.magic), (100, f.len() as u64, magic));
            assert_eq!((info.base_offset, info.last_offset, info.records_count), (5, 5, 1));
            assert_eq!(info.max_timestamp, ts);
            assert_eq!(info.partition_leader_epoch, -1);
        }
    }

    #[test]
    fn compressed_wrappers_round_trip_with_absolute_offsets() {
        for magic in [0i8, 1] {
            for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
                let w = encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &specs());
                let m = parse_message(&w).unwrap();
                verify_crc(&w, &m).unwrap();
                assert_eq!(m.offset, 43);
                let got = collect(&w).unwrap();
                let want: Vec<_> = specs()
                    .into_iter()
                    .map(|s| (s.offset, if magic == 0 { -1 } else { s.timestamp }, s.key, s.value))
                    .collect();
                assert_eq!(got, want, "magic {magic} {codec:?}");
                let shallow = shallow_info(&w, 0).unwrap();
                assert_eq!((shallow.base_offset, shallow.records_count), (43, -1));
                assert_eq!(shallow.max_timestamp, if magic == 0 { -1 } else { 3000 });
                let deep = deep_batch_info(&w, 0, &limits()).unwrap();
                assert_eq!((deep.base_offset, deep.last_offset, deep.records_count), (40, 43, 3));
            }
        }
    }

    #[test]
    fn v1_relative_offsets_and_log_append_time() {
        let w = encode_wrapper(1, Compression::Gzip, TimestampType::LogAppendTime, 5555, &specs());
        // Inner offsets are stored relative: 0, 1, 3.
        let m = parse_message(&w).unwrap();
        let mut inner = vec![];
        walk_inner(&m, Compression::Gzip, m.value.unwrap(), &limits(), |v, _| {
            inner.push(v.offset);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(inner, vec![0, 1, 3]);
        let got = collect(&w).unwrap();
        assert_eq!(
            got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(),
            vec![(40, 5555), (41, 5555), (43, 5555)]
        );
        // A wrapper offset of 0 (old librdkafka) means base 0.
        let mut zero = w.clone();
        zero[..8].copy_from_slice(&0i64.to_be_bytes());
        assert_eq!(
            collect(&zero).unwrap().iter().map(|g| g.0).collect::<Vec<_>>(),
            vec![0, 1, 3]
        );
        // Wrapper offset below the last inner offset.
        let mut low = w;
        low[..8].copy_from_slice(&2i64.to_be_bytes());
        assert!(format!("{:?}", collect(&low).unwrap_err()).contains("below its last inner offset"));
    }

    #[test]
    fn magic_0_lz4_uses_the_broken_checksum() {
        let w = encode_wrapper(0, Compression::Lz4, TimestampType::CreateTime, -1, &specs());
        let m = parse_message(&w).unwrap();
        let v = m.value.unwrap();
        let correct = ((twox_hash::XxHash32::oneshot(0, &v[4..6]) >> 8) & 0xff) as u8;
        let broken = ((twox_hash::XxHash32::oneshot(0, &v[..6]) >> 8) & 0xff) as u8;
        assert_eq!(v[6], broken);
        assert_ne!(broken, correct, "this sample must tell the two apart");
        assert_eq!(collect(&w).unwrap().len(), 3);
    }

    #[test]
    fn inner_defects_are_reported() {
        let inner_ok = encode_message(0, 1, 1, TimestampType::CreateTime, None, Some(b"x"));
        let wrap = |stream: &[u8], magic: i8, codec: Compression| {
            let value = compression::compress_for_magic(codec, stream, magic);
            encode_raw(
                10,
                magic,
                attributes(magic, codec, TimestampType::CreateTime),
                1,
                None,
                Some(&value),
            )
        };
        let expect_at = |frame: Vec<u8>, needle: &str, at: u64| {
            let err = collect(&frame).unwrap_err();
            let ParseError::Corrupt {
                position,
                offset,
                defect,
            } = &err
            else {
                panic!("{err:?}")
            };
            assert!(defect.to_string().contains(needle), "{needle}: {defect}");
            assert_eq!((*position, *offset), (at, Some(10)), "{needle}");
        };
        let expect = |frame: Vec<u8>, needle: &str| expect_at(frame, needle, 0);
        // Inner CRC.
        let mut bad_crc = inner_ok.clone();
        bad_crc[34] ^= 1; // the value byte
        expect(wrap(&bad_crc, 1, Compression::Gzip), "CRC mismatch");
        // Inner magic differs.
        let v0 = encode_message(0, 0, 1, TimestampType::CreateTime, None, Some(b"x"));
        expect(wrap(&v0, 1, Compression::Gzip), "differs from the wrapper's magic");
        // Nested compression.
        let nested = wrap(&inner_ok, 1, Compression::Gzip);
        expect(wrap(&nested, 1, Compression::Gzip), "must not be compressed");
        // Offsets not increasing.
        let mut two = inner_ok.clone();
        two.extend_from_slice(&inner_ok);
        expect(wrap(&two, 1, Compression::Gzip), "does not follow");
        // Partial message at the end.
        let mut partial = inner_ok.clone();
        partial.extend_from_slice(&inner_ok[..5]);
        expect(wrap(&partial, 1, Compression::Snappy), "5 bytes into a message header");
        let mut cut = inner_ok.clone();
        cut.pop();
        expect(wrap(&cut, 1, Compression::Gzip), "stream ends after");
        // Empty wrapper.
        expect(wrap(&[], 1, Compression::Gzip), "without inner messages");
        // zstd is not a legacy codec.
        expect_at(
            wrap(&inner_ok, 1, Compression::Zstd),
            "zstd",
            LEGACY_ATTRIBUTES_OFFSET as u64,
        );
        // v0 wrapper offset must be the last inner offset.
        let v0_inner = encode_message(3, 0, 0, TimestampType::CreateTime, None, Some(b"x"));
        expect(
            wrap(&v0_inner, 0, Compression::Gzip),
            "differs from its last inner offset 3",
        );
    }

    #[test]
    fn structural_defects_of_a_message() {
        let good = encode_message(1, 1, 5, TimestampType::CreateTime, Some(b"abc"), Some(b"de"));
        let err_at = |f: &[u8]| match parse_message(f) {
            Err(ParseError::Corrupt { position, defect, .. }) => (position, defect.to_string()),
            other => panic!("{other:?}"),
        };
        let mut bad_key = good.clone();
        bad_key[26..30].copy_from_slice(&100i32.to_be_bytes());
        assert_eq!(err_at(&bad_key).0, 26);
        let mut neg = good.clone();
        neg[26..30].copy_from_slice(&(-2i32).to_be_bytes());
        assert!(err_at(&neg).1.contains("negative"));
        let mut short_val = good.clone();
        short_val[33..37].copy_from_slice(&1i32.to_be_bytes());
        assert!(err_at(&short_val).1.contains("1 bytes after the value"));
        let mut magic = good.clone();
        magic[16] = 3;
        assert_eq!(err_at(&magic).0, 16);
        let mut small = good.clone();
        small[8..12].copy_from_slice(&20i32.to_be_bytes());
        assert!(err_at(&small).1.contains("message size 20"));
        assert!(parse_message(&good[..good.len() - 1]).unwrap_err().is_incomplete());
        let mut crc = good.clone();
        crc[38] ^= 0x10;
        let m = parse_message(&crc).unwrap();
        assert!(matches!(
            verify_crc(&crc, &m),
            Err(ParseError::Corrupt { position: 12, .. })
        ));
    }

    proptest! {
        #[test]
        fn wrapper_round_trip(
            magic in 0i8..2,
            codec_id in 1u8..4,
            gaps in proptest::collection::vec((1i64..5, 0i64..10_000, proptest::option::of(proptest::collection::vec(any::<u8>(), 0..50))), 1..15),
        ) {
            let codec = Compression::from_id(codec_id).unwrap();
            let mut offset = 1000;
            let specs: Vec<LegacySpec> = gaps.into_iter().map(|(g, ts, value)| {
                offset += g;
                LegacySpec { offset, timestamp: ts, key: None, value }
            }).collect();
            let w = encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &specs);
            let got = collect(&w).unwrap();
            let offsets: Vec<i64> = got.iter().map(|g| g.0).collect();
            // v0 stores absolute offsets, v1 relative ones re-based on the wrapper: both
            // must come back as the absolute offsets encoded.
            let want: Vec<i64> = specs.iter().map(|s| s.offset).collect();
            prop_assert_eq!(offsets, want);
            prop_assert_eq!(got.iter().map(|g| g.3.clone()).collect::<Vec<_>>(), specs.iter().map(|s| s.value.clone()).collect::<Vec<_>>());
        }

        #[test]
        fn hostile_frames_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 12..300), magic in 0u8..2, codec in 0u8..8) {
            let len = (bytes.len() - 12) as i32;
            bytes[8..12].copy_from_slice(&len.to_be_bytes());
            if bytes.len() > 17 {
                bytes[16] = magic;
                bytes[17] = codec;
            }
            let _ = parse_message(&bytes);
            let _ = shallow_info(&bytes, 0);
            let _ = collect(&bytes);
        }

        #[test]
        fn mutations_are_caught(flip_at in any::<usize>(), x in 1u8..=255, magic in 0i8..2, codec_id in 0u8..4) {
            let codec = Compression::from_id(codec_id).unwrap();
            let good = if codec == Compression::None {
                encode_message(9, magic, 3, TimestampType::CreateTime, Some(b"key"), Some(b"value"))
            } else {
                encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &specs())
            };
            let mut b = good.clone();
            let i = 16 + flip_at % (b.len() - 16);
            b[i] ^= x;
            if let Ok(m) = parse_message(&b) {
                prop_assert!(verify_crc(&b, &m).is_err());
            }
            let _ = collect(&b);
        }
    }
}
