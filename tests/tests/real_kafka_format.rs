//! `segment-format` against a real Kafka broker, in both directions: segmirror reads what Kafka wrote, and Kafka
//! reads what segmirror wrote.
//!
//! 1. **Real broker → our reader.** A stock Kafka 4.x fills one topic per on-disk shape (every codec, broker-side
//!    recompression, idempotent and transactional producers with aborts, a compacted log with `.deleted` files,
//!    retention-trimmed logs, LogAppendTime). `verify --deep` must call the log dir sound while the broker runs
//!    (idle, and while a producer writes and rolls segments under it) and `verify --deep --strict` after a clean
//!    shutdown; every batch our scan reads must equal what Kafka's own `DumpLogSegments` prints, and every
//!    record we decode must equal what the producer sent.
//! 2. **Our writer → real broker.** The sample partitions of `segment_format::writer::sample` (every codec,
//!    headers, null keys, idempotence, committed and aborted transactions with `.txnindex`, compaction-like gaps
//!    and empty batches, a base offset above zero with a raised log start offset, LogAppendTime, legacy v0/v1
//!    messages, several segments and leader epochs) are installed into a stopped broker under the target's
//!    topic ids, and a real consumer must read exactly what the writer recorded; the broker must continue the
//!    offsets when producing and survive a clean restart; `DumpLogSegments` must find nothing wrong in the
//!    writer's files. What the broker does with leader epochs above its own is recorded (it matters for
//!    promotion, KIP-1279).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use segment_format::batch::ControlType;
use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint, OffsetCheckpoint, OffsetCheckpointEntry};
use segment_format::dir::{
    segment_file_name, SegmentFileKind, LEADER_EPOCH_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
    PARTITION_METADATA_FILE, RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_format::error::Defect;
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::report::{Finding, Severity};
use segment_format::verify::{verify_paths, Depth, NoProgress, Report, Strictness, VerifyOptions};
use segment_format::writer::sample::{self, write_sample, Manifest, SampleOptions};
use segmirror_tests::dump::{dump_deep, run_dump, DumpedFile};
use segmirror_tests::ondisk::{log_records, partition_records, scan_log, scan_partition};
use segmirror_tests::segmirror_cli::segmirror_verify;
use segmirror_tests::shapes::{read_offset_checkpoint, segment_base_offsets, Shape, ShapeOptions, ShapeTopic};
use segmirror_tests::*;

const DEEP: VerifyOptions = VerifyOptions {
    depth: Depth::Deep,
    strictness: Strictness::Lenient,
};
const DEEP_STRICT: VerifyOptions = VerifyOptions {
    depth: Depth::Deep,
    strictness: Strictness::Strict,
};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Base offset of a segment file from its name (`00000000000000000042.index` → 42).
fn base_of(path: &Path) -> Option<i64> {
    path.file_name()?.to_str()?.split('.').next()?.parse().ok()
}

/// The `.log` files of the live segments of a partition dir.
fn live_logs(dir: &Path) -> Vec<PathBuf> {
    segment_base_offsets(dir)
        .unwrap()
        .into_iter()
        .map(|b| dir.join(segment_file_name(b, SegmentFileKind::Log)))
        .collect()
}

fn partition_dirs(log_dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "__cluster_metadata-0"))
        .collect();
    dirs.sort();
    dirs
}

fn describe(findings: &[Finding]) -> String {
    findings.iter().map(|f| format!("\n  {f}")).collect()
}

/// States a running broker legitimately leaves in the newest segment, which `verify` reports as warnings:
/// a partial batch being appended, a preallocated zero tail, and the offset index of a just-rolled segment that
/// the broker creates lazily (`LazyIndex`) after the `.log`. `newest` is the newest segment base offset seen
/// before the verification started: a legitimate warning is never about an older segment.
fn is_live_state_warning(f: &Finding, newest: i64) -> bool {
    let message = f.defect.to_string();
    f.severity == Severity::Warning
        && base_of(&f.path).is_some_and(|b| b >= newest)
        && (message.contains("missing: the broker rebuilds it at load")
            || message.contains("a broker mid-write leaves this")
            || message.contains("preallocated active segment")
            || message.contains("file changed while read"))
}

// ---------------------------------------------------------------------------------------------------------------
// Kafka's reading vs ours
// ---------------------------------------------------------------------------------------------------------------

