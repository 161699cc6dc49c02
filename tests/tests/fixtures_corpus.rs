//! The fixture corpus: real Kafka log-dir bytes checked into `tests/fixtures/`, tested without Java.
//!
//! `tests/fixtures/kafka-<version>/` is a log dir a stock broker left after a clean shutdown: one topic per
//! on-disk shape (every codec, broker-side recompression, idempotent and transactional producers with aborted
//! transactions and `.txnindex` files, a compacted log with its `.deleted` leftovers, retention-trimmed logs with
//! a log start offset inside a segment, LogAppendTime) and `__transaction_state`. The KRaft metadata log is left
//! out: a clean shutdown leaves its active indexes preallocated (20 MiB of zeros).
//! `tests/fixtures/MANIFEST.json` lists, per segment, what **Kafka's own** `DumpLogSegments` counted (batches,
//! records, control batches, offsets, codecs) and, per shape partition, a digest of the records as the producer
//! sent them — so these tests compare our reader with Kafka and with the producer, not with itself.
//!
//! Regenerate with `tests/fixtures/regenerate.sh` (runs the ignored test at the bottom against a real broker).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use segment_format::batch::CRC_OFFSET;
use segment_format::dir::{segment_file_name, PartitionDir, SegmentFileKind};
use segment_format::error::Defect;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segmirror_tests::ondisk::{partition_records, records_digest, scan_log, ScannedBatch};
use serde::{Deserialize, Serialize};

const DEEP_STRICT: VerifyOptions = VerifyOptions {
    depth: Depth::Deep,
    strictness: Strictness::Strict,
};
/// The KRaft metadata log, left out of the corpus (see the regeneration).
const METADATA_LOG: &str = "__cluster_metadata-0";
const MANIFEST: &str = "MANIFEST.json";
/// Set to `1` to let the ignored regeneration test overwrite the corpus.
const REGENERATE_ENV: &str = "SEGMIRROR_REGENERATE_FIXTURES";

