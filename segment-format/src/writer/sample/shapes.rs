//! The shapes of [`write_sample`]: one partition each, written through a
//! [`Recorder`] that notes every data record a consumer will see.

use std::collections::HashMap;
use std::path::Path;

use super::{
    ExpectedHeader, ExpectedRecord, Manifest, PartitionManifest, SampleRng, TxnStatus, DEFAULT_BASE_TIMESTAMP_MS,
    DEFAULT_NODE_ID,
};
use crate::batch::{increment_sequence, Compression, ControlType, TimestampType, NO_PRODUCER_ID, NO_TIMESTAMP};
use crate::control::EndTxnMarker;
use crate::error::Result;
use crate::legacy::{encode_message, encode_wrapper, LegacySpec};
use crate::record::{BatchBuilder, RecordSpec};
use crate::writer::{write_log_dir_files, AppendInfo, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};

/// Segment size of the sample unless told otherwise: small, so that every
/// partition has several segments and every segment several index entries.
pub const DEFAULT_SAMPLE_SEGMENT_BYTES: u64 = 32 * 1024;

/// Base offset of the `retained` partition (as if retention had removed the
/// segments before it).
pub const RETAINED_BASE_OFFSET: i64 = 1_000_000;

/// The shapes [`write_sample`] writes, in order; also the manifest's `shape` names.
pub const SHAPES: &[&str] = &[
    "codec-none",
    "codec-gzip",
    "codec-snappy",
    "codec-lz4",
    "codec-zstd",
    "idempotent",
    "transactions",
    "compacted",
    "retained",
    "log-append-time",
    "legacy",
];

/// How to write the sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleOptions {
    pub seed: u64,
    pub segment_bytes: u64,
    /// Leave every partition's active segment (and the log dir) as a running broker has it.
    pub running: bool,
    pub fsync: bool,
    /// First timestamp of every partition's clock.
    pub base_timestamp: i64,
    pub node_id: i32,
    /// Written to `.kafka_cleanshutdown`.
    pub broker_epoch: i64,
}

impl Default for SampleOptions {
    fn default() -> Self {
        SampleOptions {
            seed: 0,
            segment_bytes: DEFAULT_SAMPLE_SEGMENT_BYTES,
            running: false,
            fsync: true,
            base_timestamp: DEFAULT_BASE_TIMESTAMP_MS,
            node_id: DEFAULT_NODE_ID,
            broker_epoch: 1,
        }
    }
}

/// The log-dir identity (cluster id, directory id) the sample and bulk writers
/// derive from a seed: a folder whose `meta.properties` carries it was written
/// by them.
pub fn sample_identity(seed: u64, node_id: i32) -> LogDirIdentity {
    let mut rng = SampleRng::derive(seed, &[0xC1]);
    LogDirIdentity {
        cluster_id: rng.uuid().to_string(),
        node_id,
        directory_id: rng.uuid(),
    }
}

/// Write the sample partitions (see [`SHAPES`]) and the log-dir files into
/// `log_dir`, which must not hold these partitions already.
pub fn write_sample(log_dir: &Path, options: &SampleOptions) -> Result<Manifest> {
    let id = sample_identity(options.seed, options.node_id);
    let mut partitions = Vec::new();
    for (index, &shape) in SHAPES.iter().enumerate() {
        let mut rng = SampleRng::derive(options.seed, &[0x5A, index as u64]);
        partitions.push(write_shape(log_dir, options, shape, &mut rng)?);
    }
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
        bulk: None,
    })
}

