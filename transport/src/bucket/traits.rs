//! The two sides of a bucket: [`SegmentSink`] (a shipper writes to it) and
//! [`SegmentSource`] (an applier, the audit and a resuming shipper read from it).
//!
//! Why traits: the guarantees a bucket gives (a commit is atomic and after its
//! files, a stale shipper is fenced, fetched bytes are verified) are stated once
//! here, checked once by the conformance suite, and relied on by the shipper, the
//! applier and the audit without naming a backend. [`Store`](super::Store) (a
//! local folder or S3) implements them, and so does the conformance suite's
//! fault-injecting wrapper. The direct link does not: it streams chunks between
//! live sessions (`direct::session::{ChunkFeed, ChunkApplier}`), with guarantees
//! of its own stated in `docs/direct-protocol.md`.
//!
//! Signatures speak the contract's language only — keys built by
//! [`segmirror_contract::manifest`], [`Manifest`]s, [`Lease`]s, [`Digest`]s, local paths —
//! never a backend's types. What *is* shared by every implementation (grouping
//! a listing into partitions and lineages, reading a manifest size-capped and
//! checked against its key) is written once, as provided methods on top of a
//! few primitives.

use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;

use segmirror_contract::error::{Error, MismatchKind, Result};
use segmirror_contract::index::{self, BucketIndex, ManifestRead};
use segmirror_contract::manifest::{
    KeyPrefix, Lease, Manifest, ManifestFile, PartitionKey, Sha256Digest, MAX_LEASE_BYTES, MAX_MANIFEST_BYTES,
};

pub use segmirror_contract::objects::{Digest, Listing, ObjectInfo, SkippedEntry};

/// One staged file: where it went and what arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedFile {
    pub key: String,
    pub digest: Digest,
}

/// Compare what was received with what was expected: size first, then SHA-256.
pub fn check_received(key: &str, digest: &Digest, size: u64, sha256: &Sha256Digest) -> Result<()> {
    if digest.size != size {
        return Err(Error::mismatch(key, MismatchKind::Size, size, digest.size));
    }
    if digest.sha256 != *sha256 {
        return Err(Error::mismatch(key, MismatchKind::Sha256, sha256, digest.sha256));
    }
    Ok(())
}

/// What a shipper writes to.
///
/// Order of a shipment: [`acquire_lease`](Self::acquire_lease) once per
/// partition; for each segment version, [`stage_file`](Self::stage_file) /
/// [`stage_bytes`](Self::stage_bytes) for every file its manifest will name,
/// then [`commit`](Self::commit). A commit checks the lease first and fails
/// with [`crate::Error::Fenced`] (or [`crate::Error::LeaseLost`]) when another
/// shipper took the partition; nothing is committed then.
#[async_trait]
pub trait SegmentSink: Send + Sync + std::fmt::Debug {
    /// Stage the first `len` bytes of the file at `path` (all of it when `None`) under the data key `key`,
    /// returning the size and digests of the bytes that went.
    async fn stage_file(&self, key: &str, path: &Path, len: Option<u64>) -> Result<StagedFile>;

    /// Stage a small file held in memory (a rebuilt index, a snapshot) under `key`.
    async fn stage_bytes(&self, key: &str, bytes: Bytes) -> Result<StagedFile>;

    /// Take a new lease on `partition` for `owner`, fencing every older holder.
    async fn acquire_lease(&self, partition: &PartitionKey, owner: &str) -> Result<Lease>;

    /// Commit `manifest` (whose files are staged) under `lease`: fails with [`crate::Error::Fenced`] when a newer
    /// lease exists, and with [`crate::Error::BadDocument`] when the manifest is invalid, without writing.
    async fn commit(&self, prefix: &KeyPrefix, lease: &Lease, manifest: &Manifest) -> Result<()>;
}

/// What an applier, the audit and a resuming shipper read from.
///
/// Primitives: [`list`](Self::list), [`read_document`](Self::read_document),
/// [`receive_file`](Self::receive_file). Everything else is provided, once, for
/// every implementation — in particular the check of fetched bytes against what
/// a manifest promised ([`fetch_file`](Self::fetch_file)), so no backend can
/// hand over bytes that were not compared with the manifest.
#[async_trait]
pub trait SegmentSource: Send + Sync + std::fmt::Debug {
    /// Everything under `root` (a `/`-separated key prefix, empty for all), sorted by key. Entries that are not
    /// readable objects are reported in [`Listing::skipped`], never a reason to fail.
    async fn list(&self, root: &str) -> Result<Listing>;

    /// A small document, refused with [`crate::Error::TooLarge`] above `limit` bytes before its body is read.
    async fn read_document(&self, key: &str, limit: u64) -> Result<Bytes>;

    /// What the store says of the object `key` now (size, entity tag, time), `None` when there is none: one
    /// request, for a follower's look at the link's change notice ([`segmirror_contract::link_changes`]).
    /// Default: `None` always, which only means the follower lists at every poll (correct, not cheaper).
    async fn stat(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let _ = key;
        Ok(None)
    }

