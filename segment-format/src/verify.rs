//! The verification engine behind `segmirror verify`.
//!
//! A verifier is only useful if it checks what a broker *trusts without checking*
//! (see the last section of `kafka-format.md`): on a clean load a broker reads no
//! CRC, no offset order and no index entry, so a copied segment with a flipped bit
//! or a misaligned index is served to consumers as is. This module checks all of
//! it, reports every defect (not just the first) and keeps memory bounded: each
//! segment is scanned once, front to back, and every check runs beside the scan
//! on [`BatchInfo`] values, so nothing per batch is kept.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use crate::batch::{parse_header, BatchInfo};
use crate::checkpoint::{LeaderEpochChecker, LeaderEpochCheckpoint, MetaProperties, OffsetCheckpoint};
use crate::dir::{
    classify_partition_file, segment_file_name, LogDir, PartitionDir, PartitionDirName, PartitionFile, RootCheckpoint,
    SegmentFileKind, SegmentFiles, META_PROPERTIES_FILE,
};
use crate::error::{Defect, Error, IndexKind, ParseError};
use crate::index::{OffsetIndexChecker, TimeIndexChecker, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE};
use crate::legacy;
use crate::log::LogFile;
use crate::open::MAX_SEGMENT_BYTES;
use crate::partition_metadata::PartitionMetadata;
use crate::record::{for_each_record, DeepLimits};
use crate::report::{Finding, Severity};
use crate::snapshot::ProducerSnapshot;
use crate::txn_index::{TxnIndexChecker, TxnTracker, ABORTED_TXN_SIZE};

mod bounded;
mod live;

/// How deep and how strict a verification is.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Decompress and walk every record (catches malformed records inside a batch
    /// whose CRC is valid, which no broker checks).
    pub deep: bool,
    /// Treat states a running broker legitimately leaves (a partial batch at the
    /// tail of the newest segment) as errors.
    pub strict: bool,
}

/// Most findings kept per file; beyond that they are counted, so a segment where
/// every batch is bad cannot make the report grow without bound.
pub const MAX_FINDINGS_PER_FILE: usize = 100;

/// Totals for one partition directory (or one segment file verified alone).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct PartitionSummary {
    /// In JSON: lossy text (see [`crate::report::serialize_path_lossy`]).
    #[serde(serialize_with = "crate::report::serialize_path_lossy")]
    pub path: PathBuf,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub segments: u64,
    pub batches: u64,
    pub records: u64,
    pub bytes: u64,
    /// Base offset of the first batch.
    pub first_offset: Option<i64>,
    /// Last offset of the last complete batch.
    pub last_offset: Option<i64>,
    /// Largest batch max timestamp seen (`None` when no batch has one).
    pub max_timestamp: Option<i64>,
    pub warnings: u64,
    pub errors: u64,
}

/// The outcome of verifying one or more paths.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    pub partitions: Vec<PartitionSummary>,
    /// Every finding kept, in the order found.
    pub findings: Vec<Finding>,
    /// Findings counted but not kept (beyond [`MAX_FINDINGS_PER_FILE`] in one file).
    pub suppressed_findings: u64,
    /// Files or paths that could not be read at all.
    pub io_errors: Vec<String>,
}

impl Report {
    pub fn errors(&self) -> u64 {
        self.findings.iter().filter(|f| f.severity == Severity::Error).count() as u64 + self.suppressed_findings
    }

    pub fn warnings(&self) -> u64 {
        self.findings.iter().filter(|f| f.severity == Severity::Warning).count() as u64
    }

    /// No corruption found (warnings allowed).
    pub fn is_sound(&self) -> bool {
        self.errors() == 0
    }
}

/// Told about progress so a front end can draw a bar. Called from the verifying thread(s).
pub trait Progress: Sync {
    /// `bytes` more bytes of `.log` data were scanned.
    fn advance(&self, _bytes: u64) {}
}

/// A [`Progress`] that ignores everything.
pub struct NoProgress;
impl Progress for NoProgress {}

/// A position in a [`Sink`] to rewind to.
#[derive(Debug, Clone, Copy)]
struct SinkMark {
    findings: usize,
    suppressed: u64,
    warnings: u64,
    errors: u64,
}

/// Collects findings with a per-file cap and counts them per partition.
struct Sink<'r> {
    report: &'r mut Report,
    per_file: std::collections::HashMap<PathBuf, usize>,
    warnings: u64,
    errors: u64,
}