/// Every batch of every file, as our scan reads it, must equal what `DumpLogSegments --deep-iteration` printed:
/// offsets, record count, position, size, magic, codec, CRC, flags, producer fields, leader epoch, max timestamp,
/// and per record offset, timestamp, key and value sizes (control records: the marker type). Returns
/// (batches, records) compared.
fn assert_same_as_kafka(dumped: &BTreeMap<PathBuf, DumpedFile>, files: &[PathBuf]) -> (usize, usize) {
    let (mut batches, mut records) = (0, 0);
    for file in files {
        let kafka = dumped
            .get(file)
            .unwrap_or_else(|| panic!("DumpLogSegments did not dump {}", file.display()));
        let ours = scan_log(file).unwrap();
        assert_eq!(ours.len(), kafka.batches.len(), "batch count of {}", file.display());
        let mut data_records = log_records(file, 0).unwrap().into_iter();
        for (o, k) in ours.iter().zip(&kafka.batches) {
            let (h, i) = (&o.header, &o.info);
            let what = format!("{} batch at {}", file.display(), i.position);
            assert!(k.is_valid, "{what}: Kafka says the CRC is invalid");
            assert_eq!(
                (
                    i.base_offset,
                    i.last_offset,
                    i64::from(h.records_count),
                    i.position,
                    i.size
                ),
                (k.base_offset, k.last_offset, k.count, k.position, k.size),
                "{what}"
            );
            assert_eq!(
                (
                    h.magic,
                    h.crc,
                    h.attributes.compression().map(|c| c.name()).unwrap_or("?")
                ),
                (k.magic, k.crc, k.codec.as_str()),
                "{what}"
            );
            assert_eq!(
                (
                    i.is_control,
                    i.is_transactional,
                    h.producer_id,
                    i64::from(h.producer_epoch)
                ),
                (k.is_control, k.is_transactional, k.producer_id, k.producer_epoch),
                "{what}"
            );
            assert_eq!(
                (
                    i64::from(h.base_sequence),
                    i64::from(h.partition_leader_epoch),
                    h.max_timestamp
                ),
                (k.base_sequence, k.partition_leader_epoch, k.max_timestamp),
                "{what}"
            );
            let ts_type = format!("{:?}", h.attributes.timestamp_type());
            assert_eq!(ts_type, k.timestamp_type, "{what}");
            assert_eq!(
                k.records.len() as i64,
                k.count,
                "{what}: Kafka iterated a different count"
            );
            if i.is_control {
                let expected = match i.control {
                    Some(ControlType::Abort) => Some("ABORT"),
                    Some(ControlType::Commit) => Some("COMMIT"),
                    _ => None,
                };
                for r in &k.records {
                    assert_eq!(r.end_txn_marker.as_deref(), expected, "{what}");
                }
            } else {
                for kr in &k.records {
                    let r = data_records
                        .next()
                        .unwrap_or_else(|| panic!("{what}: we decoded fewer records"));
                    let size = |b: &Option<Vec<u8>>| b.as_ref().map_or(-1, |b| b.len() as i64);
                    assert_eq!(
                        (r.offset, r.timestamp, Some(size(&r.key)), Some(size(&r.value))),
                        (kr.offset, kr.timestamp, kr.key_size, kr.value_size),
                        "{what}"
                    );
                    records += 1;
                }
            }
            batches += 1;
        }
        assert!(
            data_records.next().is_none(),
            "{}: we decoded more records than Kafka",
            file.display()
        );
    }
    (batches, records)
}

// ---------------------------------------------------------------------------------------------------------------
// 1. Real broker → segmirror verify
// ---------------------------------------------------------------------------------------------------------------

/// Records of the live-writes phase (about 160 segments of 16 KiB).
const LIVE_RECORDS: usize = 15_000;

/// A summary row of `segmirror verify --json`.
#[derive(Debug, serde::Deserialize)]
struct JsonSummary {
    topic: Option<String>,
    partition: Option<i32>,
    segments: u64,
    batches: u64,
    records: u64,
    bytes: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
    warnings: u64,
    errors: u64,
}

