//! The direct session's latency machinery over real loopback TCP: the applier applies the chunks already received
//! as one group and acknowledges them only once the whole group is durable (one Ack per partition, one Credit);
//! the shipper keeps at most the feed's bound of unacknowledged items per partition, holding the partition until
//! an Ack releases it, even against a feed that ignores the hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::session::{
    ApplierSession, BoxIo, ChunkApplier, ChunkFeed, DurablePosition, FeedItem, FramedIo, SessionEnd, ShipperSession,
};
use segmirror_transport::direct::{
    handshake, Chunk, DirectError, Frame, PartitionRef, Position, Role, SegmentSeal, Session,
};
use support::session::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

mod support;

/// A shipper and an applier connection after the handshake.
async fn pair() -> ((FramedIo, Session), (FramedIo, Session)) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let applier = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        handshake(Box::new(tcp) as BoxIo, &handshake_config(Role::Applier, LINK)).await
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let shipper = handshake(Box::new(tcp) as BoxIo, &handshake_config(Role::Shipper, LINK))
        .await
        .expect("shipper handshake");
    (shipper, applier.await.expect("join").expect("applier handshake"))
}

fn chunk(p: &PartitionRef, position: u64, len: usize) -> Chunk {
    Chunk {
        partition: p.clone(),
        segment_base: 0,
        position,
        bytes: Bytes::from(vec![position as u8; len]),
        crcs: Default::default(),
    }
}

/// The next frame that is not a heartbeat.
async fn next_frame(framed: &mut FramedIo) -> Frame {
    loop {
        match framed.next().await {
            Some(Ok(Frame::Heartbeat { .. })) => continue,
            Some(Ok(frame)) => return frame,
            other => panic!("stream ended: {other:?}"),
        }
    }
}

/// What the group applier has made durable, and the groups it was given.
#[derive(Default)]
struct Durable {
    /// Per partition number, the durable end.
    ends: HashMap<i32, u64>,
    /// The size of each group, in call order.
    groups: Vec<usize>,
}

/// An applier that makes a whole group durable at once, at the end of the call; its first group waits for a
/// gate, so the chunks sent behind it are received meanwhile.
struct GroupApplier {
    durable: Arc<Mutex<Durable>>,
    /// Calls entered so far.
    entered: watch::Sender<usize>,
    gate: watch::Receiver<bool>,
}

impl ChunkApplier for GroupApplier {
    async fn durable_positions(&mut self) -> Result<Vec<DurablePosition>, DirectError> {
        Ok(Vec::new())
    }

    async fn apply_chunk(&mut self, chunk: &Chunk) -> Result<(), DirectError> {
        self.apply_chunks(std::slice::from_ref(chunk)).await
    }

    async fn apply_chunks(&mut self, chunks: &[Chunk]) -> Result<(), DirectError> {
        self.entered.send_modify(|n| *n += 1);
        self.gate.wait_for(|open| *open).await.expect("gate");
        let mut durable = self.durable.lock().expect("lock");
        durable.groups.push(chunks.len());
        for c in chunks {
            durable
                .ends
                .insert(c.partition.partition, c.position + c.bytes.len() as u64);
        }
        Ok(())
    }

    async fn check_applied(&mut self, _chunk: &Chunk) -> Result<(), DirectError> {
        Ok(())
    }

    async fn apply_seal(&mut self, seal: &SegmentSeal) -> Result<(), DirectError> {
        panic!("no seal in this test: {seal:?}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applier_applies_chunks_already_received_as_one_group_and_acks_only_what_is_durable() {
    let parts = partitions(2);
    let ((mut s_framed, _), (a_framed, a_session)) = pair().await;
    let durable = Arc::new(Mutex::new(Durable::default()));
    let (entered_tx, mut entered) = watch::channel(0usize);
    let (gate_tx, gate) = watch::channel(false);
    let applier = GroupApplier {
        durable: durable.clone(),
        entered: entered_tx,
        gate,
    };
    let mut applier = ApplierSession::new(applier, session_config(1 << 20)).expect("applier");
    let stop = CancellationToken::new();
    let a_stop = stop.clone();
    let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &a_stop).await });

    assert_eq!(next_frame(&mut s_framed).await, Frame::Resume(vec![]));
    assert_eq!(next_frame(&mut s_framed).await, Frame::Credit { bytes: 1 << 20 });
    // One chunk; while the applier is inside it (the gate closed), three more arrive behind it.
    s_framed
        .send(Frame::Chunk(chunk(&parts[0], 0, 100)))
        .await
        .expect("send");
    entered.wait_for(|n| *n >= 1).await.expect("entered");
    for c in [
        chunk(&parts[0], 100, 100),
        chunk(&parts[0], 200, 100),
        chunk(&parts[1], 0, 50),
    ] {
        s_framed.feed(Frame::Chunk(c)).await.expect("feed");
    }
    SinkExt::<Frame>::flush(&mut s_framed).await.expect("flush");
    gate_tx.send_replace(true);

    // Every Ack names a position the applier had made durable before it was sent, the second group's Acks
    // only once all of that group was durable.
    let mut frames = Vec::new();
    while frames.len() < 5 {
        let frame = next_frame(&mut s_framed).await;
        if let Frame::Ack(p) = &frame {
            let d = durable.lock().expect("lock");
            assert!(
                d.ends.get(&p.partition.partition).is_some_and(|&end| end >= p.position),
                "{p:?} acknowledged before it was durable ({:?})",
                d.ends
            );
            if p.position == 300 {
                assert_eq!(
                    d.ends.get(&1),
                    Some(&50),
                    "the whole group is durable before its first Ack"
                );
            }
        }
        frames.push(frame);
    }
    let ack = |p: &PartitionRef, position: u64| {
        Frame::Ack(Position {
            partition: p.clone(),
            segment_base: 0,
            position,
        })
    };
    assert_eq!(
        frames,
        vec![
            ack(&parts[0], 100),
            Frame::Credit { bytes: 100 },
            // One Ack per partition at its highest position, one Credit for the group.
            ack(&parts[0], 300),
            ack(&parts[1], 50),
            Frame::Credit { bytes: 250 },
        ]
    );
    assert_eq!(durable.lock().expect("lock").groups, vec![1, 3]);
    stop.cancel();
    assert_eq!(a.await.expect("join").expect("applier"), SessionEnd::Shutdown);
}

