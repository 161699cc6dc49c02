//! Data of every on-disk shape segmirror must copy, produced against a running broker.
//!
//! Each [`Shape`] is one topic whose partition directories exercise one feature of Kafka's storage: compressed
//! batches of every codec (and broker-side recompression), keys / null keys / headers / null values, producer ids
//! and sequences (idempotence), transaction markers and `.txnindex` files (committed and aborted transactions),
//! offset gaps and cleaned segments (compaction), a log start offset above zero (retention plus
//! `DeleteRecordsCommand` in the middle of a segment), and LogAppendTime timestamps. All topics use a small
//! segment size (`internal.segment.bytes` on Kafka 4.x, whose `segment.bytes` has a 1 MiB minimum; `segment.bytes`
//! on 3.x: [`crate::KafkaInstall::segment_bytes_config`]) so every partition has several segments.
//!
//! What was produced comes back as [`ShapeTopic`]s (records with the offsets the broker acknowledged), so a test
//! can compare what a consumer sees on another cluster with what was written here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::broker::KafkaBroker;
use crate::clients::{admin, python_produce, Header, Isolation, OutRecord, ProducePlan, ProduceStep, Record};
use crate::tools::TopicSpec;
use crate::wait::wait_for;

/// Compression codecs of Kafka (`compression.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub const ALL: [Codec; 5] = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd];

    /// The `compression.type` value.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// One kind of topic content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// Producer-side compression with this codec (topic `compression.type=producer`), no idempotence
    /// (producer id -1); keys, null keys, headers (with null values), null values.
    Codec(Codec),
    /// Producer sends uncompressed; the topic's `compression.type=zstd` makes the broker recompress.
    BrokerCompressed,
    /// Two idempotent producers (producer ids and sequences in batches and `.snapshot` files).
    Idempotent,
    /// One transactional producer: transactions alternately committed and aborted (`.txnindex` files).
    Transactions,
    /// `cleanup.policy=compact`, many updates of few keys plus tombstones, after the cleaner ran (offset gaps).
    Compacted,
    /// Retention (`retention.bytes`) deleted old segments; on partition 1 `DeleteRecordsCommand` also moved the
    /// log start offset into the middle of a segment.
    Retention,
    /// `message.timestamp.type=LogAppendTime`.
    LogAppendTime,
}

impl Shape {
    /// Every shape, in a fixed order.
    pub fn all() -> Vec<Shape> {
        let mut all: Vec<Shape> = Codec::ALL.iter().map(|c| Shape::Codec(*c)).collect();
        all.extend([
            Shape::BrokerCompressed,
            Shape::Idempotent,
            Shape::Transactions,
            Shape::Compacted,
            Shape::Retention,
            Shape::LogAppendTime,
        ]);
        all
    }

    /// Topic name suffix.
    pub fn slug(self) -> String {
        match self {
            Shape::Codec(c) => format!("codec-{}", c.name()),
            Shape::BrokerCompressed => "broker-compressed".into(),
            Shape::Idempotent => "idempotent".into(),
            Shape::Transactions => "transactions".into(),
            Shape::Compacted => "compacted".into(),
            Shape::Retention => "retention".into(),
            Shape::LogAppendTime => "log-append-time".into(),
        }
    }

    /// Partitions of the topic.
    pub fn partitions(self) -> i32 {
        match self {
            Shape::Compacted | Shape::LogAppendTime => 1,
            _ => 2,
        }
    }
}

/// Sizes of the produced data.
#[derive(Debug, Clone)]
pub struct ShapeOptions {
    /// Segment size of every topic (`internal.segment.bytes` or `segment.bytes`, by broker version).
    pub segment_bytes: u32,
    /// Records per partition (compacted: total records).
    pub records_per_partition: usize,
    /// Approximate value size in bytes.
    pub value_size: usize,
    /// Prefix of every topic name (lets one broker hold two sets).
    pub topic_prefix: String,
    /// Time to wait for the log cleaner and for retention.
    pub background_timeout: Duration,
}

