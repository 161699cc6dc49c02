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

use std::collections::HashMap;
use std::future::Future;

use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    chunk_cost, outbox, read_error, replace_cost, say_goodbye, seal_cost, spawn_writer, tp, writer_ended, FramedIo,
    SessionConfig, SessionEnd,
};
use crate::direct::error::{DirectError, Result};
use crate::direct::frame::Frame;
use crate::direct::handshake::Session;
use crate::direct::handshake::{
    FEATURE_LOG_START, FEATURE_MIRROR_LAYOUT, FEATURE_SEGMENT_REPLACE, FEATURE_SOURCE_PROGRESS,
};
use crate::direct::payload::{
    Chunk, GoodbyeReason, LayoutSegment, LogStart, MirrorLayout, PartitionRef, Position, SegmentReplace, SegmentSeal,
    SourceProgress, MAX_LAYOUT_SEGMENTS_PER_FRAME,
};

/// Most Chunks applied as one group (see the module doc): bounds the bookkeeping of a group (its bytes are bounded
/// by the credit window already) and how long the first chunk of a group can wait for the others to be written.
/// 64 chunks of a tail's typical tens of KiB are a few MiB, written in a few milliseconds.
pub const MAX_GROUP_CHUNKS: usize = 64;

/// A partition's durable end as the applier reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurablePosition {
    /// Segment and byte position up to which the partition is durable and recorded.
    pub position: Position,
    /// Whether that segment is sealed (its SegmentSeal applied); the position is then its final size.
    pub sealed: bool,
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

    /// Per partition, the mirror's sealed segments (base, `.log` size, bases increasing); sent as MirrorLayout
    /// frames right after Resume on sessions that agreed [`FEATURE_MIRROR_LAYOUT`], for every partition of the
    /// Resume (one missing here goes as an empty list). Called after [`ChunkApplier::durable_positions`]. The
    /// default knows none.
    fn mirror_layout(&mut self) -> impl Future<Output = Result<Vec<(PartitionRef, Vec<LayoutSegment>)>>> + Send {
        async { Ok(Vec::new()) }
    }

    /// Where the source stands (its log end, high watermark, active segment size, the shipper's clock): record it
    /// for lag reporting. Advisory, so an applier may lose it; only on sessions that agreed
    /// [`FEATURE_SOURCE_PROGRESS`]. The default ignores it.
    fn apply_progress(&mut self, progress: &SourceProgress) -> impl Future<Output = Result<()>> + Send {
        let _ = progress;
        async { Ok(()) }
    }
}

/// Per-partition durable end within a session.
#[derive(Debug, Clone, Copy)]
struct End {
    segment_base: i64,
    position: u64,
    sealed: bool,
}

/// What the session does with one chunk.
enum Verdict {
    Apply,
    AlreadyApplied,
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
        let (sink, mut stream) = framed.split();
        let (tx, rx) = outbox();
        let mut writer = spawn_writer(sink, rx, self.config.heartbeat_interval, idle);

        let durable = self.applier.durable_positions().await?;
        let mut ends: HashMap<PartitionRef, End> = HashMap::new();
        for d in &durable {
            ends.insert(
                d.position.partition.clone(),
                End {
                    segment_base: d.position.segment_base,
                    position: d.position.position,
                    sealed: d.sealed,
                },
            );
        }
        let resumed: Vec<PartitionRef> = durable.iter().map(|d| d.position.partition.clone()).collect();
        let resume = Frame::Resume(durable.into_iter().map(|d| d.position).collect());
        let mut first = vec![resume];
        if session.features & FEATURE_MIRROR_LAYOUT != 0 {
            let layout = self.applier.mirror_layout().await?;
            first.extend(layout_frames(&resumed, layout));
        }
        first.push(Frame::Credit {
            bytes: self.config.credit_window,
        });
        for frame in first {
            if tx.send(frame).await.is_err() {
                return Err(writer_ended(writer.await));
            }
        }

