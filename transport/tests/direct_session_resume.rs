//! The shipper's session against a hostile applier's Resume: a partition named twice ends that session with a
//! protocol error (the peer's fault: transient, the dialler reconnects), never a local error that would end the
//! shipper process.

use futures::SinkExt;
use segmirror_transport::direct::session::{BoxIo, FramedIo, ShipperSession};
use segmirror_transport::direct::{handshake, DirectError, ErrorClass, Frame, Position, Role, Session};
use support::session::*;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

mod support;

/// A handshaken pair of framed streams over loopback TCP: (shipper side, applier side).
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_naming_a_partition_twice_ends_the_session_as_the_peers_fault() {
    let ((s_framed, s_session), (mut a_framed, _)) = pair().await;
    let feed = TestFeed::new(&partitions(1), 5, 5);
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &CancellationToken::new()).await });
    let p = partitions(1).remove(0);
    let at = |position| Position {
        partition: p.clone(),
        segment_base: 0,
        position,
    };
    a_framed
        .send(Frame::Resume(vec![at(0), at(512)]))
        .await
        .expect("resume");
    let err = s.await.expect("join").expect_err("refused");
    match &err {
        DirectError::Protocol { reason } => assert!(reason.contains("names orders-0 twice"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_ne!(
        err.class(),
        ErrorClass::Local,
        "the peer's fault never ends the shipper process"
    );
}
