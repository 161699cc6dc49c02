//! The shipper's session: Resume and Credit in, Chunks and SegmentSeals out,
//! never more payload in flight than the applier granted.
//!
//! Where the bytes come from is a [`ChunkFeed`] (the tail driver implements it:
//! it reads the source's partition directories). At the start of every session
//! the feed is positioned at the applier's durable positions ([`ChunkFeed::seek`]),
//! and that is the only resume path: whatever this side had sent and not seen
//! acknowledged on the previous connection is forgotten, not resent from memory.
//! Why: the applier's durable position is the only truth after a cut (it may
//! have made more durable than it could acknowledge), a restarted shipper has
//! no memory at all, and one path for both means every cut tests the restart.
//!
//! In flight: the session records each item it sent and has not seen
//! acknowledged (partition, end position, cost), which is bounded by the credit
//! window; an Ack releases what it covers. Acks are checked: never below the
//! previous one, never beyond what was sent.
//!
//! Several shippers on one link (feature bit 6, `docs/direct-protocol.md` §6.1): the feed yields a
//! [`FeedItem::Claim`] before it ships a partition; the session sends it and passes the applier's answer back
//! ([`ChunkFeed::claim_result`]); a granted partition continues from the position in the answer, exactly as after a
//! Resume. Until the answer comes, an item of that partition waits in the session. A [`Revoke`] forgets the
//! partition's in-flight items (their credit comes back from the applier) and tells the feed
//! ([`ChunkFeed::revoked`]); an item of a revoked partition the feed yields anyway is dropped, and an Ack that
//! crossed the Revoke is ignored.
//!
//! In flight per partition, when the feed asks for it
//! ([`ChunkFeed::max_unacked_per_partition`]): a partition with that many items
//! unacknowledged is *held* ([`ChunkFeed::hold`]) until an Ack releases it. Why:
//! the credit window bounds memory, not latency. A tail that sends every few
//! records as soon as it sees them fills a 16 MiB window with thousands of small
//! chunks, each made durable on its own, and a new record waits behind all of
//! them (the direct tail benchmark, docs/BENCHMARKS.md: p99 1.5-2 s at 10k records/s). Held back, the
//! bytes wait in the source file instead, and the next read takes all of them
//! as one chunk: the queue stays as short as the bound, and the chunk size
//! follows the rate by itself (small when the link keeps up, up to the feed's
//! chunk limit when it is behind).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::limiter::TokenBucket;
use super::{
    chunk_cost, outbox, read_error, replace_cost, say_goodbye, seal_cost, spawn_writer, tp, writer_ended, FramedIo,
    SessionConfig, SessionEnd,
};
use crate::direct::error::{DirectError, Result};
use crate::direct::frame::Frame;
use crate::direct::handshake::Session;
use crate::direct::handshake::{FEATURE_LINK_META, FEATURE_MIRROR_LAYOUT, FEATURE_TRUNCATE};
// Named by the docs of `FeedItem` and `ChunkFeed`.
#[cfg(doc)]
use crate::direct::handshake::{
    FEATURE_CLUSTER_SHIPPERS, FEATURE_INDEX_INTERVAL, FEATURE_LOG_START, FEATURE_PROGRESS_SHIPPED,
    FEATURE_SEGMENT_REPLACE, FEATURE_SOURCE_PROGRESS,
};
use crate::direct::link_meta::{EncodedLinkMeta, META_PIECE_BYTES};
use crate::direct::payload::{
    Chunk, Claim, ClaimResult, Goodbye, GoodbyeReason, LayoutSegment, LogEnd, LogStart, MirrorLayout, PartitionRef,
    Position, Revoke, Roll, SegmentReplace, SegmentSeal, SourceProgress, Truncate,
};

mod streaming;

use streaming::Streaming;

/// Most sealed segments one partition's MirrorLayout may list in total (1,048,576: at Kafka's smallest useful
/// segment sizes far beyond any real partition, and 16 MiB of entries at most): a peer that never ends a list
/// cannot grow the shipper's memory without bound.
pub const MAX_LAYOUT_SEGMENTS: usize = 1 << 20;

