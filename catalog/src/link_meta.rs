//! A link's metadata on the applier side: the source's topics and its consumer groups' committed offsets, as the
//! shipper last sent them ([`segmirror_contract::link_meta`]).
//!
//! Why the received offset is stored and the committable one computed: an offset may arrive before the data it
//! points past is installed (the shipper reads `__consumer_offsets` and the topic's segments independently). A
//! target group must never be committed beyond what the mirror holds — its consumers would skip records the mirror
//! does not have yet, and nothing would tell them. Storing the source's offset as received and exposing
//! `committable = min(offset, installed end)` (with a flag when clamped) lets the committable offset rise to the
//! received one as the data installs, with no second write and no state that can lag behind the install.

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension, TransactionBehavior};
use segment_format::now_ms;
use segmirror_contract::link_meta::{GroupOffset, LinkMeta, TopicMeta};
use serde::Serialize;

use crate::error::Result;
use crate::event::{insert_event, EventKind, Subject};
use crate::link::load_link;
use crate::Catalog;

/// The version of a link's metadata last recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedMeta {
    pub version: u64,
    pub metadata_end_offset: i64,
    pub groups_regex: String,
    pub recorded_at_ms: i64,
}

/// One group's offset for one partition: as received, and what may be committed now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// The offset the group committed on the source.
    pub source_offset: i64,
    /// Informational only: never committed on the target (`docs/promotion.md`).
    pub leader_epoch: Option<i32>,
    pub metadata: String,
    pub commit_timestamp: i64,
    /// Offset after the last installed segment of the mirror partition, if any is installed.
    pub installed_end_offset: Option<i64>,
    /// `min(source_offset, installed_end_offset)`; `None` while nothing of the partition is installed (unless the
    /// group committed offset 0, which needs no data).
    pub committable: Option<i64>,
    /// The committable offset is below the source's: the data is not installed yet.
    pub clamped: bool,
}

impl LinkOffset {
    /// The offset as the source committed it (the shape every target-side command reads).
    pub fn source(&self) -> GroupOffset {
        GroupOffset {
            group: self.group.clone(),
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.source_offset,
            leader_epoch: self.leader_epoch,
            metadata: self.metadata.clone(),
            commit_timestamp: self.commit_timestamp,
        }
    }

