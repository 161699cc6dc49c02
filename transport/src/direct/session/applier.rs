//! The applier's session: Resume from what is durable, credit, chunks applied
//! in order, Acks only for durable bytes.
//!
//! The mirror itself is behind a [`ChunkApplier`] (the applier crate implements
//! it over the mirror's log dir and catalog). The session owns the order rule:
//! per partition, a chunk must start exactly where the durable bytes end (the
//! first chunk of a later segment at 0). A chunk that ends at or below the
//! durable end was applied before (a resend after a cut): it is compared by
//! the applier and skipped. A chunk that starts beyond the durable end is a
//! gap: a protocol error, never installed; the session says Goodbye(error) and
//! closes, and the next Resume puts both sides right.
//!
//! Shutdown never interrupts an apply: a chunk being made durable is finished
//! first (the applier is never asked to be cancel-safe), then Goodbye goes out.
//!
//! Several shippers (feature bit 6, `docs/direct-protocol.md` §6.1): the Resume lists nothing; a partition is
//! appended to only after this session's Claim of it was granted ([`ChunkApplier::claim`]), and only until a
//! Revoke ([`ChunkApplier::next_revoke`]) or a [`DirectError::Fenced`] from the applier ends the grant. Whatever of
//! a partition this session does not hold is discarded (credit granted back, no Ack, a warning), and the session's
//! other partitions go on: a shipper that lost leadership is not a broken peer. The lock that makes the fence
//! exact (no chunk of the old holder applied after the new holder's grant) is the applier's: see
//! [`super::cluster`].
//!
//! Group commit: when a Chunk arrives, the Chunks already received behind it
//! (decoded without waiting, at most [`MAX_GROUP_CHUNKS`], each within the
//! credit) are applied with it in one [`ChunkApplier::apply_chunks`] call, so
//! an applier makes a group durable with one fsync per file and one state
//! record per partition instead of one of each per chunk. Durability is
//! unchanged: nothing of a group is acknowledged before the call returns (all
//! of it durable), then one Ack per partition at its highest position (the
//! spec allows coalesced Acks) and one Credit of the group's cost. Why: a
//! shipper behind a fast source sends many small chunks, and per-chunk fsyncs
//! made the applier the queue they waited in.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::read_ahead::{Polled, ReadAhead};
use super::{
    chunk_cost, outbox, read_error, replace_cost, say_goodbye, seal_cost, spawn_writer, tp, writer_ended, FramedIo,
    SessionConfig, SessionEnd,
};
use crate::direct::error::{DirectError, Result};
use crate::direct::frame::Frame;
use crate::direct::handshake::Session;
use crate::direct::handshake::{
    FEATURE_CLUSTER_SHIPPERS, FEATURE_LINK_META, FEATURE_LOG_START, FEATURE_MIRROR_LAYOUT, FEATURE_SEGMENT_REPLACE,
    FEATURE_SOURCE_PROGRESS, FEATURE_TRUNCATE, FEATURE_UNCOMMITTED,
};
use crate::direct::link_meta::MetaAssembler;
use crate::direct::payload::{
    Chunk, Claim, ClaimResult, ClaimVerdict, ClaimedAt, Goodbye, GoodbyeReason, LayoutSegment, LogEnd, LogStart,
    MirrorLayout, PartitionRef, Position, Refuse, Revoke, Roll, SegmentReplace, SegmentSeal, SourceProgress, Truncate,
    TruncateMode, MAX_LAYOUT_SEGMENTS_PER_FRAME,
};
use segmirror_contract::link_meta::LinkMeta;

mod order;

use order::{End, Held};

/// Most Chunks applied as one group (see the module doc): bounds the bookkeeping of a group (its bytes are bounded
/// by the credit window already) and how long the first chunk of a group can wait for the others to be written.
/// 64 chunks of a tail's typical tens of KiB are a few MiB, written in a few milliseconds.
pub const MAX_GROUP_CHUNKS: usize = 64;