/// Per partition of a Resume, the mirror's sealed segments as the applier's MirrorLayout frames listed them.
pub type Layouts = Vec<(PartitionRef, Vec<LayoutSegment>)>;

/// What the shipper sends next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedItem {
    Chunk(Chunk),
    /// A seal; its companions' index intervals are dropped on a session without [`FEATURE_INDEX_INTERVAL`].
    Seal(SegmentSeal),
    /// The source's log start moved. Not a position in the partition's stream: it costs no credit, is never
    /// acknowledged, and is dropped (not sent) on a session that did not agree [`FEATURE_LOG_START`].
    LogStart(LogStart),
    /// A piece of a compacted replacement of sealed segments. Like a LogStart it moves no position (no Ack; its
    /// credit comes back once applied), and it is dropped on a session without [`FEATURE_SEGMENT_REPLACE`].
    Replace(SegmentReplace),
    /// Where the source stands (lag reporting). Moves no position, costs no credit, never acknowledged; dropped
    /// on a session without [`FEATURE_SOURCE_PROGRESS`], sent without its `shipped` position on one without
    /// [`FEATURE_PROGRESS_SHIPPED`].
    Progress(SourceProgress),
    /// Feature bit 6: claim a partition at the leader epoch at which this shipper's broker leads it. Moves no
    /// position and costs no credit; the answer comes to [`ChunkFeed::claim_result`]. Dropped on a session without
    /// [`FEATURE_CLUSTER_SHIPPERS`] (there is nobody to share with).
    Claim(Claim),
    /// Feature bit 6: the mirror segment ends here, where no file of this shipper's broker ends. Positioned like a
    /// seal (acknowledged at its final size), costs no credit; a local error on a session without the bit.
    Roll(Roll),
    /// The source no longer holds what was shipped from `truncate_to` on (only after a Resume with log ends, on a
    /// session that agreed [`FEATURE_TRUNCATE`]; the feed yields it before any other positioned item of the
    /// partition). Costs no credit and gets no Ack: sending it moves the partition's position back to
    /// `(segment_base, position)`, from where the feed continues.
    Truncate(Truncate),
}

impl FeedItem {
    pub fn partition(&self) -> &PartitionRef {
        match self {
            FeedItem::Chunk(c) => &c.partition,
            FeedItem::Seal(s) => &s.partition,
            FeedItem::LogStart(l) => &l.partition,
            FeedItem::Replace(r) => &r.partition,
            FeedItem::Progress(p) => &p.partition,
            FeedItem::Claim(c) => &c.partition,
            FeedItem::Roll(r) => &r.partition,
            FeedItem::Truncate(t) => &t.partition,
        }
    }

    /// Segment and byte position after this item (`None` for a LogStart, which moves no position).
    pub fn end(&self) -> Option<(i64, u64)> {
        match self {
            FeedItem::Chunk(c) => Some((c.segment_base, c.position + c.bytes.len() as u64)),
            FeedItem::Seal(s) => Some((s.segment_base, s.final_size)),
            FeedItem::Roll(r) => Some((r.segment_base, r.final_size)),
            FeedItem::LogStart(_)
            | FeedItem::Replace(_)
            | FeedItem::Progress(_)
            | FeedItem::Claim(_)
            | FeedItem::Truncate(_) => None,
        }
    }

    /// Where this item starts (a seal "starts" at its final size: nothing is appended).
    fn start(&self) -> Option<(i64, u64)> {
        match self {
            FeedItem::Chunk(c) => Some((c.segment_base, c.position)),
            FeedItem::Seal(s) => Some((s.segment_base, s.final_size)),
            FeedItem::Roll(r) => Some((r.segment_base, r.final_size)),
            FeedItem::LogStart(_)
            | FeedItem::Replace(_)
            | FeedItem::Progress(_)
            | FeedItem::Claim(_)
            | FeedItem::Truncate(_) => None,
        }
    }

