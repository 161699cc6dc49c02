//! A point-in-time snapshot of the catalog for `segmirror status [--json]`.
//!
//! Read in one transaction, so the numbers are consistent with each other even while the applier commits. The types
//! are plain serde structs: the JSON form is what `--json` prints, and its field names are a public contract.

use rusqlite::params;
use segment_format::now_ms;
use serde::Serialize;

use crate::error::Result;
use crate::link::{link_from_row, LINK_COLUMNS, LINK_COLUMN_COUNT};
use crate::link_state::LinkState;
use crate::partition::PartitionState;
use crate::Catalog;

/// Everything `segmirror status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub schema_version: u32,
    pub generated_at_ms: i64,
    pub links: Vec<LinkStatus>,
}

/// One link and its partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkStatus {
    pub name: String,
    pub state: LinkState,
    pub store_url: String,
    pub topics_regex: String,
    pub groups_regex: Option<String>,
    pub created_at_ms: i64,
    /// Newest event of the link or any of its partitions.
    pub last_event_at_ms: Option<i64>,
    pub partitions: Vec<PartitionStatus>,
}

/// One mirror partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    pub topic: String,
    pub partition: i32,
    pub state: PartitionState,
    pub source_topic_id: String,
    pub mirror_topic_id: Option<String>,
    /// The broker log dir the mirror's files were handed over (renamed) into at promotion; `None` when they were
    /// copied (or the partition is not promoted).
    pub handed_over_to: Option<String>,
    pub log_start_offset: i64,
    /// Offset after the last installed segment; `None` until one is installed.
    pub installed_end_offset: Option<i64>,
    pub segments_installed: u64,
    /// Sum of the `.log` sizes of the installed segments.
    pub bytes_installed: u64,
    /// Segment versions shipped or validated but not yet installed.
    pub segments_pending: u64,
    pub last_event_at_ms: Option<i64>,
}

