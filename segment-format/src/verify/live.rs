//! Verifying a partition directory a running broker writes to: read again
//! while it changes.
//!
//! A broker appends, rolls, trims indexes, writes snapshots and (as a follower)
//! truncates while `verify` reads; one pass can see a torn state that never
//! exists on disk. Rather than lock anything (a broker takes no lock a reader
//! could share), a pass that found errors while the directory changed is
//! dropped and run again, and files truncated under a scan are named in
//! warnings so that a pass that went well the next time still says so.

use std::path::Path;

use super::*;

/// Attempts at verifying one partition directory that changes while it is read.
pub const LIVE_ATTEMPTS: usize = 3;

/// Names, sizes and modification times of a partition directory's files: if they
/// differ before and after an attempt, a broker wrote while we read.
fn dir_signature(path: &Path) -> Option<Vec<(std::ffi::OsString, u64, Option<std::time::SystemTime>)>> {
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .ok()?
        .flatten()
        .map(|e| {
            let meta = e.metadata().ok();
            (
                e.file_name(),
                meta.as_ref().map_or(0, |m| m.len()),
                meta.and_then(|m| m.modified().ok()),
            )
        })
        .collect();
    entries.sort();
    Some(entries)
}

/// Verify a partition directory. A running broker appends, rolls, trims indexes
/// and writes producer snapshots while we read, so one attempt can see a torn
/// state (an entry half written, a snapshot still empty, a file renamed away).
/// Such a state never survives: when an attempt finds errors (or cannot read a
/// file) and the directory changed during it, its findings are dropped and the
/// partition is read again, up to [`LIVE_ATTEMPTS`] times. Data that does not
/// change is verified once, so its findings are always reported.
pub(super) fn verify_partition_dir(
    path: &Path,
    log_start_offset: Option<i64>,
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Findings<'_>,
) -> Result<PartitionSummary, Error> {
    let mut attempt = 1;
    // Files found truncated under a scan in an attempt read again: reported once
    // the partition is done, so that a read that went well the next time still
    // says what happened.
    let mut reread: Vec<Finding> = Vec::new();
    loop {
        let before = dir_signature(path);
        let mark = sink.mark();
        let result = verify_partition_dir_once(path, log_start_offset, options, progress, sink);
        let failed = result.as_ref().map_or(true, |s| s.errors > 0);
        let after = if failed { dir_signature(path) } else { None };
        if !failed || after == before {
            return with_rereads(result, reread, sink);
        }
        if attempt >= LIVE_ATTEMPTS {
            // Still changing after every attempt (a broker rolling segments faster than we
            // read): what was found in a file that changed during this attempt describes a
            // torn read, not the data. Data that stayed put keeps its errors.
            let changed = changed_files(before.as_deref(), after.as_deref());
            let downgraded = sink.downgrade_since(&mark, |f| {
                f.path
                    .file_name()
                    .is_some_and(|name| changed.iter().any(|c| c.as_os_str() == name))
            });
            let result = result.map(|mut summary| {
                summary.errors = summary.errors.saturating_sub(downgraded);
                summary.warnings += downgraded;
                summary
            });
            return with_rereads(result, reread, sink);
        }
        reread.extend(
            sink.report.findings[mark.findings..]
                .iter()
                .filter(|f| matches!(f.defect, Defect::ChangedWhileRead { .. }))
                .map(|f| {
                    let what = match &f.defect {
                        Defect::ChangedWhileRead { message } => message.clone(),
                        other => other.to_string(),
                    };
                    Finding::warning(
                        &f.path,
                        f.position,
                        f.offset,
                        Defect::ChangedWhileRead {
                            message: format!("{what} (attempt {attempt} of {LIVE_ATTEMPTS}; read again)"),
                        },
                    )
                }),
        );
        sink.rewind(mark);
        attempt += 1;
    }
}

/// Add the warnings about files read again to the partition's findings and counts.
fn with_rereads(
    result: Result<PartitionSummary, Error>,
    reread: Vec<Finding>,
    sink: &mut Findings<'_>,
) -> Result<PartitionSummary, Error> {
    if reread.is_empty() {
        return result;
    }
    sink.extend(reread);
    let (warnings, errors) = sink.take_counts();
    result.map(|mut summary| {
        summary.warnings += warnings;
        summary.errors += errors;
        summary
    })
}

type DirSignature = [(std::ffi::OsString, u64, Option<std::time::SystemTime>)];

/// Names of files that appeared, disappeared or changed size or mtime between two signatures.
fn changed_files(before: Option<&DirSignature>, after: Option<&DirSignature>) -> Vec<std::ffi::OsString> {
    let (before, after) = (before.unwrap_or_default(), after.unwrap_or_default());
    let mut changed: Vec<_> = before
        .iter()
        .filter(|e| !after.contains(e))
        .map(|e| e.0.clone())
        .collect();
    changed.extend(after.iter().filter(|e| !before.contains(e)).map(|e| e.0.clone()));
    changed
}