    fn cost(&self) -> u64 {
        match self {
            FeedItem::Chunk(c) => chunk_cost(c),
            FeedItem::Seal(s) => seal_cost(s),
            FeedItem::LogStart(_)
            | FeedItem::Progress(_)
            | FeedItem::Claim(_)
            | FeedItem::Roll(_)
            | FeedItem::Truncate(_) => 0,
            FeedItem::Replace(r) => replace_cost(r),
        }
    }

    fn into_frame(self) -> Frame {
        match self {
            FeedItem::Chunk(c) => Frame::Chunk(c),
            FeedItem::Seal(s) => Frame::SegmentSeal(s),
            FeedItem::LogStart(l) => Frame::LogStart(l),
            FeedItem::Replace(r) => Frame::SegmentReplace(r),
            FeedItem::Progress(p) => Frame::SourceProgress(p),
            FeedItem::Claim(c) => Frame::Claim(c),
            FeedItem::Roll(r) => Frame::Roll(r),
            FeedItem::Truncate(t) => Frame::Truncate(t),
        }
    }
}

/// The source of what the shipper sends (the tail driver implements it).
pub trait ChunkFeed: Send + 'static {
    /// Called at the start of every session with the applier's Resume: afterwards
    /// [`ChunkFeed::next`] yields, per partition, items that continue exactly from
    /// these positions (a partition not listed: from the feed's configured start).
    /// The positions are the peer's values: one the feed cannot prove (beyond a
    /// segment's end, inside a batch, a segment or epoch the source never had)
    /// should refuse that partition for the session (nothing of it yielded, the
    /// refusal logged), not fail the seek; an error here is this side's own
    /// ([`DirectError::Local`]: it ends the link, `docs/direct-protocol.md` §6).
    fn seek(&mut self, resume: &[Position]) -> impl Future<Output = Result<()>> + Send;

    /// Called right before [`ChunkFeed::seek`]: `agreed` when the session agreed [`FEATURE_TRUNCATE`], with the
    /// mirror's end per Resume position the applier sent (none when it holds nothing). A feed that compares them
    /// with its source's leader epochs yields a [`FeedItem::Truncate`] first for a partition whose source no longer
    /// holds the mirror's end; with `agreed` it may also end a session on a divergence it sees while streaming
    /// ([`DirectError::SourceDiverged`]), so that the next Resume tells it where the mirror ends. The default
    /// ignores them.
    fn log_ends(&mut self, agreed: bool, ends: &[(Position, LogEnd)]) {
        let _ = (agreed, ends);
    }

    /// The next item, waiting until there is one. Must be cancel-safe (like
    /// `mpsc::Receiver::recv`): the session drops the future when a frame
    /// arrives first, and calls again later.
    fn next(&mut self) -> impl Future<Output = Result<FeedItem>> + Send;

    /// Called at the start of every session right before [`ChunkFeed::seek`]: the mirror's sealed segments per
    /// partition of the Resume when the session agreed [`FEATURE_MIRROR_LAYOUT`], else `None` (the feed knows
    /// only what it shipped itself). The default ignores it.
    fn mirror_layout(&mut self, layout: Option<Layouts>) {
        let _ = layout;
    }

    /// At most this many positioned items (chunks and seals) of one partition sent and not yet acknowledged;
    /// `None` (the default): only the credit window bounds them. A feed whose source keeps accumulating while it
    /// waits (a tail of a growing file) sets a small bound: what arrives while a partition is held is read later as
    /// one larger chunk instead of many small ones queued behind each other (see the module doc).
    fn max_unacked_per_partition(&self) -> Option<usize> {
        None
    }

    /// The session holds `partition` (`held`: it has [`ChunkFeed::max_unacked_per_partition`] items unacknowledged)
    /// or releases it (an Ack came). A feed should yield no item of a held partition until it is released; one it
    /// yields anyway waits in the session (and with it every other partition) until the release. A new session
    /// starts with nothing held: [`ChunkFeed::seek`] releases every partition. The default ignores it.
    fn hold(&mut self, partition: &PartitionRef, held: bool) {
        let _ = (partition, held);
    }

    /// Feature bit 6: the applier's answer to a [`FeedItem::Claim`]. Granted: yield the partition's items from
    /// [`ClaimResult::resume_position`] on (nothing durable: from the source's first segment), exactly as after
    /// [`ChunkFeed::seek`]; refused: yield none of it (another node holds it). The default ignores it.
    fn claim_result(&mut self, result: &ClaimResult) {
        let _ = result;
    }

    /// Feature bit 6: another shipper holds `revoke.partition` now; yield nothing more of it (what was in flight
    /// is forgotten; a later claim starts from its grant's position). The default ignores it.
    fn revoked(&mut self, revoke: &Revoke) {
        let _ = revoke;
    }
}

