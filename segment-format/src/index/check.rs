//! The offset- and time-index checkers that run beside a scan of the `.log`,
//! fed one batch at a time (see the parent module for what they check and why).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use crate::batch::BatchInfo;
use crate::dir::SegmentRole;
use crate::error::{Defect, IndexKind};
use crate::report::Finding;

use super::*;

fn defect(index: IndexKind, message: String) -> Defect {
    Defect::Index { index, message }
}

/// Findings about one index, with the ambiguous first slot's findings kept aside
/// until the checker knows whether it is an entry.
#[derive(Debug)]
struct IndexFindings {
    path: PathBuf,
    kind: IndexKind,
    entry_size: usize,
    ambiguous_first: bool,
    findings: Vec<Finding>,
    candidate: Vec<Finding>,
}

impl IndexFindings {
    fn push(&mut self, slot: usize, finding: Finding) {
        if self.ambiguous_first && slot == 0 {
            self.candidate.push(finding);
        } else {
            self.findings.push(finding);
        }
    }

    fn error(&mut self, slot: usize, offset: Option<i64>, message: String) {
        let pos = Some((slot * self.entry_size) as u64);
        let f = Finding::error(&self.path, pos, offset, defect(self.kind, message));
        self.push(slot, f);
    }

    fn warning(&mut self, slot: usize, offset: Option<i64>, message: String) {
        let pos = Some((slot * self.entry_size) as u64);
        let f = Finding::warning(&self.path, pos, offset, defect(self.kind, message));
        self.push(slot, f);
    }

    fn partial(&mut self, layout: &IndexLayout, len: usize) {
        if layout.partial_bytes > 0 {
            let pos = Some((layout.slots * self.entry_size) as u64);
            let message = format!(
                "file length {len} is not a multiple of {} ({} trailing bytes)",
                self.entry_size, layout.partial_bytes
            );
            self.findings
                .push(Finding::error(&self.path, pos, None, defect(self.kind, message)));
        }
    }

    /// Decide the ambiguous slot 0: an entry when it matched the log cleanly
    /// (`accepted`, no findings), else part of the zero tail. Returns the number of
    /// real entries; later findings about slot 0 are kept as ordinary ones.
    fn resolve(&mut self, layout: &IndexLayout, accepted: bool) -> usize {
        if !self.ambiguous_first {
            return layout.entries;
        }
        self.ambiguous_first = false;
        let entries = usize::from(accepted && self.candidate.is_empty());
        self.candidate.clear();
        entries
    }

    /// Report a zero tail in a sealed segment and return the findings sorted by position.
    fn finish(mut self, layout: &IndexLayout, entries: usize, newest: bool) -> Vec<Finding> {
        let tail = layout.slots.saturating_sub(entries);
        if tail > 0 && !newest {
            let start = entries * self.entry_size;
            let message = format!(
                "{tail} zero-filled slots from byte {start} to the end in a sealed segment: a preallocated index \
                 that was not trimmed; the broker counts every slot as an entry"
            );
            self.findings.push(Finding::error(
                &self.path,
                Some(start as u64),
                None,
                defect(self.kind, message),
            ));
        }
        self.findings.sort_by_key(|f| f.position);
        self.findings
    }
}