impl Catalog {
    /// A consistent snapshot of every link and partition.
    pub fn status(&self) -> Result<Status> {
        // A deferred transaction on a read: one snapshot for all queries below, no write lock taken.
        let tx = self.conn.unchecked_transaction()?;
        let schema_version: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let links = {
            let mut stmt = tx.prepare(&format!(
                "SELECT {LINK_COLUMNS}, (SELECT max(at_ms) FROM events e WHERE e.link = links.name) \
                 FROM links ORDER BY name"
            ))?;
            let rows = stmt.query_map([], |row| {
                Ok((link_from_row(row)?, row.get::<_, Option<i64>>(LINK_COLUMN_COUNT)?))
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()?
        };

        let mut stmt = tx.prepare(
            "SELECT p.topic, p.partition, p.state, p.source_topic_id, p.mirror_topic_id, p.log_start_offset, \
                    p.installed_end_offset, \
                    (SELECT count(*) FROM segments s WHERE s.partition_id = p.id AND s.state = 'installed'), \
                    (SELECT coalesce(sum(size), 0) FROM segments s WHERE s.partition_id = p.id AND s.state = 'installed'), \
                    (SELECT count(*) FROM segments s WHERE s.partition_id = p.id AND s.state <> 'installed'), \
                    (SELECT max(at_ms) FROM events e \
                      WHERE e.link = p.link AND e.topic = p.topic AND e.partition = p.partition), \
                    p.handed_over_to \
             FROM mirror_partitions p WHERE p.link = ?1 ORDER BY p.topic, p.partition",
        )?;
        let mut out = Vec::with_capacity(links.len());
        for (link, last_event_at_ms) in links {
            let partitions = stmt
                .query_map(params![link.name], |row| {
                    Ok(PartitionStatus {
                        topic: row.get(0)?,
                        partition: row.get(1)?,
                        state: row.get(2)?,
                        source_topic_id: row.get(3)?,
                        mirror_topic_id: row.get(4)?,
                        log_start_offset: row.get(5)?,
                        installed_end_offset: row.get(6)?,
                        segments_installed: row.get(7)?,
                        bytes_installed: row.get(8)?,
                        segments_pending: row.get(9)?,
                        last_event_at_ms: row.get(10)?,
                        handed_over_to: row.get(11)?,
                    })
                })?
                .collect::<rusqlite::Result<_>>()?;
            out.push(LinkStatus {
                name: link.name,
                state: link.state,
                store_url: link.store_url,
                topics_regex: link.topics_regex,
                groups_regex: link.groups_regex,
                created_at_ms: link.created_at_ms,
                last_event_at_ms,
                partitions,
            });
        }
        Ok(Status {
            schema_version,
            generated_at_ms: now_ms(),
            links: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PartitionKey;
    use crate::test_support::{created, link_spec, seg};

    #[test]
    fn empty_catalog() {
        let cat = Catalog::open_in_memory().unwrap();
        let s = cat.status().unwrap();
        assert_eq!(s.schema_version, crate::SCHEMA_VERSION);
        assert!(s.links.is_empty());
    }

    #[test]
    fn snapshot_contents() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("east")).unwrap();
        cat.create_link(&link_spec("west")).unwrap();
        cat.set_link_state("west", LinkState::Paused).unwrap();
        let p1 = created(
            cat.upsert_partition(&PartitionKey::new("east", "orders", 1), "src-O", 0)
                .unwrap(),
        );
        let p0 = created(
            cat.upsert_partition(&PartitionKey::new("east", "orders", 0), "src-O", 5)
                .unwrap(),
        );
        cat.mark_installed(p0.id, "src-O", &seg(5, 100)).unwrap(); // 9500 bytes
        cat.mark_installed(p0.id, "src-O", &seg(100, 130)).unwrap(); // 3000 bytes
        cat.record_shipped(p0.id, "src-O", &seg(130, 200)).unwrap();
        cat.set_partition_state(p1.id, PartitionState::Promoted).unwrap();
        cat.set_mirror_topic_id(p0.id, "mir-O").unwrap();

        let s = cat.status().unwrap();
        assert_eq!(
            s.links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
            ["east", "west"]
        );
        let east = &s.links[0];
        assert_eq!(east.state, LinkState::Active);
        assert_eq!(east.store_url, "file:///srv/bucket/east");
        assert_eq!(east.partitions.len(), 2);
        let a = &east.partitions[0];
        assert_eq!((a.topic.as_str(), a.partition), ("orders", 0));
        assert_eq!(a.state, PartitionState::Mirroring);
        assert_eq!(a.source_topic_id, "src-O");
        assert_eq!(a.mirror_topic_id.as_deref(), Some("mir-O"));
        assert_eq!(a.log_start_offset, 5);
        assert_eq!(a.installed_end_offset, Some(130));
        assert_eq!(a.segments_installed, 2);
        assert_eq!(a.bytes_installed, 9500 + 3000);
        assert_eq!(a.segments_pending, 1);
        assert!(a.last_event_at_ms.is_some());
        let b = &east.partitions[1];
        assert_eq!((b.partition, b.state), (1, PartitionState::Promoted));
        assert_eq!(
            (b.installed_end_offset, b.segments_installed, b.bytes_installed),
            (None, 0, 0)
        );
        let last_p = east.partitions.iter().filter_map(|p| p.last_event_at_ms).max();
        assert!(east.last_event_at_ms >= last_p);
        let west = &s.links[1];
        assert_eq!(west.state, LinkState::Paused);
        assert!(west.partitions.is_empty());
        assert!(west.last_event_at_ms.is_some(), "link_created and the pause are events");

        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["links"][0]["partitions"][0]["state"], "mirroring");
        assert_eq!(json["links"][0]["partitions"][0]["bytes_installed"], 12500);
        assert_eq!(json["links"][0]["partitions"][1]["state"], "promoted");
        assert_eq!(
            json["links"][0]["partitions"][1]["installed_end_offset"],
            serde_json::Value::Null
        );
        assert_eq!(json["links"][1]["state"], "paused");
    }
}
