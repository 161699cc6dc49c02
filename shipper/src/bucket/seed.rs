//! Batch mode: ship what a set of Kafka log dirs holds, once, and stop —
//! seeding a new mirror or catching one up (`segmirror seed`).
//!
//! A seed scans the source log dirs ([`crate::source::discover`](mod@crate::source::discover): topic
//! pattern, internal topics, topic ids), then ships each selected partition
//! ([`partition`]): every sealed segment as the broker wrote it, after
//! verifying it ([`crate::source::bound`]: a corrupt segment is refused and
//! reported, never propagated), and the active segment up to its last complete
//! batch with its indexes rebuilt for exactly that prefix. Reading the source
//! is [`crate::source`]'s; this module is the batch orchestration around it. Per segment version the data
//! objects go up first and the manifest last, so a manifest in the bucket always
//! names complete data.
//!
//! ## Resumable and idempotent
//! What the bucket already holds is read first and compared with the source
//! ([`plan`]): a rerun ships only what is new — segments rolled since, or the
//! active segment if it grew or was sealed — and a rerun with nothing new
//! writes nothing (not even a lease). An interrupted run leaves at most data
//! objects without a manifest, which the next run overwrites.
//!
//! ## Concurrency
//! Partitions are shipped [`DEFAULT_PARALLEL_PARTITIONS`] at a time; the
//! segments of one partition strictly in offset order, so the bucket never has
//! a later segment without the earlier ones. File reads, verification and
//! index rebuilding run on blocking threads; uploads on tokio (the store
//! streams and hashes files on its own blocking threads).
//!
//! ## Fencing
//! Each partition is shipped under a lease (`lease`); a shipper that finds a
//! newer lease before a manifest commit stops that partition
//! ([`FailureKind::Fenced`]) and commits nothing more there.

use std::path::PathBuf;

use futures::StreamExt;
use segment_format::index::DEFAULT_INDEX_INTERVAL_BYTES;
use segment_format::verify::VerifyOptions;
use segmirror_transport::manifest::{validate_link_name, KeyPrefix, Lease, PartitionKey, MAX_ID_LENGTH};

use crate::error::{Error, Result};
use crate::source::incremental::ActiveTail;
use crate::source::{self, PrepareOptions, Unusable, UnusablePartition};
use segmirror_transport::Transport;

mod chunks;
pub mod committed;
mod memory;
#[cfg(test)]
mod memory_tests;
mod partition;
mod plan;
mod report;
#[cfg(test)]
mod round_tests;
#[cfg(test)]
mod tests;

pub use memory::{SeedMemory, MAX_MEMORY_BYTES, MEMORY_FORMAT, RACY_MARGIN};
pub use partition::PARTITION_ATTEMPTS;
pub use report::{FailureKind, PartitionReport, PartitionStatus, SeedReport, SkipReason, SkippedPartition};

pub use crate::source::{TopicFilter, ALL_TOPICS, CHECK_ATTEMPTS, SETTLE_DELAY};

/// Partitions shipped at once to an object store. Each has at most one file
/// upload in flight, and a large file is itself uploaded
/// [`DEFAULT_UPLOAD_CONCURRENCY`] parts at a time (~80 MiB buffered), so four
/// partitions bound memory to a few hundred MiB while keeping a high-latency
/// link busy; more mostly adds contention for the disk the segments are read
/// from.
///
/// [`DEFAULT_UPLOAD_CONCURRENCY`]: segmirror_transport::bucket::store::DEFAULT_UPLOAD_CONCURRENCY
pub const DEFAULT_PARALLEL_PARTITIONS: usize = 4;

/// Partitions shipped at once to a local folder. Nothing is buffered there (a
/// file is copied straight into the folder), so a partition holds a few MiB
/// beyond the windows of the segment being verified; eight rather than four
/// let one partition's waits (a cold read, a directory created, a rename)
/// overlap others' hashing: 200 small partitions shipped 8 % faster on a 2-core
/// machine, and sixteen were no faster (docs/BENCHMARKS.md).
pub const DEFAULT_PARALLEL_PARTITIONS_LOCAL: usize = 8;