impl Default for ShapeOptions {
    fn default() -> Self {
        ShapeOptions {
            segment_bytes: 16 * 1024,
            records_per_partition: 600,
            value_size: 100,
            topic_prefix: "shape-".into(),
            background_timeout: Duration::from_secs(90),
        }
    }
}

/// A topic filled with one shape, and what went into it.
#[derive(Debug, Clone)]
pub struct ShapeTopic {
    pub name: String,
    pub shape: Shape,
    pub partitions: i32,
    /// Topic id (as in `partition.metadata`).
    pub topic_id: String,
    /// Topic configs given at creation.
    pub configs: BTreeMap<String, String>,
    /// Every data record produced (including aborted ones and ones later removed by compaction or retention),
    /// with the acknowledged partition, offset and timestamp; sorted by (partition, offset).
    pub records: Vec<Record>,
    /// (partition, offset) of records in aborted transactions.
    pub aborted: BTreeSet<(i32, i64)>,
    /// Log start offset per partition after retention / delete-records (0 where nothing was removed).
    pub log_start_offsets: BTreeMap<i32, i64>,
}

impl ShapeTopic {
    /// What a consumer reading the whole topic must see, in (partition, offset) order — `None` for the compacted
    /// shape, whose surviving records depend on what the cleaner chose (use [`latest_per_key`](Self::latest_per_key)).
    pub fn expected(&self, isolation: Isolation) -> Option<Vec<Record>> {
        if self.shape == Shape::Compacted {
            return None;
        }
        Some(
            self.records
                .iter()
                .filter(|r| r.offset >= self.log_start_offsets.get(&r.partition).copied().unwrap_or(0))
                .filter(|r| isolation == Isolation::ReadUncommitted || !self.aborted.contains(&(r.partition, r.offset)))
                .cloned()
                .collect(),
        )
    }

    /// The last record produced for each (partition, key): what compaction must keep. Null keys are skipped.
    pub fn latest_per_key(&self) -> BTreeMap<(i32, Vec<u8>), Record> {
        let mut latest = BTreeMap::new();
        for r in &self.records {
            if let Some(key) = &r.key {
                latest.insert((r.partition, key.clone()), r.clone());
            }
        }
        latest
    }
}

/// Produces every [`Shape`] on `broker` (see [`produce_shapes`]).
pub fn produce_all_shapes(broker: &KafkaBroker, opts: &ShapeOptions) -> Result<Vec<ShapeTopic>> {
    produce_shapes(broker, &Shape::all(), opts)
}

/// Creates one topic per shape (one admin call), produces all of them in parallel, waits for the log cleaner
/// (compacted) and for retention, moves partition 1 of the retention topic with `DeleteRecordsCommand`, and
/// returns what was produced.
pub fn produce_shapes(broker: &KafkaBroker, shapes: &[Shape], opts: &ShapeOptions) -> Result<Vec<ShapeTopic>> {
    let bootstrap = broker.bootstrap();
    let segment_key = broker.install().segment_bytes_config();
    let specs: Vec<TopicSpec> = shapes.iter().map(|s| topic_spec(*s, opts, segment_key)).collect();
    admin(&bootstrap, &specs, &[]).context("creating the shape topics")?;
    let base_ts = now_ms()? - 3_600_000;

    let produced: Vec<Result<Produced>> = std::thread::scope(|scope| {
        let handles: Vec<_> = shapes
            .iter()
            .zip(&specs)
            .map(|(shape, spec)| {
                let bootstrap = &bootstrap;
                scope.spawn(move || produce_one(bootstrap, *shape, &spec.name, opts, base_ts))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("producer thread panicked")))
            .collect()
    });

    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut out = Vec::new();
    for ((shape, spec), result) in shapes.iter().zip(&specs).zip(produced) {
        let Produced { mut records, aborted } = result.with_context(|| format!("producing {}", spec.name))?;
        records.sort_by_key(|r| (r.partition, r.offset));
        let mut log_start_offsets: BTreeMap<i32, i64> = (0..spec.partitions).map(|p| (p, 0)).collect();
        match shape {
            Shape::Compacted => wait_for_cleaning(broker, &spec.name, opts.background_timeout)?,
            Shape::Retention => {
                for p in 0..spec.partitions {
                    let start = wait_for_retention(broker, &spec.name, p, opts.background_timeout)?;
                    log_start_offsets.insert(p, start);
                }
                if let Some(start) = log_start_offsets.get_mut(&1) {
                    *start += 5;
                    broker.tools().delete_records(&spec.name, 1, *start)?;
                }
            }
            _ => {}
        }
        out.push(ShapeTopic {
            name: spec.name.clone(),
            shape: *shape,
            partitions: spec.partitions,
            topic_id: String::new(),
            configs: spec.configs.clone(),
            records,
            aborted,
            log_start_offsets,
        });
    }
    let ids = admin(&bootstrap, &[], &names).context("describing the shape topics")?;
    for topic in &mut out {
        topic.topic_id = ids
            .get(&topic.name)
            .map(|i| i.topic_id.clone())
            .context("topic id missing")?;
    }
    Ok(out)
}

