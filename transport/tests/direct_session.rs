//! The direct protocol's session over real loopback TCP: chunks from a feed
//! reach an in-memory applier exactly once and in order through a proxy that
//! drops, resets, stalls and throttles the connection; a stalled applier bounds
//! what the shipper has in flight; heartbeats keep a quiet session alive and a
//! silent peer is timed out; Goodbye ends both sides cleanly; a gap is refused
//! unapplied; a second peer is refused Busy; a wrong peer pauses the link.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Dialer, LinkEvent};
use segmirror_transport::direct::session::{
    ApplierSession, BoxIo, FramedIo, SessionConfig, SessionEnd, ShipperSession, ShipperStats,
};
use segmirror_transport::direct::testing::FaultProxy;
use segmirror_transport::direct::tls::{self, TlsFiles};
use segmirror_transport::direct::{
    handshake, Chunk, DirectError, ErrorClass, Frame, GoodbyeReason, RefuseReason, Role, Session,
};
use support::certs::Ca;
use support::session::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

mod support;

/// Who listens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The applier listens, the shipper dials.
    Push,
    /// The shipper listens, the applier dials.
    Pull,
}

/// How both sides secure the link.
#[derive(Clone)]
enum Security {
    Plain,
    Tls { shipper: TlsFiles, applier: TlsFiles },
}

impl Security {
    fn dialer(&self, role: Role) -> Dialer {
        match self {
            Security::Plain => Dialer::Plain,
            Security::Tls { shipper, applier } => Dialer::Tls {
                config: tls::client_config(if role == Role::Shipper { shipper } else { applier }).expect("client"),
                server_name: "127.0.0.1".into(),
            },
        }
    }

    fn acceptor(&self, role: Role) -> Acceptor {
        match self {
            Security::Plain => Acceptor::Plain,
            Security::Tls { shipper, applier } => Acceptor::Tls(
                tls::server_config(if role == Role::Shipper { shipper } else { applier }).expect("server"),
            ),
        }
    }
}

/// The longest any one step of these tests waits for an event or for progress: a stuck step fails with its
/// name instead of hanging the test run.
const STEP: Duration = Duration::from_secs(60);

/// The next event matching `pred`, waiting at most [`STEP`] (`None`: none came).
async fn next_matching(
    rx: &mut mpsc::Receiver<LinkEvent>,
    mut pred: impl FnMut(&LinkEvent) -> bool,
) -> Option<LinkEvent> {
    tokio::time::timeout(STEP, async {
        loop {
            let event = rx.recv().await.expect("events channel open");
            if pred(&event) {
                return event;
            }
        }
    })
    .await
    .ok()
}

/// Waits (at most [`STEP`]) for an event matching `pred`.
async fn wait_event(rx: &mut mpsc::Receiver<LinkEvent>, pred: impl Fn(&LinkEvent) -> bool) -> LinkEvent {
    next_matching(rx, pred).await.expect("the awaited link event")
}

fn is_error_end(e: &LinkEvent) -> bool {
    matches!(e, LinkEvent::SessionEnded { error: Some(_), .. })
}

/// The dialler's sessions as its events tell them, so that a fault is applied while a session runs.
///
/// Why: a session may end on its own just before a fault (an idle timeout on a loaded machine) and the dialler
/// then reconnects. A fault applied in between hits no session: a cut would wait for an end that never comes,
/// and a stall would keep every reconnect in its handshake, so that no session starts (or ends) until it passes.
struct Sessions {
    events: mpsc::Receiver<LinkEvent>,
    running: bool,
    /// Every event seen, for the failure messages.
    seen: Vec<LinkEvent>,
}

impl Sessions {
    fn new(events: mpsc::Receiver<LinkEvent>) -> Sessions {
        Sessions {
            events,
            running: false,
            seen: Vec::new(),
        }
    }

    /// Takes `event` into the record: what it says of the running session, and the list of events seen.
    fn note(running: &mut bool, seen: &mut Vec<LinkEvent>, event: &LinkEvent) {
        seen.push(event.clone());
        match event {
            LinkEvent::SessionStarted => *running = true,
            LinkEvent::SessionEnded { .. } => *running = false,
            _ => {}
        }
    }