#[test]
fn real_broker_partitions_verify_sound_running_and_after_clean_shutdown() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("verify-real")).unwrap();
    let topics = shapes::produce_all_shapes(&broker, &ShapeOptions::default()).unwrap();
    let log_dir = broker.log_dir().to_path_buf();

    // (a) Running and idle. The active segments have their indexes preallocated to segment.index.bytes with a
    // zero tail, the log dir is locked and has no clean-shutdown marker.
    assert!(log_dir.join(".lock").exists() && !log_dir.join(CLEAN_SHUTDOWN_FILE).exists());
    let preallocated = partition_dirs(&log_dir)
        .iter()
        .filter_map(|d| live_logs(d).last().map(|l| l.with_extension("index")))
        .filter(|i| std::fs::metadata(i).is_ok_and(|m| m.len() == 10 * 1024 * 1024))
        .count();
    assert!(preallocated >= 20, "only {preallocated} preallocated active indexes");
    let running = verify_paths(std::slice::from_ref(&log_dir), &DEEP, &NoProgress);
    assert!(running.io_errors.is_empty(), "{:?}", running.io_errors);
    // A running broker that is not writing leaves nothing verify must even warn about: a zero index tail in the
    // newest segment is how Kafka preallocates, not a defect.
    assert!(
        running.findings.is_empty(),
        "running broker:{}",
        describe(&running.findings)
    );
    // Strict, too: strict only rejects what a broker leaves *mid-write* (a partial tail batch), and an idle
    // broker is not mid-write. So `--deep --strict` must pass on every partition dir of a running broker.
    let dirs = partition_dirs(&log_dir);
    let dir_refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let strict_running = segmirror_verify(&dir_refs, &["--deep", "--strict", "--json"]).unwrap();
    assert_eq!(strict_running.code, 0, "{strict_running}");
    let doc = strict_running.json().unwrap();
    assert_eq!(
        (doc["errors"].as_u64(), doc["warnings"].as_u64()),
        (Some(0), Some(0)),
        "{strict_running}"
    );
    assert_eq!(doc["partitions"].as_array().map(Vec::len), Some(dirs.len()));

    // (a2) Running and writing: a producer appends small batches (rolling a 16 KiB segment every ~85 records)
    // while verify reads the partition again and again. Verify must never report corruption; its only warnings
    // are live states of the newest segment. Strict runs may only reject a partial batch at the newest tail.
    let live = live_writes_phase(&broker);

    // (b) Clean shutdown: the whole log dir is sound under --deep --strict with no finding at all.
    broker.stop().unwrap();
    assert!(log_dir.join(CLEAN_SHUTDOWN_FILE).is_file() && !log_dir.join(".lock").exists());
    let compacted = topics.iter().find(|t| t.shape == Shape::Compacted).unwrap();
    let compacted_dir = broker.partition_dir(&compacted.name, 0);
    let deleted = std::fs::read_dir(&compacted_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".deleted"))
        .count();
    assert!(deleted > 0, "the cleaner left no .deleted files to skip");

    let run = segmirror_verify(&[&log_dir], &["--deep", "--strict", "--json"]).unwrap();
    assert_eq!(run.code, 0, "{run}");
    let doc = run.json().unwrap();
    assert_eq!(doc["sound"], true, "{run}");
    assert_eq!(doc["findings"].as_array().map(Vec::len), Some(0), "{run}");
    let summaries: Vec<JsonSummary> = serde_json::from_value(doc["partitions"].clone()).unwrap();
    let by_name: BTreeMap<(String, i32), &JsonSummary> = summaries
        .iter()
        .map(|s| ((s.topic.clone().unwrap(), s.partition.unwrap()), s))
        .collect();
    // The log-dir walk covers every partition the broker loads (shape topics, __transaction_state, the live
    // topic) and, like LogManager.loadLogs, not the KRaft metadata log.
    assert_eq!(summaries.len(), partition_dirs(&log_dir).len());
    assert!(by_name.contains_key(&("__transaction_state".to_string(), 0)));
    assert!(!by_name.keys().any(|(t, _)| t == "__cluster_metadata"));
    assert!(summaries.iter().all(|s| s.errors == 0 && s.warnings == 0));

    // The library agrees with the binary.
    let lib = verify_paths(std::slice::from_ref(&log_dir), &DEEP_STRICT, &NoProgress);
    assert!(
        lib.findings.is_empty() && lib.io_errors.is_empty(),
        "{}",
        describe(&lib.findings)
    );

    // Summaries against what was produced. Highwater marks are checkpointed at shutdown (= log end offsets).
    let hw = read_offset_checkpoint(&log_dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE)).unwrap();
    let lso = read_offset_checkpoint(&log_dir.join(LOG_START_OFFSET_CHECKPOINT_FILE)).unwrap();
    let mut kafka_files = Vec::new();
    for topic in &topics {
        for p in 0..topic.partitions {
            let dir = broker.partition_dir(&topic.name, p);
            kafka_files.extend(live_logs(&dir));
            check_shape_partition(topic, p, &dir, by_name[&(topic.name.clone(), p)], &hw, &lso);
        }
    }
    let live_summary = by_name[&(live.topic.clone(), 0)];
    assert_eq!(live_summary.records as usize, LIVE_RECORDS);
    assert_eq!(
        (live_summary.first_offset, live_summary.last_offset),
        (Some(0), Some(LIVE_RECORDS as i64 - 1))
    );

    // Kafka's own reader over every shape segment (one JVM): batch for batch, record for record, the same.
    let (dumped, out) = dump_deep(broker.install(), &kafka_files).unwrap();
    let (batches, records) = assert_same_as_kafka(&dumped, &kafka_files);
    // Kafka's only remark: offset gaps, in the compacted partition alone.
    let gaps = offset_gaps(&out.stderr);
    assert!(gaps.keys().all(|f| f.starts_with(&compacted_dir)), "{gaps:?}");
    assert!(
        !gaps.is_empty(),
        "DumpLogSegments saw no gaps in the compacted partition"
    );
    let other: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.starts_with("Non-consecutive offsets in ") && !l.contains(" is followed by "))
        .collect();
    assert!(other.is_empty(), "DumpLogSegments complained:\n{}", out.stderr);
    eprintln!(
        "real broker: {} shape partitions, {} segments, {batches} batches, {records} data records, {} bytes identical \
         to DumpLogSegments; live writes: {} verify runs ({} strict), {} live-state warnings, {} strict rejections",
        by_name.len() - 2,
        kafka_files.len(),
        kafka_files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum::<u64>(),
        live.runs,
        live.strict_runs,
        live.warnings,
        live.strict_errors
    );

    // The KRaft metadata log is not a partition the broker loads from the log dir, but it is a log of the same
    // format: verifying it directly is sound (its control records are LEADER_CHANGE / KRAFT_VERSION /
    // KRAFT_VOTERS, not transaction markers). Its two KRaft files are not segment files: warned about as unknown.
    let metadata = log_dir.join("__cluster_metadata-0");
    let run = segmirror_verify(&[&metadata], &["--deep", "--strict", "--json"]).unwrap();
    assert_eq!(run.code, 0, "{run}");
    let doc = run.json().unwrap();
    assert_eq!(doc["errors"], 0, "{run}");
    for f in doc["findings"].as_array().unwrap() {
        let name = Path::new(f["path"].as_str().unwrap())
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            name == "quorum-state" || name.ends_with(".checkpoint"),
            "unexpected finding on the metadata log: {f}"
        );
        assert_eq!(f["defect"]["message"], "unknown file", "{f}");
    }
    assert!(doc["partitions"][0]["records"].as_u64().unwrap() > 0);
}

