//! The remote read replica: the endpoint over a bucket a shipper fills, without a local mirror.
//!
//! Why: analytics, development and reporting clusters that should never touch the source read the replicated
//! topics straight from the bucket (`segmirror serve --store URL`), with only a bounded local cache.
//!
//! How it follows the bucket: [`BucketReplica::refresh`] (the service calls it every interval, as
//! `apply --follow` polls) lists the link's manifests and leases only (never the data objects: a poll's cost does
//! not grow with the chunks a continuous shipper adds), reads each manifest it has not read yet (size-capped,
//! validated and checked against its key by the transport; a manifest is re-read only when its listing entry
//! changed), and builds each partition's view (`view`): the served segments, the high watermark (the newest
//! committed manifest's next offset: a manifest is the commit point), the log start and the leader epochs. Of a
//! partition's lineages (a recreated topic) the one whose newest manifest is newest is served, as the applier
//! chooses; when it changes, the cache of that partition is dropped.
//!
//! How it reads: a fetch, a lookup by time or the last stable offset needs a segment's bytes; the `cache` fetches
//! that segment version (its `.log`, or the new chunks of a grown active segment, and its companions), verifies
//! size, CRC-32C and SHA-256 against the manifest before any byte becomes visible, and the mirror's readers
//! (`crate::mirror::segments`) serve the cached partition directory. A fetch answers from one segment, as Kafka
//! does. A chunked version too large to cache whole (a growing active segment) is cached and read chunk by chunk
//! instead (`by_chunks`), so a segment may outgrow the cache. The newest segment of every partition is fetched at each refresh that moved it, so the last stable offset
//! is followed there (`segments::OpenTransactions`, starting from the segment's producer snapshot when the shipper
//! shipped one) and a consumer at the end reads from local disk.
//!
//! **A refresh with nothing to do lists nothing.** Writers rewrite the link's change notice after their commits
//! (`segmirror_contract::link_changes`), so a refresh first reads what the store says of the notice (a `stat`, or one
//! HEAD request). When it is what it was before the last listing, that refresh read and refused nothing it could not
//! keep (no failure), and the last listing is less than [`FULL_REFRESH_INTERVAL`] old, the bucket is as that refresh
//! left it and the refresh is passed over (`RefreshReport::passed_over`). With many partitions the interval grows
//! so that full listings take at most a fiftieth of the time ([`FULL_REFRESH_SHARE`]): at 10,000 partitions a
//! listing and its manifest checks cost over a CPU second. The notice's content is never trusted: a
//! forged or stale notice delays what is served by at most that interval, never changes it. A bucket without a
//! notice (an older shipper) is listed at every refresh, as before.
//!
//! A refresh reads new manifests [`MANIFEST_READ_CONCURRENCY`] at a time and fetches newest segments
//! [`TAIL_FETCH_CONCURRENCY`] partitions at a time, so a first look at a large remote bucket is not one round trip
//! after another; the link's metadata (topic configs for DescribeConfigs) is read again only when its manifest
//! changed.
//!
//! Untrusted bytes: a manifest or object that fails its checks is refused; reads of that segment answer
//! KAFKA_STORAGE_ERROR, and so does the whole partition when the refused object is one of its manifests or its
//! newest segment (serving the rest could show a shorter log than was served); the other partitions keep being
//! served, and the same version is not read again (a new manifest version is). A store that fails keeps a
//! partition's last ends until it answers again.
//!
//! A `read_committed` fetch takes the aborted transactions from the `.txnindex` files of its segment and the later
//! ones, as Kafka does, fetching those indexes alone (`aborted`).
//!
//! Limits: the last stable offset is followed from the newest segment's producer snapshot (the shipper ships the one
//! a broker wrote at the roll); a transaction open across a roll whose segment came without one is not seen by it.
//! The link record is not in the bucket: this replica is always [`ReplicaState::Replicating`].

mod aborted;
mod by_chunks;
mod cache;
mod view;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use segment_format::failover_source::TopicMeta;
use segmirror_transport::bucket::link_meta;
use segmirror_transport::manifest::{KeyPrefix, Manifest};
use segmirror_transport::{ManifestRead, ObjectInfo, SegmentSource};
use tokio::sync::watch;

use crate::mirror::segments;
use crate::replica::{Isolation, PartitionEnds, ReadError, Records, Replica, ReplicaState, TopicView};
use cache::{CacheError, Pinned, SegmentCache};
use view::PartitionView;

