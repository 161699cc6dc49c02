//! MirrorLayout in a session (feature bit 7): the applier sends every Resume partition's sealed segments right
//! after the Resume, the shipper hands them to its feed before positioning it, and a hostile list ends the session
//! with a protocol error naming the partition.

use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::payload::{LayoutSegment, MirrorLayout};
use segmirror_transport::direct::session::{
    ApplierSession, BoxIo, ChunkApplier, ChunkFeed, DurablePosition, FeedItem, FramedIo, Layouts, ShipperSession,
};
use segmirror_transport::direct::{handshake, Chunk, DirectError, Frame, Position, Role, SegmentSeal, Session};
use support::session::*;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

mod support;

/// A handshaken pair over loopback TCP: (shipper side, applier side).
async fn pair() -> ((FramedIo, Session), (FramedIo, Session)) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let applier = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        handshake(Box::new(tcp) as BoxIo, &handshake_config(Role::Applier, "dr")).await
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let shipper = handshake(Box::new(tcp) as BoxIo, &handshake_config(Role::Shipper, "dr"))
        .await
        .expect("shipper handshake");
    (shipper, applier.await.expect("join").expect("applier handshake"))
}

/// A feed that records the layout it is given and the seek after it, and never yields.
#[derive(Clone, Default)]
struct LayoutFeed {
    seen: Arc<Mutex<Vec<String>>>,
}

impl ChunkFeed for LayoutFeed {
    async fn seek(&mut self, resume: &[Position]) -> Result<(), DirectError> {
        self.seen.lock().unwrap().push(format!("seek {}", resume.len()));
        Ok(())
    }

    async fn next(&mut self) -> Result<FeedItem, DirectError> {
        std::future::pending().await
    }

    fn mirror_layout(&mut self, layout: Option<Layouts>) {
        self.seen.lock().unwrap().push(format!("{layout:?}"));
    }
}

fn seg(base: i64, size: u64) -> LayoutSegment {
    LayoutSegment { base, size }
}