/// What to seed and how.
#[derive(Debug, Clone)]
pub struct SeedConfig {
    /// Source log dirs (entries of the broker's `log.dirs`).
    pub log_dirs: Vec<PathBuf>,
    /// Prefix of every key in the store.
    pub prefix: KeyPrefix,
    /// The mirror link's name (first key component under the prefix).
    pub link: String,
    /// Which topics to ship (internal topics never are).
    pub topics: TopicFilter,
    /// Who is shipping: recorded in leases and manifests.
    pub shipper_id: String,
    /// How deeply source segments are verified before upload.
    pub verify: VerifyOptions,
    /// Partitions shipped at once (at least 1).
    pub parallel_partitions: usize,
    /// `index.interval.bytes` for rebuilt indexes of the active segment. The
    /// topic's setting is not on disk; any interval gives a correct sparse index,
    /// and Kafka's default is what a broker recovering the segment would use
    /// unless the topic overrides it.
    pub index_interval_bytes: u64,
    /// Where rebuilt index files are staged (default: the system temp dir).
    pub staging_dir: Option<PathBuf>,
    /// The seed's memory of the active segments it scanned ([`SeedMemory`]), kept between runs in this local file
    /// so that a rerun with nothing new reads no segment (`None`: every run scans every active segment).
    pub memory_file: Option<PathBuf>,
    /// Upload committed records only (`--upto high-watermark`, [`committed`]): `None` ships every complete batch.
    pub committed_only: Option<committed::CommittedOnly>,
}

impl SeedConfig {
    /// A configuration with the defaults: every topic, no prefix, shallow
    /// verification, [`default_shipper_id`].
    pub fn new(log_dirs: Vec<PathBuf>, link: &str) -> Result<SeedConfig> {
        let config = SeedConfig {
            log_dirs,
            prefix: KeyPrefix::root(),
            link: link.to_string(),
            topics: TopicFilter::all(),
            shipper_id: default_shipper_id(),
            verify: VerifyOptions::default(),
            parallel_partitions: DEFAULT_PARALLEL_PARTITIONS,
            index_interval_bytes: DEFAULT_INDEX_INTERVAL_BYTES,
            staging_dir: None,
            memory_file: None,
            committed_only: None,
        };
        config.validate()?;
        Ok(config)
    }

    /// Check what the types cannot: a legal link name and shipper id, some log dir.
    pub fn validate(&self) -> Result<()> {
        let bad = |setting, reason: String| Err(Error::InvalidSetting { setting, reason });
        if let Err(reason) = validate_link_name(&self.link) {
            return bad("link", reason);
        }
        if self.shipper_id.is_empty()
            || self.shipper_id.len() > MAX_ID_LENGTH
            || !self.shipper_id.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return bad(
                "shipper id",
                format!(
                    "'{}' must be 1 to {MAX_ID_LENGTH} printable ASCII characters",
                    self.shipper_id
                ),
            );
        }
        if self.log_dirs.is_empty() {
            return bad("log dirs", "at least one log dir is needed".into());
        }
        if self.index_interval_bytes == 0 {
            return bad("index interval bytes", "must be positive".into());
        }
        Ok(())
    }
}

/// `segmirror-seed@<host>:<pid>`, reduced to the characters a lease owner may hold.
pub fn default_shipper_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(MAX_ID_LENGTH - 40)
        .collect();
    format!("segmirror-seed@{host}:{}", std::process::id())
}

/// Progress of a seed (the workspace's one observer): [`Progress::planned`] once after discovery with every
/// selected segment and its `.log` bytes, then [`Progress::advance`] and [`Progress::segment_done`] per segment
/// shipped or found already shipped.
pub use segment_format::progress::{NoProgress, Progress};

/// Ship everything `config` selects to `store` (see the module doc). Fails only
/// on an invalid configuration; everything that happens to partitions is in
/// the report.
pub async fn seed(store: &dyn Transport, config: &SeedConfig, progress: &dyn Progress) -> Result<SeedReport> {
    seed_round(store, config, progress, None).await
}

