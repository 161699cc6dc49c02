//! segmirror's shipper: batch seeding of source log dirs into a transport.
//!
//! - [`source`]: reading a live broker's log dirs — discovery and the topic
//!   filter, a partition's segments, each bounded (sealed segments verified,
//!   the active one up to its last complete batch, indexes rebuilt), and
//!   guards against files changing while read. No store types: any driver
//!   uses it.
//! - [`seed`]: batch mode — ship what source log dirs hold, resumably; a user
//!   of [`source`].
//!
//! What travels and how (the bucket layout, manifests, leases, the object-store
//! backend, the audit) is the contract of `segmirror_transport`, shared with
//! the applier; this crate is the source side only.
//!
//! ## Invariants
//! - A manifest is written only after every data object it names; data keys
//!   include the segment's `[base, next)`, so no upload overwrites bytes a
//!   committed manifest points at.
//! - A shipper commits only under a lease it holds; a fenced one stops.
//!
//! ## Crash behaviour
//! An interrupted upload leaves at most data objects without a manifest
//! (reported by the audit as orphans, harmless) or an aborted multipart upload.

pub mod error;
pub mod link_meta;
pub mod seed;
pub mod source;
pub mod store_tail;
pub mod tail;

pub use error::{Error, Result};