/// What the shipper has seen, across sessions (for status and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipperStats {
    /// Sessions that reached streaming (Resume received).
    pub sessions: u64,
    /// Payload bytes sent (chunks and inline companions), resends after a cut included.
    pub bytes_sent: u64,
    /// Items sent and not yet acknowledged in the current session, as cost.
    pub in_flight: u64,
    /// The most ever in flight; never above the credit window.
    pub max_in_flight: u64,
    /// The most items (chunks and seals) of one partition ever unacknowledged at once; never above the feed's
    /// [`ChunkFeed::max_unacked_per_partition`] when it sets one.
    pub max_unacked_items: usize,
    /// Highest acknowledged position per partition: (segment base, byte position).
    pub acked: HashMap<PartitionRef, (i64, u64)>,
    /// Resumes that started a partition below a position it had acknowledged:
    /// the applier lost durable bytes (followed, but reported).
    pub resume_regressions: u64,
}

/// One sent, unacknowledged item.
#[derive(Debug)]
struct Sent {
    end: (i64, u64),
    cost: u64,
}

/// Per-partition state within a session.
#[derive(Debug, Default)]
struct Track {
    /// End of what was sent (starts at the resume position).
    sent_end: Option<(i64, u64)>,
    /// Highest Ack this session (starts at the resume position).
    acked: Option<(i64, u64)>,
    unacked: VecDeque<Sent>,
}

/// The shipper's side of sessions on one link; lives across connections.
pub struct ShipperSession<F> {
    feed: F,
    config: SessionConfig,
    stats: ShipperStats,
    limiter: Option<TokenBucket>,
    /// The link's metadata, newest version (feature bit 8): see [`ShipperSession::with_link_meta`].
    link_meta: Option<LinkMetaWatch>,
}

/// The newest version of a link's metadata, as a metadata reader publishes it (`None` until its first read).
pub type LinkMetaWatch = tokio::sync::watch::Receiver<Option<Arc<EncodedLinkMeta>>>;

impl<F: ChunkFeed> ShipperSession<F> {
    pub fn new(feed: F, config: SessionConfig) -> Result<ShipperSession<F>> {
        config.check()?;
        let limiter = config.max_bandwidth.map(TokenBucket::new);
        Ok(ShipperSession {
            feed,
            config,
            stats: ShipperStats::default(),
            limiter,
            link_meta: None,
        })
    }

    /// Sends the link's metadata on sessions that agreed [`FEATURE_LINK_META`]: the newest version at the start of
    /// every session (the applier may have missed the last one: a cut, a restart), then each new version `watch`
    /// announces. A version goes out as LinkMeta frames between the positioned items; it costs no credit (its
    /// size is bounded by the document caps, and one version at a time is in the outbox).
    pub fn with_link_meta(mut self, watch: LinkMetaWatch) -> ShipperSession<F> {
        self.link_meta = Some(watch);
        self
    }

    pub fn stats(&self) -> &ShipperStats {
        &self.stats
    }

    pub fn feed(&self) -> &F {
        &self.feed
    }

    pub fn into_feed(self) -> F {
        self.feed
    }

