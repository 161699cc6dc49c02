//! Connections of a replication link, for both roles and both directions.
//!
//! Push (the applier listens, the shipper dials) and pull (the reverse) use the
//! same two functions: [`dial`] and [`listen`] take a [`SessionRunner`], which
//! both [`ShipperSession`] and [`ApplierSession`] are. Each connection runs TCP,
//! then TLS (unless the link is plaintext), then the handshake, then one session;
//! the session resumes from the applier's durable positions, so nothing
//! acknowledged is resent and nothing unacknowledged is lost across connections.
//!
//! After a session ends:
//! - a broken connection or a peer breaking the rules ([`ErrorClass::Transient`],
//!   also a peer's Goodbye and a `Busy` refusal): the dialler reconnects after a
//!   jittered exponential backoff ([`Backoff`]);
//! - the wrong peer ([`ErrorClass::WrongPeer`]: a refusal, a TLS mismatch): the
//!   dialler reports it once and waits [`DEFAULT_REFUSAL_PAUSE`] before trying
//!   again, so a misconfigured pair never becomes a crash loop;
//! - this side's own failure ([`ErrorClass::Local`]): the function returns it.
//!
//! [`listen_cluster`] serves several shippers of one source cluster on one link (feature bit 6): one session per
//! (link, shipper node id) at the same time, all applying into one [`Cluster`]; a second session of the same node
//! is refused `Busy` as below.
//!
//! Before a session, a listener handshakes each accepted connection on a task of its own, in one of a few slots
//! (per source address too) and under one deadline from the accept to the end of the protocol handshake: idle
//! or silent connections cannot keep the real peer out, and one over the limits is told so in the clear, a
//! Refuse(`Busy`) "no free handshake slot" that plaintext and TLS diallers both read (`docs/direct-protocol.md`
//! §4.6).
//!
//! A listener serves one session at a time for its link: a second peer that
//! completes the handshake while a session runs gets a Refuse(`Busy`) frame
//! and is closed (its dialler retries with backoff: often it is the same peer
//! reconnecting before this side noticed the old connection died).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::SinkExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    ApplierSession, BoxIo, ChunkApplier, ChunkFeed, Cluster, FramedIo, SessionConfig, SessionEnd, ShipperSession,
};
use crate::direct::error::{DirectError, ErrorClass, Result};
use crate::direct::frame::Frame;
use crate::direct::handshake::{handshake, HandshakeConfig, Session, FEATURE_CLUSTER_SHIPPERS};
use crate::direct::payload::{Refuse, RefuseReason};

/// First reconnect delay: 100 ms, so a single cut costs about a round trip, not seconds.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest reconnect delay: 30 s, so a link that comes back is used again within
/// half a minute while a long outage costs two connection attempts a minute.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A session that lasted this long resets the backoff: 60 s, twice the longest
/// delay, so a link that flaps after every connection keeps backing off.
pub const DEFAULT_BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);
/// How long a dialler waits after the peer was refused (or refused it) before
/// trying again: 5 min. A refusal is a configuration problem (version, link
/// name, certificate); retrying sooner only fills the logs, and a fixed peer is
/// picked up within minutes.
pub const DEFAULT_REFUSAL_PAUSE: Duration = Duration::from_secs(300);
/// TCP connect timeout: 10 s, about three SYN retransmissions.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections a listener handshakes at once; more are answered "no free handshake slot" and closed at once. 8:
/// one legitimate peer needs one, and a port scanner cannot pin more than this.
pub const MAX_PENDING_HANDSHAKES: usize = 8;
/// Of those, at most this many from one source address (4, half): one address cannot take every slot, so a peer
/// that keeps silent connections open (or a scanner) leaves room for the real one; several shippers behind one
/// NAT still handshake together.
pub const MAX_PENDING_HANDSHAKES_PER_ADDRESS: usize = 4;
/// How long an accepted connection may take from TCP accept to the end of its TLS and protocol handshake: 5 s.
/// A Hello round trip and a TLS handshake are a few round trips even across continents; a connection that has
/// not finished by then holds its slot for nothing (a silent peer, a scanner) and is closed.
pub const DEFAULT_ACCEPT_DEADLINE: Duration = Duration::from_secs(5);
/// Connections over the limits being answered at once (the Refuse written, then read until the peer closes, at
/// most [`NO_SLOT_LINGER`]); more are closed unanswered, so a flood costs bounded tasks and descriptors.
const MAX_NO_SLOT_ANSWERS: usize = 64;
/// How long a "no free handshake slot" answer waits for the peer to read it and close (its unread Hello would
/// otherwise turn the close into a reset that can destroy the answer before the peer read it).
const NO_SLOT_LINGER: Duration = Duration::from_secs(1);

