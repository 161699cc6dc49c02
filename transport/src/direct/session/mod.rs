//! The session of the direct protocol: what the two sides do with the frames
//! after the handshake (`docs/direct-protocol.md` §5–§6).
//!
//! - [`shipper`]: [`ShipperSession`] receives Resume and Credit, sends Chunks and
//!   SegmentSeals from a [`ChunkFeed`] within the granted credit, and follows Acks.
//! - [`applier`]: [`ApplierSession`] sends Resume from the durable positions a
//!   [`ChunkApplier`] reports, grants credit, applies in order per partition,
//!   refuses gaps, and acknowledges only what the applier made durable.
//! - [`link`]: connections for both roles and both directions (push, pull):
//!   [`link::dial`] with jittered exponential backoff, [`link::listen`] with one
//!   session per link (a second peer is refused `Busy`), refusals that pause.
//! - [`cluster`]: several shippers on one mirror (feature bit 6): a [`Cluster`] shares one [`ChunkApplier`]
//!   between the link's sessions and fences partitions by claim.
//! - [`limiter`]: the shipper's `--max-bandwidth` token bucket.
//!
//! Why the shape: each side reads the peer in one loop and writes through a
//! separate writer task, so a side that is blocked sending (a full TCP window,
//! a stalled link) keeps reading, heartbeats go out while the applier is busy
//! in a slow fsync, and every send is bounded by the idle timeout. Nothing a
//! peer sends can make a side buffer more than one frame per direction plus the
//! credit window (the applier: a group being applied plus the frames read ahead
//! meanwhile, each within the window).

pub mod applier;
pub mod cluster;
pub mod limiter;
pub mod link;
mod read_ahead;
pub mod shipper;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::SplitSink;
use futures::SinkExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

use super::error::{DirectError, FrameError, Result};
use super::frame::{Frame, FrameCodec};
use super::payload::{Chunk, PartitionRef, SegmentReplace, SegmentSeal};

pub use applier::{ApplierSession, ChunkApplier, ClaimDecision, DurablePosition};
pub use cluster::{Cluster, ClusterMember};
pub use shipper::{ChunkFeed, FeedItem, Layouts, LinkMetaWatch, ShipperSession, ShipperStats, MAX_LAYOUT_SEGMENTS};

/// Heartbeat interval: a side that has sent nothing else for this long sends a
/// Heartbeat. 1 s keeps NAT mappings alive (they expire after tens of seconds
/// at the earliest) and lets the peer's idle timeout tell a dead link from a quiet one.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// Idle timeout: a side that has received no frame for this long closes the
/// connection and resumes on a new one; every send is bounded by it too. 10 s
/// is ten missed heartbeats, so a busy but live peer is never cut, while a
/// half-open connection (a NAT that forgot the mapping) is noticed quickly.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Credit window the applier grants: at most this many payload bytes (chunk
/// bytes and inline companion bytes) in flight. 64 MiB is eight of the largest
/// frames, and ~0.5 s of a 1 Gbit/s link: while the applier makes one group
/// durable (an fsync of up to the window's bytes), the shipper can still send
/// the next group, which the applier reads ahead (`read_ahead`); with 16 MiB a
/// catch-up left the disk idle between groups. Still bounds the memory a
/// stalled applier costs either side.
pub const DEFAULT_CREDIT_WINDOW: u64 = 64 << 20;

/// Frames queued for the writer task. Small: the credit window, not this queue,
/// bounds the bytes in flight; the queue only decouples reading from writing.
const OUTBOX_FRAMES: usize = 16;

/// Session settings, the same type for both roles.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub heartbeat_interval: Duration,
    pub idle_timeout: Duration,
    /// Applier: the credit window it grants. Shipper: unused (it takes what it is granted).
    pub credit_window: u64,
    /// Shipper: `--max-bandwidth` in payload bytes per second; `None` for no limit.
    pub max_bandwidth: Option<u64>,
    /// Told what the session moves, for metrics (`--metrics-addr`); `None`: nobody listens.
    pub observer: Option<Arc<dyn SessionObserver>>,
}

/// Watches what a session moves, for metrics (issue 11 item 6). Called on the session's task right after the
/// fact, so an implementation must be quick and never block (atomics, or a lock held for a few field updates, no
/// I/O): the session's throughput is the metrics' cost.
pub trait SessionObserver: Send + Sync + std::fmt::Debug {
    /// Shipper: `item` is handed to the connection (sent, not yet acknowledged).
    fn sent(&self, item: &FeedItem) {
        let _ = item;
    }

    /// Applier: `chunks` are durable and recorded (acknowledged right after).
    fn applied(&self, chunks: &[Chunk]) {
        let _ = chunks;
    }
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            credit_window: DEFAULT_CREDIT_WINDOW,
            max_bandwidth: None,
            observer: None,
        }
    }
}

impl SessionConfig {
    pub(crate) fn check(&self) -> Result<()> {
        let bad = |field, reason: String| Err(DirectError::Config { field, reason });
        if self.heartbeat_interval.is_zero() {
            return bad("heartbeat_interval", "must be above zero".into());
        }
        if self.idle_timeout <= self.heartbeat_interval {
            return bad(
                "idle_timeout",
                format!(
                    "{:?} is not above the heartbeat interval {:?}: a live peer would be cut",
                    self.idle_timeout, self.heartbeat_interval
                ),
            );
        }
        if self.credit_window == 0 {
            return bad("credit_window", "must be above zero".into());
        }
        if self.max_bandwidth == Some(0) {
            return bad("max_bandwidth", "must be above zero (or absent for no limit)".into());
        }
        Ok(())
    }
}

