//! segmirror's catalog: the applier's durable memory, in one SQLite file.
//!
//! It records the **links** (a source store to mirror from, which topics and groups), the **mirror partitions** each
//! link feeds (with the source topic ID that is their lineage), the **segments** shipped, validated and installed
//! into each partition, and an append-only **event** log for operators. `segmirror status` reads it; nothing but
//! this crate writes SQLite.
//!
//! # Invariants
//! - Every state change is ONE transaction, and the applier calls it only after the data it describes is durable on
//!   disk, so after a crash the disk may be ahead of the catalog, never behind. [`Catalog::mark_installed`] updates
//!   the segment, the partition's installed end offset and the event log together or not at all.
//! - Installed segments of a partition never overlap and are installed in offset order; the last one may be replaced
//!   by a newer, longer version of itself (a grown active segment) until it is sealed.
//! - A lineage break (the source topic was recreated: a different source topic ID) is reported as data
//!   ([`Upsert::LineageBreak`], [`Error::LineageBreak`]); it is never merged into the recorded lineage.
//! - A promoted partition is never written again ([`Error::Promoted`]): it belongs to a real broker now.
//! - A catalog belongs to one mirror root, which it records; another root is refused
//!   ([`Error::MirrorRootMismatch`], see [`Catalog::bind_mirror_root`]).
//! - A database written by a newer segmirror (higher `user_version`) is refused untouched ([`Error::SchemaTooNew`]).
//!
//! # Durability and concurrency
//! WAL journaling with `synchronous=FULL` (a commit survives power loss; readers such as `segmirror status` never block
//! the applier), foreign keys on, and a busy timeout ([`BUSY_TIMEOUT`]) for the rare moment two processes write.
//! Writes take the lock up front (`BEGIN IMMEDIATE`), so a read-then-write transaction cannot deadlock with another
//! writer. A crash at any point leaves the last committed state; SQLite's journal makes the rest.
//!
//! # Sync API
//! The API is synchronous (rusqlite). [`Catalog`] is `Send` but not `Sync`: async callers move it into
//! `tokio::task::spawn_blocking` (or keep it on a dedicated thread) rather than calling it on a runtime worker, since
//! every commit waits for an fsync.

mod error;
mod event;
mod failover;
mod follow;
mod key;
mod lineage;
mod link;
pub mod link_lifecycle;
mod link_meta;
mod link_state;
mod mirror_root;
mod partition;
mod path;
mod promotion;
mod replicas;
mod schema;
mod segment;
mod served_offsets;
mod status;
mod truncation;

use std::path::Path;

use rusqlite::Connection;

pub use error::{ConflictReason, Entity, Error, Location, ReplacementRefusal, Result, UnknownValue};
pub use event::{Event, EventKind, Subject};
pub use failover::FailoverStep;
pub use follow::{ReplaceOutcome, Replacement, RetentionReceipt};
pub use key::{PartitionId, PartitionKey};
pub use lineage::PendingLineage;
pub use link::{Link, LinkEnds, LinkSpec, PeerLink, Transport, DIRECT_URL_PREFIX};
pub use link_meta::{LinkOffset, RecordedMeta};
pub use link_state::LinkState;
pub use mirror_root::{recorded_mirror_root, MirrorBinding};
pub use partition::{MirrorPartition, PartitionState, PartitionUpsert, Upsert};
pub use path::{
    canonical_mirror_root, catalogs_in, default_catalog_for_mirror, default_catalog_path, default_data_dir,
    mirror_catalog_path, CATALOG_FILE_NAME, MIRRORS_DIR, ROOT_HASH_HEX_DIGITS, ROOT_NAME_MAX_CHARS,
};
pub use promotion::PromotionRecord;
pub use schema::{BUSY_TIMEOUT, SCHEMA_VERSION};

