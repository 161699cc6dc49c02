//! The streaming part of the shipper's session: its state between turns of the loop ([`Streaming`]: per-partition
//! tracks, credit, the pending item, claims) and what each event does to it — a frame from the applier, an item
//! from the feed, an item sent. The loop itself (`ShipperSession::run`) only chooses the next event.

use std::collections::{HashMap, HashSet, VecDeque};

use super::{ChunkFeed, FeedItem, Sent, ShipperSession, Track};
use crate::direct::error::{DirectError, Result};
use crate::direct::frame::Frame;
use crate::direct::handshake::Session;
use crate::direct::handshake::{
    FEATURE_CLUSTER_SHIPPERS, FEATURE_INDEX_INTERVAL, FEATURE_LOG_START, FEATURE_MIRROR_LAYOUT,
    FEATURE_PROGRESS_SHIPPED, FEATURE_SEGMENT_REPLACE, FEATURE_SOURCE_PROGRESS, FEATURE_TRUNCATE,
};
use crate::direct::payload::{ClaimResult, ClaimVerdict, Goodbye, PartitionRef, Position, Revoke};
use crate::direct::session::tp;

/// The state of one session's stream, between turns of its loop.
pub(super) struct Streaming {
    pub(super) tracks: HashMap<PartitionRef, Track>,
    /// At most this many positioned items of one partition unacknowledged (the feed's bound, at least 1).
    per_partition: Option<usize>,
    /// Credit the applier granted and this side has not spent.
    pub(super) credit: u64,
    /// The applier's credit window (its first Credit): an item larger can never be sent.
    window: Option<u64>,
    /// The feed's next item, not sent yet.
    pub(super) pending: Option<FeedItem>,
    /// Feature bit 6: several shippers, partitions claimed.
    cluster: bool,
    /// Feature bit 6: claims sent and not answered yet; partitions granted; partitions revoked (or refused).
    awaiting: HashSet<PartitionRef>,
    granted: HashSet<PartitionRef>,
    lost: HashSet<PartitionRef>,
    /// The pending item waited for its partition's claim answer: checked once the answer is in.
    pub(super) unchecked: bool,
    max_payload: u64,
}

impl Streaming {
    pub(super) fn new(
        tracks: HashMap<PartitionRef, Track>,
        per_partition: Option<usize>,
        session: &Session,
        max_payload: u64,
    ) -> Streaming {
        Streaming {
            tracks,
            per_partition: per_partition.map(|n| n.max(1)),
            credit: 0,
            window: None,
            pending: None,
            cluster: session.features & FEATURE_CLUSTER_SHIPPERS != 0,
            awaiting: HashSet::new(),
            granted: HashSet::new(),
            lost: HashSet::new(),
            unchecked: false,
            max_payload,
        }
    }

    /// The pending item that waited for its partition's claim answer, once the answer is in: checked when the
    /// partition was granted, dropped when not.
    pub(super) fn check_waited(&mut self) -> Result<()> {
        if self.unchecked
            && self
                .pending
                .as_ref()
                .is_some_and(|i| !self.awaiting.contains(i.partition()))
        {
            self.unchecked = false;
            if let Some(item) = self.pending.take() {
                if self.granted.contains(item.partition()) {
                    check_item(&item, &self.tracks, self.window, self.max_payload)?;
                    self.pending = Some(item);
                } else {
                    tracing::debug!(partition = %tp(item.partition()), "dropping an item of a partition not granted");
                }
            }
        }
        Ok(())
    }

    /// A held partition's item (a feed that ignores holds) waits for the Ack that releases it.
    pub(super) fn pending_held(&self) -> bool {
        match (&self.pending, self.per_partition) {
            (Some(item), Some(limit)) if item.end().is_some() => self
                .tracks
                .get(item.partition())
                .is_some_and(|t| t.unacked.len() >= limit),
            _ => false,
        }
    }
}