    /// Write the object `key` into the file at `dest` (created or truncated; not fsynced: a caller that keeps the
    /// file makes it durable itself, once, after everything it changes on it — the applier sets the source's
    /// modification time first — and a caller that copies it elsewhere and deletes it pays nothing) and return the size and
    /// digests of the bytes written, computed as they were written. `size` and `sha256` are what the caller
    /// expects: an implementation may refuse early (a size known before the first byte), but need not —
    /// [`fetch_file`](Self::fetch_file) compares the returned digest with them in any case. On an error the
    /// implementation leaves no file at `dest`.
    async fn receive_file(&self, key: &str, dest: &Path, size: u64, sha256: &Sha256Digest) -> Result<Digest>;

    /// Fetch `key` into the file at `dest`, verified against `size` and `sha256`: a mismatch is
    /// [`crate::Error::Mismatch`] and leaves no file at `dest`.
    async fn fetch_file(&self, key: &str, dest: &Path, size: u64, sha256: &Sha256Digest) -> Result<Digest> {
        let digest = self.receive_file(key, dest, size, sha256).await?;
        match check_received(key, &digest, size, sha256) {
            Ok(()) => Ok(digest),
            Err(e) => {
                let owned = dest.to_path_buf();
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(owned)).await;
                Err(e)
            }
        }
    }

    /// The manifests and leases under `root` (a key under the contract prefix `prefix`), without any lineage's
    /// data objects and chunks ([`segmirror_contract::manifest::in_data_dir`]): a follower's poll, whose cost must not grow
    /// with the chunks a continuous shipper adds every round. Default: [`list`](Self::list), filtered (correct,
    /// not cheaper); a backend that can leave the data out of the listing itself overrides it.
    async fn list_versions(&self, prefix: &KeyPrefix, root: &str) -> Result<Listing> {
        let mut listing = self.list(root).await?;
        listing
            .objects
            .retain(|o| !segmirror_contract::manifest::in_data_dir(prefix, &o.key));
        Ok(listing)
    }

    /// The partitions, lineages and versions under `prefix` (only `prefix/<link>` when a link is named).
    async fn index(&self, prefix: &KeyPrefix, link: Option<&str>) -> Result<BucketIndex> {
        Ok(BucketIndex::build(prefix, self.list(&index_root(prefix, link)).await?))
    }

    /// [`index`](Self::index) from [`list_versions`](Self::list_versions): every lineage's manifests, each
    /// partition's leases, no data objects ([`crate::IndexedLineage::data`] stays empty). What the applier plans
    /// from: it reads manifests and fetches the files they name, never the listing's data entries.
    async fn index_versions(&self, prefix: &KeyPrefix, link: Option<&str>) -> Result<BucketIndex> {
        Ok(BucketIndex::build(
            prefix,
            self.list_versions(prefix, &index_root(prefix, link)).await?,
        ))
    }

    /// Read the manifest at `key` (listed under `prefix`): size-capped, parsed, validated and checked against
    /// its key. Only a transport failure is an `Err`; a bad document is [`ManifestRead::Invalid`].
    async fn read_manifest(&self, prefix: &KeyPrefix, key: &str) -> Result<ManifestRead> {
        match self.read_document(key, MAX_MANIFEST_BYTES).await {
            Ok(bytes) => Ok(index::check_manifest(prefix, key, &bytes)),
            Err(Error::NotFound { .. }) => Ok(ManifestRead::Gone),
            Err(e @ (Error::TooLarge { .. } | Error::NotRegularFile { .. })) => Ok(ManifestRead::Invalid(e)),
            Err(e) => Err(e),
        }
    }

    /// Fetch one file a manifest names into `dest`, verified against the manifest's size and SHA-256.
    async fn fetch_manifest_file(&self, file: &ManifestFile, dest: &Path) -> Result<Digest> {
        self.fetch_file(&file.key, dest, file.size, &file.sha256).await
    }

    /// The lease at `epoch` of `partition`, checked to name the epoch of its key.
    async fn read_lease(&self, partition: &PartitionKey, epoch: u64) -> Result<Lease> {
        let key = partition.lease_key(epoch);
        let bytes = self.read_document(&key, MAX_LEASE_BYTES).await?;
        index::check_lease(&key, epoch, &bytes)
    }
}

/// What an index lists: `prefix`, or `prefix/<link>`.
fn index_root(prefix: &KeyPrefix, link: Option<&str>) -> String {
    match link {
        Some(link) => prefix.join(link),
        None => prefix.as_str().to_string(),
    }
}

/// Both sides of one transport: what a shipper needs (it writes, and reads back what it shipped to resume).
pub trait Transport: SegmentSink + SegmentSource {}

impl<T: SegmentSink + SegmentSource + ?Sized> Transport for T {}
