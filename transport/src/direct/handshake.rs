//! The versioned handshake, over any byte stream (TCP, TLS, an in-memory pipe).
//!
//! Both sides send Hello at once, whoever dialled, so neither waits for the
//! other to speak first and a dialling applier (pull mode) behaves like a
//! listening one. Each side checks the peer's Hello by the same rules (magic,
//! opposite role, overlapping versions, required features, link name, and on
//! the applier the source cluster id when its mirror already follows one). A
//! side that finds a mismatch sends a Refuse frame naming its own versions and
//! link, returns [`DirectError::Refused`] with a message naming both sides, and
//! closes. The applier decides: when its checks pass it sends HelloAck with the
//! highest common version and the common features; the shipper checks that
//! the ack lies within what both offered. Why the applier: it owns the durable
//! state the session resumes from, so it also answers the Resume that follows.
//!
//! The whole exchange runs under one deadline, so a silent peer (a plaintext
//! client on a TLS port, a wedged process) fails with [`DirectError::Timeout`]
//! instead of hanging the replication loop.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::error::{DirectError, Result};
use super::frame::{Frame, FrameCodec, MAX_PAYLOAD_LEN};
use super::payload::{Hello, HelloAck, Refuse, RefuseReason, Role, TruncateMode};

/// Protocol versions this build speaks. Version 1 is the first.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
pub const MAX_PROTOCOL_VERSION: u16 = 1;

pub use super::codes::{
    FEATURE_CLUSTER_SHIPPERS, FEATURE_INDEX_INTERVAL, FEATURE_LINK_ID, FEATURE_LINK_META, FEATURE_LOG_START,
    FEATURE_MIRROR_LAYOUT, FEATURE_PROGRESS_SHIPPED, FEATURE_SEGMENT_REPLACE, FEATURE_SOURCE_PROGRESS,
    FEATURE_TRUNCATE, FEATURE_UNCOMMITTED,
};

/// How often at most the shipper sends a partition's SourceProgress: 1 s. Lag is
/// read by people and monitoring that poll in seconds; more often would only cost
/// frames (one per partition each time), less often makes "seconds behind" coarse.
/// A progress that has not changed is not resent before this interval either.
pub const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Feature bits this build offers. The bits are negotiated (intersection of
/// what both support, refused when one side requires a bit the other lacks)
/// so later additions need no version bump.
pub const SUPPORTED_FEATURES: u64 = FEATURE_LOG_START
    | FEATURE_SEGMENT_REPLACE
    | FEATURE_SOURCE_PROGRESS
    | FEATURE_INDEX_INTERVAL
    | FEATURE_PROGRESS_SHIPPED
    | FEATURE_CLUSTER_SHIPPERS
    | FEATURE_TRUNCATE
    | FEATURE_MIRROR_LAYOUT
    | FEATURE_LINK_META
    | FEATURE_LINK_ID
    | FEATURE_UNCOMMITTED;

/// Time allowed for the whole handshake. 10 s: a Hello round trip is a few
/// hundred bytes even across continents, and a peer that has not answered by
/// then is more likely wrong (plaintext vs TLS, wrong port) than slow; the
/// caller reconnects with backoff.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What this side brings to the handshake.
#[derive(Debug, Clone)]
pub struct HandshakeConfig {
    pub role: Role,
    pub link: String,
    /// Shipper: its source cluster id (required). Applier: the one its mirror
    /// follows, if it already follows one; a shipper of another cluster is refused.
    pub source_cluster_id: Option<String>,
    pub min_version: u16,
    pub max_version: u16,
    pub features_supported: u64,
    pub features_required: u64,
    pub software: String,
    pub timeout: Duration,
    pub max_payload: u32,
    /// Shipper only: the source broker it runs beside. `Some` makes its Hello offer *and require*
    /// [`FEATURE_CLUSTER_SHIPPERS`] and name the node; `None` offers neither (one shipper per link).
    pub shipper_node_id: Option<i32>,
    /// Shipper only: the id of its link record (`segmirror link create`). `Some` offers [`FEATURE_LINK_ID`] and
    /// names it in a LinkId frame right after HelloAck; `None` (an unmanaged link) offers no bit.
    pub link_id: Option<String>,
    /// Applier only: checks the id a shipper's LinkId names (and adopts the first one seen); `Some` offers
    /// [`FEATURE_LINK_ID`]. A refusal is sent to the shipper as Refuse(`Link`).
    pub peer_link_id: Option<PeerLinkIdCheck>,
    /// Applier only, when [`HandshakeConfig::source_cluster_id`] names none: checks the source cluster id a
    /// shipper's Hello names (and adopts the first one seen, so the link follows one cluster). A refusal is sent
    /// to the shipper as Refuse(`SourceCluster`), before HelloAck.
    pub peer_source_cluster: Option<PeerLinkIdCheck>,
    /// Shipper only: its bound (`--upto`). [`TruncateMode::LogEnd`] offers [`FEATURE_UNCOMMITTED`], the default
    /// [`TruncateMode::HighWatermark`] does not.
    pub upto: TruncateMode,
}

/// The applier's check of a shipper's link id (feature bit 9): `Ok` to go on, `Err(message)` naming both ids to
/// refuse. Blocking (it may read and write a catalog): the handshake runs it on a blocking thread.
#[derive(Clone)]
pub struct PeerLinkIdCheck(pub Arc<LinkIdRule>);

/// See [`PeerLinkIdCheck`]: the shipper's link id in, `Err(message)` to refuse.
pub type LinkIdRule = dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync;

impl std::fmt::Debug for PeerLinkIdCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerLinkIdCheck(..)")
    }
}

