//! The hand-over from a mirror `seed`/`apply` produced to the tail appender: a tail started on such a mirror
//! continues where they ended instead of starting over.
//!
//! # Why the position comes from the catalog, checked against the files
//! A partition `apply` installed has no tail state file (`<mirror>/.tail/<tp>.json`), only catalog rows: every
//! installed segment version with its size and SHA-256, the last one either sealed (the source had rolled past
//! it) or an unsealed prefix (the source's active segment at seed time, cut at a batch boundary). That is what
//! the catalog proves; the files are the mirror's own, but a mirror can be edited, restored from a backup or half
//! reconciled after a crash, so the position is taken only when the files still say the same thing:
//! - every installed segment's `.log` exists, is a regular file and has exactly the recorded size;
//! - no `.log` at or above the first installed base is unknown to the catalog (a crash left the disk ahead of
//!   the catalog: `apply` reconciles that, the tail does not guess);
//! - the last segment, the one the tail continues, has the recorded SHA-256, every batch's CRC-32C matches, it
//!   ends on a batch boundary, and its last batch ends at the recorded last offset (the offset the next chunk must
//!   start at).
//!
//! Any mismatch is [`TailError::HandOver`] naming the file and both values; nothing is written and the session
//! does not start (the mirror needs an operator, as a state file that claims lost bytes does).
//!
//! # What is derived
//! The state the appender would have written itself had it shipped those bytes: the last segment, its size, sealed
//! or not, and the next offset. [`ChunkApplier::durable_positions`] then reports it as every other tailed
//! partition's, so the shipper resumes there: it appends to an unsealed prefix (the first chunk starts at the
//! prefix's end, the seal later replaces the catalog's unsealed version by the sealed one), or, after a sealed
//! segment, sends that seal again (already applied: nothing to do) and continues at the next segment. Source-side
//! changes in between (a roll, retention deleting the segment) are the shipper's resume rule
//! (`shipper::direct::log_start::resume_or_skip`), the same as after any disconnect. The segment's companions from
//! `apply` stay as they are until the seal writes the final ones (promote rebuilds an active segment's indexes in
//! staging anyway).
//!
//! # What is not handed over
//! - A partition the catalog holds `paused` or `promoted`: no state is derived, and the shipper's first chunk is
//!   refused as for any such partition ([`TailError::NotWritable`]).
//! - A partition `apply` recorded under another link: this appender only reads its own link's rows; the first
//!   chunk finds a directory it did not write, and the refusal names the link(s) the catalog records it under.
//! - A lineage other than the shipper's: the state carries the catalog's source topic id, so a shipper of a
//!   recreated topic is refused at its first chunk ([`TailError::LineageBreak`] / "the topic id differs").
//!
//! Deriving happens at the start of every session, for partitions without a state file only: once written, the
//! state file is the truth, as for a partition the tail started itself.

use std::ops::ControlFlow;

use segment_format::dir::PartitionDir;
use segment_format::partition_metadata::Uuid;
use segmirror_catalog::{PartitionState as CatalogState, SegmentRecord};

use super::catalog::InstalledPartition;
use super::*;

impl Inner {
    /// Derives and records the state of every partition of the catalog's link that `apply` installed and that has
    /// no state file yet (see the module docs). Without a catalog there is nothing to hand over.
    pub(super) fn hand_over(&mut self) -> TailResult<()> {
        let Some(catalog) = &self.catalog else {
            return Ok(());
        };
        let link = catalog.link().to_string();
        let candidates = catalog.installed_partitions()?;
        for candidate in candidates {
            let name = format!("{}-{}", candidate.row.key.topic, candidate.row.key.partition);
            if self.states.contains_key(&name) {
                continue;
            }
            if candidate.row.state != CatalogState::Mirroring {
                tracing::warn!(partition = %name, state = %candidate.row.state,
                    "not handed over to the tail: the catalog holds the partition {}; its chunks will be refused",
                    candidate.row.state);
                continue;
            }
            let Some(state) = self.derive(&name, &candidate)? else {
                continue;
            };
            tracing::info!(partition = %name, link = %link, segment_base = state.segment_base,
                position = state.position, sealed = state.sealed,
                "handing over a partition installed by apply: the tail continues where it ended");
            self.record(name, state)?;
        }
        Ok(())
    }

