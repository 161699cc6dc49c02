//! Offset index (`.index`) and time index (`.timeindex`): parsing, checking
//! beside a log scan, and building from batches.
//!
//! Both are sparse, fixed-width, big-endian and unchecksummed:
//! offset index entries are `relativeOffset i32 | position i32` (8 bytes), time
//! index entries `timestamp i64 | relativeOffset i32` (12 bytes), offsets relative
//! to the segment's base offset. A broker preallocates the active segment's files
//! to `segment.index.bytes` and trims them on roll or close, so a copy of the
//! newest segment normally ends in zero-filled slots. Kafka cannot tell those from
//! entries once the file is reopened (every slot counts), which is why a zero
//! tail in a *sealed* segment is an error: the broker would take `(0, base)` as
//! its last time-index entry (segment eligible for retention at once) and as its
//! last offset-index entry (binary search and log-end-offset go wrong).
//!
//! Telling the tail from entries: Kafka's DumpLogSegments stops at the first slot
//! after the first whose offset equals the base offset. We take the trailing run of
//! all-zero slots as the tail. Slot 0 alone stays ambiguous — `(base, position 0)`
//! and `(timestamp 0, base)` are legal entries — and the checkers decide it from
//! the batches: it is an entry if it is consistent with the log, tail otherwise.
//!
//! The checkers run beside a scan of the `.log`, fed one [`BatchInfo`] at a time,
//! so checking a 1 GiB segment keeps only the index bytes (at most
//! `segment.index.bytes`) and no per-batch list. They report what breaks broker
//! behaviour, not what differs from the bytes one particular broker version would
//! write: index bytes differ between leader, follower (pre-KAFKA-806 follower
//! entries pair a chunk's last offset with its first position) and recovery.
//!
//! The builders write what `LogSegment.recover` (and the per-batch append path of
//! Kafka 4.1+) writes, for rebuilding indexes and for the partition writer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use crate::batch::BatchInfo;
use crate::error::{Defect, IndexKind, ParseError, Result};
use crate::report::Finding;

/// Bytes per offset-index entry.
pub const OFFSET_INDEX_ENTRY_SIZE: usize = 8;
/// Bytes per time-index entry.
pub const TIME_INDEX_ENTRY_SIZE: usize = 12;
/// `index.interval.bytes` default: an entry once more than this many log bytes
/// were appended since the previous entry.
pub const DEFAULT_INDEX_INTERVAL_BYTES: u64 = 4096;
/// `segment.index.bytes` default: the size an active segment's index is preallocated to.
pub const DEFAULT_MAX_INDEX_SIZE: u64 = 10 * 1024 * 1024;

/// `(offset, position)`: the batch holding offsets up to `offset` is at or after
/// `position` in the `.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetIndexEntry {
    pub relative_offset: i32,
    pub position: i32,
}

impl OffsetIndexEntry {
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.saturating_add(i64::from(self.relative_offset))
    }

    pub fn to_bytes(&self) -> [u8; OFFSET_INDEX_ENTRY_SIZE] {
        let mut out = [0u8; OFFSET_INDEX_ENTRY_SIZE];
        let (a, b) = out.split_at_mut(4);
        a.copy_from_slice(&self.relative_offset.to_be_bytes());
        b.copy_from_slice(&self.position.to_be_bytes());
        out
    }

    pub fn from_bytes(b: &[u8; OFFSET_INDEX_ENTRY_SIZE]) -> Self {
        let [a0, a1, a2, a3, b0, b1, b2, b3] = *b;
        OffsetIndexEntry {
            relative_offset: i32::from_be_bytes([a0, a1, a2, a3]),
            position: i32::from_be_bytes([b0, b1, b2, b3]),
        }
    }
}

/// `(timestamp, offset)`: the largest timestamp up to and including `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeIndexEntry {
    pub timestamp: i64,
    pub relative_offset: i32,
}

impl TimeIndexEntry {
    pub fn offset(&self, base_offset: i64) -> i64 {
        base_offset.saturating_add(i64::from(self.relative_offset))
    }

