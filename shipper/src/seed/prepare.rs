//! Getting one source segment ready to upload: validate it, decide exactly which
//! bytes of which files go up, and how to tell afterwards that the broker did
//! not change them underneath. Blocking (file reads, scans); callers run it in
//! `spawn_blocking`.
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
//!   the partition writer uses, in the form a clean shutdown leaves them
//!   (trimmed, with the final time-index entry): the shipped prefix is then a
//!   segment a broker can load as it is. Its `.txnindex` keeps the entries whose
//!   abort marker is inside the prefix. The CRC-32C of the prefix is computed
//!   during the rebuild scan and compared with what the upload read.
//!
//! A check that fails while the files are changing is retried (a broker that
//! rolls a segment trims and completes its indexes a moment after the new
//! segment appears); a failure on files that stood still is corruption.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use segment_format::batch::ATTRIBUTES_OFFSET;
use segment_format::dir::{segment_file_name, SegmentFileKind, SegmentFiles};
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder};
use segment_format::log::{Frame, LogFile};
use segment_format::report::{Finding, Severity};
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_index::{self, TxnIndex};
use segment_format::verify::{check_segment, SegmentCheck, VerifyOptions};
use segment_format::{Defect, Error};
use segmirror_transport::manifest::{SegmentRange, MAX_SNAPSHOT_BYTES};

/// Checks of one segment before a failure on changing files is final: the
/// broker's roll completes in milliseconds, so three looks a
/// [`SETTLE_DELAY`] apart see it finished.
pub const CHECK_ATTEMPTS: u32 = 3;
/// Pause after a failed check before deciding whether the files were changing.
pub const SETTLE_DELAY: Duration = Duration::from_millis(200);

/// How segments are checked and indexes rebuilt.
#[derive(Debug, Clone)]
pub(crate) struct PrepareOptions {
    pub verify: VerifyOptions,
    pub index_interval_bytes: u64,
    pub staging_dir: Option<PathBuf>,
}

/// One file to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalFile {
    pub kind: SegmentFileKind,
    pub path: PathBuf,
    /// Bytes to upload from the start of the file.
    pub len: u64,
    /// Modification time of the source file this stands for.
    pub mtime_ms: i64,
}

/// Totals of the shipped batches (for the manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SegmentStats {
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    pub batches: u64,
    pub records: u64,
    /// `-1` if no batch has a timestamp.
    pub max_timestamp: i64,
}

/// How to tell after the upload that the source did not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SourceGuard {
    /// The files look the same as before the check.
    Stamps(Stamps),
    /// The uploaded `.log` prefix has this CRC-32C.
    LogCrc32c(u32),
}

/// A segment ready to upload.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub range: SegmentRange,
    pub sealed: bool,
    /// `.log` first.
    pub files: Vec<LocalFile>,
    pub stats: SegmentStats,
    pub guard: SourceGuard,
    /// Bytes of the `.log` after the shipped prefix.
    pub excluded_tail: u64,
    pub warnings: Vec<Finding>,
    /// Holds rebuilt files until they are uploaded.
    pub _staging: Option<tempfile::TempDir>,
}

/// What preparing a segment came to.
#[derive(Debug)]
pub(crate) enum Outcome {
    Ready(Box<Prepared>),
    /// Corrupt: the error findings.
    Refused(Vec<Finding>),
    /// The source changed (or vanished) under us; try again from a fresh listing.
    Changed(String),
}

/// What a file looked like: a rename over it (compaction) changes the inode,
/// an append or truncation the length and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub len: u64,
    pub modified: Option<SystemTime>,
    pub inode: u64,
}

/// Stamps of a segment's files, `.log` first; `None` for a missing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamps(Vec<(PathBuf, Option<FileStamp>)>);

impl Stamps {
    /// The `.log`'s stamp.
    fn log(&self) -> Option<FileStamp> {
        self.0.first().and_then(|(_, s)| *s)
    }
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(FileStamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        inode,
    })
}

