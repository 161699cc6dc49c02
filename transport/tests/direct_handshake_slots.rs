//! A listener's handshake slots under idle and flooding peers, over real loopback sockets: silent connections
//! are closed at the accept deadline and never keep the real shipper out for longer; one source address holds at
//! most its share of the slots, so silent connections from one address leave the real shipper (from another) a
//! slot at once; a connection over the limits is answered Refuse(`Busy`) "no free handshake slot" in the clear,
//! which a plaintext and a TLS dialler both report as that (a transient refusal, retried with backoff), not as a
//! certificate problem.
//!
//! Several source addresses on one machine: every 127.0.0.0/8 address is loopback on Linux, so a client socket
//! bound to 127.0.0.2 connects from another address than one bound to 127.0.0.1.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Dialer, LinkConfig, LinkEvent};
use segmirror_transport::direct::session::{ApplierSession, ShipperSession};
use segmirror_transport::direct::tls::{self, TlsFiles};
use segmirror_transport::direct::{Frame, FrameCodec, RefuseReason, Role};
use support::certs::Ca;
use support::session::*;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

mod support;

/// A TCP connection to `addr` from the loopback address `from` (e.g. "127.0.0.2").
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{from}:0").parse().expect("address"))
        .expect("bind the source address");
    socket.connect(addr).await.expect("connect")
}

/// What a silent connection saw: the listener's first frame, if it sent one, and whether it closed the connection.
#[derive(Debug)]
enum Seen {
    /// The listener closed it; `refused` is the Refuse frame it wrote first, if any; `after` since connecting.
    Closed { refused: Option<String>, after: Duration },
    /// Still open after the wait.
    Open,
}