impl<'r> Sink<'r> {
    fn new(report: &'r mut Report) -> Self {
        Sink {
            report,
            per_file: Default::default(),
            warnings: 0,
            errors: 0,
        }
    }

    fn push(&mut self, finding: Finding) {
        match finding.severity {
            Severity::Warning => self.warnings += 1,
            Severity::Error => self.errors += 1,
        }
        let kept = self.per_file.entry(finding.path.clone()).or_default();
        if *kept < MAX_FINDINGS_PER_FILE {
            *kept += 1;
            self.report.findings.push(finding);
        } else if finding.severity == Severity::Error {
            self.report.suppressed_findings += 1;
        }
    }

    fn extend(&mut self, findings: impl IntoIterator<Item = Finding>) {
        for f in findings {
            self.push(f);
        }
    }

    fn error(&mut self, path: &Path, position: Option<u64>, offset: Option<i64>, defect: Defect) {
        self.push(Finding::error(path, position, offset, defect));
    }

    /// Where the sink stands, for [`Sink::rewind`].
    fn mark(&self) -> SinkMark {
        SinkMark {
            findings: self.report.findings.len(),
            suppressed: self.report.suppressed_findings,
            warnings: self.warnings,
            errors: self.errors,
        }
    }

    /// Forget everything pushed since `mark`.
    /// Turn the error findings kept since `mark` that `torn` selects into warnings that say the
    /// file changed while it was read. Returns how many were turned.
    fn downgrade_since(&mut self, mark: &SinkMark, torn: impl Fn(&Finding) -> bool) -> u64 {
        let mut turned = 0;
        for f in &mut self.report.findings[mark.findings..] {
            if f.severity == Severity::Error && torn(f) {
                f.severity = Severity::Warning;
                f.defect = Defect::Other {
                    message: format!("{} (file changed while read: a running broker rewrote it)", f.defect),
                };
                turned += 1;
            }
        }
        // The partition's counters were already taken by `finish_partition`: the caller
        // corrects the summary it returned.
        turned
    }

    fn rewind(&mut self, mark: SinkMark) {
        for f in self.report.findings.drain(mark.findings..) {
            if let Some(kept) = self.per_file.get_mut(&f.path) {
                *kept = kept.saturating_sub(1);
            }
        }
        self.report.suppressed_findings = mark.suppressed;
        self.warnings = mark.warnings;
        self.errors = mark.errors;
    }

    /// Take the partition's counters, resetting them.
    fn take_counts(&mut self) -> (u64, u64) {
        (std::mem::take(&mut self.warnings), std::mem::take(&mut self.errors))
    }
}

/// Total bytes of `.log` files under `paths` (for a progress bar). Unreadable
/// paths count as 0; `verify_paths` reports them.
pub fn log_bytes_under(paths: &[PathBuf]) -> u64 {
    fn walk(path: &Path, depth: u32) -> u64 {
        let Ok(meta) = std::fs::metadata(path) else { return 0 };
        if meta.is_file() {
            return if path.extension().is_some_and(|e| e == "log") {
                meta.len()
            } else {
                0
            };
        }
        if depth == 0 {
            return 0;
        }
        let Ok(entries) = std::fs::read_dir(path) else { return 0 };
        entries.flatten().map(|e| walk(&e.path(), depth - 1)).sum()
    }
    paths.iter().map(|p| walk(p, 2)).sum()
}

/// Verify each path: a log dir, a partition dir, or one file of a partition dir.
pub fn verify_paths(paths: &[PathBuf], options: &VerifyOptions, progress: &dyn Progress) -> Report {
    let mut report = Report::default();
    let mut sink = Sink::new(&mut report);
    let mut partitions = Vec::new();
    for path in paths {
        let path = &with_name(path);
        match classify_target(path) {
            Ok(Target::LogDir) => verify_log_dir(path, options, progress, &mut sink, &mut partitions),
            Ok(Target::PartitionDir) => match verify_partition_dir(path, None, options, progress, &mut sink) {
                Ok(summary) => partitions.push(summary),
                Err(e) => sink.report.io_errors.push(e.to_string()),
            },
            Ok(Target::File) => match verify_file(path, options, progress, &mut sink) {
                Ok(summary) => partitions.push(summary),
                Err(e) => sink.report.io_errors.push(e.to_string()),
            },
            Err(e) => sink.report.io_errors.push(e.to_string()),
        }
    }
    report.partitions = partitions;
    report
}

