//! Mirror partitions: one source partition of a link, mirrored into `<mirror-root>/<topic>-<partition>/`.
//!
//! A partition is identified by `(link, topic, partition)` and carries its **lineage**, the source topic ID. Kafka
//! gives a recreated topic a new ID while the name stays, and the new topic's offsets restart, so data of two
//! lineages must never land in one mirror partition. [`Catalog::upsert_partition`] therefore returns a
//! [`Upsert::LineageBreak`] instead of updating the recorded ID; the caller pauses and reports, and only an explicit
//! [`Catalog::start_new_lineage`] (after the old mirror data is moved aside) switches lineage.
//!
//! States: `mirroring` (the applier installs), `paused` (kept, not applied — the applier's policy), and `promoted`
//! (terminal: the partition was handed to a real broker and is never written again).

use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};
use serde::Serialize;

use crate::error::{Entity, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::key::{PartitionId, PartitionKey};
use crate::link::load_link;
use crate::link_state::LinkState;
use crate::{text_enum, Catalog};

text_enum! {
    /// Lifecycle of a mirror partition.
    pub enum PartitionState {
        /// The applier installs segments.
        Mirroring => "mirroring",
        /// Kept; the applier does not apply it until resumed.
        Paused => "paused",
        /// Terminal: handed to a real broker; never written by the applier again.
        Promoted => "promoted",
    }
}

/// A mirror partition as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MirrorPartition {
    pub id: PartitionId,
    #[serde(flatten)]
    pub key: PartitionKey,
    /// The lineage: the source topic's ID (as the manifests spell it).
    pub source_topic_id: String,
    /// The topic ID the mirror carries on the target, once one is assigned (at promotion at the latest).
    pub mirror_topic_id: Option<String>,
    pub state: PartitionState,
    /// The source partition's log start offset, as last reported (never decreases within a lineage).
    pub log_start_offset: i64,
    /// Offset after the last installed segment; `None` until a segment is installed.
    pub installed_end_offset: Option<i64>,
}

/// One partition for [`Catalog::upsert_partitions`]: the arguments of [`Catalog::upsert_partition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionUpsert {
    pub key: PartitionKey,
    pub source_topic_id: String,
    pub log_start_offset: i64,
}

/// What [`Catalog::upsert_partition`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upsert {
    /// The partition was new and is now recorded (state `mirroring`).
    Created(MirrorPartition),
    /// The partition exists with the same lineage (its log start offset may have advanced).
    Existing(MirrorPartition),
    /// The partition exists with a different source topic ID. Nothing was written.
    LineageBreak {
        /// The partition as recorded, unchanged.
        partition: MirrorPartition,
        /// The source topic ID the caller offered.
        offered_source_topic_id: String,
    },
}

const PARTITION_COLUMNS: &str = "id, link, topic, partition, source_topic_id, mirror_topic_id, state, \
                                 log_start_offset, installed_end_offset";

fn partition_from_row(row: &Row<'_>) -> rusqlite::Result<MirrorPartition> {
    Ok(MirrorPartition {
        id: PartitionId(row.get(0)?),
        key: PartitionKey {
            link: row.get(1)?,
            topic: row.get(2)?,
            partition: row.get(3)?,
        },
        source_topic_id: row.get(4)?,
        mirror_topic_id: row.get(5)?,
        state: row.get(6)?,
        log_start_offset: row.get(7)?,
        installed_end_offset: row.get(8)?,
    })
}

pub(crate) fn load_partition_by_id(conn: &Connection, id: PartitionId) -> Result<MirrorPartition> {
    // Cached, as the lookup by key: both run once or more per partition of a run or a promotion.
    conn.prepare_cached(&format!(
        "SELECT {PARTITION_COLUMNS} FROM mirror_partitions WHERE id = ?1"
    ))?
    .query_row([id.0], partition_from_row)
    .optional()?
    .ok_or(Error::NotFound {
        entity: Entity::PartitionId(id),
    })
}

pub(crate) fn find_partition(conn: &Connection, key: &PartitionKey) -> Result<Option<MirrorPartition>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {PARTITION_COLUMNS} FROM mirror_partitions WHERE link = ?1 AND topic = ?2 AND partition = ?3"
        ))?
        .query_row(params![key.link, key.topic, key.partition], partition_from_row)
        .optional()?)
}