/// Stamps of the segment's files (and its snapshot).
pub(crate) fn stamps(segment: &SegmentFiles, snapshot: Option<&Path>) -> Stamps {
    let mut paths: Vec<&Path> = vec![segment.log.as_path()];
    paths.extend(segment.index.as_deref());
    paths.extend(segment.time_index.as_deref());
    paths.extend(segment.txn_index.as_deref());
    paths.extend(snapshot);
    Stamps(paths.into_iter().map(|p| (p.to_path_buf(), stamp(p))).collect())
}

/// Milliseconds since the epoch (negative before it).
pub(crate) fn mtime_ms(path: &Path) -> std::result::Result<i64, Error> {
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|e| Error::io(path, e))?;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(match modified.duration_since(UNIX_EPOCH) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    })
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
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

/// The producer snapshot a broker wrote at the log end, read whole.
#[derive(Debug, Clone)]
pub(crate) struct EndSnapshot {
    /// The bytes that parsed; these (not the file, which a broker may rewrite) are uploaded.
    pub bytes: Vec<u8>,
    pub mtime_ms: i64,
}

/// The producer snapshot at the log end `next` (written by a broker at clean shutdown), read whole and parsed. A
/// running broker's may be empty or half written: one that does not parse, or exceeds [`MAX_SNAPSHOT_BYTES`], is
/// left out with a warning, as if it were not there (the mirror then rebuilds producer state from the base
/// snapshot and the batches, which gives the same state).
pub(crate) fn end_snapshot(
    path: &Path,
    next: i64,
) -> std::result::Result<(Option<EndSnapshot>, Option<Finding>), Error> {
    use std::io::Read as _;
    let left_out = |message: String| {
        Finding::warning(
            path,
            None,
            Some(next),
            Defect::Snapshot {
                message: format!("end snapshot not shipped: {message}"),
            },
        )
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, None)),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_SNAPSHOT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Ok((None, Some(left_out(format!("larger than {MAX_SNAPSHOT_BYTES} bytes")))));
    }
    if let Err(e) = ProducerSnapshot::parse(&bytes) {
        let finding = Finding::from_error(&e.at(path));
        return Ok((None, Some(left_out(finding.defect.to_string()))));
    }
    let mtime_ms = match mtime_ms(path) {
        Ok(ms) => ms,
        Err(e) if is_not_found(&e) => return Ok((None, None)),
        Err(e) => return Err(e),
    };
    Ok((Some(EndSnapshot { bytes, mtime_ms }), None))
}

/// What re-committing a shipped version as sealed needs from the source.
#[derive(Debug)]
pub(crate) struct SealInPlace {
    /// Modification time per file kind (the `.log`'s for files it lacks).
    pub mtimes: Vec<(SegmentFileKind, i64)>,
    /// The producer snapshot at the base offset, if the source has a valid one.
    pub snapshot: Option<LocalFile>,
    pub warnings: Vec<Finding>,
}

/// The files of a sealed segment whose shipped (unsealed) objects are being
/// re-committed as sealed: only their modification times are needed, plus the
/// snapshot if the source has one now.
pub(crate) fn seal_in_place(
    segment: &SegmentFiles,
    snapshot: Option<&Path>,
) -> std::result::Result<SealInPlace, Error> {
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
pub(crate) fn prepare_sealed(
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
    let mut attempt = 1;
    let (before, check) = loop {
        let before = stamps(segment, snapshot);
        let check = match check_segment(segment, Some(next_base_offset), false, &options.verify) {
            Ok(c) => c,
            Err(e) => return changed_or(e),
        };
        if check.is_sound() {
            break (before, check);
        }
        // Truncated under the scan: read again, never refused for it.
        let torn = check.changed_while_read().map(ToString::to_string);
        std::thread::sleep(SETTLE_DELAY);
        if torn.is_none() && stamps(segment, snapshot) == before {
            return Ok(Outcome::Refused(errors_of(&check)));
        }
        if attempt >= CHECK_ATTEMPTS {
            return Ok(Outcome::Changed(torn.unwrap_or_else(|| {
                format!("{}: kept changing while it was verified", segment.log.display())
            })));
        }
        attempt += 1;
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
    }];
    let mut staging = None;
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
        let dir = staging_dir(options, &segment.log)?;
        if segment.index.is_none() {
            files.push(staged(
                &dir,
                base,
                SegmentFileKind::Index,
                &rebuilt.offset_index,
                log_mtime,
            )?);
        }
        if segment.time_index.is_none() {
            files.push(staged(
                &dir,
                base,
                SegmentFileKind::TimeIndex,
                &rebuilt.time_index,
                log_mtime,
            )?);
        }
        staging = Some(dir);
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
        _staging: staging,
    })))
}

