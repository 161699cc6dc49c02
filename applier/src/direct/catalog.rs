//! What the tail appender records in the catalog, so that a tailed mirror is a mirror like any other: `status`
//! sees it, `promote` accepts it, `apply` and a second `tail-apply` are kept away by the mirror lock.
//!
//! # What is recorded where, and why
//! - **The link** (created if the catalog does not know it, with [`TAIL_STORE_URL`] for its store) and **the
//!   partition** (link, topic, partition, the source topic id as its lineage), at the first chunk the appender
//!   sees for the partition, as `apply` records them. A partition of another lineage is refused, never merged.
//! - **Every sealed segment** as an installed version ([`Catalog::mark_installed_after`]: base, next and last offsets,
//!   size, SHA-256, sealed, and how its batches leave each transactional producer, `segment_format::txn_ends`, as
//!   an install records it: from the batches as this process appended them, or read from the file when it did not
//!   append them all), in one catalog transaction after its bytes and companions are durable and *before*
//!   the state file says "sealed". A crash between the two leaves the state unsealed: the shipper sends the seal
//!   again, the appender checks and writes the same companions again and the catalog answers "already installed".
//!   The catalog therefore never claims more than is durable, and never lags a seal the shipper was told of.
//! - **The active segment's durable position stays in the state file** (`<mirror>/.tail/<tp>.json`), not in the
//!   catalog. It changes with every chunk (per chunk fsync is the default policy); a SQLite commit per chunk would
//!   add a second fsync to the replication latency path for nothing the state file does not already give (it is
//!   written atomically, after the bytes, and read back by `promote`). The catalog's rule that an installed
//!   version is whole and digested (size + SHA-256) also does not fit a file that grows by the chunk. So: the
//!   catalog holds the sealed history, the state file the one growing segment after it; `promote` combines the two
//!   (`promote::plan`) and refuses a mirror whose active file is not exactly the recorded size.
//!
//! # What is refused
//! Before any byte of a chunk or seal is written, the partition's catalog row is read: a partition that is
//! `paused` (a promotion is under way, or an operator paused it) or `promoted` (it belongs to a broker now) is
//! never appended to ([`TailError::NotWritable`]), and a chunk for a segment below the catalog's installed end
//! (the segment is sealed and installed) is refused. The read is a plain SQLite read (no commit, no fsync).
//!
//! **Retention and compaction replacements** (`retention`, `replace`) are recorded with the catalog's own
//! operations for them ([`Catalog::advance_log_start`], [`Catalog::replace_sealed`]), at the same point of their
//! crash protocols as a seal: after the files are durable, before the retention record or the replacement
//! journal says done, so the recovery at session start (which repeats the last step) repeats the catalog call too;
//! both are idempotent. A replacement is checked against the catalog ([`Catalog::check_replacement`]) before
//! anything in the partition directory changes, so one the catalog would refuse never reaches the disk.
//!
//! **A gap between sealed segments** (a seal whose base lies above the end of the last installed row below it) is a
//! hole the source's cleaner left at the end of the previous segment: the feed reached that segment only after it
//! was cleaned (it lagged behind a kill or a cut), and the cleaner removes a segment's newest records but never its
//! offset range, which in Kafka ends at the next segment's base. The previous sealed row's range is extended to the
//! new base ([`Catalog::replace_sealed`] with the same bytes and that end) before the new segment is marked
//! installed, which the catalog's succession rule requires. The log start does **not** move: it follows the
//! source's only (the `LogStart` frame, `retention`). A gap that retention made (the feed skipped a segment the
//! source deleted) needs nothing more: retention deletes from the front, so the previous segment is gone at the
//! source too, and the LogStart that says so (before the seal, or soon after it) moves the log start and drops that
//! row. Moving the log start on the gap instead gave a compacted partition a log start above its oldest surviving
//! keys while the rows and files below stayed, and `promote` dropped them.
//!
//! **A seal the catalog still refuses** (its range overlaps or leaves a hole that nothing above explains) stops its
//! partition only ([`TailError::LocalPartition`]): the link's other partitions go on, the state file stays unsealed
//! so the next session offers the seal again, by when a replacement or a log start that explains it may have
//! arrived. A replacement that reaches past the installed end (the cleaner merged segments the mirror had not
//! received, or the one still growing) moves that end with it, so the next seal finds the end where the rows end.

use std::collections::HashMap;

