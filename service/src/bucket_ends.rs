//! Per partition of a bucket link, the newest segment version its store holds (the manifests `apply --follow`
//! reads next): what the failover's drain compares with the installed ends, and the source side of a bucket
//! follower's lag in `/metrics`.
//!
//! Why from the bucket rather than the catalog: the catalog learns of a version when an applier's poll reads its
//! manifest, so a version uploaded after the last poll, or while the applier was down, is invisible to it; the
//! bucket's manifests are what the shipper made available.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use futures::StreamExt;
use segmirror_catalog::DIRECT_URL_PREFIX;
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::ManifestRead;
use segmirror_transport::{ObjectInfo, S3Options, SegmentSource, Store, StoreUrl};

/// The newest version of one partition in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Newest {
    /// The offset after its last record (the manifest's `next_offset`).
    pub end_offset: i64,
    /// When its manifest was written (the store's clock), in milliseconds since the epoch.
    pub uploaded_at_ms: i64,
}

impl Newest {
    /// How far `installed` (the installed end offset, `None`: nothing yet) is behind this version at `now_ms`: the
    /// offsets not installed, and the seconds since the version's upload while any are (0 when caught up).
    pub fn lag(&self, installed: Option<i64>, now_ms: i64) -> (i64, u64) {
        let offsets = (self.end_offset - installed.unwrap_or(0)).max(0);
        let seconds = if offsets == 0 {
            0
        } else {
            u64::try_from(now_ms.saturating_sub(self.uploaded_at_ms)).unwrap_or(0) / 1000
        };
        (offsets, seconds)
    }
}

/// Per (topic, partition) of `link`.
pub type BucketEnds = BTreeMap<(String, i32), Newest>;

/// The store a link's record names (`store_url`), under `prefix`; `None` for a direct link (no bucket).
pub fn open_link_store(
    s3: &S3Options,
    prefix: &str,
    link: &str,
    store_url: &str,
) -> anyhow::Result<Option<(Store, KeyPrefix)>> {
    if store_url.starts_with(DIRECT_URL_PREFIX) {
        return Ok(None);
    }
    let store = StoreUrl::parse(store_url)
        .and_then(|url| Store::open_existing(&url, s3))
        .with_context(|| format!("opening link {link}'s store {store_url}"))?;
    let prefix = KeyPrefix::new(prefix).with_context(|| format!("--prefix {prefix:?}"))?;
    Ok(Some((store, prefix)))
}

/// Per partition of `link`, the newest version of its newest lineage (the lineage whose manifest was written
/// last: a recreated topic's new lineage supersedes the old one). One listing (manifests only) and one manifest
/// read per partition. A manifest gone when read (superseded and cleaned up meanwhile) is skipped; an invalid one
/// is an error naming its key.
pub async fn newest_versions(store: &Store, prefix: &KeyPrefix, link: &str) -> anyhow::Result<BucketEnds> {
    Ok(newest_versions_since(store, prefix, link, &ReadManifests::new())
        .await?
        .0)
}

/// The newest manifest read of each partition, by the listed object it was read from.
pub type ReadManifests = HashMap<(String, i32), (ObjectInfo, Newest)>;

/// Manifests read at once: a store's round trips overlap (10,000 partitions read one after the other took 9 s).
const MANIFEST_READS_AT_ONCE: usize = 16;

/// [`newest_versions`], reading again only the manifests whose listed object (key, size, entity tag, time) is not
/// the one `known` was read from; also returns what it read, for the next call.
pub async fn newest_versions_since(
    store: &Store,
    prefix: &KeyPrefix,
    link: &str,
    known: &ReadManifests,
) -> anyhow::Result<(BucketEnds, ReadManifests)> {
    let index = store
        .index_versions(prefix, Some(link))
        .await
        .with_context(|| format!("listing link {link}'s versions in the store"))?;
    let mut newest = BTreeMap::new();
    let mut read = ReadManifests::new();
    let mut to_read = Vec::new();
    for (partition, objects) in index.link(link) {
        let Some(lineage) = objects.lineages.values().max_by_key(|l| l.last_modified_ms()) else {
            continue;
        };
        let Some((_, object)) = lineage.manifests.iter().next_back() else {
            continue;
        };
        let tp = (partition.topic().to_string(), partition.partition());
        match known.get(&tp) {
            Some((seen, version)) if seen == object => {
                newest.insert(tp.clone(), *version);
                read.insert(tp, (seen.clone(), *version));
            }
            _ => to_read.push((tp, object.clone())),
        }
    }
    let mut reads = futures::stream::iter(to_read)
        .map(|(tp, object)| async move {
            let manifest = store.read_manifest(prefix, &object.key).await;
            (tp, object, manifest)
        })
        .buffer_unordered(MANIFEST_READS_AT_ONCE);
    while let Some((tp, object, manifest)) = reads.next().await {
        match manifest? {
            ManifestRead::Valid(manifest) => {
                let version = Newest {
                    end_offset: manifest.next_offset,
                    uploaded_at_ms: object.last_modified_ms,
                };
                newest.insert(tp.clone(), version);
                read.insert(tp, (object, version));
            }
            ManifestRead::Gone => {}
            ManifestRead::Invalid(e) => return Err(anyhow::Error::new(e).context("the bucket's newest manifest")),
        }
    }
    Ok((newest, read))
}

