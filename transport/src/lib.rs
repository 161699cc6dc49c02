//! # segmirror-transport
//!
//! The contract between a shipper and an applier, whatever carries the bytes.
//!
//! A shipper produces *segment versions* (a Kafka segment's files up to some
//! offset, plus a manifest that commits them); an applier consumes them. What
//! both must agree on — how a version is named, what its manifest says and how
//! a reader checks it, who may commit, how bytes are verified on arrival — does
//! not depend on whether the bytes travel through an object store or, later,
//! over a direct connection. So it lives here, apart from both sides, and each
//! way of carrying bytes is one implementation of the same two traits:
//!
//! - [`SegmentSink`]: what a shipper writes to — stage a version's files,
//!   commit its manifest, under a lease that fences a stale shipper.
//! - [`SegmentSource`]: what an applier (or an audit, or a shipper resuming)
//!   reads from — the index of partitions, lineages and versions, a manifest
//!   read size-capped and checked against where it was found, a file fetched
//!   and verified against the size and SHA-256 its manifest promised.
//!
//! Modules:
//! - [`manifest`]: the bucket key scheme and the JSON documents (manifests,
//!   leases); the one place that builds and parses keys.
//! - [`index`]: the one listing of a bucket, grouped into partitions, lineages
//!   and versions, foreign keys set aside; and the one `read_manifest`.
//! - [`store`]: the object-store backend (local folder or S3): streaming
//!   transfers with digests computed in passing, retries classified once, and
//!   leases on create-if-absent puts.
//! - [`audit`]: the bucket scrubber, beside the contract it checks.
//! - [`succession`]: the one rule for which segment version may follow which, as a pure function returning a typed
//!   verdict that the shipper's plan, the applier's plan, the catalog and the audit each map to their action.
//! - [`direct`]: the direct protocol (frames, handshake, mutual TLS, sessions and links); see `docs/direct-protocol.md`.
//! - `conformance` (tests and the `conformance` feature): the suite every
//!   backend must pass, and fault-injecting wrappers.
//!
//! ## Invariants
//! - Nothing read from a transport is trusted: keys are parsed by
//!   [`manifest`], documents are size-capped and validated, data is hashed.
//! - A manifest is committed only after every data object it names.
//! - Bucket problems are this crate's [`Error`]; `segment-format` keeps Kafka's
//!   format only.

pub mod audit;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod direct;
pub mod link_identity;
pub mod link_meta;
pub mod store;
mod traits;

// The pure contract, at the paths the workspace has always used.
pub use segmirror_contract::{digest, error, index, manifest, succession};

pub use error::{DocumentProblem, Error, MismatchKind, Result};
pub use index::{BucketIndex, ForeignKey, IndexedLineage, IndexedPartition, ManifestRead};
pub use store::lease;
pub use store::{PutSummary, S3Options, Store, StoreUrl};
pub use traits::{
    check_received, Digest, Listing, ObjectInfo, SegmentSink, SegmentSource, SkippedEntry, StagedFile, Transport,
};
