//! The mirror root: every name segmirror keeps under it, and the readers of the state files there.
//!
//! ```text
//! <mirror-root>/<topic>-<partition>/                          Kafka's own layout and file names
//! <mirror-root>/.staging/<topic>-<partition>.<base>-<next>/   one segment version being installed from the bucket
//! <mirror-root>/.segmirror-apply.lock                         the one-applier lock (`crate::lock`), kept empty
//! <mirror-root>/.segmirror-apply.holder                       who holds it, while it is held
//! <mirror-root>/.tail/<topic>-<partition>.json                the direct applier's durable position (`crate::direct`)
//! <mirror-root>/.tail/claims/<topic>-<partition>.json         which source broker may ship the partition
//! <mirror-root>/.tail/progress/<topic>-<partition>.json       the source's progress as last reported (advisory)
//! <mirror-root>/.tail/retention/<topic>-<partition>.json      the source's log start and what is due for deletion
//! <mirror-root>/.tail/staging/<topic>-<partition>-<base>.log  a compacted replacement being received
//! <mirror-root>/.tail/replace/<topic>-<partition>.json        the journal of a replacement being installed
//! <mirror-root>/.tail/truncations/<topic>-<partition>.json    the journal of a truncation in progress
//! <mirror-root>/.tail/closed/<topic>-<partition>.bin          the active segment's closed log (`direct::kept`)
//! <mirror-root>/.closed/<topic>-<partition>/<base>.bin        each installed or sealed segment's log (`segment_log`)
//! <mirror-root>/.archive/<topic>-<partition>/                 what truncations, lineage resets and quarantines removed
//! <mirror-root>/catalog.sqlite (-wal, -shm, -journal)         a catalog placed in the root with `--catalog`
//! ```
//!
//! Why one module: the names were spread over the delivery paths, the lock and the tools, and two public
//! `STAGING_DIR` constants named two different directories (the bucket installer's `.staging` and the direct
//! applier's `.tail/staging`). Here each has one name, the constants are private, and everything else (both
//! appliers, `promote`, `segmirror status` and `verify`) builds its paths with these functions, so a reader of
//! the mirror root and its writer cannot disagree about where a record lives. The directory names are on disk and
//! stay as they are: a mirror written before reads the same.
//!
//! Every path is built from parsed, validated names only (a topic that passed Kafka's topic rules, numbers), never
//! from a string read out of a manifest or a frame, so a peer cannot steer a write outside the mirror root. The
//! mirror root is segmirror's own directory, never a broker log dir: a broker refuses to start on a directory name
//! it cannot parse (`.staging`), so [`MirrorLayout::open`] refuses a root holding `meta.properties`.
//!
//! A `<name>` below is a partition's `<topic>-<partition>` (`PartitionDirName`), of a topic already validated.
//! Not here: promotion's work directory, `.segmirror-promote/`, which lives in the broker's log dir it promotes
//! into, not in the mirror root (`promote::journal`).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use segment_format::dir::{OwnEntry, OwnKind, PartitionDirName, META_PROPERTIES_FILE};

mod records;
#[cfg(test)]
mod tests;

// The state file and the retention record are the direct applier's own (it writes and reads them under the lock),
// and so are their readers (`crate::direct::{recorded_active_segment, tailed_log_start}`) and the lag figures
// built on them (`crate::direct::tail_lags`): this module is the layer below both appliers and imports neither.
/// A state file under the root that cannot be read or does not hold what its name says. The direct applier turns
/// it into its own error (`TailError`) unchanged; this module knows no applier's errors, so both can use it.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {reason}", path.display())]
    BadState { path: PathBuf, reason: String },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// Why a directory cannot be the mirror root ([`MirrorLayout::open`]); the crate's [`Error`](crate::Error) says it
/// as `Error::Io` or `Error::MirrorIsLogDir`.
#[derive(Debug)]
pub enum LayoutError {
    /// The root could not be created.
    Io { path: PathBuf, source: std::io::Error },
    /// The root is a broker's log dir (it holds `meta.properties`).
    IsLogDir { path: PathBuf },
}

pub use records::{recorded_claim, recorded_progress, ClaimRecord, RecordedProgress, RecordedShipped};