    /// Runs one session on `framed` (after the handshake) until shutdown, the
    /// peer's Goodbye, or an error.
    pub async fn run(
        &mut self,
        framed: FramedIo,
        session: &Session,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd> {
        let max_payload = u64::from(framed.codec().max_payload());
        let idle = self.config.idle_timeout;
        let (mut stream, sink) = super::split(framed);
        let (tx, rx) = outbox();
        let mut writer = spawn_writer(sink, rx, self.config.heartbeat_interval, idle);
        let mut last_recv = Instant::now();

        // RESUMING: the applier's Resume comes first (heartbeats may precede it).
        let (resume, log_ends) =
            match await_resume(&mut stream, &mut writer, session, shutdown, idle, &mut last_recv).await? {
                Opening::Resume(resume, log_ends) => (resume, log_ends),
                Opening::Shutdown => {
                    say_goodbye(
                        tx,
                        &mut writer,
                        &mut stream,
                        idle,
                        GoodbyeReason::Shutdown,
                        "shipper shutting down".into(),
                    )
                    .await;
                    return Ok(SessionEnd::Shutdown);
                }
                Opening::PeerGoodbye(g) => {
                    drop(tx);
                    let _ = writer.await;
                    return Ok(SessionEnd::PeerGoodbye {
                        reason: g.reason,
                        message: g.message,
                    });
                }
            };
        let tracks = self.resumed_tracks(&resume)?;
        self.feed.log_ends(session.features & FEATURE_TRUNCATE != 0, &log_ends);
        let layout = if session.features & FEATURE_MIRROR_LAYOUT != 0 {
            Some(receive_layout(&mut stream, &resume, session, idle).await?)
        } else {
            None
        };
        self.feed.mirror_layout(layout);
        self.feed.seek(&resume).await?;
        self.stats.sessions += 1;
        self.stats.in_flight = 0;

        // STREAMING.
        let mut st = Streaming::new(tracks, self.feed.max_unacked_per_partition(), session, max_payload);
        // Feature bit 8: the newest metadata version now, then each new one; its frames go out one per turn.
        let mut meta_watch = match (&self.link_meta, session.features & FEATURE_LINK_META != 0) {
            (Some(watch), true) => {
                let mut watch = watch.clone();
                watch.mark_changed();
                Some(watch)
            }
            _ => None,
        };
        let mut meta_frames: VecDeque<Frame> = VecDeque::new();
        loop {
            st.check_waited()?;
            let cost = st.pending.as_ref().map(FeedItem::cost);
            let sendable = !st.pending_held() && !st.unchecked && cost.is_some_and(|c| c <= st.credit);
            let send_at = match (sendable, cost, self.limiter.as_mut()) {
                (true, Some(c), Some(bucket)) => Some(bucket.ready_at(c)),
                _ => None,
            };
            let now = Instant::now();
            let send_now = sendable && send_at.is_none_or(|at| at <= now);
            let mut peer_goodbye = None;
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => peer_goodbye = Some(None),
                frame = stream.next() => {
                    last_recv = Instant::now();
                    let frame = match frame {
                        None => return Err(DirectError::Closed { stage: "streaming" }),
                        Some(Err(e)) => return Err(read_error(e)),
                        Some(Ok(frame)) => frame,
                    };
                    if let Some(g) = self.on_peer_frame(&mut st, session, frame)? {
                        peer_goodbye = Some(Some(g));
                    }
                }
                // After the frames: a Goodbye already received explains a writer that failed.
                r = &mut writer => return Err(writer_ended(r)),
                _ = tokio::time::sleep_until(last_recv + idle) => {
                    return Err(DirectError::Timeout { stage: "streaming (no frame from the applier)", after: idle });
                }
                permit = tx.reserve(), if send_now => {
                    let Ok(permit) = permit else { return Err(writer_ended(writer.await)) };
                    let Some(item) = st.pending.take() else { continue };
                    permit.send(self.on_send(&mut st, item));
                }
                _ = tokio::time::sleep_until(send_at.unwrap_or(now)), if sendable && !send_now => {}
                permit = tx.reserve(), if !meta_frames.is_empty() => {
                    let Ok(permit) = permit else { return Err(writer_ended(writer.await)) };
                    if let Some(frame) = meta_frames.pop_front() {
                        permit.send(frame);
                    }
                }
                changed = async { meta_watch.as_mut().expect("guarded").changed().await }, if meta_watch.is_some() && meta_frames.is_empty() => {
                    match changed {
                        Ok(()) => {
                            let newest = meta_watch.as_mut().expect("guarded").borrow_and_update().clone();
                            if let Some(meta) = newest {
                                tracing::debug!(version = meta.version, "sending the link's metadata");
                                meta_frames.extend(meta.pieces(META_PIECE_BYTES).into_iter().map(Frame::LinkMeta));
                            }
                        }
                        // The reader stopped (its own error is reported where it runs): segments go on.
                        Err(_) => meta_watch = None,
                    }
                }
                item = self.feed.next(), if st.pending.is_none() => self.on_feed_item(&mut st, session, item?)?,
            }
            match peer_goodbye {
                None => {}
                Some(None) => {
                    say_goodbye(
                        tx,
                        &mut writer,
                        &mut stream,
                        idle,
                        GoodbyeReason::Shutdown,
                        "shipper shutting down".into(),
                    )
                    .await;
                    return Ok(SessionEnd::Shutdown);
                }
                Some(Some(g)) => {
                    drop(tx);
                    let _ = writer.await;
                    return Ok(SessionEnd::PeerGoodbye {
                        reason: g.reason,
                        message: g.message,
                    });
                }
            }
        }
    }