    /// The next event matching `pred` (at most [`STEP`] away), every event before it noted.
    async fn until(&mut self, what: &str, pred: impl Fn(&LinkEvent) -> bool) -> LinkEvent {
        let Sessions { events, running, seen } = self;
        let found = next_matching(events, |event| {
            Self::note(running, seen, event);
            pred(event)
        })
        .await;
        found.unwrap_or_else(|| panic!("no {what} within {STEP:?}; events: {:?}", self.seen))
    }

    /// Returns once a session runs (at once if one does).
    async fn running(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            Self::note(&mut self.running, &mut self.seen, &event);
        }
        if !self.running {
            self.until("session start", |e| matches!(e, LinkEvent::SessionStarted))
                .await;
        }
    }

    /// Applies `fault` to a running session and waits until the dialler's session ended.
    async fn cut(&mut self, fault: impl FnOnce()) {
        self.running().await;
        fault();
        self.until("session end after the cut", |e| {
            matches!(e, LinkEvent::SessionEnded { .. })
        })
        .await;
    }
}

/// Waits (at most [`STEP`]) until `share` of the bytes are applied.
async fn reach(progress: &mut Progress, total: u64, percent: u64) {
    tokio::time::timeout(STEP, progress.wait_for(|(bytes, _)| *bytes * 100 >= total * percent))
        .await
        .unwrap_or_else(|_| panic!("{percent}% of the bytes not applied within {STEP:?}"))
        .expect("progress");
}

