//! Each installed or sealed segment's log of the transactions its markers closed (`segment_format::closed_log`,
//! a segment's kind), kept beside the mirror under `.closed/<topic>-<partition>/<base>.bin`.
//!
//! Why: a consistent cut inside a segment decides a producer with a marker after the cut from the transaction its
//! first marker after the cut closed. The segment's catalog record names each producer's *last* marker only, so a
//! producer that ended two transactions or more after the cut was read back from the cut, up to the segment's
//! base. The log names every marker (D0060).
//!
//! Who writes it: the bucket installer (a staged install reads every batch of the version; the follow mode's
//! append path adds each run's new markers), and the tail appender's seal (from its active segment's closed log, or
//! from the batches where a seal reads the file). Written without an fsync, before the catalog records the version
//! with the log's entry count and CRC-32C (`TxnEnds::log`); read only where its bytes are those
//! ([`read`]), so a lost write, a damaged file, or a file left by another version of the segment (a replacement, a
//! truncation) costs a read back from the cut, never a wrong answer.
//!
//! Files are opened with `O_NOFOLLOW` (the mirror root is ours, but a link there is not followed). A segment
//! without markers has no file. Logs of segments the partition no longer holds are removed at the partition's next
//! write ([`write`]), and a lineage reset removes the directory.

use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use segment_format::closed_log::{self, SegmentClosing, CLOSED_ENTRY_SIZE};
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::file_record::FileRecord;

use crate::mirror;

/// The mirror root and partition name of the partition directory `pdir` (`<root>/<topic>-<partition>`).
fn root_and_name(pdir: &Path) -> std::io::Result<(&Path, &str)> {
    match (pdir.parent(), pdir.file_name().and_then(|n| n.to_str())) {
        (Some(root), Some(name)) => Ok((root, name)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a partition directory", pdir.display()),
        )),
    }
}

/// Writes segment `base`'s log of the mirror partition `pdir`: `entries` whole (none: no file), and removes the
/// logs of segments `pdir` no longer holds. The record the catalog keeps of it.
pub fn write(pdir: &Path, base: i64, entries: &[SegmentClosing]) -> std::io::Result<FileRecord> {
    let (root, name) = root_and_name(pdir)?;
    let path = mirror::segment_log_file(root, name, base);
    let dir = mirror::segment_logs_dir(root, name);
    sweep(&dir, pdir, base)?;
    if entries.is_empty() {
        return match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(FileRecord::default()),
        };
    }
    let bytes = closed_log::serialize_segment(entries);
    fs::create_dir_all(&dir)?;
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    file.write_all(&bytes)?;
    Ok(FileRecord::of(&bytes, entries.len()))
}

/// Adds `entries` to segment `base`'s log whose first entries are the ones `from` records (the follow mode's
/// append path, run after run). `None` when the file does not hold them (lost, shorter): the log is then not
/// recorded for this version, and a cut reads back instead.
pub fn append(
    pdir: &Path,
    base: i64,
    from: FileRecord,
    entries: &[SegmentClosing],
) -> std::io::Result<Option<FileRecord>> {
    if from.entries == 0 {
        return write(pdir, base, entries).map(Some);
    }
    if entries.is_empty() {
        return Ok(Some(from));
    }
    let (root, name) = root_and_name(pdir)?;
    let path = mirror::segment_log_file(root, name, base);
    let len = from.entries.saturating_mul(CLOSED_ENTRY_SIZE as u64);
    let mut file = match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() < len {
        return Ok(None);
    }
    // A crash's (or a failed run's) entries after the recorded ones go.
    file.set_len(len)?;
    file.seek(SeekFrom::Start(len))?;
    let bytes = closed_log::serialize_segment(entries);
    file.write_all(&bytes)?;
    Ok(Some(from.append(&bytes, entries.len())))
}

/// The log's record after a write of it (`written`: [`write`], [`append`]), or `None` where it cannot be kept: with a
/// warning where the write failed. The log only spares promotion a read: a fault writing it stops nothing.
pub fn kept(pdir: &Path, base: i64, written: std::io::Result<Option<FileRecord>>) -> Option<FileRecord> {
    written.unwrap_or_else(|e| {
        let dir = pdir.display();
        tracing::warn!(%dir, base, error = %e, "segment log not written: a cut in it reads back instead");
        None
    })
}

