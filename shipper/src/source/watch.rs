//! Watching a broker's log dirs for what a tail must react to.
//!
//! A tail driver must learn quickly that a partition's active segment grew
//! (ship the new batches), rolled (seal the old one), lost segments to
//! retention or truncation, or had a sealed segment swapped by compaction;
//! that partitions appeared or went away; and that the high-watermark
//! checkpoint moved. Polling every partition fast enough for millisecond
//! latency would cost a directory listing per partition per poll, so the
//! watcher listens to the file system (inotify, asked for changes only: the
//! private `inotify` module says why) and looks only where it was told
//! something changed.
//!
//! **Events are hints.** Notifications can be lost (the kernel queue
//! overflows, a directory is created before its watch is added, some file
//! systems send none), so:
//! - every [`WatchEvent`] is derived by diffing listings (the private `state`
//!   module), never taken from a notification's kind: a lost notification
//!   delays an event, it never invents one;
//! - a full rescan every [`RESCAN_INTERVAL`] is the safety net;
//! - a driver **re-reads the partition** ([`read_partition`](super::read_partition),
//!   then [`read_tail`](super::read_tail) or [`bound_sealed`](super::bound_sealed))
//!   on each event rather than trusting the event's numbers, which may be
//!   stale by the time it looks. An event says "look at this partition now".
//!
//! **Coalescing.** A broker appends thousands of times a second; the watcher
//! must not emit an event per write. Notifications only mark a partition
//! *dirty* (a set, so its size is bounded by the number of partitions, never
//! by the write rate); the watcher wakes on the first mark, waits
//! [`COALESCE_TICK`] so a burst lands in one pass, then lists each dirty
//! partition once and emits what changed since its last pass: one
//! `ActiveGrew` with the latest length for any number of appends. The event
//! channel is bounded ([`EVENT_CHANNEL_CAPACITY`]); when the driver falls
//! behind, the watcher waits, and the marks keep accumulating in the set.
//!
//! Listings and stats are blocking file work, run in `spawn_blocking`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use segment_format::checkpoint::OffsetCheckpoint;
use segment_format::dir::RootCheckpoint;
use segment_format::Error;
use tokio::sync::{mpsc, Notify};

use super::discover::TopicFilter;

mod inotify;
mod state;
#[cfg(test)]
mod tests;

use state::{Dirty, State};

/// How long the watcher gathers notifications before a pass (20 ms): long
/// enough that a burst of appends (a broker under load appends every few
/// hundred microseconds) is one pass and one event per partition, short next
/// to the direct tail's latency target (p99 50 ms from append to durable on the
/// mirror).
pub const COALESCE_TICK: Duration = Duration::from_millis(20);

/// How often, at least, every log dir and partition is listed regardless of
/// notifications (10 s): the safety net for notifications that never came
/// (queue overflow, file systems without inotify). One listing per
/// partition; frequent enough that a missed roll or deletion is seen within
/// a retention check (`log.retention.check.interval.ms` is 5 minutes).
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(10);

/// Full passes take at most one fiftieth of the time: after one that took `d`, the next rescan is due after
/// `max(rescan, 50 d)`. With 10,000 partitions a full pass lists 10,000 directories; every 10 s that was most of a
/// shipper's cost at rest.
const RESCAN_SHARE: u32 = 50;

/// Events buffered for a driver (1024): a pass over thousands of partitions
/// at start fits without the watcher waiting; beyond it the watcher waits
/// and its dirty set (bounded by the partition count) keeps the work.
pub const EVENT_CHANNEL_CAPACITY: usize = 1024;

/// A partition directory the watcher follows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionId {
    /// The log dir it is in.
    pub log_dir: PathBuf,
    /// The partition directory.
    pub dir: PathBuf,
    pub topic: String,
    pub partition: i32,
}

/// Something changed at the source (a hint: see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A partition directory is there (at start, every selected one).
    PartitionAppeared {
        partition: PartitionId,
        /// Base offset of its active segment, if it has segments.
        active_base: Option<i64>,
        segments: usize,
    },
    /// The partition directory is gone; `marked_for_deletion`: a `-delete`
    /// directory of the same partition is there (the topic is being deleted).
    PartitionGone {
        partition: PartitionId,
        marked_for_deletion: bool,
    },
    /// The active segment's `.log` is longer: `len` bytes when looked at.
    ActiveGrew {
        partition: PartitionId,
        base_offset: i64,
        len: u64,
    },
    /// The active segment's `.log` is shorter (a truncation), or a truncation
    /// removed newer segments and this one is active again.
    ActiveShrank {
        partition: PartitionId,
        base_offset: i64,
        len: u64,
        was: u64,
    },
    /// A new active segment: `previous_base` is sealed now (`None`: the
    /// partition had no segment).
    Rolled {
        partition: PartitionId,
        previous_base: Option<i64>,
        active_base: i64,
    },
    /// A segment is gone (retention renames it `.deleted`, a compaction merge
    /// deletes the segments it merged, a truncation the ones past its point).
    SegmentDeleted { partition: PartitionId, base_offset: i64 },
    /// The first segment's base moved up (retention): the log start moved.
    LogStartMoved { partition: PartitionId, first_base: i64 },
    /// Another file is at a segment's `.log` name (compaction's
    /// `.cleaned` → `.swap` → rename): the segment's identity changed.
    SegmentReplaced { partition: PartitionId, base_offset: i64 },
    /// The log dir's `replication-offset-checkpoint` changed: reload the
    /// high watermarks ([`CheckpointHighWatermarks::reload`](super::CheckpointHighWatermarks::reload)).
    HighWatermarksChanged { log_dir: PathBuf },
    /// The log dir's `log-start-offset-checkpoint` changed (the broker writes it every
    /// `log.flush.start.offset.checkpoint.interval.ms`): a log start `DeleteRecords` moved inside a segment, which
    /// no file of the partition's directory shows, is in it.
    LogStartsChanged { log_dir: PathBuf },
    /// A log dir or partition dir could not be listed; it is tried again at the next pass.
    Unreadable { path: PathBuf, reason: String },
}

