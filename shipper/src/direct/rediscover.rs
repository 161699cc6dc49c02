//! Partitions appearing and disappearing while the tail feed runs.
//!
//! A shipper runs for months; topics are created and deleted meanwhile. Without this the feed ships the
//! partitions found at start and a new topic waits for a restart. With a [`Rediscovery`] the feed lists its log
//! dirs again ([`discover`]) every [`REDISCOVER_INTERVAL`] ([`WATCHED_REDISCOVER_INTERVAL`] while the
//! [`watch`](mod@crate::source::watch) watcher runs), and at once when the watcher reports a partition directory
//! appearing or going (its events are hints: a lost one is found by the watcher's own rescan, or the periodic
//! listing). Then:
//! - a selected partition not followed yet is added; it ships from its earliest segment, byte 0, unless the
//!   applier said at the session's start that it holds some of it (a partition created between two sessions, or
//!   moved between log dirs), which the feed then continues, after proving the position (the seek's scan);
//! - a followed partition whose directory is gone (deleted: Kafka renames the directory
//!   `<topic>-<p>.<uuid>-delete`, then removes it) and that is no longer listed is dropped, no error: the mirror keeps what it received. A step
//!   that fails because the partition's directory vanished under it is the same event seen earlier.
//!
//! - with a [`LiveTopicFilter`] (the link's `topics.regex`, which an operator may change while the shipper runs),
//!   the filter is looked at on every call; a change lists at once, follows the topics it now selects and drops
//!   the followed ones it no longer selects (their mirrors keep what they received; their positions are kept, so a
//!   topic selected again continues where it stopped).
//!
//! Why a listing rather than the watcher's events alone: the events name directories, the listing applies the
//! same rules as the start (topic filter, internal topics, `-future`/`-stray` directories, a topic id present),
//! so a partition is followed by the same rule whenever it appears. A listing of a log dir is one `readdir` plus
//! a small read per partition: once a second is negligible with a few hundred partitions, a tenth of a core with
//! 10,000, hence the longer interval while the watcher hints.
//!
//! The watcher's events also name the partition directory they are about: the feed steps only partitions named
//! since their last step, besides active ones ([`super::wake`]); [`Rediscoverer::take_news`] hands them over.
//!
//! All listing runs on a blocking thread, and a listing in flight survives a dropped future; nothing else is
//! committed to the feed until every await has returned, so a dropped [`ChunkFeed::next`](segmirror_transport::direct::session::ChunkFeed::next) future leaves the feed as
//! it was (cancel safety, as the feed's step).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use segmirror_transport::direct::payload::{PartitionRef, Position};
use tokio::sync::mpsc;

use super::{blocking, name, resume_at, PartState, TailFeed, TailPartition};
use crate::error::Result;
use crate::source::discover::{discover, Discovery, TopicFilter};
use crate::source::watch::{watch, WatchConfig, WatchEvent, Watcher};

/// How often the feed lists its log dirs for new and deleted partitions (1 s): a topic created is shipped within
/// about a second even if its notification was lost, at the cost of one directory listing per log dir a second.
pub const REDISCOVER_INTERVAL: Duration = Duration::from_secs(1);

/// How often the log dirs are listed while the watcher runs (30 s): each listing reads every partition directory's
/// metadata and looks at every followed one, a tenth of a second a listing at 10,000 partitions, while the watcher
/// hints every partition that comes or goes within its rescan interval at the latest.
pub const WATCHED_REDISCOVER_INTERVAL: Duration = Duration::from_secs(30);

/// A topic filter another task may replace while the feed runs (the link's `topics.regex`): the feed reads it on
/// every rediscovery call.
pub type LiveTopicFilter = Arc<RwLock<TopicFilter>>;

/// Where and how often to look for partitions (see the module doc).
#[derive(Debug, Clone)]
pub struct Rediscovery {
    /// The log dirs listed.
    pub log_dirs: Vec<PathBuf>,
    /// Which topics are followed (the same filter as at start, unless `live_filter` replaces it).
    pub filter: TopicFilter,
    /// When set, the filter in force: read on every call, a change applied at once (see the module doc).
    pub live_filter: Option<LiveTopicFilter>,
    /// Only partitions of this source cluster (a link carries one); others are skipped and reported once.
    pub cluster_id: String,
    /// [`REDISCOVER_INTERVAL`].
    pub interval: Duration,
    /// Also list at once when the file-system watcher reports a partition directory appearing or going (default
    /// `true`; if the watcher cannot start, the periodic listing alone remains and a warning says so).
    pub watch: bool,
}

