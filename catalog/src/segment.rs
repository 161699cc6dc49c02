//! Segments of a mirror partition: which segment versions were shipped, validated and installed.
//!
//! A segment is keyed by its base offset within a partition. A *version* of it is the `.log` prefix `[base, next)`
//! that one manifest describes: the active segment of the source grows, so the same base can be shipped again with a
//! larger `next`, until a version is `sealed` (the source rolled past it) and never changes again.
//!
//! The installed segments of a partition form its history and obey one rule, checked in [`Catalog::mark_installed`]
//! (and, early, when a pending version is recorded): installs advance in offset order without overlap, except that
//! the **last** installed segment may be replaced by a longer version of itself while it is not sealed. An install
//! starts exactly at the installed end offset — nothing legitimate leaves a hole in the middle of a log (the cleaner
//! keeps base offsets, retention deletes from the front) — unless the partition is empty or its recorded log start
//! offset reaches the new base (the source deleted the missing offsets before they were shipped). The rule is
//! `segmirror_contract::succession`, shared with the applier's planner (`applier::plan`), which applies it first. The
//! partition's `installed_end_offset` is the `next` of the last installed segment. Installing is idempotent: the same
//! version again changes nothing, so a restarted applier may repeat its last step.
//!
//! Pending states (`shipped`, `validated`) are bookkeeping for status and retries. They never hide an installed
//! version: recording a pending newer version of an installed segment leaves the installed row as it is.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use segment_format::now_ms;
use segment_format::txn_ends::TxnEnds;
use segmirror_contract::succession::{self, succession, Content, Gap, GapKind, Verdict};

use crate::error::{ConflictReason, Error, Result};
use crate::event::{insert_event, EventKind, Subject};
use crate::key::PartitionId;
use crate::partition::{load_partition_by_id, load_writable, MirrorPartition};
use crate::{text_enum, Catalog};

text_enum! {
    /// How far a segment version has come.
    pub enum SegmentState {
        /// A manifest for it is in the store.
        Shipped => "shipped",
        /// Downloaded to staging and verified (CRC of every batch, indexes).
        Validated => "validated",
        /// Renamed into the partition directory and durable.
        Installed => "installed",
    }
}

/// One version of a segment, as a manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentVersion {
    /// The segment's base offset (its file name).
    pub base_offset: i64,
    /// Offset after the last batch of this version (`base <= last < next`).
    pub next_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Size of the `.log` file in bytes.
    pub size: u64,
    /// SHA-256 of the `.log` file.
    pub sha256: [u8; 32],
    /// Object key of the manifest this version came from.
    pub manifest_key: String,
    /// The source rolled past this segment: this version is final.
    pub sealed: bool,
}

impl SegmentVersion {
    /// Checks the description and returns the size as SQLite stores it.
    pub(crate) fn validate(&self) -> Result<i64> {
        let offsets_ok =
            0 <= self.base_offset && self.base_offset <= self.last_offset && self.last_offset < self.next_offset;
        match i64::try_from(self.size) {
            Ok(size) if offsets_ok => Ok(size),
            _ => Err(Error::InvalidSegment {
                base_offset: self.base_offset,
                last_offset: self.last_offset,
                next_offset: self.next_offset,
                size: self.size,
            }),
        }
    }
}

/// A segment row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRecord {
    pub partition: PartitionId,
    pub version: SegmentVersion,
    pub state: SegmentState,
    pub updated_at_ms: i64,
}

/// What [`Catalog::mark_installed`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstallOutcome {
    /// A segment at a new base offset.
    New,
    /// A longer (or newly sealed) version of the last installed segment replaced the previous one.
    Replaced { previous_next_offset: i64 },
    /// This exact version was already installed; nothing was written.
    AlreadyInstalled,
}

/// Result of [`Catalog::mark_installed`]: the partition after the call, and what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReceipt {
    pub partition: MirrorPartition,
    pub outcome: InstallOutcome,
}

/// What recording a pending (shipped/validated) version did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingOutcome {
    /// The row now holds this version in the requested state.
    Recorded,
    /// An installed version of this segment exists and was kept (the offered version is the same, or a newer one
    /// that still has to be installed with [`Catalog::mark_installed`]).
    InstalledKept,
}

const SEGMENT_COLUMNS: &str = "partition_id, base_offset, next_offset, last_offset, size, sha256, manifest_key, \
                               sealed, state, updated_at_ms";

