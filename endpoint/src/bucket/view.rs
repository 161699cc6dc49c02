//! One partition as the bucket's manifests describe it: the segments served, the ends, the leader epochs. Pure: no
//! I/O, so the rules are tested alone.
//!
//! What is served: the newest manifest of each segment (a manifest is the commit point of its version), and of
//! those the run of contiguous segments that ends at the newest one (each segment's next offset is the following
//! one's base). A segment before a gap is not served: the bucket does not say what lay between. The high watermark
//! is the newest segment's next offset; the log start is the run's first base, or the source's log start the newest
//! manifest carries when that is later.

use std::collections::BTreeMap;
use std::sync::Arc;

use segmirror_transport::manifest::Manifest;

/// The served segments of one partition, by base offset, and what follows from them.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionView {
    pub segments: BTreeMap<i64, Arc<Manifest>>,
    pub log_start: i64,
    pub high_watermark: i64,
    /// Leader epoch → its start offset, entries starting at or below the high watermark.
    pub epochs: BTreeMap<i32, i64>,
}

impl PartitionView {
    /// The view of `manifests` (the newest manifest of each base offset of one lineage); `None` without any.
    pub fn of(manifests: &BTreeMap<i64, Arc<Manifest>>) -> Option<PartitionView> {
        let (_, newest) = manifests.iter().next_back()?;
        let mut segments = BTreeMap::new();
        let mut expected_next = newest.next_offset;
        for (&base, m) in manifests.iter().rev() {
            if m.next_offset != expected_next || base > m.next_offset {
                break;
            }
            segments.insert(base, m.clone());
            expected_next = base;
        }
        let first = segments.keys().next().copied().unwrap_or(newest.base_offset);
        let high_watermark = newest.next_offset;
        let log_start = first.max(newest.log_start_offset).min(high_watermark);
        let mut epochs = BTreeMap::new();
        for m in segments.values() {
            for e in &m.epochs {
                if e.start_offset <= high_watermark {
                    let start = epochs.entry(e.epoch).or_insert(e.start_offset);
                    *start = (*start).min(e.start_offset);
                }
            }
        }
        Some(PartitionView {
            segments,
            log_start,
            high_watermark,
            epochs,
        })
    }

    /// The segment holding `offset`: the last whose base is at or below it, if `offset` is below its next offset.
    pub fn holding(&self, offset: i64) -> Option<&Arc<Manifest>> {
        self.segments
            .range(..=offset)
            .next_back()
            .map(|(_, m)| m)
            .filter(|m| offset < m.next_offset)
    }

    /// The newest segment.
    pub fn tail(&self) -> Option<&Arc<Manifest>> {
        self.segments.values().next_back()
    }

    /// The newest leader epoch, -1 when none is known.
    pub fn latest_epoch(&self) -> i32 {
        self.epochs.keys().next_back().copied().unwrap_or(-1)
    }

    /// OffsetForLeaderEpoch, with the semantics of `crate::mirror::segments::epoch_end` over these epochs: `(-1,
    /// -1)` for epoch -1 or one above every known epoch; `(requested, high watermark)` for the newest; else the
    /// largest epoch at or below `requested` and the start of the first epoch after it.
    pub fn epoch_end(&self, requested: i32) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (-1, -1);
        if requested == UNDEFINED.0 {
            return UNDEFINED;
        }
        if self.epochs.keys().next_back() == Some(&requested) {
            return (requested, self.high_watermark);
        }
        let Some((_, &higher_start)) = self.epochs.range(requested.saturating_add(1)..).next() else {
            return UNDEFINED;
        };
        match self.epochs.range(..=requested).next_back() {
            Some((&floor, _)) => (floor, higher_start),
            None => (requested, higher_start),
        }
    }

    /// The first segment (from `start` on) whose largest timestamp is at or after `timestamp`: where ListOffsets by
    /// time finds its answer, as Kafka picks the segment by its largest timestamp.
    pub fn first_at_or_after(&self, timestamp: i64, start: i64) -> Option<&Arc<Manifest>> {
        self.segments
            .values()
            .filter(|m| m.next_offset > start)
            .find(|m| m.max_timestamp >= timestamp)
    }

    /// The segment holding the largest timestamp (the first of equals), if any batch carries one.
    pub fn max_timestamp_segment(&self) -> Option<&Arc<Manifest>> {
        let mut best: Option<&Arc<Manifest>> = None;
        for m in self.segments.values() {
            if m.max_timestamp >= 0 && best.is_none_or(|b| m.max_timestamp > b.max_timestamp) {
                best = Some(m);
            }
        }
        best
    }
}