/// What a continuous shipper (`crate::bucket::follow`) keeps between its rounds, per partition:
///
/// - **its lease**: taking a new lease every round would add a lease object per partition per round to the bucket
///   and, worse, let a second shipper's lease be overtaken by this one's next round instead of fencing it. A fenced
///   partition's lease is forgotten and never taken again by the same process.
/// - **its active segment's shipped prefix** ([`ActiveTail`]): so a round reads, checks, hashes and indexes only the
///   bytes appended since the last one (`source::incremental`), instead of the whole segment. Established from the
///   version in the bucket once (at the first round, and after anything the state cannot continue), advanced only
///   once a round's manifest is committed.
#[derive(Debug, Default)]
pub struct HeldLeases {
    leases: std::sync::Mutex<std::collections::HashMap<PartitionKey, Lease>>,
    fenced: std::sync::Mutex<std::collections::HashSet<PartitionKey>>,
    tails: std::sync::Mutex<std::collections::HashMap<PathBuf, ActiveTail>>,
    /// Bytes the incremental rounds read from active segments (a test hook and a log figure).
    tail_bytes_read: std::sync::atomic::AtomicU64,
    /// Active segments read from byte 0 (a full preparation, or establishing a state).
    full_reads: std::sync::atomic::AtomicU64,
    /// Sealed manifests read or committed, by key: a round decides on every segment of a partition, and reading
    /// each sealed one's manifest again every round would be one GET per segment per round. A sealed version at a
    /// key changes only when the segment is shipped whole again (compaction) — by this shipper, which updates the
    /// entry at its commit, or by one that took a newer lease, which fences this one at its next commit.
    sealed: std::sync::Mutex<std::collections::HashMap<String, segmirror_transport::manifest::Manifest>>,
    /// Set by the first round's end.
    rounds_ended: std::sync::atomic::AtomicBool,
}

impl HeldLeases {
    /// `true` the first time only: the end of the first round kept with these leases.
    fn first_round(&self) -> bool {
        !self.rounds_ended.swap(true, std::sync::atomic::Ordering::Relaxed)
    }

