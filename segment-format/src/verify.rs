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
    classify_partition_file, segment_file_name, LogDir, OwnEntry, PartitionDir, PartitionDirName, PartitionFile,
    RootCheckpoint, SegmentFileKind, SegmentFiles, META_PROPERTIES_FILE,
};
use crate::error::{Defect, Error, IndexKind, ParseError};
use crate::index::{OffsetIndexChecker, TimeIndexChecker, OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE};
use crate::legacy;
use crate::log::{Frame, LogFile};
use crate::open::MAX_SEGMENT_BYTES;
use crate::partition_metadata::PartitionMetadata;
use crate::record::{for_each_record, DeepLimits};
use crate::report::{Finding, Severity};
use crate::snapshot::ProducerSnapshot;
use crate::txn_index::{TxnIndexChecker, TxnTracker, ABORTED_TXN_SIZE};

mod bounded;
mod live;
mod parallel;
mod segment;

use segment::verify_segment;
pub use segment::{check_segment, check_segment_against_epochs, check_segment_observed, SegmentCheck};

pub use crate::dir::SegmentRole;

/// How much of each batch a verification reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Depth {
    /// The batch framing, CRCs, offsets, indexes and leader epochs, as a broker's own load checks them (a legacy
    /// compressed wrapper is walked even so: its record count and first offset are only known inside it).
    #[default]
    Shallow,
    /// Also decompress and walk every record (catches malformed records inside a batch
    /// whose CRC is valid, which no broker checks).
    Deep,
}

/// What a verification makes of the states a running broker legitimately leaves: a partial batch or zero tail at
/// the end of the newest segment, a torn newest producer snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strictness {
    /// Warnings: the partition may be live.
    #[default]
    Lenient,
    /// Errors (`verify --strict`): the partition is expected at rest, every file final.
    Strict,
}

/// How deep and how strict a verification is.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    pub depth: Depth,
    pub strictness: Strictness,
}

impl VerifyOptions {
    /// Every record is walked ([`Depth::Deep`]).
    pub fn is_deep(&self) -> bool {
        self.depth == Depth::Deep
    }

    /// What a running broker leaves is an error ([`Strictness::Strict`]).
    pub fn is_strict(&self) -> bool {
        self.strictness == Strictness::Strict
    }
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

/// Progress of a verification: [`Progress::advance`] per chunk of `.log` bytes scanned (the workspace's one
/// observer, re-exported here where verification's callers look for it).
pub use crate::progress::{NoProgress, Progress};

/// A position in a [`Findings`] to rewind to.
#[derive(Debug, Clone, Copy)]
struct FindingsMark {
    findings: usize,
    suppressed: u64,
    warnings: u64,
    errors: u64,
}

/// Collects findings with a per-file cap and counts them per partition.
struct Findings<'r> {
    report: &'r mut Report,
    per_file: std::collections::HashMap<PathBuf, usize>,
    warnings: u64,
    errors: u64,
}

