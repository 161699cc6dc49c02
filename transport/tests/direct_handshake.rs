//! The direct protocol's handshake over real loopback TCP, plaintext: agreement,
//! push and pull, refusals seen on both sides with both sides' versions and
//! names, and a silent peer that times out instead of hanging.

use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::handshake::MAX_PROTOCOL_VERSION;
use segmirror_transport::direct::{
    handshake, Chunk, DirectError, Frame, FrameError, HandshakeConfig, PartitionRef, Position, RefuseReason, Role,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

fn shipper(link: &str, cluster: &str) -> HandshakeConfig {
    HandshakeConfig::new(Role::Shipper, link, Some(cluster.to_string()))
}

fn applier(link: &str, cluster: Option<&str>) -> HandshakeConfig {
    HandshakeConfig::new(Role::Applier, link, cluster.map(str::to_string))
}

/// Runs `listening` on the accepted side and `dialling` on the dialling side
/// of one loopback connection; returns (listener's result, dialler's result).
async fn pair(
    listening: HandshakeConfig,
    dialling: HandshakeConfig,
) -> (
    Result<
        (
            tokio_util::codec::Framed<TcpStream, segmirror_transport::direct::FrameCodec>,
            segmirror_transport::direct::Session,
        ),
        DirectError,
    >,
    Result<
        (
            tokio_util::codec::Framed<TcpStream, segmirror_transport::direct::FrameCodec>,
            segmirror_transport::direct::Session,
        ),
        DirectError,
    >,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("accept");
        handshake(stream, &listening).await
    });
    let stream = TcpStream::connect(addr).await.expect("connect");
    let client = handshake(stream, &dialling).await;
    (server.await.expect("join"), client)
}

#[tokio::test]
async fn push_mode_agrees_and_the_stream_carries_frames_after_it() {
    // Push: the shipper dials, the applier listens.
    let (a, s) = pair(applier("dr", Some("cluster-A")), shipper("dr", "cluster-A")).await;
    let (mut a_framed, a_session) = a.expect("applier");
    let (mut s_framed, s_session) = s.expect("shipper");
    assert_eq!(a_session.version, MAX_PROTOCOL_VERSION);
    assert_eq!(s_session.version, a_session.version);
    assert_eq!(a_session.source_cluster_id, "cluster-A");
    assert_eq!(s_session.source_cluster_id, "cluster-A");
    assert_eq!(a_session.peer.role, Role::Shipper);
    assert_eq!(s_session.peer.role, Role::Applier);
    assert_eq!(s_session.link, "dr");

    // The framed streams go on with the session's frames.
    let partition = PartitionRef {
        topic: "orders".into(),
        partition: 3,
        topic_id: [7; 16],
    };
    let chunk = Frame::Chunk(Chunk {
        partition: partition.clone(),
        segment_base: 100,
        position: 4096,
        bytes: Bytes::from_static(b"batch bytes"),
        crcs: Default::default(),
    });
    s_framed.send(chunk.clone()).await.expect("send chunk");
    assert_eq!(a_framed.next().await.expect("frame").expect("decoded"), chunk);
    let ack = Frame::Ack(Position {
        partition,
        segment_base: 100,
        position: 4107,
    });
    a_framed.send(ack.clone()).await.expect("send ack");
    assert_eq!(s_framed.next().await.expect("frame").expect("decoded"), ack);
}

#[tokio::test]
async fn pull_mode_is_the_same_handshake_with_the_applier_dialling() {
    let (s, a) = pair(shipper("dr", "c1"), applier("dr", None)).await;
    let (_, s_session) = s.expect("shipper");
    let (_, a_session) = a.expect("applier");
    assert_eq!((s_session.role, a_session.role), (Role::Shipper, Role::Applier));
    // An applier that did not know the cluster yet learns it from the shipper.
    assert_eq!(a_session.source_cluster_id, "c1");
}

#[tokio::test]
async fn the_highest_common_version_and_common_features_are_agreed() {
    let mut s = shipper("dr", "c");
    s.min_version = 1;
    s.max_version = 5;
    s.features_supported = 0b1011;
    let mut a = applier("dr", None);
    a.min_version = 2;
    a.max_version = 4;
    a.features_supported = 0b0110;
    let (a, s) = pair(a, s).await;
    let (_, a_session) = a.expect("applier");
    let (_, s_session) = s.expect("shipper");
    assert_eq!((a_session.version, a_session.features), (4, 0b0010));
    assert_eq!((s_session.version, s_session.features), (4, 0b0010));
}

/// Feature bit 10 says the shipper ships above the high watermark: agreed only with a shipper in that mode.
#[tokio::test]
async fn only_a_log_end_shipper_agrees_the_uncommitted_bit() {
    use segmirror_transport::direct::codes::FEATURE_UNCOMMITTED;
    use segmirror_transport::direct::TruncateMode;
    for (upto, agreed) in [(TruncateMode::HighWatermark, false), (TruncateMode::LogEnd, true)] {
        let mut s = shipper("dr", "c");
        s.upto = upto;
        let (a, s) = pair(applier("dr", None), s).await;
        let (_, a_session) = a.expect("applier");
        let (_, s_session) = s.expect("shipper");
        assert_eq!(a_session.features & FEATURE_UNCOMMITTED != 0, agreed, "{upto:?}");
        assert_eq!(s_session.features, a_session.features);
    }
}