impl<F: ChunkFeed> ShipperSession<F> {
    /// A frame from the applier while streaming; `Some` when it is the applier's Goodbye.
    pub(super) fn on_peer_frame(
        &mut self,
        st: &mut Streaming,
        session: &Session,
        frame: Frame,
    ) -> Result<Option<Goodbye>> {
        match frame {
            Frame::Heartbeat { .. } => {}
            Frame::Credit { bytes } => {
                st.credit = st.credit.saturating_add(bytes);
                st.window.get_or_insert(bytes);
            }
            // An Ack that crossed a Revoke: the partition is no longer this session's.
            Frame::Ack(p) if st.cluster && st.lost.contains(&p.partition) && !st.tracks.contains_key(&p.partition) => {}
            Frame::Ack(p) => self.on_ack(&mut st.tracks, p, st.per_partition)?,
            Frame::ClaimResult(r) if st.cluster => self.on_claim_result(st, r)?,
            Frame::Revoke(r) if st.cluster => self.on_revoke(st, r),
            Frame::Goodbye(g) => return Ok(Some(g)),
            other => return Err(super::peer_frame(other, session, "streaming")),
        }
        Ok(None)
    }

    /// Feature bit 6: the applier's answer to a claim this session sent. A grant starts the partition's track at
    /// the answer's position; a refusal marks it lost. The feed hears the answer either way.
    fn on_claim_result(&mut self, st: &mut Streaming, r: ClaimResult) -> Result<()> {
        if !st.awaiting.remove(&r.partition) {
            return Err(DirectError::Protocol {
                reason: format!("ClaimResult for {}, which this session did not claim", tp(&r.partition)),
            });
        }
        match &r.verdict {
            ClaimVerdict::Granted { .. } => {
                let at = r.resume_position().map(|p| (p.segment_base, p.position));
                if let Some(at) = at {
                    self.stats.acked.insert(r.partition.clone(), at);
                }
                st.tracks.insert(
                    r.partition.clone(),
                    Track {
                        sent_end: at,
                        acked: at,
                        unacked: VecDeque::new(),
                    },
                );
                st.granted.insert(r.partition.clone());
                st.lost.remove(&r.partition);
            }
            ClaimVerdict::Refused {
                holder_node,
                holder_epoch,
            } => {
                tracing::info!(
                    partition = %tp(&r.partition), holder_node, holder_epoch,
                    "claim refused: another node holds the partition"
                );
                st.granted.remove(&r.partition);
                st.lost.insert(r.partition.clone());
            }
        }
        self.feed.claim_result(&r);
        Ok(())
    }

    /// Feature bit 6: another node holds the partition now. Its in-flight items are forgotten (their credit comes
    /// back from the applier, which discards them), a pending positioned item of it is dropped, the feed is told.
    fn on_revoke(&mut self, st: &mut Streaming, r: Revoke) {
        tracing::warn!(
            partition = %tp(&r.partition), holder_node = r.holder_node, holder_epoch = r.holder_epoch,
            "revoked: another node holds the partition now"
        );
        if let Some(track) = st.tracks.remove(&r.partition) {
            // Their credit comes back from the applier, which discards them.
            let cost: u64 = track.unacked.iter().map(|s| s.cost).sum();
            self.stats.in_flight = self.stats.in_flight.saturating_sub(cost);
            if st.per_partition.is_some_and(|limit| track.unacked.len() >= limit) {
                self.feed.hold(&r.partition, false);
            }
        }
        st.granted.remove(&r.partition);
        st.lost.insert(r.partition.clone());
        if st
            .pending
            .as_ref()
            .is_some_and(|i| i.partition() == &r.partition && !matches!(i, FeedItem::Claim(_)))
        {
            st.pending = None;
            st.unchecked = false;
        }
        self.feed.revoked(&r);
    }

    /// `item` goes out now (credit and the rate limit allow it): its cost is spent, its end recorded as in flight
    /// (the partition held when it reaches the feed's bound), and the frame to send is returned.
    pub(super) fn on_send(&mut self, st: &mut Streaming, item: FeedItem) -> Frame {
        if let FeedItem::Truncate(t) = &item {
            // The partition's position moves back to where the mirror will end (checked in `check_item`).
            let at = (t.segment_base, t.position);
            let track = st.tracks.entry(t.partition.clone()).or_default();
            track.sent_end = Some(at);
            track.acked = Some(at);
            self.stats.acked.insert(t.partition.clone(), at);
        }
        let cost = item.cost();
        st.credit -= cost;
        if let Some(bucket) = self.limiter.as_mut() {
            bucket.take(cost);
        }
        if let FeedItem::Claim(c) = &item {
            st.awaiting.insert(c.partition.clone());
        }
        if let Some(end) = item.end() {
            let track = st.tracks.entry(item.partition().clone()).or_default();
            track.sent_end = Some(end);
            track.unacked.push_back(Sent { end, cost });
            if st.per_partition.is_some_and(|limit| track.unacked.len() >= limit) {
                self.feed.hold(item.partition(), true);
            }
            self.stats.max_unacked_items = self.stats.max_unacked_items.max(track.unacked.len());
        }
        self.stats.bytes_sent += cost;
        self.stats.in_flight += cost;
        self.stats.max_in_flight = self.stats.max_in_flight.max(self.stats.in_flight);
        if let Some(observer) = &self.config.observer {
            observer.sent(&item);
        }
        item.into_frame()
    }

