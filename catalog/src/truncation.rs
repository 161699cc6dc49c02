//! Source truncations: what the mirror removed because the source no longer holds it, and where it was kept.
//!
//! Why a table of its own and not events: a truncation removes records from a mirror, so an operator must be
//! able to list every one with its offset range and archive file (`segmirror status`), and the applier's crash
//! recovery must be able to record the same truncation again without a duplicate (the row is unique per range).
//! A `diverged` row is a source that lost committed records (high-watermark mode): recorded, nothing removed, the
//! partition stopped.

use rusqlite::{params, Row, TransactionBehavior};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::key::{PartitionId, PartitionKey};
use crate::partition::load_writable;
use crate::Catalog;

/// What happened to the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncationKind {
    /// Removed from the mirror (log-end mode) and kept in the archive.
    Truncated,
    /// The source lost committed records (high-watermark mode): recorded, not removed; the partition stopped.
    Diverged,
}

impl TruncationKind {
    fn as_str(self) -> &'static str {
        match self {
            TruncationKind::Truncated => "truncated",
            TruncationKind::Diverged => "diverged",
        }
    }

    fn parse(s: &str) -> Option<TruncationKind> {
        match s {
            "truncated" => Some(TruncationKind::Truncated),
            "diverged" => Some(TruncationKind::Diverged),
            _ => None,
        }
    }
}

/// One recorded truncation or divergence of a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TruncationRecord {
    pub link: String,
    pub topic: String,
    pub partition: i32,
    pub kind: TruncationKind,
    /// First offset removed (or that the source no longer holds).
    pub from_offset: i64,
    /// One past the last offset removed: the mirror's end before.
    pub to_offset: i64,
    /// The leader epoch of the mirror's last batch before.
    pub mirror_epoch: i32,
    /// The source's answer for that epoch: its largest epoch at or below it, and where it ends.
    pub source_epoch: i32,
    pub source_end_offset: i64,
    /// The archived batches (`truncated` only), relative to the mirror root.
    pub archive_path: Option<String>,
    #[serde(skip)]
    pub sha256: Option<[u8; 32]>,
    /// Bytes archived.
    pub size: Option<u64>,
    pub at_ms: i64,
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<TruncationRecord> {
    let kind: String = row.get(4)?;
    let sha: Option<Vec<u8>> = row.get(11)?;
    let size: Option<i64> = row.get(12)?;
    Ok(TruncationRecord {
        link: row.get(0)?,
        topic: row.get(1)?,
        partition: row.get(2)?,
        kind: TruncationKind::parse(&kind).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, format!("kind {kind:?}").into())
        })?,
        from_offset: row.get(5)?,
        to_offset: row.get(6)?,
        mirror_epoch: row.get(7)?,
        source_epoch: row.get(8)?,
        source_end_offset: row.get(9)?,
        archive_path: row.get(10)?,
        sha256: sha.and_then(|s| <[u8; 32]>::try_from(s.as_slice()).ok()),
        size: size.and_then(|s| u64::try_from(s).ok()),
        at_ms: row.get(3)?,
    })
}

impl Catalog {
    /// Records a truncation (or divergence) of a partition, with an event, in one transaction; `false` when the
    /// same range of the same kind was recorded before (a crash recovery repeating the step: nothing changes).
    pub fn record_truncation(&mut self, r: &TruncationRecord) -> Result<bool> {
        let tx = self.conn.transaction()?;
        let inserted = tx.execute(
            "INSERT INTO truncations (link, topic, partition, kind, from_offset, to_offset, mirror_epoch, \
             source_epoch, source_end_offset, archive_path, sha256, size, at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
             ON CONFLICT (link, topic, partition, kind, from_offset, to_offset) DO NOTHING",
            params![
                r.link,
                r.topic,
                r.partition,
                r.kind.as_str(),
                r.from_offset,
                r.to_offset,
                r.mirror_epoch,
                r.source_epoch,
                r.source_end_offset,
                r.archive_path,
                r.sha256.map(|s| s.to_vec()),
                r.size.map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
                r.at_ms,
            ],
        )? == 1;
        if inserted {
            let key = PartitionKey::new(&r.link, &r.topic, r.partition);
            let detail = match r.kind {
                TruncationKind::Truncated => format!(
                    "source truncated: offsets [{}, {}) removed from the mirror and archived in {} (mirror epoch {}, source epoch {} ends at {})",
                    r.from_offset,
                    r.to_offset,
                    r.archive_path.as_deref().unwrap_or("?"),
                    r.mirror_epoch,
                    r.source_epoch,
                    r.source_end_offset
                ),
                TruncationKind::Diverged => format!(
                    "source lost committed records: offsets [{}, {}) are not on the source (mirror epoch {}, source epoch {} ends at {}); the partition stopped",
                    r.from_offset, r.to_offset, r.mirror_epoch, r.source_epoch, r.source_end_offset
                ),
            };
            insert_event(&tx, Subject::Partition(&key), EventKind::Note, &detail)?;
        }
        tx.commit()?;
        Ok(inserted)
    }

