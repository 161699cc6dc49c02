//! What the watcher knows of the source at one moment, and the events that
//! turn one such state into the next. Pure file listing (no notify, no
//! runtime): a pass lists the log dirs and partition dirs it is told are
//! dirty, stats their live `.log` files, and diffs against the state before.
//! Events are derived from states, never from the file-system notifications
//! themselves, so a lost, reordered or coalesced notification cannot make the
//! watcher report something that did not happen: at worst it reports it a
//! rescan later. Blocking; the watcher runs a pass in `spawn_blocking`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use segment_format::dir::{
    classify_partition_file, segment_file_name, DirKind, PartitionDirName, PartitionFile, RootCheckpoint,
    SegmentFileKind, TransientSuffix,
};

use super::{PartitionId, WatchEvent};
use crate::source::discover::TopicFilter;
use crate::source::guard::{FileIdentity, RACY_MARGIN};
use crate::source::CheckpointHighWatermarks;

/// A live `.log` file as last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LogStamp {
    /// Inode (0 off Unix): a swap renames another file over the name.
    pub inode: u64,
    pub len: u64,
}

impl LogStamp {
    fn of(meta: &std::fs::Metadata) -> LogStamp {
        LogStamp {
            inode: inode(meta),
            len: meta.len(),
        }
    }
}

/// One partition's live segments by base offset (transient `.deleted`,
/// `.cleaned` and `.swap` files are not segments).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PartitionState {
    pub segments: BTreeMap<i64, LogStamp>,
    /// The directory as it was just before it was listed (`None`: not known).
    pub listed: Option<DirStamp>,
}

/// A partition directory's identity (inode, size and times) as it was just before a listing. Every change of its
/// entries (a segment created, deleted, renamed `.deleted`, or a swap renamed over a name) moves its times; an
/// append to a file does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DirStamp {
    identity: FileIdentity,
    /// Its times were [`RACY_MARGIN`] old when it was taken: a later change lands on a later clock tick, so the same
    /// identity taken again means the same entries.
    settled: bool,
}

impl DirStamp {
    /// `None` where no identity is kept (not Unix): such a directory is always listed.
    fn of(meta: &std::fs::Metadata) -> Option<DirStamp> {
        let identity = FileIdentity::of_entry(meta)?;
        Some(DirStamp {
            identity,
            settled: identity.settled_at(RACY_MARGIN, std::time::SystemTime::now()),
        })
    }

    /// Whether `now` (a fresh stamp of the same path) vouches that the entries are still those listed under `self`.
    fn unchanged(&self, now: &DirStamp) -> bool {
        self.settled && self.identity == now.identity
    }
}

/// (length, modification time, inode) of a log dir's high-watermark checkpoint.
type FileStamp = (u64, Option<std::time::SystemTime>, u64);

/// Everything the watcher knows.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Per log dir (index into the config's list): its partitions by directory.
    pub partitions: Vec<HashMap<PathBuf, (PartitionId, PartitionState)>>,
    /// Per log dir: its `replication-offset-checkpoint` as last seen.
    pub checkpoints: Vec<Option<FileStamp>>,
    /// Per log dir: its `log-start-offset-checkpoint` as last seen.
    pub log_starts: Vec<Option<FileStamp>>,
}

/// What a pass is to look at (what notifications marked, or everything).
#[derive(Debug, Default, Clone)]
pub(super) struct Dirty {
    /// Look at everything (start, periodic rescan, notification overflow).
    pub all: bool,
    /// Log dirs whose partition list may have changed.
    pub log_dirs: BTreeSet<usize>,
    /// Partition dirs whose files may have changed, with their log dir.
    pub partitions: BTreeSet<(usize, PathBuf)>,
    /// Log dirs whose checkpoint may have changed.
    pub checkpoints: BTreeSet<usize>,
    /// Log dirs whose log-start checkpoint may have changed.
    pub log_starts: BTreeSet<usize>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        !self.all
            && self.log_dirs.is_empty()
            && self.partitions.is_empty()
            && self.checkpoints.is_empty()
            && self.log_starts.is_empty()
    }
}

fn inode(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0
    }
}

