//! Bounding one source segment: validate it, decide exactly which bytes of
//! which files a copy of it is made of, and how to tell afterwards that the
//! broker did not change them underneath. Any driver that ships segments needs
//! this (the batch `seed` today, a tail driver calling [`bound_active`] again
//! as the segment grows), so it knows nothing of stores or plans. Blocking
//! (file reads, scans); async callers run it in `spawn_blocking`.
//!
//! - A **sealed** segment (every one but the newest) is checked with
//!   `verify::check_segment` against the next segment's base offset. A corrupt
//!   segment is refused with its findings: the shipper never propagates
//!   corruption. Its files are shipped as they are. A broker may still replace
//!   it (compaction swaps in a new file under the same name), delete it
//!   (retention) or truncate it, so a stamp of every file (length, modification
//!   time, inode) is taken before the check and compared after the upload.
//! - The **active** (newest) segment is appended to while we read it. Its
//!   `.log` is checked tolerating a partial last batch and shipped up to the
//!   end of its last complete batch. Its `.index` and `.timeindex` are
//!   preallocated with a zero tail and rewritten in place by the broker, so
//!   they are **rebuilt** for exactly the shipped prefix with the same builders
//!   the partition writer uses ([`super::rebuild`]), in the form a clean shutdown leaves them
//!   (trimmed, with the final time-index entry): the shipped prefix is then a
//!   segment a broker can load as it is. Its `.txnindex` keeps the entries whose
//!   abort marker is inside the prefix. The indexes and the CRC-32C of the
//!   prefix are built from the frames of the check's own scan
//!   (`verify::check_segment_observed`): the `.log` is read once, not once for
//!   the check and again for the rebuild. The CRC-32C is compared with what the
//!   upload read: the guard for a prefix rewritten between the scan and the
//!   upload.
//!
//! A check that fails while the files are changing is retried (a broker that
//! rolls a segment trims and completes its indexes a moment after the new
//! segment appears); a failure on files that stood still is corruption (see
//! [`super::guard`]). Every outcome is typed ([`Outcome`]): ready, refused
//! with findings, or changed under us with the reason; a hard `Err` is left
//! for I/O failures that are not a file vanishing.

use std::path::{Path, PathBuf};

use segment_format::dir::{segment_file_name, SegmentFileKind, SegmentFiles};
use segment_format::report::{Finding, Severity};
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_index::{self, TxnIndex};
use segment_format::verify::{
    check_segment, check_segment_observed, SegmentCheck, SegmentRole, TailPolicy, VerifyOptions,
};
use segment_format::{Defect, Error};
use segmirror_transport::manifest::SegmentRange;

use super::guard::{file_identity, is_not_found, mtime_ms, stamps, FileIdentity, Retry, Stamps, Verdict};
use super::rebuild::{rebuild, IndexRebuild};

/// How segments are checked and indexes rebuilt.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// How deeply segments are verified.
    pub verify: VerifyOptions,
    /// `index.interval.bytes` of rebuilt indexes.
    pub index_interval_bytes: u64,
    /// Where the continuous shipper's chunk files are staged (default: the system temp dir). Rebuilt indexes are
    /// not staged: they are uploaded from memory ([`LocalFile::rebuilt`]).
    pub staging_dir: Option<PathBuf>,
}

/// One file to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFile {
    /// Which of the segment's files this is.
    pub kind: SegmentFileKind,
    /// The source file; for a rebuilt file, the source file it stands for (named in messages only).
    pub path: PathBuf,
    /// Bytes to upload from the start of the file.
    pub len: u64,
    /// Modification time of the source file this stands for.
    pub mtime_ms: i64,
    /// The bytes of a file rebuilt here (the indexes of an active segment's prefix or of a segment without them,
    /// a transaction index trimmed to the prefix), uploaded from memory: a few KiB each, which a temporary file
    /// and directory per segment only made into more inodes to create and delete.
    pub rebuilt: Option<bytes::Bytes>,
}