fn write_shape(
    log_dir: &Path,
    o: &SampleOptions,
    shape: &'static str,
    rng: &mut SampleRng,
) -> Result<PartitionManifest> {
    let (topic, partition, base) = match shape {
        "codec-none" => ("sample-codecs", 0, 0),
        "codec-gzip" => ("sample-codecs", 1, 0),
        "codec-snappy" => ("sample-codecs", 2, 0),
        "codec-lz4" => ("sample-codecs", 3, 0),
        "codec-zstd" => ("sample-codecs", 4, 0),
        "retained" => ("sample-retained", 0, RETAINED_BASE_OFFSET),
        other => (topic_of(other), 0, 0),
    };
    // Partitions of one topic share its id.
    let topic_tag = topic
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b)));
    let config = WriterConfig {
        segment_bytes: o.segment_bytes,
        running: o.running,
        fsync: o.fsync,
        topic_id: Some(SampleRng::derive(o.seed, &[0x70, topic_tag]).uuid()),
        ..WriterConfig::default()
    };
    let mut rec = Recorder {
        w: PartitionWriter::create(log_dir, topic, partition, base, config)?,
        shape,
        records: Vec::new(),
        pending: HashMap::new(),
        data_batches: 0,
        control_batches: 0,
    };
    let mut clock = Clock(o.base_timestamp);
    match shape {
        "codec-none" => codec(&mut rec, rng, &mut clock, Compression::None)?,
        "codec-gzip" => codec(&mut rec, rng, &mut clock, Compression::Gzip)?,
        "codec-snappy" => codec(&mut rec, rng, &mut clock, Compression::Snappy)?,
        "codec-lz4" => codec(&mut rec, rng, &mut clock, Compression::Lz4)?,
        "codec-zstd" => codec(&mut rec, rng, &mut clock, Compression::Zstd)?,
        "idempotent" => idempotent(&mut rec, rng, &mut clock)?,
        "transactions" => transactions(&mut rec, rng, &mut clock)?,
        "compacted" => compacted(&mut rec, rng, &mut clock)?,
        "retained" => retained(&mut rec, rng, &mut clock)?,
        "log-append-time" => log_append_time(&mut rec, rng, &mut clock)?,
        _ => legacy(&mut rec, rng, &mut clock)?,
    }
    rec.finish()
}

fn topic_of(shape: &str) -> &'static str {
    match shape {
        "idempotent" => "sample-idempotent",
        "transactions" => "sample-transactions",
        "compacted" => "sample-compacted",
        "log-append-time" => "sample-log-append-time",
        _ => "sample-legacy",
    }
}

/// A partition's notion of time: moves forward by a random step per batch.
struct Clock(i64);

impl Clock {
    fn tick(&mut self, rng: &mut SampleRng) -> i64 {
        self.0 += rng.range(1, 2_000);
        self.0
    }
}

/// Leader epochs over a partition's life: 0, then 1, then 4 (elections skip epochs).
fn leader_epoch(i: usize, n: usize) -> i32 {
    match i * 3 / n.max(1) {
        0 => 0,
        1 => 1,
        _ => 4,
    }
}

/// What random records look like.
#[derive(Debug, Clone, Copy)]
struct Style {
    /// One key in this many is null (0: never).
    null_key_in: u64,
    /// One value in this many is null (0: never).
    null_value_in: u64,
    headers: bool,
    min_value: i64,
    max_value: i64,
    key_space: u64,
}

const PLAIN: Style = Style {
    null_key_in: 4,
    null_value_in: 12,
    headers: true,
    min_value: 20,
    max_value: 700,
    key_space: 1_000_000,
};

fn record(rng: &mut SampleRng, offset_delta: i32, timestamp: i64, s: Style) -> RecordSpec {
    let mut r = RecordSpec::new(offset_delta, timestamp);
    if s.null_key_in == 0 || !rng.chance(1, s.null_key_in) {
        r.key = Some(format!("key-{}", rng.below(s.key_space)).into_bytes());
    }
    if s.null_value_in == 0 || !rng.chance(1, s.null_value_in) {
        let len = rng.range(s.min_value, s.max_value) as usize;
        r.value = Some(rng.alphanumeric(len));
    }
    if s.headers && rng.chance(1, 3) {
        for h in 0..rng.range(1, 3) {
            let value = if rng.chance(1, 4) {
                None
            } else {
                let len = rng.range(0, 16) as usize;
                Some(rng.alphanumeric(len))
            };
            r.headers.push((format!("h{h}"), value));
        }
    }
    r
}

/// `count` records at consecutive offset deltas; one in ten timestamps is out of
/// order (CreateTime carries what producers send).
fn records(rng: &mut SampleRng, count: i64, ts: i64, s: Style) -> Vec<RecordSpec> {
    (0..count)
        .map(|k| {
            let skew = if rng.chance(1, 10) { -50 } else { 0 };
            record(rng, k as i32, ts + k + skew, s)
        })
        .collect()
}

/// Writes one partition and notes what a consumer will read.
struct Recorder {
    w: PartitionWriter,
    shape: &'static str,
    records: Vec<ExpectedRecord>,
    /// Indexes into `records` of each producer's open transaction.
    pending: HashMap<i64, Vec<usize>>,
    data_batches: u64,
    control_batches: u64,
}