/// How often a session with stopped partitions asks whether one may be applied again
/// ([`ChunkApplier::writable_again`]): 2 s, so an operator's reset takes effect within seconds while a stopped
/// partition costs one catalog read per interval.
pub const STOPPED_RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// A partition's durable end as the applier reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurablePosition {
    /// Segment and byte position up to which the partition is durable and recorded.
    pub position: Position,
    /// Whether that segment is sealed (its SegmentSeal applied); the position is then its final size.
    pub sealed: bool,
}

/// What the applier decided on a [`Claim`] (feature bit 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Granted and recorded durably; `durable` is where the partition continues (`None`: nothing of it in the
    /// mirror yet) and `end_offset` the offset after the mirror's last batch of it.
    Granted {
        durable: Option<DurablePosition>,
        end_offset: i64,
        /// The stored CRC of the mirror's last batch (the one ending at `end_offset - 1`), when there is one.
        last_batch_crc: Option<u32>,
    },
    /// Another node holds it at `holder_epoch` (or the claim's epoch is below the granted one).
    Refused { holder_node: i32, holder_epoch: i32 },
}

impl ClaimDecision {
    /// The ClaimResult frame of this decision.
    pub fn result(&self, partition: &PartitionRef) -> ClaimResult {
        let verdict = match self {
            ClaimDecision::Granted {
                durable,
                end_offset,
                last_batch_crc,
            } => ClaimVerdict::Granted {
                durable: durable.as_ref().map(|d| ClaimedAt {
                    segment_base: d.position.segment_base,
                    position: d.position.position,
                    end_offset: *end_offset,
                    last_batch_crc: *last_batch_crc,
                }),
            },
            ClaimDecision::Refused {
                holder_node,
                holder_epoch,
            } => ClaimVerdict::Refused {
                holder_node: *holder_node,
                holder_epoch: *holder_epoch,
            },
        };
        ClaimResult {
            partition: partition.clone(),
            verdict,
        }
    }
}