#[tokio::test]
async fn a_version_mismatch_is_refused_on_both_sides_naming_both_versions() {
    let mut a = applier("dr", None);
    a.min_version = 2;
    a.max_version = 3;
    let (a, s) = pair(a, shipper("dr", "c")).await;
    for (side, result) in [("applier", a.map(|_| ())), ("shipper", s.map(|_| ()))] {
        let err = result.expect_err(side);
        let text = err.to_string();
        assert!(
            matches!(
                err,
                DirectError::Refused {
                    reason: RefuseReason::Version,
                    ..
                } | DirectError::RefusedByPeer {
                    reason: RefuseReason::Version,
                    ..
                }
            ),
            "{side}: {err:?}"
        );
        assert!(text.contains("2..=3") && text.contains("1..=1"), "{side}: {text}");
    }
}

#[tokio::test]
async fn a_wrong_link_name_is_refused_on_both_sides_naming_both_links() {
    let (a, s) = pair(applier("dr-east", None), shipper("dr-west", "c")).await;
    for (side, result) in [("applier", a.map(|_| ())), ("shipper", s.map(|_| ()))] {
        let err = result.expect_err(side);
        let text = err.to_string();
        assert!(
            matches!(
                err,
                DirectError::Refused {
                    reason: RefuseReason::Link,
                    ..
                } | DirectError::RefusedByPeer {
                    reason: RefuseReason::Link,
                    ..
                }
            ),
            "{side}: {err:?}"
        );
        assert!(
            text.contains("\"dr-east\"") && text.contains("\"dr-west\""),
            "{side}: {text}"
        );
    }
}

#[tokio::test]
async fn a_shipper_of_another_source_cluster_is_refused_by_the_applier_and_told_why() {
    let (a, s) = pair(applier("dr", Some("cluster-A")), shipper("dr", "cluster-B")).await;
    let a_err = a.map(|_| ()).expect_err("applier");
    assert!(
        matches!(
            a_err,
            DirectError::Refused {
                reason: RefuseReason::SourceCluster,
                ..
            }
        ),
        "{a_err:?}"
    );
    // Only the applier knows which cluster it follows: the shipper learns it from the Refuse frame.
    let s_err = s.map(|_| ()).expect_err("shipper");
    let DirectError::RefusedByPeer {
        reason,
        local_role,
        peer_role,
        message,
    } = s_err
    else {
        panic!("shipper: {s_err:?}");
    };
    assert_eq!(
        (reason, local_role, peer_role),
        (RefuseReason::SourceCluster, Role::Shipper, Role::Applier)
    );
    assert!(
        message.contains("cluster-A") && message.contains("cluster-B"),
        "{message}"
    );
}

#[tokio::test]
async fn two_shippers_refuse_each_other() {
    let (a, b) = pair(shipper("dr", "c"), shipper("dr", "c")).await;
    for result in [a.map(|_| ()), b.map(|_| ())] {
        let err = result.expect_err("role");
        assert!(
            matches!(
                err,
                DirectError::Refused {
                    reason: RefuseReason::Role,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn a_required_feature_the_peer_lacks_is_refused() {
    let mut a = applier("dr", None);
    // A bit no build defines (bit 2 was used here until it became FEATURE_SOURCE_PROGRESS).
    a.features_supported = 1 << 40;
    a.features_required = 1 << 40;
    let (a, s) = pair(a, shipper("dr", "c")).await;
    for result in [a.map(|_| ()), s.map(|_| ())] {
        let err = result.expect_err("features");
        assert!(
            matches!(
                err,
                DirectError::Refused {
                    reason: RefuseReason::Features,
                    ..
                } | DirectError::RefusedByPeer {
                    reason: RefuseReason::Features,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn a_silent_peer_times_out_instead_of_hanging() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let silent = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        // Hold the connection open without a word until the other side gives up.
        let mut buf = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut buf).await;
    });
    let mut config = shipper("dr", "c");
    config.timeout = Duration::from_millis(300);
    let stream = TcpStream::connect(addr).await.expect("connect");
    let err = handshake(stream, &config).await.map(|_| ()).expect_err("timeout");
    assert!(
        matches!(
            err,
            DirectError::Timeout {
                stage: "waiting for the peer's Hello",
                ..
            }
        ),
        "{err:?}"
    );
    silent.await.expect("join");
}

#[tokio::test]
async fn a_peer_that_is_not_segmirror_is_a_frame_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let http = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    });
    let stream = TcpStream::connect(addr).await.expect("connect");
    let err = handshake(stream, &shipper("dr", "c"))
        .await
        .map(|_| ())
        .expect_err("http");
    // "HT" then "TP/1" as a length: far over the maximum, refused from the header.
    assert!(
        matches!(err, DirectError::Frame(FrameError::Oversized { offset: 0, .. })),
        "{err:?}"
    );
    http.await.expect("join");
}

#[tokio::test]
async fn a_bad_local_setting_is_refused_before_any_byte_is_sent() {
    let (client, _server) = tokio::io::duplex(64);
    let mut config = shipper("dr", "c");
    config.source_cluster_id = None;
    let err = handshake(client, &config).await.map(|_| ()).expect_err("config");
    assert!(
        matches!(
            err,
            DirectError::Config {
                field: "source_cluster_id",
                ..
            }
        ),
        "{err:?}"
    );
}
