//! The event log: an append-only history of what the applier and the operator did, for `segmirror status` and for
//! humans diagnosing a mirror.
//!
//! Every catalog state change appends its event in the same transaction, so the log never claims something the
//! tables do not show (and vice versa). Callers append their own events (a segment rejected by validation, a
//! reconciliation after a restart, a lineage break they acted on) with [`Catalog::append_event`] (in `link`: it checks the link exists; this module reads no other table). The kind is typed;
//! the detail is free text for humans. Ordering is by row id, not by the wall clock.

use std::collections::HashMap;

use rusqlite::{params, Connection, Row};
use serde::Serialize;

use segment_format::now_ms;

use crate::error::Result;
use crate::key::PartitionKey;
use crate::{text_enum, Catalog};

text_enum! {
    /// What an event records.
    pub enum EventKind {
        LinkCreated => "link_created",
        LinkStateChanged => "link_state_changed",
        /// A link's topics or consumer-groups regex changed.
        LinkConfigChanged => "link_config_changed",
        PartitionCreated => "partition_created",
        PartitionStateChanged => "partition_state_changed",
        MirrorTopicIdSet => "mirror_topic_id_set",
        /// A different source topic ID was seen for a partition (appended by the caller that saw it).
        LineageBreak => "lineage_break",
        /// A partition switched to a new lineage ([`Catalog::start_new_lineage`]).
        LineageReset => "lineage_reset",
        SegmentInstalled => "segment_installed",
        /// The source's log start moved forward; installed rows wholly below it were dropped
        /// ([`Catalog::advance_log_start`]).
        LogStartMoved => "log_start_moved",
        /// A run of sealed segments was replaced by the source's compacted version ([`Catalog::replace_sealed`]).
        SegmentsReplaced => "segments_replaced",
        /// A shipped segment failed validation and was not installed.
        SegmentRejected => "segment_rejected",
        /// After a restart, disk and catalog were compared and brought in line.
        Reconciled => "reconciled",
        /// A new version of the link's metadata (topics, consumer offsets) was recorded
        /// ([`Catalog::record_link_meta`]).
        LinkMetaRecorded => "link_meta_recorded",
        /// A step of `segmirror failover` started or finished ([`Catalog::start_failover_step`]).
        FailoverStep => "failover_step",
        /// Anything else worth telling an operator.
        Note => "note",
    }
}