/// `path`, resolved if it has no final name (`.`, `..`, `a/..`): what a
/// directory is follows from its name, and `cd orders-0 && segmirror verify .`
/// must verify a partition, not an unnamed log dir full of unknown files.
fn with_name(path: &Path) -> PathBuf {
    match path.file_name() {
        Some(_) => path.to_path_buf(),
        None => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

enum Target {
    LogDir,
    PartitionDir,
    File,
}

fn classify_target(path: &Path) -> Result<Target, Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        return Ok(Target::File);
    }
    // A log dir holds meta.properties or sub-directories; a partition dir holds
    // neither. The name alone cannot decide: `kafka-logs-1` parses as a partition.
    // Partition files (segments, the epoch checkpoint, metadata) decide for a
    // partition dir even next to a stray sub-directory: taking it for a log dir
    // would skip its segments and call it sound.
    let mut has_subdir = false;
    let mut has_partition_file = false;
    for entry in std::fs::read_dir(path).map_err(|e| Error::io(path, e))? {
        let entry = entry.map_err(|e| Error::io(path, e))?;
        if entry.file_name() == META_PROPERTIES_FILE {
            return Ok(Target::LogDir);
        }
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            has_subdir = true;
        } else if let Some(file_name) = entry.file_name().to_str() {
            has_partition_file |= matches!(
                classify_partition_file(file_name),
                PartitionFile::Segment { .. } | PartitionFile::LeaderEpochCheckpoint | PartitionFile::PartitionMetadata
            );
        }
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if (has_subdir && !has_partition_file) || PartitionDirName::parse(name).is_err() {
        Ok(Target::LogDir)
    } else {
        Ok(Target::PartitionDir)
    }
}

fn verify_log_dir(
    path: &Path,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Sink<'_>,
    partitions: &mut Vec<PartitionSummary>,
) {
    let log_dir = match LogDir::open(path) {
        Ok(d) => d,
        Err(e) => return sink.report.io_errors.push(e.to_string()),
    };
    sink.extend(log_dir.findings.iter().cloned());
    if let Some(meta) = &log_dir.meta_properties {
        if let Err(e) = MetaProperties::read(meta) {
            sink.push(Finding::from_error(&e));
        }
    }
    let mut log_start_offsets = None;
    for (kind, file) in &log_dir.checkpoints {
        match OffsetCheckpoint::read(file) {
            Ok(cp) => {
                if *kind == RootCheckpoint::LogStartOffset {
                    log_start_offsets = Some(cp);
                }
            }
            Err(e) => sink.push(Finding::from_error(&e)),
        }
    }
    sink.take_counts();
    for entry in &log_dir.partitions {
        let log_start = log_start_offsets
            .as_ref()
            .and_then(|cp| cp.get(&entry.name.topic, entry.name.partition));
        match verify_partition_dir(&entry.path, log_start, options, progress, sink) {
            Ok(summary) => partitions.push(summary),
            Err(e) => sink.report.io_errors.push(e.to_string()),
        }
    }
}

/// Where one segment sits in its partition, which decides what its tail may look like.
#[derive(Clone, Copy)]
struct SegmentContext {
    /// Base offset of the next segment: every offset here must be below it.
    next_base_offset: Option<i64>,
    /// The partition's newest segment: the one a running broker appends to.
    newest: bool,
}

/// State carried from one segment of a partition to the next.
struct PartitionScan {
    summary: PartitionSummary,
    previous_last_offset: Option<i64>,
    txn_tracker: TxnTracker,
    epochs: Option<LeaderEpochChecker>,
}

use live::verify_partition_dir;
pub use live::LIVE_ATTEMPTS;