/// `tests/fixtures/MANIFEST.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CorpusManifest {
    kafka_version: String,
    /// The log dir, relative to `tests/fixtures/`.
    log_dir: String,
    /// How the corpus was produced, in words.
    how: Vec<String>,
    /// Every partition directory of the log dir, sorted by directory name.
    partitions: Vec<FixturePartition>,
    /// Total bytes of every file in the log dir.
    total_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FixturePartition {
    dir: String,
    topic: String,
    partition: i32,
    /// The harness shape (`codec-gzip`, `transactions`, ...); `None` for internal topics.
    shape: Option<String>,
    /// From `log-start-offset-checkpoint`, else the first segment's base offset.
    log_start_offset: i64,
    /// From `replication-offset-checkpoint`.
    high_watermark: Option<i64>,
    /// Live segments, as `DumpLogSegments` read them.
    segments: Vec<FixtureSegment>,
    /// Data (non-control) records on disk.
    data_records: u64,
    /// [`records_digest`] of the data records on disk, computed from what the producer sent; `None` for
    /// internal topics.
    data_records_digest: Option<String>,
    /// Files being deleted or replaced by the broker (`*.deleted`, ...), which verify must skip.
    transient_files: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FixtureSegment {
    file: String,
    base_offset: i64,
    bytes: u64,
    batches: u64,
    /// Sum of the batches' record counts (control records included).
    records: u64,
    control_batches: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
    codecs: Vec<String>,
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn load_manifest() -> (CorpusManifest, PathBuf) {
    let path = fixtures_dir().join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/fixtures/regenerate.sh)", path.display()));
    let manifest: CorpusManifest = serde_json::from_str(&text).unwrap();
    let log_dir = fixtures_dir().join(&manifest.log_dir);
    (manifest, log_dir)
}

fn describe(findings: &[segment_format::report::Finding]) -> String {
    findings.iter().map(|f| format!("\n  {f}")).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// The checks (also run by the regeneration test on the corpus it just wrote)
// ---------------------------------------------------------------------------------------------------------------

/// `verify --deep --strict`: the log dir has no finding at all and covers every partition; verify's totals are
/// Kafka's.
fn check_verify_sound(manifest: &CorpusManifest, log_dir: &Path) {
    let report = verify_paths(&[log_dir.to_path_buf()], &DEEP_STRICT, &NoProgress);
    assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
    assert!(report.findings.is_empty(), "{}", describe(&report.findings));
    let verified: BTreeMap<String, &segment_format::verify::PartitionSummary> = report
        .partitions
        .iter()
        .map(|s| (s.path.file_name().unwrap().to_string_lossy().into_owned(), s))
        .collect();
    let listed: BTreeSet<&str> = manifest.partitions.iter().map(|p| p.dir.as_str()).collect();
    assert_eq!(verified.keys().map(String::as_str).collect::<BTreeSet<_>>(), listed);
    assert!(verified.values().all(|s| s.warnings == 0 && s.errors == 0));
    for p in &manifest.partitions {
        let summary = verified[&p.dir];
        // verify's totals are Kafka's totals.
        let batches: u64 = p.segments.iter().map(|s| s.batches).sum();
        let records: u64 = p.segments.iter().map(|s| s.records).sum();
        let bytes: u64 = p.segments.iter().map(|s| s.bytes).sum();
        let first = p.segments.iter().find_map(|s| s.first_offset);
        let last = p.segments.iter().rev().find_map(|s| s.last_offset);
        assert_eq!(
            (summary.segments, summary.batches, summary.records, summary.bytes),
            (p.segments.len() as u64, batches, records, bytes),
            "{}",
            p.dir
        );
        assert_eq!((summary.first_offset, summary.last_offset), (first, last), "{}", p.dir);
        if let Some(hw) = p.high_watermark {
            assert_eq!(
                last.map(|l| l + 1),
                Some(hw),
                "{}: last offset vs high watermark",
                p.dir
            );
        }
    }
}

/// Our shallow scan of every segment reads exactly what `DumpLogSegments` counted.
fn check_scan_counts(manifest: &CorpusManifest, log_dir: &Path) {
    for p in &manifest.partitions {
        let dir = log_dir.join(&p.dir);
        let listing = PartitionDir::open(&dir).unwrap();
        let files: Vec<String> = listing
            .segments
            .iter()
            .map(|s| s.log.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            files,
            p.segments.iter().map(|s| s.file.clone()).collect::<Vec<_>>(),
            "{}",
            p.dir
        );
        let transient: Vec<String> = listing
            .transient_files
            .iter()
            .map(|t| t.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            transient.iter().collect::<BTreeSet<_>>(),
            p.transient_files.iter().collect(),
            "{}",
            p.dir
        );
        for s in &p.segments {
            let path = dir.join(&s.file);
            let batches = scan_log(&path).unwrap();
            let what = path.display();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), s.bytes, "{what}");
            assert_eq!(batches.len() as u64, s.batches, "{what}");
            assert_eq!(
                batches.iter().map(|b| b.header.records_count as u64).sum::<u64>(),
                s.records,
                "{what}"
            );
            assert_eq!(
                batches.iter().filter(|b| b.info.is_control).count() as u64,
                s.control_batches,
                "{what}"
            );
            assert_eq!(batches.first().map(|b| b.info.base_offset), s.first_offset, "{what}");
            assert_eq!(batches.last().map(|b| b.info.last_offset), s.last_offset, "{what}");
            let codecs: BTreeSet<String> = batches
                .iter()
                .map(|b| b.header.attributes.compression().map_or("?", |c| c.name()).to_string())
                .collect();
            assert_eq!(codecs, s.codecs.iter().cloned().collect(), "{what}");
            assert_eq!(s.base_offset, segment_base(&s.file), "{what}");
        }
    }
}

fn segment_base(file: &str) -> i64 {
    file.split('.').next().unwrap().parse().unwrap()
}

/// Deep-walking every record of every partition works, and for the shape partitions decodes exactly what the
/// producer sent. Every codec is present.
fn check_deep_records(manifest: &CorpusManifest, log_dir: &Path) {
    let mut codecs = BTreeSet::new();
    for p in &manifest.partitions {
        let records = partition_records(&log_dir.join(&p.dir), p.partition).unwrap();
        assert_eq!(records.len() as u64, p.data_records, "{}", p.dir);
        if let Some(digest) = &p.data_records_digest {
            assert_eq!(
                &records_digest(&records),
                digest,
                "{}: decoded records differ from the produced",
                p.dir
            );
        }
        codecs.extend(p.segments.iter().flat_map(|s| s.codecs.iter().cloned()));
    }
    let all: BTreeSet<String> = ["none", "gzip", "snappy", "lz4", "zstd"].map(String::from).into();
    assert_eq!(codecs, all);
}

