//! Continuous replication through a bucket (`segmirror ship --store`): for sites where neither side can reach the
//! other and both reach one bucket.
//!
//! Why rounds of `seed` and not a second uploader: the bucket contract (manifest v2 `log_chunks`, the succession
//! rule, leases, the applier's checks) is exactly what a rerun of `seed` already produces — a grown active segment
//! goes up as one new chunk object plus a new manifest version referencing the chunks shipped before, a rolled
//! segment gets its sealed version (indexes, producer snapshot, transaction index) re-committed over the shipped
//! chunks, and nothing already in the bucket is uploaded again. Writing those versions a second way would mean two
//! implementations of one public contract. So a continuous shipper is a loop of seed rounds with two additions:
//!
//! - **When a round starts.** The log-dir watcher ([`crate::source::watch`](mod@crate::source::watch)) says when
//!   something changed; a round starts once [`StoreTailConfig::upload_interval`] has passed since the previous one, or at once when the
//!   active segments grew by [`StoreTailConfig::upload_bytes`] — whichever comes first — and never on a blind
//!   sleep with nothing changed (the watcher's periodic rescan is the safety net for lost notifications). A round
//!   looks at the partitions the watcher named since the last one ([`RoundTrigger`]); the broker's checkpoints,
//!   rewritten every few seconds whatever happened, name none (the high watermarks) or only the partitions whose
//!   log start moved (the log-start checkpoint, compared with its last read).
//! - **Leases kept between rounds** ([`HeldLeases`]): a partition's lease is taken at its first write and kept,
//!   so rounds add no lease objects; a second shipper on the same bucket prefix takes a newer lease and fences this
//!   one at its next commit, after which this process never writes that partition again and
//!   [`run`] returns [`StoreTailEnd::Fenced`] (the caller exits non-zero). Two shippers thus never interleave
//!   manifests beyond the one commit the lease check's two requests allow (reported by the audit as
//!   `StaleLeaseCommit`).
//!
//! - **Incremental rounds.** The same [`HeldLeases`] keeps each partition's active-segment state
//!   ([`crate::source::incremental::ActiveTail`]) between rounds, so a round reads, checks, hashes and indexes only
//!   the bytes appended since the last one and commits the version a one-shot seed would; the state is rebuilt from
//!   the bucket once (first round, restart, or anything it cannot continue). What a round still writes in
//!   proportion to the segment is the version's rebuilt offset/time index (~0.5% of it); see
//!   docs/decisions/0019-bucket-follow-rounds.md for the latency model.
//!
//! Bounds: the bucket tail ships every complete, CRC-valid batch (`--upto log-end`); the high-watermark bound of the
//! direct tail is not applied by seed's active-segment preparation yet, so the command line refuses it for
//! `--store` rather than ship uncommitted records under that name. Retention and compaction are handled as `seed`
//! handles them (a deleted segment is simply no longer shipped — the applier follows the log start the manifests
//! carry; a compacted sealed segment is shipped whole again as a new version).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use crate::bucket::seed::{self, HeldLeases, NoProgress, PartitionStatus, SeedConfig, SeedReport};
use crate::error::{Error, Result};
use crate::link_meta::{MetaConfig, MetaPublisher, MetaReader, Published};
use crate::source::watch::{read_log_starts, watch, PartitionId, WatchConfig, WatchEvent};
use segmirror_transport::Transport;

/// Default time between upload rounds (500 ms): the target is an object-store tail p99 of 2 s from send to
/// the mirror, and a record waits at most one interval before its round starts, plus the round (a few requests) and
/// the applier's poll; fewer rounds mean fewer PUTs (each round of a grown partition is one chunk object and one
/// manifest: at 500 ms, ~14k requests per partition a day at the most).
pub const DEFAULT_UPLOAD_INTERVAL: Duration = Duration::from_millis(500);

/// Default growth of the active segments that starts a round before the interval is up (8 MiB): a fast producer
/// then uploads chunks of about this size (big enough that per-request overhead stays small next to the transfer,
/// small enough that one chunk uploads in well under the interval on a 1 Gbit/s link) instead of letting one round
/// carry an interval's worth of a high rate.
pub const DEFAULT_UPLOAD_BYTES: u64 = 8 * 1024 * 1024;

