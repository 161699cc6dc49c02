//! A partition whose source topic was deleted and recreated: the mirror holds one lineage (source topic id), a
//! shipper offers another. Never merged. The applier records the offered lineage as *pending* and pauses the
//! partition ([`Catalog::hold_lineage`]); the link's other partitions go on. An operator then chooses:
//! - keep the old lineage (promote it, or leave the partition paused): nothing to do;
//! - mirror the new topic: `segmirror link reset-partition` ([`Catalog::accept_lineage`]) sets the partition
//!   mirroring again with the lineage still pending; the applier, which holds the mirror's files, archives the old
//!   lineage's files, then switches the record to the new lineage ([`Catalog::start_new_lineage`]), and installs
//!   the new topic from its start.
//!
//! Why two steps: only the applier may touch the mirror's files (it holds the mirror's lock while it runs), while
//! the operator's command must work with the applier running; the catalog carries the decision between them.

use rusqlite::{params, TransactionBehavior};

use crate::error::{Entity, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::key::{PartitionId, PartitionKey};
use crate::partition::{find_partition, load_partition_by_id, refuse_promoted, MirrorPartition, PartitionState};
use crate::Catalog;

/// The partition's pending lineage (see the module doc), if any.
fn pending_of(conn: &rusqlite::Connection, id: PartitionId) -> Result<Option<String>> {
    Ok(conn.query_row(
        "SELECT pending_lineage FROM mirror_partitions WHERE id = ?1",
        [id.0],
        |r| r.get(0),
    )?)
}

/// A partition's lineage offered by a shipper and not (yet) mirrored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingLineage {
    /// The offered source topic id.
    pub source_topic_id: String,
    /// Whether an operator accepted it (`segmirror link reset-partition`): the applier switches at its next chunk.
    pub accepted: bool,
}

impl Catalog {
    /// Records that a shipper offers `offered` (another source topic id than the recorded one) for the partition:
    /// pauses it and says why in an event naming both ids and `remedy`. Idempotent: a partition already paused with
    /// the same pending lineage is left as it is (no second event). Refused for a promoted partition.
    pub fn hold_lineage(&mut self, id: PartitionId, offered: &str, remedy: &str) -> Result<MirrorPartition> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut p = load_partition_by_id(&tx, id)?;
        refuse_promoted(&p)?;
        if p.state == PartitionState::Paused && pending_of(&tx, id)?.as_deref() == Some(offered) {
            return Ok(p);
        }
        tx.execute(
            "UPDATE mirror_partitions SET state = 'paused', pending_lineage = ?2 WHERE id = ?1",
            params![id.0, offered],
        )?;
        let detail = format!(
            "the shipper offers source topic id {offered}, the mirror holds {}: the source topic was deleted and \
             recreated; not merged, partition paused ({remedy})",
            p.source_topic_id
        );
        insert_event(&tx, Subject::Partition(&p.key), EventKind::LineageBreak, &detail)?;
        tx.commit()?;
        p.state = PartitionState::Paused;
        Ok(p)
    }

    /// The lineage pending for a partition, if a shipper offered another one.
    pub fn pending_lineage(&self, id: PartitionId) -> Result<Option<PendingLineage>> {
        let p = load_partition_by_id(&self.conn, id)?;
        let pending = pending_of(&self.conn, id)?;
        Ok(pending.map(|source_topic_id| PendingLineage {
            source_topic_id,
            accepted: p.state == PartitionState::Mirroring,
        }))
    }

    /// The operator's choice to mirror the pending lineage of the partition `key` (see the module doc): the
    /// partition mirrors again, and the applier switches to the new lineage at its next chunk. Refused unless a
    /// lineage is pending: a partition paused for another reason is resumed otherwise. Idempotent.
    pub fn accept_lineage(&mut self, key: &PartitionKey) -> Result<(MirrorPartition, String)> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut p = find_partition(&tx, key)?.ok_or_else(|| Error::NotFound {
            entity: Entity::Partition(key.clone()),
        })?;
        refuse_promoted(&p)?;
        let id = p.id;
        let pending = pending_of(&tx, id)?;
        let Some(pending) = pending else {
            return Err(Error::Invalid {
                what: "reset",
                message: format!(
                    "{} has no other lineage pending (its source topic was not recreated): nothing to reset",
                    p.key
                ),
            });
        };
        if p.state != PartitionState::Mirroring {
            tx.execute("UPDATE mirror_partitions SET state = 'mirroring' WHERE id = ?1", [id.0])?;
            let detail = format!(
                "reset requested: the mirror's copy of source topic id {} is archived and source topic id {pending} \
                 mirrored from its start when the applier next hears from the shipper",
                p.source_topic_id
            );
            insert_event(&tx, Subject::Partition(&p.key), EventKind::LineageReset, &detail)?;
            tx.commit()?;
            p.state = PartitionState::Mirroring;
        }
        Ok((p, pending))
    }

    /// Clears the pending lineage once the applier switched to it ([`Catalog::start_new_lineage`] records the new
    /// one).
    pub fn clear_pending_lineage(&mut self, id: PartitionId) -> Result<()> {
        self.conn.execute(
            "UPDATE mirror_partitions SET pending_lineage = NULL WHERE id = ?1",
            [id.0],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{created, link_spec};

    #[test]
    fn a_pending_lineage_is_held_once_accepted_by_the_operator_and_cleared_by_the_applier() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        let key = PartitionKey::new("l", "orders", 0);
        let p = created(cat.upsert_partition(&key, "old", 0).unwrap());
        assert_eq!(cat.pending_lineage(p.id).unwrap(), None);
        // Nothing pending: nothing to reset.
        assert!(matches!(cat.accept_lineage(&key), Err(Error::Invalid { .. })));

        let held = cat.hold_lineage(p.id, "new", "run reset").unwrap();
        assert_eq!(held.state, PartitionState::Paused);
        cat.hold_lineage(p.id, "new", "run reset").unwrap();
        let breaks = cat
            .events(Some(Subject::Partition(&key)), 100)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == EventKind::LineageBreak)
            .count();
        assert_eq!(breaks, 1, "held twice, said once");
        assert_eq!(
            cat.pending_lineage(p.id).unwrap(),
            Some(PendingLineage {
                source_topic_id: "new".into(),
                accepted: false
            })
        );

        let (accepted, pending) = cat.accept_lineage(&key).unwrap();
        assert_eq!((accepted.state, pending.as_str()), (PartitionState::Mirroring, "new"));
        assert!(cat.pending_lineage(p.id).unwrap().unwrap().accepted);
        // The last event says what happens next.
        let last = cat.events(Some(Subject::Partition(&key)), 1).unwrap().remove(0);
        assert_eq!(last.kind, EventKind::LineageReset);

        cat.start_new_lineage(p.id, "new", 0).unwrap();
        cat.clear_pending_lineage(p.id).unwrap();
        assert_eq!(cat.pending_lineage(p.id).unwrap(), None);
        assert_eq!(cat.partition(&key).unwrap().source_topic_id, "new");
    }
}
