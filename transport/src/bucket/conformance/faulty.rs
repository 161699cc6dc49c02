//! A fault-injecting transport: wraps any [`SegmentSink`] + [`SegmentSource`]
//! and, for calls chosen by the test, fails them, truncates or corrupts the
//! bytes they carry, loses their answer, or delays them.
//!
//! It models the medium between a shipper and an applier going wrong, so a
//! test can check the property that matters: an injected fault surfaces as a
//! clear error (or a refused document), never as bytes silently accepted.
//! With nothing injected it passes every call through, and must then pass the
//! [`contract`](super::contract) suite like any backend.
//!
//! - [`Fault::Fail`]: the call fails with a transient error, having done nothing.
//! - [`Fault::LoseAnswer`]: the call is done, then fails with a transient error
//!   (a commit whose answer the network lost).
//! - [`Fault::Truncate`] / [`Fault::Corrupt`]: the bytes that travel are cut in
//!   half / have one byte flipped — on a stage, what is stored (the sender still
//!   reports the digest of what it sent); on a document read or a file fetch,
//!   what is delivered (the receiver reports the digest of what it got).
//! - [`Fault::Delay`]: the call waits, then passes through.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::bucket::traits::{Digest, Listing, SegmentSink, SegmentSource, StagedFile};
use segmirror_contract::digest::digest_of;
use segmirror_contract::error::{Error, Result};
use segmirror_contract::manifest::{KeyPrefix, Lease, Manifest, PartitionKey, Sha256Digest};

/// A call of the transport a fault can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Stage,
    AcquireLease,
    Commit,
    List,
    ReadDocument,
    Fetch,
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Fail,
    LoseAnswer,
    Truncate,
    Corrupt,
    Delay(Duration),
}

/// A transport `T` with faults injected into chosen calls.
#[derive(Debug)]
pub struct Faulty<T> {
    inner: T,
    planned: Mutex<VecDeque<(Op, Fault)>>,
    injected: AtomicU64,
}

fn injected_error(op: Op, key: &str) -> Error {
    Error::Store {
        key: key.to_string(),
        operation: "injected fault",
        transient: true,
        source: Box::new(object_store::Error::Generic {
            store: "faulty",
            source: format!("{op:?} failed by the fault injector").into(),
        }),
    }
}

/// Cut in half.
fn truncated(bytes: &[u8]) -> Vec<u8> {
    bytes[..bytes.len() / 2].to_vec()
}

/// One byte in the middle replaced by 0xFF (never valid UTF-8, so never valid JSON either).
fn corrupted(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if let Some(b) = out.get_mut(bytes.len() / 2) {
        *b = if *b == 0xff { 0xfe } else { 0xff };
    }
    out
}

fn damage(fault: Fault, bytes: &[u8]) -> Vec<u8> {
    match fault {
        Fault::Truncate => truncated(bytes),
        Fault::Corrupt => corrupted(bytes),
        _ => bytes.to_vec(),
    }
}

impl<T> Faulty<T> {
    /// Pass-through until faults are injected.
    pub fn new(inner: T) -> Self {
        Faulty {
            inner,
            planned: Mutex::new(VecDeque::new()),
            injected: AtomicU64::new(0),
        }
    }