/// Totals of the shipped batches (for the manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentStats {
    /// First offset of the first batch (`None`: no batch).
    pub first_offset: Option<i64>,
    /// Last offset of the last batch.
    pub last_offset: Option<i64>,
    /// Batches (legacy wrappers count once).
    pub batches: u64,
    /// Records.
    pub records: u64,
    /// `-1` if no batch has a timestamp.
    pub max_timestamp: i64,
}

/// How to tell after the upload that the source did not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceGuard {
    /// The files look the same as before the check.
    Stamps(Stamps),
    /// The uploaded `.log` prefix has this CRC-32C.
    LogCrc32c(u32),
}

/// A segment bounded and ready to upload: for the active segment, the prefix of
/// complete, CRC-valid batches.
#[derive(Debug)]
pub struct Prepared {
    /// `[base, next)`: for the active segment, `next` is one past the prefix's last offset.
    pub range: SegmentRange,
    /// A whole sealed segment (`false`: an active segment's prefix).
    pub sealed: bool,
    /// `.log` first.
    pub files: Vec<LocalFile>,
    /// Totals of the batches in `files`.
    pub stats: SegmentStats,
    /// How to tell after reading the files again that they did not change.
    pub guard: SourceGuard,
    /// Bytes of the `.log` after the shipped prefix.
    pub excluded_tail: u64,
    /// Findings that do not stop the segment from being shipped.
    pub warnings: Vec<Finding>,
    /// The active segment's `.log` as it was when the check that found this prefix began, and when that was
    /// (`None` for a sealed segment): the prefix, its offsets and `excluded_tail` hold for a file with exactly this
    /// identity (appends after it only add bytes the check did not count). What the seed's memory records.
    pub source_identity: Option<(FileIdentity, std::time::SystemTime)>,
    /// Bytes of the source `.log` the passes over it covered (the check, and the index rebuild where there was
    /// one): the read-counting seam that shows what a rerun skipped.
    pub log_bytes_scanned: u64,
    /// The `.log`'s pages that were not cached before the driver read it, to drop once it is shipped (empty from
    /// the bounding functions: a driver that wants it takes it before calling them, see [`super::footprint`]).
    pub cache_footprint: super::CacheFootprint,
}

impl Prepared {
    /// Bytes of the `.log` this version holds (for the active segment: the
    /// prefix; a tail driver compares it between two calls).
    pub fn log_len(&self) -> u64 {
        self.files
            .iter()
            .find(|f| f.kind == SegmentFileKind::Log)
            .map_or(0, |f| f.len)
    }
}

/// What bounding a segment came to.
#[derive(Debug)]
pub enum Outcome {
    /// Sound: ship these bytes.
    Ready(Box<Prepared>),
    /// Corrupt: the error findings.
    Refused(Vec<Finding>),
    /// The source changed (or vanished) under us; try again from a fresh listing.
    Changed(String),
}

/// A `Changed` outcome for a file that vanished or was truncated while it was
/// read, otherwise the error.
fn changed_or(e: Error) -> std::result::Result<Outcome, Error> {
    if is_not_found(&e) {
        Ok(Outcome::Changed(format!("{e} (deleted or replaced at the source)")))
    } else if e.is_changed_while_read() {
        Ok(Outcome::Changed(e.to_string()))
    } else {
        Err(e)
    }
}

fn errors_of(check: &SegmentCheck) -> Vec<Finding> {
    let mut errors: Vec<Finding> = check.errors().cloned().collect();
    if check.suppressed_findings > 0 {
        if let Some(first) = errors.first() {
            errors.push(Finding::error(
                &first.path,
                None,
                None,
                Defect::Other {
                    message: format!("... and {} more findings", check.suppressed_findings),
                },
            ));
        }
    }
    errors
}

