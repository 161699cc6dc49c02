//! The object-store backend as a [`SegmentSink`] and a [`SegmentSource`]: each
//! trait method is one of [`Store`]'s operations (streaming transfers with
//! digests, retries, create-if-absent leases), so the traits add no behaviour of
//! their own here.

use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;

use super::lease::HeldLease;
use super::Store;
use crate::bucket::traits::{Digest, Listing, ObjectInfo, SegmentSink, SegmentSource, StagedFile};
use segmirror_contract::error::{Error, Result};
use segmirror_contract::manifest::{KeyPrefix, Lease, Manifest, PartitionKey, Sha256Digest};

#[async_trait]
impl SegmentSink for Store {
    async fn stage_file(&self, key: &str, path: &Path, len: Option<u64>) -> Result<StagedFile> {
        let summary = self.put_file_prefix(key, path, len).await?;
        Ok(StagedFile {
            key: key.to_string(),
            digest: summary.digest,
        })
    }

    async fn stage_bytes(&self, key: &str, bytes: Bytes) -> Result<StagedFile> {
        let digest = segmirror_contract::digest::digest_of(&bytes);
        self.put_bytes(key, bytes).await?;
        Ok(StagedFile {
            key: key.to_string(),
            digest,
        })
    }

    async fn acquire_lease(&self, partition: &PartitionKey, owner: &str) -> Result<Lease> {
        Ok(HeldLease::acquire(self, partition, owner).await?.lease().clone())
    }

    async fn commit(&self, prefix: &KeyPrefix, lease: &Lease, manifest: &Manifest) -> Result<()> {
        let partition = manifest.partition_key(prefix.clone())?;
        let key = partition.manifest_key(&manifest.source_topic_id, manifest.base_offset)?;
        manifest
            .validate()
            .and_then(|()| manifest.check_location(prefix, &key))
            .map_err(|problem| Error::bad_document(&key, 0, problem))?;
        HeldLease::from_parts(partition, lease.clone())
            .check_still_holder(self)
            .await?;
        self.put_bytes(&key, manifest.to_json()).await
    }
}

#[async_trait]
impl SegmentSource for Store {
    async fn list(&self, root: &str) -> Result<Listing> {
        self.list_all(root).await
    }

    async fn list_versions(&self, prefix: &KeyPrefix, root: &str) -> Result<Listing> {
        Store::list_versions(self, prefix, root).await
    }

    async fn read_document(&self, key: &str, limit: u64) -> Result<Bytes> {
        self.get_bytes(key, limit).await
    }

    async fn stat(&self, key: &str) -> Result<Option<ObjectInfo>> {
        match self.head(key).await {
            Ok(info) => Ok(Some(info)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn receive_file(&self, key: &str, dest: &Path, size: u64, sha256: &Sha256Digest) -> Result<Digest> {
        self.get_to_file(key, dest, size, sha256).await
    }
}
