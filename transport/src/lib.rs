//! # segmirror-transport
//!
//! The two ways segment versions travel from a shipper to an applier, beside the contract both obey.
//!
//! - [`bucket`]: through an object store (a local folder or S3). [`Store`] implements [`SegmentSink`] (what a
//!   shipper writes to: stage files, commit a manifest under a lease that fences a stale shipper) and
//!   [`SegmentSource`] (what an applier, the audit or a resuming shipper reads from: the index, manifests
//!   size-capped and checked against their keys, files verified on arrival). Also the audit, link metadata and
//!   identity in a bucket, and (feature `conformance`) the suite every backend must pass.
//! - [`direct`]: over one TCP connection, mutual TLS unless both sides say `--plaintext` (frames, handshake,
//!   payloads, sessions, links; `docs/direct-protocol.md`). Its sessions do not use the bucket's traits: a shipper
//!   session reads a [`ChunkFeed`](direct::session::ChunkFeed), an applier session writes through a
//!   [`ChunkApplier`](direct::session::ChunkApplier), and acknowledges only what the applier made durable.
//!
//! What both agree on — keys and manifests, the succession rule, the bucket index, the link metadata documents, the
//! digests, the error type — is the pure crate `segmirror-contract`, re-exported here at the paths the workspace
//! uses: [`manifest`], [`index`], [`succession`], [`digest`], [`error`].
//!
//! ## Invariants
//! - Nothing read from a bucket or a peer is trusted: keys are parsed by [`manifest`], documents are size-capped and
//!   validated, data is hashed; a direct frame is bounded by [`direct::MAX_PAYLOAD_LEN`] and checked field by field.
//! - A manifest is committed only after every data object it names.
//! - Bucket problems are the contract's [`Error`] (no object-store type in it); direct-link problems are
//!   [`direct::DirectError`]; `segment-format` keeps Kafka's format only.

pub mod bucket;
pub mod direct;

pub use segmirror_contract::{digest, error, index, manifest, succession};

pub use bucket::lease;
pub use bucket::{
    check_received, Digest, Listing, ObjectInfo, PutSummary, S3Options, SegmentSink, SegmentSource, SkippedEntry,
    StagedFile, Store, StoreUrl, Transport,
};
pub use error::{DocumentProblem, Error, MismatchKind, Result};
pub use index::{BucketIndex, ForeignKey, IndexedLineage, IndexedPartition, ManifestRead};
