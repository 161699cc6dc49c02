//! One segment scanned once, front to back, with every check running beside the
//! scan: batch framing and CRCs, offsets, the deep record walk, the three indexes,
//! leader epochs and the tail of the newest segment. [`check_segment`] runs it on a
//! single segment outside a partition walk.

use super::*;
use crate::log::ScanSummary;

/// How often (in scanned bytes) progress is reported.
const PROGRESS_STEP: u64 = 4 * 1024 * 1024;

/// Read one index of a segment for its checker (see [`bounded`]): a missing
/// file is empty; `None` when it is not to be checked (the findings say why).
fn read_optional(
    path: Option<&PathBuf>,
    kind: IndexKind,
    entry_size: usize,
    log_len: u64,
    role: SegmentRole,
    sink: &mut Findings<'_>,
) -> Result<Option<Vec<u8>>, Error> {
    let Some(path) = path else {
        return Ok(Some(Vec::new()));
    };
    let mut findings = Vec::new();
    let read = bounded::read_index(path, kind, entry_size, log_len, role, &mut findings)?;
    sink.extend(findings);
    Ok(read)
}

/// Scan one segment once, running every check beside the scan.
pub(super) fn verify_segment(
    segment: &SegmentFiles,
    context: SegmentContext,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Findings<'_>,
    scan: &mut PartitionScan,
) -> Result<(), Error> {
    verify_segment_observed(segment, context, options, progress, sink, scan, &mut |_| {})
}

/// [`verify_segment`], handing every frame the scan yields to `on_frame` after the checks saw it (see
/// [`check_segment_observed`]).
fn verify_segment_observed(
    segment: &SegmentFiles,
    context: SegmentContext,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Findings<'_>,
    scan: &mut PartitionScan,
    on_frame: &mut dyn FnMut(&Frame<'_>),
) -> Result<(), Error> {
    let base = segment.base_offset;
    let log_path = segment.log.as_path();
    let Some(log_len) = log_size(log_path, sink, scan)? else {
        return Ok(());
    };
    // Indexes before the log: a running broker appends a batch to the `.log`
    // before its index entries, so every entry read first points into the log
    // read second. The other order sees entries beyond the log of a live segment.
    let role = context.tail.role();
    let indexes = SegmentIndexes::read(segment, log_len, role, sink)?;
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
    if segment.index.is_none() && !log.is_empty() {
        sink.push(Finding::warning(
            &indexes.offset_path,
            None,
            Some(base),
            Defect::Index {
                index: IndexKind::Offset,
                message: "missing: the broker rebuilds it at load".into(),
            },
        ));
    }
    let mut checkers = indexes.checkers(base, role);
    let batches = BatchChecks {
        log_path,
        base,
        context,
        options,
        limits: DeepLimits::default(),
    };
    let mut unreported = 0u64;
    scan.summary.segments += 1;
    let outcome = log.scan(|frame| {
        let size = batches.check(frame, scan, &mut checkers, sink);
        on_frame(frame);
        unreported += size;
        if unreported >= PROGRESS_STEP {
            progress.advance(unreported);
            unreported = 0;
        }
        ControlFlow::Continue(())
    });
    progress.advance(unreported);
    let Some(end) = scan_end(outcome, &log, context, progress, sink)? else {
        return Ok(());
    };
    checkers.finish(end, sink);
    Ok(())
}

/// The `.log`'s size, which decides before anything is read: one over Kafka's limit is rejected by it (a 50 GiB
/// sparse file is not scanned for minutes; `None`, the finding made), and it bounds what the indexes can need.
fn log_size(log_path: &Path, sink: &mut Findings<'_>, scan: &mut PartitionScan) -> Result<Option<u64>, Error> {
    match std::fs::symlink_metadata(log_path) {
        Ok(meta) if meta.len() > MAX_SEGMENT_BYTES => {
            sink.push(Finding::from_error(&crate::open::too_large(
                log_path,
                ".log segment",
                meta.len(),
                MAX_SEGMENT_BYTES,
            )));
            scan.summary.segments += 1;
            Ok(None)
        }
        Ok(meta) => Ok(Some(meta.len())),
        Err(e) => Err(Error::io(log_path, e)),
    }
}

/// A segment's three indexes as read before its `.log` (`None`: not to be checked, the findings say why), and
/// where each is (or would be).
struct SegmentIndexes {
    offset: Option<Vec<u8>>,
    time: Option<Vec<u8>>,
    txn: Option<Vec<u8>>,
    offset_path: PathBuf,
    time_path: PathBuf,
    txn_path: PathBuf,
}

impl SegmentIndexes {
    fn read(segment: &SegmentFiles, log_len: u64, role: SegmentRole, sink: &mut Findings<'_>) -> Result<Self, Error> {
        let offset = read_optional(
            segment.index.as_ref(),
            IndexKind::Offset,
            OFFSET_INDEX_ENTRY_SIZE,
            log_len,
            role,
            sink,
        )?;
        let time = read_optional(
            segment.time_index.as_ref(),
            IndexKind::Time,
            TIME_INDEX_ENTRY_SIZE,
            log_len,
            role,
            sink,
        )?;
        let txn = read_optional(
            segment.txn_index.as_ref(),
            IndexKind::Transaction,
            ABORTED_TXN_SIZE,
            log_len,
            role,
            sink,
        )?;
        let log_path = segment.log.as_path();
        Ok(SegmentIndexes {
            offset,
            time,
            txn,
            offset_path: segment
                .index
                .clone()
                .unwrap_or_else(|| log_path.with_extension("index")),
            time_path: segment
                .time_index
                .clone()
                .unwrap_or_else(|| log_path.with_extension("timeindex")),
            txn_path: segment
                .txn_index
                .clone()
                .unwrap_or_else(|| log_path.with_extension("txnindex")),
        })
    }

    fn checkers(&self, base: i64, role: SegmentRole) -> IndexCheckers<'_> {
        IndexCheckers {
            offset: self
                .offset
                .as_deref()
                .map(|bytes| OffsetIndexChecker::new(&self.offset_path, bytes, base, role)),
            time: self
                .time
                .as_deref()
                .map(|bytes| TimeIndexChecker::new(&self.time_path, bytes, base, role)),
            txn: self
                .txn
                .as_deref()
                .map(|bytes| TxnIndexChecker::new(&self.txn_path, bytes, base, role)),
        }
    }
}

