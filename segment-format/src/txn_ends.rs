//! How one segment leaves each transactional producer: its transaction open or closed after the segment's last
//! batch of that producer.
//!
//! Why: promotion must know which transactions are open at a partition's end (it aborts them, see
//! `segmirror_applier::promote`), and finding out by replaying [`TxnTracker`] over the batches from the newest
//! producer snapshot reads every batch header of the active segment, which a live broker's partition has no
//! snapshot inside: the promotion of a bucket-fed mirror grew with the size of its active segments. The install
//! already reads every batch of a version to check it; recording this summary beside the version (in the catalog,
//! with the version it describes) lets promotion fold a few short lists instead.
//!
//! The fold is exact for *which* producers are open: [`TxnTracker`] opens a producer's transaction on a
//! transactional data batch (when none is open) and closes it on a COMMIT or ABORT marker, so after any run of
//! batches a producer's status is decided by its last such batch in the run, or else by the status before the run.
//! [`TxnEnds::fold`] applies exactly that, segment after segment.
//!
//! Each producer left open also gets its trailing run ([`OpenRun`]): the data batches after its last marker in the
//! segment (all of its data batches there when it has none), with where the run starts, whether a marker of the
//! producer precedes it in the segment, and its tally (`TxnTally`: producer epoch, records, batches, bytes). Folded
//! over the segments ([`TxnEnds::fold_runs`]), the runs give each open transaction's first offset and tally as
//! the tracker holds them, which is all an abort marker needs: a transaction that spans segments adds up its runs,
//! and one begun after a marker (or where none was open) starts at its run. A summary written before runs were
//! kept has none, and the fold then does not know the open transactions' details (promotion walks).
//!
//! Each producer with a marker in the segment also gets its last one ([`ClosingRun`]): where it is, whether an
//! earlier marker of the producer precedes it there, and the batches of the transaction it closed that lie in the
//! segment. A consistent cut inside the segment whose first marker of a producer after the cut is that one takes
//! from it where the transaction across the cut began and what it held before the cut, instead of reading back from
//! the cut (D0057). A summary written before closings were kept has none (`closings` is `None`).
//!
//! Every marker of the segment, not only each producer's last, goes to the segment's log
//! (`crate::closed_log::SegmentClosing`, a file beside the mirror): [`TxnEndsBuilder::logging`] collects them, and
//! the summary records the log's entry count and CRC-32C (`log`), so that a reader uses the file only where it holds
//! those entries (D0060).
//!
//! Memory and size are bounded: a segment with more than [`MAX_PRODUCERS`] transactional producers records
//! nothing ([`TxnEndsBuilder::finish`] gives `None`), and promotion walks.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::Path;

use crate::batch::{BatchInfo, ControlType};
use crate::closed_log::{SegmentClosing, MAX_ENTRIES};
use crate::file_record::FileRecord;
use crate::log::LogFile;
use crate::txn_index::{TxnTally, TxnTracker};

/// The most transactional producers one segment's summary records (about 20 bytes each in the catalog).
pub const MAX_PRODUCERS: usize = 1024;

/// Per transactional producer of a segment, whether its last data batch or marker there left a transaction open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnEnds {
    /// Producers whose last event in the segment is a transactional data batch.
    pub open: BTreeSet<i64>,
    /// Producers whose last event in the segment is a COMMIT or ABORT marker.
    pub closed: BTreeSet<i64>,
    /// The trailing run of each producer in `open`; empty in a summary written before runs were kept.
    pub runs: BTreeMap<i64, OpenRun>,
    /// The last marker of each producer with one in the segment, open or closed at its end ([`ClosingRun`]);
    /// `None` in a summary written before these were kept.
    pub closings: Option<BTreeMap<i64, ClosingRun>>,
    /// The segment's log of every marker, as written beside the mirror (module docs); `None`: none was written.
    pub log: Option<FileRecord>,
}

/// A producer's last COMMIT or ABORT marker in a segment, with the data batches in the segment of the transaction it
/// closed: those after the producer's previous marker there, or from the segment's start without one.
///
/// Why: a consistent cut inside the segment, with this marker the first of the producer after the cut, learns from
/// it where the transaction across the cut began and what it held before the cut, without reading back from the cut
/// (`segmirror_applier::promote::recorded_txns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosingRun {
    pub marker_offset: i64,
    /// A marker of the producer precedes it in the segment: the transaction it closed began in the segment (or had
    /// no data).
    pub after_marker: bool,
    /// First offset and tally of the transaction's batches in the segment before the marker; `None`: none.
    pub data: Option<(i64, TxnTally)>,
}

