//! Fixtures for the `segmirror` integration tests: Kafka partition and log
//! directories built from batches, and a runner for the built binary.
//!
//! Every fixture is what a healthy broker leaves on disk: each segment's offset
//! and time index are built the way `LogSegment.recover` builds them, the
//! transaction index holds exactly the entries `ProducerStateManager` would append,
//! and `leader-epoch-checkpoint` follows the batches' epochs. A test then breaks
//! one thing with the mutation helpers, so a finding can only come from that
//! defect. All fixture building lives here so no test repeats it.

#![allow(dead_code)] // each test binary uses a different subset

pub mod service;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use segment_format::batch::{seal_crc, BatchInfo, Compression, ControlType, TimestampType};
use segment_format::checkpoint::{
    EpochEntry, LeaderEpochCheckpoint, MetaProperties, MetaPropertiesVersion, OffsetCheckpoint, OffsetCheckpointEntry,
};
use segment_format::control::{end_txn_marker_batch, EndTxnMarker};
use segment_format::dir::{
    segment_file_name, SegmentFileKind, LEADER_EPOCH_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE, PARTITION_METADATA_FILE, RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder};
use segment_format::legacy::encode_message;
use segment_format::log::scan_frames;
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::snapshot::{ProducerSnapshot, ProducerSnapshotEntry};
use segment_format::txn_index::{self, AbortedTxn, TxnTracker};