/// Exponential backoff with ±50 % jitter (so peers cut at the same moment do not reconnect in step).
#[derive(Debug, Clone)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub reset_after: Duration,
    current: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(
            DEFAULT_BACKOFF_INITIAL,
            DEFAULT_BACKOFF_MAX,
            DEFAULT_BACKOFF_RESET_AFTER,
        )
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            reset_after,
            current: initial,
        }
    }

    /// The delay before the next attempt, given how long the last session lasted.
    pub fn next(&mut self, lasted: Duration) -> Duration {
        if lasted >= self.reset_after {
            self.current = self.initial;
        }
        let base = self.current.min(self.max);
        self.current = (self.current * 2).min(self.max);
        // Uniform in [0.5, 1.5) x base; without randomness, the base itself.
        let unit = getrandom::u32()
            .map(|r| f64::from(r) / (f64::from(u32::MAX) + 1.0))
            .unwrap_or(0.5);
        base.mul_f64(0.5 + unit)
    }
}

/// How a dialler secures its connection.
#[derive(Clone)]
pub enum Dialer {
    /// `--plaintext`.
    Plain,
    #[cfg(feature = "tls")]
    /// TLS client; `server_name` is what the server's certificate must name.
    Tls {
        config: Arc<rustls::ClientConfig>,
        server_name: String,
    },
}

/// How a listener secures its connections.
#[derive(Clone)]
pub enum Acceptor {
    /// `--plaintext`.
    Plain,
    #[cfg(feature = "tls")]
    Tls(Arc<rustls::ServerConfig>),
}

/// A link's settings beyond the session's own.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    pub handshake: HandshakeConfig,
    pub backoff: Backoff,
    pub refusal_pause: Duration,
    pub connect_timeout: Duration,
    /// TLS handshake timeout.
    pub tls_timeout: Duration,
    /// A listener's deadline per connection, from TCP accept to the end of TLS and the protocol handshake
    /// ([`DEFAULT_ACCEPT_DEADLINE`]).
    pub accept_deadline: Duration,
    /// A listener's handshakes in progress at once ([`MAX_PENDING_HANDSHAKES`]) and per source address
    /// ([`MAX_PENDING_HANDSHAKES_PER_ADDRESS`]).
    pub handshake_slots: HandshakeSlots,
    /// Where [`LinkEvent`]s go (dropped when the channel is full).
    pub events: Option<mpsc::Sender<LinkEvent>>,
}

impl LinkConfig {
    pub fn new(handshake: HandshakeConfig) -> LinkConfig {
        LinkConfig {
            handshake,
            backoff: Backoff::default(),
            refusal_pause: DEFAULT_REFUSAL_PAUSE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls_timeout: crate::direct::handshake::DEFAULT_HANDSHAKE_TIMEOUT,
            accept_deadline: DEFAULT_ACCEPT_DEADLINE,
            handshake_slots: HandshakeSlots::default(),
            events: None,
        }
    }

    fn event(&self, event: LinkEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.try_send(event);
        }
    }
}

/// How many connections a listener handshakes at once (see [`LinkConfig::handshake_slots`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeSlots {
    pub total: usize,
    pub per_address: usize,
}

impl Default for HandshakeSlots {
    fn default() -> HandshakeSlots {
        HandshakeSlots {
            total: MAX_PENDING_HANDSHAKES,
            per_address: MAX_PENDING_HANDSHAKES_PER_ADDRESS,
        }
    }
}

