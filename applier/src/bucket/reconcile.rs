//! Disk against catalog, after whatever happened to the last run.
//!
//! The install protocol makes one promise: **the disk may be ahead of the catalog, never behind.** A crash leaves
//! at most (a) a staging directory, (b) a `*.tmp` of an atomic rewrite, (c) files of a version renamed into the
//! partition directory that the catalog does not list yet: some of a new segment's files, or a longer version of
//! the last segment partly or wholly renamed over the installed one (its `.log` first). Reconciling:
//! - (a) and (b) are removed ([`clear_staging`], [`remove_temp_files`]);
//! - for (c), nothing is decided here: the plan installs the current manifest of that segment, and the install
//!   takes every file already on disk with the manifest's size and SHA-256 instead of downloading it — the
//!   interrupted version is **adopted**. Files at segments the run did not install are then **removed**
//!   ([`sweep`]), so the partition directory ends up holding exactly what the catalog lists;
//! - every segment the catalog lists must be on disk as recorded ([`check_installed`]); the only difference
//!   allowed is the last, unsealed segment's `.log` being longer (an interrupted replacement, case (c)). Anything
//!   else means the directory was changed behind segmirror's back (or `--mirror` names another directory), and the
//!   partition is left alone with [`Error::DiskBehindCatalog`].
//!
//! Checking an installed segment costs a `stat`, not a read: hashing every installed byte on each run would not
//! scale, and the catalog commit happens only after the data is durable, so size is what a crash can change.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use segment_format::dir::{
    classify_partition_file, PartitionFile, SegmentFileKind, LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE,
};
use segment_format::durable::fsync_dir;
use segment_format::partition_metadata::{PartitionMetadata, Uuid};

use super::plan::Installed;
use crate::error::{Error, Result};
use crate::mirror::MirrorLayout;

/// Remove the whole staging directory of an earlier run. One applier runs per mirror root, so anything there is a
/// leftover. Returns whether there was one.
pub(crate) fn clear_staging(layout: &MirrorLayout) -> Result<bool> {
    let staging = layout.staging_root();
    match fs::remove_dir_all(&staging) {
        Ok(()) => {
            fsync_dir(layout.root())?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&staging, e)),
    }
}

/// What a partition directory holds, as far as the applier cares.
#[derive(Debug, Default)]
pub(crate) struct DiskPartition {
    /// Segment files (and producer snapshots) by base offset and kind, with their sizes.
    pub segments: BTreeMap<i64, BTreeMap<SegmentFileKind, (PathBuf, u64)>>,
    /// `partition.metadata.tmp` / `leader-epoch-checkpoint.tmp`: an atomic rewrite the applier did not finish.
    pub temp_files: Vec<PathBuf>,
    /// The topic id in `partition.metadata`, if the file exists.
    pub topic_id: Option<Uuid>,
}

/// List `dir`; `None` if it does not exist.
pub(crate) fn scan(dir: &Path) -> Result<Option<DiskPartition>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut disk = DiskPartition::default();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let meta = entry.metadata().map_err(|e| Error::io(&path, e))?;
        if !meta.is_file() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        match classify_partition_file(&name) {
            PartitionFile::Segment { base_offset, kind } => {
                disk.segments
                    .entry(base_offset)
                    .or_default()
                    .insert(kind, (path, meta.len()));
            }
            PartitionFile::Temp { target }
                if target == PARTITION_METADATA_FILE || target == LEADER_EPOCH_CHECKPOINT_FILE =>
            {
                disk.temp_files.push(path)
            }
            PartitionFile::PartitionMetadata => disk.topic_id = Some(PartitionMetadata::read(&path)?.topic_id),
            _ => {}
        }
    }
    disk.temp_files.sort();
    Ok(Some(disk))
}

/// Refuse a directory tagged with another topic id than the lineage being applied.
pub(crate) fn check_lineage(dir: &Path, disk: &DiskPartition, topic_id: &Uuid) -> Result<()> {
    match disk.topic_id {
        Some(found) if found != *topic_id => Err(Error::ForeignPartitionDir {
            path: dir.to_path_buf(),
            found: found.to_string(),
            expected: topic_id.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Remove the leftover `*.tmp` files of atomic rewrites; returns them.
pub(crate) fn remove_temp_files(dir: &Path, disk: &DiskPartition) -> Result<Vec<PathBuf>> {
    for path in &disk.temp_files {
        fs::remove_file(path).map_err(|e| Error::io(path, e))?;
    }
    if !disk.temp_files.is_empty() {
        fsync_dir(dir)?;
    }
    Ok(disk.temp_files.clone())
}

/// Every installed segment is on disk as the catalog records it. Returns the base of the last segment when its
/// `.log` differs (an interrupted replacement by a longer version, which the plan must then install again).
pub(crate) fn check_installed(
    partition: &str,
    dir: &Path,
    disk: Option<&DiskPartition>,
    installed: &[Installed],
) -> Result<Option<i64>> {
    let mut dirty = None;
    for (i, s) in installed.iter().enumerate() {
        let behind = |path: PathBuf, reason: String| Error::DiskBehindCatalog {
            partition: partition.to_string(),
            base_offset: s.base_offset,
            path,
            reason,
        };
        let files = disk.and_then(|d| d.segments.get(&s.base_offset));
        for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            if !files.is_some_and(|f| f.contains_key(&kind)) {
                let name = segment_format::dir::segment_file_name(s.base_offset, kind);
                return Err(behind(dir.join(name), "the file is missing".into()));
            }
        }
        let Some((log, size)) = files.and_then(|f| f.get(&SegmentFileKind::Log)) else {
            continue;
        };
        if *size == s.size {
            continue;
        }
        let last = i + 1 == installed.len();
        if last && !s.sealed && *size > s.size {
            dirty = Some(s.base_offset);
        } else {
            return Err(behind(
                log.clone(),
                format!("it is {size} bytes, the catalog recorded {}", s.size),
            ));
        }
    }
    Ok(dirty)
}

/// Remove every segment file at a base offset not in `installed` (an interrupted install the run did not adopt),
/// except the producer snapshot at `log_end` (the installed log-end snapshot: legal in Kafka, and the state at that
/// offset whichever version wrote it), then fsync the directory. Stale log-end snapshots of shorter versions lie at
/// no installed base and are removed here too. Returns the removed paths.
pub(crate) fn sweep(dir: &Path, installed: &BTreeSet<i64>, log_end: Option<i64>) -> Result<Vec<PathBuf>> {
    let Some(disk) = scan(dir)? else {
        return Ok(Vec::new());
    };
    let mut removed = Vec::new();
    for (base, files) in &disk.segments {
        if installed.contains(base) {
            continue;
        }
        // The .log first: a crash halfway leaves indexes without a .log (which Kafka ignores), never the reverse.
        let mut paths: Vec<&PathBuf> = files
            .iter()
            .filter(|(kind, _)| !(Some(*base) == log_end && **kind == SegmentFileKind::Snapshot))
            .map(|(_, (p, _))| p)
            .collect();
        paths.sort_by_key(|p| p.extension().is_none_or(|e| e != "log"));
        for path in paths {
            fs::remove_file(path).map_err(|e| Error::io(path, e))?;
            removed.push(path.clone());
        }
    }
    if !removed.is_empty() {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests;