/// The live segments of a partition dir; `None` if the dir is gone.
pub(super) fn snapshot_partition(dir: &Path) -> std::io::Result<Option<PartitionState>> {
    // Stamped before the listing: a change while it runs moves the times past the stamp.
    let listed = match std::fs::symlink_metadata(dir) {
        Ok(meta) => DirStamp::of(&meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut state = PartitionState {
        listed,
        ..PartitionState::default()
    };
    let mut swaps = BTreeMap::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (base_offset, into) = match classify_partition_file(name) {
            PartitionFile::Segment {
                base_offset,
                kind: SegmentFileKind::Log,
            } => (base_offset, &mut state.segments),
            PartitionFile::Transient {
                base_offset,
                kind: SegmentFileKind::Log,
                suffix: TransientSuffix::Swap,
            } => (base_offset, &mut swaps),
            _ => continue,
        };
        // `symlink_metadata`: a link is not followed (the reader refuses it).
        match std::fs::symlink_metadata(entry.path()) {
            Ok(meta) => {
                into.insert(base_offset, LogStamp::of(&meta));
            }
            // Renamed (`.deleted`) or swapped between the listing and the stat.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    // A compaction swap renames the old `.log` away (`.deleted`) before it
    // renames `<base>.log.swap` to `<base>.log`: in between, the swap file
    // stands for the segment (the rename keeps its inode), so the swap shows
    // as one replacement, not as a deletion and a log start move.
    for (base, stamp) in swaps {
        state.segments.entry(base).or_insert(stamp);
    }
    Ok(Some(state))
}

/// [`snapshot_partition`] for a periodic rescan, which looks at every partition whether or not a notification
/// marked it: when the directory's stamp says its entries are the ones `before` listed, only the active segment
/// (the one that grows) is looked at again, not the whole directory. With 10,000 partitions at rest that is one
/// `stat` of the directory and one of its active `.log` each, instead of a listing and a `stat` of every `.log`.
pub(super) fn restat_partition(dir: &Path, before: &PartitionState) -> std::io::Result<Option<PartitionState>> {
    let now = match std::fs::symlink_metadata(dir) {
        Ok(meta) => DirStamp::of(&meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let (Some(listed), Some(now), Some((&active, _))) = (before.listed, now, before.segments.last_key_value()) else {
        return snapshot_partition(dir);
    };
    if !listed.unchanged(&now) {
        return snapshot_partition(dir);
    }
    match std::fs::symlink_metadata(dir.join(segment_file_name(active, SegmentFileKind::Log))) {
        Ok(meta) => {
            let mut state = before.clone();
            state.segments.insert(active, LogStamp::of(&meta));
            Ok(Some(state))
        }
        // Not where the listing saw it: the directory did change after all.
        Err(_) => snapshot_partition(dir),
    }
}

/// Look again, by name, for each segment of `before` that the listing `now` of `dir` lacks, and keep it in `now`
/// when a file for it still exists.
///
/// Why: a directory listing is not atomic. A compaction swap renames `<base>.log.cleaned` to `<base>.log.swap`,
/// the old `<base>.log` to `.deleted`, then `<base>.log.swap` to `<base>.log`; a rename that lands while `readdir`
/// is under way can hide the file under both names, and the segment looked deleted (a `SegmentDeleted` and a
/// `LogStartMoved`, seen in CI's `tail_source` on a real broker), which a tail would follow by dropping the
/// mirror's segment. At every instant one of those names exists, so stat-ing them in the order the swap goes
/// through (`.cleaned`, `.swap`, `.log`) finds one unless the segment is really gone (retention renames the
/// `.log` to `.deleted` with no `.cleaned` or `.swap`).
pub(super) fn recheck_missing(dir: &Path, before: &PartitionState, now: &mut PartitionState) {
    let missing: Vec<i64> = before
        .segments
        .keys()
        .filter(|b| !now.segments.contains_key(b))
        .copied()
        .collect();
    for base in missing {
        let log = segment_file_name(base, SegmentFileKind::Log);
        let names = [
            format!("{log}{}", TransientSuffix::Cleaned.suffix()),
            format!("{log}{}", TransientSuffix::Swap.suffix()),
            log,
        ];
        let found = names
            .iter()
            .find_map(|name| std::fs::symlink_metadata(dir.join(name)).ok());
        if let Some(meta) = found {
            now.segments.insert(base, LogStamp::of(&meta));
        }
    }
}

/// A log dir's live partition dirs, and the (topic, partition)s of its `-delete` dirs.
pub(super) type Listed = (Vec<(PathBuf, PartitionDirName)>, BTreeSet<(String, i32)>);

/// The live partition dirs of a log dir that `filter` selects (internal
/// topics and `-delete`/`-future`/`-stray` dirs excluded, as
/// [`discover`](crate::source::discover()) does), and the partitions that
/// have a `-delete` dir (marked for deletion).
pub(super) fn list_log_dir(log_dir: &Path, filter: &TopicFilter) -> std::io::Result<Listed> {
    let mut live = Vec::new();
    let mut deleting = BTreeSet::new();
    for entry in std::fs::read_dir(log_dir)? {
        let entry = entry?;
        let Ok(file_type) = entry.file_type() else { continue };
        if !file_type.is_dir() {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Ok(parsed) = PartitionDirName::parse(name) else {
            continue;
        };
        match parsed.kind {
            DirKind::Normal if !parsed.is_internal() && filter.matches(&parsed.topic) => {
                live.push((entry.path(), parsed));
            }
            DirKind::Delete { .. } => {
                deleting.insert((parsed.topic.clone(), parsed.partition));
            }
            _ => {}
        }
    }
    Ok((live, deleting))
}

/// The events from `old` to `new` of one partition.
pub(super) fn diff(id: &PartitionId, old: &PartitionState, new: &PartitionState, out: &mut Vec<WatchEvent>) {
    let partition = || id.clone();
    let old_active = old.segments.last_key_value().map(|(b, s)| (*b, *s));
    let new_active = new.segments.last_key_value().map(|(b, s)| (*b, *s));
    // Segments gone: retention (renamed `.deleted`), a compaction merge, or a truncation.
    for base in old.segments.keys().filter(|b| !new.segments.contains_key(b)) {
        out.push(WatchEvent::SegmentDeleted {
            partition: partition(),
            base_offset: *base,
        });
    }
    let (old_first, new_first) = (old.segments.keys().next(), new.segments.keys().next());
    if let (Some(&o), Some(&n)) = (old_first, new_first) {
        if n > o {
            out.push(WatchEvent::LogStartMoved {
                partition: partition(),
                first_base: n,
            });
        }
    }
    // Sealed segments (and the active one) swapped under the same name; or a
    // segment below the active one that was not there before (a swap whose
    // window a pass fell into without seeing the `.swap` file).
    let old_active_base = old_active.map(|(b, _)| b);
    for (base, stamp) in &new.segments {
        let replaced = match old.segments.get(base) {
            Some(before) => before.inode != stamp.inode,
            None => old_active_base.is_some_and(|a| *base < a),
        };
        if replaced {
            out.push(WatchEvent::SegmentReplaced {
                partition: partition(),
                base_offset: *base,
            });
        }
    }
    match (old_active, new_active) {
        (Some((ob, os)), Some((nb, ns))) if nb == ob && ns.inode == os.inode => {
            if ns.len > os.len {
                out.push(WatchEvent::ActiveGrew {
                    partition: partition(),
                    base_offset: nb,
                    len: ns.len,
                });
            } else if ns.len < os.len {
                out.push(WatchEvent::ActiveShrank {
                    partition: partition(),
                    base_offset: nb,
                    len: ns.len,
                    was: os.len,
                });
            }
        }
        (Some((ob, _)), Some((nb, ns))) if nb > ob => {
            out.push(WatchEvent::Rolled {
                partition: partition(),
                previous_base: Some(ob),
                active_base: nb,
            });
            if ns.len > 0 {
                out.push(WatchEvent::ActiveGrew {
                    partition: partition(),
                    base_offset: nb,
                    len: ns.len,
                });
            }
        }
        (Some((ob, os)), Some((nb, ns))) if nb < ob => {
            // A truncation removed the newest segments: the one left is active again.
            out.push(WatchEvent::ActiveShrank {
                partition: partition(),
                base_offset: nb,
                len: ns.len,
                was: os.len,
            });
        }
        (None, Some((nb, ns))) => {
            out.push(WatchEvent::Rolled {
                partition: partition(),
                previous_base: None,
                active_base: nb,
            });
            if ns.len > 0 {
                out.push(WatchEvent::ActiveGrew {
                    partition: partition(),
                    base_offset: nb,
                    len: ns.len,
                });
            }
        }
        // Same base, new inode (reported above as replaced), or no segment left.
        _ => {}
    }
}

/// Run one pass over what `dirty` names: update `state`, push the events.
pub(super) fn pass(
    state: &mut State,
    dirty: &Dirty,
    log_dirs: &[PathBuf],
    filter: &TopicFilter,
    out: &mut Vec<WatchEvent>,
) {
    state.partitions.resize_with(log_dirs.len(), HashMap::new);
    state.checkpoints.resize(log_dirs.len(), None);
    state.log_starts.resize(log_dirs.len(), None);
    for (i, log_dir) in log_dirs.iter().enumerate() {
        let relist = dirty.all || dirty.log_dirs.contains(&i);
        let known = state.partitions.get_mut(i);
        let Some(known) = known else { continue };
        let mut appeared: BTreeMap<PathBuf, PartitionId> = BTreeMap::new();
        let mut look_at: BTreeSet<PathBuf> = dirty
            .partitions
            .iter()
            .filter(|(d, _)| *d == i)
            .map(|(_, p)| p.clone())
            .collect();
        if relist {
            match list_log_dir(log_dir, filter) {
                Ok((live, deleting)) => {
                    let live_dirs: BTreeSet<&PathBuf> = live.iter().map(|(p, _)| p).collect();
                    let gone: Vec<PathBuf> = known.keys().filter(|p| !live_dirs.contains(p)).cloned().collect();
                    for dir in gone {
                        if let Some((id, _)) = known.remove(&dir) {
                            let marked = deleting.contains(&(id.topic.clone(), id.partition));
                            out.push(WatchEvent::PartitionGone {
                                partition: id,
                                marked_for_deletion: marked,
                            });
                        }
                    }
                    for (dir, name) in live {
                        if !known.contains_key(&dir) {
                            let id = PartitionId {
                                log_dir: log_dir.clone(),
                                dir: dir.clone(),
                                topic: name.topic,
                                partition: name.partition,
                            };
                            appeared.insert(dir.clone(), id);
                        } else if dirty.all {
                            look_at.insert(dir);
                        }
                    }
                }
                Err(e) => out.push(WatchEvent::Unreadable {
                    path: log_dir.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        for (dir, id) in appeared {
            match snapshot_partition(&dir) {
                Ok(Some(now)) => {
                    out.push(WatchEvent::PartitionAppeared {
                        partition: id.clone(),
                        active_base: now.segments.keys().next_back().copied(),
                        segments: now.segments.len(),
                    });
                    known.insert(dir, (id, now));
                }
                // Gone again before it was looked at: never reported.
                Ok(None) => {}
                Err(e) => out.push(WatchEvent::Unreadable {
                    path: dir,
                    reason: e.to_string(),
                }),
            }
        }
        for dir in look_at {
            // A partition dir no relist has seen yet is left to the relist its
            // creation marked (or the next rescan).
            let Some((id, before)) = known.get(&dir).cloned() else {
                continue;
            };
            // Marked by a notification: listed. Looked at only because everything is: listed if it changed.
            let marked = dirty.partitions.contains(&(i, dir.clone()));
            let looked = if marked {
                snapshot_partition(&dir)
            } else {
                restat_partition(&dir, &before)
            };
            match looked {
                Ok(Some(mut now)) => {
                    recheck_missing(&dir, &before, &mut now);
                    diff(&id, &before, &now, out);
                    if let Some(slot) = known.get_mut(&dir) {
                        slot.1 = now;
                    }
                }
                // Gone between the listing and the look: the relist its
                // removal marked (or the next rescan) reports it.
                Ok(None) => {}
                Err(e) => out.push(WatchEvent::Unreadable {
                    path: dir.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        if (dirty.all || dirty.checkpoints.contains(&i))
            && restamped(
                state.checkpoints.get_mut(i),
                &CheckpointHighWatermarks::checkpoint_path(log_dir),
            )
        {
            out.push(WatchEvent::HighWatermarksChanged {
                log_dir: log_dir.clone(),
            });
        }
        if (dirty.all || dirty.log_starts.contains(&i))
            && restamped(
                state.log_starts.get_mut(i),
                &log_dir.join(RootCheckpoint::LogStartOffset.file_name()),
            )
        {
            out.push(WatchEvent::LogStartsChanged {
                log_dir: log_dir.clone(),
            });
        }
    }
}

/// Whether the file at `path` has another stamp (length, modification time, inode) than `slot` holds; `slot` takes
/// the new one. A file replaced by rename, as the broker writes its checkpoints, always has another inode.
fn restamped(slot: Option<&mut Option<FileStamp>>, path: &Path) -> bool {
    let stamp = std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.modified().ok(), inode(&m)));
    match slot {
        Some(slot) if *slot != stamp => {
            *slot = stamp;
            true
        }
        _ => false,
    }
}
