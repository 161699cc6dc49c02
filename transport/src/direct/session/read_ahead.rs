//! The applier's read-ahead: frames taken off the connection while a group of chunks (or a seal) is being made
//! durable.
//!
//! Why: the applier session used to read nothing while it applied a group (write, fsync, record). The shipper's
//! next chunks then waited in the socket buffers (a few MiB), so the disk's fsync, the TLS decryption and the
//! network took turns instead of overlapping, and a catch-up ran at about half the disk's speed. Now the frames
//! that arrive meanwhile are decoded (TLS, frame CRC) into a queue and form the next group as soon as the apply
//! returns. Nothing about order or durability changes: frames are still handled one after the other, in the order
//! received, each checked against the credit when it is handled, and an Ack still names only durable bytes.
//!
//! Bounded: the queue takes chunks only while their bytes stay under the credit window (what a shipper that keeps
//! the rules can have in flight at all), at most [`MAX_READ_AHEAD_FRAMES`] frames, and only chunks, heartbeats and
//! progress reports: any other frame (a seal, a Goodbye, a claim...) and the stream's end or error stop the
//! read-ahead until the session has handled them, so a frame whose handling changes what comes next is never
//! read past.

use std::collections::VecDeque;
use std::future::Future;

use futures::{FutureExt, StreamExt};

use super::{chunk_cost, FrameStream};
use crate::direct::error::FrameError;
use crate::direct::frame::Frame;

/// Most frames queued ahead: bounds the queue's bookkeeping and the heartbeats it may hold (chunk bytes are
/// bounded by the credit window).
pub(crate) const MAX_READ_AHEAD_FRAMES: usize = 1024;

/// What the stream yields: a frame, a decoding or I/O error, or `None` at its end.
pub(crate) type Polled = Option<std::result::Result<Frame, FrameError>>;

/// The receiving half of a session with a queue of frames read ahead (see the module doc).
pub(crate) struct ReadAhead {
    stream: FrameStream,
    queued: VecDeque<Polled>,
    /// Chunk bytes in `queued`.
    queued_bytes: u64,
    /// Most chunk bytes queued: the credit window.
    limit_bytes: u64,
    /// A frame that must be handled before anything after it is read (or the stream's end) is queued.
    stopped: bool,
}

impl ReadAhead {
    pub(crate) fn new(stream: FrameStream, limit_bytes: u64) -> ReadAhead {
        ReadAhead {
            stream,
            queued: VecDeque::new(),
            queued_bytes: 0,
            limit_bytes,
            stopped: false,
        }
    }

    /// The receiving half itself (to drain it after a Goodbye); frames still queued are dropped with it.
    pub(crate) fn inner_mut(&mut self) -> &mut FrameStream {
        self.queued.clear();
        self.queued_bytes = 0;
        &mut self.stream
    }