    /// The partitions of a Resume, each starting at its position (which also becomes the highest acknowledged one).
    /// One position per partition: with two, the feed and the in-flight record would follow different ones (a
    /// continuity check failing on this side, a local error, for the peer's mistake).
    fn resumed_tracks(&mut self, resume: &[Position]) -> Result<HashMap<PartitionRef, Track>> {
        let mut tracks: HashMap<PartitionRef, Track> = HashMap::new();
        let mut named = HashSet::new();
        if let Some(twice) = resume.iter().find(|p| !named.insert(&p.partition)) {
            return Err(DirectError::Protocol {
                reason: format!("the Resume names {} twice", tp(&twice.partition)),
            });
        }
        for p in resume {
            let at = (p.segment_base, p.position);
            if let Some(acked) = self.stats.acked.get(&p.partition) {
                if at < *acked {
                    self.stats.resume_regressions += 1;
                    tracing::warn!(
                        partition = %tp(&p.partition), resume = ?at, acked = ?acked,
                        "the applier resumes below a position it acknowledged: it lost durable bytes; resending"
                    );
                }
            }
            self.stats.acked.insert(p.partition.clone(), at);
            tracks.insert(
                p.partition.clone(),
                Track {
                    sent_end: Some(at),
                    acked: Some(at),
                    unacked: VecDeque::new(),
                },
            );
        }
        Ok(tracks)
    }
}

/// How a session's opening ended.
enum Opening {
    /// The applier's Resume (its log ends per position when the session agreed the truncate feature).
    Resume(Vec<Position>, Vec<(Position, LogEnd)>),
    /// This side is shutting down.
    Shutdown,
    /// The applier said Goodbye first.
    PeerGoodbye(Goodbye),
}

