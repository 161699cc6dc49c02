//! How far a tail ships: the upper bound of what may leave the source.
//!
//! Records above a partition's **high watermark** are not committed: a leader
//! change may still truncate them away, and a mirror that received them would
//! hold records the source cluster never acknowledged. So by default
//! ([`UptoPolicy::HighWatermark`]) a tail ships only batches whose last offset
//! is below the high watermark ([`Bound::upto`] feeds
//! [`TailOptions::upto`](super::growing::TailOptions::upto)); `--upto log-end`
//! ([`UptoPolicy::LogEnd`]) ships everything complete and CRC-valid, for the
//! lowest latency, accepting that the source may truncate what was shipped (a
//! tail then sees [`TailRead::Truncated`](super::growing::TailRead::Truncated)).
//!
//! Where the high watermark comes from is a seam ([`HighWatermarkSource`]):
//! - [`CheckpointHighWatermarks`] (here) reads the broker's
//!   `replication-offset-checkpoint` in each log dir (version `0`, a count,
//!   `topic partition offset` lines). The broker rewrites it (temp file and
//!   rename) every `replica.high.watermark.checkpoint.interval.ms`,
//!   [`CHECKPOINT_INTERVAL`] by default, so the bound it gives lags the true
//!   high watermark by up to that interval plus the watcher's notice (a
//!   tick). A partition missing from the file (new, or not checkpointed yet)
//!   has no known bound: nothing of it ships until it appears.
//! - Over the Kafka protocol (`--source-bootstrap`), two more implementations
//!   of the same trait learn it within a round trip: a `Fetch` the broker
//!   holds until the high watermark moves, in [`super::fetch_hw`] (the
//!   default), and `ListOffsets` every 50 ms, in [`super::list_offsets`] (its
//!   first learning and fallback).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use segment_format::checkpoint::OffsetCheckpoint;
use segment_format::dir::RootCheckpoint;
use segment_format::Error;

use super::guard::{FileIdentity, RACY_MARGIN};

/// Kafka's default `replica.high.watermark.checkpoint.interval.ms` (5000 ms):
/// how stale the checkpoint's high watermarks may be.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(5000);

/// How often [`CheckpointHighWatermarks::refresh`] re-reads the checkpoints (500 ms): the broker rewrites them
/// every [`CHECKPOINT_INTERVAL`], so this adds a tenth of that to the bound's delay while costing two small reads
/// a second per log dir.
pub const RELOAD_INTERVAL: Duration = Duration::from_millis(500);

/// How far to ship (`--upto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UptoPolicy {
    /// Up to the high watermark (committed records only): the default.
    #[default]
    HighWatermark,
    /// Up to the end of the log (every complete, CRC-valid batch).
    LogEnd,
}

/// The bound for one partition at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// No bound: to the end of the log.
    LogEnd,
    /// Batches whose last offset is below this offset.
    Below(i64),
    /// The high watermark is not known yet: nothing ships.
    Unknown,
}

impl Bound {
    /// The bound for [`TailOptions::upto`](super::growing::TailOptions::upto):
    /// `None` for no bound; an unknown high watermark bounds everything away.
    pub fn upto(self) -> Option<i64> {
        match self {
            Bound::LogEnd => None,
            Bound::Below(hw) => Some(hw),
            Bound::Unknown => Some(i64::MIN),
        }
    }

    /// May a batch whose last offset is `last_offset` ship?
    pub fn admits(self, last_offset: i64) -> bool {
        match self {
            Bound::LogEnd => true,
            Bound::Below(hw) => last_offset < hw,
            Bound::Unknown => false,
        }
    }
}

/// A high watermark and when it was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HighWatermark {
    /// The offset (exclusive: the first uncommitted one).
    pub offset: i64,
    /// When the source published it (the checkpoint's modification time; the
    /// response time of a `ListOffsets` or a `Fetch`).
    pub as_of: SystemTime,
}

/// Where high watermarks come from (the seam for `ListOffsets`).
pub trait HighWatermarkSource: Send + Sync {
    /// The latest known high watermark of `topic`-`partition`; `None`: unknown.
    fn high_watermark(&self, topic: &str, partition: i32) -> Option<HighWatermark>;

    /// Bring what [`high_watermark`](Self::high_watermark) answers up to date if the source's copy is older than
    /// its own refresh interval; cheap when it is not. The tail feed calls it before each partition step, on the
    /// blocking thread that step runs on, so a source may do blocking I/O here and needs no loop of its own.
    /// Failures are the source's to report (a log line); the last values known stay in force.
    /// Default: nothing (a source that keeps itself current, e.g. by a background task).
    fn refresh(&self) {}

