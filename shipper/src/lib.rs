//! segmirror's shipper side of the bucket: the transport, the lease, the audit.
//!
//! - [`store`]: one [`store::Store`] over a local folder or S3 — streaming
//!   uploads (multipart above a threshold) and downloads with size, CRC-32C and
//!   SHA-256 computed in passing, retries with backoff on transient errors only.
//!   The applier and the tools use it too (the read half).
//! - [`lease`]: which shipper may commit manifests for a partition. Epochs are
//!   created with create-if-absent puts; a shipper checks before each commit that
//!   no newer epoch exists and stops with [`Error::Fenced`] if one does.
//! - [`audit`]: the bucket scrubber — every manifest against its data objects,
//!   offset chains and epochs across segments, lineages, orphans; optionally a
//!   deep verification of each segment's bytes.
//! - [`source`]: reading a live broker's log dirs — discovery and the topic
//!   filter, a partition's segments, each bounded (sealed segments verified,
//!   the active one up to its last complete batch, indexes rebuilt), and
//!   guards against files changing while read. No store types: any driver
//!   uses it.
//! - [`seed`]: batch mode — ship what source log dirs hold, resumably; a user
//!   of [`source`].
//!
//! The bucket layout and the documents in it are defined by
//! `segment_format::manifest`, the one place that builds and parses keys.
//!
//! ## Invariants
//! - A manifest is written only after every data object it names; data keys
//!   include the segment's `[base, next)`, so no upload overwrites bytes a
//!   committed manifest points at.
//! - Nothing read from a bucket is trusted: keys are parsed by the contract
//!   module, documents are size-capped and validated, data is hashed.
//!
//! ## Crash behaviour
//! An interrupted upload leaves at most data objects without a manifest
//! (reported by the audit as orphans, harmless) or an aborted multipart upload.
//! Downloads write to the caller's path and remove it on failure; the caller
//! stages and renames.

pub mod audit;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod error;
pub mod lease;
pub mod seed;
pub mod source;
pub mod store;

pub use error::{Error, MismatchKind, Result};
pub use store::{Digest, ObjectInfo, PutSummary, S3Options, Store, StoreUrl};
