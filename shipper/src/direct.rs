//! The tail feed: what a direct-transport [`ShipperSession`] sends, read from
//! one log dir's partitions as the broker appends to them.
//!
//! Per partition the feed holds a [`TailPosition`] and continues it with
//! [`read_tail`](crate::source::read_tail): each non-empty read becomes a [`FeedItem::Chunk`] of exactly
//! those bytes, so a segment's chunks are contiguous, end on batch boundaries
//! and every byte is shipped once. When the segment is sealed (the listing
//! shows a newer segment and the tail is at the file's end) the feed sends a
//! [`FeedItem::Seal`]: the final size, the SHA-256 of the `.log` and its
//! companions; then it continues at the next segment's byte 0.
//!
//! What a seal checks: the tripwire of [`read_tail`](crate::source::read_tail) only looks at the last batch, so a
//! rewrite deeper in the prefix would go unnoticed by it. A segment this process shipped from byte 0 seals from its running digest
//! ([`running`]: the SHA-256 and default indexes of the very bytes shipped, taken only while the file has the
//! inode, size and modification time the last chunk left it with); any other (resumed mid-segment, changed since)
//! is read once whole, computing its CRC-32C, which must equal [`TailPosition::prefix_crc32c`] (the CRCs of the
//! chunks shipped, combined); otherwise the feed fails with [`Error::Diverged`] and never seals bytes that are not
//! the ones shipped.
//!
//! The listing is taken *before* the tail read, so "sealed" is known about a
//! file whose end the read then saw: no append can slip in between.
//!
//! [`ChunkFeed::seek`] positions every partition at the applier's durable
//! position by scanning the segment from byte 0 to it (chunk limit: the
//! distance left), which proves the position a batch boundary and rebuilds the
//! prefix CRC the seal check needs. One pass per partition per session start,
//! the price of having no memory of the previous session (the session's
//! module doc explains why resuming only from the applier's position).
//!
//! A sealed segment whose file ends inside a batch (bytes after the last
//! whole batch, not held back by the bound) is not sealed: the feed keeps
//! waiting on it, since with `preallocate=true` a zero tail may be trimmed
//! only after the next segment appears. The partition then makes no progress
//! (reported by status, not yet by an error).
//!
//! Rounds: [`ChunkFeed::next`] goes round the partitions from where it last stopped, stepping each until one
//! yields an item, and waits for news when a round yields none. A round steps only the partitions that may have
//! changed ([`wake`]: named by the log-dir watcher, active, a high watermark moved, asked for again, or swept),
//! so a feed at rest costs nothing per partition; without a watcher it steps them all.
//!
//! Cancel safety: [`ChunkFeed::next`] computes a partition's next step on a
//! blocking thread from a copy of its state and commits the new state only
//! when the step returns, in the same poll; a future dropped earlier leaves
//! the state as it was and the step is simply done again.
//!
//! [`ShipperSession`]: segmirror_transport::direct::session::ShipperSession

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::direct::frame::MAX_PAYLOAD_LEN;
use segmirror_transport::direct::payload::{ClaimResult, LayoutSegment, LogEnd, PartitionRef, Position, Revoke};
use segmirror_transport::direct::session::{ChunkFeed, FeedItem, Layouts};
use segmirror_transport::direct::DirectError;

use crate::error::{Error, Result};
use crate::source::bound_hw::{bound, HighWatermarkSource, UptoPolicy};
use crate::source::growing::{TailOptions, TailPosition};
use crate::source::leadership::LeadershipSource;

