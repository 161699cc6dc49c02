//! Connection settings and schema migrations.
//!
//! The schema version is SQLite's `PRAGMA user_version` (an integer in the database header). [`MIGRATIONS`] is an
//! append-only list: step *i* takes the database from version *i* to *i + 1*, and runs in its own `IMMEDIATE`
//! transaction together with the `user_version` bump, so a crash mid-migration leaves the previous version intact and
//! two processes opening a fresh catalog at once cannot both apply a step (the second one re-reads the version under
//! the write lock and finds nothing to do). A database whose version is higher than this code knows is refused before
//! anything is written to it: an old segmirror must not write rows a newer one's invariants do not expect.
//!
//! Published steps are never edited; a schema change is a new step at the end.

use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Location, Result};

/// How long a statement waits for another process's lock before failing with `SQLITE_BUSY`. The applier holds the
/// write lock only for short single-segment transactions and `segmirror status` only reads (WAL readers never block
/// the writer), so waits are brief; five seconds absorbs a slow fsync on a busy disk without hanging a CLI for long.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migration steps; `MIGRATIONS[i]` moves the database from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: links, mirror partitions, segments, events.
    r#"
    CREATE TABLE links (
        name          TEXT PRIMARY KEY NOT NULL CHECK (length(name) > 0),
        store_url     TEXT NOT NULL,
        topics_regex  TEXT NOT NULL,
        groups_regex  TEXT,
        state         TEXT NOT NULL CHECK (state IN ('active', 'paused', 'promoted')),
        created_at_ms INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE mirror_partitions (
        id                   INTEGER PRIMARY KEY,
        link                 TEXT NOT NULL REFERENCES links (name),
        topic                TEXT NOT NULL CHECK (length(topic) > 0),
        partition            INTEGER NOT NULL CHECK (partition >= 0),
        source_topic_id      TEXT NOT NULL,
        mirror_topic_id      TEXT,
        state                TEXT NOT NULL CHECK (state IN ('mirroring', 'paused', 'promoted')),
        log_start_offset     INTEGER NOT NULL CHECK (log_start_offset >= 0),
        installed_end_offset INTEGER CHECK (installed_end_offset >= 0),
        UNIQUE (link, topic, partition)
    ) STRICT;

    CREATE TABLE segments (
        partition_id  INTEGER NOT NULL REFERENCES mirror_partitions (id),
        base_offset   INTEGER NOT NULL CHECK (base_offset >= 0),
        next_offset   INTEGER NOT NULL,
        last_offset   INTEGER NOT NULL,
        size          INTEGER NOT NULL CHECK (size >= 0),
        sha256        BLOB NOT NULL CHECK (length(sha256) = 32),
        state         TEXT NOT NULL CHECK (state IN ('shipped', 'validated', 'installed')),
        manifest_key  TEXT NOT NULL,
        sealed        INTEGER NOT NULL CHECK (sealed IN (0, 1)),
        updated_at_ms INTEGER NOT NULL,
        CHECK (base_offset <= last_offset AND last_offset < next_offset),
        PRIMARY KEY (partition_id, base_offset)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE events (
        id        INTEGER PRIMARY KEY,
        at_ms     INTEGER NOT NULL,
        link      TEXT NOT NULL REFERENCES links (name),
        topic     TEXT,
        partition INTEGER,
        kind      TEXT NOT NULL,
        detail    TEXT NOT NULL,
        CHECK ((topic IS NULL) = (partition IS NULL))
    ) STRICT;

    CREATE INDEX events_by_partition ON events (link, topic, partition, id);
    "#,
    // 2: the mirror root this catalog belongs to (at most one row; none until a command binds it, so a catalog
    // from version 1 adopts the first mirror root it is opened with).
    r#"
    CREATE TABLE mirror_root (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        path TEXT NOT NULL CHECK (length(path) > 0)
    ) STRICT;
    "#,
    // 3: source truncations: batches the source no longer holds, removed from the mirror and kept in
    // its archive (`truncated`), or a source that lost committed records, recorded and not truncated (`diverged`).
    r#"
    CREATE TABLE truncations (
        id                INTEGER PRIMARY KEY,
        link              TEXT NOT NULL REFERENCES links (name),
        topic             TEXT NOT NULL CHECK (length(topic) > 0),
        partition         INTEGER NOT NULL CHECK (partition >= 0),
        kind              TEXT NOT NULL CHECK (kind IN ('truncated', 'diverged')),
        from_offset       INTEGER NOT NULL CHECK (from_offset >= 0),
        to_offset         INTEGER NOT NULL,
        mirror_epoch      INTEGER NOT NULL,
        source_epoch      INTEGER NOT NULL,
        source_end_offset INTEGER NOT NULL,
        archive_path      TEXT,
        sha256            BLOB CHECK (sha256 IS NULL OR length(sha256) = 32),
        size              INTEGER CHECK (size IS NULL OR size >= 0),
        at_ms             INTEGER NOT NULL,
        CHECK (from_offset < to_offset),
        CHECK ((kind = 'truncated') = (archive_path IS NOT NULL)),
        UNIQUE (link, topic, partition, kind, from_offset, to_offset)
    ) STRICT;
    "#,
    // 4: managed links: a link's own id (a recreated link gets a new one, so nothing of the old link's
    // bucket or peer is taken for it), its two ends as the operator names them, and `deleted` as a tombstone
    // (`deleted_at_ms`; `state` keeps the state the link was deleted in, so the CHECK above stays as published), and
    // the id of the shipper's link this (applier's) record adopted from the bucket's link identity object.
    // Links of older catalogs get a random id here.
    r#"
    ALTER TABLE links ADD COLUMN link_id TEXT NOT NULL DEFAULT '';
    UPDATE links SET link_id = lower(hex(randomblob(16)));
    ALTER TABLE links ADD COLUMN source TEXT NOT NULL DEFAULT '';
    ALTER TABLE links ADD COLUMN target TEXT NOT NULL DEFAULT '';
    ALTER TABLE links ADD COLUMN deleted_at_ms INTEGER;
    ALTER TABLE links ADD COLUMN peer_link_id TEXT;
    "#,
    // 5: a link's metadata as the shipper last sent it: the source's topics (partition counts, topic
    // configs, ids) and its groups' committed offsets, exactly as received; what may be committed is computed
    // against the installed data when read (`Catalog::link_offsets`), never stored.
    r#"
    CREATE TABLE link_meta (
        link                TEXT PRIMARY KEY NOT NULL REFERENCES links (name),
        version             INTEGER NOT NULL CHECK (version >= 0),
        metadata_end_offset INTEGER NOT NULL CHECK (metadata_end_offset >= 0),
        groups_regex        TEXT NOT NULL,
        recorded_at_ms      INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE link_topics (
        link            TEXT NOT NULL REFERENCES links (name),
        topic           TEXT NOT NULL CHECK (length(topic) > 0),
        source_topic_id TEXT NOT NULL,
        partitions      INTEGER NOT NULL CHECK (partitions > 0),
        PRIMARY KEY (link, topic)
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE link_topic_configs (
        link   TEXT NOT NULL,
        topic  TEXT NOT NULL,
        name   TEXT NOT NULL CHECK (length(name) > 0),
        value  TEXT NOT NULL,
        PRIMARY KEY (link, topic, name),
        FOREIGN KEY (link, topic) REFERENCES link_topics (link, topic) ON DELETE CASCADE
    ) STRICT, WITHOUT ROWID;

    CREATE TABLE link_offsets (
        link             TEXT NOT NULL REFERENCES links (name),
        group_id         TEXT NOT NULL CHECK (length(group_id) > 0),
        topic            TEXT NOT NULL CHECK (length(topic) > 0),
        partition        INTEGER NOT NULL CHECK (partition >= 0),
        source_offset    INTEGER NOT NULL CHECK (source_offset >= 0),
        leader_epoch     INTEGER,
        metadata         TEXT NOT NULL,
        commit_timestamp INTEGER NOT NULL,
        PRIMARY KEY (link, group_id, topic, partition)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 6: a partition promoted by handing the mirror's files over (renamed into the broker's log dir) names
    // that log dir; the mirror no longer holds its segments.
    r#"
    ALTER TABLE mirror_partitions ADD COLUMN handed_over_to TEXT;
    "#,
    // 7: the journal of `segmirror failover`: each step of a link's failover, when it started (and how
    // often: a rerun after a crash starts an unfinished step again), when it finished and what it found; a rerun
    // skips finished steps. `outcome` is free text for people (the report of the step).
    r#"
    CREATE TABLE failover_steps (
        link           TEXT NOT NULL REFERENCES links (name),
        step           TEXT NOT NULL CHECK (length(step) > 0),
        position       INTEGER NOT NULL CHECK (position >= 0),
        started_at_ms  INTEGER NOT NULL,
        attempts       INTEGER NOT NULL CHECK (attempts >= 1),
        finished_at_ms INTEGER,
        outcome        TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (link, step),
        CHECK (finished_at_ms IS NULL OR finished_at_ms >= started_at_ms)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 8: every broker log dir a partition was promoted into (replicas: `promote --log-dir A --log-dir B ...`
    // installs one plan into each replica's log dir). A row is written once that log dir's swap and root
    // checkpoints are durable, so a rerun after a crash knows which log dirs are finished.
    r#"
    CREATE TABLE promoted_replicas (
        partition_id   INTEGER NOT NULL REFERENCES mirror_partitions (id),
        log_dir        TEXT NOT NULL CHECK (length(log_dir) > 0),
        installed_at_ms INTEGER NOT NULL,
        PRIMARY KEY (partition_id, log_dir)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 9: the source cluster a link's applier follows: the cluster id (`meta.properties`) the first shipper of
    // the link named, adopted as the peer link id is, so that a shipper of another cluster is refused afterwards.
    // And a partition's pending lineage: the source topic id a shipper offered after the source topic was deleted
    // and recreated (the partition paused); an operator's reset lets the applier take it (`lineage`).
    r#"
    ALTER TABLE links ADD COLUMN source_cluster_id TEXT;
    ALTER TABLE mirror_partitions ADD COLUMN pending_lineage TEXT;
    "#,
    // 10: offsets that consumer groups committed through the read-only endpoint (`segmirror serve`), kept
    // apart from the source's (`link_offsets`, replaced by each metadata version): a commit replaces only the
    // partitions it names, and failover commits them on the target cluster (`served_offsets`).
    r#"
    CREATE TABLE served_offsets (
        link             TEXT NOT NULL REFERENCES links (name),
        group_id         TEXT NOT NULL CHECK (length(group_id) > 0),
        topic            TEXT NOT NULL CHECK (length(topic) > 0),
        partition        INTEGER NOT NULL CHECK (partition >= 0),
        committed_offset INTEGER NOT NULL CHECK (committed_offset >= 0),
        leader_epoch     INTEGER,
        metadata         TEXT NOT NULL,
        committed_at_ms  INTEGER NOT NULL,
        PRIMARY KEY (link, group_id, topic, partition)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 11: how an installed segment version leaves each transactional producer (`TxnEnds`, text form), recorded by
    // the install that read its batches, so that promotion knows whether a transaction is open at the end without
    // reading the segments again. NULL: not known (written by another path, or too many producers); any rewrite
    // of the row by a writer that did not read the batches (`write_segment` with none) forgets it.
    r#"
    ALTER TABLE segments ADD COLUMN txn_ends TEXT;
    "#,
];

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Applies connection settings and brings the schema up to [`SCHEMA_VERSION`].
///
/// Order matters: the version is checked first, so a too-new database is refused before this connection changes
/// anything (switching to WAL rewrites the header).
pub(crate) fn prepare(conn: &mut Connection, location: &Location) -> Result<()> {
    let open_err = |source| Error::Open {
        path: location.clone(),
        source,
    };
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    check_not_too_new(conn, location)?;

    if let Location::File(_) = location {
        // In-memory databases have no WAL; they report "memory" and are fine for tests.
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::WalUnavailable {
                path: location.clone(),
                journal_mode: mode,
            });
        }
    }
    // FULL: a committed transaction survives power loss. The applier records "installed" only after the files are
    // durable, and the record itself must be as durable as the files it describes.
    conn.pragma_update(None, "synchronous", "FULL").map_err(open_err)?;
    conn.pragma_update(None, "foreign_keys", true).map_err(open_err)?;
    migrate(conn, location)
}

fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
}

fn check_not_too_new(conn: &Connection, location: &Location) -> Result<u32> {
    let found = user_version(conn).map_err(|source| Error::Open {
        path: location.clone(),
        source,
    })?;
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            path: location.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

/// Runs every step the database has not had yet, each in its own transaction.
fn migrate(conn: &mut Connection, location: &Location) -> Result<()> {
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Re-read under the write lock: another process may have migrated since we last looked.
        let current = check_not_too_new(&tx, location)?;
        let Some(step) = MIGRATIONS.get(current as usize) else {
            return Ok(()); // up to date; dropping `tx` ends the empty transaction
        };
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", current + 1)?;
        tx.commit()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_an_empty_database_to_the_current_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        prepare(&mut conn, &Location::InMemory).unwrap();
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
        let mut tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        tables.sort();
        assert_eq!(
            tables,
            [
                "events",
                "failover_steps",
                "link_meta",
                "link_offsets",
                "link_topic_configs",
                "link_topics",
                "links",
                "mirror_partitions",
                "mirror_root",
                "promoted_replicas",
                "segments",
                "served_offsets",
                "truncations"
            ]
        );
        let fk: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0)).unwrap();
        assert!(fk);
        let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
        assert_eq!(sync, 2, "synchronous=FULL is 2");
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut conn = Connection::open_in_memory().unwrap();
        prepare(&mut conn, &Location::InMemory).unwrap();
        conn.execute(
            "INSERT INTO links (name, store_url, topics_regex, groups_regex, state, created_at_ms) \
             VALUES ('l', 'file:///x', '.*', NULL, 'active', 1)",
            [],
        )
        .unwrap();
        prepare(&mut conn, &Location::InMemory).unwrap();
        let n: i64 = conn.query_row("SELECT count(*) FROM links", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 1);
    }

    #[test]
    fn refuses_a_newer_schema_without_writing() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 3).unwrap();
        let err = prepare(&mut conn, &Location::InMemory).unwrap_err();
        match err {
            Error::SchemaTooNew { found, supported, .. } => {
                assert_eq!(found, SCHEMA_VERSION + 3);
                assert_eq!(supported, SCHEMA_VERSION);
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tables, 0, "nothing may be created in a too-new database");
    }

    #[test]
    fn schema_constraints_reject_impossible_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        prepare(&mut conn, &Location::InMemory).unwrap();
        // Unknown state.
        assert!(conn
            .execute(
                "INSERT INTO links (name, store_url, topics_regex, groups_regex, state, created_at_ms) \
                 VALUES ('l', 'u', '.*', NULL, 'bogus', 1)",
                []
            )
            .is_err());
        // Partition of a link that does not exist (foreign keys are on).
        assert!(conn
            .execute(
                "INSERT INTO mirror_partitions (link, topic, partition, source_topic_id, state, log_start_offset) \
                 VALUES ('missing', 't', 0, 'id', 'mirroring', 0)",
                [],
            )
            .is_err());
    }
}
