//! Which broker log dirs a partition was promoted into (schema step 8, `promoted_replicas`).
//!
//! Why: a topic replicated on several target brokers is promoted into every replica's log dir in one run
//! (`segmirror promote --log-dir A --log-dir B ...`), one log dir after the other. A crash between two log dirs
//! leaves some finished and some not; the promotion's rerun must skip the finished ones (their partitions now hold
//! data, which would otherwise be refused) and finish the rest with the same plan. A row is written once a log
//! dir's partitions are live and its root checkpoints durable, and before its promotion journal is removed, so "a
//! row and no journal" means finished and "a journal" means not yet. It is also what `status` and an operator read
//! to know where a partition now lives.

use std::collections::HashMap;

use rusqlite::{params, TransactionBehavior};
use segment_format::now_ms;

use crate::error::Result;
use crate::event::{insert_event, EventKind, Subject};
use crate::key::PartitionId;
use crate::partition::load_partition_by_id;
use crate::Catalog;

impl Catalog {
    /// Records that the partitions `ids` were installed into the broker log dir `log_dir`, all in one transaction
    /// (with one event each). Recording the same pair again is a no-op, so a rerun may repeat it; allowed for a
    /// promoted partition too (the last log dir is recorded in the run that marks it promoted).
    pub fn record_promoted_replicas(&mut self, ids: &[PartitionId], log_dir: &str) -> Result<()> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        for id in ids {
            let p = load_partition_by_id(&tx, *id)?;
            let added = tx.execute(
                "INSERT OR IGNORE INTO promoted_replicas (partition_id, log_dir, installed_at_ms) VALUES (?1, ?2, ?3)",
                params![id.0, log_dir, now],
            )?;
            if added > 0 {
                insert_event(
                    &tx,
                    Subject::Partition(&p.key),
                    EventKind::Note,
                    &format!("installed into broker log dir {log_dir}"),
                )?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The broker log dirs a partition was installed into ([`Catalog::record_promoted_replicas`]), by name.
    pub fn promoted_replicas(&self, id: PartitionId) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT log_dir FROM promoted_replicas WHERE partition_id = ?1 ORDER BY log_dir")?;
        let rows = stmt.query_map([id.0], |row| row.get(0))?;
        Ok(rows.collect::<rusqlite::Result<Vec<String>>>()?)
    }

    /// [`Catalog::promoted_replicas`] of every partition of `link` that has any, in one query (a promotion of
    /// 10,000 partitions asks for all of them at once).
    pub fn promoted_replicas_of_link(&self, link: &str) -> Result<HashMap<PartitionId, Vec<String>>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT r.partition_id, r.log_dir FROM promoted_replicas r \
             JOIN mirror_partitions p ON p.id = r.partition_id WHERE p.link = ?1 ORDER BY r.partition_id, r.log_dir",
        )?;
        let mut by_partition: HashMap<PartitionId, Vec<String>> = HashMap::new();
        let rows = stmt.query_map([link], |row| Ok((PartitionId(row.get(0)?), row.get::<_, String>(1)?)))?;
        for row in rows {
            let (id, log_dir) = row?;
            by_partition.entry(id).or_default().push(log_dir);
        }
        Ok(by_partition)
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{created, link_spec};
    use crate::{Catalog, PartitionKey, Subject};

    #[test]
    fn replicas_are_recorded_once_per_log_dir_and_listed() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        let key = PartitionKey::new("l", "orders", 0);
        let id = created(cat.upsert_partition(&key, "src-A", 0).unwrap()).id;
        assert!(cat.promoted_replicas(id).unwrap().is_empty());
        cat.record_promoted_replicas(&[id], "/b/logs").unwrap();
        cat.record_promoted_replicas(&[id], "/a/logs").unwrap();
        cat.record_promoted_replicas(&[id], "/a/logs").unwrap();
        assert_eq!(cat.promoted_replicas(id).unwrap(), ["/a/logs", "/b/logs"]);
        let other = created(
            cat.upsert_partition(&PartitionKey::new("l", "orders", 1), "src-A", 0)
                .unwrap(),
        )
        .id;
        cat.create_link(&link_spec("m")).unwrap();
        let elsewhere = created(
            cat.upsert_partition(&PartitionKey::new("m", "orders", 0), "src-B", 0)
                .unwrap(),
        )
        .id;
        cat.record_promoted_replicas(&[elsewhere], "/c/logs").unwrap();
        let of_link = cat.promoted_replicas_of_link("l").unwrap();
        assert_eq!(
            of_link.len(),
            1,
            "only partitions of the link with a replica: {of_link:?}"
        );
        assert_eq!(of_link[&id], ["/a/logs", "/b/logs"]);
        assert!(!of_link.contains_key(&other));
        assert_eq!(cat.promoted_replicas_of_link("m").unwrap()[&elsewhere], ["/c/logs"]);
        let notes = cat
            .events(Some(Subject::Partition(&key)), 100)
            .unwrap()
            .into_iter()
            .filter(|e| e.detail.starts_with("installed into broker log dir"))
            .count();
        assert_eq!(notes, 2, "one event per log dir, none for the repeat");
    }
}