fn at(p: &segmirror_transport::direct::PartitionRef) -> Position {
    Position {
        partition: p.clone(),
        segment_base: 10,
        position: 7,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipper_collects_each_partitions_layout_across_frames_before_seeking() {
    let ((s_framed, s_session), (mut a_framed, _)) = pair().await;
    let feed = LayoutFeed::default();
    let seen = feed.seen.clone();
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &stopper).await });
    let parts = partitions(2);
    a_framed
        .send(Frame::Resume(vec![at(&parts[0]), at(&parts[1])]))
        .await
        .unwrap();
    let layouts = [
        (0, false, vec![seg(0, 100), seg(4, 50)]),
        (1, true, vec![]),
        (0, true, vec![seg(8, 70)]),
    ];
    for (i, last, segments) in layouts {
        a_framed
            .send(Frame::MirrorLayout(MirrorLayout {
                partition: parts[i].clone(),
                last,
                segments,
            }))
            .await
            .unwrap();
        a_framed.send(Frame::Heartbeat { sequence: 1 }).await.unwrap();
    }
    a_framed.send(Frame::Credit { bytes: 1 << 20 }).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while seen.lock().unwrap().len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("seeked");
    let expected: Layouts = vec![
        (parts[0].clone(), vec![seg(0, 100), seg(4, 50), seg(8, 70)]),
        (parts[1].clone(), vec![]),
    ];
    assert_eq!(
        *seen.lock().unwrap(),
        vec![format!("{:?}", Some(expected)), "seek 2".to_string()]
    );
    stop.cancel();
    let _ = s.await.expect("join");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_layouts_end_the_session_naming_the_partition() {
    let parts = partitions(2);
    let cases: Vec<(Vec<MirrorLayout>, &str)> = vec![
        // A partition the Resume does not name.
        (
            vec![MirrorLayout {
                partition: parts[1].clone(),
                last: true,
                segments: vec![],
            }],
            "does not name",
        ),
        // Bases going backwards across two frames.
        (
            vec![
                MirrorLayout {
                    partition: parts[0].clone(),
                    last: false,
                    segments: vec![seg(5, 1)],
                },
                MirrorLayout {
                    partition: parts[0].clone(),
                    last: true,
                    segments: vec![seg(5, 1)],
                },
            ],
            "not above the previous frame's last base",
        ),
        // A second list after the last frame.
        (
            vec![
                MirrorLayout {
                    partition: parts[0].clone(),
                    last: true,
                    segments: vec![],
                },
                MirrorLayout {
                    partition: parts[0].clone(),
                    last: true,
                    segments: vec![],
                },
            ],
            "",
        ),
    ];
    for (frames, expected) in cases {
        let ((s_framed, s_session), (mut a_framed, _)) = pair().await;
        let mut shipper = ShipperSession::new(LayoutFeed::default(), session_config(1 << 20)).expect("shipper");
        let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &CancellationToken::new()).await });
        a_framed.send(Frame::Resume(vec![at(&parts[0])])).await.unwrap();
        for f in frames {
            a_framed.send(Frame::MirrorLayout(f)).await.unwrap();
        }
        a_framed.send(Frame::Credit { bytes: 1 << 20 }).await.unwrap();
        let err = s.await.expect("join").expect_err("refused");
        if expected.is_empty() {
            // The second list arrives once streaming started: an unexpected frame there.
            assert!(
                matches!(
                    err,
                    DirectError::UnexpectedFrame {
                        got: "MirrorLayout",
                        ..
                    }
                ),
                "{err:?}"
            );
        } else {
            match &err {
                DirectError::Protocol { reason } => {
                    assert!(
                        reason.contains(expected) && reason.contains("MirrorLayout of"),
                        "{reason}"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

/// An applier whose mirror holds sealed segments of one partition.
struct LayoutApplier {
    durable: Vec<DurablePosition>,
    layout: Layouts,
}

impl ChunkApplier for LayoutApplier {
    async fn durable_positions(&mut self) -> Result<Vec<DurablePosition>, DirectError> {
        Ok(self.durable.clone())
    }
    async fn apply_chunk(&mut self, _: &Chunk) -> Result<(), DirectError> {
        Ok(())
    }
    async fn check_applied(&mut self, _: &Chunk) -> Result<(), DirectError> {
        Ok(())
    }
    async fn apply_seal(&mut self, _: &SegmentSeal) -> Result<(), DirectError> {
        Ok(())
    }
    async fn mirror_layout(&mut self) -> Result<Layouts, DirectError> {
        Ok(self.layout.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applier_sends_every_resume_partitions_layout_in_bounded_frames() {
    use segmirror_transport::direct::payload::MAX_LAYOUT_SEGMENTS_PER_FRAME;
    let ((mut s_framed, _), (a_framed, a_session)) = pair().await;
    let parts = partitions(2);
    let long: Vec<LayoutSegment> = (0..MAX_LAYOUT_SEGMENTS_PER_FRAME as i64 + 3)
        .map(|b| seg(b * 10, 5))
        .collect();
    let applier = LayoutApplier {
        durable: parts
            .iter()
            .map(|p| DurablePosition {
                position: at(p),
                sealed: false,
            })
            .collect(),
        // Only the first partition has sealed segments; the second still gets its (empty) list.
        layout: vec![(parts[0].clone(), long.clone())],
    };
    let mut session = ApplierSession::new(applier, session_config(1 << 20)).expect("applier");
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    let a = tokio::spawn(async move { session.run(a_framed, &a_session, &stopper).await });
    let mut frames = Vec::new();
    loop {
        match s_framed.next().await {
            Some(Ok(Frame::Heartbeat { .. })) => continue,
            Some(Ok(Frame::Credit { .. })) => break,
            Some(Ok(f)) => frames.push(f),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(&frames[0], Frame::Resume(p) if p.len() == 2));
    let layouts: Vec<&MirrorLayout> = frames[1..]
        .iter()
        .map(|f| match f {
            Frame::MirrorLayout(l) => l,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(layouts.len(), 3);
    assert_eq!(
        (
            layouts[0].partition == parts[0],
            layouts[0].last,
            layouts[0].segments.len()
        ),
        (true, false, MAX_LAYOUT_SEGMENTS_PER_FRAME)
    );
    assert_eq!(
        (
            layouts[1].partition == parts[0],
            layouts[1].last,
            layouts[1].segments.len()
        ),
        (true, true, 3)
    );
    assert_eq!(
        (
            layouts[2].partition == parts[1],
            layouts[2].last,
            layouts[2].segments.len()
        ),
        (true, true, 0)
    );
    let all: Vec<LayoutSegment> = layouts[..2].iter().flat_map(|l| l.segments.clone()).collect();
    assert_eq!(all, long);
    stop.cancel();
    let _ = a.await.expect("join");
}
