//! Where the applier puts things under its mirror root.
//!
//! ```text
//! <mirror-root>/<topic>-<partition>/                       Kafka's own layout and file names
//! <mirror-root>/.staging/<topic>-<partition>.<base>-<next>/   one segment version being downloaded and checked
//! ```
//!
//! Every path is built here from parsed, validated names only (a topic that passed Kafka's topic rules, numbers),
//! never from a string read out of a manifest, so a bucket cannot steer a write outside the mirror root. The mirror
//! root is segmirror's own directory, never a broker log dir: a broker refuses to start on a directory name it
//! cannot parse (`.staging`), so [`MirrorLayout::open`] refuses a root holding `meta.properties`.

use std::path::{Path, PathBuf};

use segment_format::dir::{OwnEntry, OwnKind, PartitionDirName, META_PROPERTIES_FILE};

use crate::error::{Error, Result};
use crate::lock::{APPLY_HOLDER_FILE, APPLY_LOCK_FILE};
use crate::tail::{ARCHIVE_DIR, TAIL_STATE_DIR};

/// Name of the staging directory under the mirror root.
pub const STAGING_DIR: &str = ".staging";

/// Every entry segmirror keeps in a mirror root beside the partitions: the one-applier lock and its holder, the
/// staging directory, the tail appender's state (`.tail/`, where all its journals, staging and progress live) and
/// what truncations archived (`.archive/`), and a catalog placed in the root with `--catalog` (with SQLite's
/// companions). One list, next to the names' constants, so that `segmirror verify MIRROR` tells the mirror's
/// own state from a stray directory that is not ours (and that would stop a broker) without a second copy of them.
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
        name: STAGING_DIR,
        kind: OwnKind::Dir,
    },
    OwnEntry {
        name: TAIL_STATE_DIR,
        kind: OwnKind::Dir,
    },
    OwnEntry {
        name: ARCHIVE_DIR,
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

// SQLite's files beside a catalog of the default name (`<file>-wal`, `-shm`, `-journal`).
const CATALOG_WAL: &str = "catalog.sqlite-wal";
const CATALOG_SHM: &str = "catalog.sqlite-shm";
const CATALOG_JOURNAL: &str = "catalog.sqlite-journal";

/// The mirror root and the paths below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorLayout {
    root: PathBuf,
}

impl MirrorLayout {
    /// Use `root` (created if missing) as the mirror root. Refused if it is a broker log dir.
    pub fn open(root: &Path) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        if root.join(META_PROPERTIES_FILE).exists() {
            return Err(Error::MirrorIsLogDir {
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
        self.root.join(PartitionDirName::new(topic, partition).dir_name())
    }

    /// `<root>/.staging`.
    pub fn staging_root(&self) -> PathBuf {
        self.root.join(STAGING_DIR)
    }

    /// `<root>/.staging/<topic>-<partition>.<base>-<next>`: one directory per version, directly under the staging
    /// root (issue 12). Unambiguous: a topic name may hold dots, but what follows the last one is two numbers.
    /// Flat rather than nested per partition: one directory fewer for each install to create and remove. Every
    /// directory is an inode to allocate and free, and on ext4 without a journal each allocation steps over the
    /// inodes freed in the last minute one by one (seen in profiles of many small partitions).
    pub fn staging_dir(&self, topic: &str, partition: i32, base_offset: i64, next_offset: i64) -> PathBuf {
        let partition = PartitionDirName::new(topic, partition).dir_name();
        self.staging_root()
            .join(format!("{partition}.{base_offset}-{next_offset}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_kafka_names() {
        let dir = tempfile::tempdir().unwrap();
        let layout = MirrorLayout::open(&dir.path().join("mirror")).unwrap();
        assert!(layout.root().is_dir());
        assert_eq!(layout.partition_dir("orders", 3), dir.path().join("mirror/orders-3"));
        assert_eq!(
            layout.staging_dir("orders", 3, 100, 250),
            dir.path().join("mirror/.staging/orders-3.100-250")
        );
    }

    #[test]
    fn the_root_entries_name_the_catalogs_companions() {
        for suffix in ["-wal", "-shm", "-journal"] {
            let name = format!("{}{suffix}", segmirror_catalog::CATALOG_FILE_NAME);
            assert!(MIRROR_ROOT_ENTRIES.iter().any(|e| e.name == name), "{name}");
        }
    }

    #[test]
    fn a_broker_log_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(META_PROPERTIES_FILE), b"version=1\n").unwrap();
        assert!(matches!(
            MirrorLayout::open(dir.path()),
            Err(Error::MirrorIsLogDir { path }) if path == dir.path()
        ));
    }
}