use segment_format::partition_metadata::Uuid;
use segment_format::txn_ends::TxnEnds;
use segmirror_catalog::{
    Catalog, LinkSpec, MirrorPartition, PartitionId, PartitionKey, PartitionState, Preceded, Replacement,
    SegmentRecord, SegmentState, SegmentVersion, Upsert,
};
use segmirror_transport::direct::payload::PartitionRef;

use super::{tp_name, TailError, TailResult};
use crate::APPLIER_TOPICS_REGEX;

/// The store URL a link created by the tail appender records: its data comes over a direct link, not from an
/// object store. Shown by `status`; nothing reads objects from it.
pub const TAIL_STORE_URL: &str = "direct:";

/// Prefix of the `manifest_key` recorded for a tailed segment (there is no manifest: the seal frame is its
/// description). Followed by the partition and the segment's file name, so `status` and events name the segment.
pub const TAIL_MANIFEST_KEY_PREFIX: &str = "tail:";

/// The catalog as the tail appender uses it: one link, the partitions it has seen.
#[derive(Debug)]
pub struct TailCatalog {
    catalog: Catalog,
    link: String,
    ids: HashMap<String, PartitionId>,
}

/// A partition of this link with installed segments (`handover`): its row and its installed versions, by base.
#[derive(Debug)]
pub(super) struct InstalledPartition {
    pub(super) row: MirrorPartition,
    pub(super) segments: Vec<SegmentRecord>,
}

/// What a seal records.
pub(super) struct SealRecord {
    pub(super) segment_base: i64,
    /// Offset after the segment's last batch.
    pub(super) next_offset: i64,
    pub(super) size: u64,
    pub(super) sha256: [u8; 32],
    /// How the segment's batches leave each transactional producer, recorded with it as an install records it
    /// (promotion folds these instead of walking the segment); `None`: not known.
    pub(super) txn_ends: Option<TxnEnds>,
}

