//! Sample log directories: every shape of partition segmirror must carry, and
//! bulk data for benchmarks, written deterministically from a seed.
//!
//! [`write_sample`] writes one partition per shape — each codec, keys / null
//! keys / headers / null values, idempotent producers (an epoch bump, a
//! sequence wrap), committed and aborted transactions interleaved across
//! segments, a compacted-looking partition (offset gaps between and inside
//! batches, empty batches, tombstones, a delete horizon), a partition starting at
//! a base offset above 0 with a raised log start offset, LogAppendTime batches,
//! and legacy v0/v1 messages followed by v2 batches — each over several segments
//! and leader epochs. [`write_bulk`] writes N partitions of mostly uncompressed
//! ~16 KiB batches of ~1 KiB records, fast, in parallel.
//!
//! Both return a [`Manifest`]: what was written, and the records a consumer must
//! read back (listed for the sample, regenerable through [`BulkLayout::record`]
//! for bulk data), so tests can compare a real consumer's view with what went in.

use std::path::PathBuf;

use base64::Engine;

use super::WrittenPartition;
use crate::batch::TimestampType;
use crate::partition_metadata::Uuid;

mod bulk;
mod shapes;

pub use bulk::{write_bulk, BulkLayout, BulkOptions, BULK_RECORDS_PER_BATCH, BULK_VALUE_BYTES};
pub use shapes::{
    sample_identity, write_sample, SampleOptions, DEFAULT_SAMPLE_SEGMENT_BYTES, RETAINED_BASE_OFFSET, SHAPES,
};

/// Base of the generated timestamps (2025-01-01T00:00:00Z). Fixed so that a seed
/// fully determines the output; brokers with the default `retention.ms` (7 days)
/// delete segments this old at once, so tests loading them into Kafka either
/// pass a recent base or disable retention.
pub const DEFAULT_BASE_TIMESTAMP_MS: i64 = 1_735_689_600_000;

/// Node id written to `meta.properties` unless told otherwise.
pub const DEFAULT_NODE_ID: i32 = 1;

/// A small deterministic generator (SplitMix64): same seed, same bytes, on every
/// platform. Not for anything but test data.
#[derive(Debug, Clone)]
pub struct SampleRng(u64);

impl SampleRng {
    pub fn new(seed: u64) -> Self {
        SampleRng(seed)
    }

    /// An independent stream for `(seed, tags)`: streams for different tags do
    /// not depend on how much another stream was used.
    pub fn derive(seed: u64, tags: &[u64]) -> Self {
        let mut r = SampleRng(seed ^ 0x5eed_5eed_5eed_5eed);
        for &t in tags {
            r.0 ^= t.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            r.next_u64();
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; 0 yields 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1).max(1) as u64) as i64
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// Fill `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        for (d, s) in rest.iter_mut().zip(last) {
            *d = s;
        }
    }

    /// `len` random ASCII letters and digits (compressible like text).
    pub fn alphanumeric(&mut self, len: usize) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize])
            .collect()
    }

    /// A random id as `Uuid.randomUuid` would accept it.
    pub fn uuid(&mut self) -> Uuid {
        loop {
            let mut bytes = [0u8; 16];
            self.fill(&mut bytes);
            if let Some(id) = Uuid::from_random_bytes(bytes) {
                return id;
            }
        }
    }
}

/// Whether a record ended up in a transaction, and how that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnStatus {
    /// Not transactional.
    None,
    Committed,
    Aborted,
    /// The transaction had no marker when the partition was closed.
    Open,
}

/// Which records a consumer is configured to see (`isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

fn b64<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
        None => s.serialize_none(),
    }
}

/// One record header; the value is base64 in JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExpectedHeader {
    pub key: String,
    #[serde(serialize_with = "b64")]
    pub value: Option<Vec<u8>>,
}

/// One data record as a consumer receives it. Control records are not listed
/// (consumers never see them). Key and value are base64 in JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExpectedRecord {
    pub offset: i64,
    /// The timestamp a consumer sees: the batch's append time for
    /// LogAppendTime, -1 (`NO_TIMESTAMP`, what the Java client reports) for
    /// magic 0, where librdkafka-based clients report 0 with type "not available".
    pub timestamp: i64,
    /// `None` for magic 0 (`NO_TIMESTAMP_TYPE`).
    pub timestamp_type: Option<TimestampType>,
    #[serde(serialize_with = "b64")]
    pub key: Option<Vec<u8>>,
    #[serde(serialize_with = "b64")]
    pub value: Option<Vec<u8>>,
    pub headers: Vec<ExpectedHeader>,
    /// -1 without a producer id.
    pub producer_id: i64,
    pub transaction: TxnStatus,
    pub magic: i8,
}

impl ExpectedRecord {
    /// Whether a consumer with `isolation` receives this record.
    pub fn visible(&self, isolation: Isolation) -> bool {
        match isolation {
            Isolation::ReadUncommitted => true,
            Isolation::ReadCommitted => matches!(self.transaction, TxnStatus::None | TxnStatus::Committed),
        }
    }
}

/// One partition of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionManifest {
    /// What the partition exercises (`codec-gzip`, `transactions`, `bulk`, ...).
    pub shape: String,
    /// Files, offsets, segments, snapshots, epochs.
    pub written: WrittenPartition,
    /// Data records written (aborted ones included, control records not).
    pub data_records: u64,
    /// Data batches written (empty ones included).
    pub data_batches: u64,
    /// Transaction markers written.
    pub control_batches: u64,
    /// Every data record in offset order; empty for bulk partitions (see
    /// [`BulkLayout::record`]).
    pub records: Vec<ExpectedRecord>,
}

impl PartitionManifest {
    /// Records a consumer starting at the log start offset receives.
    pub fn consumer_records(&self, isolation: Isolation) -> impl Iterator<Item = &ExpectedRecord> + '_ {
        let start = self.written.log_start_offset;
        self.records
            .iter()
            .filter(move |r| r.offset >= start && r.visible(isolation))
    }
}

/// What a sample or bulk run wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Manifest {
    pub seed: u64,
    pub log_dir: PathBuf,
    pub cluster_id: String,
    pub node_id: i32,
    pub directory_id: String,
    pub partitions: Vec<PartitionManifest>,
    /// For bulk data: how to regenerate every record.
    pub bulk: Option<BulkLayout>,
}

impl Manifest {
    pub fn total_log_bytes(&self) -> u64 {
        self.partitions.iter().map(|p| p.written.log_bytes()).sum()
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionManifest> {
        self.partitions
            .iter()
            .find(|p| p.written.topic == topic && p.written.partition == partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_streams_are_independent() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = SampleRng::derive(7, &[1, 2]);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = SampleRng::derive(7, &[1, 2]);
        assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
        assert_ne!(SampleRng::derive(7, &[1, 3]).next_u64(), a[0]);
        let mut buf = [0u8; 13];
        SampleRng::new(1).fill(&mut buf);
        assert_ne!(buf, [0u8; 13]);
        let mut r = SampleRng::new(3);
        for _ in 0..1000 {
            assert!((5..=9).contains(&r.range(5, 9)));
        }
        assert!(r.alphanumeric(50).iter().all(u8::is_ascii_alphanumeric));
        assert!(!r.uuid().is_reserved());
    }
}