/// How long [`ChunkFeed::next`] waits at most when no partition has anything
/// new (100 ms): an idle feed costs a few listings a second. It waits less when
/// told of news: the log-dir watcher's events (an append is seen within the
/// watcher's 20 ms coalescing tick), the high watermarks moving (a
/// `ListOffsets` bound is followed as soon as it moves), or an Ack releasing a
/// held partition (the session drops the wait). The poll is the safety net for
/// lost notifications and the bound of the checkpoint high watermark.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Most bytes in one chunk (4 MiB, or one batch if larger): well under the
/// frame limit, and small enough that a credit window holds several.
pub const MAX_FEED_CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// Most chunks and seals of one partition sent and not yet acknowledged (2; see
/// [`ChunkFeed::max_unacked_per_partition`]): one being made durable by the applier while the next is on the
/// wire, so a partition catching up keeps both sides busy; whatever the broker appends meanwhile waits in the
/// source file and goes as one chunk when an Ack releases the partition. More would only queue small chunks
/// (each waits for all before it: the latency a credit window of small chunks had, p99 1.5-2 s at 10k records/s),
/// one would leave the applier idle for a round trip and a read per chunk.
pub const MAX_UNACKED_PER_PARTITION: usize = 2;

/// Largest companion sent inline in a seal: a seal is one frame, so nothing larger than a frame's payload could
/// travel; a larger file is refused by its size, naming it, before it is read.
const MAX_INLINE_COMPANION_BYTES: u64 = MAX_PAYLOAD_LEN as u64;

/// Largest offset or time index a replacement (or a seal whose indexes no `index.interval.bytes` rebuilds) carries
/// inline (1 MiB: well within a frame and the default credit window). Why inline at all: the broker's cleaner writes a cleaned segment's indexes as it appends, which need not
/// be what the applier's rebuild makes of the same log, and a rebuild that does not match the digest would refuse
/// the replacement again at every try. A larger index travels as a digest and the rebuild must match it.
pub const MAX_INLINE_REPLACEMENT_INDEX_BYTES: u64 = 1024 * 1024;

/// One partition the feed ships.
#[derive(Debug, Clone)]
pub struct TailPartition {
    pub partition: PartitionRef,
    /// The partition directory in the source log dir.
    pub dir: PathBuf,
}

/// How the feed reads.
#[derive(Clone)]
pub struct TailFeedConfig {
    /// How far to ship: the high watermark by default.
    pub upto: UptoPolicy,
    /// Where high watermarks come from (used with [`UptoPolicy::HighWatermark`]).
    pub high_watermarks: Arc<dyn HighWatermarkSource>,
    /// [`MAX_FEED_CHUNK_BYTES`].
    pub max_chunk_bytes: u64,
    /// [`POLL_INTERVAL`].
    pub poll_interval: Duration,
    /// How often at most a partition's [`SourceProgress`](segmirror_transport::direct::SourceProgress) goes out
    /// (`segmirror ship` uses [`PROGRESS_INTERVAL`](segmirror_transport::direct::handshake::PROGRESS_INTERVAL));
    /// `None`, the library default: never, so a feed yields exactly its chunks, seals and retention items.
    pub progress_interval: Option<Duration>,
    /// [`MAX_UNACKED_PER_PARTITION`]; `None`: only the session's credit window bounds what is in flight.
    pub max_unacked_per_partition: Option<usize>,
    /// With a source of several brokers (`segmirror ship --cluster`): ship only the partitions this broker leads
    /// ([`LeadershipSource`]); a partition whose leadership is lost is not read from the next step on (what is in
    /// flight may still be acknowledged: the applier's fencing by leader epoch is the guarantee, this the
    /// courtesy). `None`, the default: a single-broker source, every selected partition ships.
    pub leadership: Option<Arc<dyn LeadershipSource>>,
}

impl TailFeedConfig {
    pub fn new(high_watermarks: Arc<dyn HighWatermarkSource>) -> Self {
        TailFeedConfig {
            upto: UptoPolicy::default(),
            high_watermarks,
            max_chunk_bytes: MAX_FEED_CHUNK_BYTES,
            poll_interval: POLL_INTERVAL,
            progress_interval: None,
            max_unacked_per_partition: Some(MAX_UNACKED_PER_PARTITION),
            leadership: None,
        }
    }
}