/// Timestamp of offset 0 in the generated batches; offset `o` gets `BASE_TS + o`.
pub const BASE_TS: i64 = 1_700_000_000_000;
/// The topic id written to `partition.metadata`.
pub const TOPIC_ID: Uuid = Uuid([7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);

// ---------------------------------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------------------------------

/// `n` records at offsets `base..base + n`, each with key, value and a header.
fn records(base: i64, n: i32) -> Vec<RecordSpec> {
    (0..n)
        .map(|i| {
            let offset = base + i64::from(i);
            RecordSpec::new(i, BASE_TS + offset)
                .with_key(format!("key-{offset}"))
                .with_value(vec![offset as u8; 24])
                .with_header("h", Some(vec![1, 2]))
        })
        .collect()
}

/// An uncompressed, non-transactional batch of `n` records from `base`, stamped with leader `epoch`.
pub fn data_batch(base: i64, n: i32, epoch: i32) -> Vec<u8> {
    BatchBuilder::new(base)
        .partition_leader_epoch(epoch)
        .records(records(base, n))
        .build()
}

/// As [`data_batch`], compressed with `codec`.
pub fn compressed_batch(base: i64, n: i32, epoch: i32, codec: Compression) -> Vec<u8> {
    BatchBuilder::new(base)
        .partition_leader_epoch(epoch)
        .compression(codec)
        .records(records(base, n))
        .build()
}

/// A transactional data batch of producer `pid` (epoch 0, sequence = offset).
pub fn txn_batch(base: i64, n: i32, epoch: i32, pid: i64) -> Vec<u8> {
    BatchBuilder::new(base)
        .partition_leader_epoch(epoch)
        .producer(pid, 0, base as i32)
        .transactional(true)
        .records(records(base, n))
        .build()
}

/// An end-transaction marker of producer `pid` at `offset`.
pub fn marker(offset: i64, epoch: i32, pid: i64, control_type: ControlType) -> Vec<u8> {
    let marker = EndTxnMarker {
        control_type,
        coordinator_epoch: 5,
    };
    end_txn_marker_batch(offset, BASE_TS + offset, epoch, pid, 0, marker)
}

/// Contiguous batches of `per_batch` records from `first`, `count` of them.
pub fn data_batches(first: i64, count: usize, per_batch: i32, epoch: i32) -> Vec<Vec<u8>> {
    (0..count)
        .map(|k| data_batch(first + k as i64 * i64::from(per_batch), per_batch, epoch))
        .collect()
}

/// Uncompressed legacy messages (one frame each) at `offsets`.
pub fn legacy_messages(magic: i8, offsets: impl IntoIterator<Item = i64>) -> Vec<Vec<u8>> {
    offsets
        .into_iter()
        .map(|o| {
            let key = format!("key-{o}");
            encode_message(
                o,
                magic,
                BASE_TS + o,
                TimestampType::CreateTime,
                Some(key.as_bytes()),
                Some(b"value"),
            )
        })
        .collect()
}

/// What the shallow scan reports for each frame of `bytes` (which must frame cleanly).
pub fn infos(bytes: &[u8]) -> Vec<BatchInfo> {
    scan_frames(bytes, 0).map_while(Result::ok).map(|f| f.info).collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Partition and log directories
// ---------------------------------------------------------------------------------------------------------------

/// One segment to write.
#[derive(Debug, Clone, Default)]
pub struct SegmentSpec {
    /// Defaults to the first batch's base offset.
    pub base_offset: Option<i64>,
    pub batches: Vec<Vec<u8>>,
}

impl SegmentSpec {
    pub fn new(batches: Vec<Vec<u8>>) -> Self {
        SegmentSpec {
            base_offset: None,
            batches,
        }
    }

    pub fn at(base_offset: i64, batches: Vec<Vec<u8>>) -> Self {
        SegmentSpec {
            base_offset: Some(base_offset),
            batches,
        }
    }
}

/// A partition directory to write.
#[derive(Debug, Clone)]
pub struct PartitionSpec {
    pub topic: String,
    pub partition: i32,
    pub segments: Vec<SegmentSpec>,
    /// `index.interval.bytes` for the offset and time indexes.
    pub index_interval: u64,
    /// Write `leader-epoch-checkpoint` (derived from the batches' epochs).
    pub epoch_checkpoint: bool,
    /// Write `partition.metadata` with [`TOPIC_ID`].
    pub partition_metadata: bool,
    /// Write a producer snapshot (one idempotent producer) at the log end offset.
    pub snapshot: bool,
}

impl PartitionSpec {
    pub fn new(topic: &str, partition: i32, segments: Vec<SegmentSpec>) -> Self {
        PartitionSpec {
            topic: topic.to_string(),
            partition,
            segments,
            index_interval: 0,
            epoch_checkpoint: true,
            partition_metadata: true,
            snapshot: true,
        }
    }

    pub fn index_interval(mut self, bytes: u64) -> Self {
        self.index_interval = bytes;
        self
    }

    /// No leader-epoch-checkpoint, partition.metadata or snapshot: segments only.
    pub fn bare(mut self) -> Self {
        self.epoch_checkpoint = false;
        self.partition_metadata = false;
        self.snapshot = false;
        self
    }
}

/// A segment as written, with the facts tests assert positions against.
#[derive(Debug, Clone)]
pub struct BuiltSegment {
    pub base_offset: i64,
    pub log: PathBuf,
    pub index: PathBuf,
    pub time_index: PathBuf,
    /// The `.txnindex` path (the file exists only if the segment has entries).
    pub txn_index: PathBuf,
    pub batches: Vec<BatchInfo>,
    pub txn_entries: Vec<AbortedTxn>,
}

impl BuiltSegment {
    pub fn log_len(&self) -> u64 {
        self.batches.last().map_or(0, |b| b.position + b.size)
    }

    pub fn max_timestamp(&self) -> i64 {
        self.batches.iter().map(|b| b.max_timestamp).max().unwrap_or(-1)
    }
}

/// A partition directory as written.
#[derive(Debug, Clone)]
pub struct BuiltPartition {
    pub dir: PathBuf,
    pub segments: Vec<BuiltSegment>,
    pub epoch_checkpoint: PathBuf,
    pub partition_metadata: PathBuf,
    /// Path of the producer snapshot (written only if asked for).
    pub snapshot: PathBuf,
}

impl BuiltPartition {
    pub fn segment(&self, i: usize) -> &BuiltSegment {
        &self.segments[i]
    }

    pub fn batches(&self) -> u64 {
        self.segments.iter().map(|s| s.batches.len() as u64).sum()
    }

    pub fn records(&self) -> u64 {
        self.segments
            .iter()
            .flat_map(|s| &s.batches)
            .map(|b| b.records_count.max(0) as u64)
            .sum()
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(BuiltSegment::log_len).sum()
    }

    pub fn first_offset(&self) -> i64 {
        self.segments[0].batches[0].base_offset
    }

    pub fn last_offset(&self) -> i64 {
        self.segments
            .iter()
            .rev()
            .find_map(|s| s.batches.last())
            .map(|b| b.last_offset)
            .unwrap_or(-1)
    }
}

/// A partition directory that appears whole in `log_dir`, as a broker's does: written under `staging`, then renamed
/// in (a shipper watching `log_dir` never sees it half written).
pub fn create_partition(staging: &Path, log_dir: &Path, spec: &PartitionSpec) {
    std::fs::create_dir_all(staging).unwrap();
    write_partition(staging, spec);
    let name = format!("{}-{}", spec.topic, spec.partition);
    std::fs::rename(staging.join(&name), log_dir.join(&name)).unwrap();
}

/// Write `spec` as `<parent>/<topic>-<partition>`, with the indexes, txn index,
/// epoch checkpoint, metadata and snapshot a healthy broker leaves.
pub fn write_partition(parent: &Path, spec: &PartitionSpec) -> BuiltPartition {
    let dir = parent.join(format!("{}-{}", spec.topic, spec.partition));
    std::fs::create_dir_all(&dir).unwrap();
    let mut tracker = TxnTracker::new();
    let mut epochs: Vec<EpochEntry> = Vec::new();
    let mut segments = Vec::new();
    let newest = spec.segments.len().saturating_sub(1);
    for (i, seg) in spec.segments.iter().enumerate() {
        let log_bytes: Vec<u8> = seg.batches.concat();
        let batches = infos(&log_bytes);
        let base_offset = seg.base_offset.or(batches.first().map(|b| b.base_offset)).unwrap_or(0);
        let path = |kind| dir.join(segment_file_name(base_offset, kind));
        let mut offset_index = OffsetIndexBuilder::new(base_offset, spec.index_interval);
        let mut time_index = TimeIndexBuilder::new(base_offset, spec.index_interval);
        let mut txn_entries = Vec::new();
        for b in &batches {
            // Batches outside the segment's range are test input: the builders refuse
            // them as the broker would, and the index simply lacks them.
            let _ = offset_index.push(b);
            let _ = time_index.push(b);
            txn_entries.extend(tracker.on_batch(b));
            let epoch = b.partition_leader_epoch;
            if b.magic >= 2 && epoch >= 0 && !matches!(epochs.last(), Some(e) if e.epoch >= epoch) {
                epochs.push(EpochEntry {
                    epoch,
                    start_offset: b.base_offset,
                });
            }
        }
        if i != newest {
            time_index.seal();
        }
        let built = BuiltSegment {
            base_offset,
            log: path(SegmentFileKind::Log),
            index: path(SegmentFileKind::Index),
            time_index: path(SegmentFileKind::TimeIndex),
            txn_index: path(SegmentFileKind::TxnIndex),
            batches,
            txn_entries,
        };
        std::fs::write(&built.log, &log_bytes).unwrap();
        std::fs::write(&built.index, offset_index.to_bytes()).unwrap();
        std::fs::write(&built.time_index, time_index.to_bytes()).unwrap();
        if !built.txn_entries.is_empty() {
            std::fs::write(&built.txn_index, txn_index::serialize(&built.txn_entries)).unwrap();
        }
        segments.push(built);
    }
    let built = BuiltPartition {
        epoch_checkpoint: dir.join(LEADER_EPOCH_CHECKPOINT_FILE),
        partition_metadata: dir.join(PARTITION_METADATA_FILE),
        snapshot: PathBuf::new(),
        dir,
        segments,
    };
    if spec.epoch_checkpoint {
        LeaderEpochCheckpoint::new(epochs)
            .write(&built.epoch_checkpoint)
            .unwrap();
    }
    if spec.partition_metadata {
        PartitionMetadata::new(TOPIC_ID)
            .write(&built.partition_metadata)
            .unwrap();
    }
    let mut built = built;
    let leo = built.last_offset() + 1;
    built.snapshot = built.dir.join(segment_file_name(leo, SegmentFileKind::Snapshot));
    if spec.snapshot {
        // One idempotent producer, so the CRC covers entry bytes a test can flip.
        let entry = ProducerSnapshotEntry {
            producer_id: 4242,
            epoch: 0,
            last_sequence: 9,
            last_offset: leo - 1,
            offset_delta: 0,
            timestamp: BASE_TS,
            coordinator_epoch: -1,
            current_txn_first_offset: -1,
        };
        ProducerSnapshot { entries: vec![entry] }
            .write(&built.snapshot)
            .unwrap();
    }
    built
}

/// A log dir (`meta.properties` and the root checkpoints) holding `partitions`.
pub fn write_log_dir(root: &Path, partitions: &[PartitionSpec]) -> Vec<BuiltPartition> {
    std::fs::create_dir_all(root).unwrap();
    MetaProperties {
        version: MetaPropertiesVersion::V1,
        cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qg".into()),
        node_id: Some(1),
        directory_id: None,
    }
    .write(&root.join(META_PROPERTIES_FILE))
    .unwrap();
    let built: Vec<BuiltPartition> = partitions.iter().map(|p| write_partition(root, p)).collect();
    let entries = |offset: &dyn Fn(&BuiltPartition) -> i64| OffsetCheckpoint {
        entries: partitions
            .iter()
            .zip(&built)
            .map(|(spec, b)| OffsetCheckpointEntry {
                topic: spec.topic.clone(),
                partition: spec.partition,
                offset: offset(b),
            })
            .collect(),
    };
    let leo = |b: &BuiltPartition| b.last_offset() + 1;
    entries(&leo).write(&root.join(RECOVERY_POINT_CHECKPOINT_FILE)).unwrap();
    entries(&leo)
        .write(&root.join(REPLICATION_OFFSET_CHECKPOINT_FILE))
        .unwrap();
    entries(&|b: &BuiltPartition| b.first_offset())
        .write(&root.join(LOG_START_OFFSET_CHECKPOINT_FILE))
        .unwrap();
    built
}

// ---------------------------------------------------------------------------------------------------------------
// Mutations
// ---------------------------------------------------------------------------------------------------------------

/// Rewrite a file through a closure.
pub fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// XOR one byte of a file.
pub fn flip(path: &Path, position: u64) {
    edit(path, |b| b[position as usize] ^= 0x5a);
}

/// Overwrite bytes of a file at `position`.
pub fn overwrite(path: &Path, position: u64, with: &[u8]) {
    edit(path, |b| {
        b[position as usize..position as usize + with.len()].copy_from_slice(with)
    });
}

/// Append bytes to a file.
pub fn append(path: &Path, bytes: &[u8]) {
    edit(path, |b| b.extend_from_slice(bytes));
}

/// Cut a file to `len` bytes.
pub fn truncate(path: &Path, len: u64) {
    edit(path, |b| b.truncate(len as usize));
}

/// Apply `f` to the batch at `position` of a `.log`, then recompute its CRC: a
/// change only a deep walk can see.
pub fn edit_batch_and_reseal(log: &Path, batch: &BatchInfo, f: impl FnOnce(&mut [u8])) {
    edit(log, |b| {
        let batch = &mut b[batch.position as usize..(batch.position + batch.size) as usize];
        f(batch);
        seal_crc(batch);
    });
}

// ---------------------------------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------------------------------

/// The outcome of one `segmirror` run.
#[derive(Debug)]
pub struct Run {
    /// `None` if the process was killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Assert the exit status, printing the output on failure.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, Some(code), "unexpected exit status\n{self}");
        assert!(!self.stderr.contains("panicked"), "the binary panicked\n{self}");
        self
    }

    /// Assert that stdout contains `needle`.
    #[track_caller]
    pub fn expect_stdout(&self, needle: &str) -> &Self {
        assert!(self.stdout.contains(needle), "stdout lacks {needle:?}\n{self}");
        self
    }

    /// Parse stdout as the `--json` document.
    #[track_caller]
    pub fn json(&self) -> Report {
        let doc: serde_json::Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}\n{self}"));
        Report { doc }
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit: {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Run the built `segmirror` with `args`.
pub fn segmirror<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", service::test_home())
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `segmirror verify <paths> <flags>`.
pub fn verify(paths: &[&Path], flags: &[&str]) -> Run {
    let mut args: Vec<&OsStr> = vec![OsStr::new("verify")];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    args.extend(flags.iter().map(OsStr::new));
    segmirror(args)
}

/// `segmirror verify --json <paths> <flags>`: the exit status and the parsed report.
pub fn verify_json(paths: &[&Path], flags: &[&str], expected_code: i32) -> Report {
    let mut all = vec!["--json"];
    all.extend_from_slice(flags);
    let run = verify(paths, &all);
    run.expect_code(expected_code);
    run.json()
}

/// One finding of the JSON report, flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonFinding {
    pub severity: String,
    pub path: PathBuf,
    pub position: Option<u64>,
    pub offset: Option<i64>,
    pub kind: String,
    pub defect: serde_json::Value,
}

/// The `--json` document.
#[derive(Debug, Clone)]
pub struct Report {
    pub doc: serde_json::Value,
}

impl Report {
    pub fn findings(&self) -> Vec<JsonFinding> {
        self.doc["findings"]
            .as_array()
            .expect("findings array")
            .iter()
            .map(|f| JsonFinding {
                severity: f["severity"].as_str().unwrap_or_default().to_string(),
                path: PathBuf::from(f["path"].as_str().unwrap_or_default()),
                position: f["position"].as_u64(),
                offset: f["offset"].as_i64(),
                kind: f["defect"]["kind"].as_str().unwrap_or_default().to_string(),
                defect: f["defect"].clone(),
            })
            .collect()
    }

    pub fn errors(&self) -> Vec<JsonFinding> {
        self.findings().into_iter().filter(|f| f.severity == "error").collect()
    }

    pub fn warnings(&self) -> Vec<JsonFinding> {
        self.findings()
            .into_iter()
            .filter(|f| f.severity == "warning")
            .collect()
    }

    /// The one partition summary (panics unless there is exactly one).
    pub fn partition(&self) -> &serde_json::Value {
        let parts = self.doc["partitions"].as_array().expect("partitions array");
        assert_eq!(parts.len(), 1, "expected one partition summary: {:#}", self.doc);
        &parts[0]
    }

    /// The finding of `severity` and `kind` at `path`/`position`; panics, showing
    /// every finding, if there is none.
    #[track_caller]
    pub fn expect(&self, severity: &str, kind: &str, path: &Path, position: Option<u64>) -> JsonFinding {
        self.findings()
            .into_iter()
            .find(|f| f.severity == severity && f.kind == kind && f.path == path && f.position == position)
            .unwrap_or_else(|| {
                panic!(
                    "no {severity} {kind} at {} byte {position:?}; report:\n{:#}",
                    path.display(),
                    self.doc
                )
            })
    }

    /// As [`Report::expect`] for an error, also checking its offset.
    #[track_caller]
    pub fn expect_error(&self, kind: &str, path: &Path, position: Option<u64>, offset: Option<i64>) -> JsonFinding {
        let f = self.expect("error", kind, path, position);
        assert_eq!(f.offset, offset, "offset of {f:?}");
        f
    }

    /// Assert that no finding is an error.
    #[track_caller]
    pub fn expect_no_errors(&self) {
        let errors = self.errors();
        assert!(errors.is_empty(), "unexpected errors: {errors:#?}");
    }
}

/// `"<path>: byte <position>"`, as text findings name a place.
pub fn place(path: &Path, position: u64) -> String {
    format!("{}: byte {position}", path.display())
}

/// `segmirror verify <args>` run from `dir` (for relative paths such as `.`).
pub fn verify_in(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .current_dir(dir)
        .arg("verify")
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
