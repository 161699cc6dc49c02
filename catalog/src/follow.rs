//! The source's own changes to installed history, followed on the mirror: **retention** (the source's log start
//! moved forward and whole segments below it were deleted) and **compaction replacements** (the source's cleaner
//! rewrote a run of sealed segments into one new version with the first one's base).
//!
//! Why explicit operations rather than `mark_installed`: the succession rule of `segment` is about a log that only
//! grows at its end; it refuses a changed sealed version (`SealedChanged`) and never forgets a segment. Retention
//! and compaction change the *front* and the *middle* of the history, each by a rule of its own, checked here in
//! ONE transaction together with its event, after the caller made the files durable (so a crash leaves the catalog
//! at most behind the disk, and the caller's recovery repeats the call: both are idempotent).
//!
//! # Retention ([`Catalog::advance_log_start`])
//! The partition's log start offset moves forward to the offered one (never backwards: a lower offer moves
//! nothing) and every installed row wholly below it (`next_offset <= log start`) is dropped. The installed end
//! offset does not move: retention deletes from the front, the end of what was installed stays where it was (also
//! when every row goes: the tail appender's active segment, not in the catalog, then holds the log start).
//!
//! # Compaction replacement ([`Catalog::replace_sealed`])
//! The replaced bases must be exactly the installed rows in their range (a contiguous run, in order), each sealed.
//! The new version takes the first base and the **replaced range's end** as its next offset: a cleaner removes
//! records, it never moves a segment's offset range, so the next segment's base (or the partition's installed end
//! offset, when the run ends with the last installed segment) is unchanged. Its last offset must lie in
//! `[base, end)`; a replacement holding no batch at all (the cleaner removed every record) records the base as its
//! last offset, the schema's lower bound, since a row needs one. A promoted partition refuses both operations.

use rusqlite::{params, Connection, TransactionBehavior};

use crate::error::{Error, ReplacementRefusal, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::key::PartitionId;
use crate::partition::{load_writable, MirrorPartition};
use crate::segment::{load_segment, SegmentState, SegmentVersion};
use crate::Catalog;

/// What [`Catalog::advance_log_start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionReceipt {
    /// The partition after the call.
    pub partition: MirrorPartition,
    /// Base offsets of the installed rows dropped (wholly below the log start).
    pub dropped: Vec<i64>,
    /// Whether the log start offset moved.
    pub moved: bool,
}

/// A replacement of sealed segments, as the caller validated it on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// Size of the new `.log` in bytes.
    pub size: u64,
    /// SHA-256 of the new `.log`.
    pub sha256: [u8; 32],
    /// Last offset of its last batch; `None` when it holds no batch.
    pub last_offset: Option<i64>,
    /// What the new version came from (recorded as its `manifest_key`).
    pub manifest_key: String,
    /// The new version's end when it also covers the partition's tail beyond the replaced rows (a cleaner merged
    /// the segment being tailed into an earlier one: the source's next segment base; or the tail appender's last
    /// sealed segment, cleaned before it was shipped, reaches the next segment's base over the hole the cleaner
    /// left at its end; or the mirror's next segment lies above the replaced rows' end, because a segment the cleaner
    /// merged into this one never reached the mirror). `None`: the replaced rows' end. At or above that end; rows starting between the last replaced base and it (a tail handed over from
    /// `apply`, or the tailed segment sealed in the catalog by a crash before the tail recorded it) are dropped with
    /// the others.
    pub next_offset: Option<i64>,
}

/// What [`Catalog::replace_sealed`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceOutcome {
    /// The rows were replaced by the new version.
    Replaced(SegmentVersion),
    /// The new version is installed already in place of the replaced rows; nothing was written.
    AlreadyReplaced,
}