/// What a [`BucketReplica`] serves and where it caches.
#[derive(Debug, Clone)]
pub struct BucketConfig {
    /// The contract prefix of the store's keys.
    pub prefix: KeyPrefix,
    /// The link whose partitions are served.
    pub link: String,
    /// The local cache directory (created; segment files an earlier run left there are removed).
    pub cache_dir: PathBuf,
    /// The most bytes the cached segments (and downloads in flight) take.
    pub cache_size: u64,
}

/// Manifests read from the store at once (as the applier reads them): enough to hide a remote store's round trips.
pub const MANIFEST_READ_CONCURRENCY: usize = 16;
/// Partitions whose newest segment is fetched at once.
pub const TAIL_FETCH_CONCURRENCY: usize = 8;
/// Refused versions remembered (so that each is downloaded once); beyond, a refused version is fetched again.
const MAX_REFUSALS_KEPT: usize = 10_000;

/// What one [`BucketReplica::refresh`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// Nothing was listed: the link's change notice had not changed since the last listing (module docs).
    pub passed_over: bool,
    /// Partitions served.
    pub partitions: usize,
    /// Manifests read from the store this time (new or changed).
    pub manifests_read: usize,
    /// What could not be read or was refused, one line each (the partition keeps serving what it can).
    pub failures: Vec<String>,
}

/// How long a refresh may be passed over on an unchanged change notice before it lists again anyway: what a writer
/// that commits without rewriting the notice (or a forged notice) can delay.
pub const FULL_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Full listings take at most one fiftieth of the time: after a listing that took `d`, the next one is due after
/// `max(FULL_REFRESH_INTERVAL, 50 d)` while the change notice stays the same.
pub const FULL_REFRESH_SHARE: u32 = 50;

/// A manifest's listing entry: when it changes, the manifest is read again.
type Stamp = (u64, i64, Option<String>);

fn stamp(info: &ObjectInfo) -> Stamp {
    (info.size, info.last_modified_ms, info.e_tag.clone())
}

/// One served partition.
#[derive(Debug, Clone)]
struct Partition {
    key: (String, i32),
    /// `<topic>-<partition>`: the cache's partition directory.
    dir_name: String,
    topic_id: [u8; 16],
    view: Arc<PartitionView>,
    ends: PartitionEnds,
    /// Why the partition answers KAFKA_STORAGE_ERROR, if it does.
    failure: Option<String>,
}

impl Partition {
    /// A partition that answers KAFKA_STORAGE_ERROR for `reason`.
    fn failed(key: &(String, i32), topic_id: [u8; 16], reason: String) -> Partition {
        Partition {
            key: key.clone(),
            dir_name: format!("{}-{}", key.0, key.1),
            topic_id,
            view: Arc::new(PartitionView::default()),
            ends: PartitionEnds {
                log_start: 0,
                high_watermark: 0,
                last_stable: 0,
                leader_epoch: -1,
            },
            failure: Some(reason),
        }
    }
}

/// What reading one manifest gave.
enum Read {
    Valid(Arc<Manifest>),
    /// Invalid, or not where it claims to be: refused (not read again until its listing entry changes).
    Refused(String),
    /// Listed but gone when read.
    Gone,
    /// The store failed.
    Failed(String),
}

struct ManifestOutcome {
    read: Read,
    /// Read from the store this time (not known from before).
    was_read: bool,
}

/// A listed partition: its key, the lineage served (its topic id) and that lineage's manifests.
type Listed = ((String, i32), [u8; 16], Vec<ObjectInfo>);

/// What a refresh does with one partition.
enum Planned {
    Keep(Partition),
    Failed((String, i32), [u8; 16], String),
    Follow((String, i32), String, [u8; 16], PartitionView),
}

#[derive(Debug, Default)]
struct Served {
    topics: Vec<TopicView>,
    partitions: BTreeMap<(String, i32), Partition>,
}

