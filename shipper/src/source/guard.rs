//! Telling whether a source file changed while it was read.
//!
//! A broker keeps working while the shipper reads its log dir: it appends to
//! the active segment, rolls it (trimming and completing its indexes a moment
//! later), swaps a compacted segment in under the same name (a new inode),
//! deletes segments past retention and truncates a follower's log. None of
//! this is an error of the source, but bytes read across such a change must
//! not be shipped as if they were one version of the file. So a reader takes
//! [`Stamps`] (length, modification time, inode of every file) before it reads
//! and compares them after; and a check that fails while the stamps move is
//! retried [`CHECK_ATTEMPTS`] times, [`SETTLE_DELAY`] apart, before the outcome
//! is final: corruption if the files stood still, "changed" if they did not.
//! (Reads themselves never SIGBUS on a truncation: `segment_format`'s readers
//! report "changed while read" naming the file.)

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use segment_format::dir::SegmentFiles;
use segment_format::Error;

/// Checks of one segment before a failure on changing files is final: the
/// broker's roll completes in milliseconds, so three looks a
/// [`SETTLE_DELAY`] apart see it finished.
pub const CHECK_ATTEMPTS: u32 = 3;
/// Pause after a failed check before deciding whether the files were changing.
pub const SETTLE_DELAY: Duration = Duration::from_millis(200);

/// What a file looked like: a rename over it (compaction) changes the inode,
/// an append or truncation the length and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Length in bytes.
    pub len: u64,
    /// Modification time, where the file system keeps one.
    pub modified: Option<SystemTime>,
    /// Inode number (0 off Unix).
    pub inode: u64,
}

/// Stamps of a segment's files, `.log` first; `None` for a missing file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamps(Vec<(PathBuf, Option<FileStamp>)>);

impl Stamps {
    /// The `.log`'s stamp (`None`: it was missing).
    pub fn log(&self) -> Option<FileStamp> {
        self.0.first().and_then(|(_, s)| *s)
    }

    /// Did the `.log` shrink, get replaced (another inode) or vanish between
    /// `self` and `after`? Appends alone never do any of these, so for an
    /// active segment this separates a concurrent truncation or swap from
    /// growth.
    pub fn log_shrank_or_replaced(&self, after: &Stamps) -> bool {
        match (self.log(), after.log()) {
            (Some(b), Some(a)) => a.len < b.len || a.inode != b.inode,
            _ => true,
        }
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
pub fn stamps(segment: &SegmentFiles, snapshot: Option<&Path>) -> Stamps {
    let mut paths: Vec<&Path> = vec![segment.log.as_path()];
    paths.extend(segment.index.as_deref());
    paths.extend(segment.time_index.as_deref());
    paths.extend(segment.txn_index.as_deref());
    paths.extend(snapshot);
    Stamps(paths.into_iter().map(|p| (p.to_path_buf(), stamp(p))).collect())
}

/// Milliseconds since the epoch (negative before it).
pub fn mtime_ms(path: &Path) -> std::result::Result<i64, Error> {
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|e| Error::io(path, e))?;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Ok(match modified.duration_since(UNIX_EPOCH) {
        Ok(d) => ms(d),
        Err(e) => -ms(e.duration()),
    })
}

/// Is `e` a file that is not there (deleted, or renamed away, at the source)?
pub fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}