/// A producer's data batches after its last marker in a segment (all of them, without a marker there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRun {
    /// Base offset of the run's first batch.
    pub first_offset: i64,
    /// A marker of the producer precedes the run in the segment: the run begins a transaction.
    pub after_marker: bool,
    pub tally: TxnTally,
}

/// An open transaction as [`TxnEnds::fold_runs`] follows it: first offset and tally, `None` when not known.
pub type OpenDetails = Option<(i64, TxnTally)>;

impl TxnEnds {
    /// Apply this segment to the producers open before it (`open`, changed in place): exactly what
    /// [`TxnTracker::on_batch`] over the segment's batches does to the set of producers with an open transaction.
    pub fn fold(&self, open: &mut BTreeSet<i64>) {
        open.retain(|p| !self.closed.contains(p));
        open.extend(self.open.iter().copied());
    }

    /// [`TxnEnds::fold`] with each open transaction's first offset and tally: a run after a marker, or of a producer
    /// not open before, begins a transaction; any other run adds to the one open. A producer whose run is not known
    /// (a summary without runs) is open with `None`.
    pub fn fold_runs(&self, open: &mut BTreeMap<i64, OpenDetails>) {
        open.retain(|p, _| !self.closed.contains(p));
        for p in &self.open {
            let run = self.runs.get(p);
            match (run, open.get_mut(p)) {
                (Some(run), Some(Some((_, tally)))) if !run.after_marker => tally.merge(&run.tally),
                (Some(run), Some(None)) if !run.after_marker => {}
                (Some(run), _) => {
                    open.insert(*p, Some((run.first_offset, run.tally)));
                }
                (None, _) => {
                    open.insert(*p, None);
                }
            }
        }
    }

    /// Text form, as the catalog stores it: `o:<entries>;c:<ids>`, ascending by producer id; an open entry is
    /// `<id>@<first offset>/<after marker: 0|1>/<epoch>/<records>/<batches>/<bytes>`, or `<id>` alone without a run.
    /// With closings, `;m:<entries>` follows, each `<id>@<marker offset>/<after marker: 0|1>` and, when the
    /// transaction had batches in the segment, `/<first offset>/<epoch>/<records>/<batches>/<bytes>`. With a log,
    /// `;l:<entries>/<CRC-32C>` ends it.
    pub fn encode(&self) -> String {
        let open: Vec<String> = self
            .open
            .iter()
            .map(|p| match self.runs.get(p) {
                Some(r) => format!(
                    "{p}@{}/{}/{}",
                    r.first_offset,
                    u8::from(r.after_marker),
                    tally_text(&r.tally)
                ),
                None => p.to_string(),
            })
            .collect();
        let closed: Vec<String> = self.closed.iter().map(i64::to_string).collect();
        let mut text = format!("o:{};c:{}", open.join(","), closed.join(","));
        if let Some(closings) = &self.closings {
            let each: Vec<String> = closings
                .iter()
                .map(|(p, c)| {
                    let after = u8::from(c.after_marker);
                    match c.data {
                        Some((first, t)) => format!("{p}@{}/{after}/{first}/{}", c.marker_offset, tally_text(&t)),
                        None => format!("{p}@{}/{after}", c.marker_offset),
                    }
                })
                .collect();
            text.push_str(";m:");
            text.push_str(&each.join(","));
        }
        if let Some(log) = self.log {
            text.push_str(&format!(";l:{}/{}", log.entries, log.crc32c));
        }
        text
    }