/// How a continuous shipper runs.
#[derive(Debug, Clone)]
pub struct StoreTailConfig {
    /// What each round ships (log dirs, topics, link, prefix, shipper id...).
    pub seed: SeedConfig,
    /// [`DEFAULT_UPLOAD_INTERVAL`].
    pub upload_interval: Duration,
    /// [`DEFAULT_UPLOAD_BYTES`].
    pub upload_bytes: u64,
    /// The link's topics and consumer offsets, published every [`MetaConfig::interval`] when they changed
    /// ([`crate::link_meta`]); `None` ships segments only.
    pub meta: Option<MetaConfig>,
}

impl StoreTailConfig {
    pub fn new(seed: SeedConfig) -> Self {
        StoreTailConfig {
            seed,
            upload_interval: DEFAULT_UPLOAD_INTERVAL,
            upload_bytes: DEFAULT_UPLOAD_BYTES,
            meta: None,
        }
    }
}

/// Why [`run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreTailEnd {
    /// The shutdown future completed (after the round under way, if any, committed or stopped).
    Stopped,
    /// Another shipper took the lease of these partitions (`topic-partition`): this one stopped.
    Fenced(Vec<String>),
}

/// What the rounds of a run did, for the caller's log and tests.
#[derive(Debug, Default, Clone)]
pub struct RoundStats {
    pub rounds: u64,
    pub segments_shipped: u64,
    pub bytes_uploaded: u64,
}

/// When the next round is due, from what the watcher said. Pure, so the timing rule is tested without a clock.
#[derive(Debug, Default)]
pub struct RoundTrigger {
    /// Something changed since the last round started.
    dirty: bool,
    /// Bytes the active segments grew by since the last round started.
    grown: u64,
    /// The last length seen per partition's active segment (base, len).
    lengths: HashMap<PartitionId, (i64, u64)>,
    /// The partition dirs an event named since the last round started: what the next round looks at.
    partitions: HashSet<PathBuf>,
    /// An event not about one partition, or a round to do again: the next round looks at every partition.
    everything: bool,
    /// Log dirs whose log-start checkpoint changed and was not read since ([`RoundTrigger::log_starts_read`]).
    unread_log_starts: HashSet<PathBuf>,
    /// Each log dir's log-start checkpoint as last read: a change names the partitions whose entry moved.
    log_starts: HashMap<PathBuf, HashMap<(String, i32), i64>>,
}

/// What a round looks at: every partition, or the partition dirs named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundScope {
    Everything,
    Partitions(HashSet<PathBuf>),
}

impl RoundTrigger {
    /// Take in one watcher event.
    pub fn observe(&mut self, event: &WatchEvent) {
        // The broker rewrites its high-watermark checkpoint every 5 s whatever happened, and nothing a round ships
        // depends on it (`--upto log-end` ships every complete batch; `--upto high-watermark` asks the source by
        // Fetch, `committed`): no round for it. Were it a round over every partition, a shipper at rest beside a
        // broker of 10,000 partitions would look at all of them every 5 s.
        if matches!(event, WatchEvent::HighWatermarksChanged { .. }) {
            return;
        }
        // The log-start checkpoint (rewritten every 60 s) names the partitions a round must look at only once it is
        // read and compared with the last read: the caller reads it (`take_unread_log_starts`, `log_starts_read`).
        if let WatchEvent::LogStartsChanged { log_dir } = event {
            self.unread_log_starts.insert(log_dir.clone());
            return;
        }
        match event.partition() {
            Some(partition) => {
                self.partitions.insert(partition.dir.clone());
            }
            None if matches!(event, WatchEvent::Unreadable { .. }) => {}
            None => self.everything = true,
        }
        match event {
            WatchEvent::ActiveGrew {
                partition,
                base_offset,
                len,
            } => {
                let before = match self.lengths.get(partition) {
                    Some((base, was)) if base == base_offset => *was,
                    _ => 0,
                };
                self.grown = self.grown.saturating_add(len.saturating_sub(before));
                self.lengths.insert(partition.clone(), (*base_offset, *len));
                self.dirty = true;
            }
            WatchEvent::Rolled {
                partition, active_base, ..
            } => {
                self.lengths.insert(partition.clone(), (*active_base, 0));
                self.dirty = true;
            }
            WatchEvent::PartitionGone { partition, .. } => {
                self.lengths.remove(partition);
                self.dirty = true;
            }
            // A listing problem is retried by the watcher; nothing to ship because of it.
            WatchEvent::Unreadable { .. } => {}
            _ => self.dirty = true,
        }
    }