/// What re-committing a shipped version as sealed needs from the source.
#[derive(Debug)]
pub struct SealInPlace {
    /// Modification time per file kind (the `.log`'s for files it lacks).
    pub mtimes: Vec<(SegmentFileKind, i64)>,
    /// The producer snapshot at the base offset, if the source has a valid one.
    pub snapshot: Option<LocalFile>,
    /// Why a snapshot the source has is left out.
    pub warnings: Vec<Finding>,
}

/// The files of a sealed segment whose shipped (unsealed) objects are being
/// re-committed as sealed: only their modification times are needed, plus the
/// snapshot if the source has one now.
pub fn seal_in_place(segment: &SegmentFiles, snapshot: Option<&Path>) -> std::result::Result<SealInPlace, Error> {
    let log_mtime = mtime_ms(&segment.log)?;
    let mut mtimes = vec![(SegmentFileKind::Log, log_mtime)];
    for (kind, path) in [
        (SegmentFileKind::Index, &segment.index),
        (SegmentFileKind::TimeIndex, &segment.time_index),
        (SegmentFileKind::TxnIndex, &segment.txn_index),
    ] {
        let mtime = match path {
            Some(p) => mtime_ms(p).unwrap_or(log_mtime),
            None => log_mtime,
        };
        mtimes.push((kind, mtime));
    }
    let mut warnings = Vec::new();
    let snapshot = snapshot_file(snapshot, &mut warnings)?;
    Ok(SealInPlace {
        mtimes,
        snapshot,
        warnings,
    })
}

/// Validate a sealed segment and list its files (see the module doc).
pub fn bound_sealed(
    segment: &SegmentFiles,
    next_base_offset: i64,
    snapshot: Option<&Path>,
    options: &PrepareOptions,
) -> std::result::Result<Outcome, Error> {
    let base = segment.base_offset;
    let range = SegmentRange::new(base, next_base_offset).map_err(|reason| Error::BadName {
        path: segment.log.clone(),
        reason,
    })?;
    let mut retry = Retry::new();
    let (before, check) = loop {
        let before = stamps(segment, snapshot);
        let check = match check_segment(segment, Some(next_base_offset), TailPolicy::Sealed, &options.verify) {
            Ok(c) => c,
            Err(e) => return changed_or(e),
        };
        if check.is_sound() {
            break (before, check);
        }
        // Truncated under the scan: read again, never refused for it.
        let torn = check.changed_while_read().map(ToString::to_string);
        match retry.after_failure(|| torn.is_some() || stamps(segment, snapshot) != before) {
            Verdict::Corrupt => return Ok(Outcome::Refused(errors_of(&check))),
            Verdict::GiveUp => {
                return Ok(Outcome::Changed(torn.unwrap_or_else(|| {
                    format!("{}: kept changing while it was verified", segment.log.display())
                })))
            }
            Verdict::Again => {}
        }
    };
    let Some(log_len) = before.log().map(|s| s.len) else {
        return Ok(Outcome::Changed(format!("{}: vanished", segment.log.display())));
    };
    if check.summary.bytes != log_len {
        return Ok(Outcome::Changed(format!(
            "{}: {log_len} bytes, but {} verified",
            segment.log.display(),
            check.summary.bytes
        )));
    }
    let mut warnings: Vec<Finding> = check
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .cloned()
        .collect();
    let log_mtime = match mtime_ms(&segment.log) {
        Ok(m) => m,
        Err(e) => return changed_or(e),
    };
    let mut files = vec![LocalFile {
        kind: SegmentFileKind::Log,
        path: segment.log.clone(),
        len: log_len,
        mtime_ms: log_mtime,
        rebuilt: None,
    }];
    let mut rebuilt_indexes = false;
    if segment.index.is_none() || segment.time_index.is_none() {
        // A broker rebuilds a missing index at load; ship the rebuilt one so the
        // manifest is complete.
        let rebuilt = match rebuild(&segment.log, base, log_len, options.index_interval_bytes)? {
            Ok(r) if r.batches == check.summary.batches => r,
            Ok(_) => {
                return Ok(Outcome::Changed(format!(
                    "{}: changed while indexed",
                    segment.log.display()
                )))
            }
            Err(reason) => return Ok(Outcome::Changed(reason)),
        };
        if segment.index.is_none() {
            files.push(rebuilt_file(
                segment,
                SegmentFileKind::Index,
                &rebuilt.offset_index,
                log_mtime,
            ));
        }
        if segment.time_index.is_none() {
            files.push(rebuilt_file(
                segment,
                SegmentFileKind::TimeIndex,
                &rebuilt.time_index,
                log_mtime,
            ));
        }
        rebuilt_indexes = true;
    }
    for (kind, path) in [
        (SegmentFileKind::Index, &segment.index),
        (SegmentFileKind::TimeIndex, &segment.time_index),
        (SegmentFileKind::TxnIndex, &segment.txn_index),
    ] {
        if let Some(path) = path {
            let len = match std::fs::metadata(path) {
                Ok(m) => m.len(),
                Err(e) => return changed_or(Error::io(path, e)),
            };
            files.push(LocalFile {
                kind,
                path: path.clone(),
                len,
                mtime_ms: mtime_ms(path).unwrap_or(log_mtime),
                rebuilt: None,
            });
        }
    }
    files.extend(snapshot_file(snapshot, &mut warnings)?);
    let stats = stats_of(&check);
    Ok(Outcome::Ready(Box::new(Prepared {
        range,
        sealed: true,
        files,
        stats,
        guard: SourceGuard::Stamps(before),
        excluded_tail: 0,
        warnings,
        log_bytes_scanned: if rebuilt_indexes {
            log_len.saturating_mul(2)
        } else {
            log_len
        },
        source_identity: None,
        cache_footprint: super::CacheFootprint::default(),
    })))
}