    pub fn to_bytes(&self) -> [u8; TIME_INDEX_ENTRY_SIZE] {
        let mut out = [0u8; TIME_INDEX_ENTRY_SIZE];
        let (a, b) = out.split_at_mut(8);
        a.copy_from_slice(&self.timestamp.to_be_bytes());
        b.copy_from_slice(&self.relative_offset.to_be_bytes());
        out
    }

    pub fn from_bytes(b: &[u8; TIME_INDEX_ENTRY_SIZE]) -> Self {
        let [t0, t1, t2, t3, t4, t5, t6, t7, o0, o1, o2, o3] = *b;
        TimeIndexEntry {
            timestamp: i64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            relative_offset: i32::from_be_bytes([o0, o1, o2, o3]),
        }
    }
}

/// How an index file's bytes divide into entries, zero tail and partial bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexLayout {
    /// Whole slots in the file.
    pub slots: usize,
    /// Slots before the trailing run of all-zero slots.
    pub entries: usize,
    /// Trailing all-zero slots. When `entries == 0` this includes slot 0, which
    /// may also be a real entry (see the module docs).
    pub zero_tail: usize,
    /// Bytes after the last whole slot (length not a multiple of the entry size).
    pub partial_bytes: usize,
}

impl IndexLayout {
    pub fn of(bytes: &[u8], entry_size: usize) -> Self {
        let slots = bytes.len() / entry_size;
        let partial_bytes = bytes.len() % entry_size;
        let whole = bytes.get(..slots * entry_size).unwrap_or_default();
        let zero_tail = whole
            .rchunks_exact(entry_size)
            .take_while(|slot| slot.iter().all(|&b| b == 0))
            .count();
        IndexLayout {
            slots,
            entries: slots - zero_tail,
            zero_tail,
            partial_bytes,
        }
    }

    /// True when the whole file is zero slots, so slot 0 may be an entry.
    fn first_slot_ambiguous(&self) -> bool {
        self.entries == 0 && self.slots > 0
    }
}

fn slot<const N: usize>(bytes: &[u8], i: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = bytes.get(i * N..(i + 1) * N) {
        out.copy_from_slice(src);
    }
    out
}

fn offset_entry(bytes: &[u8], i: usize) -> OffsetIndexEntry {
    OffsetIndexEntry::from_bytes(&slot(bytes, i))
}

fn time_entry(bytes: &[u8], i: usize) -> TimeIndexEntry {
    TimeIndexEntry::from_bytes(&slot(bytes, i))
}

/// A parsed offset index: the entries before the zero tail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    pub entries: Vec<OffsetIndexEntry>,
    pub layout: IndexLayout,
}

impl OffsetIndex {
    /// Split `bytes` per [`IndexLayout`]; an all-zero file has no entries.
    pub fn parse(bytes: &[u8]) -> Self {
        let layout = IndexLayout::of(bytes, OFFSET_INDEX_ENTRY_SIZE);
        OffsetIndex {
            entries: (0..layout.entries).map(|i| offset_entry(bytes, i)).collect(),
            layout,
        }
    }
}

/// A parsed time index: the entries before the zero tail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    pub entries: Vec<TimeIndexEntry>,
    pub layout: IndexLayout,
}

impl TimeIndex {
    /// Split `bytes` per [`IndexLayout`]; an all-zero file has no entries.
    pub fn parse(bytes: &[u8]) -> Self {
        let layout = IndexLayout::of(bytes, TIME_INDEX_ENTRY_SIZE);
        TimeIndex {
            entries: (0..layout.entries).map(|i| time_entry(bytes, i)).collect(),
            layout,
        }
    }
}

/// Offset index file bytes for `entries` (trimmed: no preallocated tail).
pub fn serialize_offset_index(entries: &[OffsetIndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_bytes()).collect()
}

/// Time index file bytes for `entries` (trimmed: no preallocated tail).
pub fn serialize_time_index(entries: &[TimeIndexEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_bytes()).collect()
}

