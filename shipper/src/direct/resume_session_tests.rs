//! The tail feed in a real `ShipperSession` over loopback TCP, against an applier whose Resume names an impossible
//! position for one partition (beyond the end of a sealed segment no cleaner rewrote): the session goes on, the
//! other partition streams, nothing of the refused one is sent, and the session ends only when the applier says
//! goodbye (it used to end with a local error, and the shipper process with it).

use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::handshake::{handshake, HandshakeConfig, FEATURE_MIRROR_LAYOUT, FEATURE_TRUNCATE};
use segmirror_transport::direct::payload::{Goodbye, GoodbyeReason, MirrorLayout};
use segmirror_transport::direct::session::{BoxIo, SessionConfig, SessionEnd, ShipperSession};
use segmirror_transport::direct::{Frame, Role};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::super::tests::{append, batch_at, partition, FixedHw};
use super::super::*;
use crate::source::bound_hw::UptoPolicy;

/// Two segments of five one-record batches (bases 0 and 5) in `dir`; the first one's size.
fn two_segments(dir: &Path) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    for base in [0i64, 5] {
        for i in 0..5 {
            append(&log_path(dir, base), &batch_at(base + i, 1, (base + i) as usize));
        }
    }
    std::fs::metadata(log_path(dir, 0)).unwrap().len()
}

fn position(partition: &PartitionRef, segment_base: i64, position: u64) -> Position {
    Position {
        partition: partition.clone(),
        segment_base,
        position,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impossible_resume_position_refuses_its_partition_and_the_session_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let (dir, other_dir) = (root.path().join("events-0"), root.path().join("other-0"));
    let sealed = two_segments(&dir);
    two_segments(&other_dir);
    let other = PartitionRef {
        topic: "other".into(),
        partition: 0,
        topic_id: [9; 16],
    };
    let mut config = TailFeedConfig::new(Arc::new(FixedHw(None)));
    config.upto = UptoPolicy::LogEnd;
    config.poll_interval = Duration::from_millis(5);
    let feed = TailFeed::new(
        vec![
            TailPartition {
                partition: partition(),
                dir,
            },
            TailPartition {
                partition: other.clone(),
                dir: other_dir,
            },
        ],
        config,
    );

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        handshake(
            Box::new(tcp) as BoxIo,
            &HandshakeConfig::new(Role::Applier, "tail", None),
        )
        .await
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (s_framed, s_session) = handshake(
        Box::new(tcp) as BoxIo,
        &HandshakeConfig::new(Role::Shipper, "tail", Some("source".into())),
    )
    .await
    .unwrap();
    let (mut applier, a_session) = accept.await.unwrap().unwrap();
    let config = SessionConfig {
        heartbeat_interval: Duration::from_millis(50),
        idle_timeout: Duration::from_secs(5),
        credit_window: 1 << 20,
        max_bandwidth: None,
        observer: None,
    };
    let mut shipper = ShipperSession::new(feed, config).unwrap();
    let s = tokio::spawn(async move {
        let end = shipper.run(s_framed, &s_session, &CancellationToken::new()).await;
        (end, shipper.into_feed())
    });

    // The hostile Resume: events-0 at 100 bytes beyond the end of its sealed segment 0.
    let beyond = Position {
        partition: partition(),
        segment_base: 0,
        position: sealed + 100,
    };
    applier.send(Frame::Resume(vec![beyond])).await.unwrap();
    if a_session.features & FEATURE_MIRROR_LAYOUT != 0 {
        let layout = MirrorLayout {
            partition: partition(),
            last: true,
            segments: Vec::new(),
        };
        applier.send(Frame::MirrorLayout(layout)).await.unwrap();
    }
    assert_eq!(
        a_session.features & FEATURE_TRUNCATE,
        FEATURE_TRUNCATE,
        "a Resume without ends is allowed"
    );
    applier.send(Frame::Credit { bytes: 1 << 20 }).await.unwrap();

    // The other partition's two segments arrive (chunks and the first seal, each acknowledged as an applier
    // would); nothing of events-0.
    let mut other_bytes = 0u64;
    let mut seals = 0;
    let streamed = tokio::time::timeout(Duration::from_secs(30), async {
        while seals < 1 || other_bytes < 2 * sealed {
            let Some(frame) = applier.next().await else {
                return false;
            };
            match frame.unwrap() {
                Frame::Chunk(c) => {
                    assert_eq!(c.partition, other, "a chunk of the refused partition");
                    other_bytes += c.bytes.len() as u64;
                    let end = c.position + c.bytes.len() as u64;
                    applier
                        .send(Frame::Ack(position(&other, c.segment_base, end)))
                        .await
                        .unwrap();
                }
                Frame::SegmentSeal(seal) => {
                    assert_eq!(seal.partition, other, "a seal of the refused partition");
                    seals += 1;
                    let at = position(&other, seal.segment_base, seal.final_size);
                    applier.send(Frame::Ack(at)).await.unwrap();
                }
                Frame::Heartbeat { .. } | Frame::SourceProgress(_) | Frame::LinkMeta(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        true
    })
    .await
    .expect("the other partition streams");
    if !streamed {
        let (end, _) = s.await.unwrap();
        panic!("the session ended: {end:?}");
    }
    assert!(!s.is_finished(), "the session is still running");
    applier
        .send(Frame::Goodbye(Goodbye {
            reason: GoodbyeReason::Shutdown,
            message: "done".into(),
        }))
        .await
        .unwrap();
    let (end, feed) = s.await.unwrap();
    assert!(matches!(end, Ok(SessionEnd::PeerGoodbye { .. })), "{end:?}");
    let reason = feed.refused_resume(&partition()).expect("refused, naming why");
    assert!(reason.contains("did not rewrite"), "{reason}");
}