    /// Whether [`refresh`](Self::refresh) would read anything now. The tail feed steps only the partitions that may
    /// have changed (`shipper::direct::wake`), so it also calls `refresh` once a round, on the blocking pool, when
    /// this says it is due: a bound that moved is then learned without waiting for a step of its partition.
    /// Default: `false` (nothing to refresh).
    fn refresh_due(&self) -> bool {
        false
    }

    /// A counter that moves whenever a high watermark this source answers moves, for a source that learns them
    /// in the background: the tail feed, finding nothing to ship, waits on it as well as on its poll interval, so
    /// a bound that moves is followed at once rather than at the next poll. Default: `None` (the feed polls).
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// The bound `policy` gives for a partition.
pub fn bound(policy: UptoPolicy, source: &dyn HighWatermarkSource, topic: &str, partition: i32) -> Bound {
    match policy {
        UptoPolicy::LogEnd => Bound::LogEnd,
        UptoPolicy::HighWatermark => match source.high_watermark(topic, partition) {
            Some(hw) => Bound::Below(hw.offset),
            None => Bound::Unknown,
        },
    }
}

/// What one log dir's checkpoint held when last read.
#[derive(Debug, Default)]
struct Loaded {
    /// The file read (`None`: there was none, or no identity is kept on this platform).
    stamp: Option<FileIdentity>,
    /// The file's times were [`RACY_MARGIN`] old when it was read: a later change of its bytes changes its identity.
    settled: bool,
    entries: HashMap<(String, i32), i64>,
    as_of: Option<SystemTime>,
}

/// High watermarks from the `replication-offset-checkpoint` of each log dir
/// (see the module doc). [`refresh`](HighWatermarkSource::refresh) re-reads
/// them when the last load is older than the reload interval
/// ([`RELOAD_INTERVAL`] by default); [`reload`](Self::reload) reads them now.
/// Readers see the last load.
#[derive(Debug)]
pub struct CheckpointHighWatermarks {
    log_dirs: Vec<PathBuf>,
    loaded: RwLock<Vec<Loaded>>,
    reload_interval: Duration,
    /// When the last [`refresh`](HighWatermarkSource::refresh) read the files (`None`: never).
    last_refresh: Mutex<Option<Instant>>,
    /// Moves whenever a reload changed a high watermark ([`HighWatermarkSource::changes`]).
    changed: tokio::sync::watch::Sender<u64>,
    /// Checkpoint files parsed so far (tests: an unchanged file is not parsed again).
    parses: std::sync::atomic::AtomicU64,
}

impl CheckpointHighWatermarks {
    /// For these log dirs; nothing is read until the first [`refresh`](HighWatermarkSource::refresh) or
    /// [`reload`](Self::reload).
    pub fn new(log_dirs: Vec<PathBuf>) -> Self {
        let loaded = log_dirs.iter().map(|_| Loaded::default()).collect();
        CheckpointHighWatermarks {
            log_dirs,
            loaded: RwLock::new(loaded),
            reload_interval: RELOAD_INTERVAL,
            last_refresh: Mutex::new(None),
            changed: tokio::sync::watch::Sender::new(0),
            parses: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Re-read the checkpoints at most every `interval` on [`refresh`](HighWatermarkSource::refresh)
    /// (default [`RELOAD_INTERVAL`]).
    pub fn with_reload_interval(mut self, interval: Duration) -> Self {
        self.reload_interval = interval;
        self
    }

    /// The checkpoint file of a log dir.
    pub fn checkpoint_path(log_dir: &Path) -> PathBuf {
        log_dir.join(RootCheckpoint::ReplicationOffset.file_name())
    }

    /// Read every log dir's checkpoint again; `true` if any high watermark
    /// changed. A file whose identity (inode, length, times) is the one last parsed, and whose times were
    /// [`RACY_MARGIN`] old then, is not parsed again: with 10,000 partitions a parse is 10,000 lines twice a
    /// second, for a file the broker rewrites every few seconds. A missing file clears that log dir's entries
    /// (a broker that has not written it yet); a corrupt one is an error
    /// naming it, and the entries read before stay in force (a torn read
    /// cannot happen: the broker replaces the file by rename).
    /// Blocking; async callers run it in `spawn_blocking`.
    pub fn reload(&self) -> Result<bool, Error> {
        let mut changed = false;
        for (i, dir) in self.log_dirs.iter().enumerate() {
            let path = Self::checkpoint_path(dir);
            let read_at = SystemTime::now();
            let (stamp, modified, fresh) = match std::fs::metadata(&path) {
                Ok(meta) => {
                    let stamp = FileIdentity::of(&meta);
                    let unchanged = stamp.is_some() && {
                        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
                        loaded.get(i).is_some_and(|l| l.settled && l.stamp == stamp)
                    };
                    if unchanged {
                        continue;
                    }
                    self.parses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let cp = match OffsetCheckpoint::read(&path) {
                        Ok(cp) => cp,
                        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                            OffsetCheckpoint::default()
                        }
                        Err(e) => return Err(e),
                    };
                    (stamp, meta.modified().ok(), cp.into_offsets())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None, HashMap::new()),
                Err(e) => return Err(Error::io(&path, e)),
            };
            let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = loaded.get_mut(i) {
                changed |= slot.entries != fresh;
                slot.as_of = modified;
                slot.settled = stamp.is_some_and(|s| s.settled_at(RACY_MARGIN, read_at));
                slot.stamp = stamp;
                slot.entries = fresh;
            }
        }
        if changed {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(changed)
    }
}

impl HighWatermarkSource for CheckpointHighWatermarks {
    fn refresh(&self) {
        {
            // Held only to claim this interval's reload: concurrent callers skip rather than read the files twice.
            let mut last = self.last_refresh.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < self.reload_interval) {
                return;
            }
            *last = Some(Instant::now());
        }
        if let Err(e) = self.reload() {
            tracing::warn!(error = %e, "reading the high watermarks; the last ones read stay in force");
        }
    }

    fn refresh_due(&self) -> bool {
        let last = self.last_refresh.lock().unwrap_or_else(|p| p.into_inner());
        last.is_none_or(|at| at.elapsed() >= self.reload_interval)
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changed.subscribe())
    }