/// The replica over a bucket (see the module docs).
pub struct BucketReplica {
    link: String,
    prefix: KeyPrefix,
    source: Arc<dyn SegmentSource>,
    /// The runtime the blocking reads fetch missing segments on.
    runtime: tokio::runtime::Handle,
    cache: SegmentCache,
    served: RwLock<Served>,
    /// Manifests read, by key, with the listing entry they were read at.
    manifests: Mutex<HashMap<String, (Stamp, Arc<Manifest>)>>,
    /// Versions refused (a manifest key or a segment version), with why: not fetched again.
    refused: Mutex<HashMap<String, String>>,
    /// The topics of the link's metadata, with the listing entry of the metadata manifest they were read at.
    configs: Mutex<Option<(Stamp, Vec<TopicMeta>)>>,
    txns: Arc<Mutex<HashMap<(String, i32), segments::OpenTransactions>>>,
    /// The same, for newest segments held by chunks.
    chunk_txns: Mutex<HashMap<(String, i32), by_chunks::ChunkFollower>>,
    changes: watch::Sender<u64>,
    /// The link's change notice as it was before the last listing that ended without a failure, when that listing
    /// started and how long the refresh took (see "A refresh with nothing to do" in the module docs).
    settled: Mutex<Option<(ObjectInfo, Instant, Duration)>>,
}