/// What happened on a link, for status displays and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// A session started (handshake done).
    SessionStarted,
    /// A session ended; `error` is its error's message and class, if any.
    SessionEnded {
        end: Option<SessionEnd>,
        error: Option<(ErrorClass, String)>,
    },
    /// Connecting or the handshake failed transiently.
    ConnectFailed { error: String },
    /// The peer is the wrong one; reported once per distinct message, then the link pauses.
    Paused { error: String, pause: Duration },
    /// A listener refused a second peer with `Busy`.
    RefusedBusy,
    /// A listener answered a connection "no free handshake slot" (Refuse `Busy` before any handshake) and closed
    /// it: `from_address` handshakes of its address and `pending` in all were in progress.
    NoHandshakeSlot {
        peer: std::net::SocketAddr,
        pending: usize,
        from_address: usize,
    },
}

/// One session on an established connection: what [`dial`] and [`listen`] run.
pub trait SessionRunner: Send + 'static {
    fn run_session<'a>(
        &'a mut self,
        framed: FramedIo,
        session: &'a Session,
        shutdown: &'a CancellationToken,
    ) -> impl Future<Output = Result<SessionEnd>> + Send + 'a;
}

impl<F: ChunkFeed> SessionRunner for ShipperSession<F> {
    fn run_session<'a>(
        &'a mut self,
        framed: FramedIo,
        session: &'a Session,
        shutdown: &'a CancellationToken,
    ) -> impl Future<Output = Result<SessionEnd>> + Send + 'a {
        self.run(framed, session, shutdown)
    }
}

impl<A: ChunkApplier> SessionRunner for ApplierSession<A> {
    fn run_session<'a>(
        &'a mut self,
        framed: FramedIo,
        session: &'a Session,
        shutdown: &'a CancellationToken,
    ) -> impl Future<Output = Result<SessionEnd>> + Send + 'a {
        self.run(framed, session, shutdown)
    }
}

#[cfg_attr(not(feature = "tls"), allow(unused_variables))]
async fn secure_client(tcp: TcpStream, dialer: &Dialer, config: &LinkConfig) -> Result<BoxIo> {
    match dialer {
        Dialer::Plain => Ok(Box::new(tcp)),
        #[cfg(feature = "tls")]
        Dialer::Tls {
            config: tls,
            server_name,
        } => Ok(Box::new(
            crate::direct::tls::connect_to_listener(
                tls.clone(),
                server_name,
                tcp,
                config.tls_timeout,
                config.handshake.role,
            )
            .await?,
        )),
    }
}

#[cfg_attr(not(feature = "tls"), allow(unused_variables))]
async fn secure_server(tcp: TcpStream, acceptor: &Acceptor, config: &LinkConfig) -> Result<BoxIo> {
    match acceptor {
        Acceptor::Plain => Ok(Box::new(tcp)),
        #[cfg(feature = "tls")]
        Acceptor::Tls(tls) => Ok(Box::new(
            crate::direct::tls::accept(tls.clone(), tcp, config.tls_timeout).await?,
        )),
    }
}

async fn connect_once(addr: &str, dialer: &Dialer, config: &LinkConfig) -> Result<(FramedIo, Session)> {
    let tcp = match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(source)) => {
            return Err(DirectError::Io {
                stage: "connecting",
                source,
            })
        }
        Err(_) => {
            return Err(DirectError::Timeout {
                stage: "connecting",
                after: config.connect_timeout,
            })
        }
    };
    // Chunks are written whole and flushed; Nagle would only delay acks and heartbeats.
    let _ = tcp.set_nodelay(true);
    let io = secure_client(tcp, dialer, config).await?;
    handshake(io, &config.handshake).await
}