/// Waits for the applier's Resume (heartbeats may precede it), within the idle timeout.
async fn await_resume(
    stream: &mut super::FrameStream,
    writer: &mut tokio::task::JoinHandle<Result<()>>,
    session: &Session,
    shutdown: &CancellationToken,
    idle: std::time::Duration,
    last_recv: &mut Instant,
) -> Result<Opening> {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return Ok(Opening::Shutdown),
            frame = stream.next() => {
                *last_recv = Instant::now();
                match frame {
                    None => return Err(DirectError::Closed { stage: "waiting for Resume" }),
                    Some(Err(e)) => return Err(read_error(e)),
                    Some(Ok(Frame::Resume(points))) => return Ok(Opening::Resume(points, Vec::new())),
                    Some(Ok(Frame::ResumeWithEnds { positions, ends })) if session.features & FEATURE_TRUNCATE != 0 => {
                        let with_ends = positions.iter().cloned().zip(ends).collect();
                        return Ok(Opening::Resume(positions, with_ends));
                    }
                    Some(Ok(Frame::Heartbeat { .. })) => {}
                    Some(Ok(Frame::Goodbye(g))) => return Ok(Opening::PeerGoodbye(g)),
                    Some(Ok(other)) => return Err(peer_frame(other, session, "waiting for Resume")),
                }
            }
            // After the frames: a Goodbye already received explains a writer that failed.
            r = &mut *writer => return Err(writer_ended(r)),
            _ = tokio::time::sleep_until(*last_recv + idle) => {
                return Err(DirectError::Timeout { stage: "waiting for Resume", after: idle });
            }
        }
    }
}

/// The MirrorLayout frames that follow a Resume: until every partition of the Resume has its last frame. A layout
/// of a partition the Resume does not name, a second list of a partition, bases not increasing across frames, or
/// more than [`MAX_LAYOUT_SEGMENTS`] in one list are protocol errors naming the partition.
async fn receive_layout(
    stream: &mut super::FrameStream,
    resume: &[Position],
    session: &Session,
    idle: std::time::Duration,
) -> Result<Layouts> {
    let mut lists: Vec<(PartitionRef, Vec<LayoutSegment>, bool)> = resume
        .iter()
        .map(|p| (p.partition.clone(), Vec::new(), false))
        .collect();
    while lists.iter().any(|(_, _, done)| !*done) {
        let frame = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => {
                return Err(DirectError::Timeout {
                    stage: "waiting for MirrorLayout",
                    after: idle,
                })
            }
            Ok(None) => {
                return Err(DirectError::Closed {
                    stage: "waiting for MirrorLayout",
                })
            }
            Ok(Some(Err(e))) => return Err(read_error(e)),
            Ok(Some(Ok(frame))) => frame,
        };
        let MirrorLayout {
            partition,
            last,
            segments,
        } = match frame {
            Frame::Heartbeat { .. } => continue,
            Frame::MirrorLayout(l) => l,
            other => return Err(peer_frame(other, session, "waiting for MirrorLayout")),
        };
        let bad = |reason: String| DirectError::Protocol {
            reason: format!("MirrorLayout of {}: {reason}", tp(&partition)),
        };
        let Some((_, list, done)) = lists.iter_mut().find(|(p, _, _)| *p == partition) else {
            return Err(bad("a partition the Resume does not name".into()));
        };
        if *done {
            return Err(bad("a second list after its last frame".into()));
        }
        if let (Some(prev), Some(first)) = (list.last(), segments.first()) {
            if first.base <= prev.base {
                return Err(bad(format!(
                    "base {} is not above the previous frame's last base {}",
                    first.base, prev.base
                )));
            }
        }
        if list.len() + segments.len() > MAX_LAYOUT_SEGMENTS {
            return Err(bad(format!("more than {MAX_LAYOUT_SEGMENTS} segments")));
        }
        list.extend(segments);
        *done = last;
    }
    Ok(lists.into_iter().map(|(p, list, _)| (p, list)).collect())
}

/// A frame the shipper does not expect from the applier.
fn peer_frame(frame: Frame, session: &Session, stage: &'static str) -> DirectError {
    match frame {
        Frame::Refuse(r) => DirectError::RefusedByPeer {
            reason: r.reason,
            local_role: session.role,
            peer_role: session.role.peer(),
            message: r.message,
        },
        other => DirectError::UnexpectedFrame {
            stage,
            expected: "Resume, Credit, Ack, ClaimResult or Revoke (feature bit 6) or Heartbeat",
            got: other.name(),
        },
    }
}