/// The mirror side of the session (the applier crate implements it).
pub trait ChunkApplier: Send + 'static {
    /// Per partition, where the durable bytes end; sent as Resume at the start of every session.
    fn durable_positions(&mut self) -> impl Future<Output = Result<Vec<DurablePosition>>> + Send;

    /// Appends `chunk` (which starts exactly at the partition's durable end, or at
    /// 0 of a later segment) and returns once its bytes are durable and recorded:
    /// the session acknowledges it right after. An error here is never acknowledged.
    fn apply_chunk(&mut self, chunk: &Chunk) -> impl Future<Output = Result<()>> + Send;

    /// Appends `chunks` in order (each starts where the one before it of its partition ends, the first of a
    /// partition at its durable end or at 0 of a later segment) and returns once *all* of them are durable and
    /// recorded: the session acknowledges them right after, none before. On an error none is acknowledged (some
    /// may be durable: the next Resume says how far). The default applies them one by one; an applier that can
    /// make a group durable at once (one fsync per file) overrides it.
    fn apply_chunks(&mut self, chunks: &[Chunk]) -> impl Future<Output = Result<()>> + Send {
        async move {
            for chunk in chunks {
                self.apply_chunk(chunk).await?;
            }
            Ok(())
        }
    }

    /// `chunk` lies entirely within bytes already durable (a resend): compare and
    /// fail when they differ (the source changed under the same position).
    fn check_applied(&mut self, chunk: &Chunk) -> impl Future<Output = Result<()>> + Send;

    /// Seals the segment whose bytes end exactly at `seal.final_size`; returns once durable and recorded.
    fn apply_seal(&mut self, seal: &SegmentSeal) -> impl Future<Output = Result<()>> + Send;

    /// The source's log start moved to `log_start.log_start_offset`: delete (or schedule the deletion of) every
    /// sealed segment wholly below it; returns once that is recorded. Only on sessions that agreed
    /// [`FEATURE_LOG_START`]. The default keeps everything (an applier that does not mirror retention).
    fn apply_log_start(&mut self, log_start: &LogStart) -> impl Future<Output = Result<()>> + Send {
        let _ = log_start;
        async { Ok(()) }
    }

    /// Stages a piece of a compacted replacement; on its last piece (`end` set) validates the whole new file and
    /// installs it in place of the replaced sealed segments. Returns once that is durable. Only on sessions that
    /// agreed [`FEATURE_SEGMENT_REPLACE`]; the default refuses (an applier that does not install replacements).
    fn apply_replace(&mut self, piece: &SegmentReplace) -> impl Future<Output = Result<()>> + Send {
        let reason = format!(
            "SegmentReplace of {}: this applier does not install replacements",
            tp(&piece.partition)
        );
        async move { Err(DirectError::Protocol { reason }) }
    }

    /// The mirror's end per durable position (same order, one each), read off the mirror's own batches: sent with
    /// the Resume on sessions that agreed [`FEATURE_TRUNCATE`]. `None` (the default): this applier does not take
    /// truncations, and the Resume goes without them.
    fn log_ends(&mut self, positions: &[DurablePosition]) -> impl Future<Output = Result<Option<Vec<LogEnd>>>> + Send {
        let _ = positions;
        async { Ok(None) }
    }

    /// The source no longer holds the mirror's bytes from `truncate.truncate_to` on. The session has checked that
    /// `(segment_base, position)` lies below the partition's durable end; the applier checks the rest against its
    /// bytes. In [`TruncateMode::LogEnd`](crate::direct::payload::TruncateMode::LogEnd) it removes them (archived),
    /// and returns the new durable end once that is durable and recorded; in `HighWatermark` mode it records the
    /// divergence, truncates nothing, and returns `None` (the partition stops). Only on sessions that agreed
    /// [`FEATURE_TRUNCATE`]; the default refuses.
    fn apply_truncate(&mut self, truncate: &Truncate) -> impl Future<Output = Result<Option<Position>>> + Send {
        let reason = format!(
            "Truncate of {} to offset {}: this applier does not truncate",
            tp(&truncate.partition),
            truncate.truncate_to
        );
        async move { Err(DirectError::Protocol { reason }) }
    }

    /// Per partition, the mirror's sealed segments (base, `.log` size, bases increasing); sent as MirrorLayout
    /// frames right after Resume on sessions that agreed [`FEATURE_MIRROR_LAYOUT`], for every partition of the
    /// Resume (one missing here goes as an empty list). Called after [`ChunkApplier::durable_positions`]. The
    /// default knows none.
    fn mirror_layout(&mut self) -> impl Future<Output = Result<Vec<(PartitionRef, Vec<LayoutSegment>)>>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Where the source stands (its log end, high watermark, active segment size, the shipper's clock): record it
    /// for lag reporting, with the shipper's bound (`upto`: [`TruncateMode::LogEnd`] on sessions that agreed
    /// [`FEATURE_UNCOMMITTED`], so what the mirror holds past the reported high watermark may not be committed).
    /// Advisory, so an applier may lose it; only on sessions that agreed [`FEATURE_SOURCE_PROGRESS`]. The default
    /// ignores it.
    fn apply_progress(
        &mut self,
        progress: &SourceProgress,
        upto: TruncateMode,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (progress, upto);
        async { Ok(()) }
    }

    /// Feature bit 8: a complete version of the link's metadata (the source's topics and its groups' committed
    /// offsets), its documents' digests checked and validated against the session's link. Record it (an offset is
    /// never made committable beyond what is installed: the catalog's rule) or drop it; advisory like a progress
    /// report, so an applier may log a failure and return `Ok`. The default ignores it.
    fn apply_link_meta(&mut self, meta: LinkMeta) -> impl Future<Output = Result<()>> + Send {
        let _ = meta;
        async { Ok(()) }
    }

    /// Feature bit 6: shipper `node` claims a partition at `claim.leader_epoch`. Grants when the epoch is above the
    /// highest granted one, or equal to it from the same node; records the grant durably before returning (so a
    /// restarted applier fences too). The default refuses (an applier that does not arbitrate claims).
    fn claim(&mut self, node: i32, claim: &Claim) -> impl Future<Output = Result<ClaimDecision>> + Send {
        let reason = format!(
            "Claim of {} by node {node}: this applier does not arbitrate claims",
            tp(&claim.partition)
        );
        async move { Err(DirectError::Protocol { reason }) }
    }

    /// Feature bit 6: the mirror segment ends at `roll.final_size` (the durable end) where no broker file ends;
    /// check it, build its companions from its batches and seal it; returns once durable and recorded. The
    /// default refuses.
    fn apply_roll(&mut self, roll: &Roll) -> impl Future<Output = Result<()>> + Send {
        let reason = format!("Roll of {}: this applier does not build segments", tp(&roll.partition));
        async move { Err(DirectError::Protocol { reason }) }
    }

    /// Whether any of `stopped` (partitions this session stopped on a [`DirectError::PartitionStopped`]) may be
    /// applied again: an operator reset or resumed it. Asked every [`STOPPED_RECHECK`] while any is stopped; `true`
    /// ends the session so that the next one resumes them. The default: never.
    fn writable_again(&mut self, stopped: &[PartitionRef]) -> impl Future<Output = Result<bool>> + Send {
        let _ = stopped;
        async { Ok(false) }
    }

    /// Feature bit 6, several sessions on one mirror: the next grant of another session that displaced a claim of
    /// this one. Cancel-safe (the session drops it when a frame comes first). The default never yields (one
    /// session: nobody displaces it).
    fn next_revoke(&mut self) -> impl Future<Output = Revoke> + Send {
        std::future::pending()
    }
}

