//! The mirror root a catalog belongs to.
//!
//! A catalog describes files under one mirror root: "segment 0 of orders-0 is installed" is a statement about
//! `<root>/orders-0/00000000000000000000.log`. Opened for another root, the same rows would claim files that are
//! not there (and the applier would refuse, or a promotion would look in the wrong tree). So the catalog records its
//! root (schema version 2, table `mirror_root`) and refuses any other with [`Error::MirrorRootMismatch`].
//!
//! A catalog written before version 2 has no record; it adopts the first root it is bound to, which keeps a
//! single-mirror user's existing catalog working unchanged. The caller passes a canonical path
//! ([`crate::canonical_mirror_root`]) so that two spellings of one directory are one root.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use crate::error::{Error, Location, Result};
use crate::Catalog;

/// What [`Catalog::bind_mirror_root`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorBinding {
    /// The catalog already recorded this root.
    Recorded,
    /// The catalog recorded no root (new, or from before schema version 2) and now records this one.
    Adopted,
}

impl Catalog {
    /// The mirror root this catalog records, if any.
    pub fn mirror_root(&self) -> Result<Option<PathBuf>> {
        read_root(&self.conn)
    }

    /// Binds the catalog to `root`: records it when the catalog records none yet, accepts it when it is the one
    /// recorded, and refuses another with [`Error::MirrorRootMismatch`] naming both (nothing is written then).
    pub fn bind_mirror_root(&mut self, root: &Path) -> Result<MirrorBinding> {
        let text = root.to_str().ok_or_else(|| Error::MirrorRootNotUtf8 {
            path: root.to_path_buf(),
        })?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        match read_root(&tx)? {
            Some(recorded) if recorded == root => Ok(MirrorBinding::Recorded),
            Some(recorded) => Err(Error::MirrorRootMismatch {
                catalog: self.location.clone(),
                recorded,
                offered: root.to_path_buf(),
            }),
            None => {
                tx.execute("INSERT INTO mirror_root (id, path) VALUES (1, ?1)", [text])?;
                tx.commit()?;
                Ok(MirrorBinding::Adopted)
            }
        }
    }
}

fn read_root(conn: &Connection) -> Result<Option<PathBuf>> {
    let path: Option<String> = conn
        .query_row("SELECT path FROM mirror_root WHERE id = 1", [], |row| row.get(0))
        .optional()?;
    Ok(path.map(PathBuf::from))
}

/// The mirror root recorded by the catalog file at `path`, read without changing the file (no migration, no
/// journal-mode switch): `None` when it records none, including a catalog older than schema version 2. Used to
/// decide which catalog a mirror's default is before opening (and so binding) one.
pub fn recorded_mirror_root(path: &Path) -> Result<Option<PathBuf>> {
    let location = Location::File(path.to_path_buf());
    let open_err = |source| Error::Open {
        path: location.clone(),
        source,
    };
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(open_err)?;
    conn.busy_timeout(crate::BUSY_TIMEOUT).map_err(open_err)?;
    let has_table: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'mirror_root'",
            [],
            |row| row.get(0),
        )
        .map_err(open_err)?;
    if !has_table {
        return Ok(None);
    }
    read_root(&conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_catalog_adopts_the_first_root_and_refuses_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let mut cat = Catalog::open(&path).unwrap();
        assert_eq!(cat.mirror_root().unwrap(), None);
        assert_eq!(recorded_mirror_root(&path).unwrap(), None);
        assert_eq!(
            cat.bind_mirror_root(Path::new("/srv/a")).unwrap(),
            MirrorBinding::Adopted
        );
        assert_eq!(
            cat.bind_mirror_root(Path::new("/srv/a")).unwrap(),
            MirrorBinding::Recorded
        );
        assert_eq!(recorded_mirror_root(&path).unwrap(), Some(PathBuf::from("/srv/a")));

        let err = cat.bind_mirror_root(Path::new("/srv/b")).unwrap_err();
        match &err {
            Error::MirrorRootMismatch {
                catalog,
                recorded,
                offered,
            } => {
                assert_eq!(catalog, &Location::File(path.clone()));
                assert_eq!(recorded, Path::new("/srv/a"));
                assert_eq!(offered, Path::new("/srv/b"));
            }
            other => panic!("expected MirrorRootMismatch, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert!(msg.contains("/srv/a") && msg.contains("/srv/b"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        // The refusal wrote nothing; reopening sees the first root.
        drop(cat);
        assert_eq!(
            Catalog::open(&path).unwrap().mirror_root().unwrap(),
            Some(PathBuf::from("/srv/a"))
        );
    }

    #[test]
    fn a_version_1_catalog_migrates_keeps_its_rows_and_adopts_the_first_root() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        {
            // A catalog as segmirror wrote it before schema version 2.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(crate::schema::MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(
                "INSERT INTO links VALUES ('l', 'file:///x', '.*', NULL, 'active', 1)",
                [],
            )
            .unwrap();
        }
        assert_eq!(recorded_mirror_root(&path).unwrap(), None, "no table yet, no record");
        let v: u32 = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, 1, "peeking does not migrate");

        let mut cat = Catalog::open(&path).unwrap();
        assert_eq!(cat.schema_version().unwrap(), crate::SCHEMA_VERSION);
        assert_eq!(cat.links().unwrap().len(), 1, "rows survive the migration");
        assert_eq!(cat.mirror_root().unwrap(), None);
        assert_eq!(
            cat.bind_mirror_root(Path::new("/m/one")).unwrap(),
            MirrorBinding::Adopted
        );
        assert!(matches!(
            cat.bind_mirror_root(Path::new("/m/two")),
            Err(Error::MirrorRootMismatch { .. })
        ));
    }

    #[cfg(unix)]
    #[test]
    fn a_non_utf8_root_is_refused_with_its_path() {
        use std::os::unix::ffi::OsStrExt;
        let root = Path::new(std::ffi::OsStr::from_bytes(b"/m/\xff"));
        let mut cat = Catalog::open_in_memory().unwrap();
        match cat.bind_mirror_root(root) {
            Err(Error::MirrorRootNotUtf8 { path }) => assert_eq!(path, root),
            other => panic!("expected MirrorRootNotUtf8, got {other:?}"),
        }
        assert_eq!(cat.mirror_root().unwrap(), None);
    }
}