/// Runs a shipper and an applier linked through a fault-injecting proxy, cuts
/// the connection in every way the proxy knows while the stream flows, and
/// checks the applier ends with exactly the feed's bytes.
async fn faulty_link(direction: Direction, security: Security, max_bandwidth: Option<u64>) {
    const WINDOW: u64 = 64 << 10;
    let parts = partitions(3);
    let feed = TestFeed::new(&parts, 240, 20);
    let (total, seals, chunks) = (feed.total_bytes(), feed.total_seals(), feed.total_chunks());
    let expected = feed.expected.clone();
    let shipper_config = SessionConfig {
        max_bandwidth,
        ..session_config(WINDOW)
    };
    let shipper = ShipperSession::new(feed, shipper_config).expect("shipper");
    let (mem, state, mut progress) = MemApplier::new(None);
    let applier = ApplierSession::new(mem, session_config(WINDOW)).expect("applier");

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = FaultProxy::start(listener.local_addr().expect("addr"))
        .await
        .expect("proxy");
    let target = proxy.addr().to_string();
    let shutdown = CancellationToken::new();
    let (dial_role, listen_role) = match direction {
        Direction::Push => (Role::Shipper, Role::Applier),
        Direction::Pull => (Role::Applier, Role::Shipper),
    };
    let (dial_config, dial_events) = link_config(dial_role, LINK);
    let mut sessions = Sessions::new(dial_events);
    let (listen_config, _listen_events) = link_config(listen_role, LINK);
    let (dialer, acceptor) = (security.dialer(dial_role), security.acceptor(listen_role));

    // Each side's task gives back its session object, for the checks at the end.
    let (shipper_task, applier_task) = {
        let stop = shutdown.clone();
        match direction {
            Direction::Push => {
                let s = tokio::spawn(async move {
                    let mut shipper = shipper;
                    let r = dial(&target, &dialer, &dial_config, &mut shipper, &stop).await;
                    (shipper, r)
                });
                let a = tokio::spawn(listen(listener, acceptor, listen_config, applier, shutdown.clone()));
                (
                    tokio::spawn(async move { s.await.expect("shipper task") }),
                    tokio::spawn(async move { a.await.expect("applier task").1 }),
                )
            }
            Direction::Pull => {
                let a = tokio::spawn(async move {
                    let mut applier = applier;
                    dial(&target, &dialer, &dial_config, &mut applier, &stop).await
                });
                let s = tokio::spawn(listen(listener, acceptor, listen_config, shipper, shutdown.clone()));
                (
                    tokio::spawn(async move { s.await.expect("shipper task") }),
                    tokio::spawn(async move { a.await.expect("applier task") }),
                )
            }
        }
    };

    // The faults, each at a point of progress, so the stream is moving when it is cut. Each cut is applied to a
    // running session and seen to end it before the stream goes on: otherwise a cut the proxy acts on late lets
    // the stream run on, and the next cut lands on the same session (seen in CI: "4 sessions").
    reach(&mut progress, total, 10).await;
    sessions.cut(|| proxy.drop_connections()).await;
    reach(&mut progress, total, 25).await;
    sessions.cut(|| proxy.reset_connections()).await;
    reach(&mut progress, total, 40).await;
    // A stall longer than the idle timeout: the dialler's session times out, and its reconnects stall too until
    // the link passes again. A reconnect failing in its handshake also shows the stall biting (the session may
    // have ended on its own just before it).
    sessions.running().await;
    proxy.stall();
    sessions
        .until("session end or failed reconnect in the stall", |e| {
            is_error_end(e) || matches!(e, LinkEvent::ConnectFailed { .. })
        })
        .await;
    proxy.pass();
    reach(&mut progress, total, 55).await;
    proxy.throttle(96 << 10);
    reach(&mut progress, total, 65).await;
    proxy.pass();
    reach(&mut progress, total, 80).await;
    sessions.cut(|| proxy.reset_connections()).await;
    // The last cut may land after the last byte was applied: the session after it is awaited too, so that the
    // shutdown below does not race the reconnection the checks count.
    sessions.running().await;
    tokio::time::timeout(STEP, progress.wait_for(|(bytes, s)| *bytes >= total && *s >= seals))
        .await
        .expect("every byte and seal applied")
        .expect("progress");

    shutdown.cancel();
    let (shipper, shipper_end) = shipper_task.await.expect("join");
    shipper_end.expect("the shipper stops cleanly");
    applier_task.await.expect("join").expect("the applier stops cleanly");

    let state = state.lock().expect("lock");
    for p in &parts {
        let got = state.parts.get(p).expect("partition applied");
        assert_eq!(got.len(), expected[p].len(), "{p:?}: segments");
        for (g, e) in got.iter().zip(&expected[p]) {
            assert_eq!(
                (g.base, g.sealed, g.bytes.len()),
                (e.base, e.sealed, e.bytes.len()),
                "{p:?}"
            );
            assert!(g.bytes == e.bytes, "{p:?} segment {}: bytes differ", e.base);
        }
    }
    // Exactly once: every chunk applied once, whatever was resent after the cuts.
    assert_eq!(state.applied_chunks, chunks);
    assert_eq!(state.seals, seals);
    let stats: &ShipperStats = shipper.stats();
    assert_eq!(stats.resume_regressions, 0, "acknowledged positions went backwards");
    assert!(stats.max_in_flight <= WINDOW, "{} in flight", stats.max_in_flight);
    // The cuts did cut: a session before each of the four faults and one after the last, each started by the
    // dialler, through as many connections. The shipper counts a session once the applier's Resume reaches it,
    // which a session cut right after its handshake never does; the stream went on after the first cut, so at
    // least two did.
    let started = sessions
        .seen
        .iter()
        .filter(|e| matches!(e, LinkEvent::SessionStarted))
        .count();
    assert!(
        started >= 5,
        "{started} sessions started; the dialler's events: {:?}",
        sessions.seen
    );
    assert!(
        stats.sessions >= 2,
        "{} sessions resumed; the dialler's events: {:?}",
        stats.sessions,
        sessions.seen
    );
    assert!(proxy.connections() >= 5, "{} connections", proxy.connections());
    assert!(stats.bytes_sent >= total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_over_a_faulty_plaintext_link_delivers_every_byte_exactly_once() {
    faulty_link(Direction::Push, Security::Plain, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_over_a_faulty_mutual_tls_link_with_a_bandwidth_limit_delivers_every_byte_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("link CA");
    let security = Security::Tls {
        shipper: ca.leaf(dir.path(), "shipper", &["localhost", "127.0.0.1"]),
        applier: ca.leaf(dir.path(), "applier", &["localhost", "127.0.0.1"]),
    };
    // With --max-bandwidth (1 MiB/s: the first second is the bucket's burst, the rest of the ~1.6 MB is paced).
    faulty_link(Direction::Pull, security, Some(1 << 20)).await;
}

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
async fn a_stalled_applier_bounds_the_shippers_in_flight_bytes_and_heartbeats_keep_the_session() {
    const WINDOW: u64 = 32 << 10;
    let parts = partitions(2);
    let feed = TestFeed::new(&parts, 60, 15);
    let (total, chunks) = (feed.total_bytes(), feed.total_chunks());
    let yielded = feed.yielded.clone();
    let config = session_config(WINDOW);
    let idle = config.idle_timeout;
    let mut shipper = ShipperSession::new(feed, config.clone()).expect("shipper");
    let (gate_tx, gate) = watch::channel(false);
    let (mem, state, mut progress) = MemApplier::new(Some(gate));
    let mut applier = ApplierSession::new(mem, config).expect("applier");

    let ((s_framed, s_session), (a_framed, a_session)) = pair().await;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &stop).await });
    let stop = shutdown.clone();
    let s = tokio::spawn(async move {
        let r = shipper.run(s_framed, &s_session, &stop).await;
        (shipper, r)
    });

    // The shipper takes items until the window is full (plus the one it holds back) ...
    while yielded.load(Ordering::SeqCst) < WINDOW {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ... and the applier stays stalled for several idle timeouts: only heartbeats flow.
    tokio::time::sleep(idle * 3).await;
    assert_eq!(
        state.lock().expect("lock").applied_chunks,
        0,
        "the gate holds the applier"
    );
    assert!(
        !s.is_finished() && !a.is_finished(),
        "heartbeats keep the stalled session open"
    );
    gate_tx.send_replace(true);
    progress.wait_for(|(bytes, _)| *bytes >= total).await.expect("progress");
    shutdown.cancel();
    let (shipper, end) = s.await.expect("join");
    assert_eq!(end.expect("shipper"), SessionEnd::Shutdown);
    let _ = a.await.expect("join");

    let stats = shipper.stats();
    assert_eq!(stats.sessions, 1, "one session throughout the stall");
    assert!(
        stats.max_in_flight <= WINDOW,
        "{} bytes in flight, window {WINDOW}",
        stats.max_in_flight
    );
    // The window was really reached: within one chunk (at most 4 KiB) of it.
    assert!(
        stats.max_in_flight + 4096 > WINDOW,
        "{} bytes in flight",
        stats.max_in_flight
    );
    assert_eq!(state.lock().expect("lock").applied_chunks, chunks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_stays_open_and_shutdown_sends_goodbye_and_the_peer_ends_cleanly() {
    for stopping in [Role::Shipper, Role::Applier] {
        let parts = partitions(1);
        let feed = TestFeed::new(&parts, 10, 5);
        let total = feed.total_bytes();
        let config = SessionConfig {
            idle_timeout: Duration::from_millis(300),
            ..session_config(1 << 20)
        };
        let mut shipper = ShipperSession::new(feed, config.clone()).expect("shipper");
        let (mem, _state, mut progress) = MemApplier::new(None);
        let mut applier = ApplierSession::new(mem, config.clone()).expect("applier");
        let ((s_framed, s_session), (a_framed, a_session)) = pair().await;
        let (stop_s, stop_a) = (CancellationToken::new(), CancellationToken::new());
        let token = stop_a.clone();
        let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &token).await });
        let token = stop_s.clone();
        let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &token).await });
        progress.wait_for(|(bytes, _)| *bytes >= total).await.expect("progress");
        // Nothing left to ship: an idle session, kept alive by heartbeats alone for several idle timeouts.
        tokio::time::sleep(config.idle_timeout * 4).await;
        assert!(
            !s.is_finished() && !a.is_finished(),
            "heartbeats keep an idle session open"
        );
        let (stopped, peer) = match stopping {
            Role::Shipper => {
                stop_s.cancel();
                (s.await.expect("join"), a.await.expect("join"))
            }
            Role::Applier => {
                stop_a.cancel();
                (a.await.expect("join"), s.await.expect("join"))
            }
        };
        assert_eq!(stopped.expect("stopping side"), SessionEnd::Shutdown);
        match peer.expect("the peer ends cleanly") {
            SessionEnd::PeerGoodbye { reason, message } => {
                assert_eq!(reason, GoodbyeReason::Shutdown);
                assert!(message.contains(&stopping.to_string()), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_timed_out_on_both_roles() {
    // A silent applier: Resume and Credit, then nothing, not even heartbeats.
    let ((s_framed, s_session), (mut a_framed, _)) = pair().await;
    a_framed.send(Frame::Resume(vec![])).await.expect("resume");
    a_framed.send(Frame::Credit { bytes: 1 << 20 }).await.expect("credit");
    let feed = TestFeed::new(&partitions(1), 5, 5);
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let err = shipper
        .run(s_framed, &s_session, &CancellationToken::new())
        .await
        .expect_err("silent applier");
    assert!(matches!(err, DirectError::Timeout { .. }), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Transient);
    drop(a_framed);

    // A silent shipper: it completes the handshake, then says nothing.
    let ((s_framed, _), (a_framed, a_session)) = pair().await;
    let (mem, state, _) = MemApplier::new(None);
    let mut applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
    let err = applier
        .run(a_framed, &a_session, &CancellationToken::new())
        .await
        .expect_err("silent shipper");
    assert!(matches!(err, DirectError::Timeout { .. }), "{err:?}");
    assert_eq!(state.lock().expect("lock").applied_chunks, 0);
    drop(s_framed);
}

fn chunk(position: u64, bytes: &[u8]) -> Frame {
    Frame::Chunk(Chunk {
        partition: partitions(1).remove(0),
        segment_base: 0,
        position,
        bytes: Bytes::copy_from_slice(bytes),
        crcs: Default::default(),
    })
}

/// The next frame that is not a heartbeat.
async fn next_frame(framed: &mut FramedIo) -> Option<Frame> {
    loop {
        match framed.next().await {
            Some(Ok(Frame::Heartbeat { .. })) => continue,
            Some(Ok(frame)) => return Some(frame),
            _ => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_from_a_hostile_shipper_is_refused_unapplied_and_a_resend_is_compared() {
    let ((mut s_framed, _), (a_framed, a_session)) = pair().await;
    let (mem, state, _) = MemApplier::new(None);
    let mut applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
    let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &CancellationToken::new()).await });

    assert_eq!(next_frame(&mut s_framed).await, Some(Frame::Resume(vec![])));
    assert_eq!(next_frame(&mut s_framed).await, Some(Frame::Credit { bytes: 1 << 20 }));
    let first = [5u8; 100];
    s_framed.send(chunk(0, &first)).await.expect("send");
    match next_frame(&mut s_framed).await {
        Some(Frame::Ack(p)) => assert_eq!((p.segment_base, p.position), (0, 100)),
        other => panic!("{other:?}"),
    }
    assert_eq!(next_frame(&mut s_framed).await, Some(Frame::Credit { bytes: 100 }));
    // The same bytes again (a resend after a cut): compared, skipped, credit returned, no Ack.
    s_framed.send(chunk(0, &first)).await.expect("send");
    assert_eq!(next_frame(&mut s_framed).await, Some(Frame::Credit { bytes: 100 }));
    // A chunk 50 bytes beyond the durable end: a gap.
    s_framed.send(chunk(150, &[6u8; 10])).await.expect("send");
    match next_frame(&mut s_framed).await {
        Some(Frame::Goodbye(g)) => {
            assert_eq!(g.reason, GoodbyeReason::Error);
            assert!(g.message.contains("gap"), "{}", g.message);
        }
        other => panic!("{other:?}"),
    }
    let err = a.await.expect("join").expect_err("gap");
    assert!(
        matches!(&err, DirectError::Protocol { reason } if reason.contains("gap")),
        "{err:?}"
    );
    let state = state.lock().expect("lock");
    assert_eq!(state.applied_chunks, 1);
    assert_eq!(state.checked, 1);
    let segs = &state.parts[&partitions(1)[0]];
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].bytes, first.to_vec(), "the gap chunk was not installed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_peer_on_a_served_link_is_refused_busy() {
    let (mem, _state, _) = MemApplier::new(None);
    let applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (config, mut events) = link_config(Role::Applier, LINK);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(listen(listener, Acceptor::Plain, config, applier, shutdown.clone()));

    let connect = || async {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        handshake(Box::new(tcp) as BoxIo, &handshake_config(Role::Shipper, LINK))
            .await
            .expect("handshake")
            .0
    };
    let mut first = connect().await;
    assert_eq!(next_frame(&mut first).await, Some(Frame::Resume(vec![])));
    wait_event(&mut events, |e| *e == LinkEvent::SessionStarted).await;

    let mut second = connect().await;
    match next_frame(&mut second).await {
        Some(Frame::Refuse(r)) => {
            assert_eq!(r.reason, RefuseReason::Busy);
            assert!(r.message.contains(LINK), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(next_frame(&mut second).await, None, "closed after the refusal");
    // The first session is untouched.
    assert_eq!(next_frame(&mut first).await, Some(Frame::Credit { bytes: 1 << 20 }));
    shutdown.cancel();
    let (_, r) = served.await.expect("join");
    r.expect("listener stops cleanly");
    assert_eq!(
        DirectError::RefusedByPeer {
            reason: RefuseReason::Busy,
            local_role: Role::Shipper,
            peer_role: Role::Applier,
            message: String::new()
        }
        .class(),
        ErrorClass::Transient,
        "a dialler retries a busy link with backoff"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_peer_pauses_the_link_and_is_reported_once() {
    let (mem, _state, _) = MemApplier::new(None);
    let applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = FaultProxy::start(listener.local_addr().expect("addr"))
        .await
        .expect("proxy");
    let (config, _) = link_config(Role::Applier, LINK);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(listen(listener, Acceptor::Plain, config, applier, shutdown.clone()));

    let feed = TestFeed::new(&partitions(1), 5, 5);
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let (mut config, mut events) = link_config(Role::Shipper, "another-link");
    config.backoff.initial = Duration::ZERO;
    let target = proxy.addr().to_string();
    let stop = shutdown.clone();
    let dialling = tokio::spawn(async move { dial(&target, &Dialer::Plain, &config, &mut shipper, &stop).await });
    let paused = wait_event(&mut events, |e| matches!(e, LinkEvent::Paused { .. })).await;
    let LinkEvent::Paused { error, pause } = paused else {
        unreachable!()
    };
    assert!(error.contains("another-link") && error.contains(LINK), "{error}");
    assert_eq!(pause, Duration::from_secs(3600));
    // The link waits out its pause instead of redialling; shutdown ends the wait.
    shutdown.cancel();
    dialling.await.expect("join").expect("dial stops cleanly");
    served.await.expect("join").1.expect("listener stops cleanly");
    assert_eq!(proxy.connections(), 1, "one attempt, then the pause");
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(event, LinkEvent::Paused { .. }), "reported once: {event:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_pauses_the_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, other) = (Ca::new("link CA"), Ca::new("some other CA"));
    let applier_files = ca.leaf(dir.path(), "applier", &["localhost", "127.0.0.1"]);
    let mut stranger = other.leaf(dir.path(), "stranger", &["localhost"]);
    stranger.ca = applier_files.ca.clone();
    let security = Security::Tls {
        shipper: stranger,
        applier: applier_files,
    };
    let (mem, state, _) = MemApplier::new(None);
    let applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let target = listener.local_addr().expect("addr").to_string();
    let (config, _) = link_config(Role::Applier, LINK);
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(listen(
        listener,
        security.acceptor(Role::Applier),
        config,
        applier,
        shutdown.clone(),
    ));
    let feed = TestFeed::new(&partitions(1), 5, 5);
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let (config, mut events) = link_config(Role::Shipper, LINK);
    let dialer = security.dialer(Role::Shipper);
    let stop = shutdown.clone();
    let dialling = tokio::spawn(async move { dial(&target, &dialer, &config, &mut shipper, &stop).await });
    let event = wait_event(&mut events, |e| {
        matches!(e, LinkEvent::Paused { .. } | LinkEvent::SessionStarted)
    })
    .await;
    assert!(matches!(event, LinkEvent::Paused { .. }), "{event:?}");
    shutdown.cancel();
    dialling.await.expect("join").expect("dial stops cleanly");
    served.await.expect("join").1.expect("listener stops cleanly");
    assert!(state.lock().expect("lock").parts.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applier_refuses_items_beyond_the_credit_it_granted() {
    let ((mut s_framed, _), (a_framed, a_session)) = pair().await;
    let (mem, state, _) = MemApplier::new(None);
    let mut applier = ApplierSession::new(mem, session_config(100)).expect("applier");
    let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &CancellationToken::new()).await });
    assert_eq!(next_frame(&mut s_framed).await, Some(Frame::Resume(vec![])));
    assert_eq!(next_frame(&mut s_framed).await, Some(Frame::Credit { bytes: 100 }));
    // 150 bytes against a window of 100.
    s_framed.send(chunk(0, &[1u8; 150])).await.expect("send");
    match next_frame(&mut s_framed).await {
        Some(Frame::Goodbye(g)) => assert!(g.message.contains("credit"), "{}", g.message),
        other => panic!("{other:?}"),
    }
    let err = a.await.expect("join").expect_err("over credit");
    match &err {
        DirectError::Protocol { reason } => assert!(reason.contains("credit"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(state.lock().expect("lock").applied_chunks, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipper_refuses_acks_backwards_or_beyond_what_it_sent() {
    for hostile in ["beyond", "backwards"] {
        let ((s_framed, s_session), (mut a_framed, _)) = pair().await;
        let feed = TestFeed::new(&partitions(1), 5, 5);
        let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
        let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &CancellationToken::new()).await });
        let p = partitions(1).remove(0);
        let at = |position| segmirror_transport::direct::Position {
            partition: p.clone(),
            segment_base: 0,
            position,
        };
        a_framed.send(Frame::Resume(vec![at(0)])).await.expect("resume");
        // Feature bit 7 is agreed: the partition's (empty) list of sealed segments follows the Resume.
        let layout = segmirror_transport::direct::payload::MirrorLayout {
            partition: p.clone(),
            last: true,
            segments: Vec::new(),
        };
        a_framed.send(Frame::MirrorLayout(layout)).await.expect("layout");
        a_framed.send(Frame::Credit { bytes: 1 << 20 }).await.expect("credit");
        let Some(Frame::Chunk(first)) = next_frame(&mut a_framed).await else {
            panic!("a chunk first")
        };
        let end = first.bytes.len() as u64;
        if hostile == "beyond" {
            a_framed.send(Frame::Ack(at(end + 1_000_000))).await.expect("ack");
        } else {
            a_framed.send(Frame::Ack(at(end))).await.expect("ack");
            a_framed.send(Frame::Ack(at(end - 1))).await.expect("ack");
        }
        let err = s.await.expect("join").expect_err(hostile);
        match &err {
            DirectError::Protocol { reason } => assert!(reason.contains(hostile), "{reason}"),
            other => panic!("{hostile}: {other:?}"),
        }
    }
}

/// A seal's index interval (companion form 2) goes out only on a session that agreed feature bit 3; without it the
/// shipper drops the interval, so an applier that cannot read the form never receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seals_index_interval_is_sent_only_when_its_feature_was_agreed() {
    use segmirror_transport::direct::handshake::FEATURE_INDEX_INTERVAL;
    use segmirror_transport::direct::payload::{Companion, CompanionKind};
    for agreed in [true, false] {
        let ((s_framed, mut s_session), (mut a_framed, _)) = pair().await;
        assert_ne!(
            s_session.features & FEATURE_INDEX_INTERVAL,
            0,
            "this build offers the bit"
        );
        if !agreed {
            s_session.features &= !FEATURE_INDEX_INTERVAL;
        }
        let feed = TestFeed::new(&partitions(1), 1, 1).with_seal_companions(vec![Companion {
            kind: CompanionKind::OffsetIndex,
            size: 96,
            sha256: [3; 32],
            inline: None,
            index_interval: Some(1024),
        }]);
        let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
        let stop = CancellationToken::new();
        let stopper = stop.clone();
        let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &stopper).await });
        a_framed.send(Frame::Resume(vec![])).await.expect("resume");
        a_framed.send(Frame::Credit { bytes: 1 << 20 }).await.expect("credit");
        let seal = loop {
            match next_frame(&mut a_framed).await {
                Some(Frame::SegmentSeal(seal)) => break seal,
                Some(Frame::Chunk(_) | Frame::Heartbeat { .. }) => continue,
                other => panic!("{other:?}"),
            }
        };
        let interval = seal.companions[0].index_interval;
        assert_eq!(interval, agreed.then_some(1024), "agreed: {agreed}");
        stop.cancel();
        let _ = s.await.expect("join");
    }
}