/// One shape partition after a clean shutdown: verify's summary against the producer's records and the
/// broker's checkpoints, and our decoding of every record against what the producer sent.
fn check_shape_partition(
    topic: &ShapeTopic,
    p: i32,
    dir: &Path,
    summary: &JsonSummary,
    hw: &BTreeMap<(String, i32), i64>,
    lso: &BTreeMap<(String, i32), i64>,
) {
    let what = format!("{}-{p}", topic.name);
    let segments = scan_partition(dir).unwrap();
    let first_base = segments[0].base_offset;
    assert_eq!(summary.segments as usize, segments.len(), "{what}");
    assert!(segments.len() >= 2, "{what}: only {} segment(s)", segments.len());
    assert_eq!(summary.bytes, segments.iter().map(|s| s.size).sum::<u64>(), "{what}");
    let end = hw[&(topic.name.clone(), p)];
    assert_eq!(
        summary.last_offset,
        Some(end - 1),
        "{what}: last offset vs high watermark {end}"
    );
    let control: u64 = segments
        .iter()
        .flat_map(|s| &s.batches)
        .filter(|b| b.info.is_control)
        .map(|b| b.header.records_count as u64)
        .sum();
    let ours = partition_records(dir, p).unwrap();
    assert_eq!(summary.records, ours.len() as u64 + control, "{what}");
    assert_eq!(
        summary.batches as usize,
        segments.iter().map(|s| s.batches.len()).sum::<usize>(),
        "{what}"
    );
    let produced: Vec<&Record> = topic.records.iter().filter(|r| r.partition == p).collect();
    match topic.shape {
        Shape::Compacted => {
            // What the cleaner kept: a strict subset of what was produced, each record unchanged, with gaps.
            let all: BTreeSet<&Record> = produced.iter().copied().collect();
            assert!(
                ours.iter().all(|r| all.contains(r)),
                "{what}: a decoded record was never produced"
            );
            assert!(ours.len() < produced.len(), "{what}");
            assert!(
                ours.windows(2).any(|w| w[1].offset > w[0].offset + 1),
                "{what}: no offset gaps"
            );
            // The first batch may have lost its first records (or all of them) to the cleaner.
            let first_batch = segments[0].batches[0].info.base_offset;
            assert_eq!(summary.first_offset, Some(first_batch), "{what}");
            assert!(ours.first().is_some_and(|r| r.offset >= first_batch), "{what}");
            assert_eq!(end, produced.last().unwrap().offset + 1, "{what}");
        }
        _ => {
            // Every record on disk from the first segment's base offset, aborted ones included, byte for byte.
            let on_disk: Vec<Record> = produced
                .iter()
                .filter(|r| r.offset >= first_base)
                .map(|r| (*r).clone())
                .collect();
            assert_eq!(ours.len(), on_disk.len(), "{what}");
            if let Some(i) = (0..ours.len()).find(|i| ours[*i] != on_disk[*i]) {
                panic!(
                    "{what}: record {i} decoded as\n {:?}\nbut produced as\n {:?}",
                    ours[i], on_disk[i]
                );
            }
            assert_eq!(summary.first_offset, Some(first_base), "{what}");
            let aborted_on_disk = topic
                .aborted
                .iter()
                .filter(|(ap, o)| *ap == p && *o >= first_base)
                .count();
            let markers = if topic.shape == Shape::Transactions {
                control as usize
            } else {
                0
            };
            assert_eq!(
                end,
                produced.last().unwrap().offset + 1 + i64::from(topic.shape == Shape::Transactions),
                "{what}: one commit/abort marker follows the last transaction"
            );
            if topic.shape == Shape::Transactions {
                assert!(aborted_on_disk > 0 && markers >= 2, "{what}");
            }
        }
    }
    // Log start offsets: the retention topic's first segments are gone; partition 1 was moved into the middle
    // of a segment by DeleteRecords, which only the checkpoint records.
    let start = topic.log_start_offsets[&p];
    if start > first_base {
        assert_eq!(lso.get(&(topic.name.clone(), p)), Some(&start), "{what}");
    } else {
        assert!(start <= first_base, "{what}");
        assert!(!lso.contains_key(&(topic.name.clone(), p)), "{what}");
    }
    if topic.shape == Shape::Retention {
        assert!(first_base > 0, "{what}");
    }
}

/// What the live-writes phase saw.
struct LivePhase {
    topic: String,
    runs: usize,
    strict_runs: usize,
    warnings: usize,
    strict_errors: usize,
}

