//! Reading one partition directory: its segments in offset order, each with
//! what bounding it needs (the next segment's base offset, which makes it
//! sealed; the producer snapshots at and after its base), and the partition's
//! leader epochs.
//!
//! This is a listing taken at one moment; a broker keeps rolling, compacting
//! and deleting segments after it. A driver therefore reads the partition
//! again whenever a segment turns out to have changed ([`super::bound`] says
//! so with `Outcome::Changed`), and a tail driver reads it again to notice
//! rolls: the segment that was active is then followed by another one, and
//! is sealed.
//!
//! What makes the partition unshippable as a whole is refused here, with the
//! findings: an entry named like a Kafka file that is not a regular file (a
//! FIFO, socket, device or symlink stands for data that cannot be read —
//! never opened, never followed — so shipping the segments around it would
//! leave a hole), and a corrupt `leader-epoch-checkpoint` (the manifests carry
//! the epochs). Blocking; async callers run it in `spawn_blocking`.

use std::path::{Path, PathBuf};

use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint};
use segment_format::dir::{PartitionDir, SegmentFiles};
use segment_format::report::{Finding, Severity};
use segment_format::{Defect, Error};

/// One segment of a [`PartitionView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentView {
    /// The segment's files.
    pub files: SegmentFiles,
    /// The next segment's base offset; `None` for the active (newest) segment.
    pub next_base: Option<i64>,
    /// The producer snapshot at the segment's base offset, if there is one.
    pub snapshot: Option<PathBuf>,
    /// For the active segment only: the snapshots at offsets after its base
    /// (one at the end of what is shipped is the log-end snapshot), offset order.
    pub later_snapshots: Vec<(i64, PathBuf)>,
}

impl SegmentView {
    /// The segment's base offset.
    pub fn base_offset(&self) -> i64 {
        self.files.base_offset
    }

    /// Is this a sealed segment (one follows it)?
    pub fn is_sealed(&self) -> bool {
        self.next_base.is_some()
    }
}

/// A partition directory as listed at one moment.
#[derive(Debug, Clone)]
pub struct PartitionView {
    /// The directory.
    pub dir: PathBuf,
    /// Its segments in offset order; the last is the active one.
    pub segments: Vec<SegmentView>,
    /// Its `leader-epoch-checkpoint` (empty if there is none).
    pub epochs: Vec<EpochEntry>,
}

impl PartitionView {
    /// The log start offset a broker would load: the larger of the log dir's
    /// `log-start-offset-checkpoint` entry and the first segment's base
    /// offset (0 for an empty partition without a checkpoint entry).
    pub fn log_start_offset(&self, checkpoint: Option<i64>) -> i64 {
        let first_base = self.segments.first().map(SegmentView::base_offset);
        match (checkpoint, first_base) {
            (Some(c), Some(f)) => c.max(f),
            (c, f) => c.or(f).unwrap_or(0),
        }
    }

    /// The active (newest) segment, if the partition has any.
    pub fn active(&self) -> Option<&SegmentView> {
        self.segments.last()
    }
}

/// What reading a partition came to.
#[derive(Debug, Clone)]
pub enum PartitionRead {
    /// Listed.
    View(PartitionView),
    /// Not shippable as a whole: the error findings (see the module doc).
    Refused(Vec<Finding>),
}

/// List the partition at `dir` and read its leader epochs (see the module doc).
/// `Err`: the directory or the checkpoint could not be read at all.
pub fn read_partition(dir: &Path) -> Result<PartitionRead, Error> {
    let listed = PartitionDir::open(dir)?;
    let unreadable: Vec<Finding> = listed
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error && matches!(f.defect, Defect::NotRegularFile { .. }))
        .cloned()
        .collect();
    if !unreadable.is_empty() {
        return Ok(PartitionRead::Refused(unreadable));
    }
    let epochs = match read_epochs(listed.leader_epoch_checkpoint.as_deref())? {
        Ok(epochs) => epochs,
        Err(findings) => return Ok(PartitionRead::Refused(findings)),
    };
    let segments = listed
        .segments
        .iter()
        .enumerate()
        .map(|(i, segment)| {
            let next_base = listed.segments.get(i + 1).map(|s| s.base_offset);
            let snapshot = listed
                .snapshots
                .iter()
                .find(|s| s.offset == segment.base_offset)
                .map(|s| s.path.clone());
            let later_snapshots = match next_base {
                Some(_) => Vec::new(),
                None => listed
                    .snapshots
                    .iter()
                    .filter(|s| s.offset > segment.base_offset)
                    .map(|s| (s.offset, s.path.clone()))
                    .collect(),
            };
            SegmentView {
                files: segment.clone(),
                next_base,
                snapshot,
                later_snapshots,
            }
        })
        .collect();
    Ok(PartitionRead::View(PartitionView {
        dir: dir.to_path_buf(),
        segments,
        epochs,
    }))
}

/// The partition's leader epochs; `Ok(Err)`: a corrupt checkpoint, with the
/// findings. A checkpoint that vanished after the listing counts as absent.
fn read_epochs(path: Option<&Path>) -> Result<Result<Vec<EpochEntry>, Vec<Finding>>, Error> {
    let Some(path) = path else {
        return Ok(Ok(Vec::new()));
    };
    match LeaderEpochCheckpoint::read(path) {
        Ok(cp) => {
            let errors: Vec<Finding> = cp
                .check(path)
                .into_iter()
                .filter(|f| f.severity == Severity::Error)
                .collect();
            if errors.is_empty() {
                Ok(Ok(cp.entries))
            } else {
                Ok(Err(errors))
            }
        }
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(Ok(Vec::new())),
        Err(e @ Error::Io { .. }) => Err(e),
        Err(e) => Ok(Err(vec![Finding::from_error(&e)])),
    }
}