/// Dials `addr` and runs sessions on it until `shutdown`, reconnecting after
/// cuts. Returns `Ok` on shutdown, or this side's own ([`ErrorClass::Local`]) error.
pub async fn dial<R: SessionRunner>(
    addr: &str,
    dialer: &Dialer,
    config: &LinkConfig,
    runner: &mut R,
    shutdown: &CancellationToken,
) -> Result<()> {
    let mut backoff = config.backoff.clone();
    let mut reported: Option<String> = None;
    loop {
        let started = Instant::now();
        let connected = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = connect_once(addr, dialer, config) => r,
        };
        let result = match connected {
            Ok((framed, session)) => {
                config.event(LinkEvent::SessionStarted);
                reported = None;
                let r = runner.run_session(framed, &session, shutdown).await;
                config.event(LinkEvent::SessionEnded {
                    end: r.as_ref().ok().cloned(),
                    error: r.as_ref().err().map(|e| (e.class(), e.to_string())),
                });
                r
            }
            Err(e) => {
                if e.class() == ErrorClass::Transient {
                    config.event(LinkEvent::ConnectFailed { error: e.to_string() });
                }
                Err(e)
            }
        };
        let delay = match result {
            Ok(SessionEnd::Shutdown) => return Ok(()),
            Ok(SessionEnd::PeerGoodbye { message, .. }) => {
                tracing::info!(link = %config.handshake.link, %message, "the peer said goodbye; reconnecting");
                backoff.next(started.elapsed())
            }
            Err(e) => match e.class() {
                ErrorClass::Local => return Err(e),
                ErrorClass::Transient => {
                    tracing::warn!(link = %config.handshake.link, error = %e, "connection lost; reconnecting");
                    backoff.next(started.elapsed())
                }
                ErrorClass::WrongPeer => {
                    let error = e.to_string();
                    if reported.as_deref() != Some(error.as_str()) {
                        tracing::error!(
                            link = %config.handshake.link, %error, pause = ?config.refusal_pause,
                            "the peer is not a match; replication on this link pauses"
                        );
                        config.event(LinkEvent::Paused {
                            error: error.clone(),
                            pause: config.refusal_pause,
                        });
                        reported = Some(error);
                    }
                    config.refusal_pause
                }
            },
        };
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Sends Refuse(Busy) on a connection that completed its handshake while another session runs, and closes it.
async fn refuse_busy(framed: FramedIo, config: &HandshakeConfig) {
    let message = format!(
        "this {} already serves a session for link {:?}; try again later",
        config.role, config.link
    );
    refuse_after_handshake(framed, config, RefuseReason::Busy, message).await
}

/// Sends Refuse(`reason`) as the first frame after the handshake, and closes.
async fn refuse_after_handshake(mut framed: FramedIo, config: &HandshakeConfig, reason: RefuseReason, message: String) {
    let refuse = Frame::Refuse(Refuse {
        reason,
        min_version: config.min_version,
        max_version: config.max_version,
        link: config.link.clone(),
        message,
    });
    let _ = tokio::time::timeout(config.timeout, async {
        let _ = framed.send(refuse).await;
        let _ = SinkExt::<Frame>::close(&mut framed).await;
    })
    .await;
}

/// Accepts connections on `listener` and runs one session at a time on them
/// until `shutdown`. Returns the runner, with `Ok` on shutdown or this side's
/// own ([`ErrorClass::Local`]) error.
pub async fn listen<R: SessionRunner>(
    listener: TcpListener,
    acceptor: Acceptor,
    config: LinkConfig,
    runner: R,
    shutdown: CancellationToken,
) -> (R, Result<()>) {
    let config = Arc::new(config);
    let pending = Pending::new(config.handshake_slots);
    let (ready_tx, mut ready_rx) = mpsc::channel::<(FramedIo, Session)>(config.handshake_slots.total.max(1));
    let mut runner = Some(runner);
    let mut active: Option<tokio::task::JoinHandle<(R, Result<SessionEnd>)>> = None;
    loop {
        tokio::select! {
            biased;
            done = async { active.as_mut().expect("guarded").await }, if active.is_some() => {
                active = None;
                let (back, r) = match done {
                    Ok(pair) => pair,
                    // A panic is a bug in this process, not the peer's doing: propagate it.
                    Err(e) => std::panic::resume_unwind(e.into_panic()),
                };
                runner = Some(back);
                config.event(LinkEvent::SessionEnded {
                    end: r.as_ref().ok().cloned(),
                    error: r.as_ref().err().map(|e| (e.class(), e.to_string())),
                });
                match r {
                    Ok(SessionEnd::Shutdown) => {}
                    Ok(SessionEnd::PeerGoodbye { message, .. }) => {
                        tracing::info!(link = %config.handshake.link, %message, "the peer said goodbye");
                    }
                    Err(e) if e.class() == ErrorClass::Local => {
                        return (runner.take().expect("just returned"), Err(e));
                    }
                    Err(e) => tracing::warn!(link = %config.handshake.link, error = %e, "session ended"),
                }
            }
            _ = shutdown.cancelled(), if active.is_none() => {
                return (runner.take().expect("no session runs"), Ok(()));
            }
            accepted = listener.accept() => {
                start_handshake(accepted, &pending, &config, &acceptor, &ready_tx);
            }
            Some((framed, session)) = ready_rx.recv() => {
                match runner.take() {
                    None => {
                        config.event(LinkEvent::RefusedBusy);
                        let handshake = config.handshake.clone();
                        tokio::spawn(async move { refuse_busy(framed, &handshake).await });
                    }
                    Some(mut r) => {
                        config.event(LinkEvent::SessionStarted);
                        let shutdown = shutdown.clone();
                        active = Some(tokio::spawn(async move {
                            let end = r.run_session(framed, &session, &shutdown).await;
                            (r, end)
                        }));
                    }
                }
            }
        }
    }
}

/// Accepts connections on `listener` and serves the shippers of one source cluster on one link (feature bit 6,
/// `docs/direct-protocol.md` §6.1): one session per shipper node id at the same time, each an [`ApplierSession`]
/// over a [`Cluster::member`] of `cluster`; a second session of a node already served is refused `Busy`. The
/// handshake requires bit 6 (added to `config` here), so a shipper that cannot claim is refused `Features`. Runs
/// until `shutdown` (then waits for the sessions to say goodbye) or a session's [`ErrorClass::Local`] error (then
/// the other sessions are shut down and the error returned).
pub async fn listen_cluster<A: ChunkApplier>(
    listener: TcpListener,
    acceptor: Acceptor,
    mut config: LinkConfig,
    cluster: Cluster<A>,
    session_config: SessionConfig,
    shutdown: CancellationToken,
) -> Result<()> {
    session_config.check()?;
    config.handshake.features_required |= FEATURE_CLUSTER_SHIPPERS;
    config.handshake.features_supported |= FEATURE_CLUSTER_SHIPPERS;
    let config = Arc::new(config);
    let pending = Pending::new(config.handshake_slots);
    let (ready_tx, mut ready_rx) = mpsc::channel::<(FramedIo, Session)>(config.handshake_slots.total.max(1));
    // The sessions' own token: cancelled on shutdown and when one session fails locally.
    let sessions_stop = shutdown.child_token();
    let mut active: std::collections::HashSet<i32> = std::collections::HashSet::new();
    let mut tasks: tokio::task::JoinSet<(i32, Result<SessionEnd>)> = tokio::task::JoinSet::new();
    let mut failed: Option<DirectError> = None;
    loop {
        tokio::select! {
            biased;
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                let (node, r) = match done {
                    Ok(pair) => pair,
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => {
                        tracing::error!(error = %e, "a session task was cancelled");
                        continue;
                    }
                };
                active.remove(&node);
                config.event(LinkEvent::SessionEnded {
                    end: r.as_ref().ok().cloned(),
                    error: r.as_ref().err().map(|e| (e.class(), e.to_string())),
                });
                match r {
                    Ok(SessionEnd::Shutdown) => {}
                    Ok(SessionEnd::PeerGoodbye { message, .. }) => {
                        tracing::info!(link = %config.handshake.link, node, %message, "the shipper said goodbye");
                    }
                    Err(e) if e.class() == ErrorClass::Local => {
                        tracing::error!(link = %config.handshake.link, node, error = %e, "this applier failed; stopping every session");
                        failed.get_or_insert(e);
                        sessions_stop.cancel();
                    }
                    Err(e) => tracing::warn!(link = %config.handshake.link, node, error = %e, "session ended"),
                }
            }
            _ = sessions_stop.cancelled(), if tasks.is_empty() => {
                return match failed {
                    Some(e) => Err(e),
                    None => Ok(()),
                };
            }
            accepted = listener.accept(), if !sessions_stop.is_cancelled() => {
                start_handshake(accepted, &pending, &config, &acceptor, &ready_tx);
            }
            Some((framed, session)) = ready_rx.recv(), if !sessions_stop.is_cancelled() => {
                let Some(node) = session.peer.shipper_node_id else {
                    // Unreachable through the handshake (bit 6 is required), kept as a refusal rather than a panic.
                    let handshake = config.handshake.clone();
                    tokio::spawn(async move {
                        let message = "this applier serves several shippers: a shipper must name its node (feature bit 6)".to_string();
                        refuse_after_handshake(framed, &handshake, RefuseReason::Features, message).await
                    });
                    continue;
                };
                if !active.insert(node) {
                    config.event(LinkEvent::RefusedBusy);
                    let handshake = config.handshake.clone();
                    tokio::spawn(async move {
                        let message = format!(
                            "this applier already serves a session of shipper node {node} on link {:?}; try again later",
                            handshake.link
                        );
                        refuse_after_handshake(framed, &handshake, RefuseReason::Busy, message).await
                    });
                    continue;
                }
                config.event(LinkEvent::SessionStarted);
                let (cluster, session_config, stop) = (cluster.clone(), session_config.clone(), sessions_stop.clone());
                tasks.spawn(async move {
                    let member = cluster.member(node).await;
                    let r = match ApplierSession::new(member, session_config) {
                        Ok(mut s) => s.run(framed, &session, &stop).await,
                        Err(e) => Err(e),
                    };
                    (node, r)
                });
            }
        }
    }
}

