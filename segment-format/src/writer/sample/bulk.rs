//! Bulk data for benchmarks: N partitions of one topic, filled to a total size
//! with ~16 KiB batches of ~1 KiB records, written in parallel. Every record is a
//! function of `(seed, partition, offset)` ([`BulkLayout::record`]), so nothing
//! needs to be kept to check what a consumer reads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::shapes::sample_identity;
use super::{
    ExpectedRecord, Manifest, PartitionManifest, SampleRng, TxnStatus, DEFAULT_BASE_TIMESTAMP_MS, DEFAULT_NODE_ID,
};
use crate::batch::{Compression, ControlType, TimestampType, NO_PRODUCER_ID};
use crate::control::EndTxnMarker;
use crate::error::{Error, Result};
use crate::record::{BatchBuilder, RecordSpec};
use crate::writer::{write_log_dir_files, LogDirState, PartitionWriter, WriterConfig, DEFAULT_SEGMENT_BYTES};

/// Records per batch: 16 records of [`BULK_VALUE_BYTES`] make a ~16 KiB batch.
pub const BULK_RECORDS_PER_BATCH: u32 = 16;
/// Value size of a bulk record.
pub const BULK_VALUE_BYTES: usize = 1000;
/// One batch in this many is LZ4-compressed ("mostly uncompressed").
pub const BULK_COMPRESSED_EVERY: u64 = 64;

/// How to write bulk data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkOptions {
    pub seed: u64,
    /// Total `.log` bytes to write across all partitions (approximate: whole batches).
    pub total_bytes: u64,
    pub partitions: u32,
    pub topic: String,
    pub segment_bytes: u64,
    pub running: bool,
    pub fsync: bool,
    pub base_timestamp: i64,
    pub node_id: i32,
    pub broker_epoch: i64,
    /// Partitions written at once; 0 means one per available core.
    pub threads: usize,
    /// Records per batch ([`BULK_RECORDS_PER_BATCH`] by default; 1 with a smaller value makes the ~1 KiB
    /// batches of a producer that sends one record at a time, the many-small-batches case).
    pub records_per_batch: u32,
    /// Value size of each record ([`BULK_VALUE_BYTES`] by default).
    pub value_bytes: usize,
    /// End each partition with a transaction left open: [`OPEN_TRANSACTION_BATCHES`] bulk batches written by one
    /// transactional producer (id [`OPEN_TRANSACTION_PRODUCER`] + partition, epoch 0), no marker after them.
    pub open_transaction: bool,
    /// With [`BulkOptions::open_transaction`]: that transaction's COMMIT marker after its batches (one ms after the
    /// last), as a source whose last transaction just committed has it; a consistent cut inside it leaves it open at
    /// the cut with its marker after the cut.
    pub commit_transaction: bool,
    /// With [`BulkOptions::commit_transaction`]: then one more transaction of the producer (one batch) and its
    /// COMMIT, then two plain batches, as a source whose producer kept committing has it; a consistent cut inside
    /// the first transaction has two markers of the producer after it.
    pub commit_again: bool,
}

/// Batches of the transaction [`BulkOptions::open_transaction`] leaves open.
pub const OPEN_TRANSACTION_BATCHES: u64 = 4;
/// Producer id of that transaction in partition 0 (partition `p` uses this + `p`).
pub const OPEN_TRANSACTION_PRODUCER: i64 = 9000;

impl Default for BulkOptions {
    fn default() -> Self {
        BulkOptions {
            seed: 0,
            total_bytes: 64 * 1024 * 1024,
            partitions: 4,
            topic: "bulk".into(),
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            running: false,
            fsync: true,
            base_timestamp: DEFAULT_BASE_TIMESTAMP_MS,
            node_id: DEFAULT_NODE_ID,
            broker_epoch: 1,
            threads: 0,
            records_per_batch: BULK_RECORDS_PER_BATCH,
            value_bytes: BULK_VALUE_BYTES,
            open_transaction: false,
            commit_transaction: false,
            commit_again: false,
        }
    }
}

/// Everything needed to regenerate bulk records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BulkLayout {
    pub seed: u64,
    pub topic: String,
    pub partitions: u32,
    pub records_per_batch: u32,
    pub value_bytes: usize,
    pub compressed_every: u64,
    pub base_timestamp: i64,
}

impl BulkLayout {
    /// Batch `index` of `partition` (its base offset is `index * records_per_batch`).
    pub fn batch(&self, partition: i32, index: u64) -> BatchBuilder {
        let n = i64::from(self.records_per_batch);
        let base = index as i64 * n;
        let codec = if index % self.compressed_every == self.compressed_every - 1 {
            Compression::Lz4
        } else {
            Compression::None
        };
        let mut b = BatchBuilder::new(base).compression(codec).partition_leader_epoch(0);
        b.records.reserve(self.records_per_batch as usize);
        for k in 0..n {
            let (key, value, timestamp) = self.parts(partition, base + k);
            b.records.push(RecordSpec {
                offset_delta: k as i32,
                timestamp,
                key: Some(key),
                value: Some(value),
                headers: Vec::new(),
            });
        }
        b
    }

    fn parts(&self, partition: i32, offset: i64) -> (Vec<u8>, Vec<u8>, i64) {
        let key = format!("{partition}-{offset}").into_bytes();
        let mut value = vec![0u8; self.value_bytes];
        SampleRng::derive(self.seed, &[partition as u64, offset as u64]).fill(&mut value);
        // One millisecond per batch.
        let timestamp = self.base_timestamp + offset / i64::from(self.records_per_batch.max(1));
        (key, value, timestamp)
    }