fn segment_from_row(row: &Row<'_>) -> rusqlite::Result<SegmentRecord> {
    let size: i64 = row.get(4)?;
    Ok(SegmentRecord {
        partition: PartitionId(row.get(0)?),
        version: SegmentVersion {
            base_offset: row.get(1)?,
            next_offset: row.get(2)?,
            last_offset: row.get(3)?,
            // The schema keeps size >= 0.
            size: u64::try_from(size).unwrap_or(0),
            sha256: row.get(5)?,
            manifest_key: row.get(6)?,
            sealed: row.get(7)?,
        },
        state: row.get(8)?,
        updated_at_ms: row.get(9)?,
    })
}

pub(crate) fn load_segment(conn: &Connection, id: PartitionId, base_offset: i64) -> Result<Option<SegmentRecord>> {
    Ok(conn
        .query_row(
            &format!("SELECT {SEGMENT_COLUMNS} FROM segments WHERE partition_id = ?1 AND base_offset = ?2"),
            params![id.0, base_offset],
            segment_from_row,
        )
        .optional()?)
}

/// The installed segment with the highest base offset below `below`.
fn last_installed(conn: &Connection, id: PartitionId, below: i64) -> Result<Option<SegmentRecord>> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {SEGMENT_COLUMNS} FROM segments WHERE partition_id = ?1 AND state = 'installed' \
                 AND base_offset < ?2 ORDER BY base_offset DESC LIMIT 1"
            ),
            params![id.0, below],
            segment_from_row,
        )
        .optional()?)
}

/// Writes the row of `v`, replacing any at its base, with how its batches leave each transactional producer when
/// the writer read them (`txn_ends`; NULL otherwise, so a replaced row never keeps another version's).
fn write_segment(
    conn: &Connection,
    id: PartitionId,
    v: &SegmentVersion,
    size: i64,
    state: SegmentState,
    txn_ends: Option<&TxnEnds>,
) -> Result<()> {
    conn.execute(
        &format!(
            "INSERT OR REPLACE INTO segments ({SEGMENT_COLUMNS}, txn_ends) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
        ),
        params![
            id.0,
            v.base_offset,
            v.next_offset,
            v.last_offset,
            size,
            v.sha256,
            v.manifest_key,
            v.sealed,
            state,
            now_ms(),
            txn_ends.map(TxnEnds::encode)
        ],
    )?;
    Ok(())
}

/// Writes `v` as an installed row (a replacement's new version, `follow`).
pub(crate) fn write_installed(conn: &Connection, id: PartitionId, v: &SegmentVersion) -> Result<()> {
    let size = v.validate()?;
    write_segment(conn, id, v, size, SegmentState::Installed, None)
}

/// What lies between the installed end and a version offered for install.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preceded {
    /// Installed versions only: the rule applies as it is.
    ByInstalled,
    /// Versions without batches cover `[from, base)`: the source's cleaner replaced every record of those segments
    /// by later ones and the broker keeps their empty files until a later pass merges them. They hold nothing to
    /// install, so they are never recorded; they close the hole only when they start exactly at the installed end.
    ByEmpty { from: i64 },
}

/// How an offered version relates to the installed history.
enum Fit {
    /// A new segment at or after the installed end.
    New,
    /// Replaces the last installed segment (same base) with a longer or newly sealed version.
    Replaces { previous_next_offset: i64 },
    /// The same content is installed already.
    Same,
}