impl std::fmt::Debug for BucketReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketReplica")
            .field("link", &self.link)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl BucketReplica {
    /// A replica serving nothing until the first [`BucketReplica::refresh`]. Must be called within a tokio runtime
    /// (the reads, on blocking threads, fetch on it). Fails when the cache directory cannot be prepared.
    pub fn new(source: Arc<dyn SegmentSource>, config: &BucketConfig) -> io::Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        Ok(Self {
            link: config.link.clone(),
            prefix: config.prefix.clone(),
            source,
            runtime,
            cache: SegmentCache::open(&config.cache_dir, config.cache_size)?,
            served: RwLock::new(Served::default()),
            manifests: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            configs: Mutex::new(None),
            txns: Arc::new(Mutex::new(HashMap::new())),
            chunk_txns: Mutex::new(HashMap::new()),
            changes: watch::Sender::new(0),
            settled: Mutex::new(None),
        })
    }

    /// Bytes in the local cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.used()
    }

    /// Bytes downloaded from the store since the replica was created (segment files and chunks, not manifests).
    pub fn fetched_bytes(&self) -> u64 {
        self.cache.fetched()
    }

    /// Follow the bucket once (see the module docs); wakes waiting fetches when anything served changed. Only a
    /// store that cannot be listed is an error (everything served stays as it was); a partition that cannot be
    /// read keeps its last ends, and a refused one answers KAFKA_STORAGE_ERROR, both reported.
    pub async fn refresh(&self) -> Result<RefreshReport, segmirror_transport::Error> {
        let source: &dyn SegmentSource = &*self.source;
        let notice_key = segmirror_transport::bucket::link_changes::link_changes_key(&self.prefix, &self.link);
        let notice = match source.stat(&notice_key).await {
            Ok(notice) => notice,
            Err(e) => {
                tracing::debug!(key = notice_key, error = %e, "the link's change notice cannot be read");
                None
            }
        };
        {
            let settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some(now), Some((before, listed_at, took))) = (&notice, &*settled) {
                let full_due = FULL_REFRESH_INTERVAL.max(took.saturating_mul(FULL_REFRESH_SHARE));
                if now == before && listed_at.elapsed() < full_due {
                    let partitions = self.served.read().map(|s| s.partitions.len()).unwrap_or(0);
                    return Ok(RefreshReport {
                        passed_over: true,
                        partitions,
                        ..RefreshReport::default()
                    });
                }
            }
        }
        let listed_at = Instant::now();
        let index = source.index_versions(&self.prefix, Some(&self.link)).await?;
        let mut report = RefreshReport::default();
        let configs = self.link_configs(&index.meta, &mut report).await;
        // Each partition's lineage (the one whose newest manifest is newest, as the applier chooses).
        let listed: Vec<Listed> = index
            .link(&self.link)
            .filter_map(|(pk, objects)| {
                let (topic_id, lineage) = objects
                    .lineages
                    .iter()
                    .filter(|(_, l)| !l.manifests.is_empty())
                    .max_by_key(|(id, l)| (l.last_modified_ms(), **id))?;
                let key = (pk.topic().to_string(), pk.partition());
                Some((key, topic_id.0, lineage.manifests.values().cloned().collect()))
            })
            .collect();
        // Every manifest not read yet, a few at a time.
        let wanted: Vec<ObjectInfo> = listed.iter().flat_map(|(_, _, infos)| infos.iter().cloned()).collect();
        let reads: HashMap<String, ManifestOutcome> = futures::stream::iter(wanted)
            .map(|info: ObjectInfo| async move {
                let outcome = self.manifest(&info).await;
                (info.key, outcome)
            })
            .buffer_unordered(MANIFEST_READ_CONCURRENCY)
            .collect()
            .await;
        report.manifests_read = reads.values().filter(|r| r.was_read).count();
        let previous: BTreeMap<(String, i32), Partition> =
            self.served.read().map(|s| s.partitions.clone()).unwrap_or_default();
        let mut planned = Vec::new();
        for (key, topic_id, infos) in &listed {
            let old = previous.get(key);
            let mut manifests = BTreeMap::new();
            let mut trouble = None;
            for info in infos {
                match reads.get(&info.key).map(|r| &r.read) {
                    Some(Read::Valid(m)) => {
                        manifests.insert(m.base_offset, m.clone());
                    }
                    Some(Read::Gone) | None => {}
                    Some(Read::Refused(reason)) => trouble = Some((true, reason.clone())),
                    Some(Read::Failed(reason)) => trouble = Some((false, reason.clone())),
                }
            }
            if let Some((refused, reason)) = trouble {
                // A manifest that cannot be read or is refused: serving the others alone could show a shorter
                // log than was served; the partition keeps what it served (a store failure) or answers
                // KAFKA_STORAGE_ERROR (a refusal, or nothing served yet) until the manifest is readable.
                report.failures.push(reason.clone());
                match old {
                    Some(old) if !refused => planned.push(Planned::Keep(old.clone())),
                    _ => planned.push(Planned::Failed(key.clone(), *topic_id, reason)),
                }
                continue;
            }
            let Some(view) = PartitionView::of(&manifests) else {
                continue;
            };
            let dir_name = format!("{}-{}", key.0, key.1);
            if old.is_some_and(|o| o.topic_id != *topic_id) {
                // A new lineage: nothing cached or followed of the old one is served again.
                self.cache.retain(&dir_name, &|_| false);
                self.txns.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
                self.chunk_txns.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
            } else {
                self.cache.retain(&dir_name, &|base| view.segments.contains_key(&base));
            }
            planned.push(Planned::Follow(key.clone(), dir_name, *topic_id, view));
        }
        let previous = &previous;
        let followed: Vec<(Partition, Vec<String>)> = futures::stream::iter(planned)
            .map(|plan: Planned| async move {
                match plan {
                    Planned::Keep(p) => (p, Vec::new()),
                    Planned::Failed(key, topic_id, reason) => (Partition::failed(&key, topic_id, reason), Vec::new()),
                    Planned::Follow(key, dir_name, topic_id, view) => {
                        let old = previous.get(&key);
                        self.follow_tail(&key, dir_name, topic_id, view, old).await
                    }
                }
            })
            .buffer_unordered(TAIL_FETCH_CONCURRENCY)
            .collect()
            .await;
        let mut partitions = BTreeMap::new();
        for (p, failures) in followed {
            report.failures.extend(failures);
            partitions.insert(p.key.clone(), p);
        }
        report.failures.sort();
        let listed_keys: HashSet<&str> = listed
            .iter()
            .flat_map(|(_, _, infos)| infos.iter().map(|i| i.key.as_str()))
            .collect();
        self.manifests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| listed_keys.contains(k.as_str()));
        let topics = topic_views(&partitions, &configs);
        report.partitions = partitions.len();
        let mut served = self.served.write().unwrap_or_else(|e| e.into_inner());
        let changed = served.topics != topics
            || served.partitions.len() != partitions.len()
            || served
                .partitions
                .iter()
                .zip(partitions.iter())
                .any(|((ka, a), (kb, b))| ka != kb || a.ends != b.ends || a.failure != b.failure);
        served.topics = topics;
        served.partitions = partitions;
        drop(served);
        if changed {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
        *self.settled.lock().unwrap_or_else(|e| e.into_inner()) = notice
            .filter(|_| report.failures.is_empty())
            .map(|n| (n, listed_at, listed_at.elapsed()));
        Ok(report)
    }

    /// The topic configs the link's metadata carries, read again only when its manifest's listing entry changed.
    async fn link_configs(&self, meta: &[ObjectInfo], report: &mut RefreshReport) -> Vec<TopicMeta> {
        let listed = meta.iter().find(|o| {
            matches!(
                link_meta::parse_meta_key(&self.prefix, &o.key),
                Some(link_meta::MetaKey::Manifest { link }) if link == self.link
            )
        });
        let Some(listed) = listed else {
            return Vec::new();
        };
        let now = stamp(listed);
        if let Some((seen, topics)) = &*self.configs.lock().unwrap_or_else(|e| e.into_inner()) {
            if *seen == now {
                return topics.clone();
            }
        }
        match link_meta::read_latest(&*self.source, &self.prefix, &self.link).await {
            Ok(meta) => {
                let topics = meta.map(|m| m.topics.topics).unwrap_or_default();
                *self.configs.lock().unwrap_or_else(|e| e.into_inner()) = Some((now, topics.clone()));
                topics
            }
            Err(e) => {
                report.failures.push(format!("link metadata of {}: {e}", self.link));
                self.configs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .map(|(_, t)| t.clone())
                    .unwrap_or_default()
            }
        }
    }

    /// The manifest listed as `info`: the one read before if its listing entry is the same, else read now.
    async fn manifest(&self, info: &ObjectInfo) -> ManifestOutcome {
        let stamp = stamp(info);
        let known = |read| ManifestOutcome { read, was_read: false };
        if let Some((s, m)) = self.manifests.lock().unwrap_or_else(|e| e.into_inner()).get(&info.key) {
            if *s == stamp {
                return known(Read::Valid(m.clone()));
            }
        }
        let refusal_key = format!("{}@{stamp:?}", info.key);
        if let Some(reason) = self.refused.lock().unwrap_or_else(|e| e.into_inner()).get(&refusal_key) {
            return known(Read::Refused(reason.clone()));
        }
        let read = match self.source.read_manifest(&self.prefix, &info.key).await {
            Ok(ManifestRead::Valid(m)) => {
                let m: Arc<Manifest> = Arc::from(m);
                self.manifests
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(info.key.clone(), (stamp, m.clone()));
                Read::Valid(m)
            }
            Ok(ManifestRead::Invalid(e)) => {
                let reason = format!("manifest refused: {e}");
                self.remember_refusal(refusal_key, &reason);
                Read::Refused(reason)
            }
            Ok(ManifestRead::Gone) => Read::Gone,
            Err(e) => Read::Failed(format!("reading manifest {}: {e}", info.key)),
        };
        ManifestOutcome { read, was_read: true }
    }

    /// Remember a refused version (bounded: a bucket writing hostile versions forever is cut off here).
    fn remember_refusal(&self, version: String, reason: &str) {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if refused.len() < MAX_REFUSALS_KEPT {
            refused.insert(version, reason.to_string());
        }
    }

    /// Cache the partition's newest segment and follow its open transactions: the partition's ends, and what
    /// failed.
    async fn follow_tail(
        &self,
        key: &(String, i32),
        dir_name: String,
        topic_id: [u8; 16],
        view: PartitionView,
        old: Option<&Partition>,
    ) -> (Partition, Vec<String>) {
        let mut ends = PartitionEnds {
            log_start: view.log_start,
            high_watermark: view.high_watermark,
            last_stable: view.high_watermark,
            leader_epoch: view.latest_epoch(),
        };
        let mut partition = Partition {
            key: key.clone(),
            dir_name: dir_name.clone(),
            topic_id,
            view: Arc::new(view),
            ends,
            failure: None,
        };
        let Some(tail) = partition.view.tail().cloned() else {
            return (partition, Vec::new());
        };
        if let Some(old) = old.filter(|o| o.failure.is_none() && o.ends.high_watermark == ends.high_watermark) {
            if old.view.tail().is_some_and(|t| same_version(t, &tail)) {
                // Nothing new at the end: the last stable offset stands, and the newest segment need not be
                // fetched again if it was evicted.
                partition.ends.last_stable = old.ends.last_stable.clamp(ends.log_start, ends.high_watermark);
                return (partition, Vec::new());
            }
        }
        if self.cache.by_chunks(&tail) {
            // Too large to hold whole: followed chunk by chunk (`by_chunks`).
            self.txns.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
            self.cache.set_tail(&dir_name, tail.base_offset);
            return match self.follow_chunks(key, &dir_name, &tail, ends.high_watermark).await {
                Ok(lso) => {
                    partition.ends.last_stable = lso.clamp(ends.log_start, ends.high_watermark);
                    (partition, Vec::new())
                }
                Err(reason) => {
                    partition.failure = Some(reason.clone());
                    (partition, vec![reason])
                }
            };
        }
        self.chunk_txns.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        let pinned = match self.fetch(&dir_name, &tail).await {
            Ok(p) => p,
            Err(CacheError::Refused(reason)) => {
                partition.failure = Some(reason.clone());
                return (partition, vec![reason]);
            }
            Err(CacheError::Failed(reason)) => {
                return match old {
                    // Serve the last ends read until the segment can be fetched.
                    Some(old) if old.failure.is_none() => (old.clone(), vec![reason]),
                    _ => {
                        partition.failure = Some(reason.clone());
                        (partition, vec![reason])
                    }
                };
            }
        };
        self.cache.set_tail(&dir_name, tail.base_offset);
        let dir = self.cache.partition_dir(&dir_name);
        // Each partition's follower is taken out while it walks, so partitions walk in parallel.
        let mut follower = self
            .txns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
            .unwrap_or_default();
        let end = ends.high_watermark;
        let walked = tokio::task::spawn_blocking(move || {
            let result = follower.advance(&dir, end);
            drop(pinned);
            (follower, result)
        })
        .await;
        let lso = match walked {
            Ok((follower, result)) => {
                self.txns
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), follower);
                result.map_err(|e| format!("{dir_name}: following open transactions: {e}"))
            }
            Err(e) => Err(format!("{dir_name}: following open transactions: {e}")),
        };
        let mut failures = Vec::new();
        match lso {
            Ok(lso) => ends.last_stable = lso.clamp(ends.log_start, ends.high_watermark),
            Err(reason) => {
                failures.push(reason.clone());
                partition.failure = Some(reason);
            }
        }
        partition.ends = ends;
        (partition, failures)
    }

    /// `m`'s segment version in the cache, fetched unless cached; a refused version is not fetched again.
    async fn fetch(&self, dir_name: &str, m: &Manifest) -> Result<Pinned, CacheError> {
        let version = by_chunks::version_key(dir_name, m);
        if let Some(reason) = self.refused.lock().unwrap_or_else(|e| e.into_inner()).get(&version) {
            return Err(CacheError::Refused(reason.clone()));
        }
        let result = self.cache.ensure(&*self.source, dir_name, m).await;
        if let Err(CacheError::Refused(reason)) = &result {
            self.remember_refusal(version, reason);
        }
        result
    }

    /// Blocking: [`BucketReplica::fetch`] from a thread off the runtime.
    fn fetch_blocking(&self, dir_name: &str, m: &Manifest) -> Result<Pinned, ReadError> {
        self.runtime
            .block_on(self.fetch(dir_name, m))
            .map_err(|e| ReadError::Storage(e.to_string()))
    }

    fn partition(&self, topic: &str, partition: i32) -> Result<Partition, ReadError> {
        let served = self.served.read().unwrap_or_else(|e| e.into_inner());
        let p = served
            .partitions
            .get(&(topic.to_string(), partition))
            .cloned()
            .ok_or(ReadError::UnknownPartition)?;
        match &p.failure {
            Some(reason) => Err(ReadError::Storage(reason.clone())),
            None => Ok(p),
        }
    }
}