impl HandshakeConfig {
    /// This build's versions and features, the default timeout and frame maximum.
    pub fn new(role: Role, link: impl Into<String>, source_cluster_id: Option<String>) -> HandshakeConfig {
        HandshakeConfig {
            role,
            link: link.into(),
            source_cluster_id,
            min_version: MIN_PROTOCOL_VERSION,
            max_version: MAX_PROTOCOL_VERSION,
            features_supported: SUPPORTED_FEATURES,
            features_required: 0,
            software: format!("segmirror {}", env!("CARGO_PKG_VERSION")),
            timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_payload: MAX_PAYLOAD_LEN,
            shipper_node_id: None,
            link_id: None,
            peer_link_id: None,
            peer_source_cluster: None,
            upto: TruncateMode::HighWatermark,
        }
    }

    /// An applier serving several shippers on its link: it requires [`FEATURE_CLUSTER_SHIPPERS`], so a shipper
    /// without a node id (which would ship without claims) is refused (`Features`).
    pub fn cluster_applier(link: impl Into<String>, source_cluster_id: Option<String>) -> HandshakeConfig {
        let mut config = HandshakeConfig::new(Role::Applier, link, source_cluster_id);
        config.features_required |= FEATURE_CLUSTER_SHIPPERS;
        config
    }

    /// A shipper beside broker `node_id` of a cluster (see [`HandshakeConfig::shipper_node_id`]).
    pub fn cluster_shipper(link: impl Into<String>, source_cluster_id: String, node_id: i32) -> HandshakeConfig {
        let mut config = HandshakeConfig::new(Role::Shipper, link, Some(source_cluster_id));
        config.shipper_node_id = Some(node_id);
        config
    }

    fn check(&self) -> Result<()> {
        let bad = |field, reason: String| Err(DirectError::Config { field, reason });
        if self.min_version == 0 || self.min_version > self.max_version {
            return bad(
                "version range",
                format!("{}..={} is empty", self.min_version, self.max_version),
            );
        }
        if self.link.is_empty() {
            return bad("link", "empty link name".into());
        }
        if self.role == Role::Shipper && self.source_cluster_id.is_none() {
            return bad("source_cluster_id", "a shipper must name its source cluster".into());
        }
        match (self.role, &self.link_id, &self.peer_link_id) {
            (Role::Applier, Some(_), _) => return bad("link_id", "only a shipper names its link id".into()),
            (Role::Shipper, _, Some(_)) => return bad("peer_link_id", "only an applier checks link ids".into()),
            (Role::Shipper, Some(id), _) => {
                if let Err(reason) = super::payload::check_link_id(id) {
                    return bad("link_id", reason);
                }
            }
            _ => {}
        }
        match (self.role, self.shipper_node_id) {
            (Role::Applier, Some(_)) => return bad("shipper_node_id", "only a shipper names its node".into()),
            (Role::Shipper, Some(node)) if node < 0 => {
                return bad("shipper_node_id", format!("{node}: a broker node id is never negative"))
            }
            _ => {}
        }
        if self.features_required & !self.features_supported != 0 {
            return bad(
                "features_required",
                format!(
                    "{:#x} is not within the supported {:#x}",
                    self.features_required, self.features_supported
                ),
            );
        }
        Ok(())
    }