/// The ordering rule of the module docs: the succession rule's verdict against the installed history, mapped.
/// The history passed is the installed version at the same base (if any) and the last installed one: every verdict
/// that needs more (a stale version inside an older one) is an overlap here, which is all the catalog needs.
/// `preceded` may name empty versions between the installed end and `v` (see [`Preceded::ByEmpty`]).
fn fit(
    conn: &Connection,
    p: &MirrorPartition,
    v: &SegmentVersion,
    for_install: bool,
    preceded: Preceded,
) -> Result<Fit> {
    let conflict = |reason| Error::Conflict {
        partition: p.key.clone(),
        base_offset: v.base_offset,
        reason,
    };
    let installed = load_segment(conn, p.id, v.base_offset)?.filter(|s| s.state == SegmentState::Installed);
    let mut chain: Vec<succession::Version> = installed.iter().map(|s| version_of(&s.version)).collect();
    if let Some(last) = last_installed(conn, p.id, i64::MAX)?.filter(|l| l.version.base_offset != v.base_offset) {
        chain.push(version_of(&last.version));
    }
    if let (Preceded::ByEmpty { from }, Some(last)) = (preceded, chain.last()) {
        if last.base_offset != v.base_offset && last.next_offset == from && from < v.base_offset {
            chain.push(succession::Version::new(from, v.base_offset, true, Content::of_size(0)));
        }
    }
    let overlap = |end| {
        conflict(ConflictReason::Overlap {
            installed_end_offset: p.installed_end_offset.unwrap_or(end),
        })
    };
    match succession(&chain, &version_of(v), p.log_start_offset) {
        Verdict::Same => Ok(Fit::Same),
        Verdict::Replaces { previous_next_offset } => Ok(Fit::Replaces { previous_next_offset }),
        Verdict::SealedGrown { .. }
        | Verdict::Truncated {
            previous_sealed: true, ..
        }
        | Verdict::Rewritten { previous_sealed: true } => Err(conflict(ConflictReason::SealedChanged)),
        Verdict::Truncated {
            previous_next_offset, ..
        } => Err(conflict(ConflictReason::Shrinks {
            installed_next_offset: previous_next_offset,
        })),
        Verdict::Rewritten { .. } => Err(conflict(ConflictReason::Diverged)),
        // Growing a segment that has a successor would overlap the successor.
        Verdict::GrowsUnderSuccessor { previous_next_offset } => Err(overlap(previous_next_offset)),
        Verdict::BeforeStart { .. } | Verdict::Covered { .. } => Err(overlap(v.base_offset)),
        Verdict::Overlap { end } => Err(overlap(end)),
        // A hole in the middle of the log: only a log-start move explains one (see the module docs). Pending
        // bookkeeping may run ahead; an install may not. An unsealed last segment does not stop an install at its
        // end (the applier's plan waits for its sealed version first).
        Verdict::OffsetGap { from, .. }
        | Verdict::AwaitsSeal {
            gap:
                Some(Gap {
                    from,
                    kind: GapKind::Offsets,
                    ..
                }),
            ..
        } if for_install => Err(conflict(ConflictReason::Gap {
            installed_end_offset: from,
            log_start_offset: p.log_start_offset,
        })),
        Verdict::First
        | Verdict::Next
        | Verdict::RetentionGap { .. }
        | Verdict::OffsetGap { .. }
        | Verdict::AwaitsSeal { .. } => Ok(Fit::New),
        // Not asked: the lineage is checked when the partition is loaded, leader epochs are not recorded here.
        Verdict::LineageBreak | Verdict::EpochRegression { .. } => Err(conflict(ConflictReason::Diverged)),
    }
}

/// What the succession rule needs of a recorded version.
fn version_of(v: &SegmentVersion) -> succession::Version {
    succession::Version::new(
        v.base_offset,
        v.next_offset,
        v.sealed,
        Content {
            log_size: v.size,
            last_offset: Some(v.last_offset),
            sha256: Some(v.sha256),
        },
    )
}

impl Catalog {
    /// Records that a manifest for this version is in the store.
    pub fn record_shipped(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        v: &SegmentVersion,
    ) -> Result<PendingOutcome> {
        self.record_pending(id, source_topic_id, v, SegmentState::Shipped)
    }

    /// Records that this version was downloaded to staging and passed validation.
    pub fn record_validated(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        v: &SegmentVersion,
    ) -> Result<PendingOutcome> {
        self.record_pending(id, source_topic_id, v, SegmentState::Validated)
    }

    fn record_pending(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        v: &SegmentVersion,
        state: SegmentState,
    ) -> Result<PendingOutcome> {
        let size = v.validate()?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = load_writable(&tx, id, source_topic_id)?;
        match fit(&tx, &p, v, false, Preceded::ByInstalled)? {
            Fit::Same | Fit::Replaces { .. } => return Ok(PendingOutcome::InstalledKept),
            Fit::New => write_segment(&tx, id, v, size, state, None)?,
        }
        tx.commit()?;
        Ok(PendingOutcome::Recorded)
    }

    /// Records that this version is installed: the segment row, the partition's installed end offset and a
    /// `segment_installed` event, in ONE transaction. Call it only after the files are renamed into place and the
    /// directory is fsynced.
    ///
    /// Errors (nothing written): `NotFound`, `Promoted` (a promoted partition is never written again),
    /// `LineageBreak` (the partition records another source topic ID), `InvalidSegment`, and `Conflict` when the
    /// version breaks the ordering rule of the module docs. Installing an already installed version is a no-op
    /// ([`InstallOutcome::AlreadyInstalled`]).
    pub fn mark_installed(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        v: &SegmentVersion,
    ) -> Result<InstallReceipt> {
        self.mark_installed_after(id, source_topic_id, v, Preceded::ByInstalled, None)
    }