/// The bucket installer's staging directory: one directory per segment version being downloaded and checked.
/// Public only because tests look for leftovers by name.
pub const INSTALL_STAGING_DIR: &str = ".staging";

/// The one-applier lock file (`crate::lock`). A dot file, like the staging directory, so no one takes it for a
/// partition. Public only because tests and the failover's checks name it.
pub const APPLY_LOCK_FILE: &str = ".segmirror-apply.lock";

/// Who holds the lock: `pid <pid> since <RFC 3339 time>`, while it is held.
pub const APPLY_HOLDER_FILE: &str = ".segmirror-apply.holder";

/// The direct applier's state: one state file per partition, and its sub-directories below.
const TAIL_DIR: &str = ".tail";
/// Under [`TAIL_DIR`]: one claim record per partition.
const CLAIMS_DIR: &str = "claims";
/// Under [`TAIL_DIR`]: one progress record per partition.
const PROGRESS_DIR: &str = "progress";
/// Under [`TAIL_DIR`]: one retention record per partition. A directory, so the state reader of `.tail` (which reads
/// `*.json` files only) never mistakes a record for a partition state.
const RETENTION_DIR: &str = "retention";
/// Under [`TAIL_DIR`]: compacted replacements being received (not [`INSTALL_STAGING_DIR`]: another directory).
const REPLACE_STAGING_DIR: &str = "staging";
/// Under [`TAIL_DIR`]: the install journals of replacements.
const REPLACE_JOURNAL_DIR: &str = "replace";
/// Under [`TAIL_DIR`]: the journal of a truncation in progress.
const TRUNCATION_JOURNAL_DIR: &str = "truncations";
/// Under [`TAIL_DIR`]: each partition's closed log (`segment_format::closed_log`) of its active segment.
const CLOSED_LOG_DIR: &str = "closed";
/// The extension of a closed log: a binary file, never read as a record.
const CLOSED_LOG_EXT: &str = "bin";
/// What truncations (and lineage resets, quarantines) removed, one sub-directory per partition; never deleted.
const ARCHIVE_DIR: &str = ".archive";
/// Each installed or sealed segment's log of the transactions its markers closed (`crate::segment_log`), one
/// sub-directory per partition, a file per segment.
const SEGMENT_LOG_DIR: &str = ".closed";

/// The extension of every record under [`TAIL_DIR`].
const RECORD_EXT: &str = "json";

// SQLite's files beside a catalog of the default name (`<file>-wal`, `-shm`, `-journal`).
const CATALOG_WAL: &str = "catalog.sqlite-wal";
const CATALOG_SHM: &str = "catalog.sqlite-shm";
const CATALOG_JOURNAL: &str = "catalog.sqlite-journal";

/// Every entry segmirror keeps in a mirror root beside the partitions: the one-applier lock and its holder, the
/// staging directory, the direct applier's state (`.tail/`, where all its journals, staging and progress live),
/// what truncations archived (`.archive/`), the segments' logs (`.closed/`), and a catalog placed in the root with
/// `--catalog` (with SQLite's companions). One list, next to the names' constants, so that `segmirror verify
/// MIRROR` tells the mirror's own state from a stray directory that is not ours (and that would stop a broker)
/// without a second copy of them.
pub const MIRROR_ROOT_ENTRIES: &[OwnEntry] = &[
    OwnEntry {
        name: APPLY_LOCK_FILE,
        kind: OwnKind::File,
    },
    OwnEntry {
        name: APPLY_HOLDER_FILE,
        kind: OwnKind::File,
    },
    OwnEntry {
        name: INSTALL_STAGING_DIR,
        kind: OwnKind::Dir,
    },
    OwnEntry {
        name: TAIL_DIR,
        kind: OwnKind::Dir,
    },
    OwnEntry {
        name: ARCHIVE_DIR,
        kind: OwnKind::Dir,
    },
    OwnEntry {
        name: SEGMENT_LOG_DIR,
        kind: OwnKind::Dir,
    },
    OwnEntry {
        name: segmirror_catalog::CATALOG_FILE_NAME,
        kind: OwnKind::File,
    },
    OwnEntry {
        name: CATALOG_WAL,
        kind: OwnKind::File,
    },
    OwnEntry {
        name: CATALOG_SHM,
        kind: OwnKind::File,
    },
    OwnEntry {
        name: CATALOG_JOURNAL,
        kind: OwnKind::File,
    },
];