/// What an event is about: a whole link, or one of its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject<'a> {
    Link(&'a str),
    Partition(&'a PartitionKey),
}

impl<'a> Subject<'a> {
    pub(crate) fn link(self) -> &'a str {
        match self {
            Subject::Link(link) => link,
            Subject::Partition(key) => &key.link,
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Increases with every append; newer events have larger ids.
    pub id: i64,
    pub at_ms: i64,
    pub link: String,
    /// Set together with `partition` for partition events.
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub kind: EventKind,
    pub detail: String,
}

/// Appends an event inside the caller's transaction.
pub(crate) fn insert_event(conn: &Connection, subject: Subject<'_>, kind: EventKind, detail: &str) -> Result<i64> {
    let (topic, partition) = match subject {
        Subject::Link(_) => (None, None),
        Subject::Partition(key) => (Some(key.topic.as_str()), Some(key.partition)),
    };
    // Cached: appended once per change, thousands of times in one transaction by a promotion.
    conn.prepare_cached(
        "INSERT INTO events (at_ms, link, topic, partition, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![now_ms(), subject.link(), topic, partition, kind, detail])?;
    Ok(conn.last_insert_rowid())
}

fn event_from_row(row: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        id: row.get(0)?,
        at_ms: row.get(1)?,
        link: row.get(2)?,
        topic: row.get(3)?,
        partition: row.get(4)?,
        kind: row.get(5)?,
        detail: row.get(6)?,
    })
}

impl Catalog {
    /// The newest `limit` events, newest first: all of them (`None`), a link's (including its partitions'), or one
    /// partition's.
    pub fn events(&self, subject: Option<Subject<'_>>, limit: usize) -> Result<Vec<Event>> {
        const COLUMNS: &str = "id, at_ms, link, topic, partition, kind, detail";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = match subject {
            None => {
                let mut stmt = self
                    .conn
                    .prepare(&format!("SELECT {COLUMNS} FROM events ORDER BY id DESC LIMIT ?1"))?;
                let rows = stmt
                    .query_map([limit], event_from_row)?
                    .collect::<rusqlite::Result<_>>()?;
                rows
            }
            Some(Subject::Link(link)) => {
                let mut stmt = self.conn.prepare(&format!(
                    "SELECT {COLUMNS} FROM events WHERE link = ?1 ORDER BY id DESC LIMIT ?2"
                ))?;
                let rows = stmt
                    .query_map(params![link, limit], event_from_row)?
                    .collect::<rusqlite::Result<_>>()?;
                rows
            }
            Some(Subject::Partition(key)) => {
                let mut stmt = self.conn.prepare(&format!(
                    "SELECT {COLUMNS} FROM events WHERE link = ?1 AND topic = ?2 AND partition = ?3 \
                     ORDER BY id DESC LIMIT ?4"
                ))?;
                let rows = stmt
                    .query_map(params![key.link, key.topic, key.partition, limit], event_from_row)?
                    .collect::<rusqlite::Result<_>>()?;
                rows
            }
        };
        Ok(rows)
    }

    /// The newest event of each of `link`'s partitions that has one, in one query: what `segmirror status` shows
    /// per partition, where a query per partition cost a second at 10,000 partitions.
    pub fn last_partition_events(&self, link: &str) -> Result<HashMap<(String, i32), Event>> {
        let mut stmt = self.conn.prepare(
            "SELECT e.id, e.at_ms, e.link, e.topic, e.partition, e.kind, e.detail FROM events e \
             JOIN (SELECT MAX(id) AS id FROM events WHERE link = ?1 AND topic IS NOT NULL \
                   GROUP BY topic, partition) newest ON e.id = newest.id",
        )?;
        let events = stmt
            .query_map([link], event_from_row)?
            .collect::<rusqlite::Result<Vec<Event>>>()?;
        Ok(events
            .into_iter()
            .filter_map(|e| Some(((e.topic.clone()?, e.partition?), e)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Entity, Error};
    use crate::test_support::link_spec;

    #[test]
    fn append_and_list_newest_first_with_scopes() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        cat.create_link(&link_spec("b")).unwrap();
        let k0 = PartitionKey::new("a", "t", 0);
        let k1 = PartitionKey::new("a", "t", 1);
        let e1 = cat
            .append_event(Subject::Partition(&k0), EventKind::Note, "first")
            .unwrap();
        let e2 = cat
            .append_event(Subject::Partition(&k1), EventKind::SegmentRejected, "crc")
            .unwrap();
        let e3 = cat
            .append_event(Subject::Link("b"), EventKind::Note, "other link")
            .unwrap();
        assert!(e1 < e2 && e2 < e3);

        let all = cat.events(None, 100).unwrap();
        assert_eq!(all.len(), 5, "two link_created + three appended");
        assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>()[..3], [e3, e2, e1]);
        assert_eq!(cat.events(None, 2).unwrap().len(), 2);
        assert!(cat.events(None, 0).unwrap().is_empty());

        let a = cat.events(Some(Subject::Link("a")), 100).unwrap();
        assert_eq!(
            a.iter().map(|e| e.kind).collect::<Vec<_>>(),
            [EventKind::SegmentRejected, EventKind::Note, EventKind::LinkCreated]
        );
        let p1 = cat.events(Some(Subject::Partition(&k1)), 100).unwrap();
        assert_eq!(p1.len(), 1);
        assert_eq!(p1[0].id, e2);
        assert_eq!(p1[0].detail, "crc");
        assert_eq!((p1[0].topic.as_deref(), p1[0].partition), (Some("t"), Some(1)));
        assert!(p1[0].at_ms > 0);
    }

    #[test]
    fn the_newest_event_of_each_partition_of_a_link_in_one_query() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        cat.create_link(&link_spec("b")).unwrap();
        let k0 = PartitionKey::new("a", "t", 0);
        let k1 = PartitionKey::new("a", "t", 1);
        let u0 = PartitionKey::new("a", "u", 0);
        let other = PartitionKey::new("b", "t", 0);
        cat.append_event(Subject::Partition(&k0), EventKind::Note, "older")
            .unwrap();
        let newest0 = cat
            .append_event(Subject::Partition(&k0), EventKind::Note, "newer")
            .unwrap();
        let newest1 = cat
            .append_event(Subject::Partition(&k1), EventKind::SegmentRejected, "crc")
            .unwrap();
        let newest_u = cat.append_event(Subject::Partition(&u0), EventKind::Note, "u").unwrap();
        cat.append_event(Subject::Partition(&other), EventKind::Note, "other link")
            .unwrap();
        cat.append_event(Subject::Link("a"), EventKind::Note, "the link's own")
            .unwrap();

        let last = cat.last_partition_events("a").unwrap();
        let ids: HashMap<(String, i32), i64> = last.iter().map(|(k, e)| (k.clone(), e.id)).collect();
        assert_eq!(
            ids,
            HashMap::from([
                (("t".to_string(), 0), newest0),
                (("t".to_string(), 1), newest1),
                (("u".to_string(), 0), newest_u),
            ])
        );
        // The same as the per-partition query.
        for key in [&k0, &k1, &u0] {
            let one = cat.events(Some(Subject::Partition(key)), 1).unwrap().remove(0);
            assert_eq!(last[&(key.topic.clone(), key.partition)], one);
        }
        assert!(cat.last_partition_events("nobody").unwrap().is_empty());
    }

    #[test]
    fn events_need_a_known_link() {
        let mut cat = Catalog::open_in_memory().unwrap();
        assert!(matches!(
            cat.append_event(Subject::Link("x"), EventKind::Note, ""),
            Err(Error::NotFound { entity: Entity::Link(n) }) if n == "x"
        ));
    }

    #[test]
    fn event_serialises_with_snake_case_kind() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("a")).unwrap();
        let ev = cat.events(None, 1).unwrap().remove(0);
        let json = serde_json::to_value(&ev).unwrap();
        assert_eq!(json["kind"], "link_created");
        assert_eq!(json["link"], "a");
        assert!(json["topic"].is_null());
    }
}