fn verify_partition_dir_once(
    path: &Path,
    log_start_offset: Option<i64>,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Sink<'_>,
) -> Result<PartitionSummary, Error> {
    let dir = PartitionDir::open(path)?;
    let mut scan = start_partition(&dir, sink);
    if let (Some(start), Some(first)) = (log_start_offset, dir.segments.first()) {
        if start < first.base_offset {
            sink.push(Finding::warning(
                path,
                None,
                Some(start),
                Defect::Other {
                    message: format!(
                        "log-start-offset checkpoint {start} is below the first segment's base offset {}",
                        first.base_offset
                    ),
                },
            ));
        }
    }
    for (i, segment) in dir.segments.iter().enumerate() {
        let context = SegmentContext {
            next_base_offset: dir.segments.get(i + 1).map(|s| s.base_offset),
            newest: i + 1 == dir.segments.len(),
        };
        verify_segment(segment, context, options, progress, sink, &mut scan)?;
    }
    finish_partition(scan, sink)
}

/// Check the partition-level files and set up the cross-segment state.
fn start_partition(dir: &PartitionDir, sink: &mut Sink<'_>) -> PartitionScan {
    sink.extend(dir.findings.iter().cloned());
    if let Some(pm) = &dir.partition_metadata {
        if let Err(e) = PartitionMetadata::read(pm) {
            sink.push(Finding::from_error(&e));
        }
    }
    let epochs = dir
        .leader_epoch_checkpoint
        .as_ref()
        .and_then(|p| match LeaderEpochCheckpoint::read(p) {
            Ok(cp) => {
                sink.extend(cp.check(p));
                Some(LeaderEpochChecker::new(&cp))
            }
            Err(e) => {
                sink.push(Finding::from_error(&e));
                None
            }
        });
    let segment_bases: Vec<i64> = dir.segments.iter().map(|s| s.base_offset).collect();
    let mut txn_tracker = TxnTracker::new();
    for snapshot in &dir.snapshots {
        match ProducerSnapshot::read(&snapshot.path) {
            Ok(parsed) => {
                // Open transactions that started before the first segment are known only
                // from the snapshot at its base offset.
                if segment_bases.first() == Some(&snapshot.offset) {
                    txn_tracker = TxnTracker::from_snapshot(&parsed);
                }
            }
            Err(e) => sink.push(Finding::from_error(&e)),
        }
        let last_base = segment_bases.last().copied().unwrap_or(i64::MIN);
        let is_largest = dir.snapshots.last().map(|s| s.offset) == Some(snapshot.offset);
        if !(segment_bases.contains(&snapshot.offset) || is_largest && snapshot.offset > last_base) {
            sink.push(Finding::warning(
                &snapshot.path,
                None,
                Some(snapshot.offset),
                Defect::Snapshot {
                    message: "offset is neither a segment base offset nor the newest snapshot above the last \
                              segment; the broker deletes it as stray at load"
                        .into(),
                },
            ));
        }
    }
    PartitionScan {
        summary: PartitionSummary {
            path: dir.path.clone(),
            topic: Some(dir.name.topic.clone()),
            partition: Some(dir.name.partition),
            ..Default::default()
        },
        previous_last_offset: None,
        txn_tracker,
        epochs,
    }
}

fn finish_partition(mut scan: PartitionScan, sink: &mut Sink<'_>) -> Result<PartitionSummary, Error> {
    if let Some(epochs) = scan.epochs.take() {
        sink.extend(epochs.finish());
    }
    let (warnings, errors) = sink.take_counts();
    scan.summary.warnings = warnings;
    scan.summary.errors = errors;
    Ok(scan.summary)
}