    /// The record at `offset` of `partition`, as a consumer reads it.
    pub fn record(&self, partition: i32, offset: i64) -> ExpectedRecord {
        let (key, value, timestamp) = self.parts(partition, offset);
        ExpectedRecord {
            offset,
            timestamp,
            timestamp_type: Some(TimestampType::CreateTime),
            key: Some(key),
            value: Some(value),
            headers: Vec::new(),
            producer_id: NO_PRODUCER_ID,
            transaction: TxnStatus::None,
            magic: 2,
        }
    }
}

/// Write `options.partitions` partitions of `options.topic` into `log_dir`,
/// about `options.total_bytes` of `.log` data in all, plus the log-dir files.
/// `progress` is called with the bytes of each batch written (from several
/// threads).
pub fn write_bulk(log_dir: &Path, options: &BulkOptions, progress: &(dyn Fn(u64) + Sync)) -> Result<Manifest> {
    if options.partitions == 0 {
        return Err(crate::writer::partition::invalid_input(
            log_dir,
            "no partitions to write".into(),
        ));
    }
    if options.records_per_batch == 0 {
        return Err(crate::writer::partition::invalid_input(
            log_dir,
            "records per batch must be at least 1".into(),
        ));
    }
    let layout = BulkLayout {
        seed: options.seed,
        topic: options.topic.clone(),
        partitions: options.partitions,
        records_per_batch: options.records_per_batch,
        value_bytes: options.value_bytes,
        compressed_every: BULK_COMPRESSED_EVERY,
        base_timestamp: options.base_timestamp,
    };
    let share = options.total_bytes / u64::from(options.partitions);
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(options.partitions as usize);
    let next = AtomicU64::new(0);
    let results: Vec<Result<Vec<PartitionManifest>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let p = next.fetch_add(1, Ordering::Relaxed);
                        if p >= u64::from(options.partitions) {
                            return Ok(done);
                        }
                        done.push(write_partition(log_dir, options, &layout, p as i32, share, progress)?);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(Error::io(
                        PathBuf::from(log_dir),
                        std::io::Error::other("bulk writer thread panicked"),
                    ))
                })
            })
            .collect()
    });
    let mut partitions = Vec::new();
    for r in results {
        partitions.extend(r?);
    }
    partitions.sort_by_key(|p| p.written.partition);
    let id = sample_identity(options.seed, options.node_id);
    let written: Vec<_> = partitions.iter().map(|p| p.written.clone()).collect();
    let state = if options.running {
        LogDirState::Running
    } else {
        LogDirState::CleanShutdown {
            broker_epoch: options.broker_epoch,
        }
    };
    write_log_dir_files(log_dir, &id, &written, state)?;
    Ok(Manifest {
        seed: options.seed,
        log_dir: log_dir.to_path_buf(),
        cluster_id: id.cluster_id,
        node_id: id.node_id,
        directory_id: id.directory_id.to_string(),
        partitions,
        bulk: Some(layout),
    })
}

fn write_partition(
    log_dir: &Path,
    options: &BulkOptions,
    layout: &BulkLayout,
    partition: i32,
    share: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PartitionManifest> {
    let config = WriterConfig {
        segment_bytes: options.segment_bytes,
        running: options.running,
        fsync: options.fsync,
        topic_id: Some(SampleRng::derive(options.seed, &[0x70, 0xB0]).uuid()),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, &options.topic, partition, 0, config)?;
    let mut bytes = 0u64;
    let mut batches = 0u64;
    let mut control_batches = 0u64;
    while bytes < share {
        let info = w.append(layout.batch(partition, batches))?;
        bytes += info.size;
        batches += 1;
        progress(info.size);
    }
    if options.open_transaction {
        let producer = OPEN_TRANSACTION_PRODUCER + i64::from(partition);
        for sequence in 0..OPEN_TRANSACTION_BATCHES {
            let batch = layout
                .batch(partition, batches)
                .producer(producer, 0, (sequence * u64::from(layout.records_per_batch)) as i32)
                .transactional(true);
            let info = w.append(batch)?;
            batches += 1;
            progress(info.size);
        }
        if options.commit_transaction {
            let marker = EndTxnMarker {
                control_type: ControlType::Commit,
                coordinator_epoch: 0,
            };
            let timestamp = options.base_timestamp + batches as i64;
            let info = w.append_end_txn_marker(producer, 0, marker, timestamp, 0)?;
            control_batches += 1;
            progress(info.size);
            if options.commit_again {
                let sequence = OPEN_TRANSACTION_BATCHES * u64::from(layout.records_per_batch);
                let batch = layout
                    .batch(partition, batches)
                    .producer(producer, 0, sequence as i32)
                    .transactional(true);
                let info = w.append(batch)?;
                batches += 1;
                progress(info.size);
                let timestamp = options.base_timestamp + batches as i64;
                let info = w.append_end_txn_marker(producer, 0, marker, timestamp, 0)?;
                control_batches += 1;
                progress(info.size);
                for _ in 0..2 {
                    let info = w.append(layout.batch(partition, batches))?;
                    batches += 1;
                    progress(info.size);
                }
            }
        }
    }
    let written = w.close()?;
    Ok(PartitionManifest {
        shape: "bulk".into(),
        written,
        data_records: batches * u64::from(layout.records_per_batch),
        data_batches: batches,
        control_batches,
        records: Vec::new(),
    })
}