    /// The feed's next item: fitted to what the session agreed (fields an older applier would refuse left out,
    /// items it cannot take dropped), checked, and made the pending item. With several shippers (feature bit 6)
    /// an item of a partition whose claim is unanswered waits for the answer; one of a revoked partition is dropped.
    pub(super) fn on_feed_item(&mut self, st: &mut Streaming, session: &Session, mut item: FeedItem) -> Result<()> {
        match &mut item {
            // The applier rebuilds with Kafka's default, and its digest check decides.
            FeedItem::Seal(seal) if session.features & FEATURE_INDEX_INTERVAL == 0 => {
                seal.companions.iter_mut().for_each(|c| c.index_interval = None);
            }
            // An older applier would refuse the trailing bytes.
            FeedItem::Progress(p) if session.features & FEATURE_PROGRESS_SHIPPED == 0 => p.shipped = None,
            // Likewise the trailing next base of a replacement's end.
            FeedItem::Replace(r) if session.features & FEATURE_MIRROR_LAYOUT == 0 => {
                if let Some(end) = &mut r.end {
                    end.next_base = None;
                }
            }
            _ => {}
        }
        if matches!(item, FeedItem::Truncate(_)) && session.features & FEATURE_TRUNCATE == 0 {
            return Err(DirectError::Local {
                what: "the chunk feed",
                source: format!(
                    "{}: a Truncate on a session without the truncate feature",
                    tp(item.partition())
                )
                .into(),
            });
        }
        let needs = match item {
            FeedItem::LogStart(_) => FEATURE_LOG_START,
            FeedItem::Replace(_) => FEATURE_SEGMENT_REPLACE,
            FeedItem::Progress(_) => FEATURE_SOURCE_PROGRESS,
            FeedItem::Claim(_) => FEATURE_CLUSTER_SHIPPERS,
            _ => 0,
        };
        if session.features & needs != needs {
            // The applier cannot take it: the mirror keeps what the source deleted or rewrote.
            return Ok(());
        }
        if let (FeedItem::Roll(r), false) = (&item, st.cluster) {
            return Err(DirectError::Local {
                what: "the chunk feed",
                source: format!(
                    "a Roll of {} on a session without feature bit 6 (several shippers)",
                    tp(&r.partition)
                )
                .into(),
            });
        }
        if st.cluster && !matches!(item, FeedItem::Claim(_)) {
            let p = item.partition();
            if st.awaiting.contains(p) {
                // Waits for the claim's answer, then is checked against the granted position.
                st.unchecked = true;
                st.pending = Some(item);
                return Ok(());
            }
            if !st.granted.contains(p) {
                if st.lost.contains(p) {
                    tracing::debug!(partition = %tp(p), "dropping an item of a revoked partition");
                    return Ok(());
                }
                return Err(DirectError::Local {
                    what: "the chunk feed",
                    source: format!(
                        "an item of {}, which this shipper never claimed (feature bit 6: claim first)",
                        tp(p)
                    )
                    .into(),
                });
            }
        }
        check_item(&item, &st.tracks, st.window, st.max_payload)?;
        st.pending = Some(item);
        Ok(())
    }