    /// The inverse of [`TxnEnds::encode`]; `None` for anything else (a producer in both lists, a negative id or
    /// offset, more than [`MAX_PRODUCERS`], runs for some open producers only): the caller then knows nothing, and
    /// walks.
    pub fn decode(text: &str) -> Option<TxnEnds> {
        let (text, log) = match text.rsplit_once(";l:") {
            Some((text, log)) => {
                let (entries, crc32c) = log.split_once('/')?;
                let log = FileRecord {
                    entries: entries.parse().ok().filter(|n| *n <= MAX_ENTRIES)?,
                    crc32c: crc32c.parse().ok()?,
                };
                (text, Some(log))
            }
            None => (text, None),
        };
        let (open, rest) = text.strip_prefix("o:")?.split_once(";c:")?;
        let (closed, closings) = match rest.split_once(";m:") {
            Some((closed, closings)) => (closed, Some(closings)),
            None => (rest, None),
        };
        let id = |s: &str| s.parse::<i64>().ok().filter(|id| *id >= 0);
        let items = |s: &str| -> Vec<String> {
            if s.is_empty() {
                Vec::new()
            } else {
                s.split(',').map(str::to_string).collect()
            }
        };
        let mut ends = TxnEnds::default();
        for entry in items(open) {
            match entry.split_once('@') {
                None => {
                    ends.open.insert(id(&entry)?);
                }
                Some((producer, run)) => {
                    let producer = id(producer)?;
                    let f: Vec<&str> = run.split('/').collect();
                    let [first, after, tally @ ..] = f.as_slice() else {
                        return None;
                    };
                    let run = OpenRun {
                        first_offset: first.parse::<i64>().ok().filter(|o| *o >= 0)?,
                        after_marker: match *after {
                            "0" => false,
                            "1" => true,
                            _ => return None,
                        },
                        tally: parse_tally(tally)?,
                    };
                    ends.open.insert(producer);
                    ends.runs.insert(producer, run);
                }
            }
        }
        for entry in items(closed) {
            ends.closed.insert(id(&entry)?);
        }
        if let Some(text) = closings {
            let mut closings = BTreeMap::new();
            for entry in items(text) {
                let (producer, run) = entry.split_once('@')?;
                let f: Vec<&str> = run.split('/').collect();
                let offset = |s: &str| s.parse::<i64>().ok().filter(|o| *o >= 0);
                let after_marker = match f.get(1).copied() {
                    Some("0") => false,
                    Some("1") => true,
                    _ => return None,
                };
                let data = match f.as_slice() {
                    [_, _] => None,
                    [_, _, first, tally @ ..] => Some((offset(first)?, parse_tally(tally)?)),
                    _ => return None,
                };
                let closing = ClosingRun {
                    marker_offset: offset(f.first()?)?,
                    after_marker,
                    data,
                };
                closings.insert(id(producer)?, closing);
            }
            ends.closings = Some(closings);
        }
        ends.log = log;
        let runs_all_or_none = ends.runs.is_empty() || ends.runs.len() == ends.open.len();
        // Every closed producer's last event is a marker, and only producers of the segment have one.
        let closings_fit = ends.closings.as_ref().is_none_or(|c| {
            ends.closed.iter().all(|p| c.contains_key(p))
                && c.keys().all(|p| ends.open.contains(p) || ends.closed.contains(p))
        });
        let fits = ends.open.len() + ends.closed.len() <= MAX_PRODUCERS
            && ends.open.is_disjoint(&ends.closed)
            && runs_all_or_none
            && closings_fit
            && (ends.log.is_none() || ends.closings.is_some());
        fits.then_some(ends)
    }

    /// The same summary without its runs (nor closings): what a summary written before runs were kept says.
    pub fn without_runs(&self) -> TxnEnds {
        TxnEnds {
            runs: BTreeMap::new(),
            closings: None,
            log: None,
            ..self.clone()
        }
    }

    /// The same summary without its closings (nor log): what a summary written before they were kept says.
    pub fn without_closings(&self) -> TxnEnds {
        TxnEnds {
            closings: None,
            log: None,
            ..self.clone()
        }
    }

    /// The same summary without its log's record: what the batches alone give.
    pub fn without_log(&self) -> TxnEnds {
        TxnEnds {
            log: None,
            ..self.clone()
        }
    }
}

/// A tally in the text form: `<epoch>/<records>/<batches>/<bytes>`.
fn tally_text(t: &TxnTally) -> String {
    format!("{}/{}/{}/{}", t.producer_epoch, t.records, t.batches, t.bytes)
}

/// The inverse of [`tally_text`], from its four fields; `None` for anything else.
fn parse_tally(fields: &[&str]) -> Option<TxnTally> {
    let [epoch, records, batches, bytes] = fields else {
        return None;
    };
    Some(TxnTally {
        producer_epoch: epoch.parse().ok()?,
        records: records.parse().ok()?,
        batches: batches.parse().ok()?,
        bytes: bytes.parse().ok()?,
    })
}