/// Loads a partition for a write on behalf of lineage `source_topic_id`: it must exist, not be promoted, and be of
/// that lineage. Shared by every applier write so the three refusals are uniform.
pub(crate) fn load_writable(conn: &Connection, id: PartitionId, source_topic_id: &str) -> Result<MirrorPartition> {
    let p = load_partition_by_id(conn, id)?;
    refuse_promoted(&p)?;
    if p.source_topic_id != source_topic_id {
        return Err(Error::LineageBreak {
            partition: p.key,
            recorded: p.source_topic_id,
            offered: source_topic_id.to_owned(),
        });
    }
    Ok(p)
}

pub(crate) fn refuse_promoted(p: &MirrorPartition) -> Result<()> {
    if p.state == PartitionState::Promoted {
        return Err(Error::Promoted {
            entity: Entity::Partition(p.key.clone()),
        });
    }
    Ok(())
}

fn check_offset(field: &'static str, value: i64) -> Result<()> {
    if value < 0 {
        return Err(Error::InvalidOffset { field, value });
    }
    Ok(())
}

/// The body of [`Catalog::upsert_partition`] inside the caller's transaction `tx`: writes nothing unless it returns
/// `Created`, or `Existing` with a higher log start offset; the caller commits.
fn upsert_in(tx: &Transaction<'_>, key: &PartitionKey, source_topic_id: &str, log_start_offset: i64) -> Result<Upsert> {
    let link = load_link(tx, &key.link)?;
    if let Some(mut p) = find_partition(tx, key)? {
        if p.source_topic_id != source_topic_id {
            return Ok(Upsert::LineageBreak {
                partition: p,
                offered_source_topic_id: source_topic_id.to_owned(),
            });
        }
        if p.state != PartitionState::Promoted && log_start_offset > p.log_start_offset {
            tx.execute(
                "UPDATE mirror_partitions SET log_start_offset = ?2 WHERE id = ?1",
                params![p.id.0, log_start_offset],
            )?;
            p.log_start_offset = log_start_offset;
        }
        return Ok(Upsert::Existing(p));
    }
    if link.state == LinkState::Promoted {
        return Err(Error::Promoted {
            entity: Entity::Link(link.name),
        });
    }
    if link.state == LinkState::Deleted {
        return Err(Error::LinkTransition {
            link: link.name,
            from: LinkState::Deleted,
            action: "record a partition under it",
        });
    }
    tx.execute(
        "INSERT INTO mirror_partitions (link, topic, partition, source_topic_id, state, log_start_offset) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            key.link,
            key.topic,
            key.partition,
            source_topic_id,
            PartitionState::Mirroring,
            log_start_offset
        ],
    )?;
    let id = PartitionId(tx.last_insert_rowid());
    let detail = format!("source topic id {source_topic_id}, log start offset {log_start_offset}");
    insert_event(tx, Subject::Partition(key), EventKind::PartitionCreated, &detail)?;
    Ok(Upsert::Created(MirrorPartition {
        id,
        key: key.clone(),
        source_topic_id: source_topic_id.to_owned(),
        mirror_topic_id: None,
        state: PartitionState::Mirroring,
        log_start_offset,
        installed_end_offset: None,
    }))
}

impl Catalog {
    /// Records the partition `key` of lineage `source_topic_id` if it is new (state `mirroring`, nothing installed),
    /// or confirms it. For an existing partition of the same lineage, a higher `log_start_offset` is recorded (it only
    /// moves forward); a promoted partition is returned unchanged. A different lineage is returned as
    /// [`Upsert::LineageBreak`] and nothing is written.
    ///
    /// Errors: `NotFound` for an unknown link; `Promoted` when creating a partition under a promoted link.
    pub fn upsert_partition(
        &mut self,
        key: &PartitionKey,
        source_topic_id: &str,
        log_start_offset: i64,
    ) -> Result<Upsert> {
        check_offset("log start offset", log_start_offset)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let upsert = upsert_in(&tx, key, source_topic_id, log_start_offset)?;
        tx.commit()?;
        Ok(upsert)
    }