    /// With a durable end the catalog does not record: a direct-transport mirror's active segment (its tail state,
    /// `<mirror>/.tail/`), beyond the sealed segments the catalog knows. The installed end becomes the larger of the
    /// two and the committable offset is clamped again by the same rule.
    pub fn with_durable_end(mut self, durable_end: Option<i64>) -> Self {
        self.installed_end_offset = match (self.installed_end_offset, durable_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.clamp()
    }

    fn clamp(mut self) -> Self {
        let (committable, clamped) = match self.installed_end_offset {
            Some(end) if end >= self.source_offset => (Some(self.source_offset), false),
            Some(end) => (Some(end), true),
            None if self.source_offset == 0 => (Some(0), false),
            None => (None, true),
        };
        self.committable = committable;
        self.clamped = clamped;
        self
    }
}

impl Catalog {
    /// Record `meta` as the link's metadata if its version is newer than the one recorded (`Ok(false)` otherwise:
    /// a repeated or older version changes nothing). Replaces the link's topics and offsets in one transaction:
    /// a group or topic absent from `meta` is gone at the source. `meta` is checked first (`Error::Invalid`).
    pub fn record_link_meta(&mut self, meta: &LinkMeta) -> Result<bool> {
        let link = meta.topics.link.as_str();
        meta.validate(link).map_err(|message| crate::Error::Invalid {
            what: "link metadata",
            message,
        })?;
        let version = i64::try_from(meta.topics.version).map_err(|_| crate::Error::Invalid {
            what: "link metadata",
            message: format!("version {} out of range", meta.topics.version),
        })?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        load_link(&tx, link)?;
        let recorded: Option<i64> = tx
            .query_row("SELECT version FROM link_meta WHERE link = ?1", [link], |r| r.get(0))
            .optional()?;
        if recorded.is_some_and(|v| v >= version) {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO link_meta (link, version, metadata_end_offset, groups_regex, recorded_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (link) DO UPDATE SET version = ?2, metadata_end_offset = ?3, groups_regex = ?4,
                 recorded_at_ms = ?5",
            params![
                link,
                version,
                meta.topics.metadata_end_offset,
                meta.offsets.groups_regex,
                now_ms()
            ],
        )?;
        tx.execute("DELETE FROM link_topics WHERE link = ?1", [link])?;
        tx.execute("DELETE FROM link_offsets WHERE link = ?1", [link])?;
        {
            let mut topic = tx.prepare(
                "INSERT INTO link_topics (link, topic, source_topic_id, partitions) VALUES (?1, ?2, ?3, ?4)",
            )?;
            let mut config =
                tx.prepare("INSERT INTO link_topic_configs (link, topic, name, value) VALUES (?1, ?2, ?3, ?4)")?;
            for t in &meta.topics.topics {
                topic.execute(params![link, t.name, t.topic_id, t.partitions])?;
                for (name, value) in &t.configs {
                    config.execute(params![link, t.name, name, value])?;
                }
            }
            let mut offset = tx.prepare(
                "INSERT INTO link_offsets (link, group_id, topic, partition, source_offset, leader_epoch, metadata,
                     commit_timestamp) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for o in &meta.offsets.offsets {
                offset.execute(params![
                    link,
                    o.group,
                    o.topic,
                    o.partition,
                    o.offset,
                    o.leader_epoch,
                    o.metadata,
                    o.commit_timestamp
                ])?;
            }
        }
        let detail = format!(
            "version {}: {} topic(s), {} offset(s) of groups {:?}",
            meta.topics.version,
            meta.topics.topics.len(),
            meta.offsets.offsets.len(),
            meta.offsets.groups_regex
        );
        insert_event(&tx, Subject::Link(link), EventKind::LinkMetaRecorded, &detail)?;
        tx.commit()?;
        Ok(true)
    }

    /// Record `meta` as the link's next version, whatever version it carries: the one recorded plus one (1 for the
    /// first). For a sender whose versions do not continue the catalog's: the direct protocol's shipper counts from
    /// 1 in every process, while the applier's catalog outlives both. Returns the version recorded. Same checks and
    /// the same replacement as [`Catalog::record_link_meta`]; one writer per link (the applier holding the mirror).
    pub fn record_link_meta_as_next(&mut self, meta: &LinkMeta) -> Result<u64> {
        let link = meta.topics.link.as_str();
        let next = self.link_meta(link)?.map_or(1, |r| r.version + 1);
        let mut meta = meta.clone();
        meta.topics.version = next;
        meta.offsets.version = next;
        self.record_link_meta(&meta)?;
        Ok(next)
    }

    /// The version of the link's metadata last recorded, if any.
    pub fn link_meta(&self, link: &str) -> Result<Option<RecordedMeta>> {
        load_link(&self.conn, link)?;
        Ok(self
            .conn
            .query_row(
                "SELECT version, metadata_end_offset, groups_regex, recorded_at_ms FROM link_meta WHERE link = ?1",
                [link],
                |r| {
                    Ok(RecordedMeta {
                        version: r.get::<_, i64>(0)?.max(0) as u64,
                        metadata_end_offset: r.get(1)?,
                        groups_regex: r.get(2)?,
                        recorded_at_ms: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }

    /// The link's source topics, by name, as the shipper sent them.
    pub fn link_topics(&self, link: &str) -> Result<Vec<TopicMeta>> {
        load_link(&self.conn, link)?;
        let mut topics: BTreeMap<String, TopicMeta> = BTreeMap::new();
        let mut stmt = self
            .conn
            .prepare("SELECT topic, source_topic_id, partitions FROM link_topics WHERE link = ?1 ORDER BY topic")?;
        for row in stmt.query_map([link], |r| {
            Ok(TopicMeta {
                name: r.get(0)?,
                topic_id: r.get(1)?,
                partitions: r.get(2)?,
                configs: BTreeMap::new(),
            })
        })? {
            let t = row?;
            topics.insert(t.name.clone(), t);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT topic, name, value FROM link_topic_configs WHERE link = ?1")?;
        for row in stmt.query_map([link], |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?)))? {
            let (topic, name, value) = row?;
            if let Some(t) = topics.get_mut(&topic) {
                t.configs.insert(name, value);
            }
        }
        Ok(topics.into_values().collect())
    }

    /// The link's committed offsets, by (group, topic, partition), each with what may be committed on the target
    /// now: never beyond what is installed for that partition.
    pub fn link_offsets(&self, link: &str) -> Result<Vec<LinkOffset>> {
        load_link(&self.conn, link)?;
        let mut stmt = self.conn.prepare(
            "SELECT o.group_id, o.topic, o.partition, o.source_offset, o.leader_epoch, o.metadata, o.commit_timestamp,
                    p.installed_end_offset
             FROM link_offsets o
             LEFT JOIN mirror_partitions p ON p.link = o.link AND p.topic = o.topic AND p.partition = o.partition
             WHERE o.link = ?1
             ORDER BY o.group_id, o.topic, o.partition",
        )?;
        let rows = stmt.query_map([link], |r| {
            Ok(LinkOffset {
                group: r.get(0)?,
                topic: r.get(1)?,
                partition: r.get(2)?,
                source_offset: r.get(3)?,
                leader_epoch: r.get(4)?,
                metadata: r.get(5)?,
                commit_timestamp: r.get(6)?,
                installed_end_offset: r.get(7)?,
                committable: None,
                clamped: false,
            }
            .clamp())
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}

#[cfg(test)]
mod tests;
