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

use std::io::IoSlice;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::{Framed, FramedParts};

use super::error::{DirectError, FrameError, Result};
use super::frame::{encode_split, Frame, FrameCodec};
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

/// Watches what a session moves, for metrics (what was sent, what was applied). Called on the session's task right
/// after the fact, so an implementation must be quick and never block (atomics, or a lock held for a few field
/// updates, no I/O): the session's throughput is the metrics' cost.
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

/// The receiving half of a session: frames decoded off the read half of the connection.
pub(crate) type FrameStream = Framed<ReadHalf<BoxIo>, FrameCodec>;

/// The sending half of a session, for [`spawn_writer`]: the connection's write half, what the handshake left
/// unwritten, and the payload maximum frames are encoded with.
pub(crate) struct FrameSink {
    io: WriteHalf<BoxIo>,
    buf: BytesMut,
    max_payload: u32,
}

/// Splits a session's connection (after the handshake) into its receiving and sending halves. Why not
/// `Framed::split`: its sink copies every frame into its buffer, a 4 MiB chunk included, and TLS (or the kernel)
/// copies it once more; the writer task writes a large chunk's bytes from where they are (`frame::encode_split`,
/// a vectored write). The codec, with its stream offset and any bytes already read, goes to the receiving half.
pub(crate) fn split(framed: FramedIo) -> (FrameStream, FrameSink) {
    let parts = framed.into_parts();
    let max_payload = parts.codec.max_payload();
    let (read, write) = tokio::io::split(parts.io);
    let mut read_parts = FramedParts::new::<Frame>(read, parts.codec);
    read_parts.read_buf = parts.read_buf;
    let stream = Framed::from_parts(read_parts);
    let sink = FrameSink {
        io: write,
        buf: parts.write_buf,
        max_payload,
    };
    (stream, sink)
}

/// Frame bytes the writer gathers before writing them out, when more frames are queued: small frames (acks,
/// credits, heartbeats, seals) go out together, a large chunk goes out at once with what was gathered before it.
const WRITE_GATHER_BYTES: usize = 64 << 10;

impl FrameSink {
    /// Encodes `frame`; writes what is gathered when a large chunk (with its bytes, in one vectored write) or
    /// [`WRITE_GATHER_BYTES`] came together.
    async fn send(&mut self, frame: &Frame) -> Result<()> {
        match encode_split(frame, self.max_payload, &mut self.buf)? {
            Some(tail) => {
                let mut parts = [
                    IoSlice::new(&self.buf),
                    IoSlice::new(&tail.bytes),
                    IoSlice::new(&tail.trailer),
                ];
                write_all_vectored(&mut self.io, &mut parts).await?;
                self.buf.clear();
            }
            None if self.buf.len() >= WRITE_GATHER_BYTES => self.write_buf().await?,
            None => {}
        }
        Ok(())
    }