    /// This side's Hello. A shipper's bit 6 follows its node id: offered and required with one (an applier that
    /// does not know the bit could not decode the trailing node id), neither without.
    fn hello(&self) -> Hello {
        let (mut supported, mut required) = (self.features_supported, self.features_required);
        if self.role == Role::Shipper {
            if self.shipper_node_id.is_some() {
                supported |= FEATURE_CLUSTER_SHIPPERS;
                required |= FEATURE_CLUSTER_SHIPPERS;
            } else {
                supported &= !FEATURE_CLUSTER_SHIPPERS;
                required &= !FEATURE_CLUSTER_SHIPPERS;
            }
        }
        // Bit 10: a shipper says so only when it ships uncommitted records.
        if self.role == Role::Shipper && self.upto == TruncateMode::HighWatermark {
            supported &= !FEATURE_UNCOMMITTED;
            required &= !FEATURE_UNCOMMITTED;
        }
        // Bit 9 only with something to name (a shipper's id) or to check (an applier's rule).
        let link_ids = match self.role {
            Role::Shipper => self.link_id.is_some(),
            Role::Applier => self.peer_link_id.is_some(),
        };
        if !link_ids {
            supported &= !FEATURE_LINK_ID;
            required &= !FEATURE_LINK_ID;
        }
        Hello {
            min_version: self.min_version,
            max_version: self.max_version,
            features_supported: supported,
            features_required: required,
            role: self.role,
            link: self.link.clone(),
            source_cluster_id: self.source_cluster_id.clone(),
            software: self.software.clone(),
            shipper_node_id: if self.role == Role::Shipper {
                self.shipper_node_id
            } else {
                None
            },
        }
    }

    fn describe(&self) -> String {
        format!(
            "this {} ({}, protocol {}..={}, link {:?})",
            self.role, self.software, self.min_version, self.max_version, self.link
        )
    }
}

/// An agreed session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub version: u16,
    pub features: u64,
    pub role: Role,
    pub link: String,
    /// The shipper's source cluster id.
    pub source_cluster_id: String,
    /// The peer's Hello as received (its software string, versions).
    pub peer: Hello,
}

fn describe_peer(h: &Hello) -> String {
    format!(
        "the {} ({}, protocol {}..={}, link {:?})",
        h.role, h.software, h.min_version, h.max_version, h.link
    )
}