    /// A source truncation that reached into installed history (an unclean election cut below the source's last
    /// roll): every installed row at or above `from_base` is dropped and the installed end set back to
    /// `from_base`, with an event, in one transaction; the base offsets dropped, in order. The caller has archived
    /// the bytes and made `from_base` the segment it appends to (its state file): the catalog again holds only the
    /// sealed history below the active segment. Idempotent: a repeat drops nothing and writes nothing.
    ///
    /// Errors (nothing written): `NotFound`, `Promoted`, `LineageBreak`, `InvalidOffset`.
    pub fn truncate_installed(&mut self, id: PartitionId, source_topic_id: &str, from_base: i64) -> Result<Vec<i64>> {
        if from_base < 0 {
            return Err(Error::InvalidOffset {
                field: "truncated segment base",
                value: from_base,
            });
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = load_writable(&tx, id, source_topic_id)?;
        let dropped: Vec<i64> = {
            let mut stmt = tx.prepare(
                "SELECT base_offset FROM segments WHERE partition_id = ?1 AND state = 'installed' \
                 AND base_offset >= ?2 ORDER BY base_offset",
            )?;
            let rows = stmt
                .query_map(params![id.0, from_base], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            rows
        };
        if dropped.is_empty() {
            return Ok(dropped);
        }
        tx.execute(
            "DELETE FROM segments WHERE partition_id = ?1 AND state = 'installed' AND base_offset >= ?2",
            params![id.0, from_base],
        )?;
        tx.execute(
            "UPDATE mirror_partitions SET installed_end_offset = ?2 WHERE id = ?1",
            params![id.0, from_base],
        )?;
        let detail = format!(
            "source truncated into installed history: {} installed segment(s) {dropped:?} dropped, installed end \
             offset {:?} -> {from_base} (the first one is the segment appended to again)",
            dropped.len(),
            p.installed_end_offset
        );
        insert_event(&tx, Subject::Partition(&p.key), EventKind::Note, &detail)?;
        tx.commit()?;
        Ok(dropped)
    }

    /// Every recorded truncation of `link` (all links with `None`), oldest first.
    pub fn truncations(&self, link: Option<&str>) -> Result<Vec<TruncationRecord>> {
        const COLUMNS: &str = "link, topic, partition, at_ms, kind, from_offset, to_offset, mirror_epoch, \
                               source_epoch, source_end_offset, archive_path, sha256, size";
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM truncations WHERE ?1 IS NULL OR link = ?1 ORDER BY id"
        ))?;
        let rows = stmt
            .query_map(params![link], from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LinkSpec;

    fn record(kind: TruncationKind, from: i64) -> TruncationRecord {
        TruncationRecord {
            link: "l".into(),
            topic: "t".into(),
            partition: 0,
            kind,
            from_offset: from,
            to_offset: from + 10,
            mirror_epoch: 1,
            source_epoch: 1,
            source_end_offset: from,
            archive_path: (kind == TruncationKind::Truncated).then(|| format!(".archive/t-0/{from}.log")),
            sha256: (kind == TruncationKind::Truncated).then_some([3; 32]),
            size: (kind == TruncationKind::Truncated).then_some(99),
            at_ms: 5,
        }
    }

    #[test]
    fn a_truncation_is_recorded_once_and_listed_with_its_range() {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&LinkSpec {
            name: "l".into(),
            store_url: "direct:".into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
        let t = record(TruncationKind::Truncated, 20);
        assert!(cat.record_truncation(&t).unwrap());
        // A recovery repeating the step records nothing new.
        assert!(!cat.record_truncation(&t).unwrap());
        let d = record(TruncationKind::Diverged, 40);
        assert!(cat.record_truncation(&d).unwrap());
        assert_eq!(cat.truncations(Some("l")).unwrap(), vec![t, d]);
        assert!(cat.truncations(Some("other")).unwrap().is_empty());
        // A truncated range needs its archive; an empty range is refused.
        let mut bad = record(TruncationKind::Truncated, 60);
        bad.archive_path = None;
        assert!(cat.record_truncation(&bad).is_err());
        let mut bad = record(TruncationKind::Diverged, 70);
        bad.to_offset = 70;
        assert!(cat.record_truncation(&bad).is_err());
    }

    #[test]
    fn a_truncation_into_installed_history_drops_the_rows_from_its_segment_on_once() {
        use crate::test_support::{created, seg};
        use crate::SegmentVersion;
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&crate::test_support::link_spec("l")).unwrap();
        let key = PartitionKey::new("l", "t", 0);
        let id = created(cat.upsert_partition(&key, "src", 0).unwrap()).id;
        for (b, n) in [(0, 100), (100, 200), (200, 300)] {
            let v = SegmentVersion {
                sealed: true,
                ..seg(b, n)
            };
            cat.mark_installed(id, "src", &v).unwrap();
        }
        assert_eq!(cat.truncate_installed(id, "src", 100).unwrap(), vec![100, 200]);
        let left: Vec<i64> = cat
            .installed_segments(id)
            .unwrap()
            .iter()
            .map(|s| s.version.base_offset)
            .collect();
        assert_eq!(left, vec![0]);
        assert_eq!(cat.partition_by_id(id).unwrap().installed_end_offset, Some(100));
        // A repeat (crash recovery) drops nothing; segment 100 can be sealed again, with other content.
        assert!(cat.truncate_installed(id, "src", 100).unwrap().is_empty());
        let v = SegmentVersion {
            sealed: true,
            ..seg(100, 150)
        };
        cat.mark_installed(id, "src", &v).unwrap();
        // Another lineage or a negative base is refused, nothing written.
        assert!(cat.truncate_installed(id, "other", 0).is_err());
        assert!(cat.truncate_installed(id, "src", -1).is_err());
        assert_eq!(cat.installed_segments(id).unwrap().len(), 2);
    }
}