/// Verify a single file given on the command line: the segment it belongs to is
/// verified with its indexes, in the context of its directory when that is a
/// partition directory.
fn verify_file(
    path: &Path,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Sink<'_>,
) -> Result<PartitionSummary, Error> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let parent = with_name(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    );
    let parent = parent.as_path();
    match classify_partition_file(name) {
        PartitionFile::Segment { base_offset, kind } if kind != SegmentFileKind::Snapshot => {
            let in_partition_dir = PartitionDir::open(parent).ok();
            let (segment, context) = match &in_partition_dir {
                Some(dir) => {
                    let i = dir
                        .segments
                        .iter()
                        .position(|s| s.base_offset == base_offset)
                        .ok_or_else(|| Error::BadName {
                            path: path.to_path_buf(),
                            reason: "no .log file for this segment".into(),
                        })?;
                    let context = SegmentContext {
                        next_base_offset: dir.segments.get(i + 1).map(|s| s.base_offset),
                        newest: i + 1 == dir.segments.len(),
                    };
                    (dir.segments[i].clone(), context)
                }
                None => (
                    standalone_segment(parent, base_offset),
                    SegmentContext {
                        next_base_offset: None,
                        newest: true,
                    },
                ),
            };
            let mut scan = match &in_partition_dir {
                Some(dir) => {
                    let mut scan = start_partition(dir, sink);
                    // Only this segment is scanned: epochs of the rest are unknown.
                    scan.epochs = None;
                    scan
                }
                None => PartitionScan {
                    summary: PartitionSummary {
                        path: path.to_path_buf(),
                        ..Default::default()
                    },
                    previous_last_offset: None,
                    txn_tracker: TxnTracker::new(),
                    epochs: None,
                },
            };
            if !segment.log.exists() {
                return Err(Error::BadName {
                    path: path.to_path_buf(),
                    reason: "no .log file for this segment".into(),
                });
            }
            verify_segment(&segment, context, options, progress, sink, &mut scan)?;
            finish_partition(scan, sink)
        }
        PartitionFile::Segment { .. } => {
            if let Err(e) = ProducerSnapshot::read(path) {
                sink.push(Finding::from_error(&e));
            }
            single_file_summary(path, sink)
        }
        PartitionFile::LeaderEpochCheckpoint => {
            match LeaderEpochCheckpoint::read(path) {
                Ok(cp) => sink.extend(cp.check(path)),
                Err(e) => sink.push(Finding::from_error(&e)),
            }
            single_file_summary(path, sink)
        }
        PartitionFile::PartitionMetadata => {
            if let Err(e) = PartitionMetadata::read(path) {
                sink.push(Finding::from_error(&e));
            }
            single_file_summary(path, sink)
        }
        _ => match name {
            META_PROPERTIES_FILE => {
                if let Err(e) = MetaProperties::read(path) {
                    sink.push(Finding::from_error(&e));
                }
                single_file_summary(path, sink)
            }
            _ if RootCheckpoint::ALL.iter().any(|k| k.file_name() == name) => {
                if let Err(e) = OffsetCheckpoint::read(path) {
                    sink.push(Finding::from_error(&e));
                }
                single_file_summary(path, sink)
            }
            _ => Err(Error::BadName {
                path: path.to_path_buf(),
                reason: "not a Kafka segment, index, snapshot, checkpoint or metadata file".into(),
            }),
        },
    }
}

fn standalone_segment(dir: &Path, base_offset: i64) -> SegmentFiles {
    let file = |kind| {
        let p = dir.join(segment_file_name(base_offset, kind));
        p.exists().then_some(p)
    };
    SegmentFiles {
        base_offset,
        log: dir.join(segment_file_name(base_offset, SegmentFileKind::Log)),
        index: file(SegmentFileKind::Index),
        time_index: file(SegmentFileKind::TimeIndex),
        txn_index: file(SegmentFileKind::TxnIndex),
    }
}

fn single_file_summary(path: &Path, sink: &mut Sink<'_>) -> Result<PartitionSummary, Error> {
    let (warnings, errors) = sink.take_counts();
    Ok(PartitionSummary {
        path: path.to_path_buf(),
        warnings,
        errors,
        ..Default::default()
    })
}

/// How often (in scanned bytes) progress is reported.
const PROGRESS_STEP: u64 = 4 * 1024 * 1024;

/// Read one index of a segment for its checker (see [`bounded`]): a missing
/// file is empty; `None` when it is not to be checked (the findings say why).
fn read_optional(
    path: Option<&PathBuf>,
    kind: IndexKind,
    entry_size: usize,
    log_len: u64,
    newest: bool,
    sink: &mut Sink<'_>,
) -> Result<Option<Vec<u8>>, Error> {
    let Some(path) = path else {
        return Ok(Some(Vec::new()));
    };
    let mut findings = Vec::new();
    let read = bounded::read_index(path, kind, entry_size, log_len, newest, &mut findings)?;
    sink.extend(findings);
    Ok(read)
}