/// Checks an offset index against the batches of its segment.
///
/// For every entry `(O, P)`: `P` is the start of a batch inside the file; the
/// batch ending before `P` has `lastOffset < O` (else offsets up to that batch's
/// last are looked up from after it — the broker-correctness invariant); `O` is not
/// beyond the segment's last offset (the last entry decides the log end offset).
/// `O` equal to the last offset of the batch at `P` is what Kafka writes; `O` equal
/// to the last offset of a later batch is a pre-KAFKA-806 follower entry and is
/// accepted silently; any other `O` that keeps lookups correct is a warning.
/// Entries must strictly increase in offset and position; partial trailing bytes
/// and (in a sealed segment) a zero tail are errors.
#[derive(Debug)]
pub struct OffsetIndexChecker<'a> {
    bytes: &'a [u8],
    base_offset: i64,
    newest: bool,
    layout: IndexLayout,
    /// Slots matched against batches: the entries, or slot 0 when ambiguous.
    checked: usize,
    /// Valid slots by position, when not simply `0..checked`.
    order: Option<Vec<u32>>,
    cursor: usize,
    /// Entries whose offset lies beyond the batch at their position: `(offset, slot)`.
    pending: BinaryHeap<Reverse<(i64, usize)>>,
    /// `(position, end, last offset)` of the previous batch.
    prev: Option<(u64, u64, i64)>,
    max_last_offset: Option<i64>,
    candidate_matched: bool,
    sink: IndexFindings,
}

impl<'a> OffsetIndexChecker<'a> {
    /// `entries_bytes` is the whole `.index` file; [`SegmentRole::Newest`] permits
    /// the zero tail of an active, preallocated index.
    pub fn new(path: impl AsRef<Path>, entries_bytes: &'a [u8], base_offset: i64, role: SegmentRole) -> Self {
        let bytes = entries_bytes;
        let layout = IndexLayout::of(bytes, OFFSET_INDEX_ENTRY_SIZE);
        let mut sink = IndexFindings {
            path: path.as_ref().to_path_buf(),
            kind: IndexKind::Offset,
            entry_size: OFFSET_INDEX_ENTRY_SIZE,
            ambiguous_first: layout.first_slot_ambiguous(),
            findings: Vec::new(),
            candidate: Vec::new(),
        };
        sink.partial(&layout, bytes.len());
        let checked = if layout.first_slot_ambiguous() {
            1
        } else {
            layout.entries
        };
        let mut valid: Vec<u32> = Vec::new();
        let mut all_valid = true;
        let mut monotonic = true;
        let mut prev: Option<OffsetIndexEntry> = None;
        for i in 0..checked {
            let e = offset_entry(bytes, i);
            let o = e.offset(base_offset);
            let mut ok = true;
            if e.relative_offset < 0 {
                sink.error(i, Some(o), format!("negative relative offset {}", e.relative_offset));
                ok = false;
            }
            if e.position < 0 {
                sink.error(i, Some(o), format!("negative position {}", e.position));
                ok = false;
            }
            if let Some(p) = prev {
                if e.relative_offset <= p.relative_offset {
                    sink.error(
                        i,
                        Some(o),
                        format!(
                            "offset {o} does not increase (previous entry {})",
                            p.offset(base_offset)
                        ),
                    );
                }
                if e.position <= p.position {
                    monotonic = false;
                    sink.error(
                        i,
                        Some(o),
                        format!(
                            "position {} does not increase (previous entry {})",
                            e.position, p.position
                        ),
                    );
                }
            }
            prev = Some(e);
            all_valid &= ok;
            if ok {
                valid.push(i as u32);
            }
        }
        let order = if all_valid && monotonic {
            None
        } else {
            valid.sort_by_key(|&i| (offset_entry(bytes, i as usize).position, i));
            Some(valid)
        };
        OffsetIndexChecker {
            bytes,
            base_offset,
            newest: role == SegmentRole::Newest,
            layout,
            checked,
            order,
            cursor: 0,
            pending: BinaryHeap::new(),
            prev: None,
            max_last_offset: None,
            candidate_matched: false,
            sink,
        }
    }

    fn remaining(&self) -> usize {
        self.order.as_ref().map_or(self.checked, Vec::len)
    }

    fn slot_at(&self, k: usize) -> usize {
        match &self.order {
            Some(o) => o.get(k).map_or(k, |&i| i as usize),
            None => k,
        }
    }