/// The new version a replacement installs, or that it is installed already.
fn plan_replacement(conn: &Connection, p: &MirrorPartition, bases: &[i64], r: &Replacement) -> Result<ReplaceOutcome> {
    let refuse = |reason| Error::ReplacementRefused {
        partition: p.key.clone(),
        replaced_bases: bases.to_vec(),
        reason,
    };
    let (Some(&first), Some(&last)) = (bases.first(), bases.last()) else {
        return Err(refuse(ReplacementRefusal::NotIncreasing));
    };
    if bases.windows(2).any(|w| w[0] >= w[1]) {
        return Err(refuse(ReplacementRefusal::NotIncreasing));
    }
    let mut stmt = conn.prepare(
        "SELECT base_offset FROM segments WHERE partition_id = ?1 AND state = 'installed' \
         AND base_offset BETWEEN ?2 AND ?3 ORDER BY base_offset",
    )?;
    let in_range: Vec<i64> = stmt
        .query_map(params![p.id.0, first, last], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let first_row = load_segment(conn, p.id, first)?.filter(|s| s.state == SegmentState::Installed);
    let Some(first_row) = first_row else {
        return Err(refuse(ReplacementRefusal::NotInstalled { base_offset: first }));
    };
    let new_version = |end: i64| SegmentVersion {
        base_offset: first,
        next_offset: end,
        last_offset: r.last_offset.unwrap_or(first),
        size: r.size,
        sha256: r.sha256,
        manifest_key: r.manifest_key.clone(),
        sealed: true,
    };
    // Done already (a repeat after a crash): the first row is the new version (its end included, when one is
    // given: the same bytes with a later end extend the range), the others are gone.
    let done = new_version(r.next_offset.unwrap_or(first_row.version.next_offset));
    if in_range == [first] && first_row.version.sealed && same_content(&first_row.version, &done) {
        return Ok(ReplaceOutcome::AlreadyReplaced);
    }
    if in_range != bases {
        if let Some(missing) = bases.iter().find(|b| !in_range.contains(b)) {
            return Err(refuse(ReplacementRefusal::NotInstalled { base_offset: *missing }));
        }
        return Err(refuse(ReplacementRefusal::NotContiguous { installed: in_range }));
    }
    let mut end = first_row.version.next_offset;
    for base in bases {
        let row =
            load_segment(conn, p.id, *base)?.ok_or(refuse(ReplacementRefusal::NotInstalled { base_offset: *base }))?;
        if !row.version.sealed {
            return Err(refuse(ReplacementRefusal::NotSealed { base_offset: *base }));
        }
        end = row.version.next_offset;
    }
    if let Some(next) = r.next_offset {
        if next < end {
            return Err(refuse(ReplacementRefusal::LastOffsetOutside {
                last_offset: next.saturating_sub(1),
                range_end: end,
            }));
        }
        end = next;
    }
    let v = new_version(end);
    if let Some(last_offset) = r.last_offset {
        if last_offset < first || last_offset >= end {
            return Err(refuse(ReplacementRefusal::LastOffsetOutside {
                last_offset,
                range_end: end,
            }));
        }
    }
    v.validate()?;
    Ok(ReplaceOutcome::Replaced(v))
}

/// Rows (base, sealed) starting in `(last, next)`: the tail a replacement with a `next_offset` also covers.
fn rows_after(conn: &Connection, id: PartitionId, last: i64, next: i64) -> Result<Vec<(i64, bool)>> {
    let mut stmt = conn.prepare(
        "SELECT base_offset, sealed FROM segments WHERE partition_id = ?1 AND base_offset > ?2 \
         AND base_offset < ?3 ORDER BY base_offset",
    )?;
    let rows = stmt
        .query_map(params![id.0, last, next], |row| {
            Ok((row.get(0)?, row.get::<_, i64>(1)? != 0))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

fn same_content(a: &SegmentVersion, b: &SegmentVersion) -> bool {
    (a.next_offset, a.last_offset, a.size, a.sha256) == (b.next_offset, b.last_offset, b.size, b.sha256)
}

impl Catalog {
    /// Retention (module docs): moves the partition's log start offset forward to `log_start_offset` and drops the
    /// installed rows wholly below it, with a `log_start_moved` event, in one transaction. A lower or equal offer
    /// moves nothing; a call that changes nothing writes nothing. Call it after the deleted files are gone
    /// durably (or together with a decision to keep them outside the partition's log).
    ///
    /// Errors (nothing written): `NotFound`, `Promoted`, `LineageBreak`, `InvalidOffset`.
    pub fn advance_log_start(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        log_start_offset: i64,
    ) -> Result<RetentionReceipt> {
        if log_start_offset < 0 {
            return Err(Error::InvalidOffset {
                field: "log start offset",
                value: log_start_offset,
            });
        }
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut p = load_writable(&tx, id, source_topic_id)?;
        let from = p.log_start_offset;
        let to = from.max(log_start_offset);
        let dropped: Vec<i64> = {
            let mut stmt = tx.prepare(
                "SELECT base_offset FROM segments WHERE partition_id = ?1 AND state = 'installed' \
                 AND next_offset <= ?2 ORDER BY base_offset",
            )?;
            let rows = stmt
                .query_map(params![id.0, to], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            rows
        };
        let moved = to > from;
        if !moved && dropped.is_empty() {
            return Ok(RetentionReceipt {
                partition: p,
                dropped,
                moved,
            });
        }
        tx.execute(
            "DELETE FROM segments WHERE partition_id = ?1 AND state = 'installed' AND next_offset <= ?2",
            params![id.0, to],
        )?;
        tx.execute(
            "UPDATE mirror_partitions SET log_start_offset = ?2 WHERE id = ?1",
            params![id.0, to],
        )?;
        let detail = format!(
            "log start offset {from} -> {to}; dropped {} segment(s) wholly below it{}",
            dropped.len(),
            if dropped.is_empty() {
                String::new()
            } else {
                format!(" {dropped:?}")
            }
        );
        insert_event(&tx, Subject::Partition(&p.key), EventKind::LogStartMoved, &detail)?;
        tx.commit()?;
        p.log_start_offset = to;
        Ok(RetentionReceipt {
            partition: p,
            dropped,
            moved,
        })
    }

    /// Checks a compaction replacement against the installed history without writing anything: what
    /// [`Catalog::replace_sealed`] would do. Callers check before they change files, so that a replacement the
    /// catalog refuses never reaches the disk.
    pub fn check_replacement(
        &self,
        id: PartitionId,
        source_topic_id: &str,
        replaced_bases: &[i64],
        replacement: &Replacement,
    ) -> Result<ReplaceOutcome> {
        let p = load_writable(&self.conn, id, source_topic_id)?;
        plan_replacement(&self.conn, &p, replaced_bases, replacement)
    }

    /// Compaction replacement (module docs): the installed rows of `replaced_bases` (a contiguous run of sealed
    /// segments) become one new version, with a `segments_replaced` event, in one transaction. A version whose
    /// end reaches past the installed end moves that end to it. Idempotent: a repeat finds the new version
    /// installed and writes nothing ([`ReplaceOutcome::AlreadyReplaced`]).
    ///
    /// Errors (nothing written): `NotFound`, `Promoted`, `LineageBreak`, `InvalidSegment`, `ReplacementRefused`.
    pub fn replace_sealed(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        replaced_bases: &[i64],
        replacement: &Replacement,
    ) -> Result<ReplaceOutcome> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = load_writable(&tx, id, source_topic_id)?;
        let outcome = plan_replacement(&tx, &p, replaced_bases, replacement)?;
        let ReplaceOutcome::Replaced(v) = &outcome else {
            return Ok(outcome);
        };
        let old_bytes: i64 = {
            let mut stmt = tx.prepare("SELECT size FROM segments WHERE partition_id = ?1 AND base_offset = ?2")?;
            let mut sum = 0i64;
            for base in replaced_bases {
                sum = sum.saturating_add(stmt.query_row(params![id.0, base], |row| row.get::<_, i64>(0))?);
            }
            sum
        };
        let covered: Vec<i64> = match (replacement.next_offset, replaced_bases.last()) {
            (Some(next), Some(&last)) => rows_after(&tx, id, last, next)?.into_iter().map(|(b, _)| b).collect(),
            _ => Vec::new(),
        };
        for base in replaced_bases[1..].iter().chain(&covered) {
            tx.execute(
                "DELETE FROM segments WHERE partition_id = ?1 AND base_offset = ?2",
                params![id.0, base],
            )?;
        }
        crate::segment::write_installed(&tx, id, v)?;
        // A replacement that reaches past the installed end (the cleaner merged segments the mirror had not
        // received yet, or the one still growing) moves that end with it: the end is always the last installed
        // version's next offset, which the next install, `status` and the committable offsets read.
        tx.execute(
            "UPDATE mirror_partitions SET installed_end_offset = ?2 \
             WHERE id = ?1 AND (installed_end_offset IS NULL OR installed_end_offset < ?2)",
            params![id.0, v.next_offset],
        )?;
        let detail = format!(
            "[{}, {}) {} bytes, sealed, replaces {} segment(s) {replaced_bases:?} of {old_bytes} bytes",
            v.base_offset,
            v.next_offset,
            v.size,
            replaced_bases.len()
        );
        insert_event(&tx, Subject::Partition(&p.key), EventKind::SegmentsReplaced, &detail)?;
        tx.commit()?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Entity;
    use crate::key::PartitionKey;
    use crate::partition::PartitionState;
    use crate::test_support::{created, link_spec, seg};

    fn setup() -> (Catalog, PartitionId, PartitionKey) {
        let mut cat = Catalog::open_in_memory().unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        let key = PartitionKey::new("l", "orders", 0);
        let id = created(cat.upsert_partition(&key, "src", 0).unwrap()).id;
        for (b, n) in [(0, 100), (100, 200), (200, 300), (300, 400)] {
            let v = SegmentVersion {
                sealed: true,
                ..seg(b, n)
            };
            cat.mark_installed(id, "src", &v).unwrap();
        }
        (cat, id, key)
    }

    fn bases(cat: &Catalog, id: PartitionId) -> Vec<(i64, i64)> {
        cat.installed_segments(id)
            .unwrap()
            .iter()
            .map(|s| (s.version.base_offset, s.version.next_offset))
            .collect()
    }

    fn kinds(cat: &Catalog, key: &PartitionKey) -> Vec<EventKind> {
        cat.events(Some(Subject::Partition(key)), 100)
            .unwrap()
            .iter()
            .map(|e| e.kind)
            .collect()
    }

    fn replacement(last: Option<i64>) -> Replacement {
        Replacement {
            size: 1234,
            sha256: [3; 32],
            last_offset: last,
            manifest_key: "tail:orders-0/x".into(),
            next_offset: None,
        }
    }

    #[test]
    fn replacement_covering_the_tail_takes_its_next_offset_and_drops_the_unsealed_row() {
        let (mut cat, id, key) = setup();
        // A tail handed over from `apply`: an unsealed row after the sealed ones.
        cat.mark_installed(id, "src", &seg(400, 450)).unwrap();
        let r = Replacement {
            next_offset: Some(520),
            ..replacement(Some(505))
        };
        let outcome = cat.replace_sealed(id, "src", &[200, 300], &r).unwrap();
        assert!(matches!(outcome, ReplaceOutcome::Replaced(ref v) if (v.next_offset, v.last_offset) == (520, 505)));
        assert_eq!(bases(&cat, id), [(0, 100), (100, 200), (200, 520)]);
        // The installed end follows the new last version, so the next segment installs at it.
        assert_eq!(cat.partition_by_id(id).unwrap().installed_end_offset, Some(520));
        assert!(kinds(&cat, &key).contains(&EventKind::SegmentsReplaced));
        // Again (a journal redo): nothing written.
        assert_eq!(
            cat.replace_sealed(id, "src", &[200], &r).unwrap(),
            ReplaceOutcome::AlreadyReplaced
        );
        // An end below the replaced rows' end: refused.
        let (mut cat, id, _) = setup();
        for (bases, next) in [(vec![200, 300], 350), (vec![0, 100], 150)] {
            let r = Replacement {
                next_offset: Some(next),
                ..replacement(Some(next - 10))
            };
            assert!(
                matches!(
                    cat.replace_sealed(id, "src", &bases, &r),
                    Err(Error::ReplacementRefused { .. })
                ),
                "{bases:?} up to {next}"
            );
        }
        assert_eq!(bases(&cat, id).len(), 4);
    }

    #[test]
    fn the_installed_segment_below_an_offset_is_the_last_row_starting_under_it() {
        let (cat, id, _) = setup();
        let below = |offset: i64| {
            cat.installed_segment_below(id, offset)
                .unwrap()
                .map(|s| s.version.base_offset)
        };
        assert_eq!(
            [below(0), below(1), below(200), below(250), below(i64::MAX)],
            [None, Some(0), Some(100), Some(200), Some(300)]
        );
    }

    #[test]
    fn retention_moves_the_log_start_and_drops_rows_wholly_below_it() {
        let (mut cat, id, key) = setup();
        // Inside segment 200: segments 0 and 100 are wholly below, 200 holds the log start.
        let r = cat.advance_log_start(id, "src", 250).unwrap();
        assert_eq!((r.dropped.clone(), r.moved), (vec![0, 100], true));
        assert_eq!(r.partition.log_start_offset, 250);
        assert_eq!(bases(&cat, id), [(200, 300), (300, 400)]);
        let p = cat.partition_by_id(id).unwrap();
        assert_eq!((p.log_start_offset, p.installed_end_offset), (250, Some(400)));
        assert_eq!(kinds(&cat, &key)[0], EventKind::LogStartMoved);
        let events = kinds(&cat, &key).len();

        // Again, or backwards: nothing moves, nothing is written.
        for offer in [250, 10] {
            let r = cat.advance_log_start(id, "src", offer).unwrap();
            assert!(!r.moved && r.dropped.is_empty());
            assert_eq!(cat.partition_by_id(id).unwrap().log_start_offset, 250);
        }
        assert_eq!(kinds(&cat, &key).len(), events);

        // A next offset equal to the log start is wholly below it; the end offset stays when every row goes.
        assert_eq!(cat.advance_log_start(id, "src", 300).unwrap().dropped, vec![200]);
        assert_eq!(cat.advance_log_start(id, "src", 900).unwrap().dropped, vec![300]);
        let p = cat.partition_by_id(id).unwrap();
        assert_eq!((p.log_start_offset, p.installed_end_offset), (900, Some(400)));
        assert!(bases(&cat, id).is_empty());
        // The history goes on above the log start.
        let next = SegmentVersion {
            sealed: true,
            ..seg(900, 950)
        };
        cat.mark_installed(id, "src", &next).unwrap();
        assert_eq!(bases(&cat, id), [(900, 950)]);
    }

    #[test]
    fn retention_is_refused_on_a_promoted_partition_another_lineage_or_a_negative_offset() {
        let (mut cat, id, key) = setup();
        assert!(matches!(
            cat.advance_log_start(id, "src", -1),
            Err(Error::InvalidOffset { value: -1, .. })
        ));
        assert!(matches!(
            cat.advance_log_start(id, "other", 150),
            Err(Error::LineageBreak { .. })
        ));
        cat.set_partition_state(id, PartitionState::Promoted).unwrap();
        assert!(matches!(
            cat.advance_log_start(id, "src", 150),
            Err(Error::Promoted { entity: Entity::Partition(k) }) if k == key
        ));
        assert_eq!(bases(&cat, id).len(), 4);
        assert_eq!(cat.partition_by_id(id).unwrap().log_start_offset, 0);
    }

    #[test]
    fn replacement_merges_a_run_keeping_the_range_end_and_is_idempotent() {
        let (mut cat, id, key) = setup();
        let r = replacement(Some(180));
        assert!(matches!(
            cat.check_replacement(id, "src", &[0, 100], &r).unwrap(),
            ReplaceOutcome::Replaced(_)
        ));
        assert_eq!(bases(&cat, id).len(), 4, "a check writes nothing");
        let outcome = cat.replace_sealed(id, "src", &[0, 100], &r).unwrap();
        let ReplaceOutcome::Replaced(v) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            (v.base_offset, v.next_offset, v.last_offset, v.size, v.sealed),
            (0, 200, 180, 1234, true)
        );
        assert_eq!(bases(&cat, id), [(0, 200), (200, 300), (300, 400)]);
        let row = cat.segment(id, 0).unwrap().unwrap();
        assert_eq!((row.version.sha256, row.state), ([3; 32], SegmentState::Installed));
        assert_eq!(kinds(&cat, &key)[0], EventKind::SegmentsReplaced);
        let events = kinds(&cat, &key).len();
        // A repeat (recovery after a crash) writes nothing.
        assert_eq!(
            cat.replace_sealed(id, "src", &[0, 100], &r).unwrap(),
            ReplaceOutcome::AlreadyReplaced
        );
        assert_eq!(kinds(&cat, &key).len(), events);

        // The last installed segment: the installed end offset stays; an empty replacement records the base.
        let outcome = cat.replace_sealed(id, "src", &[300], &replacement(None)).unwrap();
        let ReplaceOutcome::Replaced(v) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!((v.base_offset, v.next_offset, v.last_offset), (300, 400, 300));
        assert_eq!(cat.partition_by_id(id).unwrap().installed_end_offset, Some(400));
        // A sealed version changed by a replacement is the installed one: the next segment still follows it.
        let next = SegmentVersion {
            sealed: true,
            ..seg(400, 500)
        };
        cat.mark_installed(id, "src", &next).unwrap();
    }

    /// The tail appender's compaction hole (`applier::tail::catalog`): the last sealed segment's bytes unchanged,
    /// its range extended to the next segment's base. Not taken for a repeat of an earlier replacement.
    #[test]
    fn same_bytes_with_a_later_end_extend_the_range() {
        let (mut cat, id, _) = setup();
        let row = cat.segment(id, 300).unwrap().unwrap().version;
        let r = Replacement {
            size: row.size,
            sha256: row.sha256,
            last_offset: Some(row.last_offset),
            manifest_key: row.manifest_key.clone(),
            next_offset: Some(450),
        };
        let outcome = cat.replace_sealed(id, "src", &[300], &r).unwrap();
        assert!(matches!(outcome, ReplaceOutcome::Replaced(ref v) if (v.next_offset, v.last_offset) == (450, 399)));
        assert_eq!(bases(&cat, id).last(), Some(&(300, 450)));
        assert_eq!(cat.partition_by_id(id).unwrap().installed_end_offset, Some(450));
        assert_eq!(
            cat.replace_sealed(id, "src", &[300], &r).unwrap(),
            ReplaceOutcome::AlreadyReplaced
        );
        // Without an end, the same bytes are the version installed.
        let same = Replacement { next_offset: None, ..r };
        assert_eq!(
            cat.replace_sealed(id, "src", &[300], &same).unwrap(),
            ReplaceOutcome::AlreadyReplaced
        );
    }

    #[test]
    fn replacements_that_are_not_a_run_of_installed_sealed_segments_are_refused() {
        let (mut cat, id, key) = setup();
        cat.mark_installed(id, "src", &seg(400, 450)).unwrap(); // unsealed last segment
        let before = bases(&cat, id);
        let events = kinds(&cat, &key).len();
        let reason = |cat: &mut Catalog, b: &[i64], r: Replacement| match cat.replace_sealed(id, "src", b, &r) {
            Err(Error::ReplacementRefused {
                reason,
                replaced_bases,
                partition,
            }) => {
                assert_eq!((replaced_bases.as_slice(), &partition), (b, &key));
                reason
            }
            other => panic!("{b:?}: {other:?}"),
        };
        let r = replacement(Some(150));
        assert_eq!(reason(&mut cat, &[], r.clone()), ReplacementRefusal::NotIncreasing);
        assert_eq!(
            reason(&mut cat, &[100, 0], r.clone()),
            ReplacementRefusal::NotIncreasing
        );
        assert_eq!(reason(&mut cat, &[0, 0], r.clone()), ReplacementRefusal::NotIncreasing);
        assert_eq!(
            reason(&mut cat, &[50], r.clone()),
            ReplacementRefusal::NotInstalled { base_offset: 50 }
        );
        assert_eq!(
            reason(&mut cat, &[0, 150], r.clone()),
            ReplacementRefusal::NotInstalled { base_offset: 150 }
        );
        assert_eq!(
            reason(&mut cat, &[0, 200], r.clone()),
            ReplacementRefusal::NotContiguous {
                installed: vec![0, 100, 200]
            }
        );
        assert_eq!(
            reason(&mut cat, &[300, 400], replacement(Some(420))),
            ReplacementRefusal::NotSealed { base_offset: 400 }
        );
        assert_eq!(
            reason(&mut cat, &[0, 100], replacement(Some(200))),
            ReplacementRefusal::LastOffsetOutside {
                last_offset: 200,
                range_end: 200
            }
        );
        assert!(matches!(
            cat.check_replacement(id, "src", &[0, 200], &r),
            Err(Error::ReplacementRefused { .. })
        ));
        assert_eq!(bases(&cat, id), before);
        assert_eq!(kinds(&cat, &key).len(), events);
        cat.set_partition_state(id, PartitionState::Promoted).unwrap();
        assert!(matches!(
            cat.replace_sealed(id, "src", &[0, 100], &r),
            Err(Error::Promoted { .. })
        ));
        assert_eq!(bases(&cat, id), before);
    }
}