/// Records of one shape as acknowledged, and which of them were aborted.
struct Produced {
    records: Vec<Record>,
    aborted: BTreeSet<(i32, i64)>,
}

/// The topic of one shape; `segment_key` is the broker version's small-segment config.
fn topic_spec(shape: Shape, opts: &ShapeOptions, segment_key: &str) -> TopicSpec {
    let spec = TopicSpec::new(&format!("{}{}", opts.topic_prefix, shape.slug()), shape.partitions())
        .config(segment_key, opts.segment_bytes);
    match shape {
        Shape::Codec(_) => spec.config("compression.type", "producer"),
        Shape::BrokerCompressed => spec.config("compression.type", "zstd"),
        Shape::Compacted => spec
            .config("cleanup.policy", "compact")
            .config("min.cleanable.dirty.ratio", "0.01")
            .config("min.compaction.lag.ms", 0)
            .config("segment.ms", 100),
        // Retention deletes a segment only while the log minus that segment stays above retention.bytes, so leave
        // room for two segments to go.
        Shape::Retention => spec.config("retention.bytes", u64::from(opts.segment_bytes) * 2),
        Shape::LogAppendTime => spec.config("message.timestamp.type", "LogAppendTime"),
        Shape::Idempotent | Shape::Transactions => spec,
    }
}

/// splitmix64: deterministic pseudo-random data without a dependency.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Words of which values are made: random choices among them compress with every codec (LZ4 and snappy only
/// find repeats; random letters would not shrink for them).
const WORDS: [&str; 16] = [
    "kafka ",
    "segment ",
    "offset ",
    "batch ",
    "record ",
    "header ",
    "mirror ",
    "broker ",
    "leader ",
    "epoch ",
    "index ",
    "topic ",
    "replica ",
    "cleaner ",
    "marker ",
    "snapshot ",
];

/// A value of `size` bytes (or its prefix length if larger): a readable prefix, then pseudo-random words.
fn value_bytes(seed: u64, i: usize, size: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    let prefix_len = v.len();
    let mut state = mix(seed ^ (i as u64).wrapping_mul(0x1000_0001));
    while v.len() < size {
        state = mix(state);
        for nibble in 0..16 {
            v.extend_from_slice(WORDS[((state >> (nibble * 4)) & 0xf) as usize].as_bytes());
        }
    }
    v.truncate(size.max(prefix_len));
    v
}

/// Keys, null keys, headers (some with null or binary values) and null values, in a fixed pattern.
fn varied_record(seed: u64, i: usize, partition: i32, ts: i64, value_size: usize) -> OutRecord {
    let key = (i % 5 != 4).then(|| format!("key-{}", i % 50).into_bytes());
    let value = (i % 17 != 16).then(|| value_bytes(seed, i, value_size));
    let headers = match i % 3 {
        0 => Vec::new(),
        1 => vec![Header {
            key: "h1".into(),
            value: Some(format!("v{i}").into_bytes()),
        }],
        _ => vec![
            Header {
                key: "bin".into(),
                value: Some(vec![0x00, 0xff, 0x7f, 0x80]),
            },
            Header {
                key: "null".into(),
                value: None,
            },
        ],
    };
    OutRecord {
        partition: Some(partition),
        key,
        value,
        headers,
        timestamp: Some(ts),
    }
}