impl Rediscovery {
    /// The defaults for these log dirs, topics and cluster.
    pub fn new(log_dirs: Vec<PathBuf>, filter: TopicFilter, cluster_id: impl Into<String>) -> Self {
        Rediscovery {
            log_dirs,
            filter,
            live_filter: None,
            cluster_id: cluster_id.into(),
            interval: REDISCOVER_INTERVAL,
            watch: true,
        }
    }
}

/// The feed's rediscovery state.
pub(super) struct Rediscoverer {
    config: Rediscovery,
    /// When the log dirs were last listed (`None`: not yet).
    last: Option<Instant>,
    watcher: Option<(Watcher, mpsc::Receiver<WatchEvent>)>,
    /// The watcher was tried (started or failed): not again.
    watch_tried: bool,
    /// The watcher reported a partition directory appearing or going since the last listing.
    hinted: bool,
    /// The partition directories the watcher named since [`Rediscoverer::take_news`] last took them.
    touched: HashSet<PathBuf>,
    /// The log dirs whose `log-start-offset-checkpoint` changed since the feed last took them.
    log_starts: HashSet<PathBuf>,
    /// The topics the running watcher was started for (its filter then).
    watch_filter: Option<TopicFilter>,
    /// A listing started and not yet taken in (see [`TailFeed::rediscover`]).
    listing: Option<tokio::task::JoinHandle<Listing>>,
    /// Durable positions of partitions not followed when the session started (or dropped since): where a
    /// partition continues if it is listed again.
    pending: HashMap<PartitionRef, (i64, u64)>,
    /// Directories already reported as not followed (another cluster, unusable): reported once.
    reported: HashSet<PathBuf>,
}

impl Rediscoverer {
    pub(super) fn new(config: Rediscovery) -> Self {
        Rediscoverer {
            config,
            last: None,
            watcher: None,
            watch_tried: false,
            hinted: false,
            touched: HashSet::new(),
            log_starts: HashSet::new(),
            watch_filter: None,
            listing: None,
            pending: HashMap::new(),
            reported: HashSet::new(),
        }
    }