fn live_writes_phase(broker: &KafkaBroker) -> LivePhase {
    let topic = "live-writes";
    let bootstrap = broker.bootstrap();
    admin(
        &bootstrap,
        &[TopicSpec::new(topic, 1).config("internal.segment.bytes", 16 * 1024)],
        &[],
    )
    .unwrap();
    let dir = broker.partition_dir(topic, 0);
    let done = AtomicBool::new(false);
    let mut phase = LivePhase {
        topic: topic.to_string(),
        runs: 0,
        strict_runs: 0,
        warnings: 0,
        strict_errors: 0,
    };
    std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let ts = now_ms() - 60_000;
            let records = (0..LIVE_RECORDS)
                .map(|i| OutRecord {
                    partition: Some(0),
                    key: Some(format!("k{i}").into_bytes()),
                    value: Some(vec![b'v'; 160]),
                    headers: vec![],
                    timestamp: Some(ts + i as i64),
                })
                .collect();
            let plan = ProducePlan::new(topic)
                .config("linger.ms", 0)
                .config("batch.size", 2000)
                .config("acks", 1)
                .step(ProduceStep::Send(records));
            let result = python_produce(&bootstrap, &plan);
            done.store(true, Ordering::SeqCst);
            result
        });
        while !done.load(Ordering::SeqCst) {
            let newest = segment_base_offsets(&dir).unwrap().last().copied().unwrap_or(0);
            let strict = phase.runs % 2 == 1;
            let report: Report = verify_paths(
                std::slice::from_ref(&dir),
                if strict { &DEEP_STRICT } else { &DEEP },
                &NoProgress,
            );
            phase.runs += 1;
            assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
            for f in &report.findings {
                if strict && f.severity == Severity::Error {
                    // What strict is there to reject: the newest tail mid-append, and the newest producer
                    // snapshot while the broker writes it in place at a roll.
                    assert!(
                        matches!(f.defect, Defect::TrailingBytes { .. } | Defect::Snapshot { .. })
                            && base_of(&f.path).is_some_and(|b| b >= newest),
                        "strict run {}: {f}",
                        phase.runs
                    );
                    phase.strict_errors += 1;
                } else {
                    assert!(
                        is_live_state_warning(f, newest),
                        "run {}: not a live state: {f}",
                        phase.runs
                    );
                    phase.warnings += 1;
                }
            }
            phase.strict_runs += usize::from(strict);
        }
        let acked = producer.join().unwrap().unwrap();
        assert_eq!(acked.last().map(|r| r.offset), Some(LIVE_RECORDS as i64 - 1));
    });
    assert!(phase.runs >= 5, "only {} verify runs overlapped the writes", phase.runs);
    // Writes done: the live partition is sound under --strict while the broker still runs.
    let idle = verify_paths(std::slice::from_ref(&dir), &DEEP_STRICT, &NoProgress);
    assert!(idle.findings.is_empty(), "{}", describe(&idle.findings));
    assert!(segment_base_offsets(&dir).unwrap().len() > 50);
    phase
}

// ---------------------------------------------------------------------------------------------------------------
// 2. segment-format writer → real broker
// ---------------------------------------------------------------------------------------------------------------

/// The `Non-consecutive offsets in <file>` sections of DumpLogSegments' stderr: file → (offset, next offset)
/// pairs. DumpLogSegments starts every file with "previous offset -1", so a segment whose first offset is not 0
/// always shows `-1 is followed by <first>`; those pairs are not gaps and are left out.
fn offset_gaps(stderr: &str) -> BTreeMap<PathBuf, Vec<(i64, i64)>> {
    let mut gaps: BTreeMap<PathBuf, Vec<(i64, i64)>> = BTreeMap::new();
    let mut file = None;
    for line in stderr.lines() {
        if let Some(path) = line.strip_prefix("Non-consecutive offsets in ") {
            file = Some(PathBuf::from(path.trim()));
        } else if let (Some(f), Some((a, b))) = (&file, line.trim().split_once(" is followed by ")) {
            let (a, b): (i64, i64) = (a.parse().unwrap(), b.parse().unwrap());
            if a != -1 {
                gaps.entry(f.clone()).or_default().push((a, b));
            }
        } else {
            file = None;
        }
    }
    gaps
}

/// DumpLogSegments' stderr without the time-index "mismatches" that are its own limitation. For each time-index
/// entry it recomputes the batch's max timestamp *from the records* and compares; an empty batch (all records
/// removed by compaction, header kept for producer state, `maxTimestamp` kept as it was — what `LogCleaner` /
/// `MemoryRecords.filterTo` leave, and what `LogSegment.recover` indexes by `batch.maxTimestamp()`) has no
/// records, so the tool prints `log timestamp: -1`. Such a line is dropped only if the segment really has an
/// empty batch whose max timestamp is the indexed one; every other finding is kept.
fn without_empty_batch_time_mismatches(stderr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut file: Option<PathBuf> = None;
    for line in stderr.lines() {
        if let Some(path) = line.strip_prefix("Found timestamp mismatch in :") {
            file = Some(PathBuf::from(path.trim()));
            continue;
        }
        let explained = file.as_ref().is_some_and(|f| {
            let Some((index_ts, log_ts)) = line
                .trim()
                .strip_prefix("Index timestamp: ")
                .and_then(|rest| rest.split_once(", log timestamp: "))
            else {
                return false;
            };
            let index_ts: i64 = index_ts.parse().unwrap();
            log_ts == "-1"
                && scan_log(&f.with_extension("log"))
                    .unwrap()
                    .iter()
                    .any(|b| b.header.records_count == 0 && b.header.max_timestamp == index_ts)
        });
        match &file {
            Some(f) if line.starts_with("  ") => {
                if !explained {
                    out.push(format!("timestamp mismatch in {}: {line}", f.display()));
                }
            }
            _ => {
                file = None;
                out.push(line.to_string());
            }
        }
    }
    out
}