fn produce_one(bootstrap: &str, shape: Shape, topic: &str, opts: &ShapeOptions, base_ts: i64) -> Result<Produced> {
    let n = opts.records_per_partition;
    let seed = mix(topic
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))));
    let parts = shape.partitions();
    let all: Vec<OutRecord> = (0..n * parts as usize)
        .map(|i| {
            varied_record(
                seed,
                i,
                (i % parts as usize) as i32,
                base_ts + i as i64 * 10,
                opts.value_size,
            )
        })
        .collect();
    // Small batches (several per segment) and a little linger so batches hold several records.
    let base = |codec: &str| {
        ProducePlan::new(topic)
            .config("acks", "all")
            .config("linger.ms", 10)
            .config("batch.size", 4096)
            .config("compression.type", codec)
    };
    let mut aborted = BTreeSet::new();
    let records = match shape {
        Shape::Codec(codec) => python_produce(
            bootstrap,
            &base(codec.name())
                .config("enable.idempotence", false)
                .step(ProduceStep::Send(all)),
        )?,
        Shape::BrokerCompressed | Shape::LogAppendTime => python_produce(
            bootstrap,
            &base("none")
                .config("enable.idempotence", false)
                .step(ProduceStep::Send(all)),
        )?,
        Shape::Idempotent => {
            let half = all.len() / 2;
            let mut first = all;
            let second = first.split_off(half);
            let mut records = Vec::new();
            for part in [first, second] {
                let plan = base("none")
                    .config("enable.idempotence", true)
                    .step(ProduceStep::Send(part));
                records.extend(python_produce(bootstrap, &plan)?);
            }
            records
        }
        Shape::Transactions => {
            const TRANSACTIONS: usize = 10;
            let chunk = all.len().div_ceil(TRANSACTIONS).max(1);
            let mut plan = base("none")
                .config("transactional.id", format!("{topic}-txn"))
                .step(ProduceStep::InitTransactions);
            let mut abort_flags = Vec::new();
            for (t, records) in all.chunks(chunk).enumerate() {
                let abort = t % 2 == 1;
                plan = plan
                    .step(ProduceStep::BeginTransaction)
                    .step(ProduceStep::Send(records.to_vec()))
                    .step(if abort {
                        ProduceStep::AbortTransaction
                    } else {
                        ProduceStep::CommitTransaction
                    });
                abort_flags.extend(std::iter::repeat_n(abort, records.len()));
            }
            let records = python_produce(bootstrap, &plan)?;
            for (r, abort) in records.iter().zip(abort_flags) {
                if abort {
                    aborted.insert((r.partition, r.offset));
                }
            }
            records
        }
        Shape::Compacted => {
            // Many updates of 40 keys in pseudo-random order (so the survivors are scattered and leave offset
            // gaps), then tombstones for 5 of them.
            let mut out: Vec<OutRecord> = (0..n)
                .map(|i| OutRecord {
                    partition: Some(0),
                    key: Some(format!("ckey-{}", mix(seed ^ i as u64) % 40).into_bytes()),
                    value: Some(value_bytes(seed, i, opts.value_size)),
                    headers: if i % 2 == 0 {
                        Vec::new()
                    } else {
                        vec![Header {
                            key: "u".into(),
                            value: None,
                        }]
                    },
                    timestamp: Some(base_ts + i as i64 * 10),
                })
                .collect();
            out.extend((0..5).map(|k| OutRecord {
                partition: Some(0),
                key: Some(format!("ckey-{k}").into_bytes()),
                value: None,
                headers: Vec::new(),
                timestamp: Some(base_ts + (n + k) as i64 * 10),
            }));
            python_produce(
                bootstrap,
                &base("none")
                    .config("enable.idempotence", false)
                    .step(ProduceStep::Send(out)),
            )?
        }
        Shape::Retention => {
            // Uncompressed, so the log spans enough segments for retention to remove some and keep several.
            python_produce(
                bootstrap,
                &base("none")
                    .config("enable.idempotence", true)
                    .step(ProduceStep::Send(all)),
            )?
        }
    };
    Ok(Produced { records, aborted })
}