/// What a version's `txn_ends` records of its segment's log (`kept`): nothing for a segment without markers, which
/// has nothing in it for a cut to look up.
pub fn recorded(kept: Option<FileRecord>) -> Option<FileRecord> {
    kept.filter(|log| log.entries > 0)
}

/// Segment `base`'s log of the mirror partition `pdir`, when its bytes are the ones `recorded` says (module docs);
/// `None` otherwise.
pub fn read(pdir: &Path, base: i64, recorded: FileRecord) -> std::io::Result<Option<Vec<SegmentClosing>>> {
    let (root, name) = root_and_name(pdir)?;
    let path = mirror::segment_log_file(root, name, base);
    Ok(closed_log::read_recorded(&path, recorded)?.and_then(|bytes| closed_log::parse_segment(&bytes).ok()))
}

/// Removes the logs in `dir` of segments other than `keep` that the partition directory `pdir` no longer holds
/// (deleted by retention, a truncation, a replacement with other bases). Files whose names are not a log's are left.
fn sweep(dir: &Path, pdir: &Path, keep: i64) -> std::io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let Some(base) = entry.file_name().to_str().and_then(mirror::segment_log_base) else {
            continue;
        };
        if base != keep && !pdir.join(segment_file_name(base, SegmentFileKind::Log)).exists() {
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use segment_format::txn_index::TxnTally;

    fn closing(producer_id: i64, marker_offset: i64, whole: bool) -> SegmentClosing {
        let tally = TxnTally {
            producer_epoch: 1,
            records: 3,
            batches: 2,
            bytes: 200,
        };
        SegmentClosing {
            producer_id,
            marker_offset,
            whole,
            data: Some((marker_offset - 3, tally)),
        }
    }

    #[test]
    fn a_log_is_read_only_as_recorded_and_grows_run_by_run() {
        let root = tempfile::tempdir().unwrap();
        let pdir = root.path().join("t-0");
        fs::create_dir_all(&pdir).unwrap();
        let first = [closing(1, 10, false), closing(2, 14, true)];
        let record = write(&pdir, 0, &first).unwrap();
        assert_eq!(read(&pdir, 0, record).unwrap().unwrap(), first);
        let more = [closing(1, 30, true)];
        let grown = append(&pdir, 0, record, &more).unwrap().unwrap();
        let all: Vec<_> = first.iter().chain(&more).copied().collect();
        assert_eq!(read(&pdir, 0, grown).unwrap().unwrap(), all);
        // The older record reads the entries it describes, and only those.
        assert_eq!(read(&pdir, 0, record).unwrap().unwrap(), first);
        // A changed byte, and a lost file.
        let path = mirror::segment_log_file(root.path(), "t-0", 0);
        let mut bytes = fs::read(&path).unwrap();
        bytes[20] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(read(&pdir, 0, grown).unwrap().is_none());
        fs::remove_file(&path).unwrap();
        assert!(read(&pdir, 0, grown).unwrap().is_none());
        assert!(append(&pdir, 0, grown, &more).unwrap().is_none());
        // Not a regular file.
        fs::create_dir_all(&path).unwrap();
        assert!(read(&pdir, 0, grown).unwrap().is_none());
    }

    #[test]
    fn logs_of_segments_the_partition_no_longer_holds_go_at_the_next_write() {
        let root = tempfile::tempdir().unwrap();
        let pdir = root.path().join("t-0");
        fs::create_dir_all(&pdir).unwrap();
        for base in [0, 100] {
            fs::write(pdir.join(segment_file_name(base, SegmentFileKind::Log)), b"").unwrap();
            write(&pdir, base, &[closing(1, base + 5, true)]).unwrap();
        }
        // Retention deletes segment 0; segment 200 is written.
        fs::remove_file(pdir.join(segment_file_name(0, SegmentFileKind::Log))).unwrap();
        let record = write(&pdir, 200, &[closing(1, 205, true)]).unwrap();
        assert!(!mirror::segment_log_file(root.path(), "t-0", 0).exists());
        assert!(mirror::segment_log_file(root.path(), "t-0", 100).exists());
        assert_eq!(read(&pdir, 200, record).unwrap().unwrap().len(), 1);
        // No markers: no file, an empty record.
        assert_eq!(write(&pdir, 100, &[]).unwrap(), FileRecord::default());
        assert!(!mirror::segment_log_file(root.path(), "t-0", 100).exists());
    }
}