/// Reads a silent connection (it sends nothing) for up to `wait`: the frames a plaintext listener wrote, until it
/// closes.
async fn watch(tcp: TcpStream, connected: Instant, wait: Duration) -> Seen {
    let mut frames = FramedRead::new(tcp, FrameCodec::default());
    let mut refused = None;
    let read = tokio::time::timeout(wait, async {
        while let Some(frame) = frames.next().await {
            match frame {
                Ok(Frame::Refuse(r)) if r.reason == RefuseReason::Busy => refused = Some(r.message),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    })
    .await;
    match read {
        Ok(()) => Seen::Closed {
            refused,
            after: connected.elapsed(),
        },
        Err(_) => Seen::Open,
    }
}

/// A TLS connection's silent peer: waits until the listener closes (EOF or an error), at most `wait`.
async fn closed_within(mut tcp: TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(wait, async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

struct Link {
    target: SocketAddr,
    shutdown: CancellationToken,
    listener_events: mpsc::Receiver<LinkEvent>,
}

/// An applier listening on 127.0.0.1 with `deadline` as its accept deadline (and nothing shorter).
async fn applier(acceptor: Acceptor, deadline: Duration) -> Link {
    let (mem, _state, _) = MemApplier::new(None);
    let applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let target = listener.local_addr().expect("addr");
    let (mut config, listener_events): (LinkConfig, _) = link_config(Role::Applier, LINK);
    config.accept_deadline = deadline;
    // The TLS and protocol handshakes' own timeouts far away: the deadline alone closes a silent connection.
    config.tls_timeout = Duration::from_secs(60);
    config.handshake.timeout = Duration::from_secs(60);
    let shutdown = CancellationToken::new();
    tokio::spawn(listen(listener, acceptor, config, applier, shutdown.clone()));
    Link {
        target,
        shutdown,
        listener_events,
    }
}

/// Dials `link` as a shipper; its events. The dialler reconnects with backoff (10 ms doubling to 200 ms).
fn shipper(link: &Link, dialer: Dialer) -> mpsc::Receiver<LinkEvent> {
    let feed = TestFeed::new(&partitions(1), 5, 5);
    let mut shipper = ShipperSession::new(feed, session_config(1 << 20)).expect("shipper");
    let (config, events) = link_config(Role::Shipper, LINK);
    let (target, stop) = (link.target.to_string(), link.shutdown.clone());
    tokio::spawn(async move { dial(&target, &dialer, &config, &mut shipper, &stop).await });
    events
}

/// Waits (at most `within`) for the shipper's session to start; the connect failures it saw before.
async fn session_starts(events: &mut mpsc::Receiver<LinkEvent>, within: Duration) -> Vec<String> {
    let mut failures = Vec::new();
    tokio::time::timeout(within, async {
        loop {
            match events.recv().await.expect("events") {
                LinkEvent::SessionStarted => return,
                LinkEvent::ConnectFailed { error } => failures.push(error),
                LinkEvent::Paused { error, .. } => panic!("the link paused (a wrong peer?): {error}"),
                _ => {}
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no session within {within:?}; connect failures: {failures:?}"));
    failures
}

fn tls_pair(dir: &std::path::Path) -> (TlsFiles, TlsFiles) {
    let ca = Ca::new("link CA");
    (
        ca.leaf(dir, "shipper", &["localhost"]),
        ca.leaf(dir, "applier", &["localhost", "127.0.0.1"]),
    )
}

/// Eight silent connections, one from each of eight addresses, take every slot; the real shipper is answered "no
/// free handshake slot" until the accept deadline (2 s) closes them, and its session starts within seconds.
async fn silent_connections_are_closed_at_the_deadline(acceptor: Acceptor, dialer: Dialer, plaintext: bool) {
    // Long enough that the shipper surely tries while the slots are taken, even on a loaded machine.
    let deadline = Duration::from_secs(2);
    let mut link = applier(acceptor, deadline).await;
    let connected = Instant::now();
    let mut silent = Vec::new();
    for i in 0..8 {
        silent.push(connect_from(&format!("127.0.0.{}", 10 + i), link.target).await);
    }
    // Every slot is taken once the listener accepted them all (the no-slot answer below proves it).
    let probe = connect_from("127.0.0.1", link.target).await;
    let seen = watch(probe, Instant::now(), Duration::from_secs(5)).await;
    assert!(
        matches!(&seen, Seen::Closed { refused: Some(m), .. } if m.contains("the applier had no free handshake slot")),
        "{seen:?}"
    );
    let mut events = shipper(&link, dialer);
    let failures = session_starts(&mut events, Duration::from_secs(10)).await;
    let started = connected.elapsed();
    assert!(
        started >= deadline,
        "the slots were free before the deadline: {started:?}"
    );
    assert!(
        failures
            .iter()
            .any(|f| f.contains("the applier had no free handshake slot") && f.contains("busy")),
        "the shipper was told why: {failures:?}"
    );
    assert!(
        failures.iter().all(|f| !f.contains("certificate")),
        "nothing blames certificates: {failures:?}"
    );
    // The silent connections were closed by the listener, at the deadline.
    for tcp in silent {
        if plaintext {
            let seen = watch(tcp, connected, Duration::from_secs(5)).await;
            assert!(
                matches!(seen, Seen::Closed { after, .. } if after >= deadline && after < deadline * 4),
                "{seen:?}"
            );
        } else {
            assert!(
                closed_within(tcp, Duration::from_secs(5)).await,
                "a silent TLS peer stayed"
            );
        }
    }
    let timeouts = std::iter::from_fn(|| link.listener_events.try_recv().ok())
        .filter(|e| matches!(e, LinkEvent::ConnectFailed { error } if error.contains("handshake deadline")))
        .count();
    assert_eq!(timeouts, 8, "each silent connection ended at the deadline");
    link.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_plaintext_connections_do_not_keep_the_shipper_out_past_the_deadline() {
    silent_connections_are_closed_at_the_deadline(Acceptor::Plain, Dialer::Plain, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tls_connections_do_not_keep_the_shipper_out_and_it_is_told_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (shipper_files, applier_files) = tls_pair(dir.path());
    let acceptor = Acceptor::Tls(tls::server_config(&applier_files).expect("server"));
    let dialer = Dialer::Tls {
        config: tls::client_config(&shipper_files).expect("client"),
        server_name: "127.0.0.1".into(),
    };
    silent_connections_are_closed_at_the_deadline(acceptor, dialer, false).await;
}

/// Eight silent connections from one address: four hold slots, four are refused at once; the real shipper, from
/// another address, starts its session at once although the deadline is far (30 s).
async fn one_address_holds_at_most_its_share(acceptor: Acceptor, dialer: Dialer, plaintext: bool) {
    let mut link = applier(acceptor, Duration::from_secs(30)).await;
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(connect_from("127.0.0.2", link.target).await);
    }
    let begin = Instant::now();
    let mut events = shipper(&link, dialer);
    let failures = session_starts(&mut events, Duration::from_secs(5)).await;
    assert!(begin.elapsed() < Duration::from_secs(5));
    assert!(failures.is_empty(), "a free slot at once: {failures:?}");
    // Of the eight, four were answered "no free handshake slot" and closed; the four others are still open.
    let (mut refused, mut open) = (0, 0);
    let mut held = Vec::new();
    for tcp in silent {
        if plaintext {
            match watch(tcp, begin, Duration::from_millis(300)).await {
                Seen::Closed { refused: Some(m), .. } => {
                    assert!(
                        m.contains("no free handshake slot") && m.contains("4 of at most 4"),
                        "{m}"
                    );
                    refused += 1;
                }
                Seen::Closed { refused: None, .. } => panic!(
                    "closed without an answer: {:?}",
                    std::iter::from_fn(|| link.listener_events.try_recv().ok()).collect::<Vec<_>>()
                ),
                Seen::Open => open += 1,
            }
        } else {
            let mut head = [0u8; 2];
            match tokio::time::timeout(Duration::from_millis(300), tcp.peek(&mut head)).await {
                // The answer is in the clear, a frame: type 3 (Refuse), flags 0; never a TLS record.
                Ok(Ok(2)) => {
                    assert_eq!(head, [3, 0]);
                    refused += 1;
                }
                Ok(other) => panic!("{other:?}"),
                Err(_) => {
                    open += 1;
                    held.push(tcp);
                }
            }
        }
    }
    assert_eq!((refused, open), (4, 4));
    let no_slot = std::iter::from_fn(|| link.listener_events.try_recv().ok())
        .filter(|e| matches!(e, LinkEvent::NoHandshakeSlot { from_address: 4, .. }))
        .count();
    assert_eq!(no_slot, 4);
    link.shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_connections_over_one_addresses_share_are_refused_and_the_shipper_starts_at_once() {
    one_address_holds_at_most_its_share(Acceptor::Plain, Dialer::Plain, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_connections_over_one_addresses_share_are_refused_and_the_shipper_starts_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (shipper_files, applier_files) = tls_pair(dir.path());
    let acceptor = Acceptor::Tls(tls::server_config(&applier_files).expect("server"));
    let dialer = Dialer::Tls {
        config: tls::client_config(&shipper_files).expect("client"),
        server_name: "127.0.0.1".into(),
    };
    one_address_holds_at_most_its_share(acceptor, dialer, false).await;
}
