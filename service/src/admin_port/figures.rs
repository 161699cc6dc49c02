//! The figures `/metrics` shows, and the observers that keep the live ones.
//!
//! Two kinds of figure, kept where they are cheapest and most exact:
//! - **Live counters and positions** ([`LinkMeter`], [`ShipperMeter`], [`ApplierMeter`]): updated by the running
//!   loops as a side effect of what they do anyway (a link event, an item handed to the connection, chunks made
//!   durable). Atomics, or a `std` mutex held for a few field updates and never across I/O or an await, so the
//!   data path pays a hash lookup per item at most.
//! - **What the mirror's files say** (the applier's per-partition lag): read at scrape time, off the runtime, with
//!   exactly the code `segmirror status` runs (`segmirror_applier::direct::tail_lags`); the two cannot disagree, and the figures
//!   survive a restart of the applier because they come from the mirror's own records.
//!
//! A figure nobody knows is absent (`None`), never a made-up zero.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use segmirror_applier::direct::TailLag;
use segmirror_shipper::source::bound_hw::HighWatermarkSource;
use segmirror_transport::direct::payload::Chunk;
use segmirror_transport::direct::session::{FeedItem, SessionObserver};

use crate::bucket_ends::BucketEnds;

/// One link as `/metrics` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRow {
    pub name: String,
    /// The current state, one of `states`.
    pub state: &'static str,
    /// Every state this process's links can be in (one sample each, 1 for the current one).
    pub states: &'static [&'static str],
    pub connected: bool,
    pub partitions: usize,
    pub sessions: u64,
    pub errors: u64,
}

/// One partition as `/metrics` shows it; see the metric families in `exposition::FAMILIES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRow {
    pub link: String,
    pub topic: String,
    pub partition: i32,
    pub source_log_end: Option<i64>,
    pub high_watermark: Option<i64>,
    pub shipped: Option<i64>,
    pub installed: Option<i64>,
    pub lag_offsets: Option<i64>,
    pub lag_bytes: Option<u64>,
    pub lag_seconds: Option<u64>,
    pub shipped_bytes: Option<u64>,
    pub installed_bytes: Option<u64>,
    /// Rounds that ended in an error for this partition (the bucket paths, which report per partition).
    pub errors: Option<u64>,
}

impl PartitionRow {
    /// `caught_up` (nothing known missing), `behind`, or `unknown` (no lag known yet).
    pub fn state(&self) -> &'static str {
        match self.lag_offsets {
            Some(0) => "caught_up",
            Some(_) => "behind",
            None => "unknown",
        }
    }
}

/// Everything one scrape shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub links: Vec<LinkRow>,
    pub partitions: Vec<PartitionRow>,
}

/// A poisoned lock still holds figures that were whole when written (each update is a few plain stores): keep
/// serving them rather than fail every later scrape.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The link's life as the event logger sees it: connected or not, sessions started, errors; and paused by the
/// admin API.
#[derive(Debug, Default)]
pub struct LinkMeter {
    connected: AtomicBool,
    paused: AtomicBool,
    sessions: AtomicU64,
    errors: AtomicU64,
}

impl LinkMeter {
    pub fn session_started(&self) {
        self.connected.store(true, Ordering::Relaxed);
        self.sessions.fetch_add(1, Ordering::Relaxed);
    }