/// Pause before opening a catalog again after a busy collision (see [`Catalog::open`]): about one short setup
/// transaction of the other process.
const OPEN_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(20);
pub use segment::{
    InstallOutcome, InstallReceipt, PendingOutcome, Preceded, SegmentRecord, SegmentState, SegmentVersion,
};
pub use served_offsets::ServedOffset;
pub use status::{LinkStatus, PartitionStatus, Status};
pub use truncation::{TruncationKind, TruncationRecord};

/// An open catalog. One per process is enough; see the crate docs for the sync API and durability.
#[derive(Debug)]
pub struct Catalog {
    conn: Connection,
    location: Location,
}

impl Catalog {
    /// Opens (creating if needed, with its parent directories) the catalog at `path` and migrates it to
    /// [`SCHEMA_VERSION`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| Error::CreateDir {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let location = Location::File(path.to_path_buf());
        // Two processes opening a new catalog at once (two `apply`s started together on a fresh mirror) can meet
        // SQLITE_BUSY where SQLite does not call the busy handler (switching a new file to WAL, or a lock upgrade it
        // refuses to avoid a deadlock). Such a collision clears as soon as the other side's short setup commits, so
        // the whole open is tried again, for at most BUSY_TIMEOUT in all.
        let started = std::time::Instant::now();
        loop {
            let conn = Connection::open(path).map_err(|source| Error::Open {
                path: location.clone(),
                source,
            })?;
            match Self::prepare(conn, location.clone()) {
                Err(e) if e.is_transient() && started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(OPEN_RETRY_DELAY);
                }
                done => return done,
            }
        }
    }

    /// Opens a private in-memory catalog (for tests and dry runs). It has no WAL; everything else is as on disk.
    pub fn open_in_memory() -> Result<Self> {
        let location = Location::InMemory;
        let conn = Connection::open_in_memory().map_err(|source| Error::Open {
            path: location.clone(),
            source,
        })?;
        Self::prepare(conn, location)
    }

    fn prepare(mut conn: Connection, location: Location) -> Result<Self> {
        schema::prepare(&mut conn, &location)?;
        Ok(Catalog { conn, location })
    }

    /// Where this catalog lives.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The schema version of the open database (equal to [`SCHEMA_VERSION`] once opened).
    pub fn schema_version(&self) -> Result<u32> {
        Ok(self.conn.query_row("PRAGMA user_version", [], |row| row.get(0))?)
    }

    /// SQLite's `data_version`: changes when another connection commits to the database, so a reader polling the
    /// catalog knows whether anything can have changed since its last read without reading it.
    pub fn data_version(&self) -> Result<i64> {
        Ok(self.conn.query_row("PRAGMA data_version", [], |row| row.get(0))?)
    }

    /// SQLite's journal mode for this database, lower-case (`"wal"` for a file catalog, `"memory"` in memory).
    pub fn journal_mode(&self) -> Result<String> {
        let mode: String = self.conn.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
        Ok(mode.to_ascii_lowercase())
    }
}

/// Declares a state enum stored as lower-case text: `as_str`, `Display`, and rusqlite conversions. An unknown text
/// read back (a hand-edited database) is a conversion error, not a panic.
macro_rules! text_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
        #[serde(rename_all = "snake_case")]
        $vis enum $name { $($(#[$vmeta])* $variant,)+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The text stored in the catalog and shown to users.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text,)+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::error::UnknownValue;
            fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::error::UnknownValue { kind: stringify!($name), text: other.to_owned() }),
                }
            }
        }

        impl rusqlite::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                value
                    .as_str()?
                    .parse()
                    .map_err(|e: $crate::error::UnknownValue| rusqlite::types::FromSqlError::Other(Box::new(e)))
            }
        }
    };
}
pub(crate) use text_enum;

