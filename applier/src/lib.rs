//! segmirror's applier: installs shipped Kafka segments into a mirror directory, byte for byte, and records every
//! installed version in the catalog. The mirror root is segmirror's own directory, never a broker's log dir;
//! `segmirror promote` hands its partitions to a stopped broker.
//!
//! # Modules
//! One module per delivery mode, named as on the shipper's side, and the pieces they share:
//! - [`bucket`]: the object-store applier. A run ([`apply`], or [`Applier::run`]) lists one link in the store, reads
//!   the manifests of each partition's lineage in base-offset order, plans them with the succession rule
//!   ([`bucket::plan`]), validates them and the data they name (every batch CRC, offsets inside `[base, next)`, the
//!   indexes, the transaction index and producer snapshot), and installs each version into
//!   `<mirror-root>/<topic>-<partition>/` under Kafka's own file names, with the source's modification times,
//!   `partition.metadata` (the source topic id while mirroring) and a `leader-epoch-checkpoint` merged from the
//!   manifests. [`bucket::follow`] repeats runs until told to stop.
//! - [`direct`]: the direct applier, the applier's side of a direct session (TCP/TLS): each shipped chunk is checked
//!   and appended to the mirror's active segment as it arrives, with seals, replacements of compacted segments,
//!   truncations and retention.
//! - [`mirror`]: the owner of the mirror root: every path and state directory under it ([`MirrorLayout`]), and the
//!   readers of the state files the direct applier keeps there.
//! - [`promote`]: hands mirror partitions to a real, stopped Kafka broker.
//! - [`report`]: what a bucket run did, per partition ([`ApplyReport`]), and why data was turned down ([`Refusal`]).
//! - `install` (private): the crash-safe install of one segment version (stage, validate, make durable, rename into
//!   place), and a follower's in-place append of a grown active segment; `chunk_rule` (private): the rule a chunk
//!   must pass before its bytes are written, on both delivery paths.
//! - [`lock_mirror`]: one applier per mirror root; `failpoint` (feature `failpoints`): kill points for crash tests.
//!
//! The store's read half (`SegmentSource`: listing, manifest reads, downloads with streaming size and hash checks)
//! is `segmirror_transport`'s, shared with the shipper and the audit, so both ends of the bucket share one
//! implementation of retries, integrity checks and URL handling; the bucket layout itself is
//! `segmirror_transport::manifest`.
//!
//! # Invariants of the bucket applier
//! - **The catalog never claims more than is durable on disk.** A version is recorded installed in one catalog
//!   transaction only after its files are renamed into place and fsynced, with the directory.
//! - **A half-written file is never visible under a final name.** Downloads land in
//!   `<mirror-root>/.staging/`; renames are atomic; a `.log` never appears without its indexes.
//! - **Nothing is written outside the mirror root.** Paths are built from parsed, validated names only; a
//!   manifest is untrusted input, checked against the key it was found at.
//! - **Offsets only grow.** Versions are installed in base-offset order without overlap; only the last, unsealed
//!   segment may be replaced by a longer version of itself. A gap is accepted only after a sealed segment (the
//!   source had it: compaction, retention). See [`bucket::plan`].
//! - **A lineage break is data.** A recreated source topic is reported, logged and its partition paused; never
//!   merged. A promoted partition is never written again; a paused one is skipped.
//!
//! Data the applier turns down (a corrupt segment, a manifest that lies, a version that does not fit) is a
//! [`Refusal`] in the [`ApplyReport`], not an [`Error`]: it stops its partition and the run goes on.
//!
//! # Crash behaviour
//! Idempotent and crash-safe: a rerun skips what the catalog lists as installed without fetching it again. On
//! start, the staging directory is removed; files a crash left in a partition directory that the catalog does not
//! list are adopted when they match the current manifest's SHA-256 (no re-download), and removed otherwise. The
//! disk may be ahead of the catalog, never behind; a catalog entry whose files are missing or changed stops the
//! partition with [`Error::DiskBehindCatalog`] rather than guessing. One applier runs per mirror root at a time.
//! The direct applier's own durability order is in [`direct`].

pub mod bucket;
mod catalog_cell;
mod chunk_rule;
pub mod direct;
mod error;
#[cfg(feature = "failpoints")]
pub mod failpoint;
mod install;
mod lock;
pub mod mirror;
pub mod promote;
pub mod report;
mod segment_log;
pub mod verify;

pub use bucket::{
    apply, Applier, ApplyConfig, APPLIER_TOPICS_REGEX, DEFAULT_PARALLEL_PARTITIONS, MANIFEST_READ_CONCURRENCY,
};
pub use error::{Error, Result};
pub use install::MAX_SNAPSHOT_BYTES;
pub use lock::{lock_mirror, LockWait, MirrorLock};
pub use mirror::{MirrorLayout, MIRROR_ROOT_ENTRIES};
pub use report::{
    ApplyReport, InstalledSegment, PartitionOutcome, PartitionReport, Refusal, RefusedSegment, SkipReason, SkipSegment,
    SkippedSegment, Verdict,
};
pub use segment_format::progress::{NoProgress, Progress};