/// Validate the active segment's complete batches, rebuild its indexes for
/// them and list the files (see the module doc).
pub(crate) fn prepare_active(
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
    let mut attempt = 1;
    let (file_len, check) = loop {
        let before = stamps(&log_only, None);
        let check = match check_segment(&log_only, None, true, &options.verify) {
            Ok(c) => c,
            Err(e) => return changed_or(e),
        };
        if check.is_sound() {
            break (before.log().map_or(0, |s| s.len), check);
        }
        // Appends never touch complete batches; a failure is corruption unless
        // the segment was truncated or replaced meanwhile (then the stamps moved
        // in a way appends alone cannot explain: length or inode).
        std::thread::sleep(SETTLE_DELAY);
        let after = stamps(&log_only, None);
        let torn = check.changed_while_read().map(ToString::to_string);
        let shrank_or_replaced = match (before.log(), after.log()) {
            (Some(b), Some(a)) => a.len < b.len || a.inode != b.inode,
            _ => true,
        };
        if !shrank_or_replaced && torn.is_none() {
            return Ok(Outcome::Refused(errors_of(&check)));
        }
        if attempt >= CHECK_ATTEMPTS {
            return Ok(Outcome::Changed(torn.unwrap_or_else(|| {
                format!("{}: truncated or replaced while it was verified", segment.log.display())
            })));
        }
        attempt += 1;
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
    let rebuilt = match rebuild(&segment.log, base, prefix, options.index_interval_bytes)? {
        Ok(r) if r.batches == stats.batches && r.end == prefix => r,
        Ok(_) => {
            return Ok(Outcome::Changed(format!(
                "{}: the verified batches changed before they were indexed",
                segment.log.display()
            )))
        }
        Err(reason) => return Ok(Outcome::Changed(reason)),
    };
    let dir = staging_dir(options, &segment.log)?;
    // A rebuilt file keeps its source file's modification time (the `.log`'s if absent).
    let mtime_of = |path: &Option<PathBuf>| path.as_deref().and_then(|p| mtime_ms(p).ok()).unwrap_or(log_mtime);
    let mut files = vec![
        LocalFile {
            kind: SegmentFileKind::Log,
            path: segment.log.clone(),
            len: prefix,
            mtime_ms: log_mtime,
        },
        staged(
            &dir,
            base,
            SegmentFileKind::Index,
            &rebuilt.offset_index,
            mtime_of(&segment.index),
        )?,
        staged(
            &dir,
            base,
            SegmentFileKind::TimeIndex,
            &rebuilt.time_index,
            mtime_of(&segment.time_index),
        )?,
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
            files.push(staged(
                &dir,
                base,
                SegmentFileKind::TxnIndex,
                &txn_index::serialize(&kept),
                mtime,
            )?);
        }
    }
    let mut warnings = Vec::new();
    files.extend(snapshot_file(snapshot, &mut warnings)?);
    Ok(Outcome::Ready(Box::new(Prepared {
        range,
        sealed: false,
        files,
        stats,
        guard: SourceGuard::LogCrc32c(rebuilt.crc32c),
        excluded_tail: file_len.saturating_sub(prefix),
        warnings,
        _staging: Some(dir),
    })))
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

fn staging_dir(options: &PrepareOptions, near: &Path) -> std::result::Result<tempfile::TempDir, Error> {
    let mut builder = tempfile::Builder::new();
    builder.prefix("segmirror-seed-");
    match &options.staging_dir {
        Some(dir) => builder.tempdir_in(dir).map_err(|e| Error::io(dir, e)),
        None => builder.tempdir().map_err(|e| Error::io(near, e)),
    }
}

/// Write a rebuilt file into the staging dir under its Kafka name.
fn staged(
    dir: &tempfile::TempDir,
    base: i64,
    kind: SegmentFileKind,
    bytes: &[u8],
    mtime_ms: i64,
) -> std::result::Result<LocalFile, Error> {
    let path = dir.path().join(segment_file_name(base, kind));
    std::fs::write(&path, bytes).map_err(|e| Error::io(&path, e))?;
    Ok(LocalFile {
        kind,
        path,
        len: bytes.len() as u64,
        mtime_ms,
    })
}

/// Indexes rebuilt for a `.log` prefix.
#[derive(Debug)]
pub(crate) struct Rebuilt {
    pub offset_index: Vec<u8>,
    /// Sealed: ends with the segment's max timestamp, as after roll or close.
    pub time_index: Vec<u8>,
    /// CRC-32C of the prefix.
    pub crc32c: u32,
    pub batches: u64,
    /// End of the last batch indexed.
    pub end: u64,
}

/// The CRC-32C of a run of whole frames, extended frame by frame from the CRCs
/// the scan computes anyway. A magic-2 batch's own CRC is the CRC-32C of its
/// bytes from the attributes on; combined with that of the 21 bytes before it,
/// it gives the frame's without reading the frame again. (A legacy message's
/// CRC is a CRC-32, so its frame is read.)
#[derive(Debug, Default)]
struct PrefixCrc {
    crc: u32,
    /// The last frame length shifted over, and its operator: bulk data repeats lengths.
    shift: Option<(usize, u32)>,
}

impl PrefixCrc {
    /// Append `frame` (whose CRC the scan found to match).
    fn append(&mut self, frame: &Frame<'_>) {
        let len = frame.bytes.len();
        self.crc = match frame.bytes.split_at_checked(ATTRIBUTES_OFFSET) {
            Some((head, tail)) if frame.info.magic >= 2 => {
                let frame_crc = crc32c_combine(crc32c::crc32c(head), frame.computed_crc, tail.len());
                let operator = match self.shift {
                    Some((cached, operator)) if cached == len => operator,
                    _ => {
                        let operator = crc32c_shift_operator(len);
                        self.shift = Some((len, operator));
                        operator
                    }
                };
                gf2_multiply(operator, self.crc) ^ frame_crc
            }
            _ => crc32c::crc32c_append(self.crc, frame.bytes),
        };
    }
}

/// CRC-32C's polynomial, bit-reflected.
const CRC32C_POLY: u32 = 0x82F6_3B78;

/// `a * b` modulo the CRC-32C polynomial, in the bit-reflected representation
/// CRC-32C values use (the top bit is the coefficient of `x^0`).
fn gf2_multiply(a: u32, mut b: u32) -> u32 {
    let mut product = 0u32;
    for bit in 0..32 {
        if a & (0x8000_0000 >> bit) != 0 {
            product ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ CRC32C_POLY } else { b >> 1 };
    }
    product
}

/// `x^(8 * bytes)` modulo the polynomial: multiplying a CRC by it appends
/// `bytes` zero bytes to the message the CRC is of.
fn crc32c_shift_operator(bytes: usize) -> u32 {
    let mut operator = 0x8000_0000; // x^0
    let mut power = 0x0080_0000; // x^8
    let mut n = bytes;
    while n != 0 {
        if n & 1 != 0 {
            operator = gf2_multiply(power, operator);
        }
        power = gf2_multiply(power, power);
        n >>= 1;
    }
    operator
}

/// The CRC-32C of `A || B` from `crc(A)`, `crc(B)` and `|B|` (as zlib's
/// `crc32_combine`, by exponentiation rather than `crc32c`'s bit matrices,
/// which cost more than reading a 16 KiB batch).
fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    gf2_multiply(crc32c_shift_operator(len_b), crc_a) ^ crc_b
}