    /// Feed the next batch of the segment, in file order.
    pub fn on_batch(&mut self, batch: &BatchInfo) {
        while let Some(&Reverse((o, i))) = self.pending.peek() {
            if o > batch.last_offset {
                break;
            }
            self.pending.pop();
            if o != batch.last_offset {
                self.sink.warning(
                    i,
                    Some(o),
                    format!(
                        "offset {o} is not the last offset of any batch (next batch: offsets {}..={}); lookups are \
                         still correct",
                        batch.base_offset, batch.last_offset
                    ),
                );
            }
        }
        while self.cursor < self.remaining() {
            let i = self.slot_at(self.cursor);
            let e = offset_entry(self.bytes, i);
            let o = e.offset(self.base_offset);
            let p = e.position as u64;
            if p > batch.position {
                break;
            }
            self.cursor += 1;
            if p < batch.position {
                let place = match self.prev {
                    Some((start, end, _)) if p >= start && p < end => {
                        format!("it falls inside the batch at {start}..{end}")
                    }
                    Some(_) => "it falls between batches".to_string(),
                    None => "it lies before the first batch".to_string(),
                };
                self.sink
                    .error(i, Some(o), format!("position {p} is not the start of a batch: {place}"));
                continue;
            }
            if let Some((_, _, prev_last)) = self.prev {
                if prev_last >= o {
                    self.sink.error(
                        i,
                        Some(o),
                        format!(
                            "the batch before position {p} ends at offset {prev_last}, not below the entry offset \
                             {o}: lookups of offsets {o}..={prev_last} would start after the batch holding them"
                        ),
                    );
                    continue;
                }
            }
            if batch.last_offset == o {
                if i == 0 {
                    self.candidate_matched = true;
                }
            } else if batch.last_offset > o {
                self.sink.warning(
                    i,
                    Some(o),
                    format!(
                        "offset {o} is not the last offset of the batch at position {p} (offsets {}..={}); lookups \
                         are still correct",
                        batch.base_offset, batch.last_offset
                    ),
                );
            } else {
                self.pending.push(Reverse((o, i)));
            }
        }
        self.prev = Some((
            batch.position,
            batch.position.saturating_add(batch.size),
            batch.last_offset,
        ));
        self.max_last_offset = Some(
            self.max_last_offset
                .map_or(batch.last_offset, |m| m.max(batch.last_offset)),
        );
    }

    /// `log_end_position` is the size of the `.log` (the end of its last complete batch).
    pub fn finish(mut self, log_end_position: u64) -> Vec<Finding> {
        while self.cursor < self.remaining() {
            let i = self.slot_at(self.cursor);
            self.cursor += 1;
            let e = offset_entry(self.bytes, i);
            let o = e.offset(self.base_offset);
            let p = e.position as u64;
            let message = if p >= log_end_position {
                format!("position {p} is at or beyond the end of the log ({log_end_position} bytes)")
            } else {
                format!("position {p} is not the start of a batch: it falls inside the last batch")
            };
            self.sink.error(i, Some(o), message);
        }
        let last_slot = self.checked.checked_sub(1);
        while let Some(Reverse((o, i))) = self.pending.pop() {
            match self.max_last_offset {
                Some(m) if o <= m => self.sink.warning(
                    i,
                    Some(o),
                    format!("offset {o} is not the last offset of any batch; lookups are still correct"),
                ),
                m => {
                    let mut message = match m {
                        Some(m) => format!("offset {o} is beyond the last offset in the log ({m})"),
                        None => format!("offset {o} is beyond the log, which has no batches"),
                    };
                    if Some(i) == last_slot {
                        message.push_str(
                            "; as the last entry it makes the broker compute a log end offset equal to the base \
                             offset",
                        );
                    }
                    self.sink.error(i, Some(o), message);
                }
            }
        }
        let entries = self.sink.resolve(&self.layout, self.candidate_matched);
        self.sink.finish(&self.layout, entries, self.newest)
    }
}

