//! segmirror's shipper: the side beside a source broker, reading its log dirs and shipping their segments by one
//! of two delivery modes (the applier has the same two names on its side).
//!
//! - [`source`]: reading a live broker's log dirs, whatever carries the bytes — discovery and the topic filter, a
//!   partition's segments each bounded (sealed segments verified, the active one up to its last complete batch,
//!   indexes rebuilt), the end of a growing segment read incrementally ([`source::growing`]), high watermarks,
//!   leadership, the log-dir watcher, and guards against files changing while read. No store and no wire types.
//! - [`bucket`]: the object-store mode — [`bucket::seed`] ships what the log dirs hold in one resumable round
//!   (`segmirror seed`), [`bucket::follow`] runs such rounds continuously as the log dirs change
//!   (`segmirror ship --store`).
//! - [`direct`]: the direct mode — the [`TailFeed`](direct::TailFeed) a `ShipperSession` of
//!   `segmirror_transport::direct` sends over TCP/TLS to an applier (`segmirror ship`): chunks as the broker
//!   appends, seals, replacements, truncations and the log start, resumed from the applier's durable position.
//! - [`link_meta`]: what a link carries besides segments (topic configs and ids, consumer group offsets), read
//!   from the broker's own metadata log and `__consumer_offsets`, for either mode.
//! - [`error`]: the crate's [`Error`].
//!
//! What travels and how (the bucket layout, manifests, leases, the direct protocol) is the contract of
//! `segmirror_transport`, shared with the applier; this crate is the source side only.
//!
//! ## Invariants
//! - Through a bucket, a manifest is written only after every data object it names; data keys include the
//!   segment's `[base, next)`, so no upload overwrites bytes a committed manifest points at; a shipper commits only
//!   under a lease it holds, and a fenced one stops.
//! - Over the direct link, every byte of a segment is shipped once, in chunks that end on batch boundaries, and a
//!   segment is sealed only when its bytes are the ones shipped (otherwise the feed fails as diverged).
//!
//! ## Crash behaviour
//! An interrupted upload leaves at most data objects without a manifest (reported by the audit as orphans,
//! harmless) or an aborted multipart upload. A direct feed keeps no state of its own: a new session resumes from the
//! applier's durable position.

pub mod bucket;
pub mod direct;
pub mod error;
pub mod link_meta;
pub mod source;

pub use error::{Error, Result};