/// Validate the active segment's complete batches, rebuild its indexes for
/// them and list the files (see the module doc). Each call reads the segment
/// as it is now: a tail driver calls it again as the segment grows and gets
/// a longer prefix ([`Prepared::log_len`], `range.next()`), never a partial
/// batch.
pub fn bound_active(
    segment: &SegmentFiles,
    snapshot: Option<&Path>,
    options: &PrepareOptions,
) -> std::result::Result<Outcome, Error> {
    let base = segment.base_offset;
    // The broker's own indexes of the active segment are not shipped, so they
    // are not checked either; its transaction index is (trimmed).
    let log_only = SegmentFiles {
        base_offset: base,
        log: segment.log.clone(),
        index: None,
        time_index: None,
        txn_index: segment.txn_index.clone(),
    };
    let mut retry = Retry::new();
    let (file_len, check, identity, rebuilt) = loop {
        let identity = file_identity(&segment.log).map(|i| (i, std::time::SystemTime::now()));
        let before = stamps(&log_only, None);
        // The indexes of the prefix are built from the check's own scan: every frame it yields is one the check
        // counts in its summary, and a sound check has no frame with a bad CRC.
        let mut rebuild = IndexRebuild::new(base, options.index_interval_bytes);
        let check = match check_segment_observed(
            &log_only,
            None,
            TailPolicy::for_segment(SegmentRole::Newest, options.verify.strictness),
            &options.verify,
            None,
            &mut |frame| {
                let _ = rebuild.push(&segment.log, frame);
            },
        ) {
            Ok(c) => c,
            Err(e) => return changed_or(e),
        };
        if check.is_sound() {
            break (before.log().map_or(0, |s| s.len), check, identity, rebuild.finish());
        }
        // Appends never touch complete batches; a failure is corruption unless
        // the segment was truncated or replaced meanwhile (then the stamps moved
        // in a way appends alone cannot explain: length or inode).
        let torn = check.changed_while_read().map(ToString::to_string);
        let moved = || before.log_shrank_or_replaced(&stamps(&log_only, None)) || torn.is_some();
        match retry.after_failure(moved) {
            Verdict::Corrupt => return Ok(Outcome::Refused(errors_of(&check))),
            Verdict::GiveUp => {
                return Ok(Outcome::Changed(torn.unwrap_or_else(|| {
                    format!("{}: truncated or replaced while it was verified", segment.log.display())
                })))
            }
            Verdict::Again => {}
        }
    };
    let prefix = check.summary.bytes;
    let stats = stats_of(&check);
    let next = stats.last_offset.map_or(base, |l| l.saturating_add(1));
    let range = SegmentRange::new(base, next).map_err(|reason| Error::BadName {
        path: segment.log.clone(),
        reason,
    })?;
    let log_mtime = match mtime_ms(&segment.log) {
        Ok(m) => m,
        Err(e) => return changed_or(e),
    };
    let rebuilt = match rebuilt {
        Ok(r) if r.batches == stats.batches && r.end == prefix => r,
        // Not reachable with a sound check (its frames are the ones indexed); kept as the rebuild's own guard.
        Ok(_) => {
            return Ok(Outcome::Changed(format!(
                "{}: the verified batches changed before they were indexed",
                segment.log.display()
            )))
        }
        Err(reason) => return Ok(Outcome::Changed(reason)),
    };
    let files = ActiveFiles {
        prefix,
        next,
        log_mtime,
        offset_index: &rebuilt.offset_index,
        time_index: &rebuilt.time_index,
    };
    let (files, warnings) = active_files(segment, snapshot, &files)?;
    Ok(Outcome::Ready(Box::new(Prepared {
        range,
        sealed: false,
        files,
        stats,
        guard: SourceGuard::LogCrc32c(rebuilt.crc32c),
        excluded_tail: file_len.saturating_sub(prefix),
        warnings,
        // Only a prefix inside the identity's length is what the file held then (one past it was appended since).
        source_identity: identity.filter(|(i, _)| prefix <= i.len),
        // One pass: the check's scan, which built the indexes too.
        log_bytes_scanned: file_len.max(prefix),
        cache_footprint: super::CacheFootprint::default(),
    })))
}

