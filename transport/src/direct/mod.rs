//! The direct transport: shipper and applier talk over one TCP connection,
//! TLS with mutual authentication unless both sides say `--plaintext`.
//!
//! Why a protocol of its own rather than the object store: tail mode ships
//! appends within milliseconds, acknowledges what is durable and resumes from
//! there after a cut, and either side may dial so that one of them can sit
//! behind NAT. The specification is `docs/direct-protocol.md`; this module is
//! its wire layer so far:
//! - [`frame`]: the frame envelope (type, flags, length, payload, CRC-32C), the
//!   typed frames and a `tokio_util` codec, bounded by [`frame::MAX_PAYLOAD_LEN`];
//! - [`handshake`](mod@handshake): the versioned Hello exchange over any byte stream, with
//!   refusals sent to the peer and returned locally;
//! - [`tls`]: rustls configurations from PEM files, client certificates required.
//!
//! - [`session`]: what follows the handshake (resume, chunks, seals, acks,
//!   credit, heartbeats, goodbye) and the link's connections (dial with
//!   backoff, listen with one session per link, `--max-bandwidth`);
//! - `testing` (feature `testing`): a fault-injecting TCP proxy for tests.
//!
//! Planned (issue 9): wiring the sessions into the shipper and the applier.

pub mod codes;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod link_meta;
pub mod payload;
pub mod session;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(feature = "tls")]
pub mod tls;

pub use error::{DirectError, ErrorClass, FrameError};
pub use frame::{Frame, FrameCodec, FrameType, MAX_PAYLOAD_LEN};
pub use handshake::{handshake, HandshakeConfig, Session};
pub use payload::{
    Chunk, Claim, ClaimResult, ClaimVerdict, ClaimedAt, Companion, CompanionKind, Goodbye, GoodbyeReason, Hello,
    HelloAck, LogStart, PartitionRef, Position, Refuse, RefuseReason, ReplaceEnd, Revoke, Role, Roll, SegmentReplace,
    SegmentSeal, Shipped, SourceProgress, Truncate, TruncateMode,
};
pub use payload::{LinkId, LinkMetaPiece, LogEnd, MetaPart, LOG_END_LEN};