/// Read a whole index file. Plain reads rather than mmap: the active segment's
/// index is mmapped and written by a running broker, and a Rust slice over a file
/// that changes underneath is undefined behaviour. Index files are at most
/// `segment.index.bytes` (10 MiB by default); a regular file of at most
/// [`MAX_INDEX_READ_BYTES`] is read, anything else refused (see [`crate::open`]).
/// `verify` reads indexes bounded by their segment instead.
pub fn read_index_file(path: &Path) -> Result<Vec<u8>> {
    crate::open::read_capped(path, "index file", MAX_INDEX_READ_BYTES)
}

/// Largest index [`read_index_file`] reads whole (64 MiB, six times Kafka's
/// default `segment.index.bytes`).
pub const MAX_INDEX_READ_BYTES: u64 = 64 * 1024 * 1024;

fn defect(index: IndexKind, message: String) -> Defect {
    Defect::Index { index, message }
}

/// Findings about one index, with the ambiguous first slot's findings kept aside
/// until the checker knows whether it is an entry.
#[derive(Debug)]
struct Sink {
    path: PathBuf,
    kind: IndexKind,
    entry_size: usize,
    ambiguous_first: bool,
    findings: Vec<Finding>,
    candidate: Vec<Finding>,
}

impl Sink {
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
    sink: Sink,
}