/// Checks a time index against the batches of its segment.
///
/// For every entry `(T, O)`: `O` lies in a batch (the batch's last offset, as
/// Kafka 3.7+ writes, or a record offset inside it, as older leaders wrote); `T`
/// equals the largest batch max timestamp up to and including that batch, and no
/// earlier batch already reached `T` (else a lookup for `T` would skip it).
/// Timestamps strictly increase, offsets do not decrease, the first timestamp is
/// above `-1`. In a sealed segment the last entry's timestamp is the segment's max
/// timestamp (Kafka appends it at roll and close) and a zero tail is an error.
#[derive(Debug)]
pub struct TimeIndexChecker<'a> {
    bytes: &'a [u8],
    base_offset: i64,
    newest: bool,
    layout: IndexLayout,
    checked: usize,
    /// Valid slots by offset, when not simply `0..checked`.
    order: Option<Vec<u32>>,
    cursor: usize,
    /// Largest batch max timestamp so far and the last offset of the first batch reaching it.
    running_max: i64,
    running_max_offset: Option<i64>,
    prev_last_offset: Option<i64>,
    candidate_matched: bool,
    sink: IndexFindings,
}

impl<'a> TimeIndexChecker<'a> {
    /// `entries_bytes` is the whole `.timeindex` file; [`SegmentRole::Newest`] permits
    /// the zero tail and a missing final entry of the active segment.
    pub fn new(path: impl AsRef<Path>, entries_bytes: &'a [u8], base_offset: i64, role: SegmentRole) -> Self {
        let bytes = entries_bytes;
        let layout = IndexLayout::of(bytes, TIME_INDEX_ENTRY_SIZE);
        let mut sink = IndexFindings {
            path: path.as_ref().to_path_buf(),
            kind: IndexKind::Time,
            entry_size: TIME_INDEX_ENTRY_SIZE,
            ambiguous_first: layout.first_slot_ambiguous(),
            findings: Vec::new(),
            candidate: Vec::new(),
        };
        sink.partial(&layout, bytes.len());
        let checked = if layout.first_slot_ambiguous() {
            1
        } else {
            layout.entries
        };
        let mut valid: Vec<u32> = Vec::new();
        let mut all_valid = true;
        let mut monotonic = true;
        let mut prev: Option<TimeIndexEntry> = None;
        for i in 0..checked {
            let e = time_entry(bytes, i);
            let o = e.offset(base_offset);
            let ok = e.relative_offset >= 0;
            if !ok {
                sink.error(i, Some(o), format!("negative relative offset {}", e.relative_offset));
            }
            match prev {
                None if e.timestamp <= NO_TIMESTAMP => sink.error(
                    i,
                    Some(o),
                    format!(
                        "timestamp {} is not above {NO_TIMESTAMP} (no timestamp); Kafka never indexes it",
                        e.timestamp
                    ),
                ),
                None => {}
                Some(p) => {
                    if e.timestamp <= p.timestamp {
                        sink.error(
                            i,
                            Some(o),
                            format!(
                                "timestamp {} does not increase (previous entry {})",
                                e.timestamp, p.timestamp
                            ),
                        );
                    }
                    if e.relative_offset < p.relative_offset {
                        monotonic = false;
                        sink.error(
                            i,
                            Some(o),
                            format!("offset {o} decreases (previous entry {})", p.offset(base_offset)),
                        );
                    }
                }
            }
            prev = Some(e);
            all_valid &= ok;
            if ok {
                valid.push(i as u32);
            }
        }
        let order = if all_valid && monotonic {
            None
        } else {
            valid.sort_by_key(|&i| (time_entry(bytes, i as usize).relative_offset, i));
            Some(valid)
        };
        TimeIndexChecker {
            bytes,
            base_offset,
            newest: role == SegmentRole::Newest,
            layout,
            checked,
            order,
            cursor: 0,
            running_max: NO_TIMESTAMP,
            running_max_offset: None,
            prev_last_offset: None,
            candidate_matched: false,
            sink,
        }
    }

