//! Which `index.interval.bytes` a segment's offset index was written with, found from the index and its batches.
//!
//! Why: a mirror's sealed segment should carry the broker's own indexes, and shipping them costs wire bytes (an
//! index per 4 KiB of log at the default, four times as many at 1 KiB) while rebuilding them costs nothing but the
//! interval. The topic's interval is a broker-side config the log dir does not record, so it is read off the index
//! itself: under the rule of [`OffsetIndexBuilder`](super::OffsetIndexBuilder) (an entry at a batch when more than
//! the interval lies between the previous entry's position and the batch's), every indexed batch bounds the
//! interval from above (`gap - 1`) and every other batch from below (`gap`). The intervals left are exactly those
//! whose rebuild gives this offset index, and — the time index being written at the same batches — one rebuilt time
//! index, which a caller still compares with the broker's (its last entry depends on how the segment was closed).
//!
//! An empty result means no interval reproduces the index: a broker restarted in the middle of the segment (its
//! byte count since the last entry starts again at 0), a follower before Kafka 4.1 (entries per appended chunk),
//! or a cleaner's rewrite. The caller then needs the broker's bytes.

use std::ops::RangeInclusive;

use crate::batch::BatchInfo;

use super::{OffsetIndexEntry, DEFAULT_INDEX_INTERVAL_BYTES};

/// Largest `index.interval.bytes` Kafka accepts (an `int` config, at least 0).
pub const MAX_INDEX_INTERVAL_BYTES: u64 = i32::MAX as u64;

/// Narrows the intervals that reproduce an offset index, fed the segment's batches in file order.
#[derive(Debug, Clone)]
pub struct IntervalFit<'a> {
    base_offset: i64,
    entries: &'a [OffsetIndexEntry],
    next: usize,
    last_entry_position: u64,
    lo: u64,
    hi: u64,
    broken: bool,
}

impl<'a> IntervalFit<'a> {
    /// `entries`: the broker's offset index (trimmed, or parsed without its zero tail).
    pub fn new(base_offset: i64, entries: &'a [OffsetIndexEntry]) -> Self {
        IntervalFit {
            base_offset,
            entries,
            next: 0,
            last_entry_position: 0,
            lo: 0,
            hi: MAX_INDEX_INTERVAL_BYTES,
            broken: false,
        }
    }

    /// The next batch of the segment.
    pub fn push(&mut self, batch: &BatchInfo) {
        if self.broken {
            return;
        }
        let gap = batch.position.saturating_sub(self.last_entry_position);
        match self.entries.get(self.next) {
            Some(e) if u64::try_from(e.position).ok() == Some(batch.position) => {
                // An entry needs more than the interval behind it, so a gap of 0 (the segment's first batch) and
                // an entry whose offset is not the batch's last one are no rebuild's.
                if gap == 0 || e.offset(self.base_offset) != batch.last_offset {
                    self.broken = true;
                    return;
                }
                self.hi = self.hi.min(gap - 1);
                self.last_entry_position = batch.position;
                self.next += 1;
            }
            // An entry inside a batch or before it (the batches passed it): no batch-wise rebuild has it.
            Some(e) if i64::from(e.position) < batch.position as i64 => self.broken = true,
            _ => self.lo = self.lo.max(gap),
        }
        if self.lo > self.hi {
            self.broken = true;
        }
    }

    /// Every interval whose rebuild gives the offset index, or `None` when none does (including an entry the
    /// batches never reached).
    pub fn finish(self) -> Option<RangeInclusive<u64>> {
        (!self.broken && self.next == self.entries.len() && self.lo <= self.hi).then_some(self.lo..=self.hi)
    }
}