    /// Frames queued (tests).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queued.len()
    }

    /// The next frame: the oldest queued, else the next from the connection. Cancel-safe: a queued frame is
    /// taken at the first poll, which is then ready; the connection's `next` is cancel-safe itself.
    pub(crate) async fn next(&mut self) -> Polled {
        match self.pop() {
            Some(polled) => polled,
            None => self.stream.next().await,
        }
    }

    /// The next frame if one is at hand without waiting (queued, or already decodable from the connection).
    pub(crate) fn now(&mut self) -> Option<Polled> {
        match self.pop() {
            Some(polled) => Some(polled),
            None => self.stream.next().now_or_never(),
        }
    }

    /// Runs `work` to its end, queueing the frames that arrive meanwhile (within the bounds).
    pub(crate) async fn during<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        loop {
            let room =
                !self.stopped && self.queued.len() < MAX_READ_AHEAD_FRAMES && self.queued_bytes < self.limit_bytes;
            tokio::select! {
                biased;
                out = &mut work => return out,
                polled = self.stream.next(), if room => self.push(polled),
            }
        }
    }

    fn push(&mut self, polled: Polled) {
        match &polled {
            Some(Ok(Frame::Chunk(c))) => self.queued_bytes += chunk_cost(c),
            Some(Ok(Frame::Heartbeat { .. } | Frame::SourceProgress(_))) => {}
            _ => self.stopped = true,
        }
        self.queued.push_back(polled);
    }

    fn pop(&mut self) -> Option<Polled> {
        let polled = self.queued.pop_front()?;
        if let Some(Ok(Frame::Chunk(c))) = &polled {
            self.queued_bytes -= chunk_cost(c);
        }
        if self.queued.is_empty() {
            self.stopped = false;
        }
        Some(polled)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures::SinkExt;
    use tokio_util::codec::Framed;

    use super::*;
    use crate::direct::frame::FrameCodec;
    use crate::direct::payload::{Chunk, Goodbye, GoodbyeReason, PartitionRef};
    use crate::direct::session::{BoxIo, FramedIo};

    fn chunk(position: u64, len: usize) -> Frame {
        Frame::Chunk(Chunk {
            partition: PartitionRef {
                topic: "t".into(),
                partition: 0,
                topic_id: [7; 16],
            },
            segment_base: 0,
            position,
            bytes: Bytes::from(vec![1u8; len]),
            crcs: Default::default(),
        })
    }

    /// A receiving half with `frames` already sent to it by the peer, and the peer's half (kept open).
    async fn receiving(frames: Vec<Frame>, limit_bytes: u64) -> (ReadAhead, Framed<BoxIo, FrameCodec>) {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let ours: FramedIo = Framed::new(Box::new(ours) as BoxIo, FrameCodec::default());
        let mut peer = Framed::new(Box::new(theirs) as BoxIo, FrameCodec::default());
        for f in frames {
            peer.send(f).await.unwrap();
        }
        // The sending half is not needed: the receiving half stays readable without it.
        let (stream, _) = crate::direct::session::split(ours);
        (ReadAhead::new(stream, limit_bytes), peer)
    }

    fn position(polled: Polled) -> u64 {
        match polled {
            Some(Ok(Frame::Chunk(c))) => c.position,
            other => panic!("expected a chunk, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn frames_arriving_during_work_are_queued_and_come_out_in_order() {
        let (mut ahead, _peer) = receiving(vec![chunk(0, 10), chunk(10, 10), chunk(20, 10)], 1 << 20).await;
        let out = ahead.during(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            42
        });
        assert_eq!(out.await, 42, "the work's own result");
        assert_eq!(ahead.queued(), 3, "all three chunks were read while the work ran");
        assert_eq!(position(ahead.now().unwrap()), 0);
        assert_eq!(position(ahead.next().await), 10);
        assert_eq!(position(ahead.now().unwrap()), 20);
        assert!(ahead.now().is_none(), "nothing more at hand");
    }

    #[tokio::test]
    async fn the_read_ahead_stops_at_the_byte_limit() {
        let (mut ahead, _peer) = receiving(vec![chunk(0, 100), chunk(100, 100), chunk(200, 100)], 150).await;
        ahead.during(tokio::time::sleep(Duration::from_millis(50))).await;
        assert_eq!(
            ahead.queued(),
            2,
            "the second chunk crossed the limit: nothing read after it"
        );
        assert_eq!(position(ahead.next().await), 0);
        ahead.during(tokio::time::sleep(Duration::from_millis(50))).await;
        assert_eq!(ahead.queued(), 2, "room again: the third was read");
    }

    #[tokio::test]
    async fn a_frame_other_than_a_chunk_stops_the_read_ahead_until_it_is_handled() {
        let goodbye = Frame::Goodbye(Goodbye {
            reason: GoodbyeReason::Shutdown,
            message: "bye".into(),
        });
        let (mut ahead, _peer) = receiving(vec![chunk(0, 10), goodbye, chunk(10, 10)], 1 << 20).await;
        ahead.during(tokio::time::sleep(Duration::from_millis(50))).await;
        assert_eq!(ahead.queued(), 2, "nothing read past the Goodbye");
        assert_eq!(position(ahead.next().await), 0);
        assert!(matches!(ahead.next().await, Some(Ok(Frame::Goodbye(_)))));
        ahead.during(tokio::time::sleep(Duration::from_millis(50))).await;
        assert_eq!(ahead.queued(), 1, "handled: reading ahead again");
    }
}