/// The applier's side of sessions on one link; lives across connections.
pub struct ApplierSession<A> {
    applier: A,
    config: SessionConfig,
}

impl<A: ChunkApplier> ApplierSession<A> {
    pub fn new(applier: A, config: SessionConfig) -> Result<ApplierSession<A>> {
        config.check()?;
        Ok(ApplierSession { applier, config })
    }

    pub fn applier(&self) -> &A {
        &self.applier
    }

    pub fn applier_mut(&mut self) -> &mut A {
        &mut self.applier
    }

    pub fn into_applier(self) -> A {
        self.applier
    }

    /// Runs one session on `framed` (after the handshake) until shutdown, the
    /// peer's Goodbye, or an error.
    pub async fn run(
        &mut self,
        framed: FramedIo,
        session: &Session,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd> {
        let idle = self.config.idle_timeout;
        let (stream, sink) = super::split(framed);
        let mut stream = ReadAhead::new(stream, self.config.credit_window);
        let (tx, rx) = outbox();
        let mut writer = spawn_writer(sink, rx, self.config.heartbeat_interval, idle);

        let (mut st, first) = self.resume(session).await?;
        for frame in first {
            if tx.send(frame).await.is_err() {
                return Err(writer_ended(writer.await));
            }
        }
        let mut last_recv = Instant::now();
        st.recheck = Instant::now() + STOPPED_RECHECK;
        loop {
            let polled = match st.stashed.take() {
                Some(polled) => polled,
                None => tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => {
                        say_goodbye(tx, &mut writer, stream.inner_mut(), idle, GoodbyeReason::Shutdown, "applier shutting down".into()).await;
                        return Ok(SessionEnd::Shutdown);
                    }
                    frame = stream.next() => frame,
                    // After the frames: a Goodbye already received explains a writer that failed.
                    r = &mut writer => return Err(writer_ended(r)),
                    _ = tokio::time::sleep_until(last_recv + idle) => {
                        return Err(DirectError::Timeout { stage: "streaming (no frame from the shipper)", after: idle });
                    }
                    _ = tokio::time::sleep_until(st.recheck), if !st.held.stopped.is_empty() => {
                        st.recheck = Instant::now() + STOPPED_RECHECK;
                        if let Err(e) = self.recheck_stopped(&st.held).await {
                            return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
                        }
                        continue;
                    }
                    revoke = self.applier.next_revoke() => {
                        if tx.send(st.on_revoke(revoke)).await.is_err() {
                            return Err(writer_ended(writer.await));
                        }
                        continue;
                    }
                },
            };
            last_recv = Instant::now();
            let frame = match polled {
                None => return Err(DirectError::Closed { stage: "streaming" }),
                Some(Err(e)) => return Err(read_error(e)),
                Some(Ok(frame)) => frame,
            };
            let cost = match &frame {
                Frame::Chunk(c) => chunk_cost(c),
                Frame::SegmentSeal(s) => seal_cost(s),
                Frame::SegmentReplace(r) => replace_cost(r),
                _ => 0,
            };
            if cost > st.outstanding {
                let e = DirectError::Protocol {
                    reason: format!(
                        "a {} of {cost} bytes exceeds the {} bytes of credit the shipper holds; not applied",
                        frame.name(),
                        st.outstanding
                    ),
                };
                return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
            }
            // Granted back in the reply, once applied (or found applied before).
            st.outstanding -= cost;
            let replies = match self.on_frame(session, &mut st, &mut stream, frame).await {
                Ok(Step::Reply(replies)) => replies,
                Ok(Step::Quiet) => continue,
                Ok(Step::PeerGoodbye(g)) => {
                    drop(tx);
                    let _ = writer.await;
                    return Ok(SessionEnd::PeerGoodbye {
                        reason: g.reason,
                        message: g.message,
                    });
                }
                Ok(Step::PeerRefused(r)) => {
                    return Err(DirectError::RefusedByPeer {
                        reason: r.reason,
                        local_role: session.role,
                        peer_role: session.role.peer(),
                        message: r.message,
                    })
                }
                Err(e) => return Err(fail(tx, &mut writer, &mut stream, idle, e).await),
            };
            for frame in replies {
                if let Frame::Credit { bytes } = frame {
                    st.outstanding += bytes;
                }
                if tx.send(frame).await.is_err() {
                    return Err(writer_ended(writer.await));
                }
            }
        }
    }