impl<'a> OffsetIndexChecker<'a> {
    /// `entries_bytes` is the whole `.index` file; `is_newest_segment` permits
    /// the zero tail of an active, preallocated index.
    pub fn new(path: impl AsRef<Path>, entries_bytes: &'a [u8], base_offset: i64, is_newest_segment: bool) -> Self {
        let bytes = entries_bytes;
        let layout = IndexLayout::of(bytes, OFFSET_INDEX_ENTRY_SIZE);
        let mut sink = Sink {
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
            newest: is_newest_segment,
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
    sink: Sink,
}

/// `RecordBatch.NO_TIMESTAMP`: the initial "largest timestamp" of an empty time index.
const NO_TIMESTAMP: i64 = -1;

impl<'a> TimeIndexChecker<'a> {
    /// `entries_bytes` is the whole `.timeindex` file; `is_newest_segment` permits
    /// the zero tail and a missing final entry of the active segment.
    pub fn new(path: impl AsRef<Path>, entries_bytes: &'a [u8], base_offset: i64, is_newest_segment: bool) -> Self {
        let bytes = entries_bytes;
        let layout = IndexLayout::of(bytes, TIME_INDEX_ENTRY_SIZE);
        let mut sink = Sink {
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
            newest: is_newest_segment,
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

fn ensure_in_range(batch: &BatchInfo, base_offset: i64) -> Result<(), ParseError> {
    let rel = batch.last_offset.checked_sub(base_offset);
    if !rel.is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r)) || batch.base_offset < base_offset {
        return Err(ParseError::Corrupt {
            position: batch.position,
            offset: Some(batch.last_offset),
            defect: Defect::OffsetOverflow {
                base_offset,
                found: batch.last_offset,
            },
        });
    }
    if i32::try_from(batch.position).is_err() {
        return Err(ParseError::Corrupt {
            position: batch.position,
            offset: Some(batch.base_offset),
            defect: Defect::BadLength {
                field: "log position",
                value: i64::try_from(batch.position).unwrap_or(i64::MAX),
            },
        });
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Severity;
    use proptest::prelude::*;

    fn b(position: u64, size: u64, base: i64, last: i64, max_ts: i64) -> BatchInfo {
        BatchInfo {
            position,
            size,
            magic: 2,
            base_offset: base,
            last_offset: last,
            max_timestamp: max_ts,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            is_transactional: false,
            control: None,
            is_control: false,
            records_count: (last - base + 1) as i32,
        }
    }

    /// Ten contiguous 3000-byte batches of 5 records from offset 100; timestamps
    /// rise except batch 5, which goes back in time.
    fn segment() -> Vec<BatchInfo> {
        (0..10)
            .map(|k| {
                let ts = if k == 5 { 500 } else { 1000 + 10 * k as i64 };
                b(3000 * k, 3000, 100 + 5 * k as i64, 104 + 5 * k as i64, ts)
            })
            .collect()
    }

    fn log_end(batches: &[BatchInfo]) -> u64 {
        batches.last().map_or(0, |b| b.position + b.size)
    }

    fn off(rel: i32, pos: i32) -> OffsetIndexEntry {
        OffsetIndexEntry {
            relative_offset: rel,
            position: pos,
        }
    }

    fn ts(timestamp: i64, rel: i32) -> TimeIndexEntry {
        TimeIndexEntry {
            timestamp,
            relative_offset: rel,
        }
    }

    fn check_offset(bytes: &[u8], base: i64, newest: bool, batches: &[BatchInfo]) -> Vec<Finding> {
        let mut c = OffsetIndexChecker::new("00000000000000000100.index", bytes, base, newest);
        batches.iter().for_each(|x| c.on_batch(x));
        c.finish(log_end(batches))
    }

    fn check_time(bytes: &[u8], base: i64, newest: bool, batches: &[BatchInfo]) -> Vec<Finding> {
        let mut c = TimeIndexChecker::new("00000000000000000100.timeindex", bytes, base, newest);
        batches.iter().for_each(|x| c.on_batch(x));
        c.finish(log_end(batches))
    }

    fn summary(f: &[Finding]) -> Vec<(Severity, Option<u64>, Option<i64>)> {
        f.iter().map(|f| (f.severity, f.position, f.offset)).collect()
    }

    fn build(batches: &[BatchInfo], base: i64, interval: u64) -> (Vec<u8>, Vec<u8>) {
        let mut o = OffsetIndexBuilder::new(base, interval);
        let mut t = TimeIndexBuilder::new(base, interval);
        for x in batches {
            o.push(x).expect("offset push");
            t.push(x).expect("time push");
        }
        t.seal();
        (o.to_bytes(), t.to_bytes())
    }

    #[test]
    fn entry_layouts_are_big_endian() {
        assert_eq!(off(0x01020304, 0x05060708).to_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            ts(0x0102030405060708, 0x090a0b0c).to_bytes(),
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        );
        assert_eq!(OffsetIndexEntry::from_bytes(&[0, 0, 0, 7, 0, 0, 0x10, 0]), off(7, 4096));
        assert_eq!(off(3, 0).offset(100), 103);
    }

    #[test]
    fn builders_follow_log_segment_recover() {
        // Entries when more than 4096 bytes lie since the last entry: batches 2, 4, 6, 8.
        let (oi, ti) = build(&segment(), 100, DEFAULT_INDEX_INTERVAL_BYTES);
        let expected_offsets = vec![off(14, 6000), off(24, 12000), off(34, 18000), off(44, 24000)];
        assert_eq!(oi, serialize_offset_index(&expected_offsets));
        assert_eq!(OffsetIndex::parse(&oi).entries, expected_offsets);
        // Max timestamp so far at each entry (batch 5 goes back, so batch 6's entry
        // is 1060), then the roll entry with the segment max (1090 at offset 149).
        let expected_times = vec![ts(1020, 14), ts(1040, 24), ts(1060, 34), ts(1080, 44), ts(1090, 49)];
        assert_eq!(TimeIndex::parse(&ti).entries, expected_times);
        assert_eq!(ti.len(), 5 * TIME_INDEX_ENTRY_SIZE);
    }

    #[test]
    fn time_builder_skips_non_increasing_timestamps_and_unsealed_has_no_final_entry() {
        let batches = vec![b(0, 5000, 0, 0, 50), b(5000, 5000, 1, 1, 40), b(10000, 5000, 2, 2, 45)];
        let mut t = TimeIndexBuilder::new(0, 4096);
        for x in &batches {
            t.push(x).expect("push");
        }
        // Entry at batch 1 (max so far 50 @ 0); at batch 2 the max is still 50: skipped.
        assert_eq!(t.entries(), &[ts(50, 0)]);
        t.seal();
        assert_eq!(
            t.entries(),
            &[ts(50, 0)],
            "final entry equal to the last is not repeated"
        );
    }

    #[test]
    fn builders_reject_what_the_broker_rejects() {
        let mut o = OffsetIndexBuilder::new(100, 0);
        assert!(matches!(
            o.push(&b(0, 10, 99, 99, 0)),
            Err(ParseError::Corrupt {
                defect: Defect::OffsetOverflow { .. },
                ..
            })
        ));
        let far = 100 + i64::from(i32::MAX) + 1;
        assert!(o.push(&b(0, 10, far, far, 0)).is_err());
        o.push(&b(0, 10, 100, 100, 0)).expect("first");
        o.push(&b(10, 10, 101, 105, 0)).expect("second");
        assert!(matches!(
            o.push(&b(20, 10, 103, 103, 0)),
            Err(ParseError::Corrupt {
                position: 20,
                defect: Defect::OffsetOutOfOrder {
                    previous: 105,
                    found: 103
                },
                ..
            })
        ));
    }

    #[test]
    fn built_indexes_pass_the_checkers() {
        let batches = segment();
        let (oi, ti) = build(&batches, 100, 4096);
        assert_eq!(check_offset(&oi, 100, false, &batches), vec![]);
        assert_eq!(check_time(&ti, 100, false, &batches), vec![]);
    }

    #[test]
    fn zero_tail_is_fine_in_the_newest_segment_and_an_error_in_a_sealed_one() {
        let batches = segment();
        let (mut oi, mut ti) = build(&batches, 100, 4096);
        let entries = oi.len();
        oi.resize(oi.len() + 80, 0);
        ti.resize(ti.len() + 120, 0);
        let parsed = OffsetIndex::parse(&oi);
        assert_eq!((parsed.entries.len(), parsed.layout.zero_tail), (4, 10));
        assert_eq!(TimeIndex::parse(&ti).layout.zero_tail, 10);
        assert_eq!(check_offset(&oi, 100, true, &batches), vec![]);
        assert_eq!(check_time(&ti, 100, true, &batches), vec![]);
        let f = check_offset(&oi, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(entries as u64), None)]);
        let f = check_time(&ti, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(60), None)]);
    }