/// A writer manifest record as a consumer reports it. confluent-kafka reports a record without timestamp
/// (magic 0) as `(TIMESTAMP_NOT_AVAILABLE, 0)`.
fn as_consumed(partition: i32, r: &sample::ExpectedRecord) -> Record {
    let (timestamp_type, timestamp) = match r.timestamp_type {
        Some(segment_format::batch::TimestampType::CreateTime) => (TimestampType::CreateTime, r.timestamp),
        Some(segment_format::batch::TimestampType::LogAppendTime) => (TimestampType::LogAppendTime, r.timestamp),
        None => (TimestampType::NoTimestamp, 0),
    };
    Record {
        partition,
        offset: r.offset,
        timestamp,
        timestamp_type,
        key: r.key.clone(),
        value: r.value.clone(),
        headers: r
            .headers
            .iter()
            .map(|h| Header {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect(),
    }
}

/// What a consumer of `topic` must read, per the writer's manifest.
fn expected_from_manifest(manifest: &Manifest, topic: &str, isolation: Isolation) -> Vec<Record> {
    let iso = match isolation {
        Isolation::ReadCommitted => sample::Isolation::ReadCommitted,
        Isolation::ReadUncommitted => sample::Isolation::ReadUncommitted,
    };
    let mut out: Vec<Record> = manifest
        .partitions
        .iter()
        .filter(|p| p.written.topic == topic)
        .flat_map(|p| p.consumer_records(iso).map(|r| as_consumed(p.written.partition, r)))
        .collect();
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

fn assert_same_records(got: &[Record], expected: &[Record], what: &str) {
    if let Some(i) = (0..got.len().min(expected.len())).find(|i| got[*i] != expected[*i]) {
        panic!(
            "{what}: record {i} differs:\n got      {:?}\n expected {:?}",
            got[i], expected[i]
        );
    }
    assert_eq!(got.len(), expected.len(), "{what}: record counts differ");
}

/// `GetOffsetShell --topic 'sample-.*'` (one JVM for every topic): (topic, partition) → offset.
fn sample_offsets(broker: &KafkaBroker, time: &str) -> BTreeMap<(String, i32), i64> {
    let args = [
        "--bootstrap-server",
        &broker.bootstrap(),
        "--topic",
        "sample-.*",
        "--time",
        time,
    ]
    .map(String::from);
    let out = broker.tools().run(tools::GET_OFFSET_SHELL, &args).unwrap();
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut parts = l.rsplitn(3, ':');
            let offset = parts.next().unwrap().parse().unwrap();
            let partition = parts.next().unwrap().parse().unwrap();
            ((parts.next().unwrap().to_string(), partition), offset)
        })
        .collect()
}

/// Replaces or adds the entries of `updates` in one root offset checkpoint, keeping the broker's other entries.
fn merge_checkpoint(path: &Path, updates: &BTreeMap<(String, i32), Option<i64>>) {
    let mut cp = OffsetCheckpoint::read(path).unwrap();
    cp.entries
        .retain(|e| !updates.contains_key(&(e.topic.clone(), e.partition)));
    for ((topic, partition), offset) in updates {
        if let Some(offset) = offset {
            cp.entries.push(OffsetCheckpointEntry {
                topic: topic.clone(),
                partition: *partition,
                offset: *offset,
            });
        }
    }
    cp.write(path).unwrap();
}

/// The leader-epoch cache Kafka ends up with after loading a partition whose checkpoint is `written`
/// (`LogLoader`: truncate from the start at the log start offset) and then becoming leader at `epoch` at the
/// log end offset (`LeaderEpochFileCache.assign` → `maybeTruncateNonMonotonicEntries`: every entry whose epoch
/// is >= the new epoch, or whose start offset is >= the log end offset, is removed first).
fn epochs_after_leadership(written: &[EpochEntry], log_start: i64, epoch: i32, log_end: i64) -> Vec<EpochEntry> {
    let mut out: Vec<EpochEntry> = Vec::new();
    for e in written {
        if e.start_offset <= log_start {
            out.clear();
            out.push(EpochEntry {
                epoch: e.epoch,
                start_offset: log_start,
            });
        } else {
            out.push(*e);
        }
    }
    out.retain(|e| e.epoch < epoch && e.start_offset < log_end);
    out.push(EpochEntry {
        epoch,
        start_offset: log_end,
    });
    out
}

#[test]
fn writer_partitions_load_into_a_real_broker_and_serve_clients() {
    // Recent timestamps: the broker deletes segments older than retention.ms (7 days) at once.
    let sample_dir = tempfile::tempdir().unwrap();
    let options = SampleOptions {
        base_timestamp: now_ms() - 3_600_000,
        fsync: false,
        ..SampleOptions::default()
    };
    let manifest = write_sample(sample_dir.path(), &options).unwrap();
    let mut partitions: BTreeMap<String, i32> = BTreeMap::new();
    for p in &manifest.partitions {
        let n = partitions.entry(p.written.topic.clone()).or_default();
        *n = (*n).max(p.written.partition + 1);
    }

    // Kafka's DumpLogSegments over every file the writer produced (logs with --deep-iteration; offset and time
    // indexes are checked entry by entry against the log; snapshots by CRC; txn indexes parsed).
    let mut writer_files: Vec<PathBuf> = Vec::new();
    for p in &manifest.partitions {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&p.written.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|f| base_of(f).is_some())
            .collect();
        files.sort();
        writer_files.extend(files);
    }
    let install = KafkaInstall::locate().unwrap();
    let dump = run_dump(install, &writer_files, &["--deep-iteration"]).unwrap();
    let stderr = without_empty_batch_time_mismatches(&dump.stderr);
    for needle in [
        "invalid",
        "mismatch",
        "exception",
        "not found",
        "out of order",
        "corrupt",
        "ignoring",
    ] {
        let hit = dump
            .stdout
            .lines()
            .chain(stderr.iter().map(String::as_str))
            .find(|l| l.to_ascii_lowercase().contains(needle));
        assert!(
            hit.is_none(),
            "DumpLogSegments on the writer's files: {hit:?}\n{}",
            dump.stderr
        );
    }
    assert!(dump.stdout.contains("endTxnMarker: ABORT") && dump.stdout.contains("compresscodec: zstd"));
    // Only the compacted-looking partition has offset gaps.
    let gaps = offset_gaps(&dump.stderr);
    assert!(
        gaps.keys()
            .all(|f| f.to_string_lossy().contains("/sample-compacted-0/")),
        "{gaps:?}"
    );
    assert!(!gaps.is_empty());

    // A target cluster with the same topics and partition counts; its topic ids are what partition.metadata
    // must carry (a directory with any other id is renamed -stray at load).
    let mut broker = KafkaBroker::start(BrokerConfig::new("writer-target")).unwrap();
    let specs: Vec<TopicSpec> = partitions
        .iter()
        .map(|(t, n)| {
            let spec = TopicSpec::new(t, *n);
            if t == "sample-log-append-time" {
                spec.config("message.timestamp.type", "LogAppendTime")
            } else {
                spec
            }
        })
        .collect();
    let names: Vec<&str> = partitions.keys().map(String::as_str).collect();
    let ids = admin(&broker.bootstrap(), &specs, &names).unwrap();
    broker.stop().unwrap();

    // Install the writer's partition dirs in place of the broker's empty ones, under the target topic ids.
    // Root checkpoints: found by experiment what Kafka needs. Without a log-start-offset-checkpoint entry the
    // retained partition's log start falls back to its first base offset (consumers then read records the
    // writer placed below the log start), so that entry is required whenever log start > first base offset.
    // The high watermark is recomputed by a single-replica leader (it read 0 from the checkpoint and served
    // up to the log end anyway), and the recovery point is unused after a clean shutdown; both are still set
    // as a replicator would set them.
    let mut recovery = BTreeMap::new();
    let mut starts = BTreeMap::new();
    let mut hws = BTreeMap::new();
    for p in &manifest.partitions {
        let w = &p.written;
        let dst = broker.partition_dir(&w.topic, w.partition);
        std::fs::remove_dir_all(&dst).unwrap();
        std::fs::create_dir(&dst).unwrap();
        for e in std::fs::read_dir(&w.dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
        let id = Uuid::from_str(&ids[&w.topic].topic_id).unwrap();
        PartitionMetadata::new(id)
            .write(&dst.join(PARTITION_METADATA_FILE))
            .unwrap();
        let key = (w.topic.clone(), w.partition);
        recovery.insert(key.clone(), Some(w.recovery_point));
        starts.insert(
            key.clone(),
            (w.log_start_offset > w.first_segment_base_offset()).then_some(w.log_start_offset),
        );
        hws.insert(key, Some(w.high_watermark));
    }
    let root = broker.log_dir().to_path_buf();
    merge_checkpoint(&root.join(RECOVERY_POINT_CHECKPOINT_FILE), &recovery);
    merge_checkpoint(&root.join(LOG_START_OFFSET_CHECKPOINT_FILE), &starts);
    merge_checkpoint(&root.join(REPLICATION_OFFSET_CHECKPOINT_FILE), &hws);
    // Before the broker sees it, the installed log dir is sound.
    let installed = verify_paths(std::slice::from_ref(&root), &DEEP_STRICT, &NoProgress);
    assert!(
        installed.findings.is_empty() && installed.io_errors.is_empty(),
        "{}",
        describe(&installed.findings)
    );

    broker.restart().unwrap();
    let bootstrap = broker.bootstrap();

    // Offsets: log start and end as the writer left them.
    let earliest = sample_offsets(&broker, "-2");
    let latest = sample_offsets(&broker, "-1");
    for p in &manifest.partitions {
        let key = (p.written.topic.clone(), p.written.partition);
        assert_eq!(
            earliest.get(&key),
            Some(&p.written.log_start_offset),
            "log start of {key:?}"
        );
        assert_eq!(latest.get(&key), Some(&p.written.log_end_offset), "log end of {key:?}");
    }

    // Every record: same offset, timestamp (and type), key, value, headers; aborted ones hidden when committed.
    let mut consumed = BTreeMap::new();
    for topic in partitions.keys() {
        for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
            let got = consume_all(&bootstrap, topic, None, isolation).unwrap();
            let expected = expected_from_manifest(&manifest, topic, isolation);
            assert_same_records(&got, &expected, &format!("{topic} {isolation:?}"));
            consumed.insert((topic.clone(), isolation == Isolation::ReadCommitted), got);
        }
    }
    let committed = &consumed[&("sample-transactions".to_string(), true)];
    let uncommitted = &consumed[&("sample-transactions".to_string(), false)];
    assert!(committed.len() < uncommitted.len(), "no aborted records in the sample");

    // Produce to every partition: offsets continue at the writer's log end offset.
    let mut appended: BTreeMap<(String, i32), Vec<Record>> = BTreeMap::new();
    for (topic, n) in &partitions {
        let ts = now_ms();
        let records: Vec<OutRecord> = (0..*n)
            .flat_map(|p| {
                (0..3).map(move |i| OutRecord {
                    partition: Some(p),
                    key: Some(format!("after-{p}-{i}").into_bytes()),
                    value: Some(vec![b'n'; 20]),
                    headers: vec![Header {
                        key: "new".into(),
                        value: None,
                    }],
                    timestamp: Some(ts + i64::from(i)),
                })
            })
            .collect();
        let acked = python_produce(
            &bootstrap,
            &ProducePlan::new(topic)
                .config("acks", "all")
                .step(ProduceStep::Send(records)),
        )
        .unwrap();
        for r in acked {
            appended.entry((topic.clone(), r.partition)).or_default().push(r);
        }
    }
    for p in &manifest.partitions {
        let key = (p.written.topic.clone(), p.written.partition);
        let offsets: Vec<i64> = appended[&key].iter().map(|r| r.offset).collect();
        let leo = p.written.log_end_offset;
        assert_eq!(offsets, [leo, leo + 1, leo + 2], "{key:?}");
    }

    // Leader epochs. The writer stamped epochs up to 4 (14 in the retained partition); the target partitions
    // were created at leader epoch 0 and the restart made the broker leader again at a higher epoch E (a KRaft
    // single node goes 0 → 1 (fenced) → 2). On becoming leader Kafka assigns (E, log end offset) in its epoch
    // cache, which first drops every entry with epoch >= E: the writer's entries above E vanish, new batches
    // are stamped E, lower than the epoch of the batches before them. Kafka logs it as a WARN and serves on.
    let target_epochs: BTreeMap<(String, i32), i32> = manifest
        .partitions
        .iter()
        .map(|p| {
            let dir = broker.partition_dir(&p.written.topic, p.written.partition);
            let newest = live_logs(&dir).pop().unwrap();
            let batches = scan_log(&newest).unwrap();
            let last = batches.last().unwrap();
            assert_eq!(last.info.last_offset, p.written.log_end_offset + 2);
            (
                (p.written.topic.clone(), p.written.partition),
                last.header.partition_leader_epoch,
            )
        })
        .collect();
    let target_epoch = *target_epochs.values().next().unwrap();
    assert!(target_epochs.values().all(|e| *e == target_epoch), "{target_epochs:?}");
    let max_written = manifest
        .partitions
        .iter()
        .flat_map(|p| p.written.epochs.iter().map(|e| e.epoch))
        .max()
        .unwrap();
    assert!(
        max_written > target_epoch,
        "the sample no longer exercises epochs above the target's ({target_epoch})"
    );
    let broker_log = std::fs::read_to_string(broker.log_file()).unwrap();
    assert!(broker_log.contains("caused truncation of conflicting entries"));

    // A clean stop: the broker's epoch caches are as predicted; verify sees exactly that epoch break and nothing
    // else (a lineage break a promotion must avoid by starting the target above the source's epochs, KIP-1279).
    broker.stop().unwrap();
    let mut epoch_findings = 0;
    let report = verify_paths(std::slice::from_ref(&root), &DEEP_STRICT, &NoProgress);
    assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
    let leos: BTreeMap<PathBuf, i64> = manifest
        .partitions
        .iter()
        .map(|p| {
            (
                broker.partition_dir(&p.written.topic, p.written.partition),
                p.written.log_end_offset,
            )
        })
        .collect();
    for f in &report.findings {
        match &f.defect {
            Defect::Epoch { .. } => epoch_findings += 1,
            // The snapshot the writer took at its log end offset (as a clean shutdown does) outlives the broker's
            // own shutdown snapshot a few offsets later: Kafka leaves it on disk and deletes it as stray at the
            // next load. A real broker leaves the same after any restart followed by appends.
            Defect::Snapshot { .. } if f.severity == Severity::Warning => {
                let dir = f.path.parent().unwrap();
                assert_eq!(base_of(&f.path), leos.get(dir).copied(), "{f}");
            }
            _ => panic!("after the broker appended: {f}"),
        }
    }
    for p in &manifest.partitions {
        let w = &p.written;
        let dir = broker.partition_dir(&w.topic, w.partition);
        let cache = LeaderEpochCheckpoint::read(&dir.join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
        let expected = epochs_after_leadership(&w.epochs, w.log_start_offset, target_epoch, w.log_end_offset);
        assert_eq!(
            cache.entries, expected,
            "{}-{}: written {:?}",
            w.topic, w.partition, w.epochs
        );
        let broke = w.epochs.iter().any(|e| e.epoch >= target_epoch);
        let dir_findings = report
            .findings
            .iter()
            .filter(|f| f.path.starts_with(&dir) && matches!(f.defect, Defect::Epoch { .. }))
            .count();
        assert_eq!(
            dir_findings > 0,
            broke,
            "{}-{}:{}",
            w.topic,
            w.partition,
            describe(&report.findings)
        );
    }

    // Restart once more: everything (old and new) is still served, and the broker's own offsets continue.
    broker.restart().unwrap();
    for topic in partitions.keys() {
        let got = consume_all(&broker.bootstrap(), topic, None, Isolation::ReadUncommitted).unwrap();
        let mut expected = expected_from_manifest(&manifest, topic, Isolation::ReadUncommitted);
        expected.extend(
            appended
                .iter()
                .filter(|((t, _), _)| t == topic)
                .flat_map(|(_, v)| v.iter().cloned()),
        );
        expected.sort_by_key(|r| (r.partition, r.offset));
        assert_same_records(&got, &expected, &format!("{topic} after restart"));
    }
    broker.stop().unwrap();
    eprintln!(
        "writer → broker: {} partitions, {} segments, {} batches, {} bytes, {} records consumed identically; target \
         leader epoch {target_epoch} below written epochs up to {max_written}: {epoch_findings} epoch findings",
        manifest.partitions.len(),
        manifest
            .partitions
            .iter()
            .map(|p| p.written.segments.len())
            .sum::<usize>(),
        manifest.partitions.iter().map(|p| p.written.batches()).sum::<u64>(),
        manifest.total_log_bytes(),
        consumed
            .iter()
            .filter(|((_, c), _)| !c)
            .map(|(_, v)| v.len())
            .sum::<usize>(),
    );
}