        // Credit the shipper still holds: a Chunk or SegmentSeal beyond it breaks the flow control.
        let mut outstanding = self.config.credit_window;
        let mut last_recv = Instant::now();
        // What the stream yielded after a group of chunks (the frame that ended the group, or the stream's end).
        let mut stashed = None;
        loop {
            let polled = match stashed.take() {
                Some(polled) => polled,
                None => tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => {
                        say_goodbye(tx, &mut writer, &mut stream, idle, GoodbyeReason::Shutdown, "applier shutting down".into()).await;
                        return Ok(SessionEnd::Shutdown);
                    }
                    frame = stream.next() => frame,
                    // After the frames: a Goodbye already received explains a writer that failed.
                    r = &mut writer => return Err(writer_ended(r)),
                    _ = tokio::time::sleep_until(last_recv + idle) => {
                        return Err(DirectError::Timeout { stage: "streaming (no frame from the shipper)", after: idle });
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
            if cost > outstanding {
                let e = DirectError::Protocol {
                    reason: format!(
                        "a {} of {cost} bytes exceeds the {outstanding} bytes of credit the shipper holds; not applied",
                        frame.name()
                    ),
                };
                return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
            }
            // Granted back in the reply, once applied (or found applied before).
            outstanding -= cost;
            let replies = match frame {
                Frame::Heartbeat { .. } => continue,
                Frame::Goodbye(g) => {
                    drop(tx);
                    let _ = writer.await;
                    return Ok(SessionEnd::PeerGoodbye {
                        reason: g.reason,
                        message: g.message,
                    });
                }
                Frame::Refuse(r) => {
                    return Err(DirectError::RefusedByPeer {
                        reason: r.reason,
                        local_role: session.role,
                        peer_role: session.role.peer(),
                        message: r.message,
                    })
                }
                Frame::Chunk(chunk) => {
                    // The group: the chunks already received behind this one, each within the credit.
                    let mut group = vec![chunk];
                    while group.len() < MAX_GROUP_CHUNKS {
                        match stream.next().now_or_never() {
                            None => break,
                            Some(Some(Ok(Frame::Chunk(next)))) if chunk_cost(&next) <= outstanding => {
                                outstanding -= chunk_cost(&next);
                                group.push(next);
                            }
                            // Anything else (the stream's end or error too) comes after the group is applied.
                            Some(other) => {
                                stashed = Some(other);
                                break;
                            }
                        }
                    }
                    match self.on_chunks(&mut ends, group).await {
                        Ok(replies) => replies,
                        Err(e) => return Err(fail(tx, &mut writer, &mut stream, idle, e).await),
                    }
                }
                Frame::SegmentSeal(seal) => match self.on_seal(&mut ends, &seal).await {
                    Ok(replies) => replies,
                    Err(e) => return Err(fail(tx, &mut writer, &mut stream, idle, e).await),
                },
                Frame::LogStart(l) if session.features & FEATURE_LOG_START != 0 => {
                    // No position moves: nothing to acknowledge, no credit was taken.
                    if let Err(e) = self.applier.apply_log_start(&l).await {
                        return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
                    }
                    continue;
                }
                Frame::SourceProgress(p) if session.features & FEATURE_SOURCE_PROGRESS != 0 => {
                    // Advisory: no position, no credit, no Ack.
                    if let Err(e) = self.applier.apply_progress(&p).await {
                        return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
                    }
                    continue;
                }
                Frame::SegmentReplace(piece) if session.features & FEATURE_SEGMENT_REPLACE != 0 => {
                    // No position moves: no Ack; the credit comes back once the piece is durable.
                    if let Err(e) = self.applier.apply_replace(&piece).await {
                        return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
                    }
                    vec![Frame::Credit {
                        bytes: replace_cost(&piece),
                    }]
                }
                other => {
                    let e = DirectError::UnexpectedFrame {
                        stage: "streaming",
                        expected: "Chunk, SegmentSeal, LogStart, SegmentReplace or SourceProgress (when agreed), Heartbeat or Goodbye",
                        got: other.name(),
                    };
                    return Err(fail(tx, &mut writer, &mut stream, idle, e).await);
                }
            };
            for frame in replies {
                if let Frame::Credit { bytes } = frame {
                    outstanding += bytes;
                }
                if tx.send(frame).await.is_err() {
                    return Err(writer_ended(writer.await));
                }
            }
        }
    }

    /// Applies a group of chunks (see the module doc): each judged against the durable ends as the chunks before
    /// it leave them; resends are compared once every chunk before them is applied.
    async fn on_chunks(&mut self, ends: &mut HashMap<PartitionRef, End>, group: Vec<Chunk>) -> Result<Vec<Frame>> {
        let mut credit = 0u64;
        let mut acks: Vec<Position> = Vec::new();
        let mut batch: Vec<Chunk> = Vec::with_capacity(group.len());
        for chunk in group {
            credit += chunk_cost(&chunk);
            match verdict(ends, &chunk)? {
                Verdict::Apply => {
                    let (base, end) = (chunk.segment_base, chunk.position + chunk.bytes.len() as u64);
                    // `ends` runs ahead of what is durable only until the batch is applied; an error ends the
                    // session, and with it `ends`.
                    ends.insert(
                        chunk.partition.clone(),
                        End {
                            segment_base: base,
                            position: end,
                            sealed: false,
                        },
                    );
                    batch.push(chunk);
                }
                Verdict::AlreadyApplied => {
                    self.apply_batch(&mut batch, &mut acks).await?;
                    self.applier.check_applied(&chunk).await?;
                }
            }
        }
        self.apply_batch(&mut batch, &mut acks).await?;
        let mut replies: Vec<Frame> = acks.into_iter().map(Frame::Ack).collect();
        replies.push(Frame::Credit { bytes: credit });
        Ok(replies)
    }

    /// Makes `batch` durable, then notes one Ack per partition at its highest position (in `acks`, in the order
    /// the partitions first appear).
    async fn apply_batch(&mut self, batch: &mut Vec<Chunk>, acks: &mut Vec<Position>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.applier.apply_chunks(batch).await?;
        for chunk in batch.drain(..) {
            let at = Position {
                partition: chunk.partition,
                segment_base: chunk.segment_base,
                position: chunk.position + chunk.bytes.len() as u64,
            };
            match acks.iter_mut().find(|a| a.partition == at.partition) {
                Some(prev) => *prev = at,
                None => acks.push(at),
            }
        }
        Ok(())
    }

    async fn on_seal(&mut self, ends: &mut HashMap<PartitionRef, End>, seal: &SegmentSeal) -> Result<Vec<Frame>> {
        let name = tp(&seal.partition);
        let credit = Frame::Credit { bytes: seal_cost(seal) };
        let Some(d) = ends.get(&seal.partition).copied() else {
            return Err(DirectError::Protocol {
                reason: format!(
                    "SegmentSeal of {name} segment {}: nothing of the partition is durable; not applied",
                    seal.segment_base
                ),
            });
        };
        if d.segment_base != seal.segment_base || d.position != seal.final_size {
            return Err(DirectError::Protocol {
                reason: format!(
                    "SegmentSeal of {name} segment {} at final size {}: the durable bytes end at segment {} position {}; not applied",
                    seal.segment_base, seal.final_size, d.segment_base, d.position
                ),
            });
        }
        if d.sealed {
            // Sealed before (a resend after a cut): nothing to do.
            return Ok(vec![credit]);
        }
        self.applier.apply_seal(seal).await?;
        ends.insert(seal.partition.clone(), End { sealed: true, ..d });
        let ack = Frame::Ack(Position {
            partition: seal.partition.clone(),
            segment_base: seal.segment_base,
            position: seal.final_size,
        });
        Ok(vec![ack, credit])
    }
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

/// What the session does with `chunk`, given the partitions' durable ends (see the module doc); a gap is an error.
fn verdict(ends: &HashMap<PartitionRef, End>, chunk: &Chunk) -> Result<Verdict> {
    let name = tp(&chunk.partition);
    let len = chunk.bytes.len() as u64;
    let start = (chunk.segment_base, chunk.position);
    let end = (chunk.segment_base, chunk.position + len);
    let gap = |reason: String| DirectError::Protocol {
        reason: format!(
            "Chunk of {name} at segment {} position {}: {reason}; not applied",
            start.0, start.1
        ),
    };
    let verdict = match ends.get(&chunk.partition) {
        None if chunk.position == 0 => Verdict::Apply,
        None => {
            return Err(gap(
                "nothing of the partition is durable, a first chunk must start at 0".into(),
            ))
        }
        Some(d) => {
            let durable = (d.segment_base, d.position);
            if chunk.segment_base == d.segment_base {
                if start == durable && !d.sealed {
                    Verdict::Apply
                } else if end <= durable {
                    Verdict::AlreadyApplied
                } else if start > durable {
                    return Err(gap(format!("a gap: the durable bytes end at {}", d.position)));
                } else if d.sealed {
                    return Err(gap(format!("the segment is sealed at {}", d.position)));
                } else {
                    return Err(gap(format!(
                        "it straddles the durable end {} (a resend must start at a chunk boundary)",
                        d.position
                    )));
                }
            } else if chunk.segment_base > d.segment_base {
                if chunk.position != 0 {
                    return Err(gap(format!(
                        "a gap: the first chunk of a new segment must start at 0 (durable: segment {} position {})",
                        d.segment_base, d.position
                    )));
                }
                // A later segment: after a seal, or a retention gap the applier's succession rule judges.
                Verdict::Apply
            } else {
                return Err(gap(format!(
                    "segment {} is older than the durable segment {}",
                    chunk.segment_base, d.segment_base
                )));
            }
        }
    };
    Ok(verdict)
}

/// Tells the shipper why (Goodbye(error)), closes, and returns the error.
async fn fail(
    tx: tokio::sync::mpsc::Sender<Frame>,
    writer: &mut tokio::task::JoinHandle<Result<()>>,
    stream: &mut futures::stream::SplitStream<FramedIo>,
    linger: std::time::Duration,
    e: DirectError,
) -> DirectError {
    say_goodbye(tx, writer, stream, linger, GoodbyeReason::Error, e.to_string()).await;
    e
}