    #[test]
    fn preallocated_empty_index_of_the_active_segment() {
        let batches = vec![b(0, 200, 0, 4, 10)];
        let zeros = vec![0u8; 8 * 16];
        assert_eq!(check_offset(&zeros, 0, true, &batches), vec![]);
        let f = check_offset(&zeros, 0, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(0), None)], "{f:?}");
        let tzeros = vec![0u8; 12 * 16];
        assert_eq!(check_time(&tzeros, 0, true, &batches), vec![]);
        let layout = IndexLayout::of(&zeros, 8);
        assert_eq!((layout.entries, layout.zero_tail), (0, 16));
    }

    #[test]
    fn ambiguous_first_slot_is_an_entry_when_the_log_agrees() {
        // Offset index (0, 0): the batch at 0 is the single record at the base offset.
        let batches = vec![b(0, 100, 0, 0, 0), b(100, 100, 1, 3, 7)];
        let one_zero = vec![0u8; 8];
        assert_eq!(check_offset(&one_zero, 0, false, &batches), vec![]);
        // Time index (timestamp 0, base) when the first batch's max timestamp is 0:
        // a real entry, but a sealed segment still needs the final max entry.
        let mut t = vec![0u8; 12];
        t.extend_from_slice(&ts(7, 3).to_bytes());
        assert_eq!(check_time(&t, 0, false, &batches), vec![]);
        let only_zero = vec![0u8; 12];
        let f = check_time(&only_zero, 0, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(0))], "{f:?}");
        // When the log disagrees, the zero slot is tail.
        let other = vec![b(0, 100, 0, 9, 5)];
        let f = check_time(&only_zero, 0, false, &other);
        assert_eq!(f.len(), 2, "no entries + zero tail: {f:?}");
    }

    #[test]
    fn pre_kafka_806_follower_entries_are_accepted() {
        // A follower chunk of batches 2..=3 indexed as (last offset of batch 3, position of batch 2).
        let batches = segment();
        let bytes = serialize_offset_index(&[off(19, 6000), off(39, 18000)]);
        assert_eq!(check_offset(&bytes, 100, false, &batches), vec![]);
    }

    #[test]
    fn misaligned_and_out_of_range_positions() {
        let batches = segment();
        let bytes = serialize_offset_index(&[off(14, 6000), off(24, 12001), off(34, 18000), off(44, 30000)]);
        let f = check_offset(&bytes, 100, false, &batches);
        assert_eq!(
            summary(&f),
            vec![
                (Severity::Error, Some(8), Some(124)),
                (Severity::Error, Some(24), Some(144))
            ],
            "{f:?}"
        );
        assert!(
            matches!(&f[0].defect, Defect::Index { index: IndexKind::Offset, message }
            if message.contains("inside the batch at 12000..15000"))
        );
    }

    #[test]
    fn non_increasing_entries() {
        let batches = segment();
        let bytes = serialize_offset_index(&[off(24, 12000), off(14, 6000)]);
        let f = check_offset(&bytes, 100, false, &batches);
        // Offset and position both go back at slot 1 (byte 8); each entry still
        // matches its own batch.
        assert_eq!(
            summary(&f),
            vec![
                (Severity::Error, Some(8), Some(114)),
                (Severity::Error, Some(8), Some(114))
            ],
            "{f:?}"
        );
    }

    #[test]
    fn broker_invariant_and_offsets_beyond_the_log() {
        let batches = segment();
        // Offset 110 at the position of the batch 115..=119: the batch before ends at 114 >= 110.
        let bytes = serialize_offset_index(&[off(10, 9000)]);
        let f = check_offset(&bytes, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(110))]);
        // Last entry beyond the log's last offset (149).
        let bytes = serialize_offset_index(&[off(14, 6000), off(60, 27000)]);
        let f = check_offset(&bytes, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(8), Some(160))]);
        // Inside the batch at its position: correct for lookups, not what Kafka writes.
        let bytes = serialize_offset_index(&[off(12, 6000)]);
        let f = check_offset(&bytes, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Warning, Some(0), Some(112))]);
    }

    #[test]
    fn partial_trailing_bytes() {
        let batches = segment();
        let mut bytes = serialize_offset_index(&[off(14, 6000)]);
        bytes.extend_from_slice(&[1, 2, 3]);
        let f = check_offset(&bytes, 100, true, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(8), None)]);
        let mut t = serialize_time_index(&[ts(1090, 49)]);
        t.push(9);
        let f = check_time(&t, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(12), None)]);
    }

    #[test]
    fn time_index_out_of_order() {
        let batches = segment();
        let bytes = serialize_time_index(&[ts(1040, 24), ts(1020, 14), ts(1090, 49)]);
        let f = check_time(&bytes, 100, false, &batches);
        // Slot 1: timestamp and offset both go back (both reported at byte 12).
        let at12: Vec<_> = f.iter().filter(|f| f.position == Some(12)).collect();
        assert_eq!(at12.len(), 2, "{f:?}");
        assert!(f
            .iter()
            .all(|f| f.severity == Severity::Error && f.position == Some(12)));
    }

    #[test]
    fn time_index_wrong_final_timestamp_in_sealed_segment() {
        let batches = segment();
        let bytes = serialize_time_index(&[ts(1020, 14), ts(1080, 44)]);
        assert_eq!(
            check_time(&bytes, 100, true, &batches),
            vec![],
            "active segment: no roll entry yet"
        );
        let f = check_time(&bytes, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(12), Some(144))]);
        // No entries at all in a sealed segment with timestamps.
        let f = check_time(&[], 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(0), None)]);
    }

    #[test]
    fn time_index_entry_semantics() {
        let batches = segment();
        // Record offset inside the batch holding the max (older leaders): accepted.
        let ok = serialize_time_index(&[ts(1020, 12), ts(1090, 49)]);
        assert_eq!(check_time(&ok, 100, false, &batches), vec![]);
        // Timestamp that is not the running max at its batch.
        let bad = serialize_time_index(&[ts(1025, 14), ts(1090, 49)]);
        let f = check_time(&bad, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(114))]);
        // Offset after the first batch reaching the timestamp (batch 5 keeps max 1040).
        let late = serialize_time_index(&[ts(1040, 29), ts(1090, 49)]);
        let f = check_time(&late, 100, false, &batches);
        assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(129))]);
        // Offset not in any batch (gap) and beyond the log.
        let gappy = vec![b(0, 100, 0, 4, 10), b(100, 100, 10, 14, 20)];
        let bytes = serialize_time_index(&[ts(10, 7), ts(20, 30)]);
        let f = check_time(&bytes, 0, true, &gappy);
        assert_eq!(
            summary(&f),
            vec![
                (Severity::Error, Some(0), Some(7)),
                (Severity::Error, Some(12), Some(30))
            ]
        );
        // First timestamp must be above -1.
        let f = check_time(&serialize_time_index(&[ts(-1, 0)]), 0, true, &gappy);
        assert!(f.iter().any(|f| f.position == Some(0)));
    }

    fn any_segment() -> impl Strategy<Value = Vec<BatchInfo>> {
        proptest::collection::vec((1u64..3000, 0i64..5, 0i64..3, -1i64..200), 0..60).prop_map(|raw| {
            let mut pos = 0;
            let mut next = 1000;
            raw.into_iter()
                .map(|(size, len, gap, t)| {
                    let base = next + gap;
                    let x = b(pos, size, base, base + len, t);
                    pos += size;
                    next = base + len + 1;
                    x
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn built_indexes_always_pass(batches in any_segment(), interval in 0u64..10_000, sealed in any::<bool>()) {
            let mut o = OffsetIndexBuilder::new(1000, interval);
            let mut t = TimeIndexBuilder::new(1000, interval);
            for x in &batches {
                o.push(x).expect("offset");
                t.push(x).expect("time");
            }
            if sealed {
                t.seal();
            }
            let oi = o.to_bytes();
            let ti = t.to_bytes();
            prop_assert_eq!(check_offset(&oi, 1000, !sealed, &batches), vec![]);
            prop_assert_eq!(check_time(&ti, 1000, !sealed, &batches), vec![]);
            prop_assert_eq!(serialize_offset_index(&OffsetIndex::parse(&oi).entries), oi);
        }

        #[test]
        fn entries_round_trip(raw in proptest::collection::vec((any::<i32>(), any::<i32>(), any::<i64>()), 0..50)) {
            let o: Vec<_> = raw.iter().map(|&(a, p, _)| off(a, p)).collect();
            let t: Vec<_> = raw.iter().map(|&(a, _, x)| ts(x, a)).collect();
            let ob = serialize_offset_index(&o);
            let tb = serialize_time_index(&t);
            let op = OffsetIndex::parse(&ob);
            let tp = TimeIndex::parse(&tb);
            // Trailing all-zero entries read back as the zero tail.
            let keep_o = o.len() - o.iter().rev().take_while(|e| **e == off(0, 0)).count();
            let keep_t = t.len() - t.iter().rev().take_while(|e| **e == ts(0, 0)).count();
            prop_assert_eq!(&op.entries[..], &o[..keep_o]);
            prop_assert_eq!(&tp.entries[..], &t[..keep_t]);
        }

        #[test]
        fn checkers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                                batches in any_segment(), base in prop_oneof![Just(0i64), Just(1000), Just(i64::MAX)],
                                newest in any::<bool>()) {
            let _ = OffsetIndex::parse(&bytes);
            let _ = TimeIndex::parse(&bytes);
            let _ = check_offset(&bytes, base, newest, &batches);
            let _ = check_time(&bytes, base, newest, &batches);
        }

        #[test]
        fn checkers_never_panic_on_plausible_entries(
            entries in proptest::collection::vec((0i32..200, 0i32..100_000, -2i64..300), 0..40),
            batches in any_segment())
        {
            let o: Vec<_> = entries.iter().map(|&(r, p, _)| off(r, p)).collect();
            let t: Vec<_> = entries.iter().map(|&(r, _, x)| ts(x, r)).collect();
            let _ = check_offset(&serialize_offset_index(&o), 1000, false, &batches);
            let _ = check_time(&serialize_time_index(&t), 1000, false, &batches);
        }
    }
}