    /// [`Catalog::mark_installed`], for a version that `preceded` says follows empty versions (never recorded) which
    /// start at the installed end: their range is no hole; with how the version's batches leave each transactional
    /// producer (`txn_ends`, read by [`Catalog::installed_txn_ends`]) when the install read them all.
    pub fn mark_installed_after(
        &mut self,
        id: PartitionId,
        source_topic_id: &str,
        v: &SegmentVersion,
        preceded: Preceded,
        txn_ends: Option<&TxnEnds>,
    ) -> Result<InstallReceipt> {
        let size = v.validate()?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut p = load_writable(&tx, id, source_topic_id)?;
        let outcome = match fit(&tx, &p, v, true, preceded)? {
            Fit::Same => {
                return Ok(InstallReceipt {
                    partition: p,
                    outcome: InstallOutcome::AlreadyInstalled,
                })
            }
            Fit::New => InstallOutcome::New,
            Fit::Replaces { previous_next_offset } => InstallOutcome::Replaced { previous_next_offset },
        };
        write_segment(&tx, id, v, size, SegmentState::Installed, txn_ends)?;
        // Pending versions of earlier bases can no longer be installed (they would overlap); forget them.
        tx.execute(
            "DELETE FROM segments WHERE partition_id = ?1 AND state <> 'installed' AND base_offset < ?2",
            params![id.0, v.next_offset],
        )?;
        // `fit` guarantees this version is now the last installed segment.
        tx.execute(
            "UPDATE mirror_partitions SET installed_end_offset = ?2 WHERE id = ?1",
            params![id.0, v.next_offset],
        )?;
        let detail = format!(
            "[{}, {}) {} bytes{}{}",
            v.base_offset,
            v.next_offset,
            v.size,
            if v.sealed { ", sealed" } else { "" },
            match outcome {
                InstallOutcome::Replaced { previous_next_offset } => format!(", replaces [.., {previous_next_offset})"),
                _ => String::new(),
            }
        );
        insert_event(&tx, Subject::Partition(&p.key), EventKind::SegmentInstalled, &detail)?;
        tx.commit()?;
        p.installed_end_offset = Some(v.next_offset);
        Ok(InstallReceipt { partition: p, outcome })
    }