impl<'r> Findings<'r> {
    fn new(report: &'r mut Report) -> Self {
        Findings {
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

    /// Where the sink stands, for [`Findings::rewind`].
    fn mark(&self) -> FindingsMark {
        FindingsMark {
            findings: self.report.findings.len(),
            suppressed: self.report.suppressed_findings,
            warnings: self.warnings,
            errors: self.errors,
        }
    }

    /// Forget everything pushed since `mark`.
    /// Turn the error findings kept since `mark` that `torn` selects into warnings that say the
    /// file changed while it was read. Returns how many were turned.
    fn downgrade_since(&mut self, mark: &FindingsMark, torn: impl Fn(&Finding) -> bool) -> u64 {
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

    fn rewind(&mut self, mark: FindingsMark) {
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
    verify_paths_owned_by(paths, options, progress, &[])
}

/// [`verify_paths`] where a log dir may be a tool's own root of partitions: the entries of `own` found in a
/// directory without `meta.properties` are that tool's state, not directories that stop a broker
/// ([`LogDir::open_owned_by`]).
pub fn verify_paths_owned_by(
    paths: &[PathBuf],
    options: &VerifyOptions,
    progress: &dyn Progress,
    own: &[OwnEntry],
) -> Report {
    let mut report = Report::default();
    let mut sink = Findings::new(&mut report);
    let mut partitions = Vec::new();
    for path in paths {
        let path = &with_name(path);
        match classify_target(path) {
            Ok(Target::LogDir) => verify_log_dir(path, own, options, progress, &mut sink, &mut partitions),
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
    own: &[OwnEntry],
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Findings<'_>,
    partitions: &mut Vec<PartitionSummary>,
) {
    let log_dir = match LogDir::open_owned_by(path, own) {
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
    let jobs: Vec<_> = log_dir
        .partitions
        .iter()
        .map(|entry| parallel::PartitionJob {
            path: entry.path.clone(),
            log_start_offset: log_start_offsets
                .as_ref()
                .and_then(|cp| cp.get(&entry.name.topic, entry.name.partition)),
        })
        .collect();
    parallel::verify_partitions(&jobs, options, progress, sink, partitions);
}

/// Where one segment sits in its partition, which decides what its tail may look like.
#[derive(Clone, Copy)]
struct SegmentContext {
    /// Base offset of the next segment: every offset here must be below it.
    next_base_offset: Option<i64>,
    /// How the end of its `.log` is judged (the newest segment is the one a running broker appends to).
    tail: TailPolicy,
}

/// How the end of a segment's `.log` (and its indexes) is judged. One value instead of a [`SegmentRole`] and a
/// [`Strictness`], because only three of their four combinations mean something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailPolicy {
    /// A sealed (rolled) segment: every byte of the `.log` is a complete batch; a partial batch or a zero-filled
    /// tail is corruption, and its indexes must be trimmed to their entries.
    Sealed,
    /// The active segment of a live partition: a partial batch or a zero-filled (preallocated) tail at the end is
    /// what a broker mid-write leaves, reported as a warning; its indexes may be preallocated.
    ActiveTolerant,
    /// The active segment judged strictly (`verify --strict`): its indexes are read as an active segment's, but a
    /// partial batch or zero tail at the end of the `.log` is an error, as in a sealed segment.
    ActiveStrict,
}

impl TailPolicy {
    /// The policy for the newest segment (`ActiveStrict` when strict) or for any other one (`Sealed`).
    pub fn for_segment(role: SegmentRole, strictness: Strictness) -> Self {
        match (role, strictness) {
            (SegmentRole::Sealed, _) => TailPolicy::Sealed,
            (SegmentRole::Newest, Strictness::Lenient) => TailPolicy::ActiveTolerant,
            (SegmentRole::Newest, Strictness::Strict) => TailPolicy::ActiveStrict,
        }
    }

    /// The role of the segment this policy judges: an active one is the newest.
    pub fn role(self) -> SegmentRole {
        if self.is_active() {
            SegmentRole::Newest
        } else {
            SegmentRole::Sealed
        }
    }

    /// The active segment: its indexes may be preallocated and may run ahead of the `.log`.
    pub fn is_active(self) -> bool {
        self != TailPolicy::Sealed
    }

    /// A partial batch or zero tail at the end of the `.log` is a warning, not an error.
    pub fn tolerates_partial_tail(self) -> bool {
        self == TailPolicy::ActiveTolerant
    }
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
    sink: &mut Findings<'_>,
) -> Result<PartitionSummary, Error> {
    let dir = PartitionDir::open(path)?;
    let mut scan = start_partition(&dir, options, sink);
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
        let next_base_offset = dir.segments.get(i + 1).map(|s| s.base_offset);
        let context = SegmentContext {
            next_base_offset,
            tail: TailPolicy::for_segment(SegmentRole::with_next(next_base_offset), options.strictness),
        };
        verify_segment(segment, context, options, progress, sink, &mut scan)?;
    }
    finish_partition(scan, sink)
}

/// Check the partition-level files and set up the cross-segment state.
fn start_partition(dir: &PartitionDir, options: &VerifyOptions, sink: &mut Findings<'_>) -> PartitionScan {
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
        let last_base = segment_bases.last().copied().unwrap_or(i64::MIN);
        let is_largest = dir.snapshots.last().map(|s| s.offset) == Some(snapshot.offset);
        match ProducerSnapshot::read(&snapshot.path) {
            Ok(parsed) => {
                // Open transactions that started before the first segment are known only
                // from the snapshot at its base offset.
                if segment_bases.first() == Some(&snapshot.offset) {
                    txn_tracker = TxnTracker::from_snapshot(&parsed);
                }
            }
            // A broker writes a snapshot in place when it rolls a segment, so a running one's newest snapshot may
            // be empty or half written. At load the broker deletes a snapshot it cannot read and rebuilds producer
            // state from an older one and the log (ProducerStateManager.loadFromSnapshot). Under --strict it stays
            // an error, like the newest segment's tail mid-append.
            Err(e)
                if is_largest
                    && snapshot.offset >= last_base
                    && options.strictness == Strictness::Lenient
                    && is_torn_snapshot(&snapshot.path, &e) =>
            {
                let finding = Finding::from_error(&e);
                sink.push(Finding::warning(
                    &snapshot.path,
                    finding.position,
                    Some(snapshot.offset),
                    Defect::Snapshot {
                        message: format!(
                            "newest snapshot unreadable ({}): a broker mid-write leaves this; at load the broker \
                             deletes it and rebuilds producer state from an older snapshot and the log",
                            finding.defect
                        ),
                    },
                ));
            }
            Err(e) => sink.push(Finding::from_error(&e)),
        }
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

/// The snapshot failed to parse because it is a strict prefix of one (what a broker writing it leaves), read again.
fn is_torn_snapshot(path: &Path, error: &Error) -> bool {
    error.is_corrupt()
        && crate::open::read_capped(path, "producer snapshot", crate::open::MAX_SNAPSHOT_BYTES)
            .is_ok_and(|bytes| ProducerSnapshot::is_torn_write(&bytes))
}

fn finish_partition(mut scan: PartitionScan, sink: &mut Findings<'_>) -> Result<PartitionSummary, Error> {
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
    sink: &mut Findings<'_>,
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
                    let next_base_offset = dir.segments.get(i + 1).map(|s| s.base_offset);
                    let context = SegmentContext {
                        next_base_offset,
                        tail: TailPolicy::for_segment(SegmentRole::with_next(next_base_offset), options.strictness),
                    };
                    (dir.segments[i].clone(), context)
                }
                None => (
                    standalone_segment(parent, base_offset),
                    SegmentContext {
                        next_base_offset: None,
                        tail: TailPolicy::for_segment(SegmentRole::Newest, options.strictness),
                    },
                ),
            };
            let mut scan = match &in_partition_dir {
                Some(dir) => {
                    let mut scan = start_partition(dir, options, sink);
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

fn single_file_summary(path: &Path, sink: &mut Findings<'_>) -> Result<PartitionSummary, Error> {
    let (warnings, errors) = sink.take_counts();
    Ok(PartitionSummary {
        path: path.to_path_buf(),
        warnings,
        errors,
        ..Default::default()
    })
}