/// Builds a segment's [`TxnEnds`] from its batches, in offset order.
#[derive(Debug, Clone, Default)]
pub struct TxnEndsBuilder {
    /// Per producer: its trailing run when its last event is a data batch, `None` after a marker.
    last: BTreeMap<i64, Option<OpenRun>>,
    /// Per producer with a marker so far: its last one.
    closing: BTreeMap<i64, ClosingRun>,
    overflow: bool,
    /// With [`TxnEndsBuilder::logging`]: every marker's entry of the segment's log not yet taken.
    log: Option<Vec<SegmentClosing>>,
    /// Entries logged so far, taken or not (bounded by `closed_log::MAX_ENTRIES`).
    logged: u64,
}

impl TxnEndsBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A builder that also logs every marker for the segment's log ([`TxnEndsBuilder::take_log`]), up to
    /// `closed_log::MAX_ENTRIES` of them.
    pub fn logging() -> Self {
        TxnEndsBuilder {
            log: Some(Vec::new()),
            ..Self::default()
        }
    }

    /// The entries logged since the last call (none without [`TxnEndsBuilder::logging`]), in marker order.
    pub fn take_log(&mut self) -> Vec<SegmentClosing> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Feed the next batch (the rule of [`TxnTracker::on_batch`]: magic 2 and a producer id only; a transactional
    /// data batch leaves its producer open, a COMMIT or ABORT marker closed; anything else changes nothing).
    pub fn on_batch(&mut self, batch: &BatchInfo) {
        if batch.magic < 2 || batch.producer_id < 0 {
            return;
        }
        let data = if batch.is_control {
            match batch.control {
                Some(ControlType::Abort | ControlType::Commit) => false,
                _ => return,
            }
        } else if batch.is_transactional {
            true
        } else {
            return;
        };
        if self.overflow {
            return;
        }
        if !data {
            let run = self.last.get(&batch.producer_id).copied().flatten();
            let closing = ClosingRun {
                marker_offset: batch.base_offset,
                after_marker: self.closing.contains_key(&batch.producer_id),
                data: run.map(|r| (r.first_offset, r.tally)),
            };
            self.closing.insert(batch.producer_id, closing);
            if let Some(log) = self.log.as_mut().filter(|_| self.logged < MAX_ENTRIES) {
                log.push(SegmentClosing {
                    producer_id: batch.producer_id,
                    marker_offset: batch.base_offset,
                    whole: closing.after_marker,
                    data: closing.data,
                });
                self.logged += 1;
            }
        }
        let entry = self.last.get_mut(&batch.producer_id);
        match (data, entry) {
            (false, Some(last)) => *last = None,
            (false, None) => {
                self.last.insert(batch.producer_id, None);
            }
            (true, Some(Some(run))) => run.tally.add(batch),
            (true, found) => {
                // A marker of the producer before the run (`Some(None)`), or its first event here (`None`).
                let after_marker = found.is_some();
                let mut tally = TxnTally::default();
                tally.add(batch);
                self.last.insert(
                    batch.producer_id,
                    Some(OpenRun {
                        first_offset: batch.base_offset,
                        after_marker,
                        tally,
                    }),
                );
            }
        }
        if self.last.len() > MAX_PRODUCERS {
            self.overflow = true;
            self.last.clear();
            self.closing.clear();
        }
    }

    /// The summary, or `None` when the segment had more than [`MAX_PRODUCERS`] transactional producers.
    pub fn finish(&self) -> Option<TxnEnds> {
        if self.overflow {
            return None;
        }
        let mut ends = TxnEnds {
            closings: Some(self.closing.clone()),
            ..TxnEnds::default()
        };
        for (producer, last) in &self.last {
            match last {
                Some(run) => {
                    ends.open.insert(*producer);
                    ends.runs.insert(*producer, *run);
                }
                None => {
                    ends.closed.insert(*producer);
                }
            }
        }
        Some(ends)
    }
}

/// How the batches of the segment file `log` below offset `below` leave each transactional producer (`None`: more
/// than [`MAX_PRODUCERS`]): what an install records, derived again from the bytes (by `verify`, and by tests).
pub fn of_log(log: &Path, below: i64) -> Result<Option<TxnEnds>, crate::Error> {
    Ok(logged_of_log(log, below)?.0)
}

