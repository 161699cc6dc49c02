//! The bucket: segment versions carried through an object store (a local folder or S3).
//!
//! A shipper stages a version's files and commits its manifest under a lease; an applier, the audit or a resuming
//! shipper lists the bucket, reads manifests size-capped and checked against their keys, and fetches files verified
//! against the size and SHA-256 their manifest promised. The keys, documents and checks are the contract's
//! (`segmirror_contract`); this module moves the bytes and keeps the object-store client's types to itself (its
//! errors reach callers as the contract's [`Error`](crate::Error), classified once).
//!
//! - [`store`]: [`Store`], the object-store backend: streaming transfers with digests computed in passing, retries
//!   classified once, listings, the local-folder fast paths, store URLs, and [`lease`]s on create-if-absent puts.
//! - [`SegmentSink`] / [`SegmentSource`]: what a bucket guarantees, stated once and implemented by [`Store`].
//! - [`audit`]: the bucket scrubber, beside the contract it checks.
//! - [`link_meta`]: a link's metadata documents published to and read from a bucket.
//! - [`link_identity`]: the create-if-absent claim of a bucket for one link.
//! - `conformance` (tests and the `conformance` feature): the suite every backend must pass, and fault-injecting
//!   wrappers.

pub mod audit;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod link_changes;
pub mod link_identity;
pub mod link_meta;
pub mod store;
mod traits;

pub use store::lease;
pub use store::{PutSummary, S3Options, Store, StoreUrl};
pub use traits::{
    check_received, Digest, Listing, ObjectInfo, SegmentSink, SegmentSource, SkippedEntry, StagedFile, Transport,
};