fn now_ms() -> Result<i64> {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("clock before 1970")?;
    i64::try_from(d.as_millis()).context("clock overflow")
}

/// Base offsets of the live `.log` files of a partition directory (not `.deleted`/`.cleaned`/`.swap`), sorted.
pub fn segment_base_offsets(partition_dir: &Path) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(partition_dir).with_context(|| format!("listing {}", partition_dir.display()))? {
        let name = entry?.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        if let Ok(base) = stem.parse::<i64>() {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Entries of an offset checkpoint file (`cleaner-offset-checkpoint`, `log-start-offset-checkpoint`, ...):
/// (topic, partition) → offset. A missing or empty file gives an empty map.
pub fn read_offset_checkpoint(path: &Path) -> Result<BTreeMap<(String, i32), i64>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = BTreeMap::new();
    for line in text.lines().skip(2) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [topic, partition, offset] = fields[..] else {
            bail!("malformed line {line:?} in {}", path.display());
        };
        out.insert((topic.to_string(), partition.parse()?), offset.parse()?);
    }
    Ok(out)
}

fn wait_for_cleaning(broker: &KafkaBroker, topic: &str, timeout: Duration) -> Result<()> {
    let checkpoint = broker.log_dir().join("cleaner-offset-checkpoint");
    wait_for(
        &format!("the log cleaner to clean {topic}-0"),
        timeout,
        Duration::from_millis(200),
        || {
            let entries = read_offset_checkpoint(&checkpoint)?;
            Ok(entries.get(&(topic.to_string(), 0)).filter(|o| **o > 0).map(drop))
        },
    )
}

/// Waits until retention removed the first segment and then left the segment list unchanged for a while (one
/// retention pass can remove several segments one after the other); returns the first remaining base offset,
/// which is the new log start offset.
fn wait_for_retention(broker: &KafkaBroker, topic: &str, partition: i32, timeout: Duration) -> Result<i64> {
    const STABLE_FOR: Duration = Duration::from_millis(1500);
    let dir = broker.partition_dir(topic, partition);
    let mut last: Option<(Vec<i64>, std::time::Instant)> = None;
    wait_for(
        &format!("retention to delete the first segments of {topic}-{partition}"),
        timeout,
        Duration::from_millis(100),
        || {
            let bases = segment_base_offsets(&dir)?;
            let first = bases.first().copied().filter(|b| *b > 0);
            match (&last, first) {
                (Some((prev, since)), Some(first)) if *prev == bases => {
                    return Ok((since.elapsed() >= STABLE_FOR).then_some(first));
                }
                _ => last = Some((bases, std::time::Instant::now())),
            }
            Ok(None)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_sized() {
        assert_eq!(value_bytes(1, 7, 100), value_bytes(1, 7, 100));
        assert_ne!(value_bytes(1, 7, 100), value_bytes(2, 7, 100));
        assert_eq!(value_bytes(1, 7, 100).len(), 100);
    }

    #[test]
    fn varied_records_cover_null_keys_values_and_headers() {
        let recs: Vec<OutRecord> = (0..60).map(|i| varied_record(9, i, 0, 0, 50)).collect();
        assert!(recs.iter().any(|r| r.key.is_none()));
        assert!(recs.iter().any(|r| r.value.is_none()));
        assert!(recs.iter().any(|r| r.headers.is_empty()));
        assert!(recs.iter().any(|r| r.headers.iter().any(|h| h.value.is_none())));
    }

    #[test]
    fn offset_checkpoint_parses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cleaner-offset-checkpoint");
        std::fs::write(&p, "0\n2\nshape-compacted 0 480\nt 1 7\n").unwrap();
        let m = read_offset_checkpoint(&p).unwrap();
        assert_eq!(m.get(&("shape-compacted".to_string(), 0)), Some(&480));
        assert_eq!(m.len(), 2);
        assert!(read_offset_checkpoint(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn every_shape_has_a_distinct_topic() {
        let names: BTreeSet<String> = Shape::all().iter().map(|s| s.slug()).collect();
        assert_eq!(names.len(), Shape::all().len());
    }
}