/// `<root>/<topic>-<partition>`; `topic` must be a validated Kafka topic name.
pub fn partition_dir(root: &Path, topic: &str, partition: i32) -> PathBuf {
    root.join(PartitionDirName::new(topic, partition).dir_name())
}

/// `<root>/.segmirror-apply.lock`.
pub fn apply_lock_file(root: &Path) -> PathBuf {
    root.join(APPLY_LOCK_FILE)
}

/// `<root>/.segmirror-apply.holder`.
pub fn apply_holder_file(root: &Path) -> PathBuf {
    root.join(APPLY_HOLDER_FILE)
}

/// `<root>/.staging`.
pub(crate) fn install_staging_root(root: &Path) -> PathBuf {
    root.join(INSTALL_STAGING_DIR)
}

/// `<root>/.tail`: the direct applier's state files, each replaced by a rename on every durable step, so the
/// directory's modification time changes whenever one does (`segmirror serve` looks there before reading them).
pub fn tail_dir(root: &Path) -> PathBuf {
    root.join(TAIL_DIR)
}

/// Whether `path` names a record file (`*.json`); anything else in a record directory is a `.tmp` a crash left
/// behind (its rename never happened).
pub(crate) fn is_record(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()) == Some(RECORD_EXT)
}

fn record(dir: PathBuf, name: &str) -> PathBuf {
    dir.join(format!("{name}.{RECORD_EXT}"))
}

/// `<root>/.tail/<name>.json`: the partition's durable position.
pub(crate) fn state_file(root: &Path, name: &str) -> PathBuf {
    record(tail_dir(root), name)
}

/// `<root>/.tail/claims`.
pub(crate) fn claims_dir(root: &Path) -> PathBuf {
    tail_dir(root).join(CLAIMS_DIR)
}

/// `<root>/.tail/claims/<name>.json`.
pub(crate) fn claim_file(root: &Path, name: &str) -> PathBuf {
    record(claims_dir(root), name)
}

/// `<root>/.tail/progress`.
pub fn progress_dir(root: &Path) -> PathBuf {
    tail_dir(root).join(PROGRESS_DIR)
}

/// `<root>/.tail/progress/<name>.json`.
pub(crate) fn progress_file(root: &Path, name: &str) -> PathBuf {
    record(progress_dir(root), name)
}

/// `<root>/.tail/retention/<name>.json`.
pub(crate) fn retention_file(root: &Path, name: &str) -> PathBuf {
    record(tail_dir(root).join(RETENTION_DIR), name)
}

/// `<root>/.tail/staging/<name>-<base, 20 digits>.log`: a replacement of the segments from `base` being received.
pub(crate) fn replace_staging_file(root: &Path, name: &str, base: i64) -> PathBuf {
    tail_dir(root)
        .join(REPLACE_STAGING_DIR)
        .join(format!("{name}-{base:020}.log"))
}

/// `<root>/.tail/replace`.
pub(crate) fn replace_journal_dir(root: &Path) -> PathBuf {
    tail_dir(root).join(REPLACE_JOURNAL_DIR)
}

/// `<root>/.tail/replace/<name>.json`.
pub(crate) fn replace_journal_file(root: &Path, name: &str) -> PathBuf {
    record(replace_journal_dir(root), name)
}

/// `<root>/.tail/truncations`.
pub(crate) fn truncation_journal_dir(root: &Path) -> PathBuf {
    tail_dir(root).join(TRUNCATION_JOURNAL_DIR)
}

/// `<root>/.tail/truncations/<name>.json`.
pub(crate) fn truncation_journal_file(root: &Path, name: &str) -> PathBuf {
    record(truncation_journal_dir(root), name)
}

/// `<root>/.tail/closed/<name>.bin`: every transaction closed in the partition's active segment, as the appender
/// saw it close (`direct::kept`).
pub(crate) fn closed_log_file(root: &Path, name: &str) -> PathBuf {
    tail_dir(root)
        .join(CLOSED_LOG_DIR)
        .join(format!("{name}.{CLOSED_LOG_EXT}"))
}