/// The handshakes a listener has in progress, in all and per source address, and the "no free handshake slot"
/// answers being written (see [`start_handshake`]).
struct Pending {
    slots: HandshakeSlots,
    counts: std::sync::Mutex<PendingCounts>,
    answers: Arc<Semaphore>,
}

#[derive(Default)]
struct PendingCounts {
    total: usize,
    by_address: std::collections::HashMap<std::net::IpAddr, usize>,
}

/// One handshake slot, given back when dropped.
struct Slot {
    pending: Arc<Pending>,
    address: std::net::IpAddr,
}

impl Pending {
    fn new(slots: HandshakeSlots) -> Arc<Pending> {
        Arc::new(Pending {
            slots,
            counts: std::sync::Mutex::new(PendingCounts::default()),
            answers: Arc::new(Semaphore::new(MAX_NO_SLOT_ANSWERS)),
        })
    }

    /// A slot for a connection from `address`, or how many are taken (in all, from `address`).
    fn take(self: &Arc<Self>, address: std::net::IpAddr) -> std::result::Result<Slot, (usize, usize)> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mine = counts.by_address.get(&address).copied().unwrap_or(0);
        if counts.total >= self.slots.total || mine >= self.slots.per_address {
            return Err((counts.total, mine));
        }
        counts.total += 1;
        counts.by_address.insert(address, mine + 1);
        Ok(Slot {
            pending: self.clone(),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.pending.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let std::collections::hash_map::Entry::Occupied(mut e) = counts.by_address.entry(self.address) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

/// An accepted connection: its TLS and protocol handshake run on a task of their own (a silent peer cannot delay a
/// running session), under one deadline from the accept to the end of the protocol handshake
/// ([`LinkConfig::accept_deadline`]), in one of [`LinkConfig::handshake_slots`] (in all and per source address);
/// a completed one goes to `ready`, a failed one is logged and reported as [`LinkEvent::ConnectFailed`]. A
/// connection over the limits is answered with a Refuse(`Busy`) frame saying "no free handshake slot", written in
/// the clear before any TLS (its first byte, 0x03, is no TLS record type, so a TLS dialler tells it apart from a
/// TLS failure: [`crate::direct::tls::connect_to_listener`]), and closed. Shared by [`listen`] and
/// [`listen_cluster`].
fn start_handshake(
    accepted: std::io::Result<(TcpStream, std::net::SocketAddr)>,
    pending: &Arc<Pending>,
    config: &Arc<LinkConfig>,
    acceptor: &Acceptor,
    ready_tx: &mpsc::Sender<(FramedIo, Session)>,
) {
    let (tcp, peer) = match accepted {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(error = %e, "accepting a connection failed");
            return;
        }
    };
    let slot = match pending.take(peer.ip()) {
        Ok(slot) => slot,
        Err((in_progress, from_address)) => {
            tracing::warn!(%peer, in_progress, from_address, "no free handshake slot; answering Busy and closing");
            config.event(LinkEvent::NoHandshakeSlot {
                peer,
                pending: in_progress,
                from_address,
            });
            // Answered only while few answers are being written; beyond that the connection is just closed.
            if let Ok(permit) = pending.answers.clone().try_acquire_owned() {
                let handshake = config.handshake.clone();
                let slots = pending.slots;
                tokio::spawn(async move {
                    let _permit = permit;
                    answer_no_slot(tcp, &handshake, slots, in_progress, from_address).await;
                });
            }
            return;
        }
    };
    let _ = tcp.set_nodelay(true);
    let (config, acceptor, ready_tx) = (config.clone(), acceptor.clone(), ready_tx.clone());
    tokio::spawn(async move {
        let _slot = slot;
        let deadline = config.accept_deadline;
        let r = tokio::time::timeout(deadline, async {
            let io = secure_server(tcp, &acceptor, &config).await?;
            handshake(io, &config.handshake).await
        })
        .await
        .unwrap_or(Err(DirectError::Timeout {
            stage: "the listener's handshake deadline (TCP accept to the end of TLS and the protocol handshake)",
            after: deadline,
        }));
        match r {
            Ok(pair) => {
                let _ = ready_tx.send(pair).await;
            }
            Err(e) => {
                tracing::warn!(%peer, link = %config.handshake.link, error = %e, "handshake with a peer failed");
                config.event(LinkEvent::ConnectFailed { error: e.to_string() });
            }
        }
    });
}

/// The "no free handshake slot" answer: a Refuse(`Busy`) frame in the clear, the write side shut down, then the
/// peer's bytes read and dropped until it closes (at most [`NO_SLOT_LINGER`]) so that the close is no reset.
async fn answer_no_slot(
    mut tcp: TcpStream,
    config: &HandshakeConfig,
    slots: HandshakeSlots,
    in_progress: usize,
    from_address: usize,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::codec::Encoder;
    let message = format!(
        "the {} had no free handshake slot ({in_progress} of {} connections in their handshake, {from_address} of \
         at most {} from this address); try again later",
        config.role, slots.total, slots.per_address
    );
    let refuse = Frame::Refuse(Refuse {
        reason: RefuseReason::Busy,
        min_version: config.min_version,
        max_version: config.max_version,
        link: config.link.clone(),
        message,
    });
    let mut bytes = bytes::BytesMut::new();
    if crate::direct::frame::FrameCodec::new(config.max_payload)
        .encode(refuse, &mut bytes)
        .is_err()
    {
        return;
    }
    let _ = tokio::time::timeout(NO_SLOT_LINGER, async {
        tcp.write_all(&bytes).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        while tcp.read(&mut sink).await? > 0 {}
        std::io::Result::Ok(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_maximum_with_jitter_and_resets_after_a_long_session() {
        let mut b = Backoff::new(
            Duration::from_millis(100),
            Duration::from_millis(800),
            Duration::from_secs(60),
        );
        let short = Duration::from_secs(1);
        for base_ms in [100u64, 200, 400, 800, 800, 800] {
            let d = b.next(short);
            let base = Duration::from_millis(base_ms);
            assert!(d >= base / 2 && d < base * 3 / 2, "{d:?} for base {base:?}");
        }
        let d = b.next(Duration::from_secs(60));
        assert!(d < Duration::from_millis(150), "reset: {d:?}");
    }
}
