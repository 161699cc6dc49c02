//! Producer state of a promoted partition: the target broker starts with none, and keeps none of the source's
//! across clean and unclean restarts.
//!
//! Why: the target cluster allocates producer ids from its own counter, which starts where the source's once did;
//! a new idempotent producer on the target whose id the source used would meet the source's sequence numbers in
//! the broker's producer state: its first batch acknowledged but dropped as a duplicate, or refused with
//! `OUT_OF_ORDER_SEQUENCE_NUMBER`. Rewriting producer ids in the batches would need new CRCs and would end byte
//! identity with the source; instead the broker is made to start from an empty state *after* the source's data.
//!
//! How the broker loads producer state (Kafka 4.4 `LogLoader.load` / `UnifiedLog.rebuildProducerState` /
//! `ProducerStateManager.truncateAndReload`): it loads the newest snapshot at or below the offset it recovers to
//! and replays only the batches after that snapshot; with no snapshot it replays the whole log. On an unclean
//! start it first recovers every segment from the one holding the recovery point on, each with a fresh producer
//! state rebuilt up to the segment's base offset — which deletes every snapshot above that base and replays from
//! the newest one below it. So an empty snapshot alone is not enough: were it inside the last promoted segment,
//! the first unclean restart would delete it and replay the source's batches.
//!
//! What promotion writes (after any abort markers, `txn_cut`):
//! - no snapshot of the source's;
//! - a new, empty active segment at the new log end offset `E` (`.log`, `.index`, `.timeindex`), exactly what the
//!   broker's own roll produces, so that the source's data lies wholly in inactive segments;
//! - an empty producer snapshot `E.snapshot` (version 1, no entries, valid CRC), at that segment's base offset
//!   (the broker keeps snapshots at segment bases; it would drop a stray one below the last base);
//! - (in the root checkpoints) a recovery point of `E`.
//!
//! Then a clean start loads `E.snapshot` and replays nothing; an unclean one recovers from the segment at `E` only
//! (starting from `E.snapshot`), and the broker's own snapshots afterwards only ever hold target producers.

use std::path::Path;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::snapshot::ProducerSnapshot;

use super::error::{Error, Result};
use super::files::write_staged;
use super::journal::Planned;
use super::txn_cut;

/// Start the producer state of the partition being built in `dir` at `end_offset`: an empty active segment there
/// (unless the last segment, of base `last_base`, already starts there) and an empty producer snapshot.
pub fn start_empty(dir: &Path, last_base: i64, end_offset: i64) -> Result<()> {
    // No segment at all when a consistent cut kept nothing: the broker gets an empty one at the end, too.
    if end_offset != last_base || !dir.join(segment_file_name(end_offset, SegmentFileKind::Log)).exists() {
        for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            let path = dir.join(segment_file_name(end_offset, kind));
            // Durable with the rest of the build, by one `syncfs` (`files::write_staged`).
            std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    write_staged(
        &dir.join(segment_file_name(end_offset, SegmentFileKind::Snapshot)),
        &ProducerSnapshot::default().to_bytes(),
    )?;
    Ok(())
}

/// Where the last promoted segment's offset and time index come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LastIndexes {
    /// The mirror's, checked against its batches at install (or, for a tailed segment, matching what the appender
    /// kept): sealed as they are, and extended over abort markers appended after them
    /// ([`txn_cut::seal_kept_indexes`]).
    Kept,
    /// Derived (a tailed segment's) or cut short: rebuilt from a walk of its `.log`.
    Derived,
}

/// After the segments are copied into `building`: abort the open transactions and start the producer state empty
/// after them (`txn_cut`, `producer_state`). `last_indexes`: where the last segment's offset and time index come from,
/// which decides whether they are sealed or rebuilt when it stops being the active segment.
pub(super) fn finish(p: &Planned, building: &Path, last_indexes: LastIndexes) -> Result<()> {
    let Some(&first_last_base) = p.segments.last() else {
        return start_empty(building, p.log_end_offset, p.end_offset());
    };
    let mut last_base = first_last_base;
    let (markers, entries) = txn_cut::abort_markers(&p.cut, p.leader_epoch, p.cut_timestamp);
    // Where the markers start in the last segment's `.log` (its end when there are none).
    let mut markers_at = None;
    if !markers.is_empty() {
        let last_log = building.join(segment_file_name(last_base, SegmentFileKind::Log));
        let size = std::fs::metadata(&last_log).map_err(|e| Error::io(&last_log, e))?.len();
        if !txn_cut::fits_in_segment(last_base, size, p.end_offset(), markers.len()) {
            // The broker would have rolled: the markers get a segment of their own.
            txn_cut::rebuild_indexes(building, last_base)?;
            last_base = p.log_end_offset;
            let log = building.join(segment_file_name(last_base, SegmentFileKind::Log));
            std::fs::File::create(&log).map_err(|e| Error::io(&log, e))?;
        } else {
            markers_at = Some(size);
        }
        txn_cut::append_markers(building, last_base, &markers, &entries)?;
    }
    if last_base != p.end_offset() {
        // It stops being the active segment. Markers appended to it are not in its indexes: they are extended over
        // them.
        let sealed = match last_indexes {
            LastIndexes::Kept if markers.is_empty() || markers_at.is_some() => {
                txn_cut::seal_kept_indexes(building, last_base, markers_at)?
            }
            _ => false,
        };
        if !sealed {
            txn_cut::rebuild_indexes(building, last_base)?;
        }
    }
    start_empty(building, last_base, p.end_offset())
}