    /// `log_dir`'s log-start checkpoint as read before the first round (which looks at everything): what its next
    /// change is compared with.
    pub fn log_starts_known(&mut self, log_dir: &std::path::Path, entries: Option<HashMap<(String, i32), i64>>) {
        if let Some(entries) = entries {
            self.log_starts.insert(log_dir.to_path_buf(), entries);
        }
    }

    /// The log dirs whose log-start checkpoint changed since they were last read: read each, then
    /// [`RoundTrigger::log_starts_read`].
    pub fn take_unread_log_starts(&mut self) -> Vec<PathBuf> {
        self.unread_log_starts.drain().collect()
    }

    /// `log_dir`'s log-start checkpoint as read now (`None`: unreadable). The next round looks at the partitions
    /// whose entry changed since the last read: a log start that `DeleteRecords` moved inside a segment shows
    /// nowhere else. Every partition when there is no earlier read to compare with, or none now.
    pub fn log_starts_read(&mut self, log_dir: &std::path::Path, entries: Option<HashMap<(String, i32), i64>>) {
        let Some(entries) = entries else {
            self.log_starts.remove(log_dir);
            self.everything = true;
            self.dirty = true;
            return;
        };
        match self.log_starts.get(log_dir) {
            None => {
                self.everything = true;
                self.dirty = true;
            }
            Some(before) => {
                let moved = entries
                    .iter()
                    .filter(|(key, offset)| before.get(*key) != Some(*offset))
                    .map(|(key, _)| key)
                    .chain(before.keys().filter(|key| !entries.contains_key(*key)));
                for (topic, partition) in moved {
                    self.partitions.insert(log_dir.join(format!("{topic}-{partition}")));
                    self.dirty = true;
                }
            }
        }
        self.log_starts.insert(log_dir.to_path_buf(), entries);
    }

    /// Start a round now (`true`), given the time since the last round started.
    pub fn due(&self, since_last: Duration, interval: Duration, bytes: u64) -> bool {
        self.dirty && (since_last >= interval || self.grown >= bytes)
    }

    /// A round starts: what it will see is no longer pending. Returns what it is to look at.
    pub fn started(&mut self) -> RoundScope {
        self.dirty = false;
        self.grown = 0;
        let partitions = std::mem::take(&mut self.partitions);
        if std::mem::take(&mut self.everything) {
            RoundScope::Everything
        } else {
            RoundScope::Partitions(partitions)
        }
    }

    /// Everything must be looked at again at the next round (a partition a round could not finish).
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
        self.everything = true;
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty
    }
}

/// [`read_log_starts`] on a blocking thread.
async fn read_log_starts_off_runtime(log_dir: &std::path::Path) -> Result<Option<HashMap<(String, i32), i64>>> {
    let log_dir = log_dir.to_path_buf();
    tokio::task::spawn_blocking(move || read_log_starts(&log_dir))
        .await
        .map_err(|e| Error::Task {
            what: "log-start checkpoint read".into(),
            message: e.to_string(),
        })
}