/// What a seek does with a Resume position it cannot prove ([`Error::ResumeInvalid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unprovable {
    /// The seek fails with it (callers that position a feed themselves, tests).
    Fail,
    /// The partition is refused for the session and the others are positioned (a session's Resume: the
    /// positions are the peer's values; see `TailFeed::refuse_resume`).
    RefusePartition,
}

/// Where one partition's tail stands.
#[derive(Debug, Clone)]
struct PartState {
    target: TailPartition,
    /// `None`: not started (the partition had no segment yet).
    at: Option<TailPosition>,
    /// The log start sent and seen ([`log_start`]).
    log_start: log_start::Track,
    /// The versions of the sealed segments this process shipped ([`replace`]).
    sealed: BTreeMap<i64, replace::Fingerprint>,
    /// A replacement being sent.
    replacing: Option<replace::Replacing>,
    /// The mirror's unsealed segment a cleaner merged into a sealed source segment ([`resume`]): the tail waits
    /// until the replacement covering it is sent, since the applier takes the next segment only after it.
    awaits: Option<i64>,
    /// The source progress last reported ([`progress`]).
    progress: progress::Track,
    /// A Truncate to send before anything else of the partition ([`diverge`]).
    truncate: Option<segmirror_transport::direct::payload::Truncate>,
    /// The source lost committed data (a divergence in high-watermark mode), or the applier's Resume position of it
    /// was refused for the session ([`TailFeed::refuse_resume`]): nothing more of it ships.
    stopped: bool,
    /// With a source of several brokers: where the partition stands with the applier ([`cluster`]).
    claim: cluster::ClaimState,
    /// With a source of several brokers: the mirror's segment continued from this replica's segment in another
    /// layout, until that segment ends ([`layout`]).
    translate: Option<layout::Translation>,
    /// The SHA-256 and default indexes of the segment being shipped, so far ([`running`]); never copied.
    running: running::RunningSlot,
    /// When rounds step it ([`wake`]).
    wake: wake::Wake,
    /// Seals made from the running digest (tests check which path a seal took).
    #[cfg(test)]
    running_seals: u64,
}

impl PartState {
    /// A partition at `at` with nothing of it shipped by this process yet.
    fn new(target: TailPartition, at: Option<TailPosition>) -> PartState {
        PartState {
            target,
            at,
            log_start: log_start::Track::default(),
            sealed: BTreeMap::new(),
            replacing: None,
            awaits: None,
            progress: progress::Track::default(),
            truncate: None,
            stopped: false,
            claim: cluster::ClaimState::default(),
            translate: None,
            running: running::RunningSlot::default(),
            wake: wake::Wake::default(),
            #[cfg(test)]
            running_seals: 0,
        }
    }
}