/// [`of_log`] with the segment's log of every marker ([`TxnEndsBuilder::logging`]).
pub fn logged_of_log(log: &Path, below: i64) -> Result<(Option<TxnEnds>, Vec<SegmentClosing>), crate::Error> {
    let mut ends = TxnEndsBuilder::logging();
    let mut file = LogFile::open(log)?;
    let len = file.len();
    file.scan_range(0, len, |frame| {
        if frame.info.base_offset >= below {
            return ControlFlow::Break(());
        }
        ends.on_batch(&frame.info);
        ControlFlow::Continue(())
    })?;
    Ok((ends.finish(), ends.take_log()))
}

/// The producers a [`TxnTracker`] holds open, as the set [`TxnEnds::fold`] works on.
pub fn open_producers(tracker: &TxnTracker) -> BTreeSet<i64> {
    tracker.open_transactions().map(|(producer, _)| producer).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{end_txn_marker_batch, EndTxnMarker};
    use crate::log::scan_frames;
    use crate::record::{BatchBuilder, RecordSpec};
    use proptest::prelude::*;

    /// One batch of a generated partition: a producer (0..4) and what it writes.
    #[derive(Debug, Clone, Copy)]
    enum Kind {
        Data,
        TxnData,
        Commit,
        Abort,
    }

    fn batch(offset: i64, producer: i64, kind: Kind) -> BatchInfo {
        let data = |transactional| {
            BatchBuilder::new(offset)
                .producer(producer, 0, 0)
                .transactional(transactional)
                .record(RecordSpec::new(0, 1).with_value(vec![1]))
                .build()
        };
        let marker = |control_type| {
            let marker = EndTxnMarker {
                control_type,
                coordinator_epoch: 0,
            };
            end_txn_marker_batch(offset, 1, 0, producer, 0, marker)
        };
        let bytes = match kind {
            Kind::Data => data(false),
            Kind::TxnData => data(true),
            Kind::Commit => marker(ControlType::Commit),
            Kind::Abort => marker(ControlType::Abort),
        };
        scan_frames(&bytes, 0).next().unwrap().unwrap().info
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Data),
            Just(Kind::TxnData),
            Just(Kind::Commit),
            Just(Kind::Abort)
        ]
    }

    proptest! {
        /// Folding each segment's summary over the producers open before the first gives the producers a tracker
        /// fed every batch holds open, wherever the segments are cut and whatever was open at the start.
        #[test]
        fn folded_summaries_agree_with_the_tracker(
            batches in prop::collection::vec((0i64..4, kind()), 0..60),
            cuts in prop::collection::btree_set(0usize..60, 0..5),
            initially_open in prop::collection::btree_set(0i64..6, 0..3),
        ) {
            let infos: Vec<BatchInfo> = batches
                .iter()
                .enumerate()
                .map(|(i, (producer, kind))| batch(i as i64, *producer, *kind))
                .collect();
            let mut tracker = TxnTracker::with_open_transactions(initially_open.iter().map(|p| (*p, -1 - *p)));
            // What each marker closed, by its offset.
            let mut closed_at = BTreeMap::new();
            for info in &infos {
                if let (_, Some(c)) = tracker.on_batch_closing(info) {
                    closed_at.insert(c.marker_offset, c);
                }
            }
            let mut open = initially_open.clone();
            // The details of transactions open at the start are not known (as a tracker started from them does not
            // tally them).
            let mut details: BTreeMap<i64, OpenDetails> = initially_open.iter().map(|p| (*p, None)).collect();
            let mut start = 0;
            for end in cuts.iter().copied().filter(|c| *c < infos.len()).chain([infos.len()]) {
                let mut builder = TxnEndsBuilder::logging();
                for info in infos.get(start..end).unwrap_or_default() {
                    builder.on_batch(info);
                }
                let mut ends = builder.finish().unwrap();
                let log = builder.take_log();
                prop_assert_eq!(TxnEnds::decode(&ends.encode()), Some(ends.clone()));
                let old = ends.without_runs();
                prop_assert_eq!(TxnEnds::decode(&old.encode()), Some(old.clone()));
                let bytes = crate::closed_log::serialize_segment(&log);
                prop_assert_eq!(&crate::closed_log::parse_segment(&bytes).unwrap(), &log);
                ends.log = Some(FileRecord::of(&bytes, log.len()));
                prop_assert_eq!(TxnEnds::decode(&ends.encode()), Some(ends.clone()));
                // The log holds every marker of the segment, in order, each producer's last one its closing.
                let markers: Vec<i64> = closed_at.range(start as i64..end as i64).map(|(o, _)| *o).collect();
                prop_assert_eq!(log.iter().map(|c| c.marker_offset).collect::<Vec<_>>(), markers);
                for (producer, closing) in ends.closings.as_ref().unwrap() {
                    let last = log.iter().rev().find(|c| c.producer_id == *producer).unwrap();
                    let closing = (closing.marker_offset, closing.after_marker, closing.data);
                    prop_assert_eq!((last.marker_offset, last.whole, last.data), closing);
                }
                // As the tail appender's seal writes it from the transactions its tracker saw close: every entry the
                // tracker's, whole.
                let seen: Vec<_> = closed_at.values().copied().collect();
                let converted = crate::closed_log::segment_closings_from(&seen, start as i64, end as i64);
                // Each marker in the segment closed the transaction the tracker saw it close: begun in the segment,
                // or open before it and continued there.
                for closing in log.iter().chain(&converted) {
                    let producer = &closing.producer_id;
                    let c = closed_at[&closing.marker_offset];
                    prop_assert_eq!(c.producer_id, *producer);
                    let before = if closing.whole { None } else { details.get(producer).copied() };
                    let derived = match (before, closing.data) {
                        (Some(None), _) => continue,
                        (Some(Some((first, mut tally))), data) => {
                            if let Some((_, t)) = data {
                                tally.merge(&t);
                            }
                            (Some(first), Some(tally))
                        }
                        (None, Some((first, tally))) => (Some(first), Some(tally)),
                        (None, None) => (None, None),
                    };
                    let at = closing.marker_offset;
                    prop_assert_eq!(derived, (c.first_offset, c.tally), "producer {} at {}", producer, at);
                }
                ends.fold(&mut open);
                ends.fold_runs(&mut details);
                start = end.max(start);
            }
            prop_assert_eq!(&open, &open_producers(&tracker));
            // First offsets and tallies as the tracker holds them, for every transaction it saw begin.
            let tracked: BTreeMap<i64, OpenDetails> = tracker
                .open_tallied()
                .map(|o| (o.producer_id, o.tally.map(|t| (o.first_offset, t))))
                .collect();
            prop_assert_eq!(details, tracked);
        }
    }

    #[test]
    fn too_many_producers_record_nothing_and_bad_text_decodes_to_nothing() {
        let mut builder = TxnEndsBuilder::new();
        for p in 0..=MAX_PRODUCERS as i64 {
            builder.on_batch(&batch(p, p, Kind::TxnData));
        }
        assert_eq!(builder.finish(), None);
        let mut few = TxnEndsBuilder::new();
        few.on_batch(&batch(0, 7, Kind::TxnData));
        few.on_batch(&batch(1, 3, Kind::TxnData));
        few.on_batch(&batch(2, 3, Kind::Commit));
        few.on_batch(&batch(3, 9, Kind::Data));
        let ends = few.finish().unwrap();
        assert_eq!(ends.without_runs().encode(), "o:7;c:3");
        let size = batch(0, 7, Kind::TxnData).size;
        assert_eq!(
            ends.encode(),
            format!("o:7@0/0/0/1/1/{size};c:3;m:3@2/0/1/0/1/1/{size}")
        );
        assert_eq!(TxnEnds::decode("o:;c:"), Some(TxnEnds::default()));
        assert_eq!(
            TxnEnds::decode(&ends.without_closings().encode()),
            Some(ends.without_closings())
        );
        for bad in [
            "",
            "o:1;c:1",
            "o:-1;c:",
            "o:x;c:",
            "c:;o:",
            "o:1,;c:",
            // Runs for some open producers only, a run of the wrong shape, a negative first offset.
            "o:1@0/0/0/1/1/70,2;c:",
            "o:1@0/2/0/1/1/70;c:",
            "o:1@0/0/0/1/1;c:",
            "o:1@-4/0/0/1/1/70;c:",
            // A closed producer without its closing, a closing of a producer not in the segment, ill-shaped ones.
            "o:;c:1;m:",
            "o:;c:;m:5@1/0",
            "o:;c:1;m:1@1/2",
            "o:;c:1;m:1@1/0/4/0/1",
            "o:;c:1;m:1@-1/0",
            // A log without closings, past the bound, of the wrong shape.
            "o:;c:;l:1/5",
            "o:;c:;m:;l:262145/5",
            "o:;c:;m:;l:1",
            "o:;c:;m:;l:1/x",
        ] {
            assert_eq!(TxnEnds::decode(bad), None, "{bad:?}");
        }
    }
}