    /// The session's start: what is durable (called in every session: an applier puts its files right there, a
    /// crash's leftovers), and the frames that open the stream: Resume (with the log ends when agreed), the mirror's
    /// layout (when agreed) and the first Credit. Feature bit 6: nothing is resumed, every partition is claimed
    /// first.
    async fn resume(&mut self, session: &Session) -> Result<(Streaming, Vec<Frame>)> {
        let cluster = session.features & FEATURE_CLUSTER_SHIPPERS != 0;
        let mut durable = self.applier.durable_positions().await?;
        if cluster {
            durable.clear();
        }
        let mut st = Streaming {
            cluster,
            node: session.peer.shipper_node_id.unwrap_or(-1),
            held: Held {
                cluster,
                claimed: HashSet::new(),
                stopped: HashSet::new(),
            },
            ends: HashMap::new(),
            outstanding: self.config.credit_window,
            stashed: None,
            meta: MetaAssembler::new(&session.link),
            recheck: Instant::now() + STOPPED_RECHECK,
        };
        for d in &durable {
            st.ends.insert(
                d.position.partition.clone(),
                End {
                    segment_base: d.position.segment_base,
                    position: d.position.position,
                    sealed: d.sealed,
                },
            );
        }
        let resumed: Vec<PartitionRef> = durable.iter().map(|d| d.position.partition.clone()).collect();
        let log_ends = if session.features & FEATURE_TRUNCATE != 0 && !durable.is_empty() {
            self.applier.log_ends(&durable).await?
        } else {
            None
        };
        let positions: Vec<Position> = durable.into_iter().map(|d| d.position).collect();
        let resume = match log_ends {
            Some(ends) if ends.len() == positions.len() => Frame::ResumeWithEnds { positions, ends },
            Some(ends) => {
                return Err(DirectError::Local {
                    what: "the mirror's log ends",
                    source: format!("{} log ends for {} durable positions", ends.len(), positions.len()).into(),
                })
            }
            None => Frame::Resume(positions),
        };
        let mut first = vec![resume];
        if session.features & FEATURE_MIRROR_LAYOUT != 0 {
            let layout = self.applier.mirror_layout().await?;
            first.extend(layout_frames(&resumed, layout));
        }
        first.push(Frame::Credit {
            bytes: self.config.credit_window,
        });
        Ok((st, first))
    }