/// A [`ChunkFeed`] over one log dir's selected partitions (see the module doc).
pub struct TailFeed {
    parts: Vec<PartState>,
    config: TailFeedConfig,
    /// The partition polled first by the next [`ChunkFeed::next`] (round robin).
    cursor: usize,
    /// Partitions appearing and going while running ([`TailFeed::with_rediscovery`]); `None`: a fixed set.
    rediscoverer: Option<rediscover::Rediscoverer>,
    /// Moves when a high watermark moves (the source's [`HighWatermarkSource::changes`], with the high-watermark
    /// bound); taken at the first [`TailFeed::next_item`].
    hw_changes: Option<tokio::sync::watch::Receiver<u64>>,
    /// Partitions the session holds ([`ChunkFeed::hold`]): not read until released, so their new bytes gather in
    /// the source file and go as one chunk.
    held: HashSet<PartitionRef>,
    /// The applier's MirrorLayout for the next seek ([`ChunkFeed::mirror_layout`]); `None`: not agreed.
    layout: Option<HashMap<PartitionRef, Vec<LayoutSegment>>>,
    /// Moves when the partitions this broker leads change ([`LeadershipSource::changes`]); taken at the first
    /// [`TailFeed::next_item`].
    leadership_changes: Option<tokio::sync::watch::Receiver<u64>>,
    /// The session agreed `FEATURE_TRUNCATE` ([`ChunkFeed::log_ends`]): a divergence seen while streaming ends the
    /// session (the next Resume tells where the mirror ends) instead of stopping the feed.
    truncation: bool,
    /// The mirror's end per Resume position, for the epoch comparison of the next [`ChunkFeed::seek`] ([`diverge`]).
    log_ends: Vec<(Position, LogEnd)>,
    /// The partition step running on the blocking pool, if any ([`InFlightStep`]).
    step: Option<InFlightStep>,
    /// Counts [`TailFeed::seek_positions`]: a step started before the latest seek is stale.
    generation: u64,
    /// The partitions whose Resume position the latest seek refused, with why ([`TailFeed::refuse_resume`]).
    refused: HashMap<PartitionRef, String>,
    /// Partition directories the log-dir watcher named since their last step ([`wake`]).
    touched: HashSet<PathBuf>,
    /// Log dirs whose `log-start-offset-checkpoint` changed, not yet read ([`TailFeed::log_starts_changed`]).
    log_starts_changed: HashSet<PathBuf>,
    /// Each log dir's `log-start-offset-checkpoint` entries as last read: which partitions' entries a change moved.
    log_start_entries: HashMap<PathBuf, HashMap<(String, i32), i64>>,
    /// Counts the high watermarks' moves ([`HighWatermarkSource::changes`], in every mode): while it stands, a
    /// partition's high watermark need not be looked up again ([`wake`]).
    hw_version: Option<tokio::sync::watch::Receiver<u64>>,
    /// How many steps were started (tests check that a dropped `next` does not start another).
    #[cfg(test)]
    steps_started: u64,
}

/// What a partition step returns: its new state and the item it yielded, or (inner `Err`) the error of a partition
/// whose directory was deleted under it.
type Stepped = std::result::Result<(PartState, Option<FeedItem>), Error>;

/// A partition step on the blocking pool, kept across a dropped `next` future and awaited again by the next call.
/// Why: the session drops `next` whenever a frame (an Ack, a heartbeat) arrives, and a step cannot be stopped once it
/// runs; a feed that started a new one each time ran the same seal (a whole-segment hash and index rebuild, seconds
/// for a 1 GiB segment) many times at once when acks came faster than a seal finished: blocking threads and memory
/// without bound (GiBs), and a shutdown that waited for all of them. Now at most one step runs at a time.
struct InFlightStep {
    partition: PartitionRef,
    /// [`TailFeed::generation`] when it started.
    generation: u64,
    handle: tokio::task::JoinHandle<Result<Stepped>>,
}

/// What finishing the step in flight gave.
enum Finished {
    /// No step was in flight, or its result is stale (a seek since, or its partition no longer followed).
    Nothing,
    /// Committed to the partition at this index, with the item it yielded.
    Stepped(usize, Option<FeedItem>),
    /// The partition's directory was deleted under the step: dropped (the partition list changed).
    Dropped,
}

impl TailFeed {
    /// A feed starting every partition at its first segment, byte 0.
    pub fn new(partitions: Vec<TailPartition>, config: TailFeedConfig) -> Self {
        TailFeed {
            parts: partitions
                .into_iter()
                .map(|target| PartState::new(target, None))
                .collect(),
            config,
            cursor: 0,
            rediscoverer: None,
            held: HashSet::new(),
            hw_changes: None,
            step: None,
            generation: 0,
            refused: HashMap::new(),
            touched: HashSet::new(),
            log_starts_changed: HashSet::new(),
            log_start_entries: HashMap::new(),
            hw_version: None,
            #[cfg(test)]
            steps_started: 0,
            truncation: false,
            log_ends: Vec::new(),
            leadership_changes: None,
            layout: None,
        }
    }

    /// `partition` is stepped in the next round ([`wake`]).
    fn ask(&mut self, partition: &PartitionRef) {
        if let Some(part) = self.parts.iter_mut().find(|p| &p.target.partition == partition) {
            part.wake.ask();
        }
    }

