//! Magic-2 records: the byte-exact encoder and the deep (record-level) walker.
//!
//! A record inside a v2 batch is (`DefaultRecord`):
//! `length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//! keyLength varint | key | valueLength varint | value | headerCount varint |
//! [headerKeyLength varint | headerKey (UTF-8) | headerValueLength varint | headerValue]*`
//! where lengths of -1 mean null. The batch CRC covers these bytes, but a batch
//! whose CRC matches can still hold malformed records (a buggy producer, or a
//! corruption that happened before the CRC was computed), and the broker never
//! looks inside a batch on a follower fetch or a clean load. [`for_each_record`]
//! is the only check that finds those, so it checks everything Kafka's record
//! iterator would trip over plus the batch-header invariants the records imply.
//!
//! The encoder ([`BatchBuilder`]) exists so tests, the demo and the partition
//! writer can produce batches that are byte-identical to what Kafka's
//! `MemoryRecordsBuilder` writes. It encodes exactly what it is given, so tests
//! can also build CRC-valid batches with broken invariants.

use crate::batch::{
    seal_crc, Attributes, BatchHeader, Compression, TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
use crate::compression::{self, DecompressOptions, DEFAULT_MAX_SNAPPY_BLOCK};
use crate::varint::{varint_size, varlong_size, write_varint, write_varlong};

/// Default cap on one record's size inside a *compressed* batch (64 MiB). Such a
/// record must be copied out of the decompressor before it can be checked, so this
/// bounds the walker's memory. Kafka's own defaults are far lower (`message.max.bytes`
/// and `max.request.size` are 1 MiB, and DumpLogSegments' `--max-message-size`
/// is 5 MiB); 64 MiB leaves room for clusters that raised them without letting a
/// hostile length make us allocate gigabytes. Records in uncompressed batches are
/// read in place and need no cap.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

/// Read buffer between a decompressor and the record parser (16 KiB, Kafka's own
/// `decompressionOutputSize` for gzip and zstd): records are parsed out of it, so
/// it only needs to amortise the per-call cost of the codec.
pub(crate) const STREAM_BUFFER_BYTES: usize = 16 * 1024;

/// Memory limits of deep validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeepLimits {
    /// Largest record (or legacy inner message) accepted from a compressed stream.
    pub max_record_bytes: usize,
    /// Largest uncompressed snappy block (see [`compression::DEFAULT_MAX_SNAPPY_BLOCK`]).
    pub max_snappy_block: usize,
}

impl Default for DeepLimits {
    fn default() -> Self {
        DeepLimits {
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            max_snappy_block: DEFAULT_MAX_SNAPPY_BLOCK,
        }
    }
}

impl DeepLimits {
    pub(crate) fn decompress_options(&self, magic: i8) -> DecompressOptions {
        DecompressOptions {
            magic,
            max_snappy_block: self.max_snappy_block,
        }
    }
}

/// One record to encode. `timestamp` is absolute; the builder stores it as a delta.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordSpec {
    /// Offset relative to the batch base offset. Gaps are allowed (compaction).
    pub offset_delta: i32,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl RecordSpec {
    pub fn new(offset_delta: i32, timestamp: i64) -> Self {
        RecordSpec {
            offset_delta,
            timestamp,
            ..RecordSpec::default()
        }
    }

    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    pub fn with_value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = Some(value.into());
        self
    }

    pub fn with_header(mut self, key: impl Into<String>, value: Option<Vec<u8>>) -> Self {
        self.headers.push((key.into(), value));
        self
    }
}

/// A length as the i32 Kafka stores. Encoders are fed by callers, never by disk
/// data, so a length past `i32::MAX` is a caller bug.
fn len_i32(len: usize, what: &str) -> i32 {
    i32::try_from(len).unwrap_or_else(|_| panic!("{what} of {len} bytes does not fit Kafka's i32 length"))
}

fn nullable_size(bytes: Option<&[u8]>) -> usize {
    match bytes {
        None => varint_size(-1),
        Some(b) => varint_size(len_i32(b.len(), "field")) + b.len(),
    }
}

/// `DefaultRecord.sizeOfBodyInBytes`: bytes after the length varint.
pub fn record_body_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(String, Option<Vec<u8>>)],
) -> usize {
    let mut size = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta);
    size += nullable_size(key) + nullable_size(value);
    size += varint_size(len_i32(headers.len(), "header count"));
    for (k, v) in headers {
        size += nullable_size(Some(k.as_bytes())) + nullable_size(v.as_deref());
    }
    size
}