/// What a version of the active segment is made of besides its `.log` prefix.
pub(crate) struct ActiveFiles<'a> {
    /// Bytes of the `.log` prefix.
    pub prefix: u64,
    /// One past the prefix's last offset.
    pub next: i64,
    pub log_mtime: i64,
    /// The rebuilt indexes of the prefix.
    pub offset_index: &'a [u8],
    pub time_index: &'a [u8],
}

/// The files of a version of the active segment: its `.log` prefix, the rebuilt indexes (in memory), the transaction
/// index trimmed to the prefix, the producer snapshot at its base. Shared by [`bound_active`] and the continuous
/// shipper's incremental rounds ([`super::incremental`]), which derive the same version without reading the
/// prefix again.
pub(crate) fn active_files(
    segment: &SegmentFiles,
    snapshot: Option<&Path>,
    version: &ActiveFiles<'_>,
) -> std::result::Result<(Vec<LocalFile>, Vec<Finding>), Error> {
    let (next, log_mtime) = (version.next, version.log_mtime);
    // A rebuilt file keeps its source file's modification time (the `.log`'s if absent).
    let mtime_of = |path: &Option<PathBuf>| path.as_deref().and_then(|p| mtime_ms(p).ok()).unwrap_or(log_mtime);
    let mut files = vec![
        LocalFile {
            kind: SegmentFileKind::Log,
            path: segment.log.clone(),
            len: version.prefix,
            mtime_ms: log_mtime,
            rebuilt: None,
        },
        rebuilt_file(
            segment,
            SegmentFileKind::Index,
            version.offset_index,
            mtime_of(&segment.index),
        ),
        rebuilt_file(
            segment,
            SegmentFileKind::TimeIndex,
            version.time_index,
            mtime_of(&segment.time_index),
        ),
    ];
    if let Some(path) = &segment.txn_index {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::io(path, e)),
        };
        // Entries whose abort marker is in the shipped prefix; a partial entry
        // being written is ignored, as Kafka's reader does.
        let kept: Vec<_> = TxnIndex::parse(&bytes)
            .entries
            .into_iter()
            .filter(|e| e.last_offset < next)
            .collect();
        if !kept.is_empty() {
            let mtime = mtime_ms(path).unwrap_or(log_mtime);
            files.push(rebuilt_file(
                segment,
                SegmentFileKind::TxnIndex,
                &txn_index::serialize(&kept),
                mtime,
            ));
        }
    }
    let mut warnings = Vec::new();
    files.extend(snapshot_file(snapshot, &mut warnings)?);
    Ok((files, warnings))
}