/// The topics of the served partitions, with the configs the link's metadata carries.
fn topic_views(partitions: &BTreeMap<(String, i32), Partition>, configs: &[TopicMeta]) -> Vec<TopicView> {
    let mut topics: Vec<TopicView> = Vec::new();
    for ((topic, number), p) in partitions {
        match topics.last_mut().filter(|t| &t.name == topic) {
            Some(t) => t.partitions.push(*number),
            None => topics.push(TopicView {
                name: topic.clone(),
                id: p.topic_id,
                partitions: vec![*number],
                configs: configs
                    .iter()
                    .find(|t| &t.name == topic)
                    .map(|t| t.configs.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default(),
            }),
        }
    }
    topics
}

/// Whether two manifests describe the same version of a segment.
fn same_version(a: &Manifest, b: &Manifest) -> bool {
    let log = |m: &Manifest| m.file(segment_format::dir::SegmentFileKind::Log).map(|l| l.sha256);
    a.base_offset == b.base_offset && a.next_offset == b.next_offset && log(a) == log(b)
}

fn storage(dir: &std::path::Path, e: io::Error) -> ReadError {
    ReadError::Storage(format!("{}: {e}", dir.display()))
}

impl Replica for BucketReplica {
    fn link(&self) -> &str {
        &self.link
    }

    fn state(&self) -> ReplicaState {
        ReplicaState::Replicating
    }

    fn topics(&self) -> Vec<TopicView> {
        self.served.read().map(|s| s.topics.clone()).unwrap_or_default()
    }

    fn ends(&self, topic: &str, partition: i32) -> Result<PartitionEnds, ReadError> {
        self.partition(topic, partition).map(|p| p.ends)
    }

    fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Records, ReadError> {
        let p = self.partition(topic, partition)?;
        let ends = p.ends;
        let upper = ends.read_bound(offset, isolation)?;
        let mut records = Records {
            ends,
            bytes: Bytes::new(),
            aborted: Vec::new(),
        };
        if offset >= upper {
            return Ok(records);
        }
        let Some(mut segment) = p.view.holding(offset) else {
            return Err(ReadError::OutOfRange { offset, ends });
        };
        let dir = self.cache.partition_dir(&p.dir_name);
        let mut buf = Vec::new();
        // One segment per answer, as Kafka reads; a segment with nothing at or after the offset (compaction removed
        // its last records) hands over to the next one, so the client moves past the gap instead of fetching the
        // same offset forever.
        let (from, fetched, _held) = loop {
            let bound = upper.min(segment.next_offset);
            let from = offset.max(segment.base_offset);
            let (fetched, held) = if self.cache.by_chunks(segment) {
                self.read_by_chunks(&p.dir_name, segment, from, bound, max_bytes, &mut buf)?
            } else {
                let pinned = self.fetch_blocking(&p.dir_name, segment)?;
                let fetched =
                    segments::read_batches(&dir, from, bound, max_bytes, &mut buf).map_err(|e| storage(&dir, e))?;
                (fetched, by_chunks::Held::Whole { _pin: pinned })
            };
            if fetched.batches > 0 || bound >= upper {
                break (from, fetched, held);
            }
            match p.view.segments.range(segment.next_offset..).next() {
                Some((_, next)) => segment = next,
                None => break (from, fetched, held),
            }
        };
        if isolation == Isolation::ReadCommitted {
            if let Some(upto) = fetched.next_offset {
                records.aborted = self.aborted(&p, segment, from, upto, ends.high_watermark)?;
            }
        }
        records.bytes = Bytes::from(buf);
        Ok(records)
    }

    fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, ReadError> {
        let p = self.partition(topic, partition)?;
        let ends = p.ends;
        let Some(segment) = p.view.first_at_or_after(timestamp, ends.log_start) else {
            return Ok(None);
        };
        let start = ends.log_start.max(segment.base_offset);
        let bound = ends.high_watermark.min(segment.next_offset);
        if self.cache.by_chunks(segment) {
            let found = self.offset_for_timestamp_by_chunks(&p.dir_name, segment, timestamp, start, bound)?;
            return Ok(found.map(|f| (f.offset, f.timestamp)));
        }
        let _pinned = self.fetch_blocking(&p.dir_name, segment)?;
        let dir = self.cache.partition_dir(&p.dir_name);
        let found = segments::offset_for_timestamp(&dir, timestamp, start, bound).map_err(|e| storage(&dir, e))?;
        Ok(found.map(|f| (f.offset, f.timestamp)))
    }

    fn max_timestamp(&self, topic: &str, partition: i32) -> Result<Option<(i64, i64)>, ReadError> {
        let p = self.partition(topic, partition)?;
        let Some(segment) = p.view.max_timestamp_segment() else {
            return Ok(None);
        };
        let bound = p.ends.high_watermark.min(segment.next_offset);
        if self.cache.by_chunks(segment) {
            let found = self.max_timestamp_by_chunks(&p.dir_name, segment, bound)?;
            return Ok(found.map(|f| (f.offset, f.timestamp)));
        }
        let _pinned = self.fetch_blocking(&p.dir_name, segment)?;
        let dir = self.cache.partition_dir(&p.dir_name);
        let found = segments::max_timestamp(&dir, bound).map_err(|e| storage(&dir, e))?;
        Ok(found.map(|f| (f.offset, f.timestamp)))
    }

    fn epoch_end(&self, topic: &str, partition: i32, epoch: i32) -> Result<(i32, i64), ReadError> {
        Ok(self.partition(topic, partition)?.view.epoch_end(epoch))
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