/// What the session told the feed.
type Holds = Arc<Mutex<Vec<(i32, bool)>>>;

/// A feed of `count` 100-byte chunks of one partition that asks for at most two unacknowledged items but ignores
/// the hold (it yields the next chunk anyway), so the bound is the session's own; afterwards it waits forever.
struct StubbornFeed {
    partition: PartitionRef,
    next: u64,
    count: u64,
    holds: Holds,
}

impl ChunkFeed for StubbornFeed {
    async fn seek(&mut self, resume: &[Position]) -> Result<(), DirectError> {
        assert!(resume.is_empty(), "one session from nothing");
        Ok(())
    }

    async fn next(&mut self) -> Result<FeedItem, DirectError> {
        if self.next == self.count {
            std::future::pending::<()>().await;
        }
        self.next += 1;
        Ok(FeedItem::Chunk(chunk(&self.partition, (self.next - 1) * 100, 100)))
    }

    fn max_unacked_per_partition(&self) -> Option<usize> {
        Some(2)
    }

    fn hold(&mut self, partition: &PartitionRef, held: bool) {
        self.holds.lock().expect("lock").push((partition.partition, held));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipper_keeps_at_most_the_feeds_bound_of_items_unacknowledged_per_partition() {
    let p = partitions(1).remove(0);
    let holds: Holds = Arc::default();
    let feed = StubbornFeed {
        partition: p.clone(),
        next: 0,
        count: 4,
        holds: holds.clone(),
    };
    let ((s_framed, s_session), (mut a_framed, _)) = pair().await;
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let stop = CancellationToken::new();
    let s_stop = stop.clone();
    let s = tokio::spawn(async move {
        let r = shipper.run(s_framed, &s_session, &s_stop).await;
        (shipper, r)
    });
    // Plenty of credit: only the bound holds the shipper back.
    a_framed.send(Frame::Resume(vec![])).await.expect("resume");
    a_framed.send(Frame::Credit { bytes: 1 << 20 }).await.expect("credit");
    let position = |frame: Frame| match frame {
        Frame::Chunk(c) => c.position,
        other => panic!("expected a chunk, got {other:?}"),
    };
    assert_eq!(position(next_frame(&mut a_framed).await), 0);
    assert_eq!(position(next_frame(&mut a_framed).await), 100);
    // The third chunk is at hand and within the credit, yet the next frame is a heartbeat: the shipper went idle
    // with two unacknowledged, the partition held.
    match a_framed.next().await {
        Some(Ok(Frame::Heartbeat { .. })) => {}
        other => panic!("expected the shipper idle (a heartbeat), got {other:?}"),
    }
    assert_eq!(*holds.lock().expect("lock"), vec![(0, true)]);
    let ack = |position: u64| {
        Frame::Ack(Position {
            partition: p.clone(),
            segment_base: 0,
            position,
        })
    };
    // An Ack of the first releases the partition: the third goes, and the partition is held again.
    a_framed.send(ack(100)).await.expect("ack");
    assert_eq!(position(next_frame(&mut a_framed).await), 200);
    a_framed.send(ack(300)).await.expect("ack");
    assert_eq!(position(next_frame(&mut a_framed).await), 300);
    a_framed.send(ack(400)).await.expect("ack");
    stop.cancel();
    let (shipper, end) = s.await.expect("join");
    assert_eq!(end.expect("shipper"), SessionEnd::Shutdown);
    assert_eq!(shipper.stats().max_unacked_items, 2);
    assert_eq!(
        *holds.lock().expect("lock"),
        vec![(0, true), (0, false), (0, true), (0, false)]
    );
}