/// Scan the batches that end within `prefix` bytes of `log` and build the
/// offset and time indexes Kafka keeps for them. `Ok(Err(reason))` when the
/// bytes do not look like the verified prefix any more (a batch whose CRC no
/// longer matches, an offset that cannot be indexed).
pub(crate) fn rebuild(
    log: &Path,
    base: i64,
    prefix: u64,
    index_interval_bytes: u64,
) -> std::result::Result<std::result::Result<Rebuilt, String>, Error> {
    let mut file = match LogFile::open(log) {
        Ok(f) => f,
        Err(e) if is_not_found(&e) => return Ok(Err(format!("{e} (deleted at the source)"))),
        Err(e) => return Err(e),
    };
    if file.len() < prefix {
        return Ok(Err(format!(
            "{}: shrank to {} bytes below the verified {prefix}",
            log.display(),
            file.len()
        )));
    }
    let mut offset_index = OffsetIndexBuilder::new(base, index_interval_bytes);
    let mut time_index = TimeIndexBuilder::new(base, index_interval_bytes);
    let mut crc = PrefixCrc::default();
    let mut batches = 0u64;
    let mut end = 0u64;
    let mut problem: Option<String> = None;
    // A scan error after the prefix (the partial batch at the tail) is expected;
    // one inside it shows up as `end < prefix` below, except a truncation under
    // the scan, which is named.
    let scanned = file.scan(|frame| {
        let info = &frame.info;
        if info.position.saturating_add(info.size) > prefix {
            return std::ops::ControlFlow::Break(());
        }
        if let Some(defect) = frame.crc_defect() {
            problem = Some(format!("{}: byte {}: {defect}", log.display(), frame.crc_position()));
            return std::ops::ControlFlow::Break(());
        }
        if let Err(e) = offset_index.push(info).and_then(|_| time_index.push(info)) {
            problem = Some(e.at(log).to_string());
            return std::ops::ControlFlow::Break(());
        }
        crc.append(frame);
        batches += 1;
        end = info.position + info.size;
        std::ops::ControlFlow::Continue(())
    });
    if let Err(e) = scanned {
        if e.is_changed_while_read() {
            return Ok(Err(e.to_string()));
        }
    }
    if let Some(problem) = problem {
        return Ok(Err(problem));
    }
    time_index.seal();
    Ok(Ok(Rebuilt {
        offset_index: offset_index.to_bytes(),
        time_index: time_index.to_bytes(),
        crc32c: crc.crc,
        batches,
        end,
    }))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use segment_format::batch::{parse_header, TimestampType};
    use segment_format::dir::PartitionDir;
    use segment_format::legacy;
    use segment_format::record::{BatchBuilder, DeepLimits, RecordSpec};
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
                let check = check_segment(segment, next, next.is_none(), &VerifyOptions::default()).unwrap();
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

    proptest! {
        #[test]
        fn combining_crcs_is_crc_of_the_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..2000),
            b in proptest::collection::vec(any::<u8>(), 0..40_000),
        ) {
            let whole = [a.as_slice(), b.as_slice()].concat();
            let combined = crc32c_combine(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len());
            prop_assert_eq!(combined, crc32c::crc32c(&whole));
            prop_assert_eq!(combined, crc32c::crc32c_combine(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len()));
        }
    }

    #[test]
    fn the_rebuilt_prefix_crc_is_that_of_the_bytes() {
        // A legacy message, then magic-2 batches, then half a batch being written.
        let mut log = legacy::encode_message(0, 1, 1_000, TimestampType::CreateTime, Some(b"k"), Some(b"v"));
        for base in [1i64, 4, 7, 10] {
            let specs = (0..3).map(|i| RecordSpec::new(i, 2_000 + base).with_value(vec![base as u8; 100]));
            log.extend(BatchBuilder::new(base).records(specs.collect::<Vec<_>>()).build());
        }
        // A legacy message between batches of one length (the shift operator is reused), then others.
        log.extend(legacy::encode_message(
            13,
            1,
            1_500,
            TimestampType::CreateTime,
            None,
            Some(b"x"),
        ));
        for (base, n) in [(14i64, 1), (15, 5)] {
            let specs = (0..n).map(|i| RecordSpec::new(i, 2_500).with_value(vec![7; 33]));
            log.extend(BatchBuilder::new(base).records(specs.collect::<Vec<_>>()).build());
        }
        let prefix = log.len() as u64;
        let partial = BatchBuilder::new(20).record(RecordSpec::new(0, 3_000)).build();
        log.extend_from_slice(&partial[..partial.len() / 2]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, &log).unwrap();
        let rebuilt = rebuild(&path, 0, prefix, 64).unwrap().unwrap();
        assert_eq!(rebuilt.crc32c, crc32c::crc32c(&log[..prefix as usize]));
        assert_eq!((rebuilt.batches, rebuilt.end), (8, prefix));
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

    /// A `.log` of `batches` batches of 1 MiB, written batch by batch; the end
    /// of each batch.
    fn big_log(path: &Path, batches: usize) -> Vec<u64> {
        let one = BatchBuilder::new(0)
            .record(RecordSpec::new(0, 1).with_value(vec![0x5a; 1 << 20]))
            .build();
        let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        let (mut ends, mut end) = (Vec::new(), 0);
        for i in 0..batches {
            let mut b = one.clone();
            b[..8].copy_from_slice(&(i as i64).to_be_bytes());
            segment_format::batch::seal_crc(&mut b);
            std::io::Write::write_all(&mut file, &b).unwrap();
            end += b.len() as u64;
            ends.push(end);
        }
        std::io::Write::flush(&mut file).unwrap();
        ends
    }

    /// Cut `path` to `len` bytes (as a follower truncates its log) as soon as
    /// this process has it open: while the seed reader reads it. `true` once done.
    fn truncate_when_opened(path: PathBuf, len: u64) -> std::thread::JoinHandle<bool> {
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while std::time::Instant::now() < deadline {
                let open = std::fs::read_dir("/proc/self/fd").is_ok_and(|fds| {
                    fds.flatten()
                        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))
                });
                if open {
                    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                    file.set_len(len).unwrap();
                    return true;
                }
                std::thread::yield_now();
            }
            false
        })
    }

    /// A segment truncated while the seed reads it: both of its reads (the
    /// check before upload and the index rebuild) report "changed while read"
    /// naming the file, for the caller to read again; no SIGBUS, no refusal.
    #[cfg(target_os = "linux")]
    #[test]
    fn seed_reader_reports_a_segment_truncated_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        let ends = big_log(&log, 160);
        let log = std::fs::canonicalize(&log).unwrap();
        let total = ends[ends.len() - 1];

        let truncator = truncate_when_opened(log.clone(), ends[1]);
        let rebuilt = rebuild(&log, 0, total, 4096).unwrap();
        assert!(truncator.join().unwrap());
        let Err(reason) = rebuilt else {
            panic!("the rebuild must see the truncation");
        };
        assert!(reason.contains("changed while read"), "{reason}");
        assert!(reason.contains(log.to_str().unwrap()), "{reason}");

        big_log(&log, 160);
        let segment = SegmentFiles {
            base_offset: 0,
            log: log.clone(),
            index: None,
            time_index: None,
            txn_index: None,
        };
        let truncator = truncate_when_opened(log.clone(), ends[1]);
        let check = check_segment(&segment, Some(160), false, &VerifyOptions::default()).unwrap();
        assert!(truncator.join().unwrap());
        let changed = check.changed_while_read().expect("the check must see the truncation");
        assert_eq!(changed.path, log);
        assert!(changed.to_string().contains("truncated while it was read"), "{changed}");
    }

    proptest! {
        #[test]
        fn counting_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), cut in 0u64..600) {
            let _ = counts_in(&bytes, cut);
            let _ = counts_in(&bytes, bytes.len() as u64);
        }
    }
}