/// `<root>/.closed/<name>`: the partition's segment logs (`crate::segment_log`).
pub(crate) fn segment_logs_dir(root: &Path, name: &str) -> PathBuf {
    root.join(SEGMENT_LOG_DIR).join(name)
}

/// `<root>/.closed/<name>/<base, 20 digits>.bin`: segment `base`'s log.
pub fn segment_log_file(root: &Path, name: &str, base: i64) -> PathBuf {
    segment_logs_dir(root, name).join(format!("{base:020}.{CLOSED_LOG_EXT}"))
}

/// The segment base a file name in a `.closed/<name>` directory names ([`segment_log_file`]'s), or `None` for
/// another name.
pub(crate) fn segment_log_base(file_name: &str) -> Option<i64> {
    file_name
        .strip_suffix(CLOSED_LOG_EXT)?
        .strip_suffix('.')
        .filter(|digits| digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))?
        .parse()
        .ok()
}

/// `<root>/.archive`.
pub(crate) fn archive_dir(root: &Path) -> PathBuf {
    root.join(ARCHIVE_DIR)
}

/// `<root>/.archive/<name>`: everything archived of one partition.
pub(crate) fn partition_archive_dir(root: &Path, name: &str) -> PathBuf {
    archive_dir(root).join(name)
}

/// The archive file of the offsets `[from, to)` a truncation removed, relative to the mirror root (as the catalog
/// records it): `.archive/<topic>-<partition>/<from, 20 digits>-<to, 20 digits>.log`.
pub fn archive_range_file(topic: &str, partition: i32, from: i64, to: i64) -> String {
    format!("{ARCHIVE_DIR}/{topic}-{partition}/{from:020}-{to:020}.log")
}

/// Every partition the direct applier holds a record of under `root` (a state, progress or claim record), in name
/// order. Files that are not records, or whose name is no `<topic>-<partition>`, are passed over: a reader of a
/// stopped applier's state shows what it can.
pub fn tailed_partitions(root: &Path) -> BTreeSet<(String, i32)> {
    let mut names = BTreeSet::new();
    for dir in [tail_dir(root), progress_dir(root), claims_dir(root)] {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if !is_record(&path) {
                continue;
            }
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if let Some((topic, partition)) = stem.rsplit_once('-') {
                if let Ok(partition) = partition.parse::<i32>() {
                    names.insert((topic.to_string(), partition));
                }
            }
        }
    }
    names
}

/// The mirror root and the paths below it, for the bucket installer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorLayout {
    root: PathBuf,
}

impl MirrorLayout {
    /// Use `root` (created if missing) as the mirror root. Refused if it is a broker log dir.
    pub fn open(root: &Path) -> Result<Self, LayoutError> {
        std::fs::create_dir_all(root).map_err(|source| LayoutError::Io {
            path: root.to_path_buf(),
            source,
        })?;
        if root.join(META_PROPERTIES_FILE).exists() {
            return Err(LayoutError::IsLogDir {
                path: root.to_path_buf(),
            });
        }
        Ok(MirrorLayout {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/<topic>-<partition>`; `topic` must be a validated Kafka topic name.
    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        partition_dir(&self.root, topic, partition)
    }

    /// `<root>/.staging`.
    pub fn staging_root(&self) -> PathBuf {
        install_staging_root(&self.root)
    }

    /// `<root>/.staging/<topic>-<partition>.<base>-<next>`: one directory per version, directly under the staging
    /// root. Unambiguous: a topic name may hold dots, but what follows the last one is two numbers.
    /// Flat rather than nested per partition: one directory fewer for each install to create and remove. Every
    /// directory is an inode to allocate and free, and on ext4 without a journal each allocation steps over the
    /// inodes freed in the last minute one by one (seen in profiles of many small partitions).
    pub fn staging_dir(&self, topic: &str, partition: i32, base_offset: i64, next_offset: i64) -> PathBuf {
        let partition = PartitionDirName::new(topic, partition).dir_name();
        self.staging_root()
            .join(format!("{partition}.{base_offset}-{next_offset}"))
    }
}