/// The interval to name for a fitting range: Kafka's default when it fits, else the largest power of two in the
/// range (the values people configure), else its lower end. All give the same indexes.
pub fn pick_interval(range: &RangeInclusive<u64>) -> u64 {
    if range.contains(&DEFAULT_INDEX_INTERVAL_BYTES) {
        return DEFAULT_INDEX_INTERVAL_BYTES;
    }
    (0..63)
        .rev()
        .map(|shift| 1u64 << shift)
        .find(|p| range.contains(p))
        .unwrap_or(*range.start())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::OffsetIndexBuilder;
    use proptest::prelude::*;

    /// Contiguous batches of the given sizes, two records each, from offset `base`.
    fn batches(base: i64, sizes: &[u64]) -> Vec<BatchInfo> {
        let mut position = 0;
        sizes
            .iter()
            .enumerate()
            .map(|(k, &size)| {
                let base = base + 2 * k as i64;
                let b = crate::index::tests::b(position, size, base, base + 1, 1000 + k as i64);
                position += size;
                b
            })
            .collect()
    }

    fn index(base: i64, batches: &[BatchInfo], interval: u64) -> Vec<OffsetIndexEntry> {
        let mut builder = OffsetIndexBuilder::new(base, interval);
        for b in batches {
            builder.push(b).unwrap();
        }
        builder.entries().to_vec()
    }

    fn fit(base: i64, batches: &[BatchInfo], entries: &[OffsetIndexEntry]) -> Option<RangeInclusive<u64>> {
        let mut fit = IntervalFit::new(base, entries);
        batches.iter().for_each(|b| fit.push(b));
        fit.finish()
    }

    #[test]
    fn the_range_is_exactly_the_intervals_that_rebuild_the_index() {
        // 300-byte batches: at 1024 an entry every fourth batch (gap 1200), so 900..=1199 all rebuild it.
        let bs = batches(50, &[300; 40]);
        let entries = index(50, &bs, 1024);
        assert!(!entries.is_empty());
        let range = fit(50, &bs, &entries).unwrap();
        assert_eq!(range, 900..=1199);
        assert_eq!(pick_interval(&range), 1024);
        for i in [899, 1200, 4096] {
            assert_ne!(index(50, &bs, i), entries, "interval {i}");
        }
        // The default index fits the default.
        let default = index(50, &bs, DEFAULT_INDEX_INTERVAL_BYTES);
        assert_eq!(
            pick_interval(&fit(50, &bs, &default).unwrap()),
            DEFAULT_INDEX_INTERVAL_BYTES
        );
    }

    #[test]
    fn an_index_no_interval_rebuilds_fits_none() {
        let bs = batches(0, &[300; 40]);
        let mut entries = index(0, &bs, 1024);
        // A broker restarted after batch 10 counts again from there: the next entry comes early.
        entries.insert(
            1,
            OffsetIndexEntry {
                relative_offset: 23,
                position: 3300,
            },
        );
        entries.retain(|e| e.position != 3600);
        assert_eq!(fit(0, &bs, &entries), None);
        // An entry at a position no batch starts at, or with another offset than its batch's last.
        let mut inside = index(0, &bs, 1024);
        inside[0].position += 1;
        assert_eq!(fit(0, &bs, &inside), None);
        let mut offset = index(0, &bs, 1024);
        offset[0].relative_offset -= 1;
        assert_eq!(fit(0, &bs, &offset), None);
        // An entry beyond the last batch, and one at the segment's first batch.
        let mut beyond = index(0, &bs, 1024);
        beyond.push(OffsetIndexEntry {
            relative_offset: 200,
            position: 30_000,
        });
        assert_eq!(fit(0, &bs, &beyond), None);
        assert_eq!(
            fit(
                0,
                &bs,
                &[OffsetIndexEntry {
                    relative_offset: 1,
                    position: 0
                }]
            ),
            None
        );
    }

    #[test]
    fn an_empty_index_fits_every_interval_at_least_the_segment() {
        let bs = batches(0, &[100; 5]);
        assert_eq!(fit(0, &bs, &[]), Some(400..=MAX_INDEX_INTERVAL_BYTES));
        assert_eq!(
            pick_interval(&(400..=MAX_INDEX_INTERVAL_BYTES)),
            DEFAULT_INDEX_INTERVAL_BYTES
        );
        assert_eq!(pick_interval(&(5000..=5000)), 5000);
    }

    proptest! {
        /// Whatever the batch sizes and the interval: the range holds the interval, and every interval in it
        /// (its ends, and the one picked) rebuilds the same index.
        #[test]
        fn every_interval_in_the_range_rebuilds_the_index(
            sizes in proptest::collection::vec(61u64..5000, 1..200),
            interval in prop_oneof![Just(1024u64), Just(4096), Just(65536), 0u64..10_000],
        ) {
            let bs = batches(7, &sizes);
            let entries = index(7, &bs, interval);
            let range = fit(7, &bs, &entries).unwrap();
            prop_assert!(range.contains(&interval));
            for i in [*range.start(), *range.end(), pick_interval(&range)] {
                prop_assert_eq!(index(7, &bs, i), entries.clone());
            }
        }
    }
}
