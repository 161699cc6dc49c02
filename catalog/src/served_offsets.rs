//! Offsets that consumer groups committed through the read-only endpoint (`segmirror serve`), per link.
//!
//! Why in the catalog: a group reading from the endpoint must find its position again after `serve` restarts, and
//! keep it across `segmirror failover` (which commits these offsets on the target cluster, as it does the source
//! groups' offsets, so the consumers move to the target and resume where they left off). The catalog is the mirror
//! host's durable, fsynced memory and failover already reads the link's state from it.
//!
//! Kept apart from the source's offsets (`link_offsets`, replaced wholesale by each metadata version the shipper
//! sends): these are written by the endpoint's own clients, one commit at a time, and a commit replaces only the
//! partitions it names, as a Kafka broker's does. A commit is all or nothing. A promoted link refuses commits (the
//! mirror belongs to a real cluster now and its groups commit there), as does a deleted one; reads work in every
//! state, so failover and diagnostics can see what was committed.

use rusqlite::{params, TransactionBehavior};
use serde::Serialize;

use crate::error::{Entity, Error, Result};
use crate::link::load_link;
use crate::link_state::LinkState;
use crate::Catalog;

/// One partition's offset, committed by a group through the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedOffset {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group will read (Kafka's committed offset).
    pub offset: i64,
    /// The leader epoch the client committed with, if it sent one.
    pub leader_epoch: Option<i32>,
    /// The client's free-form metadata string, as sent.
    pub metadata: String,
    /// When the endpoint received the commit (milliseconds since the epoch).
    pub committed_at_ms: i64,
}

fn invalid(message: String) -> Error {
    Error::Invalid {
        what: "served offset commit",
        message,
    }
}

fn check(group: &str, offsets: &[ServedOffset]) -> Result<()> {
    if group.is_empty() {
        return Err(invalid("empty group id".to_owned()));
    }
    for o in offsets {
        if o.topic.is_empty() {
            return Err(invalid(format!("empty topic name (partition {})", o.partition)));
        }
        if o.partition < 0 {
            return Err(invalid(format!(
                "negative partition {} of topic {:?}",
                o.partition, o.topic
            )));
        }
        if o.offset < 0 {
            return Err(Error::InvalidOffset {
                field: "committed offset",
                value: o.offset,
            });
        }
    }
    Ok(())
}

impl Catalog {
    /// Record `offsets` as `group`'s committed offsets on `link`, in one transaction: each replaces the partition's
    /// previous offset, the group's other partitions keep theirs (a partition named twice keeps the last). Refused
    /// with `Error::Promoted` on a promoted link and `Error::LinkTransition` on a deleted one; `Error::Invalid` (or
    /// `InvalidOffset`) for an empty group or topic, a negative partition or offset, and then nothing is written.
    pub fn commit_served_offsets(&mut self, link: &str, group: &str, offsets: &[ServedOffset]) -> Result<()> {
        check(group, offsets)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let recorded = load_link(&tx, link)?;
        match recorded.state {
            LinkState::Active | LinkState::Paused => {}
            LinkState::Promoted => {
                return Err(Error::Promoted {
                    entity: Entity::Link(link.to_owned()),
                })
            }
            LinkState::Deleted => {
                return Err(Error::LinkTransition {
                    link: link.to_owned(),
                    from: LinkState::Deleted,
                    action: "commit a group's offsets",
                })
            }
        }
        {
            let mut upsert = tx.prepare(
                "INSERT INTO served_offsets (link, group_id, topic, partition, committed_offset, leader_epoch,
                     metadata, committed_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (link, group_id, topic, partition) DO UPDATE SET committed_offset = ?5,
                     leader_epoch = ?6, metadata = ?7, committed_at_ms = ?8",
            )?;
            for o in offsets {
                upsert.execute(params![
                    link,
                    group,
                    o.topic,
                    o.partition,
                    o.offset,
                    o.leader_epoch,
                    o.metadata,
                    o.committed_at_ms
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Every offset `group` committed through the endpoint on `link`, by topic and partition (empty for a group
    /// that committed none).
    pub fn served_offsets(&self, link: &str, group: &str) -> Result<Vec<ServedOffset>> {
        load_link(&self.conn, link)?;
        let mut stmt = self.conn.prepare(
            "SELECT topic, partition, committed_offset, leader_epoch, metadata, committed_at_ms
             FROM served_offsets WHERE link = ?1 AND group_id = ?2 ORDER BY topic, partition",
        )?;
        let rows = stmt.query_map(params![link, group], |r| {
            Ok(ServedOffset {
                topic: r.get(0)?,
                partition: r.get(1)?,
                offset: r.get(2)?,
                leader_epoch: r.get(3)?,
                metadata: r.get(4)?,
                committed_at_ms: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The groups with offsets committed through the endpoint on `link`, by name.
    pub fn served_groups(&self, link: &str) -> Result<Vec<String>> {
        load_link(&self.conn, link)?;
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT group_id FROM served_offsets WHERE link = ?1 ORDER BY group_id")?;
        let rows = stmt.query_map([link], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Forget every offset `group` committed through the endpoint on `link` (Kafka's DeleteGroups); returns how
    /// many partitions' offsets were removed. Allowed in every link state: it removes no installed data.
    pub fn delete_served_group(&mut self, link: &str, group: &str) -> Result<usize> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        load_link(&tx, link)?;
        let removed = tx.execute(
            "DELETE FROM served_offsets WHERE link = ?1 AND group_id = ?2",
            params![link, group],
        )?;
        tx.commit()?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests;