/// Scan one segment once, running every check beside the scan.
fn verify_segment(
    segment: &SegmentFiles,
    context: SegmentContext,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Sink<'_>,
    scan: &mut PartitionScan,
) -> Result<(), Error> {
    let base = segment.base_offset;
    let log_path = segment.log.as_path();
    // The `.log`'s size decides before anything is read: one over Kafka's limit
    // is rejected by it (a 50 GiB sparse file is not scanned for minutes), and
    // it bounds what the indexes can need.
    let log_len = match std::fs::symlink_metadata(log_path) {
        Ok(meta) if meta.len() > MAX_SEGMENT_BYTES => {
            sink.push(Finding::from_error(&crate::open::too_large(
                log_path,
                ".log segment",
                meta.len(),
                MAX_SEGMENT_BYTES,
            )));
            scan.summary.segments += 1;
            return Ok(());
        }
        Ok(meta) => meta.len(),
        Err(e) => return Err(Error::io(log_path, e)),
    };
    // Indexes before the log: a running broker appends a batch to the `.log`
    // before its index entries, so every entry read first points into the log
    // read second. The other order sees entries beyond the log of a live segment.
    let newest = context.newest;
    let offset_index = read_optional(
        segment.index.as_ref(),
        IndexKind::Offset,
        OFFSET_INDEX_ENTRY_SIZE,
        log_len,
        newest,
        sink,
    )?;
    let time_index = read_optional(
        segment.time_index.as_ref(),
        IndexKind::Time,
        TIME_INDEX_ENTRY_SIZE,
        log_len,
        newest,
        sink,
    )?;
    let txn_index = read_optional(
        segment.txn_index.as_ref(),
        IndexKind::Transaction,
        ABORTED_TXN_SIZE,
        log_len,
        newest,
        sink,
    )?;
    let mut log = match LogFile::open(log_path) {
        Ok(log) => log,
        // Not a regular file, or grown past the limit since the `stat`: a finding.
        Err(e) if e.is_corrupt() => {
            sink.push(Finding::from_error(&e));
            scan.summary.segments += 1;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let index_path = segment
        .index
        .clone()
        .unwrap_or_else(|| log_path.with_extension("index"));
    let time_index_path = segment
        .time_index
        .clone()
        .unwrap_or_else(|| log_path.with_extension("timeindex"));
    let txn_index_path = segment
        .txn_index
        .clone()
        .unwrap_or_else(|| log_path.with_extension("txnindex"));
    if segment.index.is_none() && !log.is_empty() {
        sink.push(Finding::warning(
            &index_path,
            None,
            Some(base),
            Defect::Index {
                index: IndexKind::Offset,
                message: "missing: the broker rebuilds it at load".into(),
            },
        ));
    }
    let mut offset_checker = offset_index
        .as_deref()
        .map(|bytes| OffsetIndexChecker::new(&index_path, bytes, base, newest));
    let mut time_checker = time_index
        .as_deref()
        .map(|bytes| TimeIndexChecker::new(&time_index_path, bytes, base, newest));
    let mut txn_checker = txn_index
        .as_deref()
        .map(|bytes| TxnIndexChecker::new(&txn_index_path, bytes, base, newest));
    let limits = DeepLimits::default();
    let mut unreported = 0u64;
    let summary = &mut scan.summary;
    summary.segments += 1;
    let outcome = log.scan(|frame| {
        let mut info = frame.info;
        if let Some(defect) = frame.crc_defect() {
            sink.error(log_path, Some(frame.crc_position()), Some(info.base_offset), defect);
        }
        let mut records = u64::try_from(info.records_count).unwrap_or(0);
        // A legacy compressed wrapper carries no record count and only its last offset: even a
        // shallow pass walks it (legacy data is rare, and counts and offsets must be right).
        let legacy_wrapper = info.magic < 2 && info.records_count < 0;
        if options.deep || legacy_wrapper {
            match deep_walk(frame.bytes, &info, &limits) {
                Ok(walk) => {
                    records = walk.records;
                    // A legacy wrapper's first offset is only known inside it: with it the
                    // offset checks also catch wrappers that overlap.
                    info.base_offset = walk.first_offset.unwrap_or(info.base_offset);
                }
                Err(e) => sink.push(Finding::from_error(&e.shifted(info.position).at(log_path))),
            }
        }
        check_offsets(log_path, &info, base, context, scan.previous_last_offset, sink);
        scan.previous_last_offset = Some(info.last_offset.max(scan.previous_last_offset.unwrap_or(i64::MIN)));
        if info.is_control && info.records_count > 0 && info.control.is_none() {
            sink.error(
                log_path,
                Some(info.position),
                Some(info.base_offset),
                Defect::Control {
                    message: "control record key could not be decoded".into(),
                },
            );
        }
        let summary = &mut scan.summary;
        summary.batches += 1;
        summary.records += records;
        summary.bytes += info.size;
        summary.first_offset.get_or_insert(info.base_offset);
        summary.last_offset = Some(info.last_offset);
        if info.max_timestamp >= 0 {
            summary.max_timestamp = Some(
                summary
                    .max_timestamp
                    .map_or(info.max_timestamp, |m| m.max(info.max_timestamp)),
            );
        }
        if let Some(checker) = offset_checker.as_mut() {
            checker.on_batch(&info);
        }
        if let Some(checker) = time_checker.as_mut() {
            checker.on_batch(&info);
        }
        let expected = scan.txn_tracker.on_batch(&info);
        if let Some(checker) = txn_checker.as_mut() {
            checker.on_batch(&info, expected.as_ref());
        }
        if let Some(epochs) = scan.epochs.as_mut() {
            epochs.on_batch(log_path, &info);
        }
        unreported += info.size;
        if unreported >= PROGRESS_STEP {
            progress.advance(unreported);
            unreported = 0;
        }
        ControlFlow::Continue(())
    });
    progress.advance(unreported);
    let end = match outcome {
        Ok(s) => s.end,
        Err(e) if e.is_changed_while_read() => {
            // Truncated under the scan: nothing after this describes the file, so
            // the indexes are not judged against it. The caller reads it again.
            sink.push(Finding::from_error(&e));
            return Ok(());
        }
        Err(e) => {
            let (position, offset) = match &e {
                Error::Corrupt { position, offset, .. } | Error::Incomplete { position, offset, .. } => {
                    (*position, *offset)
                }
                _ => return Err(e),
            };
            if let Err(changed) = report_tail(&log, position, offset, &e, context, options, sink) {
                sink.push(Finding::from_error(&changed));
                return Ok(());
            }
            progress.advance(log.len().saturating_sub(position));
            position
        }
    };
    if let Some(checker) = offset_checker {
        sink.extend(checker.finish(end));
    }
    if let Some(checker) = time_checker {
        sink.extend(checker.finish(end));
    }
    if let Some(checker) = txn_checker {
        sink.extend(checker.finish());
    }
    Ok(())
}

/// Offsets increase across batches and stay inside the segment's range.
fn check_offsets(
    path: &Path,
    info: &BatchInfo,
    base: i64,
    context: SegmentContext,
    previous_last_offset: Option<i64>,
    sink: &mut Sink<'_>,
) {
    let at = Some(info.position);
    let offset = Some(info.base_offset);
    if info.last_offset < info.base_offset {
        sink.error(
            path,
            at,
            offset,
            Defect::BadLength {
                field: "lastOffsetDelta",
                value: info.last_offset.wrapping_sub(info.base_offset),
            },
        );
    }
    if let Some(previous) = previous_last_offset {
        if info.base_offset <= previous {
            sink.error(
                path,
                at,
                offset,
                Defect::OffsetOutOfOrder {
                    previous,
                    found: info.base_offset,
                },
            );
        }
    }
    let outside_next = context.next_base_offset.is_some_and(|next| info.last_offset >= next);
    if info.base_offset < base || outside_next {
        let found = if info.base_offset < base {
            info.base_offset
        } else {
            info.last_offset
        };
        sink.error(
            path,
            at,
            offset,
            Defect::OffsetOutsideSegment {
                base_offset: base,
                next_base_offset: context.next_base_offset,
                found,
            },
        );
    }
    if info.last_offset.saturating_sub(base) > i64::from(i32::MAX) {
        sink.error(
            path,
            at,
            offset,
            Defect::OffsetOverflow {
                base_offset: base,
                found: info.last_offset,
            },
        );
    }
}

/// What a deep walk of one frame found.
struct DeepWalk {
    records: u64,
    /// The first inner offset of a legacy frame (the shallow scan only knows the
    /// last); `None` for magic 2, whose header already has it.
    first_offset: Option<i64>,
}

/// Decompress and walk every record.
fn deep_walk(bytes: &[u8], info: &BatchInfo, limits: &DeepLimits) -> Result<DeepWalk, ParseError> {
    if info.magic >= 2 {
        let header = parse_header(bytes)?;
        let stats = for_each_record(bytes, &header, limits, |_| ControlFlow::Continue(()))?;
        Ok(DeepWalk {
            records: u64::from(stats.records),
            first_offset: None,
        })
    } else {
        let stats = legacy::for_each_message(bytes, limits, |_| ControlFlow::Continue(()))?;
        Ok(DeepWalk {
            records: u64::from(stats.messages),
            first_offset: stats.first_offset,
        })
    }
}

/// Report what stopped a scan before the end of the file. A partial frame at the
/// end of the newest segment is what a broker leaves mid-write (a warning unless
/// strict), and so is a zero tail there (`preallocate=true`); anywhere else, and
/// any framing defect, is corruption.
/// Errs only if the file changed while its tail was read.
fn report_tail(
    log: &LogFile,
    position: u64,
    offset: Option<i64>,
    error: &Error,
    context: SegmentContext,
    options: &VerifyOptions,
    sink: &mut Sink<'_>,
) -> Result<(), Error> {
    let path = log.path();
    let rest_len = log.len().saturating_sub(position);
    let zero_tail = rest_len > 0 && !error.is_too_large() && log.is_zero_from(position)?;
    // What a broker legitimately leaves at the end of its active segment: described in
    // a warning when tolerated, otherwise reported as trailing bytes.
    let what = match error {
        _ if zero_tail => format!("{rest_len} bytes, zero-filled: preallocated active segment"),
        Error::Incomplete { needed, available, .. } => format!(
            "incomplete batch at the end of the segment: need {needed} bytes, {available} available \
             (a broker mid-write leaves this)"
        ),
        _ => {
            sink.push(Finding::from_error(error));
            return Ok(());
        }
    };
    let offset = if zero_tail { None } else { offset };
    if context.newest && !options.strict {
        sink.push(Finding::warning(
            path,
            Some(position),
            offset,
            Defect::Other { message: what },
        ));
    } else {
        sink.error(path, Some(position), offset, Defect::TrailingBytes { bytes: rest_len });
    }
    Ok(())
}

/// The outcome of [`check_segment`]: one segment checked on its own.
#[derive(Debug, Clone, Default)]
pub struct SegmentCheck {
    pub findings: Vec<Finding>,
    /// Findings beyond [`MAX_FINDINGS_PER_FILE`] in one file, counted only.
    pub suppressed_findings: u64,
    /// Totals of the segment's complete batches. `bytes` is the length of the
    /// well-framed prefix of the `.log`: everything up to the end of its last
    /// complete batch.
    pub summary: PartitionSummary,
}

impl SegmentCheck {
    /// No error finding (warnings allowed).
    pub fn is_sound(&self) -> bool {
        self.suppressed_findings == 0 && self.findings.iter().all(|f| f.severity != Severity::Error)
    }

    /// A finding saying a file changed while it was read (truncated under the
    /// scan): the check describes no state of the segment and is to be redone,
    /// whatever else it found.
    pub fn changed_while_read(&self) -> Option<&Finding> {
        self.findings
            .iter()
            .find(|f| matches!(f.defect, Defect::ChangedWhileRead { .. }))
    }

    /// The error findings.
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.severity == Severity::Error)
    }
}