    /// Whether a partition stopped in this session may be applied again (the applier says so): then the session
    /// ends as a resync, so that the next one resumes it from what is durable.
    async fn recheck_stopped(&mut self, held: &Held) -> Result<()> {
        let list: Vec<PartitionRef> = held.stopped.iter().cloned().collect();
        if self.applier.writable_again(&list).await? {
            let names: Vec<String> = list.iter().map(tp).collect();
            return Err(DirectError::Resync {
                reason: format!("a stopped partition of {} may be applied again", names.join(", ")),
            });
        }
        Ok(())
    }

    /// What one frame from the shipper does. An error is this session's end: the caller says Goodbye(error).
    async fn on_frame(
        &mut self,
        session: &Session,
        st: &mut Streaming,
        stream: &mut ReadAhead,
        frame: Frame,
    ) -> Result<Step> {
        let replies = match frame {
            Frame::Heartbeat { .. } => return Ok(Step::Quiet),
            Frame::Goodbye(g) => return Ok(Step::PeerGoodbye(g)),
            Frame::Refuse(r) => return Ok(Step::PeerRefused(r)),
            Frame::Chunk(chunk) => self.on_chunk_frame(st, stream, chunk).await?,
            Frame::SegmentSeal(seal) if !st.held.applies(&seal.partition) => {
                st.held.discard("SegmentSeal", &seal.partition);
                vec![Frame::Credit {
                    bytes: seal_cost(&seal),
                }]
            }
            Frame::SegmentSeal(seal) => match stream.during(self.on_seal(&mut st.ends, &seal)).await {
                Ok(replies) => replies,
                Err(e) if st.held.is_refusal(&e) => {
                    st.held.drop_partition(&mut st.ends, e, "SegmentSeal");
                    vec![Frame::Credit {
                        bytes: seal_cost(&seal),
                    }]
                }
                Err(e) => return Err(e),
            },
            Frame::Claim(c) if st.cluster => self.on_claim(st, &c).await?,
            Frame::Roll(roll) if st.cluster && !st.held.applies(&roll.partition) => {
                st.held.discard("Roll", &roll.partition);
                return Ok(Step::Quiet);
            }
            Frame::Roll(roll) if st.cluster => match self.on_roll(&mut st.ends, &roll).await {
                Ok(replies) => replies,
                Err(e) if st.held.is_refusal(&e) => {
                    st.held.drop_partition(&mut st.ends, e, "Roll");
                    return Ok(Step::Quiet);
                }
                Err(e) => return Err(e),
            },
            Frame::LogStart(l) if !st.held.applies(&l.partition) => {
                st.held.discard("LogStart", &l.partition);
                return Ok(Step::Quiet);
            }
            Frame::SegmentReplace(piece) if !st.held.applies(&piece.partition) => {
                st.held.discard("SegmentReplace", &piece.partition);
                vec![Frame::Credit {
                    bytes: replace_cost(&piece),
                }]
            }
            // Advisory: a report of a partition another shipper holds is not this one's to make.
            Frame::SourceProgress(p) if !st.held.applies(&p.partition) => return Ok(Step::Quiet),
            Frame::Truncate(t) if !st.held.applies(&t.partition) => {
                st.held.discard("Truncate", &t.partition);
                return Ok(Step::Quiet);
            }
            Frame::LogStart(l) if session.features & FEATURE_LOG_START != 0 => {
                // No position moves: nothing to acknowledge, no credit was taken.
                match self.applier.apply_log_start(&l).await {
                    Ok(()) => {}
                    Err(e) if st.held.is_refusal(&e) => st.held.drop_partition(&mut st.ends, e, "LogStart"),
                    Err(e) => return Err(e),
                }
                return Ok(Step::Quiet);
            }
            Frame::SourceProgress(p) if session.features & FEATURE_SOURCE_PROGRESS != 0 => {
                // Advisory: no position, no credit, no Ack.
                let upto = if session.features & FEATURE_UNCOMMITTED != 0 {
                    TruncateMode::LogEnd
                } else {
                    TruncateMode::HighWatermark
                };
                self.applier.apply_progress(&p, upto).await?;
                return Ok(Step::Quiet);
            }
            Frame::LinkMeta(piece) if session.features & FEATURE_LINK_META != 0 => {
                // No position, no credit, no Ack: a version lost with the connection is sent again at the next
                // session's start.
                if let Some(version) = st.meta.accept(piece)? {
                    self.applier.apply_link_meta(version).await?;
                }
                return Ok(Step::Quiet);
            }
            Frame::Truncate(t) if session.features & FEATURE_TRUNCATE != 0 => {
                // No credit was taken and no Ack follows: the shipper moved its own position when it sent it.
                match self.on_truncate(&mut st.ends, &t).await {
                    Ok(()) => {}
                    Err(e) if st.held.is_refusal(&e) => st.held.drop_partition(&mut st.ends, e, "Truncate"),
                    Err(e) => return Err(e),
                }
                return Ok(Step::Quiet);
            }
            Frame::SegmentReplace(piece) if session.features & FEATURE_SEGMENT_REPLACE != 0 => {
                // No position moves: no Ack; the credit comes back once the piece is durable.
                match self.applier.apply_replace(&piece).await {
                    Ok(()) => {}
                    Err(e) if st.held.is_refusal(&e) => st.held.drop_partition(&mut st.ends, e, "SegmentReplace"),
                    Err(e) => return Err(e),
                }
                vec![Frame::Credit {
                    bytes: replace_cost(&piece),
                }]
            }
            other => {
                return Err(DirectError::UnexpectedFrame {
                    stage: "streaming",
                    expected: "Chunk, SegmentSeal, LogStart, SegmentReplace, SourceProgress, Claim, Roll, Truncate or LinkMeta (when agreed), Heartbeat or Goodbye",
                    got: other.name(),
                })
            }
        };
        Ok(Step::Reply(replies))
    }