    /// [`Catalog::upsert_partition`] for many partitions in ONE transaction (one commit, one WAL fsync, instead of
    /// one per partition: an `apply` planning hundreds of new partitions waited for that many fsyncs). Each
    /// partition gets its own outcome, as if upserted alone and in this order: a refused one (`Promoted`, an unknown
    /// or deleted link, a negative offset) writes nothing and does not stop the others. A failure of the database
    /// itself ([`Error::Sqlite`]) fails the whole call, and then nothing is written.
    pub fn upsert_partitions(&mut self, partitions: &[PartitionUpsert]) -> Result<Vec<Result<Upsert>>> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut outcomes = Vec::with_capacity(partitions.len());
        for p in partitions {
            let outcome = check_offset("log start offset", p.log_start_offset)
                .and_then(|()| upsert_in(&tx, &p.key, &p.source_topic_id, p.log_start_offset));
            match outcome {
                Err(e @ Error::Sqlite(_)) => return Err(e),
                other => outcomes.push(other),
            }
        }
        tx.commit()?;
        Ok(outcomes)
    }

    /// The partition `key`.
    pub fn partition(&self, key: &PartitionKey) -> Result<MirrorPartition> {
        find_partition(&self.conn, key)?.ok_or_else(|| Error::NotFound {
            entity: Entity::Partition(key.clone()),
        })
    }

    /// The partition with catalog id `id`.
    pub fn partition_by_id(&self, id: PartitionId) -> Result<MirrorPartition> {
        load_partition_by_id(&self.conn, id)
    }

    /// Every partition of `link`, by topic and partition number. `NotFound` for an unknown link.
    pub fn partitions(&self, link: &str) -> Result<Vec<MirrorPartition>> {
        load_link(&self.conn, link)?;
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {PARTITION_COLUMNS} FROM mirror_partitions WHERE link = ?1 ORDER BY topic, partition"
        ))?;
        let rows = stmt
            .query_map([link], partition_from_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Moves a partition to `state`: `mirroring` and `paused` both ways, either of them to `promoted`. Setting the
    /// current state is a no-op; leaving `promoted` is refused ([`Error::Promoted`]).
    pub fn set_partition_state(&mut self, id: PartitionId, state: PartitionState) -> Result<MirrorPartition> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = set_state_in(&tx, id, state)?;
        tx.commit()?;
        Ok(p)
    }

    /// [`Catalog::set_partition_state`] of every partition of `ids`, in one transaction: all of them or none. Why:
    /// a promotion pauses every partition it plans, thousands at once; one commit each would be one WAL fsync each.
    pub fn set_partitions_state(&mut self, ids: &[PartitionId], state: PartitionState) -> Result<Vec<MirrorPartition>> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let rows = ids
            .iter()
            .map(|id| set_state_in(&tx, *id, state))
            .collect::<Result<Vec<_>>>()?;
        tx.commit()?;
        Ok(rows)
    }

    /// Records the topic ID the mirror carries on the target. Refused once the partition is promoted (the ID is then
    /// fixed in the broker's `partition.metadata`).
    pub fn set_mirror_topic_id(&mut self, id: PartitionId, mirror_topic_id: &str) -> Result<MirrorPartition> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = set_mirror_topic_id_in(&tx, id, mirror_topic_id)?;
        tx.commit()?;
        Ok(p)
    }

    /// Records that the mirror's files of a partition being promoted were handed over (renamed) into the broker log
    /// dir `log_dir`: the mirror no longer holds its segments. Refused once the partition is promoted (record this
    /// first, in the same promotion).
    pub fn set_handed_over(&mut self, id: PartitionId, log_dir: &str) -> Result<()> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        set_handed_over_in(&tx, id, log_dir)?;
        tx.commit()?;
        Ok(())
    }

    /// The log dir a partition's mirror files were handed over to ([`Catalog::set_handed_over`]), if they were.
    pub fn handed_over_to(&self, id: PartitionId) -> Result<Option<String>> {
        Ok(self.conn.query_row(
            "SELECT handed_over_to FROM mirror_partitions WHERE id = ?1",
            [id.0],
            |row| row.get(0),
        )?)
    }

    /// Switches a partition to a new lineage after a lineage break: forgets its segments, records the new source
    /// topic ID and log start offset, and clears the installed end offset. The caller must have moved the old mirror
    /// data out of the partition directory first (data before catalog). Refused for a promoted partition.
    pub fn start_new_lineage(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        log_start_offset: i64,
    ) -> Result<MirrorPartition> {
        check_offset("log start offset", log_start_offset)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut p = load_partition_by_id(&tx, id)?;
        refuse_promoted(&p)?;
        let dropped = tx.execute("DELETE FROM segments WHERE partition_id = ?1", [id.0])?;
        tx.execute(
            "UPDATE mirror_partitions SET source_topic_id = ?2, log_start_offset = ?3, installed_end_offset = NULL \
             WHERE id = ?1",
            params![id.0, source_topic_id, log_start_offset],
        )?;
        let detail = format!(
            "source topic id {} -> {source_topic_id}; forgot {dropped} segment record(s)",
            p.source_topic_id
        );
        insert_event(&tx, Subject::Partition(&p.key), EventKind::LineageReset, &detail)?;
        tx.commit()?;
        p.source_topic_id = source_topic_id.to_owned();
        p.log_start_offset = log_start_offset;
        p.installed_end_offset = None;
        Ok(p)
    }
}