    fn high_watermark(&self, topic: &str, partition: i32) -> Option<HighWatermark> {
        let loaded = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        // A partition lives in one log dir; if two list it (a move between
        // dirs), the larger value is the newer.
        loaded
            .iter()
            .filter_map(|l| {
                let offset = *l.entries.get(&(topic.to_string(), partition))?;
                Some(HighWatermark {
                    offset,
                    as_of: l.as_of.unwrap_or(SystemTime::UNIX_EPOCH),
                })
            })
            .max_by_key(|hw| hw.offset)
    }
}

#[cfg(test)]
mod tests {
    use segment_format::checkpoint::OffsetCheckpointEntry;

    use super::*;

    fn write(dir: &Path, entries: &[(&str, i32, i64)]) {
        let cp = OffsetCheckpoint {
            entries: entries
                .iter()
                .map(|(t, p, o)| OffsetCheckpointEntry {
                    topic: (*t).into(),
                    partition: *p,
                    offset: *o,
                })
                .collect(),
        };
        cp.write(&CheckpointHighWatermarks::checkpoint_path(dir)).unwrap();
    }

    #[test]
    fn checkpoint_high_watermarks_bound_the_tail_and_follow_rewrites() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let hws = CheckpointHighWatermarks::new(vec![a.path().into(), b.path().into()]);
        // Nothing written yet: unknown, nothing ships; log-end ignores it.
        assert!(!hws.reload().unwrap());
        assert_eq!(bound(UptoPolicy::HighWatermark, &hws, "t", 0), Bound::Unknown);
        assert_eq!(Bound::Unknown.upto(), Some(i64::MIN));
        assert_eq!(bound(UptoPolicy::LogEnd, &hws, "t", 0), Bound::LogEnd);
        write(a.path(), &[("t", 0, 42), ("t", 1, 7)]);
        write(b.path(), &[("u", 0, 9)]);
        assert!(hws.reload().unwrap());
        assert_eq!(bound(UptoPolicy::HighWatermark, &hws, "t", 0), Bound::Below(42));
        assert_eq!(bound(UptoPolicy::HighWatermark, &hws, "u", 0), Bound::Below(9));
        assert!(Bound::Below(42).admits(41) && !Bound::Below(42).admits(42));
        // Unchanged files: nothing changed.
        assert!(!hws.reload().unwrap());
        write(a.path(), &[("t", 0, 50), ("t", 1, 7)]);
        assert!(hws.reload().unwrap());
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(50));
        // A corrupt checkpoint is an error naming it; the last good values stay.
        let path = CheckpointHighWatermarks::checkpoint_path(a.path());
        std::fs::write(&path, "0\n2\nt 0 nonsense\n").unwrap();
        let err = hws.reload().unwrap_err();
        assert!(err.to_string().contains("replication-offset-checkpoint"), "{err}");
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(50));
        // The file removed: its partitions have no known bound.
        std::fs::remove_file(&path).unwrap();
        assert!(hws.reload().unwrap());
        assert_eq!(hws.high_watermark("t", 0), None);
    }

    #[test]
    fn refresh_rereads_the_checkpoint_only_once_its_copy_is_older_than_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        // An interval no test run reaches: the second refresh must keep the first read.
        let hws =
            CheckpointHighWatermarks::new(vec![dir.path().into()]).with_reload_interval(Duration::from_secs(3600));
        write(dir.path(), &[("t", 0, 5)]);
        hws.refresh();
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(5));
        write(dir.path(), &[("t", 0, 9)]);
        hws.refresh();
        assert_eq!(
            hws.high_watermark("t", 0).map(|h| h.offset),
            Some(5),
            "fresh copy: not re-read"
        );
        // An interval of zero: every refresh reads the file again.
        let hws = CheckpointHighWatermarks::new(vec![dir.path().into()]).with_reload_interval(Duration::ZERO);
        hws.refresh();
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(9));
        write(dir.path(), &[("t", 0, 12)]);
        hws.refresh();
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(12));
        // A corrupt file: refresh logs, the last values stay.
        std::fs::write(CheckpointHighWatermarks::checkpoint_path(dir.path()), "0\n1\nt 0 x\n").unwrap();
        hws.refresh();
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(12));
    }

    #[test]
    fn a_reload_that_changes_a_high_watermark_moves_the_change_count_and_says_when_the_next_is_due() {
        let dir = tempfile::tempdir().unwrap();
        let hws =
            CheckpointHighWatermarks::new(vec![dir.path().into()]).with_reload_interval(Duration::from_secs(3600));
        let changes = hws.changes().expect("a checkpoint source counts its changes");
        assert!(hws.refresh_due(), "never read: due");
        write(dir.path(), &[("t", 0, 5)]);
        hws.refresh();
        assert!(!hws.refresh_due(), "read just now, an hour's interval");
        assert_eq!(*changes.borrow(), 1);
        // Read again with nothing changed: the count stands.
        assert!(!hws.reload().unwrap());
        assert_eq!(*changes.borrow(), 1);
        write(dir.path(), &[("t", 0, 9)]);
        assert!(hws.reload().unwrap());
        assert_eq!(*changes.borrow(), 2);
        let zero = CheckpointHighWatermarks::new(vec![dir.path().into()]).with_reload_interval(Duration::ZERO);
        zero.refresh();
        assert!(zero.refresh_due(), "an interval of zero is always due");
    }

    #[test]
    fn a_settled_checkpoint_is_parsed_once_and_any_rewrite_is_parsed_again() {
        let dir = tempfile::tempdir().unwrap();
        let hws = CheckpointHighWatermarks::new(vec![dir.path().into()]);
        let parses = || hws.parses.load(std::sync::atomic::Ordering::Relaxed);
        write(dir.path(), &[("t", 0, 5)]);
        // Written just now: its stamp does not vouch for its bytes yet, so every reload parses it.
        assert!(hws.reload().unwrap());
        assert!(!hws.reload().unwrap());
        assert_eq!(parses(), 2);
        std::thread::sleep(RACY_MARGIN + Duration::from_millis(100));
        assert!(!hws.reload().unwrap());
        assert_eq!(parses(), 3, "read once more, now settled");
        for _ in 0..3 {
            assert!(!hws.reload().unwrap());
        }
        assert_eq!(parses(), 3, "unchanged and settled: not parsed again");
        // The broker's rewrite (a new file renamed over it): parsed.
        write(dir.path(), &[("t", 0, 9)]);
        assert!(hws.reload().unwrap());
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(9));
        // Settled again, then rewritten in place with bytes of the same length: its times move, parsed.
        std::thread::sleep(RACY_MARGIN + Duration::from_millis(100));
        assert!(!hws.reload().unwrap());
        let before = parses();
        assert!(!hws.reload().unwrap());
        assert_eq!(parses(), before);
        std::fs::write(CheckpointHighWatermarks::checkpoint_path(dir.path()), "0\n1\nt 0 7\n").unwrap();
        assert!(hws.reload().unwrap());
        assert_eq!(hws.high_watermark("t", 0).map(|h| h.offset), Some(7));
    }
}