    /// A Chunk, and the Chunks already received behind it (each within the credit) as one group: those of
    /// partitions this session does not hold (or stopped) are discarded, their credit granted back; the rest are
    /// applied together ([`Self::on_chunks`]).
    async fn on_chunk_frame(&mut self, st: &mut Streaming, stream: &mut ReadAhead, chunk: Chunk) -> Result<Vec<Frame>> {
        let mut group = vec![chunk];
        while group.len() < MAX_GROUP_CHUNKS {
            match stream.now() {
                None => break,
                Some(Some(Ok(Frame::Chunk(next)))) if chunk_cost(&next) <= st.outstanding => {
                    st.outstanding -= chunk_cost(&next);
                    group.push(next);
                }
                // Anything else (the stream's end or error too) comes after the group is applied.
                Some(other) => {
                    st.stashed = Some(other);
                    break;
                }
            }
        }
        let mut credit = 0;
        group.retain(|c| {
            let applies = st.held.applies(&c.partition);
            if !applies {
                credit += chunk_cost(c);
                st.held.discard("Chunk", &c.partition);
            }
            applies
        });
        let mut replies = stream.during(self.on_chunks(&mut st.ends, &mut st.held, group)).await?;
        if let Some(Frame::Credit { bytes }) = replies.last_mut() {
            *bytes += credit;
        }
        Ok(replies)
    }

