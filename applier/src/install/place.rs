//! Step 4 of the install protocol: the staged files renamed into the partition directory in an order that keeps it
//! loadable after a crash at any point, and the directory fsynced once for all of them (see [`place`]).

use std::fs;
use std::path::{Path, PathBuf};

use segment_format::checkpoint::leader_epoch_checkpoint_path;
use segment_format::dir::{classify_partition_file, PartitionFile, SegmentFileKind};
use segment_format::durable::fsync_dir;

use super::Source;
use crate::error::{Error, Result};

/// What the placed version is to the partition, which decides the rename order and when files of the segment the
/// version does not have are removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// A segment the partition does not hold yet: stale files first, the `.log` last.
    NewSegment,
    /// A longer version of the installed segment: the `.log` first, stale files after.
    Replacement,
}

impl Placement {
    /// A replacement when the version `replaces` the installed segment at its base.
    pub(crate) fn of(replaces: bool) -> Self {
        if replaces {
            Placement::Replacement
        } else {
            Placement::NewSegment
        }
    }
}

/// Rename order of a new segment: the `.log` last, so it never appears without its indexes.
const NEW_SEGMENT_ORDER: [SegmentFileKind; 5] = [
    SegmentFileKind::Snapshot,
    SegmentFileKind::TxnIndex,
    SegmentFileKind::TimeIndex,
    SegmentFileKind::Index,
    SegmentFileKind::Log,
];

/// Rename order of a longer version of the installed segment: the `.log` first (old indexes stay correct for it).
const REPLACEMENT_ORDER: [SegmentFileKind; 5] = [
    SegmentFileKind::Log,
    SegmentFileKind::Index,
    SegmentFileKind::TimeIndex,
    SegmentFileKind::TxnIndex,
    SegmentFileKind::Snapshot,
];

/// Step 4: rename the staged files of the version `(base, next)` into `dir` in the protocol's order, then its
/// log-end snapshot `end` (a snapshot at the log end is legal whatever else is there), remove files of that segment
/// the version does not have and the stale log-end snapshots of shorter versions (offsets strictly inside
/// `(base, next)`: nothing else the applier installs lives there), rename the staged `leader-epoch-checkpoint`
/// (already fsynced) over the partition's, and fsync the directory once for all of it. `after_rename(n)` runs
/// after the `n`-th segment file's rename. A crash before the catalog records the version leaves at most files the
/// next run's sweep or reinstall replaces.
///
/// The checkpoint is renamed after the segment's files and made durable by the same directory fsync, not by one of
/// its own after them (one fsync fewer per version whose epochs change, a third of a small partition's directory
/// fsyncs). A crash before that fsync leaves the old checkpoint or the new one, and the catalog does not record the
/// version either way; the rerun reinstalls it and merges the same epochs again. Only a file system that persisted
/// a later rename in a directory without an earlier one could leave the new checkpoint with the old segments: an
/// epoch starting past the log end, which a broker drops at load (`LogLoader` truncates the epoch cache to the log
/// end) and the rerun's install covers.
pub(super) fn place(
    dir: &Path,
    (base, next): (i64, i64),
    files: &[(SegmentFileKind, Source, String)],
    end: Option<&(Source, String)>,
    placement: Placement,
    checkpoint: Option<&Path>,
    after_rename: &dyn Fn(u32) -> Result<()>,
) -> Result<()> {
    let order = match placement {
        Placement::Replacement => REPLACEMENT_ORDER,
        Placement::NewSegment => NEW_SEGMENT_ORDER,
    };
    // Files of this base the version does not have (a kind an older, interrupted version had): not part of it.
    let stale: Vec<PathBuf> = SegmentFileKind::ALL
        .into_iter()
        .filter(|k| !files.iter().any(|(kind, _, _)| kind == k))
        .map(|k| dir.join(segment_format::dir::segment_file_name(base, k)))
        .filter(|p| p.exists())
        .collect();
    let remove_stale = || -> Result<()> {
        for path in &stale {
            fs::remove_file(path).map_err(|e| Error::io(path, e))?;
        }
        Ok(())
    };
    if placement == Placement::NewSegment {
        remove_stale()?;
    }
    let mut renamed = 0;
    for kind in order {
        let Some((_, Source::Fetch(staged), name)) = files.iter().find(|(k, _, _)| *k == kind) else {
            continue;
        };
        let target = dir.join(name);
        fs::rename(staged, &target).map_err(|e| Error::io(&target, e))?;
        renamed += 1;
        after_rename(renamed)?;
    }
    if let Some((Source::Fetch(staged), name)) = end {
        let target = dir.join(name);
        fs::rename(staged, &target).map_err(|e| Error::io(&target, e))?;
        renamed += 1;
        after_rename(renamed)?;
    }
    if placement == Placement::Replacement {
        remove_stale()?;
    }
    for path in stale_end_snapshots(dir, base, next)? {
        fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
    }
    if let Some(staged) = checkpoint {
        let target = leader_epoch_checkpoint_path(dir);
        fs::rename(staged, &target).map_err(|e| Error::io(&target, e))?;
    }
    fsync_dir(dir)?;
    Ok(())
}

/// Producer snapshots in `dir` at offsets strictly between `base` and `next`: log-end snapshots of shorter versions
/// of the segment at `base`, stale once a longer one is placed.
pub(super) fn stale_end_snapshots(dir: &Path, base: i64, next: i64) -> Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if let PartitionFile::Segment {
            base_offset,
            kind: SegmentFileKind::Snapshot,
        } = classify_partition_file(&name)
        {
            if base < base_offset && base_offset < next {
                stale.push(entry.path());
            }
        }
    }
    Ok(stale)
}