    fn get(&self, key: &PartitionKey) -> Option<Lease> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }

    fn keep(&self, key: &PartitionKey, lease: &Lease) {
        self.leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), lease.clone());
    }

    fn forget(&self, key: &PartitionKey) {
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
        self.fenced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
    }

    fn is_fenced(&self, key: &PartitionKey) -> bool {
        self.fenced.lock().unwrap_or_else(|p| p.into_inner()).contains(key)
    }

    /// Partitions this process was fenced from.
    pub fn fenced(&self) -> Vec<PartitionKey> {
        let mut keys: Vec<PartitionKey> = self
            .fenced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// The epoch held for `key`, if any.
    pub fn epoch(&self, key: &PartitionKey) -> Option<u64> {
        self.get(key).map(|l| l.epoch)
    }

    /// The shipped prefix of the active segment of the partition in `dir`, if one is kept.
    pub(crate) fn tail(&self, dir: &std::path::Path) -> Option<ActiveTail> {
        self.tails.lock().unwrap_or_else(|p| p.into_inner()).get(dir).cloned()
    }

    pub(crate) fn keep_tail(&self, dir: &std::path::Path, tail: ActiveTail) {
        self.tails
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dir.to_path_buf(), tail);
    }

    pub(crate) fn drop_tail(&self, dir: &std::path::Path) {
        self.tails.lock().unwrap_or_else(|p| p.into_inner()).remove(dir);
    }

    pub(crate) fn sealed_manifest(&self, key: &str) -> Option<segmirror_transport::manifest::Manifest> {
        self.sealed.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }

    /// Remember the manifest at `key` if it is sealed, forget it otherwise.
    pub(crate) fn note_manifest(&self, key: &str, manifest: Option<&segmirror_transport::manifest::Manifest>) {
        let mut sealed = self.sealed.lock().unwrap_or_else(|p| p.into_inner());
        match manifest.filter(|m| m.sealed) {
            Some(m) => {
                sealed.insert(key.to_string(), m.clone());
            }
            None => {
                sealed.remove(key);
            }
        }
    }

    pub(crate) fn count_tail_read(&self, bytes: u64) {
        self.tail_bytes_read
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn count_full_read(&self) {
        self.full_reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes the incremental rounds read from active segments so far.
    pub fn tail_bytes_read(&self) -> u64 {
        self.tail_bytes_read.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times an active segment was read from byte 0 so far (full preparations and established states).
    pub fn full_reads(&self) -> u64 {
        self.full_reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One round of a seed: as [`seed`], keeping leases in `held` across rounds when given.
pub async fn seed_round(
    store: &dyn Transport,
    config: &SeedConfig,
    progress: &dyn Progress,
    held: Option<&HeldLeases>,
) -> Result<SeedReport> {
    seed_round_of(store, config, progress, held, None).await
}

/// [`seed_round`] of only the partitions whose directories `only` names (`None`: all): a continuous shipper's
/// round after the watcher named what changed, so that a round costs the partitions that changed and not all of
/// them. Discovery still lists every log dir (partitions that appeared are found by it).
pub async fn seed_round_of(
    store: &dyn Transport,
    config: &SeedConfig,
    progress: &dyn Progress,
    held: Option<&HeldLeases>,
    only: Option<&std::collections::HashSet<PathBuf>>,
) -> Result<SeedReport> {
    config.validate()?;
    let (log_dirs, topics) = (config.log_dirs.clone(), config.topics.clone());
    let mut discovery = tokio::task::spawn_blocking(move || source::discover(&log_dirs, &topics))
        .await
        .map_err(|e| Error::Task {
            what: "discover partitions".into(),
            message: e.to_string(),
        })?;
    if let Some(only) = only {
        discovery.sources.retain(|s| only.contains(&s.dir));
    }
    progress.planned(
        discovery.sources.iter().map(|s| s.segments).sum(),
        discovery.sources.iter().map(|s| s.log_bytes).sum(),
    );
    for e in &discovery.log_dir_errors {
        tracing::error!(error = %e, "log dir skipped");
    }
    let prepare = PrepareOptions {
        verify: config.verify.clone(),
        index_interval_bytes: config.index_interval_bytes,
        staging_dir: config.staging_dir.clone(),
    };
    let memory = match config.memory_file.clone() {
        Some(file) => tokio::task::spawn_blocking(move || SeedMemory::load(&file))
            .await
            .map_err(|e| Error::Task {
                what: "read the seed memory".into(),
                message: e.to_string(),
            })?,
        None => SeedMemory::in_memory(),
    };
    let memory = std::sync::Arc::new(memory);
    let context = partition::Context {
        memory: &memory,
        store,
        prefix: &config.prefix,
        link: &config.link,
        shipper_id: &config.shipper_id,
        prepare: &prepare,
        progress,
        held,
        committed: config.committed_only.as_ref(),
    };
    let mut partitions: Vec<PartitionReport> = futures::stream::iter(discovery.sources)
        .map(|source| partition::ship_partition(&context, source))
        .buffer_unordered(config.parallel_partitions.max(1))
        .collect()
        .await;
    // A memory that cannot be written costs the next run a scan, nothing else: a warning.
    let saved = tokio::task::spawn_blocking(move || memory.save()).await;
    if let (Some(file), Err(e)) = (
        &config.memory_file,
        saved
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string())),
    ) {
        tracing::warn!(file = %file.display(), error = e, "seed memory not written: the next run scans the active segments again");
    }
    partitions.extend(discovery.failed.into_iter().map(unusable_report));
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let report = SeedReport {
        partitions,
        skipped: discovery.skipped,
        not_selected: discovery.not_selected,
        log_dir_errors: discovery.log_dir_errors,
    };
    // Followers list the link again when its change notice changes: after every round that committed a version,
    // and after a continuous shipper's first round whatever it did (an earlier process may have died between a
    // commit and its notice).
    let first_round = held.is_some_and(HeldLeases::first_round);
    if report.segments_shipped() > 0 || first_round {
        segmirror_transport::bucket::link_changes::announce_or_warn(
            store,
            &config.prefix,
            &config.link,
            &config.shipper_id,
        )
        .await;
    }
    Ok(report)
}

/// The report of a partition discovery found unusable.
fn unusable_report(unusable: UnusablePartition) -> PartitionReport {
    let mut report = PartitionReport::new(&unusable.topic, unusable.partition, &unusable.path);
    report.status = match unusable.problem {
        Unusable::Source(error) => PartitionStatus::Failed {
            kind: FailureKind::Source,
            error,
        },
        Unusable::Corrupt(findings) => PartitionStatus::Refused {
            base_offset: None,
            findings,
        },
    };
    report
}