/// Check one segment (its `.log` and whatever indexes `segment` names) without
/// the rest of its partition: what the shipper does before uploading a segment
/// and the applier before installing one. `next_base_offset` bounds the offsets
/// (the next segment's base, or the manifest's `next`); `newest` tolerates a
/// partial batch or zero tail at the end (unless `options.strict`). Cross-segment
/// state is unknown here, so transaction index entries of transactions that began
/// in an earlier segment are accepted as found, and epochs are not checked.
pub fn check_segment(
    segment: &SegmentFiles,
    next_base_offset: Option<i64>,
    newest: bool,
    options: &VerifyOptions,
) -> Result<SegmentCheck, Error> {
    let mut report = Report::default();
    let mut sink = Sink::new(&mut report);
    let mut scan = PartitionScan {
        summary: PartitionSummary {
            path: segment.log.clone(),
            ..Default::default()
        },
        previous_last_offset: None,
        txn_tracker: TxnTracker::new(),
        epochs: None,
    };
    let context = SegmentContext {
        next_base_offset,
        newest,
    };
    verify_segment(segment, context, options, &NoProgress, &mut sink, &mut scan)?;
    let summary = finish_partition(scan, &mut sink)?;
    Ok(SegmentCheck {
        findings: report.findings,
        suppressed_findings: report.suppressed_findings,
        summary,
    })
}