fn write_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, len_i32(b.len(), "field"));
            out.extend_from_slice(b);
        }
    }
}

/// Append one record exactly as `DefaultRecord.writeTo` does; returns the bytes written.
///
/// # Panics
/// If a key, value, header or the record exceeds `i32::MAX` bytes.
pub fn write_record(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(String, Option<Vec<u8>>)],
) -> usize {
    let start = out.len();
    let body = record_body_size(offset_delta, timestamp_delta, key, value, headers);
    write_varint(out, len_i32(body, "record"));
    out.push(0); // attributes: unused
    write_varlong(out, timestamp_delta);
    write_varint(out, offset_delta);
    write_nullable(out, key);
    write_nullable(out, value);
    write_varint(out, len_i32(headers.len(), "header count"));
    for (k, v) in headers {
        write_nullable(out, Some(k.as_bytes()));
        write_nullable(out, v.as_deref());
    }
    out.len() - start
}

/// Builds one complete magic-2 batch with a correct CRC, laid out like
/// `MemoryRecordsBuilder` (and, for no records, like `DefaultRecordBatch.writeEmptyHeader`,
/// the header-only batch compaction leaves behind).
///
/// Derived header fields: `baseTimestamp` = delete horizon if set, else the first
/// record's timestamp, else -1; `maxTimestamp` = the log-append time for
/// LogAppendTime batches, else the largest record timestamp (never below -1);
/// `lastOffsetDelta` = the last record's offset delta (0 without records). The
/// overrides exist for compaction output, which keeps the original batch's
/// `lastOffsetDelta` and, for emptied batches, `maxTimestamp`. Kafka writes
/// emptied batches uncompressed and without a delete horizon; the builder does not
/// enforce that, nor any ordering of the records, so tests can build odd batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchBuilder {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub compression: Compression,
    pub timestamp_type: TimestampType,
    /// The batch's `maxTimestamp` when `timestamp_type` is LogAppendTime.
    pub log_append_time: i64,
    pub transactional: bool,
    pub control: bool,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// Sets attribute bit 6 and stores the horizon as `baseTimestamp`.
    pub delete_horizon_ms: Option<i64>,
    pub last_offset_delta: Option<i32>,
    pub max_timestamp: Option<i64>,
    pub records: Vec<RecordSpec>,
}

impl BatchBuilder {
    /// An uncompressed, CreateTime, non-transactional batch without producer id.
    pub fn new(base_offset: i64) -> Self {
        BatchBuilder {
            base_offset,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            log_append_time: NO_TIMESTAMP,
            transactional: false,
            control: false,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            delete_horizon_ms: None,
            last_offset_delta: None,
            max_timestamp: None,
            records: Vec::new(),
        }
    }

    pub fn compression(mut self, codec: Compression) -> Self {
        self.compression = codec;
        self
    }

    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// LogAppendTime with the given append time.
    pub fn log_append_time(mut self, append_time: i64) -> Self {
        self.timestamp_type = TimestampType::LogAppendTime;
        self.log_append_time = append_time;
        self
    }

    /// Producer id, epoch and base sequence (idempotent or transactional producers).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    pub fn delete_horizon(mut self, horizon_ms: i64) -> Self {
        self.delete_horizon_ms = Some(horizon_ms);
        self
    }

    pub fn last_offset_delta(mut self, delta: i32) -> Self {
        self.last_offset_delta = Some(delta);
        self
    }

    pub fn max_timestamp(mut self, max_timestamp: i64) -> Self {
        self.max_timestamp = Some(max_timestamp);
        self
    }

    pub fn record(mut self, record: RecordSpec) -> Self {
        self.records.push(record);
        self
    }

    pub fn records(mut self, records: impl IntoIterator<Item = RecordSpec>) -> Self {
        self.records.extend(records);
        self
    }

    /// The header the batch will carry (CRC 0 until [`BatchBuilder::build`] seals it).
    fn header(&self, length: i32) -> BatchHeader {
        let base_timestamp = self
            .delete_horizon_ms
            .or_else(|| self.records.first().map(|r| r.timestamp))
            .unwrap_or(NO_TIMESTAMP);
        let computed_max = match self.timestamp_type {
            TimestampType::LogAppendTime => self.log_append_time,
            TimestampType::CreateTime => self.records.iter().map(|r| r.timestamp).fold(NO_TIMESTAMP, i64::max),
        };
        let mut attributes = Attributes::new(self.compression, self.timestamp_type, self.transactional, self.control);
        if self.delete_horizon_ms.is_some() {
            attributes.0 |= Attributes::DELETE_HORIZON;
        }
        BatchHeader {
            base_offset: self.base_offset,
            length,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: 2,
            crc: 0,
            attributes,
            last_offset_delta: self
                .last_offset_delta
                .unwrap_or_else(|| self.records.last().map_or(0, |r| r.offset_delta)),
            base_timestamp,
            max_timestamp: self.max_timestamp.unwrap_or(computed_max),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records_count: len_i32(self.records.len(), "record count"),
        }
    }

    /// Encode the batch.
    ///
    /// # Panics
    /// If the batch exceeds `i32::MAX` bytes.
    pub fn build(&self) -> Vec<u8> {
        let base_timestamp = self.header(0).base_timestamp;
        let mut records = Vec::new();
        for r in &self.records {
            write_record(
                &mut records,
                r.offset_delta,
                r.timestamp.wrapping_sub(base_timestamp),
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
            );
        }
        let payload = if self.records.is_empty() {
            Vec::new()
        } else {
            compression::compress(self.compression, &records)
        };
        let length = len_i32(
            RECORD_BATCH_OVERHEAD - crate::batch::LOG_OVERHEAD + payload.len(),
            "batch",
        );
        let mut out = Vec::with_capacity(RECORD_BATCH_OVERHEAD + payload.len());
        self.header(length).write_to(&mut out);
        out.extend_from_slice(&payload);
        seal_crc(&mut out);
        out
    }
}