    /// The next call of `op` (after those already planned for it) gets `fault`.
    pub fn inject(&self, op: Op, fault: Fault) {
        self.planned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back((op, fault));
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// Faults planned and not injected yet.
    pub fn pending(&self) -> usize {
        self.planned.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The fault planned for this call of `op`, if any (a delay is served here).
    async fn take(&self, op: Op) -> Option<Fault> {
        let fault = {
            let mut planned = self.planned.lock().unwrap_or_else(|p| p.into_inner());
            let at = planned.iter().position(|(o, _)| *o == op)?;
            planned.remove(at).map(|(_, f)| f)
        }?;
        self.injected.fetch_add(1, Ordering::SeqCst);
        if let Fault::Delay(d) = fault {
            tokio::time::sleep(d).await;
            return None;
        }
        Some(fault)
    }
}

/// Read a whole (test-sized) file, off the runtime's threads.
async fn read(path: &Path) -> Result<Vec<u8>> {
    tokio::fs::read(path).await.map_err(|e| Error::io(path, e))
}

#[async_trait]
impl<T: SegmentSink + SegmentSource> SegmentSink for Faulty<T> {
    async fn stage_file(&self, key: &str, path: &Path, len: Option<u64>) -> Result<StagedFile> {
        match self.take(Op::Stage).await {
            None => self.inner.stage_file(key, path, len).await,
            Some(Fault::Fail) => Err(injected_error(Op::Stage, key)),
            Some(Fault::LoseAnswer) => {
                self.inner.stage_file(key, path, len).await?;
                Err(injected_error(Op::Stage, key))
            }
            Some(fault) => {
                let mut sent = read(path).await?;
                if let Some(len) = len {
                    sent.truncate(usize::try_from(len).unwrap_or(usize::MAX));
                }
                self.inner.stage_bytes(key, Bytes::from(damage(fault, &sent))).await?;
                Ok(StagedFile {
                    key: key.to_string(),
                    digest: digest_of(&sent),
                })
            }
        }
    }

    async fn stage_bytes(&self, key: &str, bytes: Bytes) -> Result<StagedFile> {
        match self.take(Op::Stage).await {
            None => self.inner.stage_bytes(key, bytes).await,
            Some(Fault::Fail) => Err(injected_error(Op::Stage, key)),
            Some(Fault::LoseAnswer) => {
                self.inner.stage_bytes(key, bytes).await?;
                Err(injected_error(Op::Stage, key))
            }
            Some(fault) => {
                self.inner.stage_bytes(key, Bytes::from(damage(fault, &bytes))).await?;
                Ok(StagedFile {
                    key: key.to_string(),
                    digest: digest_of(&bytes),
                })
            }
        }
    }

    async fn acquire_lease(&self, partition: &PartitionKey, owner: &str) -> Result<Lease> {
        match self.take(Op::AcquireLease).await {
            Some(Fault::Fail) => Err(injected_error(Op::AcquireLease, &partition.lease_dir())),
            Some(Fault::LoseAnswer) => {
                self.inner.acquire_lease(partition, owner).await?;
                Err(injected_error(Op::AcquireLease, &partition.lease_dir()))
            }
            _ => self.inner.acquire_lease(partition, owner).await,
        }
    }

    async fn commit(&self, prefix: &KeyPrefix, lease: &Lease, manifest: &Manifest) -> Result<()> {
        let key = || format!("manifest at base {}", manifest.base_offset);
        match self.take(Op::Commit).await {
            Some(Fault::Fail) => Err(injected_error(Op::Commit, &key())),
            Some(Fault::LoseAnswer) => {
                self.inner.commit(prefix, lease, manifest).await?;
                Err(injected_error(Op::Commit, &key()))
            }
            _ => self.inner.commit(prefix, lease, manifest).await,
        }
    }
}

#[async_trait]
impl<T: SegmentSink + SegmentSource> SegmentSource for Faulty<T> {
    async fn list(&self, root: &str) -> Result<Listing> {
        match self.take(Op::List).await {
            Some(Fault::Fail | Fault::LoseAnswer) => Err(injected_error(Op::List, root)),
            _ => self.inner.list(root).await,
        }
    }

    async fn list_versions(&self, prefix: &KeyPrefix, root: &str) -> Result<Listing> {
        match self.take(Op::List).await {
            Some(Fault::Fail | Fault::LoseAnswer) => Err(injected_error(Op::List, root)),
            _ => self.inner.list_versions(prefix, root).await,
        }
    }

    async fn read_document(&self, key: &str, limit: u64) -> Result<Bytes> {
        match self.take(Op::ReadDocument).await {
            None => self.inner.read_document(key, limit).await,
            Some(Fault::Fail | Fault::LoseAnswer) => Err(injected_error(Op::ReadDocument, key)),
            Some(fault) => {
                let bytes = self.inner.read_document(key, limit).await?;
                Ok(Bytes::from(damage(fault, &bytes)))
            }
        }
    }

    async fn receive_file(&self, key: &str, dest: &Path, size: u64, sha256: &Sha256Digest) -> Result<Digest> {
        match self.take(Op::Fetch).await {
            None => self.inner.receive_file(key, dest, size, sha256).await,
            Some(Fault::Fail | Fault::LoseAnswer) => Err(injected_error(Op::Fetch, key)),
            Some(fault) => {
                self.inner.receive_file(key, dest, size, sha256).await?;
                let got = read(dest).await?;
                let delivered = damage(fault, &got);
                tokio::fs::write(dest, &delivered)
                    .await
                    .map_err(|e| Error::io(dest, e))?;
                // The receiver's digest of what it got.
                Ok(digest_of(&delivered))
            }
        }
    }
}