#[cfg(test)]
mod source_cluster_tests;
#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Catalog>();
        assert_send::<Error>();
    }

    #[test]
    fn busy_and_locked_are_transient_and_nothing_else_is() {
        let sqlite = |code| Error::Sqlite(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None));
        assert!(sqlite(rusqlite::ffi::SQLITE_BUSY).is_transient());
        assert!(sqlite(rusqlite::ffi::SQLITE_LOCKED).is_transient());
        assert!(!sqlite(rusqlite::ffi::SQLITE_CONSTRAINT).is_transient());
        assert!(!sqlite(rusqlite::ffi::SQLITE_IOERR).is_transient());
        assert!(!Error::NotFound {
            entity: Entity::Link("x".into())
        }
        .is_transient());
    }

    #[test]
    fn a_locked_database_times_out_as_transient() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let mut cat = Catalog::open(&path).unwrap();
        cat.conn.busy_timeout(std::time::Duration::from_millis(50)).unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let err = cat.create_link(&test_support::link_spec("l")).unwrap_err();
        assert!(err.is_transient(), "{err:?}");
        other.execute_batch("ROLLBACK").unwrap();
        cat.create_link(&test_support::link_spec("l")).unwrap();
    }

    #[test]
    fn file_catalog_uses_wal_and_creates_parent_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/catalog.sqlite");
        let cat = Catalog::open(&path).unwrap();
        assert!(path.exists());
        assert_eq!(cat.journal_mode().unwrap(), "wal");
        assert_eq!(cat.schema_version().unwrap(), SCHEMA_VERSION);
        assert_eq!(cat.location(), &Location::File(path));
    }

    #[test]
    fn reopening_keeps_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let id;
        {
            let mut cat = Catalog::open(&path).unwrap();
            cat.create_link(&test_support::link_spec("l")).unwrap();
            let key = PartitionKey::new("l", "orders", 3);
            id = test_support::created(cat.upsert_partition(&key, "src-A", 0).unwrap()).id;
            cat.mark_installed(id, "src-A", &test_support::seg(0, 100)).unwrap();
        }
        let cat = Catalog::open(&path).unwrap();
        assert_eq!(cat.link("l").unwrap().state, LinkState::Active);
        let p = cat.partition_by_id(id).unwrap();
        assert_eq!(p.installed_end_offset, Some(100));
        assert_eq!(p.source_topic_id, "src-A");
        assert_eq!(cat.installed_segments(id).unwrap().len(), 1);
    }

    #[test]
    fn newer_schema_on_disk_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        drop(Catalog::open(&path).unwrap());
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        }
        let err = Catalog::open(&path).unwrap_err();
        match &err {
            Error::SchemaTooNew {
                path: p,
                found,
                supported,
            } => {
                assert_eq!(p, &Location::File(path.clone()));
                assert_eq!((*found, *supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains(&format!("schema version {}", SCHEMA_VERSION + 1)), "{msg}");
        assert!(msg.contains(&format!("version {SCHEMA_VERSION} that")), "{msg}");
        let conn = Connection::open(&path).unwrap();
        let v: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION + 1);
    }

    #[test]
    fn a_second_connection_sees_committed_state_while_the_first_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let mut writer = Catalog::open(&path).unwrap();
        let reader = Catalog::open(&path).unwrap();
        writer.create_link(&test_support::link_spec("l")).unwrap();
        assert_eq!(reader.links().unwrap().len(), 1);
    }

    #[test]
    fn many_opens_of_a_new_catalog_at_once_all_succeed() {
        for round in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("catalog.sqlite");
            let start = std::sync::Barrier::new(6);
            std::thread::scope(|s| {
                let opens: Vec<_> = (0..6)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            Catalog::open(&path).map(|c| c.schema_version().unwrap())
                        })
                    })
                    .collect();
                for open in opens {
                    assert_eq!(open.join().unwrap().unwrap(), SCHEMA_VERSION, "round {round}");
                }
            });
        }
    }

    #[test]
    fn open_fails_with_the_directory_named_when_it_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let err = Catalog::open(file.join("catalog.sqlite")).unwrap_err();
        match err {
            Error::CreateDir { path, .. } => assert_eq!(path, file),
            other => panic!("expected CreateDir, got {other:?}"),
        }
    }
}
