//! Record batch framing and the magic-2 batch header (`DefaultRecordBatch` in Kafka).
//!
//! Every Kafka `.log` file is a plain concatenation of frames that share the first
//! 17 bytes: `baseOffset i64 | length i32 | partitionLeaderEpoch i32 | magic i8`
//! (for legacy magic 0/1 the third field is the message CRC). A frame's size on disk
//! is `12 + length`. All integers are big-endian.
//!
//! The CRC of a magic-2 batch is CRC-32C over the bytes from the attributes field
//! (byte 21) to the end of the batch; it does *not* cover the base offset, length,
//! partition leader epoch, magic or the CRC itself, so a broker may restamp the
//! leader epoch without recomputing it.

use crate::error::{Defect, ParseError};

/// `offset i64 | size i32`: bytes before a frame's length-covered part.
pub const LOG_OVERHEAD: usize = 12;
/// Bytes up to and including the magic byte.
pub const HEADER_SIZE_UP_TO_MAGIC: usize = 17;
/// Position of the magic byte in every frame.
pub const MAGIC_OFFSET: usize = 16;
/// Position of the CRC in a magic-2 batch.
pub const CRC_OFFSET: usize = 17;
/// Position of the attributes in a magic-2 batch: the CRC covers `[21, end)`.
pub const ATTRIBUTES_OFFSET: usize = 21;
/// Size of a magic-2 batch header; the smallest valid v2 batch.
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// Smallest legal frame size (`LegacyRecord.RECORD_OVERHEAD_V0`): smaller is corrupt.
pub const MIN_FRAME_LENGTH: i32 = 14;
/// `NO_PARTITION_LEADER_EPOCH`.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// `NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// `NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;
/// `NO_TIMESTAMP`.
pub const NO_TIMESTAMP: i64 = -1;

/// Compression codec, attribute bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    pub fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return None,
        })
    }

    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Timestamp type, attribute bit 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// Batch attributes (low byte of the i16 field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attributes(pub i16);

impl Attributes {
    pub const COMPRESSION_MASK: i16 = 0x07;
    pub const TIMESTAMP_TYPE: i16 = 0x08;
    pub const TRANSACTIONAL: i16 = 0x10;
    pub const CONTROL: i16 = 0x20;
    pub const DELETE_HORIZON: i16 = 0x40;

    pub fn new(compression: Compression, timestamp_type: TimestampType, transactional: bool, control: bool) -> Self {
        let mut a = i16::from(compression.id());
        if timestamp_type == TimestampType::LogAppendTime {
            a |= Self::TIMESTAMP_TYPE;
        }
        if transactional {
            a |= Self::TRANSACTIONAL;
        }
        if control {
            a |= Self::CONTROL;
        }
        Attributes(a)
    }

    /// Codec id (0..=7); [`Compression::from_id`] rejects 5..=7.
    pub fn codec_id(self) -> u8 {
        (self.0 & Self::COMPRESSION_MASK) as u8
    }

    pub fn compression(self) -> Option<Compression> {
        Compression::from_id(self.codec_id())
    }

    pub fn timestamp_type(self) -> TimestampType {
        if self.0 & Self::TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn is_transactional(self) -> bool {
        self.0 & Self::TRANSACTIONAL != 0
    }

    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }

    pub fn has_delete_horizon(self) -> bool {
        self.0 & Self::DELETE_HORIZON != 0
    }
}

/// Every field of a magic-2 batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Bytes after the length field; the batch occupies `12 + length` bytes.
    pub length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: Attributes,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Total bytes of the batch on disk.
    pub fn size_in_bytes(&self) -> usize {
        LOG_OVERHEAD + self.length as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(i64::from(self.last_offset_delta))
    }

    /// Offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    pub fn is_control(&self) -> bool {
        self.attributes.is_control()
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes.is_transactional()
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }

    /// Last sequence, wrapping past `i32::MAX` to 0 like `DefaultRecordBatch.incrementSequence`.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta)
    }

    /// Serialise the 61-byte header. The CRC field is written as stored in `self.crc`;
    /// use [`seal_crc`] on the whole batch after the records are appended.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.push(self.magic as u8);
        out.extend_from_slice(&self.crc.to_be_bytes());
        out.extend_from_slice(&self.attributes.0.to_be_bytes());
        out.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.records_count.to_be_bytes());
    }
}

/// `DefaultRecordBatch.incrementSequence`.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// The 17-byte prefix every frame shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramePrefix {
    pub base_offset: i64,
    pub length: i32,
    pub magic: i8,
}

impl FramePrefix {
    pub fn size_in_bytes(&self) -> u64 {
        LOG_OVERHEAD as u64 + self.length as u64
    }
}

pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Read the 17-byte frame prefix at the start of `buf`, checking only what every
/// magic shares: enough bytes, `length >= 14`. Positions in errors are relative to `buf`.
pub fn read_frame_prefix(buf: &[u8]) -> Result<FramePrefix, ParseError> {
    if buf.len() < HEADER_SIZE_UP_TO_MAGIC {
        return Err(ParseError::Incomplete {
            position: 0,
            offset: None,
            needed: HEADER_SIZE_UP_TO_MAGIC as u64,
            available: buf.len() as u64,
        });
    }
    let base_offset = be_i64(buf, 0);
    let length = be_i32(buf, 8);
    let magic = buf[MAGIC_OFFSET] as i8;
    if length < MIN_FRAME_LENGTH {
        return Err(ParseError::Corrupt {
            position: 8,
            offset: Some(base_offset),
            defect: Defect::BadLength {
                field: "batch length",
                value: i64::from(length),
            },
        });
    }
    Ok(FramePrefix {
        base_offset,
        length,
        magic,
    })
}

/// Parse a magic-2 batch header from the start of `buf` (which may hold more
/// than this batch). Checks size >= 61 and that the whole batch is present; does
/// not check the CRC (see [`verify_crc`]).
pub fn parse_header(buf: &[u8]) -> Result<BatchHeader, ParseError> {
    let prefix = read_frame_prefix(buf)?;
    if prefix.magic != 2 {
        return Err(ParseError::Corrupt {
            position: MAGIC_OFFSET as u64,
            offset: Some(prefix.base_offset),
            defect: Defect::BadMagic { magic: prefix.magic },
        });
    }
    let size = prefix.size_in_bytes();
    if size < RECORD_BATCH_OVERHEAD as u64 {
        return Err(ParseError::Corrupt {
            position: 8,
            offset: Some(prefix.base_offset),
            defect: Defect::BadLength {
                field: "batch length",
                value: i64::from(prefix.length),
            },
        });
    }
    if (buf.len() as u64) < size {
        return Err(ParseError::Incomplete {
            position: 0,
            offset: Some(prefix.base_offset),
            needed: size,
            available: buf.len() as u64,
        });
    }
    Ok(BatchHeader {
        base_offset: prefix.base_offset,
        length: prefix.length,
        partition_leader_epoch: be_i32(buf, 12),
        magic: prefix.magic,
        crc: be_u32(buf, CRC_OFFSET),
        attributes: Attributes(be_i16(buf, ATTRIBUTES_OFFSET)),
        last_offset_delta: be_i32(buf, 23),
        base_timestamp: be_i64(buf, 27),
        max_timestamp: be_i64(buf, 35),
        producer_id: be_i64(buf, 43),
        producer_epoch: be_i16(buf, 51),
        base_sequence: be_i32(buf, 53),
        records_count: be_i32(buf, 57),
    })
}

/// CRC-32C over `[21, end)` of a whole magic-2 batch.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// Check the stored CRC of a whole magic-2 batch (`batch` is exactly the batch).
pub fn verify_crc(batch: &[u8], header: &BatchHeader) -> Result<(), ParseError> {
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(ParseError::Corrupt {
            position: CRC_OFFSET as u64,
            offset: Some(header.base_offset),
            defect: Defect::CrcMismatch {
                stored: header.crc,
                computed,
            },
        });
    }
    Ok(())
}

/// Compute and store the CRC of a whole magic-2 batch in place.
pub fn seal_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Type of a control record (`ControlRecordType`): the record key is
/// `version i16 | type i16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlType {
    Abort,
    Commit,
    /// KRaft-only types (leader change, snapshot header/footer, ...) or unknown.
    Other(i16),
}

impl ControlType {
    pub fn from_id(id: i16) -> Self {
        match id {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            other => ControlType::Other(other),
        }
    }

    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
            ControlType::Other(id) => id,
        }
    }
}

/// What one frame of a `.log` file tells the checkers that run beside the log
/// scan (indexes, epochs, transactions). Small and `Copy` so a scan keeps none of
/// the batch bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Byte position of the frame in its `.log` file.
    pub position: u64,
    /// Bytes the frame occupies on disk (`12 + length`).
    pub size: u64,
    pub magic: i8,
    /// First offset (v2: header base offset; legacy: the frame's offset field for
    /// an uncompressed message, which equals `last_offset`).
    pub base_offset: i64,
    pub last_offset: i64,
    /// Max timestamp (`-1` when the frame has none, e.g. magic 0).
    pub max_timestamp: i64,
    /// `-1` for legacy frames.
    pub partition_leader_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub is_transactional: bool,
    /// `Some` for a control batch whose first record key could be decoded.
    pub control: Option<ControlType>,
    /// True for a control batch (attribute bit 5), even if its key was not decoded.
    pub is_control: bool,
    pub records_count: i32,
}
