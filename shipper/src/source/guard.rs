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
//! retried ([`Retry`]) up to [`CHECK_ATTEMPTS`] looks, [`SETTLE_DELAY`] apart, before the outcome
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

/// What to make of a check that failed, per [`Retry::after_failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The files stood still: the failure is in the data.
    Corrupt,
    /// The files moved: look again.
    Again,
    /// They moved on every one of [`CHECK_ATTEMPTS`] looks: report the source as changing.
    GiveUp,
}

/// The retry policy for checks of files a broker may be changing: after a
/// failed look, wait [`SETTLE_DELAY`], then a failure on files that did not
/// move is final (corruption) and one on files that moved is looked at again,
/// up to [`CHECK_ATTEMPTS`] looks in all.
#[derive(Debug)]
pub struct Retry {
    looks: u32,
}

impl Default for Retry {
    fn default() -> Self {
        Retry::new()
    }
}

impl Retry {
    /// Before the first look.
    pub fn new() -> Retry {
        Retry { looks: 1 }
    }

    /// A look failed: wait for the files to settle, then ask `moved` (called
    /// after the wait) whether they changed since that look began.
    pub fn after_failure(&mut self, moved: impl FnOnce() -> bool) -> Verdict {
        std::thread::sleep(SETTLE_DELAY);
        if !moved() {
            return Verdict::Corrupt;
        }
        if self.looks >= CHECK_ATTEMPTS {
            return Verdict::GiveUp;
        }
        self.looks += 1;
        Verdict::Again
    }
}

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

/// Everything the file system says about which file this is and when it last changed: device and inode (a rename
/// over it, as compaction's swap, changes them), length, and modification and status-change times to the
/// nanosecond (any write moves the first, and setting the first back moves the second). Two equal identities of one
/// path, taken at two times, mean the bytes were not written in between; the seed's memory of what it found in an
/// active segment (`crate::bucket::seed`) is believed only under that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// How old an entry's times must be when its [`FileIdentity`] is taken for an unchanged identity, taken later, to
/// stand for unchanged contents ([`FileIdentity::settled_at`]): far above the kernel's coarse clock tick (1-10 ms)
/// and any skew between the clock that stamps files and the one read here (the same kernel clock for a local file
/// system). Used by the seed's memory, the watcher's rescans and the high-watermark checkpoint's reloads.
pub const RACY_MARGIN: Duration = Duration::from_secs(2);

/// The [`FileIdentity`] of `path` (`None`: it is not there, or this is not Unix, where no such stamp is kept).
pub fn file_identity(path: &Path) -> Option<FileIdentity> {
    FileIdentity::of(&std::fs::symlink_metadata(path).ok()?)
}

impl FileIdentity {
    /// The identity `meta` describes: `None` for anything but a regular file, or where no such stamp is kept (not
    /// Unix).
    pub fn of(meta: &std::fs::Metadata) -> Option<FileIdentity> {
        if !meta.file_type().is_file() {
            return None;
        }
        FileIdentity::of_entry(meta)
    }

    /// The identity of any kind of entry `meta` describes (a directory's times move when its entries change);
    /// `None` where no such stamp is kept (not Unix).
    pub fn of_entry(meta: &std::fs::Metadata) -> Option<FileIdentity> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let ns = |secs: i64, nanos: i64| secs.saturating_mul(1_000_000_000).saturating_add(nanos);
            Some(FileIdentity {
                dev: meta.dev(),
                ino: meta.ino(),
                len: meta.len(),
                mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
                ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            })
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            None
        }
    }

    /// Whether both times were more than `margin` old at `taken` (when this identity was taken): then any later
    /// change lands on a later clock tick, and the same identity taken again means the same contents.
    pub fn settled_at(&self, margin: Duration, taken: SystemTime) -> bool {
        let taken_ns = taken
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let margin = i64::try_from(margin.as_nanos()).unwrap_or(i64::MAX);
        self.mtime_ns.max(self.ctime_ns) < taken_ns.saturating_sub(margin)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_on_still_files_is_final_and_moving_files_get_a_bounded_number_of_looks() {
        assert_eq!(Retry::new().after_failure(|| false), Verdict::Corrupt);
        let mut retry = Retry::new();
        let verdicts: Vec<Verdict> = (0..CHECK_ATTEMPTS).map(|_| retry.after_failure(|| true)).collect();
        let mut expected = vec![Verdict::Again; CHECK_ATTEMPTS as usize - 1];
        expected.push(Verdict::GiveUp);
        assert_eq!(verdicts, expected);
        // Files that stop moving on a later look: the failure there is corruption.
        let mut retry = Retry::new();
        assert_eq!(retry.after_failure(|| true), Verdict::Again);
        assert_eq!(retry.after_failure(|| false), Verdict::Corrupt);
    }
}