/// The checkers of a segment's indexes, fed every batch of the scan and judged at the `.log`'s end.
struct IndexCheckers<'a> {
    offset: Option<OffsetIndexChecker<'a>>,
    time: Option<TimeIndexChecker<'a>>,
    txn: Option<TxnIndexChecker<'a>>,
}

impl IndexCheckers<'_> {
    fn finish(self, end: u64, sink: &mut Findings<'_>) {
        if let Some(checker) = self.offset {
            sink.extend(checker.finish(end));
        }
        if let Some(checker) = self.time {
            sink.extend(checker.finish(end));
        }
        if let Some(checker) = self.txn {
            sink.extend(checker.finish());
        }
    }
}

/// The checks of one batch of a segment, run beside the scan.
struct BatchChecks<'s> {
    log_path: &'s Path,
    base: i64,
    context: SegmentContext,
    options: &'s VerifyOptions,
    limits: DeepLimits,
}

impl BatchChecks<'_> {
    /// Check `frame` (CRC, deep walk, offsets, control key, indexes, epochs) and count it in the partition's
    /// summary; returns its size, for progress.
    fn check(
        &self,
        frame: &Frame<'_>,
        scan: &mut PartitionScan,
        checkers: &mut IndexCheckers<'_>,
        sink: &mut Findings<'_>,
    ) -> u64 {
        let log_path = self.log_path;
        let mut info = frame.info;
        if let Some(defect) = frame.crc_defect() {
            sink.error(log_path, Some(frame.crc_position()), Some(info.base_offset), defect);
        }
        let mut records = u64::try_from(info.records_count).unwrap_or(0);
        // A legacy compressed wrapper carries no record count and only its last offset: even a
        // shallow pass walks it (legacy data is rare, and counts and offsets must be right).
        let legacy_wrapper = info.magic < 2 && info.records_count < 0;
        if self.options.is_deep() || legacy_wrapper {
            match deep_walk(frame.bytes, &info, &self.limits) {
                Ok(walk) => {
                    records = walk.records;
                    // A legacy wrapper's first offset is only known inside it: with it the
                    // offset checks also catch wrappers that overlap.
                    info.base_offset = walk.first_offset.unwrap_or(info.base_offset);
                }
                Err(e) => sink.push(Finding::from_error(&e.shifted(info.position).at(log_path))),
            }
        }
        check_offsets(
            log_path,
            &info,
            self.base,
            self.context,
            scan.previous_last_offset,
            sink,
        );
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
        if let Some(checker) = checkers.offset.as_mut() {
            checker.on_batch(&info);
        }
        if let Some(checker) = checkers.time.as_mut() {
            checker.on_batch(&info);
        }
        let expected = scan.txn_tracker.on_batch(&info);
        if let Some(checker) = checkers.txn.as_mut() {
            checker.on_batch(&info, expected.as_ref());
        }
        if let Some(epochs) = scan.epochs.as_mut() {
            epochs.on_batch(log_path, &info);
        }
        info.size
    }
}

