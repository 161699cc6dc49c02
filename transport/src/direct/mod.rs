//! The direct link: shipper and applier talk over one TCP connection,
//! TLS with mutual authentication unless both sides say `--plaintext`.
//!
//! Why a protocol of its own rather than the bucket: tail mode ships appends
//! within milliseconds, acknowledges what is durable and resumes from there
//! after a cut, and either side may dial so that one of them can sit behind
//! NAT. The specification is `docs/direct-protocol.md`. The segment versions
//! carried obey the same contract as a bucket's (`segmirror_contract`); the
//! bucket's traits are not used here.
//!
//! - [`frame`]: the frame envelope (type, flags, length, payload, CRC-32C), the
//!   typed frames and a `tokio_util` codec, bounded by [`frame::MAX_PAYLOAD_LEN`];
//! - [`payload`] and [`codes`]: the typed payloads, their field codecs and the
//!   enumerated codes (roles, refusal reasons, partition references);
//! - [`handshake`](mod@handshake): the versioned Hello exchange over any byte stream, with
//!   refusals sent to the peer and returned locally;
//! - [`session`]: what follows the handshake (resume, chunks, seals, acks,
//!   credit, heartbeats, goodbye) and the link's connections (dial with
//!   backoff, listen with one session per link, several shippers on one mirror,
//!   `--max-bandwidth`). A shipper session reads what to send from a
//!   [`ChunkFeed`](session::ChunkFeed) and an applier session applies through a
//!   [`ChunkApplier`](session::ChunkApplier): the shipper and applier crates
//!   implement those two traits;
//! - [`link_meta`]: a link's metadata documents cut into frame-sized pieces and
//!   put back together, checked against their SHA-256;
//! - [`error`]: [`DirectError`], classified ([`ErrorClass`]) for whether to
//!   reconnect, pause or stop;
//! - [`tls`] (feature `tls`): rustls configurations from PEM files, client certificates required;
//! - `testing` (feature `testing`): a fault-injecting TCP proxy for tests.

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