impl WatchEvent {
    /// The partition the event is about, if it is about one.
    pub fn partition(&self) -> Option<&PartitionId> {
        match self {
            WatchEvent::PartitionAppeared { partition, .. }
            | WatchEvent::PartitionGone { partition, .. }
            | WatchEvent::ActiveGrew { partition, .. }
            | WatchEvent::ActiveShrank { partition, .. }
            | WatchEvent::Rolled { partition, .. }
            | WatchEvent::SegmentDeleted { partition, .. }
            | WatchEvent::LogStartMoved { partition, .. }
            | WatchEvent::SegmentReplaced { partition, .. } => Some(partition),
            WatchEvent::HighWatermarksChanged { .. }
            | WatchEvent::LogStartsChanged { .. }
            | WatchEvent::Unreadable { .. } => None,
        }
    }
}

/// The entries of `log_dir`'s `log-start-offset-checkpoint`, what a [`WatchEvent::LogStartsChanged`] is about, by
/// topic and partition; `None` when it cannot be read (being replaced, or damaged). Blocking.
pub fn read_log_starts(log_dir: &Path) -> Option<HashMap<(String, i32), i64>> {
    OffsetCheckpoint::read(&log_dir.join(RootCheckpoint::LogStartOffset.file_name()))
        .ok()
        .map(OffsetCheckpoint::into_offsets)
}

/// What to watch and how often.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// The broker's log dirs.
    pub log_dirs: Vec<PathBuf>,
    /// Which topics (as [`discover`](super::discover())).
    pub filter: TopicFilter,
    /// [`COALESCE_TICK`].
    pub tick: Duration,
    /// [`RESCAN_INTERVAL`].
    pub rescan: Duration,
}

impl WatchConfig {
    /// The defaults for these log dirs and topics.
    pub fn new(log_dirs: Vec<PathBuf>, filter: TopicFilter) -> Self {
        WatchConfig {
            log_dirs,
            filter,
            tick: COALESCE_TICK,
            rescan: RESCAN_INTERVAL,
        }
    }
}

/// A running watcher: dropping it stops it (the event channel then closes).
pub struct Watcher {
    task: tokio::task::JoinHandle<()>,
    _notifications: inotify::Notifications,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Marks shared between the notification thread and the watcher task.
#[derive(Default)]
struct Marks {
    dirty: Mutex<Dirty>,
    wake: Notify,
}

impl Marks {
    fn mark(&self, f: impl FnOnce(&mut Dirty)) {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut dirty);
        drop(dirty);
        self.wake.notify_one();
    }

    fn take(&self) -> Dirty {
        let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *dirty)
    }
}

/// A log dir as configured (the watcher's state and events name it so) and as notifications name the paths they
/// are about: absolute. Why both: a log dir given relatively (`ship --log-dir kafka-logs`) once got notifications
/// about `/cwd/kafka-logs/...`, which never matched the relative path, so every append waited for the rescan
/// ([`RESCAN_INTERVAL`]) instead of a tick. Made absolute once, at start (the working directory joined in front,
/// symlinks not resolved), and watched under that name, so the two name the same files component for component.
#[derive(Debug, Clone)]
struct WatchedDir {
    dir: PathBuf,
    absolute: PathBuf,
}

impl WatchedDir {
    fn new(dir: &Path) -> WatchedDir {
        WatchedDir {
            dir: dir.to_path_buf(),
            // Fails only without a working directory; then a relative path cannot be watched either.
            absolute: std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
        }
    }

    /// `path` under this log dir, relative to it, whichever way the path names it.
    fn strip<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        path.strip_prefix(&self.absolute)
            .or_else(|_| path.strip_prefix(&self.dir))
            .ok()
    }
}