    /// Whether this feed may read `partition` now: always for a single-broker source; with a
    /// [`LeadershipSource`], only while this broker leads it.
    pub fn leads(&self, partition: &PartitionRef) -> bool {
        match &self.config.leadership {
            None => true,
            Some(l) => l.led_epoch(&partition.topic, partition.partition).is_some(),
        }
    }

    /// Where a partition's tail stands: (segment base, byte position).
    pub fn position(&self, partition: &PartitionRef) -> Option<(i64, u64)> {
        self.parts
            .iter()
            .find(|p| &p.target.partition == partition)
            .and_then(|p| p.at.as_ref().map(|at| (at.base_offset, at.position)))
    }

    /// The read options of `partition` now: its bound after refreshing the high watermarks (blocking: called on
    /// the step's blocking thread; a fresh copy costs nothing).
    fn options(config: &TailFeedConfig, partition: &PartitionRef) -> TailOptions {
        if config.upto == UptoPolicy::HighWatermark {
            config.high_watermarks.refresh();
        }
        let upto = bound(
            config.upto,
            config.high_watermarks.as_ref(),
            &partition.topic,
            partition.partition,
        )
        .upto();
        TailOptions {
            upto,
            max_chunk_bytes: config.max_chunk_bytes,
            ..TailOptions::default()
        }
    }