    /// A session ended; `error` when it ended by one.
    pub fn session_ended(&self, error: bool) {
        self.connected.store(false, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A connect that failed, a refusal by the peer.
    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    pub fn sessions(&self) -> u64 {
        self.sessions.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The link's row, with `state` given by the caller (the catalog's state on an applier).
    pub fn row(&self, name: &str, state: &'static str, states: &'static [&'static str], partitions: usize) -> LinkRow {
        LinkRow {
            name: name.to_string(),
            state,
            states,
            connected: self.connected(),
            partitions,
            sessions: self.sessions(),
            errors: self.errors(),
        }
    }
}

/// The offset after the last batch of `bytes` (whole batches, as a chunk carries) and nothing else: walks the
/// batch headers only (base offset, length, last offset delta of magic 2; a legacy entry's offset is its last).
/// `None` when the bytes hold no whole batch header.
pub fn end_offset_of(bytes: &[u8]) -> Option<i64> {
    const LOG_OVERHEAD: usize = 12;
    let mut at = 0usize;
    let mut end = None;
    while bytes.len() >= at + LOG_OVERHEAD + 5 {
        let base = i64::from_be_bytes(bytes[at..at + 8].try_into().ok()?);
        let length = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().ok()?);
        let magic = bytes[at + 16];
        if length <= 0 {
            break;
        }
        let last = if magic >= 2 {
            let delta = bytes.get(at + 23..at + 27)?;
            base.checked_add(i64::from(i32::from_be_bytes(delta.try_into().ok()?)))?
        } else {
            base
        };
        end = Some(last.checked_add(1)?);
        at = at.checked_add(LOG_OVERHEAD + length as usize)?;
    }
    end
}

/// What the shipper knows of one partition.
#[derive(Debug, Default, Clone)]
struct ShipperPart {
    log_end: Option<i64>,
    high_watermark: Option<i64>,
    active_segment: Option<(i64, u64)>,
    shipped_end: Option<i64>,
    /// (segment base, byte position) handed to the link.
    shipped_at: Option<(i64, u64)>,
    shipped_bytes: u64,
    /// Since when the source has held a record not shipped (as this process saw it).
    behind_since: Option<Instant>,
}

impl ShipperPart {
    fn source_end(&self) -> Option<i64> {
        match (self.log_end, self.high_watermark) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    fn lag_offsets(&self) -> Option<i64> {
        Some((self.source_end()? - self.shipped_end.unwrap_or(0)).max(0))
    }

    fn note_lag(&mut self, now: Instant) {
        match self.lag_offsets() {
            Some(lag) if lag > 0 => {
                self.behind_since.get_or_insert(now);
            }
            Some(_) => self.behind_since = None,
            None => {}
        }
    }
}

/// The shipper's per-partition figures, kept by the session ([`SessionObserver::sent`]) and completed at scrape
/// time with the high watermark source's latest answer, which moves while no session runs (an applier stopped):
/// that is how the shipper's lag keeps rising while nothing is shipped.
#[derive(Debug)]
pub struct ShipperMeter {
    link: String,
    parts: Mutex<BTreeMap<(String, i32), ShipperPart>>,
}

impl ShipperMeter {
    /// A meter for `link`, knowing `partitions` from the start.
    pub fn new(link: &str, partitions: impl IntoIterator<Item = (String, i32)>) -> ShipperMeter {
        ShipperMeter {
            link: link.to_string(),
            parts: Mutex::new(partitions.into_iter().map(|k| (k, ShipperPart::default())).collect()),
        }
    }

    /// The rows now; asks `high_watermarks` for each partition (call off the runtime: a source may read files).
    pub fn rows(&self, high_watermarks: Option<&dyn HighWatermarkSource>) -> Vec<PartitionRow> {
        let keys: Vec<(String, i32)> = lock(&self.parts).keys().cloned().collect();
        // Asked without the lock: a source may block on I/O.
        let hws: Vec<Option<i64>> = keys
            .iter()
            .map(|(t, p)| high_watermarks.and_then(|s| s.high_watermark(t, *p)).map(|h| h.offset))
            .collect();
        let now = Instant::now();
        let mut parts = lock(&self.parts);
        keys.into_iter()
            .zip(hws)
            .filter_map(|(key, hw)| {
                let part = parts.get_mut(&key)?;
                if hw.is_some() {
                    part.high_watermark = hw.max(part.high_watermark);
                }
                part.note_lag(now);
                let lag_offsets = part.lag_offsets();
                let lag_bytes = match (part.active_segment, part.shipped_at) {
                    (Some((base, size)), Some((at_base, at))) if base == at_base => Some(size.saturating_sub(at)),
                    _ if lag_offsets == Some(0) => Some(0),
                    _ => None,
                };
                Some(PartitionRow {
                    link: self.link.clone(),
                    topic: key.0,
                    partition: key.1,
                    source_log_end: part.log_end,
                    high_watermark: part.high_watermark,
                    shipped: part.shipped_end,
                    installed: None,
                    lag_offsets,
                    lag_bytes,
                    lag_seconds: lag_offsets.map(|_| part.behind_since.map_or(0, |t| now.duration_since(t).as_secs())),
                    shipped_bytes: Some(part.shipped_bytes),
                    installed_bytes: None,
                    errors: None,
                })
            })
            .collect()
    }

    pub fn partitions(&self) -> usize {
        lock(&self.parts).len()
    }
}

impl SessionObserver for ShipperMeter {
    fn sent(&self, item: &FeedItem) {
        let p = item.partition();
        let now = Instant::now();
        let mut parts = lock(&self.parts);
        let part = parts.entry((p.topic.clone(), p.partition)).or_default();
        match item {
            FeedItem::Chunk(c) => {
                part.shipped_bytes += c.bytes.len() as u64;
                part.shipped_at = Some((c.segment_base, c.position + c.bytes.len() as u64));
                if let Some(end) = end_offset_of(&c.bytes) {
                    part.shipped_end = Some(end);
                }
            }
            FeedItem::Progress(r) => {
                part.log_end = Some(r.log_end_offset);
                part.high_watermark = r.high_watermark.or(part.high_watermark);
                part.active_segment = Some((r.active_segment_base, r.active_segment_size));
                // The feed's own position (as of the report): covers a session that had nothing to send.
                if let Some(s) = r.shipped {
                    if part.shipped_end.is_none_or(|e| e < s.end_offset) {
                        part.shipped_end = Some(s.end_offset);
                        part.shipped_at = Some((s.segment_base, s.position));
                    }
                }
            }
            FeedItem::Truncate(t) => {
                part.shipped_end = Some(t.truncate_to);
                part.shipped_at = Some((t.segment_base, t.position));
            }
            _ => {}
        }
        part.note_lag(now);
    }
}

/// The applier's live counters: bytes made durable per partition.
#[derive(Debug, Default)]
pub struct ApplierMeter {
    installed_bytes: Mutex<BTreeMap<(String, i32), u64>>,
}

impl ApplierMeter {
    /// Bytes this process installed into `topic`-`partition`.
    pub fn installed_bytes(&self, topic: &str, partition: i32) -> u64 {
        lock(&self.installed_bytes)
            .get(&(topic.to_string(), partition))
            .copied()
            .unwrap_or(0)
    }
}

impl SessionObserver for ApplierMeter {
    fn applied(&self, chunks: &[Chunk]) {
        let mut bytes = lock(&self.installed_bytes);
        for c in chunks {
            *bytes
                .entry((c.partition.topic.clone(), c.partition.partition))
                .or_default() += c.bytes.len() as u64;
        }
    }
}

/// The applier's rows: the mirror's own figures (`status`'s tail lag) with this process's counters.
pub fn applier_rows(link: &str, lags: &[TailLag], meter: &ApplierMeter) -> Vec<PartitionRow> {
    lags.iter()
        .map(|l| PartitionRow {
            link: link.to_string(),
            topic: l.topic.clone(),
            partition: l.partition,
            source_log_end: l.source_log_end_offset,
            high_watermark: l.source_high_watermark,
            shipped: l.shipped_end_offset,
            installed: l.installed_end_offset,
            lag_offsets: l.lag_offsets,
            lag_bytes: l.lag_bytes,
            lag_seconds: l.lag_seconds,
            shipped_bytes: None,
            installed_bytes: Some(meter.installed_bytes(&l.topic, l.partition)),
            errors: None,
        })
        .collect()
}

/// What a bucket round (`ship --store`, `apply --follow`) did to one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundOutcome {
    /// The offset after the last record shipped (committed to the bucket) or installed, when known.
    pub through: Option<i64>,
    /// Bytes uploaded or installed by the round.
    pub bytes: u64,
    /// The round ended in a refusal or a failure for the partition.
    pub failed: bool,
}

/// A partition's totals over the rounds: the furthest offset, bytes, errors.
type RoundTotals = (Option<i64>, u64, u64);

/// The bucket paths' per-partition figures, kept from each round's report (the loops' own callback): the offset
/// reached, bytes moved and errors. Their source end is not known to them, so no lag is shown.
#[derive(Debug)]
pub struct RoundMeter {
    /// The link's name; an `apply --follow` without `--link` learns it from the first report.
    link: Mutex<String>,
    /// `true`: a shipper (`shipped` figures); `false`: an applier (`installed`).
    shipper: bool,
    parts: Mutex<BTreeMap<(String, i32), RoundTotals>>,
}

impl RoundMeter {
    pub fn new(link: &str, shipper: bool) -> RoundMeter {
        RoundMeter {
            link: Mutex::new(link.to_string()),
            shipper,
            parts: Mutex::default(),
        }
    }

    /// Notes one round's outcome for `topic`-`partition`.
    pub fn round(&self, topic: &str, partition: i32, outcome: RoundOutcome) {
        let mut parts = lock(&self.parts);
        let (through, bytes, errors) = parts.entry((topic.to_string(), partition)).or_default();
        if outcome.through.is_some() {
            *through = outcome.through.max(*through);
        }
        *bytes += outcome.bytes;
        *errors += u64::from(outcome.failed);
    }

    pub fn partitions(&self) -> usize {
        lock(&self.parts).len()
    }

    pub fn set_link(&self, link: &str) {
        *lock(&self.link) = link.to_string();
    }

    pub fn link(&self) -> String {
        lock(&self.link).clone()
    }

    pub fn rows(&self) -> Vec<PartitionRow> {
        let link = self.link();
        lock(&self.parts)
            .iter()
            .map(|((topic, partition), (through, bytes, errors))| PartitionRow {
                link: link.clone(),
                topic: topic.clone(),
                partition: *partition,
                source_log_end: None,
                high_watermark: None,
                shipped: if self.shipper { *through } else { None },
                installed: if self.shipper { None } else { *through },
                lag_offsets: None,
                lag_bytes: None,
                lag_seconds: None,
                shipped_bytes: self.shipper.then_some(*bytes),
                installed_bytes: (!self.shipper).then_some(*bytes),
                errors: Some(*errors),
            })
            .collect()
    }
}

/// A bucket follower's lag (`apply --store URL --follow`): per partition of `ends` (the bucket's newest versions,
/// `crate::bucket_ends`), `shipped` is the newest version's end, the lag in offsets is that minus the installed end,
/// and the lag in seconds counts from the newest version's upload (0 when caught up). Bytes are not known from a
/// manifest's end alone: absent. A partition the bucket holds and this process has no row for yet gets one.
pub fn add_bucket_lag(link: &str, rows: &mut Vec<PartitionRow>, ends: &BucketEnds, now_ms: i64) {
    for ((topic, partition), newest) in ends {
        let at = match rows.iter().position(|r| &r.topic == topic && r.partition == *partition) {
            Some(at) => at,
            None => {
                rows.push(PartitionRow {
                    link: link.to_string(),
                    topic: topic.clone(),
                    partition: *partition,
                    source_log_end: None,
                    high_watermark: None,
                    shipped: None,
                    installed: None,
                    lag_offsets: None,
                    lag_bytes: None,
                    lag_seconds: None,
                    shipped_bytes: None,
                    installed_bytes: None,
                    errors: None,
                });
                rows.len() - 1
            }
        };
        let row = &mut rows[at];
        let (lag, seconds) = newest.lag(row.installed, now_ms);
        row.shipped = Some(newest.end_offset);
        row.lag_offsets = Some(lag);
        row.lag_seconds = Some(seconds);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use segmirror_transport::direct::payload::{PartitionRef, Shipped, SourceProgress};

    use super::*;

    /// A magic-2 batch header (61 bytes) followed by `records` bytes of body.
    fn batch(base: i64, last_delta: i32, body: usize) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&base.to_be_bytes());
        b.extend_from_slice(&((49 + body) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
        b.push(2); // magic
        b.extend_from_slice(&[0; 4]); // crc
        b.extend_from_slice(&[0; 2]); // attributes
        b.extend_from_slice(&last_delta.to_be_bytes());
        b.resize(61 + body, 0);
        b
    }

    fn pref() -> PartitionRef {
        PartitionRef {
            topic: "orders".into(),
            partition: 0,
            topic_id: Default::default(),
        }
    }

    #[test]
    fn the_end_offset_of_a_chunk_is_after_its_last_batch() {
        let mut bytes = batch(100, 4, 10);
        bytes.extend(batch(105, 0, 3));
        assert_eq!(end_offset_of(&bytes), Some(106));
        assert_eq!(end_offset_of(&batch(7, 2, 0)), Some(10));
        assert_eq!(end_offset_of(&[]), None);
        assert_eq!(end_offset_of(&bytes[..20]), None, "a cut header says nothing");
    }

    #[test]
    fn the_shipper_lag_follows_chunks_reports_and_the_high_watermark() {
        let meter = ShipperMeter::new("dr", [("orders".to_string(), 0)]);
        let rows = meter.rows(None);
        assert_eq!(rows[0].lag_offsets, None, "nothing known yet");
        meter.sent(&FeedItem::Progress(SourceProgress {
            partition: pref(),
            log_end_offset: 110,
            high_watermark: Some(110),
            active_segment_base: 0,
            active_segment_size: 5000,
            shipper_time_ms: 0,
            shipped: Some(Shipped {
                segment_base: 0,
                position: 0,
                end_offset: 0,
            }),
        }));
        let row = &meter.rows(None)[0];
        assert_eq!(
            (row.lag_offsets, row.lag_bytes, row.state()),
            (Some(110), Some(5000), "behind")
        );
        let mut bytes = batch(0, 99, 100);
        bytes.extend(batch(100, 9, 10));
        let sent = bytes.len() as u64;
        meter.sent(&FeedItem::Chunk(Chunk {
            partition: pref(),
            segment_base: 0,
            position: 0,
            bytes: Bytes::from(bytes),
            crcs: Default::default(),
        }));
        let row = &meter.rows(None)[0];
        assert_eq!(
            (row.shipped, row.lag_offsets, row.shipped_bytes, row.state()),
            (Some(110), Some(0), Some(sent), "caught_up")
        );
        assert_eq!(row.lag_seconds, Some(0));
    }

    #[test]
    fn the_applier_counts_bytes_per_partition() {
        let meter = ApplierMeter::default();
        let chunk = |n: usize| Chunk {
            partition: pref(),
            segment_base: 0,
            position: 0,
            bytes: Bytes::from(vec![0u8; n]),
            crcs: Default::default(),
        };
        meter.applied(&[chunk(10), chunk(5)]);
        meter.applied(&[chunk(1)]);
        assert_eq!(meter.installed_bytes("orders", 0), 16);
        assert_eq!(meter.installed_bytes("orders", 1), 0);
    }

    #[test]
    fn a_round_meter_keeps_the_furthest_offset_and_sums_bytes_and_errors() {
        let m = RoundMeter::new("dr", false);
        let ok = |through, bytes| RoundOutcome {
            through,
            bytes,
            failed: false,
        };
        m.round("orders", 1, ok(Some(50), 100));
        m.round("orders", 1, ok(None, 0));
        m.round(
            "orders",
            1,
            RoundOutcome {
                through: None,
                bytes: 0,
                failed: true,
            },
        );
        m.round("orders", 1, ok(Some(80), 20));
        let rows = m.rows();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            (r.installed, r.installed_bytes, r.errors, r.shipped, r.shipped_bytes),
            (Some(80), Some(120), Some(1), None, None)
        );
        assert_eq!(r.state(), "unknown", "no lag without the source's end");
    }

    #[test]
    fn a_bucket_follower_s_lag_rises_while_versions_wait_and_is_zero_once_installed() {
        use crate::bucket_ends::Newest;
        let meter = RoundMeter::new("east", false);
        let through = |through| RoundOutcome {
            through: Some(through),
            bytes: 0,
            failed: false,
        };
        meter.round("orders", 0, through(30));
        let mut ends = BucketEnds::new();
        let newest = |end_offset, uploaded_at_ms| Newest {
            end_offset,
            uploaded_at_ms,
        };
        ends.insert(("orders".into(), 0), newest(30, 1_000));
        let lag = |ends: &BucketEnds, now_ms| {
            let mut rows = meter.rows();
            add_bucket_lag("east", &mut rows, ends, now_ms);
            rows.iter()
                .map(|r| {
                    (
                        r.topic.clone(),
                        r.partition,
                        r.shipped,
                        r.installed,
                        r.lag_offsets,
                        r.lag_seconds,
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lag(&ends, 9_000),
            [("orders".into(), 0, Some(30), Some(30), Some(0), Some(0))],
            "caught up"
        );
        // Two versions wait in the bucket, one of a partition not installed at all; the lag grows with time.
        ends.insert(("orders".into(), 0), newest(60, 10_000));
        ends.insert(("orders".into(), 1), newest(5, 11_000));
        assert_eq!(
            lag(&ends, 14_500),
            [
                ("orders".into(), 0, Some(60), Some(30), Some(30), Some(4)),
                ("orders".into(), 1, Some(5), None, Some(5), Some(3)),
            ]
        );
        assert_eq!(lag(&ends, 20_000)[0].5, Some(10), "rises while the version waits");
        meter.round("orders", 0, through(60));
        meter.round("orders", 1, through(5));
        assert!(
            lag(&ends, 30_000).iter().all(|r| r.4 == Some(0) && r.5 == Some(0)),
            "installed: zero"
        );
    }

    #[test]
    fn link_meter_counts_sessions_and_errors() {
        let m = LinkMeter::default();
        m.session_started();
        assert!(m.connected());
        m.session_ended(true);
        m.error();
        let row = m.row("dr", "active", &["active", "paused"], 3);
        assert_eq!(
            (row.connected, row.sessions, row.errors, row.partitions),
            (false, 1, 2, 3)
        );
    }
}
