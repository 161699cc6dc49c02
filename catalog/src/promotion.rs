//! What a promotion records of its partitions once they are live in the target's log dirs: the target topic ID,
//! where the mirror's files were handed over to, the promotion's notes, and the state `promoted`, for every
//! partition in one transaction.
//!
//! Why one transaction: each commit of the catalog is an fsync of its write-ahead log, and a promotion of 10,000
//! partitions recorded one write at a time made 40,000 of them — most of its time. All or nothing is also the
//! simpler crash story: the promotion's journal is removed only after this commit, so a rerun after a crash before
//! it records every partition again, and one after it finds them promoted and skips them.

use rusqlite::TransactionBehavior;

use crate::error::Result;
use crate::event::{insert_event, EventKind, Subject};
use crate::key::PartitionId;
use crate::partition::{load_partition_by_id, set_handed_over_in, set_mirror_topic_id_in, set_state_in};
use crate::{Catalog, PartitionState};

/// What the catalog records of one promoted partition ([`Catalog::record_promotions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromotionRecord<'a> {
    pub id: PartitionId,
    /// The topic ID of the partition on the target (its `partition.metadata`).
    pub mirror_topic_id: &'a str,
    /// The log dir the mirror's files were renamed into, when they were handed over.
    pub handed_over_to: Option<&'a str>,
    /// Partition events of kind `note`, in order (what was promoted, transactions aborted, a consistent cut).
    pub notes: Vec<String>,
}

impl Catalog {
    /// Records every partition of `records` promoted, in one transaction: its target topic ID, its handover, its
    /// notes, then the state `promoted` (each change with its event, as the one-at-a-time setters write them). A
    /// partition already promoted is left as it is, so a rerun may repeat the call. Returns how many partitions
    /// this call promoted.
    pub fn record_promotions(&mut self, records: &[PromotionRecord<'_>]) -> Result<usize> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut promoted = 0;
        for r in records {
            let p = load_partition_by_id(&tx, r.id)?;
            if p.state == PartitionState::Promoted {
                continue;
            }
            set_mirror_topic_id_in(&tx, r.id, r.mirror_topic_id)?;
            if let Some(dir) = r.handed_over_to {
                set_handed_over_in(&tx, r.id, dir)?;
            }
            for note in &r.notes {
                insert_event(&tx, Subject::Partition(&p.key), EventKind::Note, note)?;
            }
            set_state_in(&tx, r.id, PartitionState::Promoted)?;
            promoted += 1;
        }
        tx.commit()?;
        Ok(promoted)
    }
}

#[cfg(test)]
#[path = "promotion_tests.rs"]
mod tests;