impl TailCatalog {
    /// Binds the appender to `link` in `catalog`, creating the link when the catalog does not know it.
    pub fn open(mut catalog: Catalog, link: &str) -> TailResult<TailCatalog> {
        match catalog.link(link) {
            Ok(_) => {}
            Err(segmirror_catalog::Error::NotFound { .. }) => {
                catalog.create_link(&LinkSpec {
                    name: link.to_string(),
                    store_url: TAIL_STORE_URL.to_string(),
                    topics_regex: APPLIER_TOPICS_REGEX.to_string(),
                    groups_regex: None,
                })?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(TailCatalog {
            catalog,
            link: link.to_string(),
            ids: HashMap::new(),
        })
    }

    /// The catalog (for tests and for callers that want it back).
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    fn key(&self, p: &PartitionRef) -> PartitionKey {
        PartitionKey::new(&self.link, &p.topic, p.partition)
    }

    /// The partition's catalog id, recording the partition on first sight (lineage checked).
    fn id(&mut self, p: &PartitionRef) -> TailResult<PartitionId> {
        let name = tp_name(p);
        if let Some(id) = self.ids.get(&name) {
            return Ok(*id);
        }
        let key = self.key(p);
        let topic_id = Uuid(p.topic_id).to_string();
        let id = match self.catalog.upsert_partition(&key, &topic_id, 0) {
            Ok(Upsert::Created(row) | Upsert::Existing(row)) => row.id,
            Ok(Upsert::LineageBreak { partition, .. }) => {
                return Err(TailError::LineageBreak {
                    partition: name,
                    recorded: partition.source_topic_id,
                    offered: topic_id,
                    of: p.clone(),
                })
            }
            Err(segmirror_catalog::Error::Promoted { .. }) => {
                return Err(TailError::NotWritable {
                    partition: name,
                    state: format!("of link {} which is promoted", self.link),
                    of: p.clone(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        self.ids.insert(name, id);
        Ok(id)
    }

    /// Refuses a write to a paused or promoted partition, of another lineage, or a chunk (`chunk_segment`: its
    /// segment base) into a segment the catalog holds as installed (sealed). Called before anything of a chunk or
    /// seal is written. A seal of an installed segment is let through: the catalog answers "already installed".
    pub(super) fn check_writable(&mut self, p: &PartitionRef, chunk_segment: Option<i64>) -> TailResult<()> {
        let id = self.id(p)?;
        let row = self.catalog.partition_by_id(id)?;
        let name = tp_name(p);
        if row.state != PartitionState::Mirroring {
            return Err(TailError::NotWritable {
                partition: name,
                state: row.state.to_string(),
                of: p.clone(),
            });
        }
        let topic_id = Uuid(p.topic_id).to_string();
        if row.source_topic_id != topic_id {
            return Err(TailError::LineageBreak {
                partition: name,
                recorded: row.source_topic_id,
                offered: topic_id,
                of: p.clone(),
            });
        }
        if let (Some(end), Some(segment_base)) = (row.installed_end_offset, chunk_segment) {
            if segment_base >= end {
                return Ok(());
            }
            // The last installed version is an unsealed prefix (`apply` installed the source's active segment,
            // `handover`): the tail continues exactly that segment.
            let continues_prefix = self.catalog.segment(id, segment_base)?.is_some_and(|s| {
                s.state == SegmentState::Installed && !s.version.sealed && s.version.next_offset == end
            });
            if continues_prefix {
                return Ok(());
            }
            return Err(TailError::OutOfOrder {
                partition: name,
                segment: segment_base,
                position: 0,
                reason: format!("the catalog holds the partition installed (sealed) up to offset {end}"),
            });
        }
        Ok(())
    }

    /// The installed versions of `p`, by base (`truncate` checks which of them a cut reaches).
    pub(super) fn installed_segments(&mut self, p: &PartitionRef) -> TailResult<Vec<SegmentRecord>> {
        let id = self.id(p)?;
        Ok(self.catalog.installed_segments(id)?)
    }

    /// A truncation into sealed history (`truncate`): the installed rows from `from_base` on dropped, the installed
    /// end set back to it. Idempotent.
    pub(super) fn truncate_installed(&mut self, p: &PartitionRef, from_base: i64) -> TailResult<()> {
        let id = self.id(p)?;
        let topic_id = Uuid(p.topic_id).to_string();
        self.catalog
            .truncate_installed(id, &topic_id, from_base)
            .map_err(|e| self.not_writable(p, e))?;
        Ok(())
    }

    /// Records a truncation or divergence (`truncate`); idempotent.
    pub(super) fn record_truncation(&mut self, r: &segmirror_catalog::TruncationRecord) -> TailResult<()> {
        self.catalog.record_truncation(r)?;
        Ok(())
    }

    /// The link's partitions that hold installed segments (`handover`), each with its installed versions.
    pub(super) fn installed_partitions(&self) -> TailResult<Vec<InstalledPartition>> {
        let mut out = Vec::new();
        for row in self.catalog.partitions(&self.link)? {
            if row.installed_end_offset.is_none() {
                continue;
            }
            let segments = self.catalog.installed_segments(row.id)?;
            out.push(InstalledPartition { row, segments });
        }
        Ok(out)
    }

    /// The links other than this one under which the catalog records `topic`-`partition` (a mirror directory
    /// `apply` filled for another link than the one this applier serves).
    pub(super) fn other_links(&self, topic: &str, partition: i32) -> TailResult<Vec<String>> {
        let mut out = Vec::new();
        for link in self.catalog.links()? {
            if link.name == self.link {
                continue;
            }
            match self.catalog.partition(&PartitionKey::new(&link.name, topic, partition)) {
                Ok(_) => out.push(link.name),
                Err(segmirror_catalog::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// The link this appender records under.
    /// A version of the link's metadata the shipper sent over the direct protocol (feature bit 8), recorded as the
    /// link's next version (`Catalog::record_link_meta_as_next`): its offsets become committable only up to what
    /// is installed (`Catalog::link_offsets`). Returns the version recorded.
    pub(super) fn record_link_meta(
        &mut self,
        meta: &segmirror_transport::bucket::link_meta::LinkMeta,
    ) -> TailResult<u64> {
        Ok(self.catalog.record_link_meta_as_next(meta)?)
    }

    pub(super) fn link(&self) -> &str {
        &self.link
    }

    /// Records a sealed segment as installed (see the module docs). Idempotent.
    pub(super) fn record_seal(&mut self, p: &PartitionRef, seal: &SealRecord) -> TailResult<()> {
        let id = self.id(p)?;
        let topic_id = Uuid(p.topic_id).to_string();
        let row = self.catalog.partition_by_id(id)?;
        // A hole below the seal: the last installed row below its base ends before it, or (no row below) the
        // installed end lies below it. Judged by the rows, not by the recorded end alone, which a catalog written
        // before replacements moved it may hold past them.
        let below = self.catalog.installed_segment_below(id, seal.segment_base)?;
        let hole = match (&below, row.installed_end_offset) {
            (Some(prev), _) => prev.version.next_offset < seal.segment_base,
            (None, Some(end)) => seal.segment_base > end,
            (None, None) => false,
        };
        if hole {
            self.bridge_hole(p, id, &row, below, seal.segment_base)?;
        }
        let name = tp_name(p);
        let version = SegmentVersion {
            base_offset: seal.segment_base,
            next_offset: seal.next_offset,
            last_offset: seal.next_offset.saturating_sub(1),
            size: seal.size,
            sha256: seal.sha256,
            manifest_key: format!(
                "{TAIL_MANIFEST_KEY_PREFIX}{name}/{}",
                segment_format::dir::segment_file_name(seal.segment_base, segment_format::dir::SegmentFileKind::Log)
            ),
            sealed: true,
        };
        self.catalog
            .mark_installed_after(id, &topic_id, &version, Preceded::ByInstalled, seal.txn_ends.as_ref())
            .map_err(|e| match e {
                // The seal does not fit the history the catalog holds for this partition: it stops, the link's
                // other partitions go on, and the next session offers the seal again (the state file still says
                // unsealed), by when a replacement or log start that explains it may have arrived.
                e @ segmirror_catalog::Error::Conflict { .. } => TailError::LocalPartition {
                    of: p.clone(),
                    source: Box::new(TailError::Catalog(e)),
                },
                e => self.not_writable(p, e),
            })?;
        Ok(())
    }

    /// A seal of segment `base` above the end `end` of `last`, the last installed row below it (or, with none, of
    /// the installed end) (module docs, "A gap between sealed segments"): the offsets `[end, base)` are a hole
    /// inside the last installed segment's range (the cleaner removed its newest records before the feed read it),
    /// unless the source's log start already passed them (retention). Kafka's rule decides: a segment's range ends
    /// at the next segment's base, whatever its last batch; and retention deletes from the front, so a segment the
    /// source deleted between the two would have taken the earlier one with it, and the LogStart telling it (sent
    /// before the seal, or soon after) drops that one's row anyway.
    fn bridge_hole(
        &mut self,
        p: &PartitionRef,
        id: PartitionId,
        row: &MirrorPartition,
        last: Option<SegmentRecord>,
        base: i64,
    ) -> TailResult<()> {
        let name = tp_name(p);
        let topic_id = Uuid(p.topic_id).to_string();
        if row.log_start_offset >= base {
            // Retention, already recorded (a LogStart at or above this base).
            return Ok(());
        }
        match last {
            // Below the base, whether or not it ends at the recorded installed end (a catalog written before
            // replacements moved that end could hold one behind the rows).
            Some(prev) if prev.version.sealed && prev.version.next_offset < base => {
                tracing::info!(partition = %name, segment = prev.version.base_offset,
                    last_offset = prev.version.last_offset, next_segment = base, log_start = row.log_start_offset,
                    "a sealed segment ends below the next segment's base (the cleaner's hole): its range reaches \
                     that base, the log start stays");
                let replacement = Replacement {
                    size: prev.version.size,
                    sha256: prev.version.sha256,
                    last_offset: Some(prev.version.last_offset),
                    manifest_key: prev.version.manifest_key.clone(),
                    next_offset: Some(base),
                };
                self.catalog
                    .replace_sealed(id, &topic_id, &[prev.version.base_offset], &replacement)
                    .map_err(|e| self.not_writable(p, e))?;
            }
            // Nothing installed below it any more: every earlier row went with the source's retention, which
            // reached this segment too before the LogStart telling it arrived.
            None => {
                tracing::warn!(partition = %name, from = row.log_start_offset, to = base,
                    installed_end = ?row.installed_end_offset,
                    "no installed segment below a seal above the installed end: the catalog's log start moves to it");
                self.catalog.upsert_partition(&self.key(p), &topic_id, base)?;
            }
            // Anything else: the range reaches the base already (a seal repeated after a crash between the two
            // catalog calls), or an unsealed prefix lies below it, which the catalog's succession rule refuses,
            // naming the missing offsets.
            Some(_) => {}
        }
        Ok(())
    }

    /// Retention: the source's log start `log_start` (from the retention record), after the deletions are durable.
    pub(super) fn record_log_start(&mut self, p: &PartitionRef, log_start: i64) -> TailResult<()> {
        let id = self.id(p)?;
        let topic_id = Uuid(p.topic_id).to_string();
        let receipt = self
            .catalog
            .advance_log_start(id, &topic_id, log_start)
            .map_err(|e| self.not_writable(p, e))?;
        if receipt.moved {
            tracing::info!(partition = %tp_name(p), to = log_start, dropped = ?receipt.dropped,
                cause = "the source's log start (LogStart)", "the catalog's log start moves");
        }
        Ok(())
    }

    /// Whether the catalog accepts replacing `bases` by `r` (nothing written).
    pub(super) fn check_replacement(&mut self, p: &PartitionRef, bases: &[i64], r: &Replacement) -> TailResult<()> {
        let id = self.id(p)?;
        let topic_id = Uuid(p.topic_id).to_string();
        self.catalog
            .check_replacement(id, &topic_id, bases, r)
            .map_err(|e| match e {
                // What the shipper asked to replace does not fit what the mirror installed: its fault, refused
                // before anything is written (the session ends, never the applier).
                e @ segmirror_catalog::Error::ReplacementRefused { .. } => TailError::BadSeal {
                    partition: tp_name(p),
                    segment: bases.first().copied().unwrap_or(-1),
                    reason: e.to_string(),
                },
                e => self.not_writable(p, e),
            })?;
        Ok(())
    }

    /// A compaction replacement, after its files are installed durably. Idempotent.
    pub(super) fn record_replacement(&mut self, p: &PartitionRef, bases: &[i64], r: &Replacement) -> TailResult<()> {
        let id = self.id(p)?;
        let topic_id = Uuid(p.topic_id).to_string();
        self.catalog
            .replace_sealed(id, &topic_id, bases, r)
            .map_err(|e| self.not_writable(p, e))?;
        Ok(())
    }

    /// The source topic of `p` was recreated (the shipper offers `p.topic_id`, the mirror holds another lineage):
    /// the partition is paused with the offered lineage pending, and an event says why and what to do, once
    /// (`segmirror_catalog::Catalog::hold_lineage`). What the mirror holds of the old lineage stays, for promotion
    /// or a reset.
    pub(super) fn hold_lineage(&mut self, p: &PartitionRef) -> TailResult<()> {
        let key = self.key(p);
        let row = match self.catalog.partition(&key) {
            Ok(row) => row,
            Err(segmirror_catalog::Error::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let remedy = format!(
            "`segmirror link reset-partition {} {} {}` archives the mirror's copy and mirrors the new topic from its \
             start",
            self.link, p.topic, p.partition
        );
        self.catalog
            .hold_lineage(row.id, &Uuid(p.topic_id).to_string(), &remedy)?;
        Ok(())
    }

    /// Whether an operator accepted `p`'s lineage (`p.topic_id`) in place of the one the mirror holds (`segmirror
    /// link reset-partition`): the appender then archives the old lineage and switches ([`Self::switch_lineage`]).
    pub(super) fn lineage_accepted(&mut self, p: &PartitionRef) -> TailResult<bool> {
        let row = match self.catalog.partition(&self.key(p)) {
            Ok(row) => row,
            Err(segmirror_catalog::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let offered = Uuid(p.topic_id).to_string();
        Ok(self
            .catalog
            .pending_lineage(row.id)?
            .is_some_and(|pending| pending.accepted && pending.source_topic_id == offered))
    }

    /// Records `p`'s lineage as the partition's, its old segments forgotten (their files are archived already):
    /// the data before the catalog, as `start_new_lineage` asks.
    pub(super) fn switch_lineage(&mut self, p: &PartitionRef) -> TailResult<()> {
        let row = self.catalog.partition(&self.key(p))?;
        self.catalog
            .start_new_lineage(row.id, &Uuid(p.topic_id).to_string(), 0)?;
        self.catalog.clear_pending_lineage(row.id)?;
        self.ids.remove(&tp_name(p));
        Ok(())
    }

    /// Whether a partition this appender stopped may be applied again: its lineage was accepted, or it was resumed
    /// (no longer paused).
    pub(super) fn writable_again(&mut self, p: &PartitionRef) -> TailResult<bool> {
        let row = match self.catalog.partition(&self.key(p)) {
            Ok(row) => row,
            Err(segmirror_catalog::Error::NotFound { .. }) => return Ok(true),
            Err(e) => return Err(e.into()),
        };
        // Both ways need the partition mirroring (an accepted lineage is mirroring with the lineage pending).
        if row.state != PartitionState::Mirroring {
            return Ok(false);
        }
        let offered = Uuid(p.topic_id).to_string();
        Ok(row.source_topic_id == offered
            || self
                .catalog
                .pending_lineage(row.id)?
                .is_some_and(|pending| pending.source_topic_id == offered))
    }

    fn not_writable(&self, p: &PartitionRef, e: segmirror_catalog::Error) -> TailError {
        match e {
            segmirror_catalog::Error::Promoted { .. } => TailError::NotWritable {
                partition: tp_name(p),
                state: PartitionState::Promoted.to_string(),
                of: p.clone(),
            },
            e => e.into(),
        }
    }
}