/// Mark what a notification about `path` may have changed.
fn mark_path(dirty: &mut Dirty, log_dirs: &[WatchedDir], path: &Path) {
    let checkpoint = RootCheckpoint::ReplicationOffset.file_name();
    let log_starts = RootCheckpoint::LogStartOffset.file_name();
    for (i, log_dir) in log_dirs.iter().enumerate() {
        let Some(rest) = log_dir.strip(path) else { continue };
        let mut parts = rest.components();
        let Some(first) = parts.next() else {
            // The log dir itself.
            dirty.log_dirs.insert(i);
            return;
        };
        let first = first.as_os_str();
        if parts.next().is_none() {
            // An entry of the log dir: a partition dir created, renamed or
            // removed, or a root file (the checkpoint and its `.tmp`).
            if first.to_str().is_some_and(|n| n.starts_with(checkpoint)) {
                dirty.checkpoints.insert(i);
            } else if first.to_str().is_some_and(|n| n.starts_with(log_starts)) {
                dirty.log_starts.insert(i);
            } else {
                dirty.log_dirs.insert(i);
            }
        } else {
            // Named as the state names it: under the log dir as configured.
            dirty.partitions.insert((i, log_dir.dir.join(first)));
        }
        return;
    }
}

/// Mark what one notification may have changed (see [`mark_path`]).
fn on_notice(marks: &Marks, log_dirs: &[WatchedDir], notice: inotify::Notice) {
    match notice {
        inotify::Notice::Path(path) => marks.mark(|d| mark_path(d, log_dirs, &path)),
        // Lost notifications (queue overflow): look at everything.
        inotify::Notice::Everything => marks.mark(|d| d.all = true),
    }
}

/// Start watching (see the module doc). Returns the watcher and its events;
/// the first pass reports every selected partition as appeared. Must be
/// called within a Tokio runtime.
pub async fn watch(config: WatchConfig) -> Result<(Watcher, mpsc::Receiver<WatchEvent>), Error> {
    let marks = Arc::new(Marks::default());
    let log_dirs = config.log_dirs.clone();
    if log_dirs.is_empty() {
        return Err(Error::io("", std::io::Error::other("no log dir to watch")));
    }
    // Notifications before the first pass, so nothing between the two is missed.
    let first_dir = log_dirs.first().cloned().unwrap_or_default();
    let notifications = {
        let marks = marks.clone();
        tokio::task::spawn_blocking(move || -> Result<inotify::Notifications, Error> {
            let handler_dirs: Vec<WatchedDir> = log_dirs.iter().map(|d| WatchedDir::new(d)).collect();
            let absolute: Vec<PathBuf> = handler_dirs.iter().map(|d| d.absolute.clone()).collect();
            inotify::start(&absolute, move |notice| on_notice(&marks, &handler_dirs, notice))
                .map_err(|e| Error::io(log_dirs.first().map_or(Path::new(""), |p| p.as_path()), e))
        })
        .await
        .map_err(|e| Error::io(&first_dir, std::io::Error::other(e)))??
    };
    let (tx, rx) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    marks.mark(|d| d.all = true);
    let task = tokio::spawn(run(config, marks, tx));
    Ok((
        Watcher {
            task,
            _notifications: notifications,
        },
        rx,
    ))
}

/// The watcher's loop: wait for a mark or the rescan, gather for a tick, pass, send.
async fn run(config: WatchConfig, marks: Arc<Marks>, tx: mpsc::Sender<WatchEvent>) {
    let mut state = State::default();
    let mut next_rescan = tokio::time::Instant::now() + config.rescan;
    let config = Arc::new(config);
    loop {
        tokio::select! {
            _ = marks.wake.notified() => {}
            () = tokio::time::sleep_until(next_rescan) => {
                marks.mark(|d| d.all = true);
                next_rescan = tokio::time::Instant::now() + config.rescan;
            }
        }
        tokio::time::sleep(config.tick).await;
        let dirty = marks.take();
        if dirty.is_empty() {
            continue;
        }
        let (everything, started) = (dirty.all, tokio::time::Instant::now());
        let cfg = config.clone();
        let passed = tokio::task::spawn_blocking(move || {
            let mut events = Vec::new();
            state::pass(&mut state, &dirty, &cfg.log_dirs, &cfg.filter, &mut events);
            (state, events)
        })
        .await;
        let Ok((next, events)) = passed else {
            // The pass panicked (a bug): start over from a full rescan.
            state = State::default();
            marks.mark(|d| d.all = true);
            continue;
        };
        state = next;
        if everything {
            next_rescan = tokio::time::Instant::now() + rescan_after(config.rescan, started.elapsed());
        }
        for event in events {
            if tx.send(event).await.is_err() {
                return;
            }
        }
    }
}

/// Time to the next rescan after a full pass that took `took` (see [`RESCAN_SHARE`]).
fn rescan_after(rescan: Duration, took: Duration) -> Duration {
    rescan.max(took.saturating_mul(RESCAN_SHARE))
}

/// The partition dirs named by a set of events (for a driver that re-reads
/// each touched partition once per batch of events).
pub fn touched(events: &[WatchEvent]) -> BTreeSet<PathBuf> {
    events
        .iter()
        .filter_map(|e| e.partition().map(|p| p.dir.clone()))
        .collect()
}