    /// Takes the live filter's value if it changed; `true` then (a listing is due at once).
    fn refresh_filter(&mut self) -> bool {
        let Some(live) = &self.config.live_filter else {
            return false;
        };
        let current = match live.read() {
            Ok(f) => f.clone(),
            // A writer panicked mid-update: the value it left is still a whole filter.
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        if current.as_str() == self.config.filter.as_str() {
            return false;
        }
        tracing::info!(from = %self.config.filter.as_str(), to = %current.as_str(), "topics filter changed");
        self.config.filter = current;
        true
    }

    /// Is a listing due: never listed, the interval passed, or the watcher saw a partition dir come or go.
    async fn due(&mut self) -> bool {
        if self.config.watch && !self.watch_tried {
            self.watch_tried = true;
            let config = WatchConfig::new(self.config.log_dirs.clone(), self.config.filter.clone());
            match watch(config).await {
                Ok(w) => {
                    self.watcher = Some(w);
                    self.watch_filter = Some(self.config.filter.clone());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the log dirs; listing them every {:?}", self.config.interval)
                }
            }
        }
        // Drained every round, so the watcher never waits on the feed.
        self.drain();
        // With a watcher, a partition coming or going is hinted (its own rescan finds what notifications missed), so
        // the periodic listing is only the net under that net.
        let interval = match &self.watcher {
            Some(_) => self.config.interval.max(WATCHED_REDISCOVER_INTERVAL),
            None => self.config.interval,
        };
        std::mem::take(&mut self.hinted) || self.last.is_none_or(|at| at.elapsed() >= interval)
    }

    /// Waits for the watcher's next event (any: a partition's active segment grew, rolled, a partition came or
    /// went); forever without a watcher. Cancel-safe: an event received is noted before anything else can
    /// happen. The feed waits on it when a round found nothing to ship, so an append is seen within the
    /// watcher's coalescing tick rather than at the next poll.
    pub(super) async fn next_event(&mut self) {
        let Some((_, events)) = &mut self.watcher else {
            return std::future::pending().await;
        };
        match events.recv().await {
            Some(event) => note(&mut self.hinted, &mut self.touched, &mut self.log_starts, &event),
            // The watcher stopped: the feed's poll is all that is left, and every round steps every partition.
            None => {
                self.watcher = None;
                self.watch_filter = None;
                std::future::pending::<()>().await
            }
        }
    }

    /// Moves what the watcher said since the last call, taking the events waiting first: the partition
    /// directories it named into `touched`, the log dirs whose log-start checkpoint changed into `log_starts`.
    pub(super) fn take_news(&mut self, touched: &mut HashSet<PathBuf>, log_starts: &mut HashSet<PathBuf>) {
        self.drain();
        touched.extend(self.touched.drain());
        log_starts.extend(self.log_starts.drain());
    }

    /// Notes every event waiting.
    fn drain(&mut self) {
        if let Some((_, events)) = &mut self.watcher {
            while let Ok(event) = events.try_recv() {
                note(&mut self.hinted, &mut self.touched, &mut self.log_starts, &event);
            }
        }
    }

    /// The filter of the running watcher, which follows the partition directories of the topics it selects (a
    /// filter changed since is not the watcher's); `None` while no watcher runs. It never changes while one runs.
    pub(super) fn watch_filter(&self) -> Option<&TopicFilter> {
        self.watcher.as_ref().and(self.watch_filter.as_ref())
    }
}

/// What an event tells the feed: the partition set may have changed (`hinted`), the partition it names has news,
/// a log dir's log starts moved.
fn note(hinted: &mut bool, touched: &mut HashSet<PathBuf>, log_starts: &mut HashSet<PathBuf>, event: &WatchEvent) {
    *hinted |= is_partition_hint(event);
    if let Some(p) = event.partition() {
        touched.insert(p.dir.clone());
    }
    if let WatchEvent::LogStartsChanged { log_dir } = event {
        log_starts.insert(log_dir.clone());
    }
}

/// A partition directory appeared or went: the partition set may have changed.
fn is_partition_hint(event: &WatchEvent) -> bool {
    matches!(
        event,
        WatchEvent::PartitionAppeared { .. } | WatchEvent::PartitionGone { .. }
    )
}

/// What one listing found: the partitions selected now, and which followed partitions' directories are gone.
pub(super) struct Listing {
    found: Discovery,
    gone: HashSet<PathBuf>,
}

/// True when the directory a partition was read from is gone (deleted or renamed `-delete`). Blocking.
pub(super) fn is_gone(dir: &Path) -> bool {
    matches!(std::fs::symlink_metadata(dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// A partition's followed identity.
fn key(p: &TailPartition) -> &PartitionRef {
    &p.partition
}

impl TailFeed {
    /// Follow partitions appearing and drop those deleted while running (see the module doc).
    pub fn with_rediscovery(mut self, rediscovery: Rediscovery) -> Self {
        self.rediscoverer = Some(Rediscoverer::new(rediscovery));
        self
    }

    /// Resume positions of the session for partitions the feed does not follow: kept for when they are listed.
    /// `false` without rediscovery (the caller reports them as ignored).
    pub(super) fn keep_pending(&mut self, positions: &[Position]) -> bool {
        let Some(r) = &mut self.rediscoverer else {
            return false;
        };
        r.pending = positions
            .iter()
            .map(|p| (p.partition.clone(), (p.segment_base, p.position)))
            .collect();
        true
    }

    /// Forget the partition at `idx` (its directory is gone): no error, the mirror keeps what it has.
    pub(super) fn drop_gone(&mut self, idx: usize, why: &crate::error::Error) {
        if idx >= self.parts.len() {
            return;
        }
        let part = self.parts.remove(idx);
        tracing::info!(partition = %name(&part.target.partition), dir = %part.target.dir.display(), reason = %why,
            "partition directory gone (deleted): no longer shipped");
        if let (Some(r), Some(at)) = (&mut self.rediscoverer, &part.at) {
            r.pending
                .insert(part.target.partition.clone(), (at.base_offset, at.position));
        }
        self.cursor = 0;
    }

    /// List the log dirs if due (or `force`), then add new partitions and drop deleted ones.
    pub(super) async fn rediscover(&mut self, force: bool) -> Result<()> {
        let Some(r) = &mut self.rediscoverer else {
            return Ok(());
        };
        let refiltered = r.refresh_filter();
        let due = r.due().await || refiltered;
        if r.listing.is_some() && refiltered {
            // A listing under the old filter is in flight: take it, and list again under the new one next call.
            r.hinted = true;
        }
        if r.listing.is_none() {
            if !due && !force {
                return Ok(());
            }
            let (log_dirs, filter) = (r.config.log_dirs.clone(), r.config.filter.clone());
            let followed: Vec<PathBuf> = self.parts.iter().map(|p| p.target.dir.clone()).collect();
            r.listing = Some(tokio::task::spawn_blocking(move || Listing {
                found: discover(&log_dirs, &filter),
                gone: followed.into_iter().filter(|d| is_gone(d)).collect(),
            }));
        }
        // The listing in flight is kept across a dropped `next` future and awaited again by the next call: a
        // session that cancels `next` whenever a frame arrives cannot keep restarting it.
        let Some(listing) = r.listing.as_mut() else {
            return Ok(());
        };
        let joined = listing.await;
        r.listing = None;
        let Listing { found, gone: gone_dirs } = joined.map_err(|e| crate::error::Error::Task {
            what: "listing the log dirs".into(),
            message: e.to_string(),
        })?;
        r.last = Some(Instant::now());
        if let Some(e) = found.log_dir_errors.first() {
            // A log dir that cannot be listed now lists nothing: keep what is followed rather than drop it all.
            tracing::warn!(error = %e, "listing a log dir for new partitions; the partitions followed stay");
            return Ok(());
        }
        let mut listed = Vec::with_capacity(found.sources.len());
        for s in found.sources {
            if s.cluster_id != r.config.cluster_id {
                if r.reported.insert(s.dir.clone()) {
                    tracing::warn!(dir = %s.dir.display(), cluster = %s.cluster_id, link_cluster = %r.config.cluster_id,
                        "partition of another cluster: not shipped");
                }
                continue;
            }
            listed.push(TailPartition {
                partition: PartitionRef {
                    topic: s.topic,
                    partition: s.partition,
                    topic_id: s.topic_id.0,
                },
                dir: s.dir,
            });
        }
        for f in &found.failed {
            if r.reported.insert(f.path.clone()) {
                tracing::warn!(dir = %f.path.display(), problem = ?f.problem, "partition cannot be shipped");
            }
        }
        // New partitions, each positioned before anything is committed.
        let followed: HashSet<&PartitionRef> = self.parts.iter().map(|p| key(&p.target)).collect();
        let mut added = Vec::new();
        for target in listed.iter().filter(|t| !followed.contains(key(t))) {
            let at = match r.pending.get(key(target)).copied() {
                None => None,
                Some((base, position)) => {
                    let t = target.clone();
                    Some(blocking(move || resume_at(&t, base, position)).await?)
                }
            };
            added.push(PartState::new(target.clone(), at));
        }
        // Committed from here on: no await below.
        let listed_keys: HashSet<&PartitionRef> = listed.iter().map(key).collect();
        let before = self.parts.len();
        let mut gone = Vec::new();
        let filter = &r.config.filter;
        self.parts.retain(|p| {
            // Dropped only when its directory is gone or the filter no longer selects its topic: a partition the
            // listing passed over for a moment (its `partition.metadata` unreadable) keeps its position rather
            // than being rescanned from byte 0.
            let deselected = !filter.matches(&p.target.partition.topic);
            let keep = listed_keys.contains(key(&p.target)) || !(gone_dirs.contains(&p.target.dir) || deselected);
            if !keep {
                gone.push((p.clone(), deselected));
            }
            keep
        });
        for (p, deselected) in gone {
            if deselected {
                tracing::info!(partition = %name(&p.target.partition), filter = %filter.as_str(),
                    "topic no longer selected by the topics filter: no longer shipped (its mirror stays)");
            } else {
                tracing::info!(partition = %name(&p.target.partition), dir = %p.target.dir.display(),
                    "partition no longer listed (deleted): no longer shipped");
            }
            if let Some(at) = &p.at {
                r.pending
                    .insert(p.target.partition.clone(), (at.base_offset, at.position));
            }
        }
        for p in added {
            tracing::info!(partition = %name(&p.target.partition), dir = %p.target.dir.display(),
                resumed = p.at.is_some(), "new partition: shipped from now on");
            r.pending.remove(key(&p.target));
            self.parts.push(p);
        }
        if self.parts.len() != before {
            self.cursor = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