/// [`Catalog::set_partition_state`] inside a transaction the caller commits.
pub(crate) fn set_state_in(tx: &Transaction<'_>, id: PartitionId, state: PartitionState) -> Result<MirrorPartition> {
    let mut p = load_partition_by_id(tx, id)?;
    if p.state == state {
        return Ok(p);
    }
    refuse_promoted(&p)?;
    tx.prepare_cached("UPDATE mirror_partitions SET state = ?2 WHERE id = ?1")?
        .execute(params![id.0, state])?;
    let detail = format!("{} -> {}", p.state, state);
    insert_event(
        tx,
        Subject::Partition(&p.key),
        EventKind::PartitionStateChanged,
        &detail,
    )?;
    p.state = state;
    Ok(p)
}

/// [`Catalog::set_mirror_topic_id`] inside a transaction the caller commits.
pub(crate) fn set_mirror_topic_id_in(
    tx: &Transaction<'_>,
    id: PartitionId,
    mirror_topic_id: &str,
) -> Result<MirrorPartition> {
    let mut p = load_partition_by_id(tx, id)?;
    refuse_promoted(&p)?;
    if p.mirror_topic_id.as_deref() == Some(mirror_topic_id) {
        return Ok(p);
    }
    tx.prepare_cached("UPDATE mirror_partitions SET mirror_topic_id = ?2 WHERE id = ?1")?
        .execute(params![id.0, mirror_topic_id])?;
    let detail = match &p.mirror_topic_id {
        Some(old) => format!("{old} -> {mirror_topic_id}"),
        None => mirror_topic_id.to_owned(),
    };
    insert_event(tx, Subject::Partition(&p.key), EventKind::MirrorTopicIdSet, &detail)?;
    p.mirror_topic_id = Some(mirror_topic_id.to_owned());
    Ok(p)
}

