//! Errors of the direct transport: one type for the module, typed fields, so a
//! caller (the shipper's and the applier's direct drivers) can tell a peer to refuse and pause from a
//! broken connection to retry with backoff, and a person reading the message
//! learns which frame, field, byte offset, file, version or link name is at fault.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::codes::{RefuseReason, Role};

/// A frame that cannot be decoded. Offsets count bytes from the start of the
/// stream the decoder has read (from the start of the buffer for [`super::frame::decode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame at byte {offset} declares a {declared}-byte payload, over the maximum of {max} bytes")]
    Oversized { offset: u64, declared: u64, max: u64 },
    #[error(
        "frame at byte {offset} (type {frame_type}, {length}-byte payload) fails its CRC-32C: \
         stored {stored:#010x}, computed {computed:#010x}"
    )]
    Crc {
        offset: u64,
        frame_type: u8,
        length: u32,
        stored: u32,
        computed: u32,
    },
    #[error("frame at byte {offset} has unknown type {frame_type}")]
    UnknownType { offset: u64, frame_type: u8 },
    #[error("frame at byte {offset} (type {frame_type}) has flag bits {flags:#04x} this version does not define")]
    UnknownFlags { offset: u64, frame_type: u8, flags: u8 },
    #[error("the stream ended inside a frame at byte {offset}: {have} of {need} bytes arrived")]
    Truncated { offset: u64, have: u64, need: u64 },
    #[error("{frame} frame: field `{field}` at byte {offset}: {reason}")]
    Field {
        frame: &'static str,
        field: &'static str,
        offset: u64,
        reason: String,
    },
    #[error("{frame} frame: {extra} bytes after the last field at byte {offset}")]
    TrailingBytes {
        frame: &'static str,
        offset: u64,
        extra: u64,
    },
    /// The first bytes are a TLS record (a ClientHello from a TLS client, or the
    /// alert a TLS server sends back to a plaintext Hello), not a frame.
    #[error(
        "the peer speaks TLS (a TLS {} record at byte 0) and this side is plaintext: \
         run both sides with TLS, or both with --plaintext",
        if *record == 0x15 { "alert" } else { "handshake" }
    )]
    PeerSpeaksTls { record: u8 },
    #[error("cannot encode a {frame} frame: field `{field}`: {reason}")]
    Encode {
        frame: &'static str,
        field: &'static str,
        reason: String,
    },
    #[error("reading or writing frames: {kind}: {message}")]
    Io { kind: io::ErrorKind, message: String },
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// Why the handshake or the TLS setup failed.
#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    #[error(transparent)]
    Frame(#[from] FrameError),

    #[error("the peer closed the connection during {stage} (a TLS peer talking to a plaintext side, or the reverse, looks like this too)")]
    Closed { stage: &'static str },

    #[error("no progress for {:.1} s during {stage}: the peer is silent (is it a plaintext peer on a TLS port, or the reverse?)", after.as_secs_f64())]
    Timeout { stage: &'static str, after: Duration },

    #[error("during {stage} the peer sent a {got} frame where {expected} was expected")]
    UnexpectedFrame {
        stage: &'static str,
        expected: &'static str,
        got: &'static str,
    },

    /// This side refused the peer; a `Refuse` frame with the same facts was sent to it.
    #[error("refused the peer ({reason}): {message}")]
    Refused { reason: RefuseReason, message: String },

    /// The peer refused this side; `message` is the peer's own explanation.
    #[error("the peer ({peer_role}) refused this {local_role} ({reason}): {message}")]
    RefusedByPeer {
        reason: RefuseReason,
        local_role: Role,
        peer_role: Role,
        message: String,
    },

    /// The peer's HelloAck contradicts what both Hellos allow: a bug on one side.
    #[error("the applier's HelloAck picked version {version} features {features:#x}, outside what both sides offered (versions {low}..={high}, features {offered:#x})")]
    BadAck {
        version: u16,
        features: u64,
        low: u16,
        high: u16,
        offered: u64,
    },

    #[error("bad handshake setting `{field}`: {reason}")]
    Config { field: &'static str, reason: String },

    #[error("TLS {what} file {}: {reason}", path.display())]
    TlsFile {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },

    #[error("TLS setup: {reason}")]
    TlsConfig { reason: String },

    #[error("TLS handshake with the peer failed: {source} (a plaintext peer, a certificate the CA did not sign, or no client certificate)")]
    TlsHandshake {
        #[source]
        source: io::Error,
    },

    #[error("{stage}: {source}")]
    Io {
        stage: &'static str,
        #[source]
        source: io::Error,
    },

    /// The peer broke the session's rules (a gap, an Ack beyond what was sent,
    /// a frame out of place). The connection is closed; the next session resumes.
    #[error("session protocol: {reason}")]
    Protocol { reason: String },

    /// Feature bit 6: `what` (a Chunk, SegmentSeal, Roll, …) of a partition this session no longer holds: another
    /// shipper's claim displaced it (or it never claimed the partition). The item is discarded, not applied; the
    /// session's other partitions go on (`docs/direct-protocol.md` §6.1).
    #[error("{what} of {}-{}: fenced, node {holder_node} holds the partition at leader epoch {holder_epoch}; discarded, nothing of it applied", partition.topic, partition.partition)]
    Fenced {
        what: &'static str,
        partition: super::codes::PartitionRef,
        /// The holder's node and epoch; -1 when nobody holds it (this session never claimed it).
        holder_node: i32,
        holder_epoch: i32,
    },
    /// The peer's bytes or values cannot be applied: a batch that fails its CRC-32C, offsets going back, a seal
    /// whose digest differs from the bytes, a topic name Kafka would refuse, a log start beyond what the mirror
    /// holds. Nothing of it was applied; the session ends with a Goodbye naming the cause, and the next session
    /// resumes from what is durable. Transient: a broken or hostile peer ends its own session, never this process.
    #[error("refused the peer's {what}: {reason}")]
    PeerData { what: &'static str, reason: String },

    /// `partition` cannot be applied until an operator acts (its source topic was recreated: another topic id;
    /// the partition was paused): the session discards what it receives of it, as of a partition it does not hold,
    /// and the link's other partitions go on. The reason says what to do.
    #[error("{}-{} stopped: {reason}", partition.topic, partition.partition)]
    PartitionStopped {
        partition: super::codes::PartitionRef,
        reason: String,
    },

    /// A partition this session stopped may be applied again (an operator reset or resumed it): the session ends so
    /// that the next one resumes it from the mirror's position. Transient.
    #[error("{reason}; a new session resumes it")]
    Resync { reason: String },

    /// The shipper's source no longer holds bytes it shipped (truncated or rewritten under the feed), on a session
    /// that agreed `FEATURE_TRUNCATE`: the session ends so that the next one's Resume says where the mirror ends
    /// and the feed can send a Truncate (`docs/direct-protocol.md` §6, Truncate). Transient.
    #[error("the source diverged from what was shipped ({partition}): {reason}; resuming to truncate")]
    SourceDiverged { partition: String, reason: String },

    /// This side's chunk feed (shipper) or chunk applier failed; `what` names the step.
    #[error("{what}: {source}")]
    Local {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What a link does after a session ended with an error (see `docs/direct-protocol.md` §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A broken connection or a peer breaking the rules: reconnect with backoff, resume.
    Transient,
    /// The wrong peer (refusal, TLS mismatch, bad ack): pause the link for a long
    /// delay and report once; retrying at once would be a crash loop.
    WrongPeer,
    /// This side's configuration, feed or applier: stop the link and report.
    Local,
}

impl DirectError {
    /// How a link reacts to this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            DirectError::Frame(FrameError::PeerSpeaksTls { .. }) => ErrorClass::WrongPeer,
            // With TLS 1.3 the client's handshake completes before the server checked the client's
            // certificate; the server's refusal reaches the client as an alert on its first read.
            DirectError::Io { source, .. } if is_tls_alert(source.kind(), &source.to_string()) => ErrorClass::WrongPeer,
            DirectError::Frame(FrameError::Io { kind, message }) if is_tls_alert(*kind, message) => {
                ErrorClass::WrongPeer
            }
            DirectError::Frame(FrameError::Encode { .. }) => ErrorClass::Local,
            DirectError::Frame(_)
            | DirectError::Closed { .. }
            | DirectError::Timeout { .. }
            | DirectError::UnexpectedFrame { .. }
            | DirectError::Io { .. }
            | DirectError::Protocol { .. }
            | DirectError::Fenced { .. }
            | DirectError::PeerData { .. }
            | DirectError::PartitionStopped { .. }
            | DirectError::Resync { .. }
            | DirectError::SourceDiverged { .. } => ErrorClass::Transient,
            // Busy: another session still serves the link (often the previous connection of this very peer,
            // not yet timed out on the other side); it clears by itself.
            DirectError::Refused {
                reason: RefuseReason::Busy,
                ..
            }
            | DirectError::RefusedByPeer {
                reason: RefuseReason::Busy,
                ..
            } => ErrorClass::Transient,
            // rustls reports what it refused (a certificate, an alert, a record that is not TLS) as
            // InvalidData; a connection cut during the TLS handshake is any other I/O error.
            DirectError::TlsHandshake { source } if source.kind() != io::ErrorKind::InvalidData => {
                ErrorClass::Transient
            }
            DirectError::Refused { .. }
            | DirectError::RefusedByPeer { .. }
            | DirectError::TlsHandshake { .. }
            | DirectError::BadAck { .. } => ErrorClass::WrongPeer,
            DirectError::Config { .. }
            | DirectError::TlsFile { .. }
            | DirectError::TlsConfig { .. }
            | DirectError::Local { .. } => ErrorClass::Local,
        }
    }
}

/// Results of the direct transport.
pub type Result<T, E = DirectError> = std::result::Result<T, E>;

/// An I/O error that is a TLS alert from the peer (rustls: `InvalidData`, "received fatal alert: …"):
/// the peer refused this side's certificate or TLS parameters.
fn is_tls_alert(kind: io::ErrorKind, message: &str) -> bool {
    kind == io::ErrorKind::InvalidData && message.contains("received fatal alert")
}