/// Where the scan's checks end: the end of the last complete batch, or (a corrupt or incomplete tail, reported by
/// [`report_tail`]) where it starts; `None` when the file changed under the scan, reported, so the indexes are not
/// judged against it.
fn scan_end(
    outcome: Result<ScanSummary, Error>,
    log: &LogFile,
    context: SegmentContext,
    progress: &dyn Progress,
    sink: &mut Findings<'_>,
) -> Result<Option<u64>, Error> {
    match outcome {
        Ok(s) => Ok(Some(s.end)),
        Err(e) if e.is_changed_while_read() => {
            // Truncated under the scan: nothing after this describes the file, so
            // the indexes are not judged against it. The caller reads it again.
            sink.push(Finding::from_error(&e));
            Ok(None)
        }
        Err(e) => {
            let (position, offset) = match &e {
                Error::Corrupt { position, offset, .. } | Error::Incomplete { position, offset, .. } => {
                    (*position, *offset)
                }
                _ => return Err(e),
            };
            if let Err(changed) = report_tail(log, position, offset, &e, context, sink) {
                sink.push(Finding::from_error(&changed));
                return Ok(None);
            }
            progress.advance(log.len().saturating_sub(position));
            Ok(Some(position))
        }
    }
}

/// Offsets increase across batches and stay inside the segment's range.
fn check_offsets(
    path: &Path,
    info: &BatchInfo,
    base: i64,
    context: SegmentContext,
    previous_last_offset: Option<i64>,
    sink: &mut Findings<'_>,
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
    sink: &mut Findings<'_>,
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
    if context.tail.tolerates_partial_tail() {
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
    /// Batches whose leader epoch disagrees with the history given to [`check_segment_against_epochs`] (empty
    /// without one). Not in `findings`: they judge the claim, not the segment.
    pub epoch_findings: Vec<Finding>,
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
/// (the next segment's base, or the manifest's `next`); `tail` says whether a
/// partial batch or zero tail at the end is tolerated ([`TailPolicy`]; `options.strictness`
/// does not change it: the caller chose the policy). Cross-segment
/// state is unknown here, so transaction index entries of transactions that began
/// in an earlier segment are accepted as found, and epochs are not checked.
pub fn check_segment(
    segment: &SegmentFiles,
    next_base_offset: Option<i64>,
    tail: TailPolicy,
    options: &VerifyOptions,
) -> Result<SegmentCheck, Error> {
    check_segment_against_epochs(segment, next_base_offset, tail, options, None)
}

/// [`check_segment`], also checking every magic-2 batch's `partitionLeaderEpoch` against `claimed` (a leader-epoch
/// history such as a manifest's) in the same pass over the batches. What disagrees is returned apart, in
/// [`SegmentCheck::epoch_findings`], so a caller can tell a false claim about the data from corrupt data.
pub fn check_segment_against_epochs(
    segment: &SegmentFiles,
    next_base_offset: Option<i64>,
    tail: TailPolicy,
    options: &VerifyOptions,
    claimed: Option<&LeaderEpochCheckpoint>,
) -> Result<SegmentCheck, Error> {
    check_segment_observed(segment, next_base_offset, tail, options, claimed, &mut |_| {})
}

/// [`check_segment_against_epochs`], also handing every frame of the `.log` to `on_frame`, in file order, in the
/// same scan (after the checks saw it; a frame whose CRC does not match is handed over too, and the check then is
/// not sound). Why: a caller that derives something from the batches it ships (the shipper's rebuilt indexes of the
/// active segment and the prefix's CRC-32C) read the whole `.log` a second time for it, a read and a CRC per byte
/// more, which on ~1 KiB batches was a third of the shipper's scan work.
pub fn check_segment_observed(
    segment: &SegmentFiles,
    next_base_offset: Option<i64>,
    tail: TailPolicy,
    options: &VerifyOptions,
    claimed: Option<&LeaderEpochCheckpoint>,
    on_frame: &mut dyn FnMut(&Frame<'_>),
) -> Result<SegmentCheck, Error> {
    let mut report = Report::default();
    let mut sink = Findings::new(&mut report);
    let mut scan = PartitionScan {
        summary: PartitionSummary {
            path: segment.log.clone(),
            ..Default::default()
        },
        previous_last_offset: None,
        txn_tracker: TxnTracker::new(),
        epochs: claimed.map(LeaderEpochChecker::new),
    };
    let context = SegmentContext { next_base_offset, tail };
    verify_segment_observed(segment, context, options, &NoProgress, &mut sink, &mut scan, on_frame)?;
    let epoch_findings = scan.epochs.take().map(LeaderEpochChecker::finish).unwrap_or_default();
    let summary = finish_partition(scan, &mut sink)?;
    Ok(SegmentCheck {
        findings: report.findings,
        suppressed_findings: report.suppressed_findings,
        summary,
        epoch_findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::scan_frames;
    use crate::record::{BatchBuilder, RecordSpec};

    /// `check_segment_observed` hands over every frame of the scan, in file order, as `scan_frames` yields them
    /// (a frame with a bad CRC too, while the check reports it), and finds what `check_segment` finds.
    #[test]
    fn the_observer_sees_the_checked_frames() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        let mut bytes = Vec::new();
        for base in 0..50i64 {
            let b = BatchBuilder::new(base)
                .record(RecordSpec::new(0, 1_000 + base).with_value(vec![base as u8; 900]))
                .build();
            bytes.extend(b);
        }
        let bad = scan_frames(&bytes, 0).nth(20).unwrap().unwrap().info;
        bytes[(bad.position + bad.size - 5) as usize] ^= 1;
        std::fs::write(&log, &bytes).unwrap();
        let segment = SegmentFiles {
            base_offset: 0,
            log: log.clone(),
            index: None,
            time_index: None,
            txn_index: None,
        };
        let options = VerifyOptions::default();
        let mut seen = Vec::new();
        let check = check_segment_observed(&segment, Some(50), TailPolicy::Sealed, &options, None, &mut |f| {
            seen.push((f.info, f.computed_crc))
        })
        .unwrap();
        let expected: Vec<_> = scan_frames(&bytes, 0)
            .map(|f| f.unwrap())
            .map(|f| (f.info, f.computed_crc))
            .collect();
        assert!(seen == expected, "the observer's frames differ from the iterator's");
        let plain = check_segment(&segment, Some(50), TailPolicy::Sealed, &options).unwrap();
        assert_eq!(check.findings, plain.findings);
        assert_eq!(check.summary.batches, 50);
        let crc = check.errors().next().unwrap();
        assert!(matches!(crc.defect, Defect::CrcMismatch { .. }), "{crc:?}");
        assert_eq!(
            (crc.path.as_path(), crc.position),
            (log.as_path(), Some(bad.position + 17))
        );
    }
}