mod walk;

pub use walk::{for_each_record, read_records, HeaderIter, HeaderView, RecordStats, RecordView};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{parse_header, verify_crc};
    use crate::error::ParseError;
    use proptest::prelude::*;
    use std::ops::ControlFlow;

    fn walk_all(batch: &[u8]) -> Result<RecordStats, ParseError> {
        let h = parse_header(batch).unwrap();
        for_each_record(batch, &h, &limits(), |_| ControlFlow::Continue(()))
    }

    pub(super) fn limits() -> DeepLimits {
        DeepLimits::default()
    }

    pub(super) fn sample_records() -> Vec<RecordSpec> {
        vec![
            RecordSpec::new(0, 1_700_000_000_000)
                .with_key("k0")
                .with_value("v0")
                .with_header("h", Some(b"x".to_vec()))
                .with_header("null", None),
            RecordSpec::new(1, 1_700_000_000_005),
            RecordSpec::new(3, 1_699_999_999_990).with_value(vec![7u8; 300]),
        ]
    }

    /// Hand-computed from the format facts (`DefaultRecordBatch.writeHeader`,
    /// `DefaultRecord.writeTo`), independent of the encoder above.
    #[test]
    fn uncompressed_batch_is_byte_exact() {
        let batch = BatchBuilder::new(5)
            .partition_leader_epoch(7)
            .record(
                RecordSpec::new(0, 1000)
                    .with_key("k")
                    .with_value("v")
                    .with_header("h", Some(b"x".to_vec())),
            )
            .build();
        let record = [
            0x18u8, 0x00, 0x00, 0x00, 0x02, b'k', 0x02, b'v', 0x02, 0x02, b'h', 0x02, b'x',
        ];
        let mut expected = Vec::new();
        expected.extend_from_slice(&5i64.to_be_bytes()); // baseOffset
        expected.extend_from_slice(&(49i32 + record.len() as i32).to_be_bytes()); // length
        expected.extend_from_slice(&7i32.to_be_bytes()); // partitionLeaderEpoch
        expected.push(2); // magic
        expected.extend_from_slice(&[0, 0, 0, 0]); // crc, filled below
        expected.extend_from_slice(&0i16.to_be_bytes()); // attributes
        expected.extend_from_slice(&0i32.to_be_bytes()); // lastOffsetDelta
        expected.extend_from_slice(&1000i64.to_be_bytes()); // baseTimestamp
        expected.extend_from_slice(&1000i64.to_be_bytes()); // maxTimestamp
        expected.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
        expected.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
        expected.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
        expected.extend_from_slice(&1i32.to_be_bytes()); // recordsCount
        expected.extend_from_slice(&record);
        let crc = crc32c::crc32c(&expected[21..]);
        expected[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(batch, expected);
    }

    #[test]
    fn header_fields_follow_memory_records_builder() {
        let b = BatchBuilder::new(100)
            .producer(42, 3, 17)
            .transactional(true)
            .records(sample_records())
            .build();
        let h = parse_header(&b).unwrap();
        verify_crc(&b, &h).unwrap();
        assert_eq!(h.attributes.0, Attributes::TRANSACTIONAL);
        assert_eq!(
            (h.base_timestamp, h.max_timestamp),
            (1_700_000_000_000, 1_700_000_000_005)
        );
        assert_eq!((h.last_offset_delta, h.records_count), (3, 3));
        assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), (42, 3, 17));
        let mut seqs = vec![];
        let stats = for_each_record(&b, &h, &limits(), |r| {
            seqs.push((r.offset, r.sequence));
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(seqs, vec![(100, 17), (101, 18), (103, 20)]);
        assert_eq!(stats.records, 3);
        assert_eq!(stats.max_timestamp, Some(1_700_000_000_005));

        let lat = BatchBuilder::new(0)
            .log_append_time(5555)
            .records(sample_records())
            .build();
        let h = parse_header(&lat).unwrap();
        assert_eq!(h.attributes.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(h.max_timestamp, 5555);
        let mut ts = vec![];
        for_each_record(&lat, &h, &limits(), |r| {
            ts.push(r.timestamp);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(ts, vec![5555; 3]);

        let dh = BatchBuilder::new(0)
            .delete_horizon(9_000)
            .records(sample_records())
            .build();
        let h = parse_header(&dh).unwrap();
        assert!(h.attributes.has_delete_horizon());
        assert_eq!(h.base_timestamp, 9_000);
        assert_eq!(read_records(&dh, &limits()).unwrap().1, sample_records());
    }

    #[test]
    fn every_codec_round_trips() {
        for codec in Compression::ALL {
            let b = BatchBuilder::new(7)
                .compression(codec)
                .records(sample_records())
                .build();
            let (h, recs) = read_records(&b, &limits()).unwrap();
            verify_crc(&b, &h).unwrap();
            assert_eq!(h.attributes.compression(), Some(codec));
            assert_eq!(recs, sample_records(), "{codec:?}");
        }
    }

    #[test]
    fn empty_batch_like_compaction_leaves() {
        let b = BatchBuilder::new(50)
            .producer(9, 1, 4)
            .last_offset_delta(9)
            .max_timestamp(123_456)
            .build();
        assert_eq!(b.len(), RECORD_BATCH_OVERHEAD);
        let h = parse_header(&b).unwrap();
        verify_crc(&b, &h).unwrap();
        assert_eq!((h.records_count, h.last_offset_delta, h.max_timestamp), (0, 9, 123_456));
        assert_eq!(h.base_timestamp, NO_TIMESTAMP);
        assert_eq!(h.last_offset(), 59);
        assert_eq!(walk_all(&b).unwrap(), RecordStats::default());
    }

    #[test]
    fn compaction_gaps_keep_last_offset_delta() {
        let b = BatchBuilder::new(0)
            .record(RecordSpec::new(2, 10))
            .record(RecordSpec::new(5, 11))
            .last_offset_delta(8)
            .build();
        let stats = walk_all(&b).unwrap();
        assert_eq!((stats.first_offset_delta, stats.last_offset_delta), (Some(2), Some(5)));
    }

    /// (offset gap, timestamp, key, value, headers) of one random record.
    type ArbRecord = (
        i32,
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Vec<(String, Option<Vec<u8>>)>,
    );

    fn arb_record() -> impl Strategy<Value = ArbRecord> {
        (
            1i32..1000,
            -1_000_000i64..1_000_000,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
            proptest::collection::vec(
                (
                    "\\PC{0,8}",
                    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
                ),
                0..4,
            ),
        )
    }

    proptest! {
        #[test]
        fn random_batches_round_trip(
            recs in proptest::collection::vec(arb_record(), 0..20),
            codec_id in 0u8..5,
            base in any::<i64>(),
            ts_base in 0i64..2_000_000_000_000,
            lat in any::<bool>(),
        ) {
            let codec = Compression::from_id(codec_id).unwrap();
            let mut delta = -1i32;
            let specs: Vec<RecordSpec> = recs.into_iter().map(|(gap, ts, key, value, headers)| {
                delta += gap;
                RecordSpec { offset_delta: delta, timestamp: ts_base + ts, key, value, headers }
            }).collect();
            let mut builder = BatchBuilder::new(base).compression(codec).records(specs.clone());
            if lat {
                builder = builder.log_append_time(ts_base);
            }
            let b = builder.build();
            let (h, back) = read_records(&b, &limits()).unwrap();
            verify_crc(&b, &h).unwrap();
            prop_assert_eq!(h.records_count as usize, specs.len());
            prop_assert_eq!(back, specs);
        }

    }
}