/// The totals of a check, which are exact: the check walks legacy compressed
/// wrappers (their headers say neither how many messages they hold nor the
/// first one's offset) even when it is shallow.
fn stats_of(check: &SegmentCheck) -> SegmentStats {
    let s = &check.summary;
    SegmentStats {
        first_offset: s.first_offset,
        last_offset: s.last_offset,
        batches: s.batches,
        records: s.records,
        max_timestamp: s.max_timestamp.unwrap_or(-1),
    }
}

/// A file of `segment` rebuilt here, held in memory. Its `path` names no file (`<name> (rebuilt)` beside the
/// source's): a reader that took the path instead of the bytes fails instead of reading the broker's own file.
fn rebuilt_file(segment: &SegmentFiles, kind: SegmentFileKind, bytes: &[u8], mtime_ms: i64) -> LocalFile {
    LocalFile {
        kind,
        path: segment
            .log
            .with_file_name(format!("{} (rebuilt)", segment_file_name(segment.base_offset, kind))),
        len: bytes.len() as u64,
        mtime_ms,
        rebuilt: Some(bytes::Bytes::copy_from_slice(bytes)),
    }
}

/// The producer snapshot at the segment's base offset, if it parses; a torn or
/// corrupt one is left out with a warning (a broker deletes such a snapshot and
/// rebuilds producer state from an older one or from the log).
fn snapshot_file(
    snapshot: Option<&Path>,
    warnings: &mut Vec<Finding>,
) -> std::result::Result<Option<LocalFile>, Error> {
    let Some(path) = snapshot else { return Ok(None) };
    match ProducerSnapshot::read(path) {
        Ok(_) => Ok(Some(LocalFile {
            kind: SegmentFileKind::Snapshot,
            path: path.to_path_buf(),
            len: std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len(),
            mtime_ms: mtime_ms(path)?,
            rebuilt: None,
        })),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => {
            let mut finding = Finding::from_error(&e);
            finding.severity = Severity::Warning;
            finding.defect = Defect::Snapshot {
                message: format!("not shipped: {}", finding.defect),
            };
            warnings.push(finding);
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use segment_format::batch::parse_header;
    use segment_format::dir::PartitionDir;
    use segment_format::legacy;
    use segment_format::record::{BatchBuilder, DeepLimits, RecordSpec};
    use segment_format::verify::Strictness;
    use segment_format::writer::sample::{write_sample, SampleOptions};

    use super::*;

    /// Record count and first offset of the batches in the first `prefix` bytes of
    /// a `.log`, read from headers alone (walking legacy compressed wrappers, whose
    /// headers say neither): the oracle the tests hold `check_segment`'s totals to.
    /// `Err(position)` where the bytes stop framing whole batches before `prefix`.
    fn counts_in(bytes: &[u8], prefix: u64) -> std::result::Result<(u64, Option<i64>), usize> {
        let end = usize::try_from(prefix).unwrap_or(usize::MAX);
        if bytes.len() < end {
            return Err(bytes.len());
        }
        let limits = DeepLimits::default();
        let (mut records, mut first) = (0u64, None);
        let mut pos = 0usize;
        while pos < end {
            let Some(length) = bytes
                .get(pos.saturating_add(8)..pos.saturating_add(12))
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
            else {
                return Err(pos);
            };
            let size = usize::try_from(i32::from_be_bytes(length))
                .unwrap_or(0)
                .saturating_add(12);
            if pos.saturating_add(size) > end {
                return Err(pos);
            }
            let (Some(frame), Some(&magic)) = (
                bytes.get(pos..pos.saturating_add(size)),
                bytes.get(pos.saturating_add(16)),
            ) else {
                return Err(pos);
            };
            let (count, base) = if magic >= 2 {
                let h = parse_header(frame).map_err(|_| pos)?;
                (u64::try_from(h.records_count).unwrap_or(0), h.base_offset)
            } else {
                let info = legacy::deep_batch_info(frame, pos as u64, &limits).map_err(|_| pos)?;
                (u64::try_from(info.records_count).unwrap_or(0), info.base_offset)
            };
            records = records.saturating_add(count);
            first.get_or_insert(base);
            pos = pos.saturating_add(size);
        }
        Ok((records, first))
    }

    #[test]
    fn check_totals_are_exact_for_every_sample_segment() {
        // The manifest's record count and first offset come from the check: for
        // every shape the sample writes (legacy wrappers, compacted and
        // transactional partitions, empty segments) they must be what the
        // headers say, counted independently here.
        let dir = tempfile::tempdir().unwrap();
        let options = SampleOptions {
            fsync: false,
            ..Default::default()
        };
        write_sample(dir.path(), &options).unwrap();
        let mut segments = 0;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let Ok(partition) = PartitionDir::open(&path) else {
                continue;
            };
            let bases: Vec<i64> = partition.segments.iter().map(|s| s.base_offset).collect();
            for (i, segment) in partition.segments.iter().enumerate() {
                let next = bases.get(i + 1).copied();
                let check = check_segment(
                    segment,
                    next,
                    TailPolicy::for_segment(SegmentRole::with_next(next), Strictness::Lenient),
                    &VerifyOptions::default(),
                )
                .unwrap();
                assert!(check.is_sound(), "{}: {:?}", segment.log.display(), check.findings);
                let bytes = std::fs::read(&segment.log).unwrap();
                let expected = counts_in(&bytes, check.summary.bytes).unwrap();
                let stats = stats_of(&check);
                assert_eq!(
                    (stats.records, stats.first_offset),
                    expected,
                    "{}",
                    segment.log.display()
                );
                segments += 1;
            }
        }
        assert!(segments > 20, "only {segments} segments checked");
    }

    #[test]
    fn counts_come_from_headers_and_stop_at_the_prefix() {
        let mut log = BatchBuilder::new(10)
            .record(RecordSpec::new(0, 1))
            .record(RecordSpec::new(1, 2))
            .build();
        let first = log.len() as u64;
        log.extend(BatchBuilder::new(12).record(RecordSpec::new(0, 3)).build());
        assert_eq!(counts_in(&log, log.len() as u64), Ok((3, Some(10))));
        assert_eq!(counts_in(&log, first), Ok((2, Some(10))));
        assert_eq!(counts_in(&log, 0), Ok((0, None)));
        // A prefix that does not end on a batch boundary, or beyond the data.
        assert_eq!(counts_in(&log, first + 1), Err(first as usize));
        assert_eq!(counts_in(&log, log.len() as u64 + 1), Err(log.len()));
    }

    proptest! {
        #[test]
        fn counting_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), cut in 0u64..600) {
            let _ = counts_in(&bytes, cut);
            let _ = counts_in(&bytes, bytes.len() as u64);
        }
    }
}