/// [`Catalog::set_handed_over`] inside a transaction the caller commits.
pub(crate) fn set_handed_over_in(tx: &Transaction<'_>, id: PartitionId, log_dir: &str) -> Result<()> {
    let p = load_partition_by_id(tx, id)?;
    refuse_promoted(&p)?;
    tx.prepare_cached("UPDATE mirror_partitions SET handed_over_to = ?2 WHERE id = ?1")?
        .execute(params![id.0, log_dir])?;
    insert_event(
        tx,
        Subject::Partition(&p.key),
        EventKind::Note,
        &format!("mirror files handed over by rename into {log_dir}; the mirror no longer holds them"),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{created, link_spec, seg};

    fn setup() -> (Catalog, PartitionKey) {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        (cat, PartitionKey::new("l", "orders", 0))
    }

    #[test]
    fn upsert_creates_then_confirms() {
        let (mut cat, key) = setup();
        let p = created(cat.upsert_partition(&key, "src-A", 10).unwrap());
        assert_eq!(p.state, PartitionState::Mirroring);
        assert_eq!(p.installed_end_offset, None);
        assert_eq!(p.log_start_offset, 10);
        assert_eq!(cat.partition(&key).unwrap(), p);
        assert_eq!(cat.partition_by_id(p.id).unwrap(), p);

        // Same lineage: log start only moves forward.
        match cat.upsert_partition(&key, "src-A", 5).unwrap() {
            Upsert::Existing(q) => assert_eq!(q.log_start_offset, 10),
            other => panic!("{other:?}"),
        }
        match cat.upsert_partition(&key, "src-A", 50).unwrap() {
            Upsert::Existing(q) => assert_eq!((q.id, q.log_start_offset), (p.id, 50)),
            other => panic!("{other:?}"),
        }
        assert_eq!(cat.partition(&key).unwrap().log_start_offset, 50);
        assert_eq!(cat.partitions("l").unwrap().len(), 1);
    }

    /// The batch gives each partition the outcome it would get alone, in one transaction: a new one is created
    /// (with its event), an existing one is confirmed or its log start advanced, another lineage is reported and
    /// left alone, and a refused one (a negative offset, an unknown link) writes nothing and stops no other.
    #[test]
    fn upsert_partitions_is_one_transaction_of_individual_outcomes() {
        let (mut cat, key) = setup();
        let old = created(cat.upsert_partition(&key, "src-A", 10).unwrap());
        let other = PartitionKey::new("l", "payments", 1);
        let foreign = created(cat.upsert_partition(&other, "src-X", 0).unwrap());
        let fresh = PartitionKey::new("l", "orders", 7);
        let unknown = PartitionKey::new("nope", "orders", 0);
        let batch = [
            (key.clone(), "src-A", 50),
            (fresh.clone(), "src-A", 3),
            (other.clone(), "src-Y", 0),
            (PartitionKey::new("l", "orders", 8), "src-A", -1),
            (unknown, "src-A", 0),
        ]
        .map(|(key, src, lso)| PartitionUpsert {
            key,
            source_topic_id: src.to_owned(),
            log_start_offset: lso,
        });
        let outcomes = cat.upsert_partitions(&batch).unwrap();
        assert_eq!(outcomes.len(), 5);
        match &outcomes[0] {
            Ok(Upsert::Existing(p)) => assert_eq!((p.id, p.log_start_offset), (old.id, 50)),
            other => panic!("{other:?}"),
        }
        let created_now = match &outcomes[1] {
            Ok(Upsert::Created(p)) => p.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(cat.partition(&fresh).unwrap(), created_now);
        assert!(matches!(&outcomes[2], Ok(Upsert::LineageBreak { partition, .. }) if partition.id == foreign.id));
        assert!(
            matches!(&outcomes[3], Err(Error::InvalidOffset { value: -1, .. })),
            "{:?}",
            outcomes[3]
        );
        assert!(matches!(&outcomes[4], Err(Error::NotFound { .. })), "{:?}", outcomes[4]);
        assert_eq!(cat.partition(&key).unwrap().log_start_offset, 50);
        assert_eq!(cat.partition(&other).unwrap().source_topic_id, "src-X");
        assert_eq!(cat.partitions("l").unwrap().len(), 3, "the refused ones wrote nothing");
        let events = cat.events(Some(Subject::Partition(&fresh)), 10).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventKind::PartitionCreated);
        assert!(cat.conn.is_autocommit(), "the transaction is committed");

        // One transaction: a database failure on the second new partition leaves the first unwritten too.
        cat.conn
            .execute_batch(
                "CREATE TEMP TRIGGER fail_nine BEFORE INSERT ON mirror_partitions WHEN NEW.partition = 9 \
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            )
            .unwrap();
        let batch = [5, 9].map(|n| PartitionUpsert {
            key: PartitionKey::new("l", "orders", n),
            source_topic_id: "src-A".to_owned(),
            log_start_offset: 0,
        });
        let err = cat.upsert_partitions(&batch).unwrap_err();
        assert!(matches!(err, Error::Sqlite(_)), "{err:?}");
        assert!(matches!(
            cat.partition(&PartitionKey::new("l", "orders", 5)),
            Err(Error::NotFound { .. })
        ));
        assert!(cat.conn.is_autocommit(), "rolled back");
    }

    #[test]
    fn lineage_break_is_reported_not_merged() {
        let (mut cat, key) = setup();
        let p = created(cat.upsert_partition(&key, "src-A", 0).unwrap());
        cat.mark_installed(p.id, "src-A", &seg(0, 100)).unwrap();
        match cat.upsert_partition(&key, "src-B", 0).unwrap() {
            Upsert::LineageBreak {
                partition,
                offered_source_topic_id,
            } => {
                assert_eq!(partition.source_topic_id, "src-A");
                assert_eq!(offered_source_topic_id, "src-B");
            }
            other => panic!("expected a lineage break, got {other:?}"),
        }
        let now = cat.partition(&key).unwrap();
        assert_eq!(now.source_topic_id, "src-A");
        assert_eq!(now.installed_end_offset, Some(100));

        // Writes carrying the other lineage are refused with the typed error.
        let err = cat.mark_installed(p.id, "src-B", &seg(100, 200)).unwrap_err();
        match err {
            Error::LineageBreak {
                partition,
                recorded,
                offered,
            } => {
                assert_eq!(partition, key);
                assert_eq!((recorded.as_str(), offered.as_str()), ("src-A", "src-B"));
            }
            other => panic!("expected LineageBreak, got {other:?}"),
        }
        assert_eq!(cat.partition(&key).unwrap().installed_end_offset, Some(100));
    }

    #[test]
    fn start_new_lineage_forgets_old_segments() {
        let (mut cat, key) = setup();
        let p = created(cat.upsert_partition(&key, "src-A", 0).unwrap());
        cat.mark_installed(p.id, "src-A", &seg(0, 100)).unwrap();
        let q = cat.start_new_lineage(p.id, "src-B", 0).unwrap();
        assert_eq!(q.source_topic_id, "src-B");
        assert_eq!(q.installed_end_offset, None);
        assert_eq!(cat.partition_by_id(p.id).unwrap(), q);
        assert!(cat.segments(p.id).unwrap().is_empty());
        assert!(matches!(
            cat.upsert_partition(&key, "src-B", 0).unwrap(),
            Upsert::Existing(_)
        ));
        cat.mark_installed(p.id, "src-B", &seg(0, 40)).unwrap();
        let events = cat.events(Some(Subject::Partition(&key)), 1).unwrap();
        assert_eq!(events[0].kind, EventKind::SegmentInstalled);
        let events = cat.events(Some(Subject::Partition(&key)), 2).unwrap();
        assert_eq!(events[1].kind, EventKind::LineageReset);
    }

    #[test]
    fn state_transitions_and_promotion_is_terminal() {
        let (mut cat, key) = setup();
        let p = created(cat.upsert_partition(&key, "src-A", 0).unwrap());
        assert_eq!(
            cat.set_partition_state(p.id, PartitionState::Paused).unwrap().state,
            PartitionState::Paused
        );
        assert_eq!(
            cat.set_partition_state(p.id, PartitionState::Mirroring).unwrap().state,
            PartitionState::Mirroring
        );
        cat.set_mirror_topic_id(p.id, "mirror-X").unwrap();
        assert_eq!(
            cat.set_partition_state(p.id, PartitionState::Promoted).unwrap().state,
            PartitionState::Promoted
        );
        // Idempotent re-promotion is fine; anything else is refused.
        assert_eq!(
            cat.set_partition_state(p.id, PartitionState::Promoted).unwrap().state,
            PartitionState::Promoted
        );
        for s in [PartitionState::Mirroring, PartitionState::Paused] {
            assert!(matches!(
                cat.set_partition_state(p.id, s),
                Err(Error::Promoted { entity: Entity::Partition(k) }) if k == key
            ));
        }
        assert!(matches!(
            cat.set_mirror_topic_id(p.id, "other"),
            Err(Error::Promoted { .. })
        ));
        assert!(matches!(
            cat.start_new_lineage(p.id, "src-B", 0),
            Err(Error::Promoted { .. })
        ));
        let now = cat.partition_by_id(p.id).unwrap();
        assert_eq!(now.mirror_topic_id.as_deref(), Some("mirror-X"));
        assert_eq!(now.state, PartitionState::Promoted);
        // A promoted partition is still reported, and its lineage still checked, by upsert.
        assert!(
            matches!(cat.upsert_partition(&key, "src-A", 99).unwrap(), Upsert::Existing(q) if q.log_start_offset == 0)
        );
    }

    #[test]
    fn unknown_partition_and_link_are_not_found() {
        let (mut cat, key) = setup();
        assert!(matches!(
            cat.partition(&key),
            Err(Error::NotFound { entity: Entity::Partition(k) }) if k == key
        ));
        assert!(matches!(
            cat.partition_by_id(PartitionId(42)),
            Err(Error::NotFound {
                entity: Entity::PartitionId(PartitionId(42))
            })
        ));
        assert!(matches!(
            cat.set_partition_state(PartitionId(42), PartitionState::Paused),
            Err(Error::NotFound { .. })
        ));
        let other = PartitionKey::new("nope", "t", 0);
        assert!(matches!(
            cat.upsert_partition(&other, "src", 0),
            Err(Error::NotFound { entity: Entity::Link(n) }) if n == "nope"
        ));
        assert!(matches!(cat.partitions("nope"), Err(Error::NotFound { .. })));
    }

    #[test]
    fn promoted_link_takes_no_new_partitions() {
        let (mut cat, key) = setup();
        cat.set_link_state("l", LinkState::Promoted).unwrap();
        assert!(matches!(
            cat.upsert_partition(&key, "src-A", 0),
            Err(Error::Promoted { entity: Entity::Link(n) }) if n == "l"
        ));
    }

    #[test]
    fn negative_offsets_are_rejected() {
        let (mut cat, key) = setup();
        assert!(matches!(
            cat.upsert_partition(&key, "src-A", -1),
            Err(Error::InvalidOffset { value: -1, .. })
        ));
    }
}
