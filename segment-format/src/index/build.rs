//! The index builders: the entries `LogSegment.recover` (and the 4.1+ per-batch
//! append path) writes for a segment's batches.

use crate::batch::BatchInfo;

use super::*;

/// Decides, batch by batch, when Kafka adds index entries: when more than
/// `index_interval_bytes` of log lie between the previous entry's position and
/// the start of this batch (`LogSegment.recover`: `validBytes - lastIndexEntry >
/// indexIntervalBytes`; the same as the 4.1+ per-batch append).
#[derive(Debug, Clone)]
struct IntervalTracker {
    interval: u64,
    last_entry_position: u64,
}

impl IntervalTracker {
    fn due(&mut self, batch: &BatchInfo) -> bool {
        if batch.position.saturating_sub(self.last_entry_position) > self.interval {
            self.last_entry_position = batch.position;
            true
        } else {
            false
        }
    }
}

/// Builds the offset index Kafka writes for a segment: `(batch lastOffset, batch
/// position)` for the first batch after each interval.
#[derive(Debug, Clone)]
pub struct OffsetIndexBuilder {
    base_offset: i64,
    interval: IntervalTracker,
    last_offset: Option<i64>,
    entries: Vec<OffsetIndexEntry>,
}

impl OffsetIndexBuilder {
    pub fn new(base_offset: i64, index_interval_bytes: u64) -> Self {
        OffsetIndexBuilder {
            base_offset,
            interval: IntervalTracker {
                interval: index_interval_bytes,
                last_entry_position: 0,
            },
            last_offset: None,
            entries: Vec::new(),
        }
    }

    /// Feed the next batch in file order; returns whether it got an entry. Fails
    /// like the broker on an offset not expressible relative to the base offset
    /// and on an entry offset that does not increase.
    pub fn push(&mut self, batch: &BatchInfo) -> Result<bool, ParseError> {
        ensure_in_range(batch, self.base_offset)?;
        if !self.interval.due(batch) {
            return Ok(false);
        }
        if let Some(prev) = self.last_offset {
            if batch.last_offset <= prev {
                return Err(ParseError::Corrupt {
                    position: batch.position,
                    offset: Some(batch.last_offset),
                    defect: Defect::OffsetOutOfOrder {
                        previous: prev,
                        found: batch.last_offset,
                    },
                });
            }
        }
        self.last_offset = Some(batch.last_offset);
        self.entries.push(OffsetIndexEntry {
            relative_offset: (batch.last_offset - self.base_offset) as i32,
            position: batch.position as i32,
        });
        Ok(true)
    }

    pub fn entries(&self) -> &[OffsetIndexEntry] {
        &self.entries
    }

    /// The trimmed file bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serialize_offset_index(&self.entries)
    }
}

/// Builds the time index Kafka writes for a segment: at each offset-index entry,
/// `maybeAppend(max timestamp so far, last offset of the first batch reaching
/// it)`, which appends only a strictly larger timestamp; and at roll/close one
/// final `maybeAppend` ([`TimeIndexBuilder::seal`]).
#[derive(Debug, Clone)]
pub struct TimeIndexBuilder {
    base_offset: i64,
    interval: IntervalTracker,
    max_timestamp: i64,
    max_timestamp_offset: i64,
    entries: Vec<TimeIndexEntry>,
    sealed: bool,
}

impl TimeIndexBuilder {
    pub fn new(base_offset: i64, index_interval_bytes: u64) -> Self {
        TimeIndexBuilder {
            base_offset,
            interval: IntervalTracker {
                interval: index_interval_bytes,
                last_entry_position: 0,
            },
            max_timestamp: NO_TIMESTAMP,
            max_timestamp_offset: base_offset,
            entries: Vec::new(),
            sealed: false,
        }
    }

    /// Feed the next batch in file order; returns whether an entry was appended.
    pub fn push(&mut self, batch: &BatchInfo) -> Result<bool, ParseError> {
        ensure_in_range(batch, self.base_offset)?;
        if batch.max_timestamp > self.max_timestamp {
            self.max_timestamp = batch.max_timestamp;
            self.max_timestamp_offset = batch.last_offset;
        }
        Ok(self.interval.due(batch) && self.maybe_append())
    }

    /// `TimeIndex.maybeAppend`: append only a timestamp above the last entry's.
    /// Offsets cannot go backwards here: they come from batches in file order.
    fn maybe_append(&mut self) -> bool {
        let last_ts = self.entries.last().map_or(NO_TIMESTAMP, |e| e.timestamp);
        if self.max_timestamp <= last_ts {
            return false;
        }
        self.entries.push(TimeIndexEntry {
            timestamp: self.max_timestamp,
            relative_offset: (self.max_timestamp_offset - self.base_offset) as i32,
        });
        true
    }

    /// The roll/close entry: the segment's max timestamp, if not already last.
    pub fn seal(&mut self) {
        if !self.sealed {
            self.sealed = true;
            self.maybe_append();
        }
    }

    pub fn entries(&self) -> &[TimeIndexEntry] {
        &self.entries
    }

    /// The trimmed file bytes (call [`TimeIndexBuilder::seal`] first for a sealed segment).
    pub fn to_bytes(&self) -> Vec<u8> {
        serialize_time_index(&self.entries)
    }
}
