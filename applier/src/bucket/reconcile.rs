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
use crate::layout::MirrorLayout;

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
mod tests {
    use super::*;

    fn installed(base: i64, size: u64, sealed: bool) -> Installed {
        Installed {
            base_offset: base,
            next_offset: base + 10,
            last_offset: base + 9,
            size,
            sha256: [0; 32],
            sealed,
            manifest_key: format!("m{base}"),
        }
    }

    fn write_segment(dir: &Path, base: i64, log_size: usize) {
        for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            let len = if kind == SegmentFileKind::Log { log_size } else { 0 };
            fs::write(
                dir.join(segment_format::dir::segment_file_name(base, kind)),
                vec![0u8; len],
            )
            .unwrap();
        }
    }

    #[test]
    fn installed_segments_must_be_on_disk_as_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("t-0");
        fs::create_dir(&dir).unwrap();
        write_segment(&dir, 0, 100);
        write_segment(&dir, 10, 50);
        let disk = scan(&dir).unwrap().unwrap();
        let ok = [installed(0, 100, true), installed(10, 50, false)];
        assert_eq!(check_installed("t-0", &dir, Some(&disk), &ok).unwrap(), None);
        // The last, unsealed segment grew on disk: an interrupted replacement.
        let grown = [installed(0, 100, true), installed(10, 40, false)];
        assert_eq!(check_installed("t-0", &dir, Some(&disk), &grown).unwrap(), Some(10));
        // A sealed or earlier segment that differs, a shrunk one, or missing files: behind the catalog.
        for bad in [
            vec![installed(0, 90, true), installed(10, 50, false)],
            vec![installed(0, 100, true), installed(10, 40, true)],
            vec![installed(0, 100, true), installed(10, 60, false)],
            vec![
                installed(0, 100, true),
                installed(10, 50, true),
                installed(20, 1, false),
            ],
        ] {
            assert!(matches!(
                check_installed("t-0", &dir, Some(&disk), &bad),
                Err(Error::DiskBehindCatalog { .. })
            ));
        }
        fs::remove_file(dir.join("00000000000000000000.index")).unwrap();
        let disk = scan(&dir).unwrap().unwrap();
        match check_installed("t-0", &dir, Some(&disk), &ok) {
            Err(Error::DiskBehindCatalog { path, base_offset, .. }) => {
                assert_eq!((path, base_offset), (dir.join("00000000000000000000.index"), 0))
            }
            other => panic!("{other:?}"),
        }
        assert!(check_installed("t-0", &dir, None, &ok).is_err());
        assert_eq!(check_installed("t-0", &dir, None, &[]).unwrap(), None);
    }

    #[test]
    fn sweep_removes_only_segments_the_catalog_does_not_list() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("t-0");
        fs::create_dir(&dir).unwrap();
        write_segment(&dir, 0, 10);
        write_segment(&dir, 10, 10);
        fs::write(dir.join("00000000000000000010.snapshot"), b"s").unwrap();
        fs::write(dir.join(LEADER_EPOCH_CHECKPOINT_FILE), b"0\n0\n").unwrap();
        fs::write(dir.join("leader-epoch-checkpoint.tmp"), b"0\n").unwrap();
        fs::write(dir.join("notes.txt"), b"mine").unwrap();
        let disk = scan(&dir).unwrap().unwrap();
        assert_eq!(disk.temp_files, [dir.join("leader-epoch-checkpoint.tmp")]);
        assert_eq!(remove_temp_files(&dir, &disk).unwrap().len(), 1);
        let removed = sweep(&dir, &BTreeSet::from([0]), None).unwrap();
        assert_eq!(removed.len(), 4);
        assert!(removed[0].ends_with("00000000000000000010.log"), "{removed:?}");
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "00000000000000000000.index",
                "00000000000000000000.log",
                "00000000000000000000.timeindex",
                "leader-epoch-checkpoint",
                "notes.txt"
            ]
        );
        assert!(sweep(&tmp.path().join("absent"), &BTreeSet::new(), None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn sweep_keeps_the_log_end_snapshot_and_removes_stale_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("t-0");
        fs::create_dir(&dir).unwrap();
        write_segment(&dir, 0, 10);
        // A stale log-end snapshot of a shorter version, the installed one at the log end (20), and an interrupted
        // install of a segment starting there.
        fs::write(dir.join("00000000000000000007.snapshot"), b"old").unwrap();
        fs::write(dir.join("00000000000000000020.snapshot"), b"end").unwrap();
        fs::write(dir.join("00000000000000000020.log"), b"partial").unwrap();
        let removed = sweep(&dir, &BTreeSet::from([0]), Some(20)).unwrap();
        let mut names: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["00000000000000000007.snapshot", "00000000000000000020.log"]);
        assert_eq!(fs::read(dir.join("00000000000000000020.snapshot")).unwrap(), b"end");
        // Without a log end there (the catalog's end moved on), it is a leftover like any other.
        let removed = sweep(&dir, &BTreeSet::from([0]), Some(30)).unwrap();
        assert_eq!(removed, [dir.join("00000000000000000020.snapshot")]);
    }

    #[test]
    fn staging_is_cleared_and_lineage_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let layout = MirrorLayout::open(tmp.path()).unwrap();
        assert!(!clear_staging(&layout).unwrap());
        fs::create_dir_all(layout.staging_dir("t", 0, 0, 10)).unwrap();
        fs::write(layout.staging_dir("t", 0, 0, 10).join("x"), b"x").unwrap();
        assert!(clear_staging(&layout).unwrap());
        assert!(!layout.staging_root().exists());

        let dir = layout.partition_dir("t", 0);
        fs::create_dir_all(&dir).unwrap();
        PartitionMetadata::new(Uuid([3; 16]))
            .write(&dir.join(PARTITION_METADATA_FILE))
            .unwrap();
        let disk = scan(&dir).unwrap().unwrap();
        assert!(check_lineage(&dir, &disk, &Uuid([3; 16])).is_ok());
        assert!(matches!(
            check_lineage(&dir, &disk, &Uuid([4; 16])),
            Err(Error::ForeignPartitionDir { .. })
        ));
    }
}