    /// Per installed segment of partition `id` (by base offset): the next offset of its installed version and how
    /// that version's batches leave each transactional producer, where the install recorded it (`None`: unknown, or
    /// not readable as recorded).
    pub fn installed_txn_ends(&self, id: PartitionId) -> Result<BTreeMap<i64, (i64, Option<TxnEnds>)>> {
        load_partition_by_id(&self.conn, id)?;
        let mut stmt = self.conn.prepare_cached(
            "SELECT base_offset, next_offset, txn_ends FROM segments \
             WHERE partition_id = ?1 AND state = 'installed' ORDER BY base_offset",
        )?;
        let rows = stmt.query_map([id.0], |row| {
            let text: Option<String> = row.get(2)?;
            Ok((
                row.get::<_, i64>(0)?,
                (row.get::<_, i64>(1)?, text.as_deref().and_then(TxnEnds::decode)),
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The segment of partition `id` at `base_offset`, in whatever state.
    pub fn segment(&self, id: PartitionId, base_offset: i64) -> Result<Option<SegmentRecord>> {
        load_segment(&self.conn, id, base_offset)
    }

    /// Every segment row of partition `id`, by base offset. `NotFound` for an unknown partition.
    pub fn segments(&self, id: PartitionId) -> Result<Vec<SegmentRecord>> {
        self.query_segments(id, "")
    }

    /// The installed segment of partition `id` with the highest base offset below `base_offset` (one row read, not
    /// the partition's history).
    pub fn installed_segment_below(&self, id: PartitionId, base_offset: i64) -> Result<Option<SegmentRecord>> {
        last_installed(&self.conn, id, base_offset)
    }

    /// The installed segments of partition `id`, by base offset. `NotFound` for an unknown partition.
    pub fn installed_segments(&self, id: PartitionId) -> Result<Vec<SegmentRecord>> {
        self.query_segments(id, "AND state = 'installed'")
    }

    fn query_segments(&self, id: PartitionId, filter: &str) -> Result<Vec<SegmentRecord>> {
        load_partition_by_id(&self.conn, id)?;
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {SEGMENT_COLUMNS} FROM segments WHERE partition_id = ?1 {filter} ORDER BY base_offset"
        ))?;
        let rows = stmt
            .query_map([id.0], segment_from_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
#[path = "segment_empty_tests.rs"]
mod empty_tests;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
        (cat, id, key)
    }

    fn grown(base: i64, next: i64, sealed: bool) -> SegmentVersion {
        SegmentVersion {
            sealed,
            ..seg(base, next)
        }
    }

    #[test]
    fn pending_then_installed_then_queried() {
        let (mut cat, id, _) = setup();
        let v = seg(0, 100);
        assert_eq!(cat.record_shipped(id, "src", &v).unwrap(), PendingOutcome::Recorded);
        assert_eq!(cat.segment(id, 0).unwrap().unwrap().state, SegmentState::Shipped);
        assert_eq!(cat.record_validated(id, "src", &v).unwrap(), PendingOutcome::Recorded);
        assert_eq!(cat.segment(id, 0).unwrap().unwrap().state, SegmentState::Validated);
        assert!(cat.installed_segments(id).unwrap().is_empty());

        let r = cat.mark_installed(id, "src", &v).unwrap();
        assert_eq!(r.outcome, InstallOutcome::New);
        assert_eq!(r.partition.installed_end_offset, Some(100));
        let rec = cat.segment(id, 0).unwrap().unwrap();
        assert_eq!(rec.state, SegmentState::Installed);
        assert_eq!(rec.version, v);
        assert_eq!(rec.partition, id);

        cat.record_shipped(id, "src", &seg(100, 150)).unwrap();
        let installed = cat.installed_segments(id).unwrap();
        assert_eq!(installed.len(), 1);
        assert_eq!(cat.segments(id).unwrap().len(), 2);
        assert!(cat.segment(id, 7).unwrap().is_none());
        assert!(matches!(cat.segments(PartitionId(99)), Err(Error::NotFound { .. })));
    }

    /// What an install recorded of a version's transactions is read back with that version, and forgotten when
    /// the row is rewritten without it (a longer version installed by a path that did not read its batches).
    #[test]
    fn transaction_ends_travel_with_the_version_they_describe() {
        let (mut cat, id, _) = setup();
        let ends = TxnEnds {
            open: [7].into(),
            closed: [3, 4].into(),
            runs: [(
                7,
                segment_format::txn_ends::OpenRun {
                    first_offset: 40,
                    after_marker: true,
                    tally: segment_format::txn_index::TxnTally {
                        producer_epoch: 2,
                        records: 5,
                        batches: 2,
                        bytes: 300,
                    },
                },
            )]
            .into(),
            // Producer 3's last marker closed nothing begun in the segment; 4's closed two batches begun after
            // its previous marker.
            closings: Some(
                [
                    (
                        3,
                        segment_format::txn_ends::ClosingRun {
                            marker_offset: 30,
                            after_marker: false,
                            data: None,
                        },
                    ),
                    (
                        4,
                        segment_format::txn_ends::ClosingRun {
                            marker_offset: 35,
                            after_marker: true,
                            data: Some((
                                32,
                                segment_format::txn_index::TxnTally {
                                    producer_epoch: 1,
                                    records: 3,
                                    batches: 2,
                                    bytes: 200,
                                },
                            )),
                        },
                    ),
                ]
                .into(),
            ),
            // The segment's log of every marker, as written beside the mirror.
            log: Some(segment_format::file_record::FileRecord {
                entries: 2,
                crc32c: 0x8000_0001,
            }),
        };
        cat.mark_installed_after(id, "src", &grown(0, 100, true), Preceded::ByInstalled, Some(&ends))
            .unwrap();
        cat.mark_installed_after(
            id,
            "src",
            &grown(100, 150, false),
            Preceded::ByInstalled,
            Some(&TxnEnds::default()),
        )
        .unwrap();
        let recorded = cat.installed_txn_ends(id).unwrap();
        assert_eq!(
            recorded.into_iter().collect::<Vec<_>>(),
            [(0, (100, Some(ends.clone()))), (100, (150, Some(TxnEnds::default())))]
        );
        // A pending row of a later version says nothing of the installed one's.
        cat.record_shipped(id, "src", &grown(100, 170, false)).unwrap();
        assert_eq!(
            cat.installed_txn_ends(id).unwrap()[&100],
            (150, Some(TxnEnds::default()))
        );
        cat.mark_installed(id, "src", &grown(100, 180, false)).unwrap();
        assert_eq!(cat.installed_txn_ends(id).unwrap()[&100], (180, None));
        assert_eq!(cat.installed_txn_ends(id).unwrap()[&0], (100, Some(ends)));
        // Text the catalog holds that does not decode is unknown, never an error.
        cat.conn
            .execute("UPDATE segments SET txn_ends = 'o:1;c:1' WHERE base_offset = 0", [])
            .unwrap();
        assert_eq!(cat.installed_txn_ends(id).unwrap()[&0], (100, None));
    }

    #[test]
    fn an_install_forgets_pending_versions_it_overtakes() {
        let (mut cat, id, _) = setup();
        cat.record_shipped(id, "src", &seg(0, 50)).unwrap();
        cat.record_shipped(id, "src", &seg(50, 150)).unwrap();
        cat.record_validated(id, "src", &seg(250, 300)).unwrap();
        // The source was compacted/re-shipped: one version now covers [0, 200).
        cat.mark_installed(id, "src", &seg(0, 200)).unwrap();
        let rows: Vec<_> = cat
            .segments(id)
            .unwrap()
            .into_iter()
            .map(|s| (s.version.base_offset, s.state))
            .collect();
        assert_eq!(rows, [(0, SegmentState::Installed), (250, SegmentState::Validated)]);
    }

    #[test]
    fn installing_twice_is_idempotent() {
        let (mut cat, id, key) = setup();
        cat.mark_installed(id, "src", &seg(0, 100)).unwrap();
        let mut again = seg(0, 100);
        again.manifest_key = "re-shipped".into();
        let r = cat.mark_installed(id, "src", &again).unwrap();
        assert_eq!(r.outcome, InstallOutcome::AlreadyInstalled);
        assert_eq!(
            cat.events(Some(Subject::Partition(&key)), 100).unwrap().len(),
            2,
            "created + one install"
        );
        // A pending record of the installed version keeps the installed row.
        assert_eq!(
            cat.record_shipped(id, "src", &seg(0, 100)).unwrap(),
            PendingOutcome::InstalledKept
        );
        assert_eq!(cat.segment(id, 0).unwrap().unwrap().state, SegmentState::Installed);
    }

    #[test]
    fn active_segment_grows_then_seals() {
        let (mut cat, id, _) = setup();
        cat.mark_installed(id, "src", &seg(0, 100)).unwrap();
        cat.mark_installed(id, "src", &grown(100, 120, false)).unwrap();
        // A pending newer version does not hide the installed one.
        assert_eq!(
            cat.record_shipped(id, "src", &grown(100, 160, false)).unwrap(),
            PendingOutcome::InstalledKept
        );
        assert_eq!(cat.segment(id, 100).unwrap().unwrap().version.next_offset, 120);
        let r = cat.mark_installed(id, "src", &grown(100, 160, false)).unwrap();
        assert_eq!(
            r.outcome,
            InstallOutcome::Replaced {
                previous_next_offset: 120
            }
        );
        assert_eq!(r.partition.installed_end_offset, Some(160));
        // Sealing without growth is a replacement too (same bytes, now final).
        let r = cat.mark_installed(id, "src", &grown(100, 160, true)).unwrap();
        assert_eq!(
            r.outcome,
            InstallOutcome::Replaced {
                previous_next_offset: 160
            }
        );
        assert!(cat.segment(id, 100).unwrap().unwrap().version.sealed);
        // An unsealed report of the same bytes after sealing changes nothing.
        assert_eq!(
            cat.mark_installed(id, "src", &grown(100, 160, false)).unwrap().outcome,
            InstallOutcome::AlreadyInstalled
        );
        // Sealed means final.
        assert!(matches!(
            cat.mark_installed(id, "src", &grown(100, 200, true)),
            Err(Error::Conflict {
                base_offset: 100,
                reason: ConflictReason::SealedChanged,
                ..
            })
        ));
        let installed: Vec<_> = cat
            .installed_segments(id)
            .unwrap()
            .into_iter()
            .map(|s| (s.version.base_offset, s.version.next_offset))
            .collect();
        assert_eq!(installed, [(0, 100), (100, 160)]);
    }

    #[test]
    fn ordering_conflicts_are_typed_and_write_nothing() {
        let (mut cat, id, key) = setup();
        cat.mark_installed(id, "src", &grown(0, 100, false)).unwrap();
        cat.mark_installed(id, "src", &seg(100, 200)).unwrap();
        let before = cat.partition_by_id(id).unwrap();
        let events_before = cat.events(None, 100).unwrap().len();

        // Overlapping the installed range at a new base.
        assert!(matches!(
            cat.mark_installed(id, "src", &seg(150, 250)),
            Err(Error::Conflict { base_offset: 150, reason: ConflictReason::Overlap { installed_end_offset: 200 }, partition })
                if partition == key
        ));
        // Growing a segment that has a successor.
        assert!(matches!(
            cat.mark_installed(id, "src", &grown(0, 120, false)),
            Err(Error::Conflict {
                base_offset: 0,
                reason: ConflictReason::Overlap { .. },
                ..
            })
        ));
        // Shrinking the last one.
        assert!(matches!(
            cat.mark_installed(id, "src", &grown(100, 150, false)),
            Err(Error::Conflict {
                reason: ConflictReason::Shrinks {
                    installed_next_offset: 200
                },
                ..
            })
        ));
        // Same range, other bytes.
        let mut other = seg(100, 200);
        other.sha256 = [9; 32];
        assert!(matches!(
            cat.mark_installed(id, "src", &other),
            Err(Error::Conflict {
                reason: ConflictReason::Diverged,
                ..
            })
        ));
        // The same checks apply when recording a pending version.
        assert!(matches!(
            cat.record_shipped(id, "src", &seg(150, 250)),
            Err(Error::Conflict { .. })
        ));

        assert_eq!(cat.partition_by_id(id).unwrap(), before);
        assert_eq!(cat.events(None, 100).unwrap().len(), events_before);
        // A hole in the middle is refused, and nothing is written ...
        assert!(matches!(
            cat.mark_installed(id, "src", &seg(300, 400)),
            Err(Error::Conflict {
                reason: ConflictReason::Gap {
                    installed_end_offset: 200,
                    log_start_offset: 0
                },
                ..
            })
        ));
        assert_eq!(cat.partition_by_id(id).unwrap(), before);
        // ... unless the log start offset proves the source deleted the missing offsets (retention).
        cat.upsert_partition(&key, "src", 300).unwrap();
        assert_eq!(
            cat.mark_installed(id, "src", &seg(300, 400)).unwrap().outcome,
            InstallOutcome::New
        );
    }

    #[test]
    fn invalid_segments_are_rejected() {
        let (mut cat, id, _) = setup();
        for (base, last, next) in [(-1, 0, 1), (10, 9, 20), (10, 20, 20), (10, 30, 20)] {
            let v = SegmentVersion {
                last_offset: last,
                ..seg(base, next)
            };
            assert!(
                matches!(
                    cat.mark_installed(id, "src", &v),
                    Err(Error::InvalidSegment { base_offset, last_offset, next_offset, .. })
                        if (base_offset, last_offset, next_offset) == (base, last, next)
                ),
                "{base} {last} {next}"
            );
        }
        let mut huge = seg(0, 1);
        huge.size = u64::MAX;
        assert!(matches!(
            cat.record_shipped(id, "src", &huge),
            Err(Error::InvalidSegment { size: u64::MAX, .. })
        ));
    }

    #[test]
    fn promoted_partition_refuses_installs() {
        let (mut cat, id, key) = setup();
        cat.mark_installed(id, "src", &seg(0, 100)).unwrap();
        cat.set_partition_state(id, PartitionState::Promoted).unwrap();
        for result in [
            cat.mark_installed(id, "src", &seg(100, 200)).map(|_| ()),
            // Not even an idempotent repeat of what is installed, nor pending bookkeeping.
            cat.mark_installed(id, "src", &seg(0, 100)).map(|_| ()),
            cat.record_shipped(id, "src", &seg(100, 200)).map(|_| ()),
            cat.record_validated(id, "src", &seg(100, 200)).map(|_| ()),
        ] {
            match result {
                Err(Error::Promoted {
                    entity: Entity::Partition(k),
                }) => assert_eq!(k, key),
                other => panic!("expected Promoted, got {other:?}"),
            }
        }
        assert_eq!(cat.partition_by_id(id).unwrap().installed_end_offset, Some(100));
        assert_eq!(cat.segments(id).unwrap().len(), 1);
    }

    #[test]
    fn paused_partition_still_accepts_an_in_flight_install() {
        let (mut cat, id, _) = setup();
        cat.set_partition_state(id, PartitionState::Paused).unwrap();
        assert_eq!(
            cat.mark_installed(id, "src", &seg(0, 10)).unwrap().outcome,
            InstallOutcome::New
        );
    }

    /// Failure injection from the test side only: a temporary trigger makes the event insert (the last statement of
    /// `mark_installed`) abort, after the segment and partition rows were already written in the transaction.
    #[test]
    fn mark_installed_is_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.sqlite");
        let mut cat = Catalog::open(&path).unwrap();
        cat.create_link(&link_spec("l")).unwrap();
        let key = PartitionKey::new("l", "orders", 0);
        let id = created(cat.upsert_partition(&key, "src", 0).unwrap()).id;
        cat.mark_installed(id, "src", &grown(0, 100, false)).unwrap();
        cat.record_validated(id, "src", &seg(100, 200)).unwrap();
        let events_before = cat.events(None, 100).unwrap();

        cat.conn
            .execute_batch(
                "CREATE TEMP TRIGGER fail_events BEFORE INSERT ON events \
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            )
            .unwrap();
        // A new segment after the end, and a replacement of the last installed one: both reach the event insert.
        for v in [seg(100, 200), grown(0, 150, false)] {
            let err = cat.mark_installed(id, "src", &v).unwrap_err();
            assert!(
                matches!(&err, Error::Sqlite(e) if e.to_string().contains("injected failure")),
                "{err:?}"
            );
        }
        cat.conn.execute_batch("DROP TRIGGER temp.fail_events").unwrap();

        let check = |cat: &Catalog| {
            let p = cat.partition_by_id(id).unwrap();
            assert_eq!(p.installed_end_offset, Some(100), "partition end offset must not move");
            let s = cat.segment(id, 100).unwrap().unwrap();
            assert_eq!(s.state, SegmentState::Validated, "segment row must not be installed");
            let installed = cat.installed_segments(id).unwrap();
            assert_eq!(installed.len(), 1);
            assert_eq!(
                installed[0].version,
                grown(0, 100, false),
                "the replacement must not be visible"
            );
            assert_eq!(cat.events(None, 100).unwrap(), events_before);
        };
        check(&cat);
        // Another connection (another process) sees the same, and so does a reopened catalog.
        check(&Catalog::open(&path).unwrap());
        drop(cat);
        let mut cat = Catalog::open(&path).unwrap();
        check(&cat);
        // And the same install succeeds once the failure is gone.
        assert_eq!(
            cat.mark_installed(id, "src", &seg(100, 200)).unwrap().outcome,
            InstallOutcome::New
        );
    }

    /// Model test: random install attempts against a plain in-memory model of the ordering rule.
    #[derive(Debug, Clone)]
    struct Attempt {
        base: i64,
        len: i64,
        sealed: bool,
        content: u8,
    }

    fn attempt() -> impl Strategy<Value = Attempt> {
        (0i64..12, 1i64..4, any::<bool>(), 0u8..2).prop_map(|(b, len, sealed, content)| Attempt {
            base: b * 10,
            len: len * 10,
            sealed,
            content,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn installs_match_the_model(attempts in prop::collection::vec(attempt(), 1..25)) {
            let (mut cat, id, _) = setup();
            // Model: installed (base, next, sealed, content) in base order.
            let mut model: Vec<(i64, i64, bool, u8)> = Vec::new();
            for a in attempts {
                let next = a.base + a.len;
                let v = SegmentVersion {
                    sealed: a.sealed,
                    sha256: [a.content; 32],
                    ..seg(a.base, next)
                };
                let end = model.last().map(|m| m.1);
                let expected_ok = match model.iter().position(|m| m.0 == a.base) {
                    // The log start offset stays 0: no hole is ever explained.
                    None => end.is_none_or(|e| a.base == e),
                    Some(i) => {
                        let (_, old_next, old_sealed, old_content) = model[i];
                        let same = old_next == next && old_content == a.content;
                        (same && (old_sealed || !a.sealed))
                            || (!old_sealed && (next > old_next || same) && i == model.len() - 1)
                    }
                };
                let result = cat.mark_installed(id, "src", &v);
                prop_assert_eq!(result.is_ok(), expected_ok, "{:?} on {:?}: {:?}", a, model, result);
                if let Ok(r) = result {
                    if r.outcome != InstallOutcome::AlreadyInstalled {
                        match model.iter().position(|m| m.0 == a.base) {
                            Some(i) => model[i] = (a.base, next, a.sealed, a.content),
                            None => model.push((a.base, next, a.sealed, a.content)),
                        }
                    }
                }
                let installed: Vec<_> = cat
                    .installed_segments(id)
                    .unwrap()
                    .into_iter()
                    .map(|s| (s.version.base_offset, s.version.next_offset, s.version.sealed, s.version.sha256[0]))
                    .collect();
                prop_assert_eq!(&installed, &model);
                prop_assert_eq!(cat.partition_by_id(id).unwrap().installed_end_offset, model.last().map(|m| m.1));
                // Invariant: no overlap.
                for w in installed.windows(2) {
                    prop_assert!(w[0].1 <= w[1].0);
                }
            }
        }
    }
}