    fn remaining(&self) -> usize {
        self.order.as_ref().map_or(self.checked, Vec::len)
    }

    fn slot_at(&self, k: usize) -> usize {
        match &self.order {
            Some(o) => o.get(k).map_or(k, |&i| i as usize),
            None => k,
        }
    }

    /// Feed the next batch of the segment, in file order.
    pub fn on_batch(&mut self, batch: &BatchInfo) {
        while self.cursor < self.remaining() {
            let i = self.slot_at(self.cursor);
            let e = time_entry(self.bytes, i);
            let o = e.offset(self.base_offset);
            // A legacy frame may not report its first inner offset: accept offsets
            // between the previous batch and this one as belonging to it.
            let legacy_gap = batch.magic < 2 && !matches!(self.prev_last_offset, Some(p) if o <= p);
            if o < batch.base_offset && !legacy_gap {
                self.cursor += 1;
                self.sink.error(i, Some(o), format!("offset {o} is not in any batch"));
                continue;
            }
            if o > batch.last_offset {
                break;
            }
            self.cursor += 1;
            let through = self.running_max.max(batch.max_timestamp);
            if e.timestamp != through {
                self.sink.error(
                    i,
                    Some(o),
                    format!(
                        "timestamp mismatch: entry has {}, but the largest timestamp up to the batch holding offset \
                         {o} (offsets {}..={} at position {}) is {through}",
                        e.timestamp, batch.base_offset, batch.last_offset, batch.position
                    ),
                );
            } else if self.running_max >= e.timestamp {
                let earlier = self.running_max_offset.unwrap_or(self.base_offset);
                self.sink.error(
                    i,
                    Some(o),
                    format!(
                        "timestamp {} was first reached by the batch ending at offset {earlier}, before offset {o}: \
                         a lookup for it would skip that batch",
                        e.timestamp
                    ),
                );
            } else if i == 0 {
                self.candidate_matched = true;
            }
        }
        if batch.max_timestamp > self.running_max {
            self.running_max = batch.max_timestamp;
            self.running_max_offset = Some(batch.last_offset);
        }
        self.prev_last_offset = Some(batch.last_offset);
    }

    /// `log_end_position` is the size of the `.log`; it only words findings.
    pub fn finish(mut self, log_end_position: u64) -> Vec<Finding> {
        while self.cursor < self.remaining() {
            let i = self.slot_at(self.cursor);
            self.cursor += 1;
            let o = time_entry(self.bytes, i).offset(self.base_offset);
            let message = match self.prev_last_offset {
                Some(last) => format!("offset {o} is beyond the last batch of the log (last offset {last})"),
                None => format!("offset {o} is beyond the log, which has no batches ({log_end_position} bytes)"),
            };
            self.sink.error(i, Some(o), message);
        }
        let running_max = self.running_max;
        let entries = self.sink.resolve(&self.layout, self.candidate_matched);
        if !self.newest {
            match entries.checked_sub(1) {
                Some(last) => {
                    let e = time_entry(self.bytes, last);
                    if e.timestamp != running_max {
                        let o = e.offset(self.base_offset);
                        self.sink.error(
                            last,
                            Some(o),
                            format!(
                                "last entry timestamp {} is not the segment's max timestamp {running_max}: Kafka \
                                 appends the max timestamp when a segment is rolled or closed",
                                e.timestamp
                            ),
                        );
                    }
                }
                None if running_max > NO_TIMESTAMP => {
                    let message = format!(
                        "no entries, but the segment's max timestamp is {running_max}: time-based retention would \
                         use the file modification time instead"
                    );
                    self.sink.findings.push(Finding::error(
                        &self.sink.path,
                        Some(0),
                        None,
                        defect(IndexKind::Time, message),
                    ));
                }
                None => {}
            }
        }
        self.sink.finish(&self.layout, entries, self.newest)
    }
}
