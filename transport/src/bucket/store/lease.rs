//! Leases: which shipper may commit manifests for a partition.
//!
//! Two shippers on the same partition (a restarted host while the old process
//! still runs, an operator mistake) must not both commit manifests. Each
//! shipper takes a new **epoch** `E = max(existing) + 1` by creating
//! `lease/<E>.json` with a create-if-absent put — atomic on a local folder
//! (no-replace link) and on S3 (`If-None-Match: *`) — so exactly one shipper
//! owns each epoch. On a lost race it lists again and tries the next epoch.
//! Before committing each manifest a shipper calls
//! [`HeldLease::check_still_holder`], which lists `lease/` and fails with
//! [`Error::Fenced`] if any higher epoch exists; a fenced shipper stops.
//!
//! Old lease objects are history, not a problem: the highest epoch is the
//! current holder. The check and the manifest put are two requests, so a
//! shipper fenced between them can still land one manifest; every manifest
//! records the lease epoch it was committed under, and the audit reports
//! commits by an epoch older than one already seen.

use std::time::{SystemTime, UNIX_EPOCH};

use segmirror_contract::manifest::{KeyPrefix, Lease, ObjectKey, ObjectKind, PartitionKey};

use crate::bucket::store::Store;
use crate::bucket::traits::SegmentSource;
use segmirror_contract::error::{Error, Result};

/// Lost create races before [`Error::LeaseContention`]: each loss means another
/// shipper just took an epoch, so this many in a row means a storm of shippers
/// that an operator has to look at.
pub const MAX_ACQUIRE_ATTEMPTS: u32 = 16;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Epochs of the lease objects under the partition, ascending. Keys under
/// `lease/` that are not lease names are ignored here (the audit reports them).
pub async fn lease_epochs(store: &Store, partition: &PartitionKey) -> Result<Vec<u64>> {
    let listed = store.list(&partition.lease_dir()).await?;
    let mut epochs: Vec<u64> = listed
        .iter()
        .filter_map(|o| match ObjectKey::parse(partition.prefix(), &o.key) {
            Ok(ObjectKey {
                partition: p,
                kind: ObjectKind::Lease { epoch },
            }) if &p == partition => Some(epoch),
            _ => None,
        })
        .collect();
    epochs.sort_unstable();
    Ok(epochs)
}

/// The current (highest-epoch) lease, read and validated; `None` if no lease exists.
pub async fn current_lease(store: &Store, partition: &PartitionKey) -> Result<Option<Lease>> {
    let Some(&epoch) = lease_epochs(store, partition).await?.last() else {
        return Ok(None);
    };
    read_lease(store, partition, epoch).await.map(Some)
}

/// Read `lease/<epoch>.json` and check that it names the epoch of its key.
pub async fn read_lease(store: &Store, partition: &PartitionKey, epoch: u64) -> Result<Lease> {
    SegmentSource::read_lease(store, partition, epoch).await
}

/// A lease this process acquired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    partition: PartitionKey,
    lease: Lease,
}

impl HeldLease {
    /// Take the next epoch on `partition` for `owner` (a shipper id: printable
    /// ASCII, at most 255 characters).
    pub async fn acquire(store: &Store, partition: &PartitionKey, owner: &str) -> Result<HeldLease> {
        for _ in 0..MAX_ACQUIRE_ATTEMPTS {
            let epoch = lease_epochs(store, partition)
                .await?
                .last()
                .map_or(1, |e| e.saturating_add(1));
            let lease = Lease::new(owner, epoch, now_ms());
            let key = partition.lease_key(epoch);
            lease.validate().map_err(|d| Error::bad_document(&key, 0, d))?;
            if store.put_if_absent(&key, lease.to_json()).await? {
                tracing::info!(partition = %partition.dir(), epoch, owner, "lease acquired");
                return Ok(HeldLease {
                    partition: partition.clone(),
                    lease,
                });
            }
            tracing::info!(partition = %partition.dir(), epoch, "lease epoch taken by another shipper; retrying");
        }
        Err(Error::LeaseContention {
            partition: partition.dir(),
            attempts: MAX_ACQUIRE_ATTEMPTS,
        })
    }

    /// A lease taken earlier (by [`HeldLease::acquire`] or a transport's `acquire_lease`), to check and commit under.
    pub fn from_parts(partition: PartitionKey, lease: Lease) -> HeldLease {
        HeldLease { partition, lease }
    }

    pub fn epoch(&self) -> u64 {
        self.lease.epoch
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    pub fn partition(&self) -> &PartitionKey {
        &self.partition
    }

    pub fn prefix(&self) -> &KeyPrefix {
        self.partition.prefix()
    }

    /// `Ok` if no newer epoch exists and ours is still there; [`Error::Fenced`]
    /// if a newer one exists, [`Error::LeaseLost`] if ours was deleted (another
    /// shipper could then create the same epoch). Call right before committing a
    /// manifest.
    pub async fn check_still_holder(&self, store: &Store) -> Result<()> {
        let epochs = lease_epochs(store, &self.partition).await?;
        match epochs.last() {
            Some(&newest) if newest > self.lease.epoch => Err(Error::Fenced {
                partition: self.partition.dir(),
                held_epoch: self.lease.epoch,
                newer_epoch: newest,
            }),
            _ if !epochs.contains(&self.lease.epoch) => Err(Error::LeaseLost {
                partition: self.partition.dir(),
                epoch: self.lease.epoch,
            }),
            _ => Ok(()),
        }
    }
}