/// How long a scrape reuses the bucket's newest versions without looking at the bucket (5 s): a listing and a
/// manifest read per partition per scrape would cost an S3 bucket more than the figures are worth; a lag a few
/// seconds old is still a lag.
pub const BUCKET_ENDS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(5);

/// The newest versions for `/metrics` of `apply --follow`, read in the background and never while a scrape waits.
///
/// Why: with 10,000 partitions the first read takes seconds (a manifest per partition), past any scrape timeout. A
/// scrape gets what the last read gave — nothing on the very first one, so the bucket lag is absent from it, not
/// wrong — and, when that is older than [`BUCKET_ENDS_MAX_AGE`], starts one read for later scrapes. A read first
/// looks at the link's change notice (`segmirror_transport::bucket::link_changes`): unchanged since the last
/// read, the versions are too, and nothing is listed. [`CachedEnds::warm`] starts the first read as the follower
/// starts.
#[derive(Debug, Clone)]
pub struct CachedEnds {
    inner: std::sync::Arc<Shared>,
    runtime: tokio::runtime::Handle,
    max_age: std::time::Duration,
}

#[derive(Debug)]
struct Shared {
    store: Store,
    prefix: KeyPrefix,
    last: std::sync::Mutex<LastRead>,
    /// A read is under way: no second one starts.
    reading: std::sync::atomic::AtomicBool,
}

/// What the last read of the bucket gave.
#[derive(Debug, Default)]
struct LastRead {
    /// When, of which link, and the newest versions.
    ends: Option<(std::time::Instant, String, BucketEnds)>,
    /// The manifests read, so that the next read reads only those that changed.
    manifests: ReadManifests,
    /// The link's change notice as it was before that read's listing.
    notice: Option<ObjectInfo>,
}

impl CachedEnds {
    pub fn new(store: Store, prefix: KeyPrefix, runtime: tokio::runtime::Handle) -> CachedEnds {
        CachedEnds {
            inner: std::sync::Arc::new(Shared {
                store,
                prefix,
                last: std::sync::Mutex::default(),
                reading: std::sync::atomic::AtomicBool::new(false),
            }),
            runtime,
            max_age: BUCKET_ENDS_MAX_AGE,
        }
    }

    /// Another age than [`BUCKET_ENDS_MAX_AGE`] (tests).
    #[cfg(test)]
    pub(crate) fn with_max_age(mut self, max_age: std::time::Duration) -> CachedEnds {
        self.max_age = max_age;
        self
    }

    /// `link`'s newest versions as last read (`None` before the first read ends, or when the bucket cannot be read:
    /// logged); starts a read when they are older than [`BUCKET_ENDS_MAX_AGE`]. Never waits for the bucket, so it may
    /// be called on the runtime.
    pub fn get(&self, link: &str) -> Option<BucketEnds> {
        let (ends, fresh) = {
            let last = self.inner.last.lock().unwrap_or_else(|e| e.into_inner());
            match &last.ends {
                Some((at, of, ends)) if of == link => (Some(ends.clone()), at.elapsed() < self.max_age),
                _ => (None, false),
            }
        };
        if !fresh {
            self.warm(link);
        }
        ends
    }

    /// Start a read of `link`'s newest versions unless one is under way.
    pub fn warm(&self, link: &str) {
        if self.inner.reading.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let (shared, link) = (self.inner.clone(), link.to_string());
        self.runtime.spawn(async move {
            shared.read(&link).await;
            shared.reading.store(false, std::sync::atomic::Ordering::Release);
        });
    }

    /// Wait until no read is under way (tests).
    #[cfg(test)]
    pub(crate) async fn settled(&self) {
        while self.inner.reading.load(std::sync::atomic::Ordering::Acquire) {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

impl Shared {
    async fn read(&self, link: &str) {
        let notice_key = segmirror_transport::bucket::link_changes::link_changes_key(&self.prefix, link);
        let notice = match SegmentSource::stat(&self.store, &notice_key).await {
            Ok(notice) => notice,
            Err(e) => {
                tracing::debug!(key = notice_key, error = %e, "metrics: the link's change notice cannot be read");
                None
            }
        };
        let known = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let same_link = last.ends.as_ref().is_some_and(|(_, of, _)| of == link);
            if same_link && notice.is_some() && last.notice == notice {
                if let Some((at, _, _)) = last.ends.as_mut() {
                    *at = std::time::Instant::now();
                }
                return;
            }
            if same_link {
                std::mem::take(&mut last.manifests)
            } else {
                ReadManifests::new()
            }
        };
        match newest_versions_since(&self.store, &self.prefix, link, &known).await {
            Ok((ends, manifests)) => {
                *self.last.lock().unwrap_or_else(|e| e.into_inner()) = LastRead {
                    ends: Some((std::time::Instant::now(), link.to_string(), ends)),
                    manifests,
                    notice,
                };
            }
            Err(e) => {
                // Figures that cannot be brought up to date are left out rather than shown stale; what was read
                // stays for the next read to start from.
                let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
                last.ends = None;
                last.manifests = known;
                tracing::warn!(link, error = %format!("{e:#}"), "metrics: the bucket's newest versions cannot be read");
            }
        }
    }
}

#[cfg(test)]
#[path = "bucket_ends_tests.rs"]
mod tests;