impl Recorder {
    /// Append a v2 data batch at `at` (default: the log end offset).
    fn data(&mut self, at: Option<i64>, b: BatchBuilder) -> Result<AppendInfo> {
        let base = at.unwrap_or_else(|| self.w.next_offset());
        let info = self.w.append_at(base, b.clone())?;
        let status = if b.transactional {
            TxnStatus::Open
        } else {
            TxnStatus::None
        };
        for r in &b.records {
            if b.transactional {
                self.pending.entry(b.producer_id).or_default().push(self.records.len());
            }
            self.records.push(ExpectedRecord {
                offset: base + i64::from(r.offset_delta),
                timestamp: match b.timestamp_type {
                    TimestampType::LogAppendTime => b.log_append_time,
                    TimestampType::CreateTime => r.timestamp,
                },
                timestamp_type: Some(b.timestamp_type),
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r
                    .headers
                    .iter()
                    .map(|(key, value)| ExpectedHeader {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                producer_id: b.producer_id,
                transaction: status,
                magic: 2,
            });
        }
        self.data_batches += 1;
        Ok(info)
    }

    fn end_txn(&mut self, p: &Producer, commit: bool, timestamp: i64, leader_epoch: i32) -> Result<()> {
        let control_type = if commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        let marker = EndTxnMarker {
            control_type,
            coordinator_epoch: p.coordinator_epoch,
        };
        self.w
            .append_end_txn_marker(p.id, p.epoch, marker, timestamp, leader_epoch)?;
        let status = if commit {
            TxnStatus::Committed
        } else {
            TxnStatus::Aborted
        };
        for i in self.pending.remove(&p.id).unwrap_or_default() {
            if let Some(r) = self.records.get_mut(i) {
                r.transaction = status;
            }
        }
        self.control_batches += 1;
        Ok(())
    }

    /// Append a legacy frame whose records are `expected`.
    fn legacy(&mut self, frame: &[u8], expected: Vec<ExpectedRecord>) -> Result<()> {
        self.w.append_raw(frame)?;
        self.records.extend(expected);
        self.data_batches += 1;
        Ok(())
    }

    fn finish(self) -> Result<PartitionManifest> {
        let written = self.w.close()?;
        Ok(PartitionManifest {
            shape: self.shape.to_string(),
            written,
            data_records: self.records.len() as u64,
            data_batches: self.data_batches,
            control_batches: self.control_batches,
            records: self.records,
        })
    }
}

/// An idempotent or transactional producer.
#[derive(Debug, Clone)]
struct Producer {
    id: i64,
    epoch: i16,
    seq: i32,
    coordinator_epoch: i32,
    open: bool,
}

impl Producer {
    fn new(id: i64, epoch: i16, seq: i32, coordinator_epoch: i32) -> Self {
        Producer {
            id,
            epoch,
            seq,
            coordinator_epoch,
            open: false,
        }
    }

    /// Stamp `b` with this producer and advance the sequence past `count` records.
    fn stamp(&mut self, b: BatchBuilder, count: i64) -> BatchBuilder {
        let b = b.producer(self.id, self.epoch, self.seq);
        self.seq = increment_sequence(self.seq, count as i32);
        b
    }
}

fn codec(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock, codec: Compression) -> Result<()> {
    const N: usize = 48;
    for i in 0..N {
        let ts = clock.tick(rng);
        let count = rng.range(1, 10);
        let b = BatchBuilder::new(0)
            .compression(codec)
            .partition_leader_epoch(leader_epoch(i, N))
            .records(records(rng, count, ts, PLAIN));
        rec.data(None, b)?;
    }
    Ok(())
}

/// Three idempotent producers and plain batches, mixed codecs; one producer's
/// epoch is bumped half way (sequence back to 0), one starts near
/// `i32::MAX` so its sequence wraps.
fn idempotent(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock) -> Result<()> {
    const N: usize = 60;
    let mut producers = [
        Producer::new(1000, 0, 0, -1),
        Producer::new(1001, 0, 0, -1),
        Producer::new(1002, 0, i32::MAX - 15, -1),
    ];
    for i in 0..N {
        if i == N / 2 {
            producers[1].epoch = 1;
            producers[1].seq = 0;
        }
        let ts = clock.tick(rng);
        let count = rng.range(1, 8);
        let codec = Compression::ALL[rng.below(5) as usize];
        let b = BatchBuilder::new(0)
            .compression(codec)
            .partition_leader_epoch(leader_epoch(i, N))
            .records(records(rng, count, ts, PLAIN));
        let pick = rng.below(4) as usize;
        let b = match producers.get_mut(pick) {
            Some(p) => p.stamp(b, count),
            None => b,
        };
        rec.data(None, b)?;
    }
    Ok(())
}

/// Three transactional producers interleaved with a plain one: transactions
/// open across batches of others and across segment rolls; every third one to
/// end is aborted; all are ended before the partition is closed.
fn transactions(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock) -> Result<()> {
    const N: usize = 80;
    let mut producers = [
        Producer::new(2000, 0, 0, 7),
        Producer::new(2001, 0, 0, 7),
        Producer::new(2002, 3, 0, 8),
    ];
    let mut ended = 0usize;
    for i in 0..N {
        let ts = clock.tick(rng);
        let epoch = leader_epoch(i, N);
        let pick = rng.below(4) as usize;
        let Some(p) = producers.get_mut(pick) else {
            let count = rng.range(1, 5);
            rec.data(
                None,
                BatchBuilder::new(0)
                    .partition_leader_epoch(epoch)
                    .records(records(rng, count, ts, PLAIN)),
            )?;
            continue;
        };
        if p.open && rng.chance(1, 2) {
            let commit = ended % 3 != 1;
            ended += 1;
            p.open = false;
            let p = p.clone();
            rec.end_txn(&p, commit, ts, epoch)?;
            continue;
        }
        let count = rng.range(1, 6);
        let codec = if rng.chance(1, 2) {
            Compression::None
        } else {
            Compression::Zstd
        };
        let b = BatchBuilder::new(0)
            .compression(codec)
            .transactional(true)
            .partition_leader_epoch(epoch)
            .records(records(rng, count, ts, PLAIN));
        let b = p.stamp(b, count);
        p.open = true;
        rec.data(None, b)?;
    }
    for p in producers.iter_mut().filter(|p| p.open) {
        p.open = false;
        let ts = clock.tick(rng);
        rec.end_txn(p, true, ts, leader_epoch(N, N))?;
    }
    Ok(())
}

/// What the log cleaner leaves: offset gaps between batches and inside them,
/// batches whose last records were removed (`lastOffsetDelta` beyond the last
/// record), empty batches kept for producer state, tombstones, and batches
/// with a delete horizon.
fn compacted(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock) -> Result<()> {
    const N: usize = 50;
    let style = Style {
        null_key_in: 0,
        null_value_in: 6,
        headers: false,
        min_value: 30,
        max_value: 900,
        key_space: 20,
    };
    let mut producer = Producer::new(3000, 0, 0, -1);
    for i in 0..N {
        let ts = clock.tick(rng);
        let epoch = leader_epoch(i, N);
        let gap = if i > 0 && rng.chance(1, 3) { rng.range(1, 20) } else { 0 };
        let at = rec.w.next_offset() + gap;
        if i % 7 == 3 {
            let last_delta = rng.range(0, 5);
            let b = BatchBuilder::new(0)
                .partition_leader_epoch(epoch)
                .last_offset_delta(last_delta as i32)
                .max_timestamp(ts);
            rec.data(Some(at), producer.stamp(b, last_delta + 1))?;
            continue;
        }
        let mut delta = -1i32;
        let specs: Vec<RecordSpec> = (0..rng.range(1, 8))
            .map(|k| {
                delta += 1 + rng.below(3) as i32;
                record(rng, delta, ts + k, style)
            })
            .collect();
        let last_delta = delta + rng.below(3) as i32;
        let codec = if i % 2 == 0 {
            Compression::None
        } else {
            Compression::Gzip
        };
        let mut b = BatchBuilder::new(0)
            .compression(codec)
            .partition_leader_epoch(epoch)
            .last_offset_delta(last_delta)
            .records(specs);
        if i == 20 || i == 21 {
            b = b.delete_horizon(ts + 86_400_000);
        }
        rec.data(Some(at), producer.stamp(b, i64::from(last_delta) + 1))?;
    }
    Ok(())
}

/// A partition whose first segment starts at [`RETAINED_BASE_OFFSET`] and whose
/// log start offset was then raised to the third batch (`DeleteRecords`).
fn retained(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock) -> Result<()> {
    const N: usize = 40;
    let mut third = None;
    for i in 0..N {
        let ts = clock.tick(rng);
        let count = rng.range(1, 10);
        let codec = if i % 3 == 0 {
            Compression::Gzip
        } else {
            Compression::None
        };
        let b = BatchBuilder::new(0)
            .compression(codec)
            .partition_leader_epoch(leader_epoch(i, N) + 10)
            .records(records(rng, count, ts, PLAIN));
        let info = rec.data(None, b)?;
        if i == 2 {
            third = Some(info.first_offset);
        }
    }
    if let Some(offset) = third {
        rec.w.advance_log_start_offset(offset)?;
    }
    Ok(())
}

/// LogAppendTime batches: the broker's append time replaces record timestamps.
fn log_append_time(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock) -> Result<()> {
    const N: usize = 40;
    for i in 0..N {
        let ts = clock.tick(rng);
        let count = rng.range(1, 10);
        let codec = [Compression::None, Compression::Lz4, Compression::Snappy][i % 3];
        let b = BatchBuilder::new(0)
            .compression(codec)
            .partition_leader_epoch(leader_epoch(i, N))
            .log_append_time(ts + rng.range(5, 50))
            .records(records(rng, count, ts, PLAIN));
        rec.data(None, b)?;
    }
    Ok(())
}

fn legacy_record(
    offset: i64,
    magic: i8,
    timestamp: i64,
    ts_type: TimestampType,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
) -> ExpectedRecord {
    ExpectedRecord {
        offset,
        timestamp: if magic == 0 { NO_TIMESTAMP } else { timestamp },
        timestamp_type: (magic > 0).then_some(ts_type),
        key,
        value,
        headers: Vec::new(),
        producer_id: NO_PRODUCER_ID,
        transaction: TxnStatus::None,
        magic,
    }
}

/// Messages written before the upgrade to magic 2 — v0 and v1, plain and
/// compressed wrappers (v1 CreateTime and LogAppendTime) — then v2 batches.
fn legacy(rec: &mut Recorder, rng: &mut SampleRng, clock: &mut Clock) -> Result<()> {
    let style = Style {
        min_value: 100,
        max_value: 1_500,
        headers: false,
        ..PLAIN
    };
    let spec = |rng: &mut SampleRng, rec: &Recorder, k: i64, ts: i64| {
        let r = record(rng, 0, ts, style);
        LegacySpec {
            offset: rec.w.next_offset() + k,
            timestamp: ts,
            key: r.key,
            value: r.value,
        }
    };
    // Plain messages, one frame each.
    for (magic, count) in [(0i8, 8), (1, 8)] {
        for _ in 0..count {
            let ts = clock.tick(rng);
            let m = spec(rng, rec, 0, ts);
            let frame = encode_message(
                m.offset,
                magic,
                ts,
                TimestampType::CreateTime,
                m.key.as_deref(),
                m.value.as_deref(),
            );
            let expected = legacy_record(m.offset, magic, ts, TimestampType::CreateTime, m.key, m.value);
            rec.legacy(&frame, vec![expected])?;
        }
    }
    // Compressed wrappers.
    for (magic, codec, ts_type, count) in [
        (0i8, Compression::Gzip, TimestampType::CreateTime, 5),
        (0, Compression::Lz4, TimestampType::CreateTime, 4),
        (1, Compression::Snappy, TimestampType::CreateTime, 6),
        (1, Compression::Lz4, TimestampType::LogAppendTime, 6),
        (1, Compression::Gzip, TimestampType::CreateTime, 3),
    ] {
        let ts = clock.tick(rng);
        let inner: Vec<LegacySpec> = (0..count).map(|k| spec(rng, rec, k, ts + k)).collect();
        let append_time = ts + 10;
        let frame = encode_wrapper(magic, codec, ts_type, append_time, &inner);
        let expected = inner
            .into_iter()
            .map(|m| {
                let shown = if ts_type == TimestampType::LogAppendTime {
                    append_time
                } else {
                    m.timestamp
                };
                legacy_record(m.offset, magic, shown, ts_type, m.key, m.value)
            })
            .collect();
        rec.legacy(&frame, expected)?;
    }
    // After the upgrade.
    const N: usize = 20;
    for i in 0..N {
        let ts = clock.tick(rng);
        let count = rng.range(1, 6);
        let b = BatchBuilder::new(0)
            .compression(if i % 2 == 0 {
                Compression::None
            } else {
                Compression::Snappy
            })
            .partition_leader_epoch(leader_epoch(i, N))
            .records(records(rng, count, ts, style));
        rec.data(None, b)?;
    }
    Ok(())
}