/// What both Hellos agree on, or why they do not.
fn negotiate(local: &HandshakeConfig, peer: &Hello) -> std::result::Result<HelloAck, (RefuseReason, String)> {
    let both = format!("{}; {}", local.describe(), describe_peer(peer));
    if peer.role == local.role {
        return Err((RefuseReason::Role, format!("both sides are a {}: {both}", local.role)));
    }
    let version = local.max_version.min(peer.max_version);
    if version < local.min_version.max(peer.min_version) {
        return Err((RefuseReason::Version, format!("no common protocol version: {both}")));
    }
    // What this side's Hello offered (a shipper's bit 6 follows its node id).
    let me = local.hello();
    let missing_here = peer.features_required & !me.features_supported;
    let missing_there = me.features_required & !peer.features_supported;
    if missing_here | missing_there != 0 {
        return Err((
            RefuseReason::Features,
            format!(
                "required features missing (this side lacks {missing_here:#x}, the peer lacks {missing_there:#x}): {both}"
            ),
        ));
    }
    if peer.link != local.link {
        return Err((
            RefuseReason::Link,
            format!(
                "link names differ: this {} serves {:?}, the {} {:?}",
                local.role, local.link, peer.role, peer.link
            ),
        ));
    }
    let (shipper_cluster, expected) = match local.role {
        Role::Applier => (&peer.source_cluster_id, &local.source_cluster_id),
        Role::Shipper => (&local.source_cluster_id, &None),
    };
    let Some(shipper_cluster) = shipper_cluster else {
        return Err((
            RefuseReason::Protocol,
            format!("the shipper sent no source cluster id: {both}"),
        ));
    };
    if let Some(expected) = expected {
        if expected != shipper_cluster {
            return Err((
                RefuseReason::SourceCluster,
                format!(
                    "this applier's mirror follows source cluster {expected:?}, the shipper ships from {shipper_cluster:?} (link {:?})",
                    local.link
                ),
            ));
        }
    }
    Ok(HelloAck {
        version,
        features: me.features_supported & peer.features_supported,
    })
}

/// Runs the handshake on `stream` and returns the framed stream, ready for the
/// session's frames, with what was agreed.
pub async fn handshake<S>(stream: S, config: &HandshakeConfig) -> Result<(Framed<S, FrameCodec>, Session)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    config.check()?;
    let deadline = Instant::now() + config.timeout;
    let mut framed = Framed::new(stream, FrameCodec::new(config.max_payload));
    send(
        &mut framed,
        Frame::Hello(config.hello()),
        deadline,
        config.timeout,
        "sending Hello",
    )
    .await?;
    let peer = match recv(&mut framed, deadline, config, "waiting for the peer's Hello").await? {
        Frame::Hello(h) => h,
        other => return Err(unexpected("waiting for the peer's Hello", "Hello", &other)),
    };
    let mut verdict = negotiate(config, &peer);
    if let (Ok(_), Role::Applier, Some(check), Some(cluster)) = (
        &verdict,
        config.role,
        config.peer_source_cluster.clone(),
        peer.source_cluster_id.clone(),
    ) {
        let judged = tokio::task::spawn_blocking(move || (check.0)(&cluster))
            .await
            .map_err(|e| DirectError::Local {
                what: "checking the shipper's source cluster",
                source: Box::new(e),
            })?;
        if let Err(message) = judged {
            verdict = Err((RefuseReason::SourceCluster, message));
        }
    }
    let ack = match verdict {
        Ok(ack) => ack,
        Err((reason, message)) => {
            let refuse = Refuse {
                reason,
                min_version: config.min_version,
                max_version: config.max_version,
                link: config.link.clone(),
                message: message.clone(),
            };
            // Best effort: the peer may already have refused and closed.
            let _ = send(
                &mut framed,
                Frame::Refuse(refuse),
                deadline,
                config.timeout,
                "sending Refuse",
            )
            .await;
            // Shut the write side down cleanly (TLS close_notify, TCP FIN) so the Refuse is read, not reset away.
            let _ = tokio::time::timeout_at(deadline, SinkExt::<Frame>::close(&mut framed)).await;
            return Err(DirectError::Refused { reason, message });
        }
    };
    let source_cluster_id = match config.role {
        Role::Shipper => config.source_cluster_id.clone(),
        Role::Applier => peer.source_cluster_id.clone(),
    }
    .unwrap_or_default();
    let agreed = match config.role {
        Role::Applier => {
            send(
                &mut framed,
                Frame::HelloAck(ack),
                deadline,
                config.timeout,
                "sending HelloAck",
            )
            .await?;
            ack
        }
        Role::Shipper => {
            let got = match recv(&mut framed, deadline, config, "waiting for HelloAck").await? {
                Frame::HelloAck(a) => a,
                other => return Err(unexpected("waiting for HelloAck", "HelloAck", &other)),
            };
            let low = config.min_version.max(peer.min_version);
            if got.version < low || got.version > ack.version || got.features & !ack.features != 0 {
                return Err(DirectError::BadAck {
                    version: got.version,
                    features: got.features,
                    low,
                    high: ack.version,
                    offered: ack.features,
                });
            }
            got
        }
    };
    if agreed.features & FEATURE_LINK_ID != 0 {
        link_identity(&mut framed, config, deadline).await?;
    }
    let session = Session {
        version: agreed.version,
        features: agreed.features,
        role: config.role,
        link: config.link.clone(),
        source_cluster_id,
        peer,
    };
    Ok((framed, session))
}