    /// An Ack: never below the previous one, never beyond what was sent; releases the in-flight items it covers
    /// (and the partition, when they held it).
    fn on_ack(
        &mut self,
        tracks: &mut HashMap<PartitionRef, Track>,
        p: Position,
        per_partition: Option<usize>,
    ) -> Result<()> {
        let at = (p.segment_base, p.position);
        let Some(track) = tracks.get_mut(&p.partition) else {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Ack for partition {} at {at:?}, which this session never sent",
                    tp(&p.partition)
                ),
            });
        };
        if track.acked.is_some_and(|prev| at < prev) {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Ack for {} at {at:?} goes backwards, below the previous Ack {:?}: acknowledged positions only move forward",
                    tp(&p.partition),
                    track.acked
                ),
            });
        }
        if track.sent_end.is_none_or(|sent| at > sent) {
            return Err(DirectError::Protocol {
                reason: format!(
                    "Ack for {} at {at:?} is beyond what was sent ({:?})",
                    tp(&p.partition),
                    track.sent_end
                ),
            });
        }
        track.acked = Some(at);
        let was_held = per_partition.is_some_and(|limit| track.unacked.len() >= limit);
        while track.unacked.front().is_some_and(|s| s.end <= at) {
            if let Some(sent) = track.unacked.pop_front() {
                self.stats.in_flight -= sent.cost;
            }
        }
        if was_held && per_partition.is_some_and(|limit| track.unacked.len() < limit) {
            self.feed.hold(&p.partition, false);
        }
        self.stats.acked.insert(p.partition, at);
        Ok(())
    }
}

/// Checks an item from the feed before it is queued: it continues what was sent
/// (a feed bug would otherwise reach the applier as a gap) and it can ever fit.
fn check_item(
    item: &FeedItem,
    tracks: &HashMap<PartitionRef, Track>,
    window: Option<u64>,
    max_payload: u64,
) -> Result<()> {
    let local = |reason: String| DirectError::Local {
        what: "the chunk feed",
        source: reason.into(),
    };
    let name = tp(item.partition());
    if let FeedItem::Chunk(c) = item {
        // Payload: partition (topic string, partition, topic id), segment_base, position, bytes (u32 length + bytes).
        let fixed = (2 + c.partition.topic.len() + 4 + 16 + 8 + 8 + 4) as u64;
        if c.bytes.len() as u64 + fixed > max_payload {
            return Err(local(format!(
                "a {}-byte chunk of {name} does not fit a frame (maximum payload {max_payload} bytes)",
                c.bytes.len()
            )));
        }
    }
    if let Some(window) = window {
        if item.cost() > window {
            return Err(local(format!(
                "a {}-byte item of {name} is larger than the applier's credit window of {window} bytes: it can never be sent",
                item.cost()
            )));
        }
    }
    let sent = tracks.get(item.partition()).and_then(|t| t.sent_end);
    if let FeedItem::Replace(r) = item {
        // Payload: partition, count, bases, position, bytes; the seal part is bounded by the credit check above.
        let fixed = (2 + r.partition.topic.len() + 4 + 16 + 2 + 8 * r.replaced_bases.len() + 8 + 4 + 1) as u64;
        if r.bytes.len() as u64 + fixed > max_payload {
            return Err(local(format!(
                "a {}-byte replacement piece of {name} does not fit a frame (maximum payload {max_payload} bytes)",
                r.bytes.len()
            )));
        }
    }
    if let FeedItem::Truncate(t) = item {
        // Only with nothing of the partition in flight, and only back from what was sent.
        let track = tracks.get(item.partition());
        let at = (t.segment_base, t.position);
        if track.is_some_and(|t| !t.unacked.is_empty()) || sent.is_none_or(|end| at >= end) {
            return Err(local(format!(
                "{name}: a Truncate to {at:?} with {} items in flight and {sent:?} sent: only back from what was sent, with nothing in flight",
                track.map_or(0, |t| t.unacked.len())
            )));
        }
        return Ok(());
    }
    let Some(start) = item.start() else {
        return Ok(()); // a LogStart, a replacement piece, a progress report or a claim continues nothing
    };
    let continues = match (item, sent) {
        (FeedItem::Chunk(c), None) => c.position == 0,
        (FeedItem::Chunk(c), Some(end)) => start == end || (c.segment_base > end.0 && c.position == 0),
        (FeedItem::Seal(_) | FeedItem::Roll(_), Some(end)) => start == end,
        (FeedItem::Seal(_) | FeedItem::Roll(_), None)
        | (
            FeedItem::LogStart(_)
            | FeedItem::Replace(_)
            | FeedItem::Progress(_)
            | FeedItem::Claim(_)
            | FeedItem::Truncate(_),
            _,
        ) => false,
    };
    if !continues {
        return Err(local(format!(
            "{name}: the feed's next item starts at {start:?}, which does not continue what was sent ({sent:?})"
        )));
    }
    Ok(())
}