/// How a session ended without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEnd {
    /// This side was asked to stop; it sent Goodbye(shutdown).
    Shutdown,
    /// The peer said Goodbye; `message` is its reason.
    PeerGoodbye {
        reason: super::payload::GoodbyeReason,
        message: String,
    },
}

/// Any byte stream a session runs over: TCP, TLS over TCP, an in-memory pipe.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A boxed [`Io`], so one session type serves plaintext and TLS.
pub type BoxIo = Box<dyn Io>;

/// The framed stream a session runs on (what [`super::handshake()`] returns, boxed).
pub type FramedIo = Framed<BoxIo, FrameCodec>;

/// Bytes an item costs against the credit window: a chunk's bytes, a seal's
/// inline companion bytes. Both sides compute it the same way.
pub fn chunk_cost(chunk: &Chunk) -> u64 {
    chunk.bytes.len() as u64
}

/// See [`chunk_cost`].
pub fn seal_cost(seal: &SegmentSeal) -> u64 {
    seal.companions
        .iter()
        .filter_map(|c| c.inline.as_ref())
        .map(|b| b.len() as u64)
        .sum()
}

/// See [`chunk_cost`]: a replacement piece's bytes plus its inline companion bytes.
pub fn replace_cost(piece: &SegmentReplace) -> u64 {
    let inline: u64 = piece
        .end
        .iter()
        .flat_map(|e| e.companions.iter())
        .filter_map(|c| c.inline.as_ref())
        .map(|b| b.len() as u64)
        .sum();
    piece.bytes.len() as u64 + inline
}

/// A partition for messages: `topic-partition`.
pub(crate) fn tp(p: &PartitionRef) -> String {
    format!("{}-{}", p.topic, p.partition)
}

/// The writer task: sends what the session queues, a Heartbeat after
/// `heartbeat` without anything to send, each write bounded by `timeout`;
/// closes the stream (TLS close_notify, FIN) when the queue is closed.
pub(crate) fn spawn_writer(
    mut sink: SplitSink<FramedIo, Frame>,
    mut rx: mpsc::Receiver<Frame>,
    heartbeat: Duration,
    timeout: Duration,
) -> JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut sequence = 0u64;
        let io = |stage: &'static str, r: std::result::Result<std::result::Result<(), FrameError>, _>| match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(FrameError::Io { kind, message })) => Err(DirectError::Io {
                stage,
                source: std::io::Error::new(kind, message),
            }),
            Ok(Err(e)) => Err(DirectError::from(e)),
            Err(_) => Err(DirectError::Timeout { stage, after: timeout }),
        };
        loop {
            let frame = match tokio::time::timeout(heartbeat, rx.recv()).await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => {
                    sequence += 1;
                    Frame::Heartbeat { sequence }
                }
            };
            io("sending a frame", tokio::time::timeout(timeout, sink.feed(frame)).await)?;
            // Batch what is already queued into one flush.
            while let Ok(frame) = rx.try_recv() {
                io("sending a frame", tokio::time::timeout(timeout, sink.feed(frame)).await)?;
            }
            io("sending a frame", tokio::time::timeout(timeout, sink.flush()).await)?;
        }
        io(
            "closing the connection",
            tokio::time::timeout(timeout, sink.close()).await,
        )
    })
}

/// The receiving half's error as the session reports it.
pub(crate) fn read_error(e: FrameError) -> DirectError {
    match e {
        FrameError::Io { kind, message } => DirectError::Io {
            stage: "reading a frame",
            source: std::io::Error::new(kind, message),
        },
        e => e.into(),
    }
}

/// The writer task ended before the session did: its error, or "closed".
pub(crate) fn writer_ended(r: std::result::Result<Result<()>, tokio::task::JoinError>) -> DirectError {
    match r {
        Ok(Err(e)) => e,
        Ok(Ok(())) => DirectError::Closed {
            stage: "the session (writer stopped)",
        },
        Err(e) => DirectError::Protocol {
            reason: format!("the writer task failed: {e}"),
        },
    }
}

/// Channel to a new writer task.
pub(crate) fn outbox() -> (mpsc::Sender<Frame>, mpsc::Receiver<Frame>) {
    mpsc::channel(OUTBOX_FRAMES)
}

/// Sends Goodbye, closes the queue, waits (bounded by the writer's own
/// timeouts) for the writer to flush and shut the write side down, then reads
/// until the peer closes too (at most `linger`). Why drain: a side that closed
/// its socket with unread bytes in it would answer the peer's next heartbeat
/// with a reset, and a reset can destroy the Goodbye before the peer reads it.
pub(crate) async fn say_goodbye(
    tx: mpsc::Sender<Frame>,
    writer: &mut JoinHandle<Result<()>>,
    stream: &mut futures::stream::SplitStream<FramedIo>,
    linger: Duration,
    reason: super::payload::GoodbyeReason,
    message: String,
) {
    use futures::StreamExt;
    let _ = tx
        .send(Frame::Goodbye(super::payload::Goodbye { reason, message }))
        .await;
    drop(tx);
    let _ = writer.await;
    let _ = tokio::time::timeout(linger, async { while let Some(Ok(_)) = stream.next().await {} }).await;
}