    async fn write_buf(&mut self) -> Result<()> {
        self.io.write_all(&self.buf).await.map_err(|source| DirectError::Io {
            stage: "sending a frame",
            source,
        })?;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is gathered and flushes the connection (TLS records, then the socket).
    async fn flush(&mut self) -> Result<()> {
        self.write_buf().await?;
        self.io.flush().await.map_err(|source| DirectError::Io {
            stage: "sending a frame",
            source,
        })
    }

    /// Flushes, then shuts the write side down (TLS close_notify, FIN).
    async fn close(&mut self) -> Result<()> {
        self.flush().await?;
        self.io.shutdown().await.map_err(|source| DirectError::Io {
            stage: "closing the connection",
            source,
        })
    }
}

/// Writes all of `parts`, in order, with as few writes as the stream takes (TLS: records spanning the parts, no
/// copy of them beforehand; TCP: `writev`).
async fn write_all_vectored(io: &mut WriteHalf<BoxIo>, mut parts: &mut [IoSlice<'_>]) -> Result<()> {
    IoSlice::advance_slices(&mut parts, 0);
    while !parts.is_empty() {
        let n = io.write_vectored(parts).await.map_err(|source| DirectError::Io {
            stage: "sending a frame",
            source,
        })?;
        if n == 0 {
            return Err(DirectError::Io {
                stage: "sending a frame",
                source: std::io::ErrorKind::WriteZero.into(),
            });
        }
        IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

/// The writer task: sends what the session queues, a Heartbeat after
/// `heartbeat` without anything to send, each write bounded by `timeout`;
/// closes the stream (TLS close_notify, FIN) when the queue is closed.
pub(crate) fn spawn_writer(
    mut sink: FrameSink,
    mut rx: mpsc::Receiver<Frame>,
    heartbeat: Duration,
    timeout: Duration,
) -> JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut sequence = 0u64;
        let bounded = |stage: &'static str, r: std::result::Result<Result<()>, _>| match r {
            Ok(r) => r,
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
            bounded(
                "sending a frame",
                tokio::time::timeout(timeout, sink.send(&frame)).await,
            )?;
            drop(frame);
            // Batch what is already queued into one flush.
            while let Ok(frame) = rx.try_recv() {
                bounded(
                    "sending a frame",
                    tokio::time::timeout(timeout, sink.send(&frame)).await,
                )?;
            }
            bounded("sending a frame", tokio::time::timeout(timeout, sink.flush()).await)?;
        }
        bounded(
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
    stream: &mut FrameStream,
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::{SinkExt, StreamExt};

    use super::*;
    use crate::direct::frame::SPLIT_MIN_CHUNK_BYTES;
    use crate::direct::payload::{ChunkCrcs, PartitionRef};

    fn chunk(position: u64, len: usize, crcs: bool) -> Frame {
        let bytes = Bytes::from((0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>());
        Frame::Chunk(Chunk {
            partition: PartitionRef {
                topic: "t".into(),
                partition: 1,
                topic_id: [3; 16],
            },
            segment_base: 0,
            position,
            crcs: if crcs {
                ChunkCrcs::of_bytes(crc32c::crc32c(&bytes))
            } else {
                ChunkCrcs::default()
            },
            bytes,
        })
    }

    /// The writer task's frames, large chunks written from their own bytes among small frames, arrive whole and in
    /// order at a plain decoder; closing the queue closes the stream after the last frame.
    #[tokio::test]
    async fn the_writer_sends_split_chunks_and_small_frames_in_order() {
        let (ours, theirs) = tokio::io::duplex(64 << 10);
        let ours: FramedIo = Framed::new(Box::new(ours) as BoxIo, FrameCodec::default());
        let (_stream, sink) = split(ours);
        let (tx, rx) = outbox();
        let writer = spawn_writer(sink, rx, Duration::from_secs(5), Duration::from_secs(10));
        let frames = vec![
            Frame::Heartbeat { sequence: 1 },
            chunk(0, SPLIT_MIN_CHUNK_BYTES, true),
            chunk(SPLIT_MIN_CHUNK_BYTES as u64, 100, false),
            Frame::Credit { bytes: 5 },
            chunk(SPLIT_MIN_CHUNK_BYTES as u64 + 100, 3 << 20, false),
            chunk((3 << 20) + SPLIT_MIN_CHUNK_BYTES as u64 + 100, 1 << 20, true),
            Frame::Heartbeat { sequence: 2 },
        ];
        let sent = frames.clone();
        let send = tokio::spawn(async move {
            for f in sent {
                tx.send(f).await.unwrap();
            }
        });
        let mut peer = Framed::new(theirs, FrameCodec::default());
        let mut got = Vec::new();
        while let Some(frame) = peer.next().await {
            got.push(frame.expect("a frame the decoder takes"));
        }
        send.await.unwrap();
        writer.await.unwrap().expect("the writer closed cleanly");
        let strip = |f: Frame| match f {
            Frame::Chunk(mut c) => {
                c.crcs = ChunkCrcs::default();
                Frame::Chunk(c)
            }
            f => f,
        };
        assert_eq!(
            got.into_iter().map(strip).collect::<Vec<_>>(),
            frames.into_iter().map(strip).collect::<Vec<_>>()
        );
    }

    /// Bytes the connection's reader already took off the stream (a frame after the one it decoded) stay with the
    /// receiving half after the split, and so does the codec's stream offset.
    #[tokio::test]
    async fn the_split_keeps_what_was_read_ahead_of_it() {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let mut ours: FramedIo = Framed::new(Box::new(ours) as BoxIo, FrameCodec::default());
        let mut peer = Framed::new(theirs, FrameCodec::default());
        peer.feed(Frame::Heartbeat { sequence: 1 }).await.unwrap();
        peer.feed(chunk(0, 1000, false)).await.unwrap();
        SinkExt::<Frame>::flush(&mut peer).await.unwrap();
        assert_eq!(ours.next().await.unwrap().unwrap(), Frame::Heartbeat { sequence: 1 });
        assert!(!ours.read_buffer().is_empty(), "the chunk was read with the heartbeat");
        let offset = ours.codec().offset();
        let (mut stream, _sink) = split(ours);
        assert_eq!(stream.codec().offset(), offset);
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        match next {
            Ok(Some(Ok(Frame::Chunk(c)))) => assert_eq!(c.bytes.len(), 1000),
            other => panic!("expected the chunk already read, got {other:?}"),
        }
    }

    /// A write that cannot finish (nobody reads the other end) is bounded by the timeout and named.
    #[tokio::test]
    async fn a_stalled_split_write_times_out() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let ours: FramedIo = Framed::new(Box::new(ours) as BoxIo, FrameCodec::default());
        let (_stream, sink) = split(ours);
        let (tx, rx) = outbox();
        let writer = spawn_writer(sink, rx, Duration::from_secs(5), Duration::from_millis(200));
        tx.send(chunk(0, 1 << 20, true)).await.unwrap();
        match writer.await.unwrap() {
            Err(DirectError::Timeout { stage, .. }) => assert_eq!(stage, "sending a frame"),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}