/// Every live `.log` of the corpus, with its partition dir name and batches.
fn corpus_logs(manifest: &CorpusManifest, log_dir: &Path) -> Vec<(String, PathBuf, Vec<ScannedBatch>)> {
    manifest
        .partitions
        .iter()
        .flat_map(|p| p.segments.iter().map(move |s| (p.dir.clone(), s.file.clone())))
        .map(|(dir, file)| {
            let path = log_dir.join(&dir).join(&file);
            let batches = scan_log(&path).unwrap();
            (dir, path, batches)
        })
        .filter(|(_, _, batches)| !batches.is_empty())
        .collect()
}

/// Copies partition dir `dir` of the corpus to a temporary log dir, xors the byte at `position` of `file` with
/// `xor` there, verifies the copy and asserts the CRC mismatch of the batch at `batch_position` is reported
/// where it is.
fn assert_flip_detected(log_dir: &Path, dir: &str, file: &Path, batch: &ScannedBatch, position: u64, xor: u8) {
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join(dir);
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(log_dir.join(dir)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    let target = copy.join(file.file_name().unwrap());
    let mut bytes = std::fs::read(&target).unwrap();
    bytes[position as usize] ^= xor;
    std::fs::write(&target, bytes).unwrap();
    let report = verify_paths(std::slice::from_ref(&copy), &DEEP_STRICT, &NoProgress);
    assert!(
        !report.is_sound(),
        "flip at {} byte {position} not detected",
        file.display()
    );
    let crc_at = batch.info.position + CRC_OFFSET as u64;
    let hit = report.findings.iter().any(|f| {
        f.path == target
            && f.position == Some(crc_at)
            && f.offset == Some(batch.info.base_offset)
            && matches!(f.defect, Defect::CrcMismatch { .. })
    });
    assert!(
        hit,
        "flip at {} byte {position}: no CRC mismatch at byte {crc_at} (offset {}):{}",
        file.display(),
        batch.info.base_offset,
        describe(&report.findings)
    );
}

/// One flipped byte in the CRC-covered part of one batch of each `.log` (a batch and byte chosen from the file
/// name) is reported as a CRC mismatch of that batch, with its position and offset.
fn check_flips_detected(manifest: &CorpusManifest, log_dir: &Path) {
    let logs = corpus_logs(manifest, log_dir);
    assert!(logs.len() > 20, "only {} segment files", logs.len());
    for (dir, path, batches) in &logs {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let seed = name
            .bytes()
            .chain(dir.bytes())
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let batch = &batches[(seed % batches.len() as u64) as usize];
        let covered = batch.info.size - 21;
        let position = batch.info.position + 21 + seed % covered;
        assert_flip_detected(log_dir, dir, path, batch, position, 0x10);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tests (no Java)
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn every_fixture_partition_verifies_sound_under_deep_strict() {
    let (manifest, log_dir) = load_manifest();
    check_verify_sound(&manifest, &log_dir);
    // The corpus really holds what the checks are about.
    assert!(manifest
        .partitions
        .iter()
        .any(|p| p.transient_files.iter().any(|f| f.ends_with(".deleted"))));
    assert!(manifest
        .partitions
        .iter()
        .any(|p| p.log_start_offset > p.segments.first().map_or(0, |s| s.base_offset)));
    let log_dir = &log_dir;
    let txn_indexes = manifest
        .partitions
        .iter()
        .flat_map(|p| {
            p.segments.iter().map(move |s| {
                log_dir
                    .join(&p.dir)
                    .join(segment_file_name(s.base_offset, SegmentFileKind::TxnIndex))
            })
        })
        .filter(|f| f.exists())
        .count();
    assert!(txn_indexes > 0, "no .txnindex in the corpus");
}

#[test]
fn scan_reads_the_batch_and_record_counts_kafka_listed() {
    let (manifest, log_dir) = load_manifest();
    check_scan_counts(&manifest, &log_dir);
}

#[test]
fn deep_walk_decodes_every_record_of_every_codec_as_produced() {
    let (manifest, log_dir) = load_manifest();
    check_deep_records(&manifest, &log_dir);
}

#[test]
fn a_flipped_byte_in_each_fixture_log_is_detected() {
    let (manifest, log_dir) = load_manifest();
    check_flips_detected(&manifest, &log_dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any byte of any batch's CRC-covered part (attributes to the end), changed in any way, is reported as a
    /// CRC mismatch of that batch.
    #[test]
    fn any_flip_in_a_crc_covered_byte_is_detected(file in any::<prop::sample::Index>(),
                                                   batch in any::<prop::sample::Index>(),
                                                   at in any::<prop::sample::Index>(),
                                                   xor in 1u8..=255) {
        let (manifest, log_dir) = load_manifest();
        let logs = corpus_logs(&manifest, &log_dir);
        let (dir, path, batches) = &logs[file.index(logs.len())];
        let b = &batches[batch.index(batches.len())];
        let position = b.info.position + 21 + at.index((b.info.size - 21) as usize) as u64;
        assert_flip_detected(&log_dir, dir, path, b, position, xor);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Regeneration (real broker; run by tests/fixtures/regenerate.sh)
// ---------------------------------------------------------------------------------------------------------------

mod regenerate {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use segment_format::checkpoint::OffsetCheckpoint;
    use segment_format::dir::{PartitionDir, LOG_START_OFFSET_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE};
    use segmirror_tests::dump::dump_deep;
    use segmirror_tests::install::pinned_kafka_version;
    use segmirror_tests::ondisk::records_digest;
    use segmirror_tests::shapes::{produce_shapes, Shape, ShapeOptions};
    use segmirror_tests::{BrokerConfig, KafkaBroker, Record};

    use super::*;

    /// Small enough for a few hundred KiB in all, large enough for several segments per partition, three ~4 KiB
    /// batches per uncompressed segment (so sealed offset indexes have entries: one is added once more than
    /// index.interval.bytes = 4096 were appended since the last), and a retention topic that loses a segment
    /// (retention.bytes = 2 segments, so it needs more than 3 segments of data).
    fn options() -> ShapeOptions {
        ShapeOptions {
            segment_bytes: 12288,
            records_per_partition: 500,
            value_size: 60,
            topic_prefix: "fx-".into(),
            background_timeout: Duration::from_secs(90),
        }
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &target);
            } else {
                std::fs::copy(e.path(), target).unwrap();
            }
        }
    }

    fn total_bytes(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                if e.file_type().unwrap().is_dir() {
                    total_bytes(&e.path())
                } else {
                    e.metadata().unwrap().len()
                }
            })
            .sum()
    }

    #[test]
    #[ignore = "needs a real Kafka broker; run tests/fixtures/regenerate.sh"]
    fn regenerate_fixture_corpus() {
        assert_eq!(
            std::env::var(REGENERATE_ENV).as_deref(),
            Ok("1"),
            "this overwrites tests/fixtures; set {REGENERATE_ENV}=1 (tests/fixtures/regenerate.sh does)"
        );
        let version = pinned_kafka_version();
        // Files renamed *.deleted stay for 10 minutes (default 1): the corpus keeps the cleaner's and retention's
        // leftovers, which verify must skip.
        let mut broker =
            KafkaBroker::start(BrokerConfig::new("fixtures").property("log.segment.delete.delay.ms", 600_000)).unwrap();
        let opts = options();
        let topics = produce_shapes(&broker, &Shape::all(), &opts).unwrap();
        broker.stop().unwrap();

        let staging = tempfile::tempdir().unwrap();
        let log_dir_name = format!("kafka-{version}");
        let log_dir = staging.path().join(&log_dir_name);
        copy_dir(broker.log_dir(), &log_dir);
        // The KRaft metadata log is left out: a clean shutdown leaves its active segment's indexes preallocated
        // (2 × 10 MiB of zero tail), and it is not a partition the broker loads from the log dir.
        // real_kafka_format.rs verifies it on a live broker.
        std::fs::remove_dir_all(log_dir.join(METADATA_LOG)).unwrap();

        let lso = OffsetCheckpoint::read(&log_dir.join(LOG_START_OFFSET_CHECKPOINT_FILE)).unwrap();
        let hw = OffsetCheckpoint::read(&log_dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE)).unwrap();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&log_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        let logs: Vec<PathBuf> = dirs
            .iter()
            .flat_map(|d| PartitionDir::open(d).unwrap().segments.into_iter().map(|s| s.log))
            .collect();
        // Kafka's own reading of every segment: the counts the corpus tests hold our reader to.
        let (dumped, _) = dump_deep(broker.install(), &logs).unwrap();

        let mut partitions = Vec::new();
        for dir in &dirs {
            let listing = PartitionDir::open(dir).unwrap();
            let (topic, partition) = (listing.name.topic.clone(), listing.name.partition);
            let mut segments = Vec::new();
            let mut data_offsets = BTreeSet::new();
            for s in &listing.segments {
                let kafka = &dumped[&s.log];
                for b in kafka.batches.iter().filter(|b| !b.is_control) {
                    data_offsets.extend(b.records.iter().map(|r| r.offset));
                }
                segments.push(FixtureSegment {
                    file: s.log.file_name().unwrap().to_string_lossy().into_owned(),
                    base_offset: s.base_offset,
                    bytes: std::fs::metadata(&s.log).unwrap().len(),
                    batches: kafka.batches.len() as u64,
                    records: kafka.batches.iter().map(|b| b.count as u64).sum(),
                    control_batches: kafka.batches.iter().filter(|b| b.is_control).count() as u64,
                    first_offset: kafka.batches.first().map(|b| b.base_offset),
                    last_offset: kafka.batches.last().map(|b| b.last_offset),
                    codecs: kafka
                        .batches
                        .iter()
                        .map(|b| b.codec.clone())
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                });
            }
            // What the producer sent, at the offsets Kafka found data records at.
            let shape_topic = topics.iter().find(|t| t.name == topic);
            let digest = shape_topic.map(|t| {
                let produced: BTreeMap<i64, &Record> = t
                    .records
                    .iter()
                    .filter(|r| r.partition == partition)
                    .map(|r| (r.offset, r))
                    .collect();
                let on_disk: Vec<Record> = data_offsets
                    .iter()
                    .map(|o| {
                        (*produced
                            .get(o)
                            .unwrap_or_else(|| panic!("{topic}-{partition}: offset {o} never produced")))
                        .clone()
                    })
                    .collect();
                records_digest(&on_disk)
            });
            let first_base = listing.segments.first().map_or(0, |s| s.base_offset);
            partitions.push(FixturePartition {
                dir: dir.file_name().unwrap().to_string_lossy().into_owned(),
                shape: shape_topic.map(|t| t.shape.slug()),
                log_start_offset: lso.get(&topic, partition).unwrap_or(first_base),
                high_watermark: hw.get(&topic, partition),
                data_records: data_offsets.len() as u64,
                data_records_digest: digest,
                transient_files: listing
                    .transient_files
                    .iter()
                    .map(|t| t.path.file_name().unwrap().to_string_lossy().into_owned())
                    .collect(),
                segments,
                topic,
                partition,
            });
        }
        let manifest = CorpusManifest {
            kafka_version: version.to_string(),
            log_dir: log_dir_name.clone(),
            how: vec![
                format!(
                    "A single-node KRaft Kafka {version} broker (tests/src/broker.rs defaults, plus \
                         log.segment.delete.delay.ms=600000 so *.deleted files survive until shutdown)."
                ),
                format!(
                    "segmirror_tests::shapes::produce_shapes(every Shape, internal.segment.bytes {}, {} records per \
                     partition, {}-byte values, topic prefix {}): producer-side codecs none/gzip/snappy/lz4/zstd, \
                     broker-side zstd, idempotent producers, committed + aborted transactions, a compacted topic \
                     after the cleaner ran, retention-trimmed partitions (partition 1 also DeleteRecords'd into a \
                     segment), LogAppendTime.",
                    opts.segment_bytes, opts.records_per_partition, opts.value_size, opts.topic_prefix
                ),
                "Clean stop (SIGTERM, .kafka_cleanshutdown written), then the whole log dir copied as is: only \
                 sealed/closed state, indexes trimmed by the broker itself. Nothing was edited; only \
                 __cluster_metadata-0 was left out (a clean shutdown leaves its active segment's .index and \
                 .timeindex preallocated to 10 MiB each, and the broker does not load it from the log dir)."
                    .into(),
                "Segment counts below come from Kafka's DumpLogSegments --deep-iteration; digests from the \
                 records the producer sent (acknowledged offsets and timestamps), at the offsets Kafka found."
                    .into(),
            ],
            total_bytes: total_bytes(&log_dir),
            partitions,
        };
        // The new corpus must pass the corpus tests before it replaces the old one.
        check_verify_sound(&manifest, &log_dir);
        check_scan_counts(&manifest, &log_dir);
        check_deep_records(&manifest, &log_dir);
        check_flips_detected(&manifest, &log_dir);

        let fixtures = fixtures_dir();
        std::fs::create_dir_all(&fixtures).unwrap();
        for e in std::fs::read_dir(&fixtures).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir()
                && path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("kafka-"))
            {
                std::fs::remove_dir_all(&path).unwrap();
            }
        }
        copy_dir(&log_dir, &fixtures.join(&log_dir_name));
        let json = serde_json::to_string_pretty(&manifest).unwrap();
        std::fs::write(fixtures.join(MANIFEST), json + "\n").unwrap();
        eprintln!(
            "fixture corpus: {} partitions, {} segments, {} bytes in {}",
            manifest.partitions.len(),
            manifest.partitions.iter().map(|p| p.segments.len()).sum::<usize>(),
            manifest.total_bytes,
            fixtures.join(&log_dir_name).display()
        );
    }
}