/// Feature bit 9, agreed: the shipper names its link id; the applier checks it (its rule adopts the first id it sees)
/// and refuses, naming both ids, a shipper of another link of the same name.
async fn link_identity<S>(framed: &mut Framed<S, FrameCodec>, config: &HandshakeConfig, deadline: Instant) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match config.role {
        Role::Shipper => {
            // The bit is offered only with an id (`hello`).
            let link_id = config.link_id.clone().unwrap_or_default();
            let frame = Frame::LinkId(super::payload::LinkId { link_id });
            send(framed, frame, deadline, config.timeout, "sending LinkId").await
        }
        Role::Applier => {
            let link_id = match recv(framed, deadline, config, "waiting for the shipper's LinkId").await? {
                Frame::LinkId(l) => l.link_id,
                other => return Err(unexpected("waiting for the shipper's LinkId", "LinkId", &other)),
            };
            let Some(check) = config.peer_link_id.clone() else {
                return Ok(());
            };
            let id = link_id.clone();
            let verdict =
                tokio::task::spawn_blocking(move || (check.0)(&id))
                    .await
                    .map_err(|e| DirectError::Local {
                        what: "checking the shipper's link id",
                        source: Box::new(e),
                    })?;
            let Err(message) = verdict else {
                return Ok(());
            };
            let refuse = Refuse {
                reason: RefuseReason::Link,
                min_version: config.min_version,
                max_version: config.max_version,
                link: config.link.clone(),
                message: message.clone(),
            };
            let _ = send(
                framed,
                Frame::Refuse(refuse),
                deadline,
                config.timeout,
                "sending Refuse",
            )
            .await;
            let _ = tokio::time::timeout_at(deadline, SinkExt::<Frame>::close(framed)).await;
            Err(DirectError::Refused {
                reason: RefuseReason::Link,
                message,
            })
        }
    }
}

fn unexpected(stage: &'static str, expected: &'static str, got: &Frame) -> DirectError {
    DirectError::UnexpectedFrame {
        stage,
        expected,
        got: got.name(),
    }
}

async fn send<S>(
    framed: &mut Framed<S, FrameCodec>,
    frame: Frame,
    deadline: Instant,
    timeout: Duration,
    stage: &'static str,
) -> Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout_at(deadline, framed.send(frame)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(super::error::FrameError::Io { kind, message })) => Err(DirectError::Io {
            stage,
            source: std::io::Error::new(kind, message),
        }),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(DirectError::Timeout { stage, after: timeout }),
    }
}

/// The next frame; a Refuse from the peer becomes [`DirectError::RefusedByPeer`].
async fn recv<S>(
    framed: &mut Framed<S, FrameCodec>,
    deadline: Instant,
    config: &HandshakeConfig,
    stage: &'static str,
) -> Result<Frame>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout_at(deadline, framed.next()).await {
        Err(_) => Err(DirectError::Timeout {
            stage,
            after: config.timeout,
        }),
        Ok(None) => Err(DirectError::Closed { stage }),
        Ok(Some(Err(super::error::FrameError::Io { kind, message }))) => Err(DirectError::Io {
            stage,
            source: std::io::Error::new(kind, message),
        }),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(Some(Ok(Frame::Refuse(r)))) => Err(DirectError::RefusedByPeer {
            reason: r.reason,
            local_role: config.role,
            peer_role: config.role.peer(),
            message: format!(
                "{} (the peer speaks protocol {}..={} on link {:?}; {})",
                r.message,
                r.min_version,
                r.max_version,
                r.link,
                config.describe()
            ),
        }),
        Ok(Some(Ok(frame))) => Ok(frame),
    }
}