/// Ship continuously until `shutdown` completes or this shipper is fenced (see the module doc). `on_round` sees
/// every round's report (for logging). Fails only when nothing can run at all (an invalid configuration, a
/// watcher that cannot start).
pub async fn run(
    store: &dyn Transport,
    config: &StoreTailConfig,
    shutdown: impl std::future::Future<Output = ()>,
    mut on_round: impl FnMut(&SeedReport),
) -> Result<(StoreTailEnd, RoundStats)> {
    config.seed.validate()?;
    if config.upload_interval.is_zero() || config.upload_bytes == 0 {
        return Err(Error::InvalidSetting {
            setting: "upload interval/bytes",
            reason: "must be positive".into(),
        });
    }
    let (_watcher, mut events) = watch(WatchConfig::new(
        config.seed.log_dirs.clone(),
        config.seed.topics.clone(),
    ))
    .await
    .map_err(Error::Format)?;
    let mut publisher = match &config.meta {
        Some(meta) => Some(MetaPublisher::new(
            MetaReader::new(meta.clone())?,
            config.seed.prefix.clone(),
            &config.seed.shipper_id,
        )),
        None => None,
    };
    let mut meta_tick = tokio::time::interval(config.meta.as_ref().map_or(Duration::from_secs(3600), |m| m.interval));
    meta_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut meta_failure: Option<String> = None;
    let held = HeldLeases::default();
    let mut stats = RoundStats::default();
    let mut trigger = RoundTrigger::default();
    for log_dir in &config.seed.log_dirs {
        trigger.log_starts_known(log_dir, read_log_starts_off_runtime(log_dir).await?);
    }
    tokio::pin!(shutdown);
    // The first round at once: whatever the source holds now.
    let mut last_round = Instant::now();
    let mut first = true;
    loop {
        if first || trigger.due(last_round.elapsed(), config.upload_interval, config.upload_bytes) {
            // The first round looks at everything; later ones at the partitions the watcher named since the last
            // round started (its rescan names whatever a lost notification hid).
            let scope = trigger.started();
            let scope = if std::mem::take(&mut first) {
                RoundScope::Everything
            } else {
                scope
            };
            last_round = Instant::now();
            // A round runs to its end (a few requests): a signal is answered between rounds, so a stop never
            // leaves more than a seed killed mid-round would (data objects without a manifest, overwritten later).
            let only = match &scope {
                RoundScope::Everything => None,
                RoundScope::Partitions(dirs) => Some(dirs),
            };
            let report = seed::seed_round_of(store, &config.seed, &NoProgress, Some(&held), only).await?;
            stats.rounds += 1;
            stats.segments_shipped += report.segments_shipped();
            stats.bytes_uploaded += report.bytes_uploaded();
            on_round(&report);
            let fenced: Vec<String> = report
                .partitions
                .iter()
                .filter(|p| {
                    matches!(
                        p.status,
                        PartitionStatus::Failed {
                            kind: seed::FailureKind::Fenced,
                            ..
                        }
                    )
                })
                .map(|p| p.name())
                .collect();
            if !fenced.is_empty() {
                return Ok((StoreTailEnd::Fenced(fenced), stats));
            }
            // A round that failed transiently on a partition leaves it to the next one.
            if report.has_failures() {
                trigger.mark_dirty();
            }
        }
        let wait = if trigger.is_dirty() {
            config.upload_interval.saturating_sub(last_round.elapsed())
        } else {
            // Nothing pending: sleep until an event (the bound keeps the loop responsive to nothing else).
            Duration::from_secs(3600)
        };
        tokio::select! {
            () = &mut shutdown => return Ok((StoreTailEnd::Stopped, stats)),
            event = events.recv() => match event {
                Some(e) => {
                    // Everything queued now, not one event per loop: a round must not start on the first of a
                    // thousand events (each round would then take in one more).
                    trigger.observe(&e);
                    while let Ok(e) = events.try_recv() {
                        trigger.observe(&e);
                    }
                    for log_dir in trigger.take_unread_log_starts() {
                        let entries = read_log_starts_off_runtime(&log_dir).await?;
                        trigger.log_starts_read(&log_dir, entries);
                    }
                }
                None => return Err(Error::Task { what: "log-dir watcher".into(), message: "stopped".into() }),
            },
            () = tokio::time::sleep(wait) => {}
            _ = meta_tick.tick(), if publisher.is_some() => {
                if let Some(publisher) = publisher.as_mut() {
                    publish_meta(store, publisher, &mut meta_failure).await;
                }
            }
        }
    }
}

/// Publish the link's metadata if it changed; a failure is logged once (until it changes or clears) and retried
/// at the next tick, never a reason to stop shipping segments.
async fn publish_meta(store: &dyn Transport, publisher: &mut MetaPublisher, failure: &mut Option<String>) {
    match publisher.publish_if_changed(store).await {
        Ok(Published::Version {
            version,
            topics,
            offsets,
        }) => {
            tracing::info!(version, topics, offsets, "link metadata published");
            *failure = None;
        }
        Ok(Published::Unchanged) => *failure = None,
        Err(e) => {
            let message = e.to_string();
            if failure.as_ref() != Some(&message) {
                tracing::warn!(error = %message, "link metadata not published; retrying");
                eprintln!("segmirror ship: link metadata: {message} (retrying)");
            }
            *failure = Some(message);
        }
    }
}

#[cfg(test)]
mod tests;