    /// The state the catalog's installed versions of one partition prove, checked against the files; `None` when
    /// nothing is installed.
    fn derive(&self, name: &str, c: &InstalledPartition) -> TailResult<Option<PartitionState>> {
        let row = &c.row;
        let Some(last) = c.segments.last() else {
            return Ok(None);
        };
        let dir = self.partition_dir(&row.key.topic, row.key.partition);
        let refuse = |path: &Path, reason: String| TailError::HandOver {
            partition: name.to_string(),
            path: path.to_path_buf(),
            reason,
        };
        let topic_id = row.source_topic_id.parse::<Uuid>().map_err(|e| {
            refuse(
                &dir,
                format!("the catalog's source topic id {:?}: {e}", row.source_topic_id),
            )
        })?;
        for s in &c.segments {
            check_size(
                &self.log_path(&row.key.topic, row.key.partition, s.version.base_offset),
                s,
            )
            .map_err(|(path, reason)| refuse(&path, reason))?;
        }
        let listing = PartitionDir::open(&dir)?;
        let first = c
            .segments
            .first()
            .map_or(last.version.base_offset, |s| s.version.base_offset);
        if let Some(unknown) = listing
            .segments
            .iter()
            .find(|f| f.base_offset >= first && !c.segments.iter().any(|s| s.version.base_offset == f.base_offset))
        {
            return Err(refuse(
                &unknown.log,
                "the catalog records no installed version of this segment (the disk is ahead of the catalog: run \
                 `segmirror apply` once to reconcile)"
                    .into(),
            ));
        }
        let path = self.log_path(&row.key.topic, row.key.partition, last.version.base_offset);
        let digest = digest_file(&path)?;
        if digest.sha256.0 != last.version.sha256 {
            return Err(refuse(
                &path,
                format!(
                    "SHA-256 {}, the catalog recorded {} at install",
                    hex(&digest.sha256.0),
                    hex(&last.version.sha256)
                ),
            ));
        }
        let last_offset = scan_last_offset(&path, last).map_err(|reason| refuse(&path, reason))?;
        if last_offset != last.version.last_offset {
            return Err(refuse(
                &path,
                format!(
                    "its last batch ends at offset {last_offset}, the catalog recorded {}",
                    last.version.last_offset
                ),
            ));
        }
        Ok(Some(PartitionState {
            topic: row.key.topic.clone(),
            partition: row.key.partition,
            topic_id: topic_id.0,
            segment_base: last.version.base_offset,
            position: last.version.size,
            sealed: last.version.sealed,
            next_offset: Some(last_offset.saturating_add(1)),
            // Derived from the segments once recorded (`companions`).
            open_transactions: None,
            // Recorded by the first chunk appended (`kept`).
            kept: None,
        }))
    }
}

/// The `.log` of an installed segment is a regular file of the recorded size.
fn check_size(path: &Path, s: &SegmentRecord) -> std::result::Result<(), (PathBuf, String)> {
    let fail = |reason: String| (path.to_path_buf(), reason);
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(fail(format!(
                "missing, the catalog recorded it installed with {} bytes",
                s.version.size
            )))
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    if !meta.file_type().is_file() {
        return Err(fail("not a regular file".into()));
    }
    if meta.len() != s.version.size {
        return Err(fail(format!(
            "{} bytes on disk, the catalog recorded {} bytes at install",
            meta.len(),
            s.version.size
        )));
    }
    Ok(())
}

/// Scans the whole segment: every CRC-32C matching, ending on a batch boundary at its size; returns the last
/// batch's last offset.
fn scan_last_offset(path: &Path, s: &SegmentRecord) -> std::result::Result<i64, String> {
    let mut log = LogFile::open(path).map_err(|e| e.to_string())?;
    let mut last = None;
    let mut bad_crc = None;
    let summary = log
        .scan(|frame| {
            if !frame.crc_matches() {
                bad_crc = Some(frame.crc_position());
                return ControlFlow::Break(());
            }
            last = Some(frame.info.last_offset);
            ControlFlow::Continue(())
        })
        .map_err(|e| e.to_string())?;
    if let Some(at) = bad_crc {
        return Err(format!("a batch's CRC-32C does not match at byte {at}"));
    }
    if summary.end != s.version.size {
        return Err(format!(
            "its batches end at byte {}, not at its size {}",
            summary.end, s.version.size
        ));
    }
    last.ok_or_else(|| "holds no batch".to_string())
}