    /// A Claim (feature bit 6): the applier decides; a grant makes the partition this session's from the durable
    /// end the applier reports, a refusal forgets it.
    async fn on_claim(&mut self, st: &mut Streaming, c: &Claim) -> Result<Vec<Frame>> {
        let decision = self.applier.claim(st.node, c).await?;
        match &decision {
            ClaimDecision::Granted { durable, .. } => {
                st.held.claimed.insert(c.partition.clone());
                match durable {
                    Some(d) => {
                        st.ends.insert(
                            c.partition.clone(),
                            End {
                                segment_base: d.position.segment_base,
                                position: d.position.position,
                                sealed: d.sealed,
                            },
                        );
                    }
                    None => {
                        st.ends.remove(&c.partition);
                    }
                }
            }
            ClaimDecision::Refused { .. } => {
                st.held.claimed.remove(&c.partition);
                st.ends.remove(&c.partition);
            }
        }
        Ok(vec![Frame::ClaimResult(decision.result(&c.partition))])
    }
}

/// The state of one session's stream, between frames.
struct Streaming {
    /// Feature bit 6: several shippers, partitions claimed.
    cluster: bool,
    /// The shipper's broker (feature bit 6), -1 without.
    node: i32,
    held: Held,
    ends: HashMap<PartitionRef, End>,
    /// Credit the shipper still holds: a Chunk or SegmentSeal beyond it breaks the flow control.
    outstanding: u64,
    /// What the stream yielded after a group of chunks (the frame that ended the group, or the stream's end).
    stashed: Option<Polled>,
    /// Feature bit 8: the link metadata version being received.
    meta: MetaAssembler,
    /// When to ask again whether a stopped partition may be applied.
    recheck: Instant,
}

impl Streaming {
    /// Another shipper's claim displaced this session's: the partition is no longer this session's; the Revoke to
    /// send the shipper.
    fn on_revoke(&mut self, revoke: Revoke) -> Frame {
        tracing::warn!(
            partition = %tp(&revoke.partition), holder = revoke.holder_node, epoch = revoke.holder_epoch,
            "another shipper's claim displaced this session's: revoked"
        );
        self.held.claimed.remove(&revoke.partition);
        self.ends.remove(&revoke.partition);
        Frame::Revoke(revoke)
    }
}

/// What the session does after one frame.
enum Step {
    /// Send these (Acks, Credit, a ClaimResult).
    Reply(Vec<Frame>),
    /// Nothing to send.
    Quiet,
    /// The shipper said Goodbye.
    PeerGoodbye(Goodbye),
    /// The shipper refused this side.
    PeerRefused(Refuse),
}

/// The MirrorLayout frames of the partitions of a Resume, in its order: each partition's sealed segments in frames
/// of at most [`MAX_LAYOUT_SEGMENTS_PER_FRAME`], the last one flagged (an empty list is one empty, flagged frame).
fn layout_frames(resumed: &[PartitionRef], mut layout: Vec<(PartitionRef, Vec<LayoutSegment>)>) -> Vec<Frame> {
    let mut frames = Vec::new();
    for partition in resumed {
        let segments = layout
            .iter_mut()
            .find(|(p, _)| p == partition)
            .map(|(_, s)| std::mem::take(s))
            .unwrap_or_default();
        let mut pieces = segments.chunks(MAX_LAYOUT_SEGMENTS_PER_FRAME).peekable();
        if pieces.peek().is_none() {
            frames.push(Frame::MirrorLayout(MirrorLayout {
                partition: partition.clone(),
                last: true,
                segments: Vec::new(),
            }));
        }
        while let Some(piece) = pieces.next() {
            frames.push(Frame::MirrorLayout(MirrorLayout {
                partition: partition.clone(),
                last: pieces.peek().is_none(),
                segments: piece.to_vec(),
            }));
        }
    }
    frames
}

/// Tells the shipper why (Goodbye(error)), closes, and returns the error.
async fn fail(
    tx: tokio::sync::mpsc::Sender<Frame>,
    writer: &mut tokio::task::JoinHandle<Result<()>>,
    stream: &mut ReadAhead,
    linger: std::time::Duration,
    e: DirectError,
) -> DirectError {
    say_goodbye(
        tx,
        writer,
        stream.inner_mut(),
        linger,
        GoodbyeReason::Error,
        e.to_string(),
    )
    .await;
    e
}
