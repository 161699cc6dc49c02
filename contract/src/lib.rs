//! # segmirror-contract
//!
//! What a shipper and an applier agree on, whatever carries the bytes: how a segment version is named, what its
//! manifest says and how a reader checks it, which version may follow which, what a link's metadata and identity
//! documents hold, and how bytes are digested on arrival.
//!
//! Why a crate of its own: every part of segmirror speaks these shapes — the bucket (`segmirror-transport`), the
//! direct link, the shipper, the applier, and the catalog that records what was installed — but none of them needs
//! a transport to do so. Kept pure (serde and hashing, no I/O runtime, no store client, no TLS), the catalog and
//! any other reader of the contract depend on it without pulling a transport in.
//!
//! Modules:
//! - [`manifest`]: the bucket key scheme and the JSON documents (manifests, leases, chunks); the one place that
//!   builds and parses keys.
//! - [`index`]: the one grouping of a bucket listing into partitions, lineages and versions, foreign keys set aside;
//!   and the pure checks of a manifest or lease read from a key.
//! - [`succession`]: the one rule for which segment version may follow which, as a pure function returning a typed
//!   verdict that the shipper's plan, the applier's plan, the catalog and the audit each map to their action.
//! - [`link_meta`]: a link's metadata documents (topics, group offsets, the manifest naming them) and their checks.
//! - [`link_identity`]: the link identity document and its key.
//! - [`digest`]: size, CRC-32C and SHA-256 of bytes or a file, computed in one pass.
//! - [`objects`]: what a listing holds, as plain values.
//! - [`error`]: the one error type, shared with the transports.
//!
//! ## Invariants
//! - Nothing read is trusted: keys are parsed by [`manifest`], documents are size-capped by their readers and
//!   validated here, data is hashed ([`digest`]) and compared with what a manifest promised.
//! - Bucket problems are this crate's [`Error`]; `segment-format` keeps Kafka's format only.

pub mod digest;
pub mod error;
pub mod index;
pub mod link_changes;
pub mod link_identity;
pub mod link_meta;
pub mod manifest;
pub mod objects;
pub mod succession;

pub use digest::{digest_file, digest_of, Hasher};
pub use error::{DocumentProblem, Error, MismatchKind, Result, StoreFailure};
pub use index::{BucketIndex, ForeignKey, IndexedLineage, IndexedPartition, ManifestRead};
pub use objects::{Digest, Listing, ObjectInfo, SkippedEntry};