    /// The next item (see [`ChunkFeed::next`]); the shipper's error.
    pub async fn next_item(&mut self) -> Result<FeedItem> {
        if self.hw_changes.is_none() && self.config.upto == UptoPolicy::HighWatermark {
            self.hw_changes = self.config.high_watermarks.changes();
        }
        if self.leadership_changes.is_none() {
            self.leadership_changes = self.config.leadership.as_ref().and_then(|l| l.changes());
        }
        if self.hw_version.is_none() {
            self.hw_version = self.config.high_watermarks.changes();
        }
        'round: loop {
            // The bounds this round sees are at least as new as this: a move after it wakes the wait below.
            if let Some(changes) = &mut self.hw_changes {
                changes.borrow_and_update();
            }
            if let Some(changes) = &mut self.leadership_changes {
                if changes.has_changed().unwrap_or(false) {
                    // Which partitions this broker may read changed: every one is looked at again.
                    self.parts.iter_mut().for_each(|p| p.wake.ask());
                }
                changes.borrow_and_update();
            }
            // A step a dropped `next` left running is finished (and committed) first.
            match self.finish_step().await? {
                Finished::Nothing => {}
                Finished::Dropped => continue 'round,
                Finished::Stepped(idx, item) => {
                    if let Some(item) = item {
                        self.cursor = (idx + 1) % self.parts.len().max(1);
                        return Ok(item);
                    }
                }
            }
            self.rediscover(false).await?;
            if let Some(r) = &mut self.rediscoverer {
                r.take_news(&mut self.touched, &mut self.log_starts_changed);
                // Directories of partitions no longer followed (deleted, deselected) are never stepped, so never
                // taken out: dropped here, so the set stays bounded by the partitions.
                if self.touched.len() > self.parts.len() + 1024 {
                    let followed: HashSet<&PathBuf> = self.parts.iter().map(|p| &p.target.dir).collect();
                    self.touched.retain(|dir| followed.contains(dir));
                }
            }
            if !self.log_starts_changed.is_empty() {
                self.log_starts_changed().await?;
            }
            if self.config.high_watermarks.refresh_due() {
                // Idempotent, so a dropped `next` leaves nothing half done: the refresh finishes on its own.
                let source = self.config.high_watermarks.clone();
                blocking(move || {
                    source.refresh();
                    Ok(())
                })
                .await?;
            }
            let hw_version = self.hw_version.as_ref().map(|c| *c.borrow());
            let watch_filter = self.rediscoverer.as_ref().and_then(|r| r.watch_filter().cloned());
            let now = Instant::now();
            let mut swept = 0;
            let n = self.parts.len();
            for i in 0..n {
                let idx = (self.cursor + i) % n;
                let Some(part) = self.parts.get(idx) else {
                    continue;
                };
                if self.held.contains(&part.target.partition) {
                    continue;
                }
                let gate = match &self.config.leadership {
                    None => cluster::Gate::Step,
                    Some(l) => {
                        let led = l.led_epoch(&part.target.partition.topic, part.target.partition.partition);
                        match self.parts.get_mut(idx) {
                            Some(part) => cluster::gate(part, led),
                            None => continue,
                        }
                    }
                };
                let Some(part) = self.parts.get(idx) else { continue };
                let mut positioned = false;
                match gate {
                    cluster::Gate::Step => {}
                    cluster::Gate::Skip => continue,
                    cluster::Gate::Claim(claim) => {
                        self.cursor = (idx + 1) % n;
                        return Ok(FeedItem::Claim(claim));
                    }
                    cluster::Gate::Position(durable) => {
                        let part = part.clone();
                        let before = part.clone();
                        let (state, first) = match blocking(move || cluster::position(part, durable)).await {
                            // The grant's position is the applier's value, as a Resume's: refused for the session
                            // (still granted here, so it is not claimed again and again), never the process.
                            Err(e @ Error::ResumeInvalid { .. }) => {
                                let mut state = Self::refuse_resume(&mut self.refused, &before, e);
                                if let cluster::ClaimState::Granted { epoch, .. } = before.claim {
                                    state.claim = cluster::ClaimState::Granted { epoch, pending: None };
                                }
                                (state, None)
                            }
                            positioned => positioned?,
                        };
                        if let Some(slot) = self.parts.get_mut(idx) {
                            *slot = state;
                        }
                        if let Some(item) = first {
                            self.cursor = (idx + 1) % n;
                            return Ok(item);
                        }
                        // Positioned (or still waiting for this replica to reach the mirror's end): the step
                        // below continues it in this round, at once.
                        positioned = true;
                    }
                }
                let Some(part) = self.parts.get(idx) else { continue };
                if cluster::pending(part) {
                    continue;
                }
                // Whether the watcher follows it: its topic against the watcher's filter, matched once per partition.
                let watched = match (&watch_filter, self.parts.get_mut(idx)) {
                    (Some(filter), Some(p)) => {
                        let topic = &p.target.partition.topic;
                        p.wake.matched(|| filter.matches(topic))
                    }
                    _ => false,
                };
                let Some(part) = self.parts.get(idx) else { continue };
                let (want, high_watermark) = self.want(part, watched, hw_version, now);
                match want {
                    wake::Want::Skip if !positioned => continue,
                    wake::Want::Sweep if !positioned && swept >= wake::SWEEP_PER_ROUND => continue,
                    wake::Want::Sweep => swept += 1,
                    _ => {}
                }
                // The running digest moves to the step (a clone carries none) and comes back with its result.
                let mut part = part.clone();
                if let Some(slot) = self.parts.get_mut(idx) {
                    part.running = slot.running.take();
                }
                self.touched.remove(&part.target.dir);
                part.wake.starting(high_watermark, hw_version);
                self.start_step(part);
                match self.finish_step().await? {
                    Finished::Nothing => {}
                    Finished::Dropped => continue 'round,
                    Finished::Stepped(idx, item) => {
                        if let Some(item) = item {
                            self.cursor = (idx + 1) % self.parts.len().max(1);
                            return Ok(item);
                        }
                    }
                }
            }
            self.wait_for_news().await;
        }
    }

    /// Reads the log-start checkpoints that changed and asks for the partitions whose entry moved: a log start
    /// `DeleteRecords` moved inside a segment shows in no file of the partition's directory. Cancel-safe: the log
    /// dirs stay noted until their files were read.
    async fn log_starts_changed(&mut self) -> Result<()> {
        let log_dirs: Vec<PathBuf> = self.log_starts_changed.iter().cloned().collect();
        let read = blocking(move || {
            Ok(log_dirs
                .into_iter()
                .map(|dir| {
                    // Unreadable (being replaced, or damaged): no entries, so the sweep is what looks again.
                    let entries = crate::source::watch::read_log_starts(&dir).unwrap_or_default();
                    (dir, entries)
                })
                .collect::<Vec<_>>())
        })
        .await?;
        for (dir, entries) in read {
            let before = self.log_start_entries.remove(&dir).unwrap_or_default();
            for part in &mut self.parts {
                if part.target.dir.parent() != Some(dir.as_path()) {
                    continue;
                }
                let key = (part.target.partition.topic.clone(), part.target.partition.partition);
                if entries.get(&key) != before.get(&key) {
                    part.wake.ask();
                }
            }
            self.log_start_entries.insert(dir.clone(), entries);
            self.log_starts_changed.remove(&dir);
        }
        Ok(())
    }

    /// Whether this round steps `part` ([`wake`]), and the high watermark it starts from.
    fn want(
        &self,
        part: &PartState,
        watched: bool,
        hw_version: Option<u64>,
        now: Instant,
    ) -> (wake::Want, Option<i64>) {
        let partition = &part.target.partition;
        let high_watermark = if part.wake.hw_unchanged(hw_version) {
            None
        } else {
            Some(
                self.config
                    .high_watermarks
                    .high_watermark(&partition.topic, partition.partition)
                    .map(|hw| hw.offset),
            )
        };
        let seen = wake::Seen {
            watched,
            touched: self.touched.contains(&part.target.dir),
            high_watermark,
            reported: self.config.progress_interval.and(part.progress.high_watermark()),
            bounded: self.config.upto == UptoPolicy::HighWatermark,
            report_owed: part.progress.owed_by(now),
            log_start_unconfirmed: part.log_start.unconfirmed(),
        };
        let started_at = high_watermark.unwrap_or(part.wake.high_watermark());
        (part.wake.want(seen, now), started_at)
    }

    /// Starts `part`'s step on the blocking pool (no step may be in flight).
    fn start_step(&mut self, part: PartState) {
        let partition = part.target.partition.clone();
        let config = self.config.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let mut part = part;
            if let Some(item) = progress::due(&mut part, &config) {
                return Ok(Ok((part, Some(item))));
            }
            let options = Self::options(&config, &part.target.partition);
            let dir = part.target.dir.clone();
            match step(part, &options) {
                // The partition was deleted under the step: not an error (see `rediscover`).
                Err(e) if rediscover::is_gone(&dir) => Ok(Err(e)),
                r => r.map(Ok),
            }
        });
        self.step = Some(InFlightStep {
            partition,
            generation: self.generation,
            handle,
        });
        #[cfg(test)]
        {
            self.steps_started += 1;
        }
    }

    /// Awaits the step in flight, if any, and commits its result to its partition, wherever that is in the list
    /// now. Cancel-safe: the step stays in flight until its result is taken, in the poll it completes in.
    async fn finish_step(&mut self) -> Result<Finished> {
        let Some(step) = self.step.as_mut() else {
            return Ok(Finished::Nothing);
        };
        let joined = (&mut step.handle).await;
        let Some(InFlightStep {
            partition, generation, ..
        }) = self.step.take()
        else {
            return Ok(Finished::Nothing);
        };
        let stepped = joined.map_err(|e| Error::Task {
            what: "tail feed read".into(),
            message: e.to_string(),
        })??;
        let Some(idx) = self.parts.iter().position(|p| p.target.partition == partition) else {
            return Ok(Finished::Nothing);
        };
        if generation != self.generation {
            return Ok(Finished::Nothing);
        }
        match stepped {
            Ok((mut state, item)) => {
                // With a source of several brokers, an item of a mirror segment continued from this replica is
                // addressed to the mirror's layout ([`cluster::translate`]).
                let item = match item {
                    Some(item) => Some(cluster::translate(&mut state, item)?),
                    None => None,
                };
                state.wake.stepped(item.is_some(), Instant::now());
                self.parts[idx] = state;
                Ok(Finished::Stepped(idx, item))
            }
            Err(gone) => {
                self.drop_gone(idx, &gone);
                Ok(Finished::Dropped)
            }
        }
    }

    /// After a round with nothing to ship: waits for the poll interval, or less when the watcher reports a change
    /// in the log dirs or the high watermarks move (see [`POLL_INTERVAL`]). Cancel-safe (each branch is).
    async fn wait_for_news(&mut self) {
        let TailFeed {
            hw_changes,
            leadership_changes,
            rediscoverer,
            config,
            ..
        } = self;
        let leadership = async {
            match leadership_changes {
                Some(changes) => {
                    if changes.changed().await.is_err() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending().await,
            }
        };
        let hw = async {
            match hw_changes {
                // A closed channel (its source gone) is no news: the poll remains.
                Some(changes) => {
                    if changes.changed().await.is_err() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending().await,
            }
        };
        let watcher = async {
            match rediscoverer {
                Some(r) => r.next_event().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(config.poll_interval) => {}
            _ = hw => {}
            _ = leadership => {}
            _ = watcher => {}
        }
    }
}

impl ChunkFeed for TailFeed {
    async fn seek(&mut self, resume: &[Position]) -> std::result::Result<(), DirectError> {
        // The positions are the applier's: one this feed cannot prove refuses its partition, never the session.
        self.seek_with(resume, Unprovable::RefusePartition)
            .await
            .map_err(local("tail feed seek"))
    }

    async fn next(&mut self) -> std::result::Result<FeedItem, DirectError> {
        match self.next_item().await {
            // The applier takes truncations: end the session, and the next Resume's log ends say where to cut.
            Err(Error::Diverged {
                partition,
                segment_base,
                position,
                reason,
            }) if self.truncation => Err(DirectError::SourceDiverged {
                partition,
                reason: format!("segment {segment_base} position {position}: {reason}"),
            }),
            r => r.map_err(local("tail feed")),
        }
    }

    fn log_ends(&mut self, agreed: bool, ends: &[(Position, LogEnd)]) {
        self.truncation = agreed;
        self.log_ends = ends.to_vec();
    }

    fn max_unacked_per_partition(&self) -> Option<usize> {
        self.config.max_unacked_per_partition
    }

    fn mirror_layout(&mut self, layout: Option<Layouts>) {
        self.layout = layout.map(|l| l.into_iter().collect());
    }

    fn hold(&mut self, partition: &PartitionRef, held: bool) {
        if held {
            self.held.insert(partition.clone());
        } else {
            self.held.remove(partition);
            self.ask(partition);
        }
    }

    fn claim_result(&mut self, result: &ClaimResult) {
        if let Some(part) = self.parts.iter_mut().find(|p| p.target.partition == result.partition) {
            cluster::answered(part, &result.verdict);
            part.wake.ask();
        }
    }

    fn revoked(&mut self, revoke: &Revoke) {
        if let Some(part) = self.parts.iter_mut().find(|p| p.target.partition == revoke.partition) {
            cluster::revoked(part);
            part.wake.ask();
        }
    }
}

fn local(what: &'static str) -> impl Fn(Error) -> DirectError {
    move |e| DirectError::Local {
        what,
        source: Box::new(e),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Error::Task {
        what: "tail feed read".into(),
        message: e.to_string(),
    })?
}

fn name(p: &PartitionRef) -> String {
    format!("{}-{}", p.topic, p.partition)
}

fn log_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(segment_file_name(base, SegmentFileKind::Log))
}

pub mod rediscover;
pub use rediscover::{LiveTopicFilter, Rediscovery, REDISCOVER_INTERVAL};
mod cluster;
pub mod diverge;
mod index_fit;
pub mod layout;
mod log_start;
mod progress;
mod replace;
mod resume;
mod running;
mod seal;
mod seek;
mod step;
mod wake;
use seal::{companions, read_range};
use seek::resume_at;
use step::step;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
