//! The cut: optionally wait for the link to drain, then make it `promoted`, and say what was left behind.
//!
//! Drained means: nothing known on the source side is waiting — no shipped segment version waits to be installed
//! (in the catalog, or in a bucket link's store: every partition's newest manifest there, the one `apply --follow`
//! would read next, must be installed up to its end; see `bucket.rs` for why the catalog alone is not enough), no
//! partition's source end (as the direct shipper last reported it, or as a group's committed offset proves) lies
//! beyond what is installed — and nothing changed (installed offsets, pending versions, the bucket's newest ends,
//! the groups' offsets) for `--drain-quiet`, longer than the applier's poll interval. (The link's metadata version
//! is not watched: it moves with every metadata record of the source, KRaft's periodic no-op records included.)
//!
//! What is left behind (the RPO) is reported per partition: offsets and bytes the source reported beyond the
//! installed end (direct links), offsets the bucket's newest version holds beyond it (bucket links), offsets a
//! consumer group committed beyond it (the records exist on the source), and segment versions shipped but not
//! installed. Records produced on the source and neither shipped nor consumed are invisible from here; the report
//! says so.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use segment_format::now_ms;
use segmirror_applier::direct::tail_lags;
use segmirror_catalog::{Catalog, LinkState};

use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::Store;

use super::bucket;
use super::report::{CutReport, Details, LeftBehind, Rpo};
use super::{CutMode, Failover, FailoverConfig, POLL};
use crate::bucket_ends::BucketEnds;
use crate::runtime::Runtime;

/// How often a drain reads the bucket's manifests (2 s): a listing and one manifest read per partition, too much
/// for every [`POLL`] of the catalog, and well below `--drain-quiet`'s default, so a version uploaded during the
/// quiet period is seen within it.
const BUCKET_POLL: Duration = Duration::from_secs(2);

/// What the catalog (and a bucket link's store) knows of one partition at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PartitionView {
    installed_end: Option<i64>,
    pending_segments: u64,
    /// The highest source offset known: the shipper's last report of the source's log end (direct), or a group's
    /// committed offset.
    known_source_end: Option<i64>,
    /// Bytes of the source's active segment the mirror lacks (direct, when the mirror is in that segment).
    lag_bytes: Option<u64>,
    /// The end of the newest version the bucket holds (bucket links).
    bucket_end: Option<i64>,
}

impl PartitionView {
    /// The highest source offset known from any side.
    fn source_end(&self) -> Option<i64> {
        self.known_source_end.max(self.bucket_end)
    }

    fn left_offsets(&self) -> i64 {
        match (self.source_end(), self.installed_end) {
            (Some(source), Some(installed)) => (source - installed).max(0),
            (Some(source), None) => source.max(0),
            _ => 0,
        }
    }

    fn drained(&self) -> bool {
        self.pending_segments == 0 && self.left_offsets() == 0 && self.lag_bytes.unwrap_or(0) == 0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    partitions: BTreeMap<(String, i32), PartitionView>,
}

/// The store of a bucket link, and its newest versions read now.
struct Bucket {
    store: Option<(Store, KeyPrefix)>,
}

impl Bucket {
    fn open(config: &FailoverConfig, catalog: &Catalog) -> anyhow::Result<Bucket> {
        let link = catalog.link(&config.link)?;
        Ok(Bucket {
            store: bucket::open(config, &link)?,
        })
    }

    /// The bucket's newest versions (`None` for a direct link).
    fn read(&self, config: &FailoverConfig, runtime: &Runtime) -> anyhow::Result<Option<BucketEnds>> {
        match &self.store {
            Some((store, prefix)) => Ok(Some(bucket::newest(runtime, store, prefix, &config.link)?)),
            None => Ok(None),
        }
    }
}

fn snapshot(config: &FailoverConfig, catalog: &Catalog, bucket: &Option<BucketEnds>) -> anyhow::Result<Snapshot> {
    let status = catalog.status()?;
    let mut partitions: BTreeMap<(String, i32), PartitionView> = BTreeMap::new();
    if let Some(link) = status.links.iter().find(|l| l.name == config.link) {
        for p in &link.partitions {
            partitions.insert(
                (p.topic.clone(), p.partition),
                PartitionView {
                    installed_end: p.installed_end_offset,
                    pending_segments: p.segments_pending,
                    known_source_end: None,
                    lag_bytes: None,
                    bucket_end: None,
                },
            );
        }
    }
    let empty = || PartitionView {
        installed_end: None,
        pending_segments: 0,
        known_source_end: None,
        lag_bytes: None,
        bucket_end: None,
    };
    for (key, newest) in bucket.iter().flatten() {
        partitions.entry(key.clone()).or_insert_with(empty).bucket_end = Some(newest.end_offset);
    }
    let now = u64::try_from(now_ms()).unwrap_or(0);
    for lag in tail_lags(&config.mirror, &status, now) {
        if let Some(view) = partitions.get_mut(&(lag.topic.clone(), lag.partition)) {
            if lag.installed_end_offset.is_some() {
                view.installed_end = view.installed_end.max(lag.installed_end_offset);
            }
            view.known_source_end = view.known_source_end.max(lag.source_log_end_offset);
            view.lag_bytes = lag.lag_bytes;
        }
    }
    for o in catalog.link_offsets(&config.link)? {
        let view = partitions.entry((o.topic.clone(), o.partition)).or_insert_with(empty);
        view.known_source_end = view.known_source_end.max(Some(o.source_offset));
    }
    Ok(Snapshot { partitions })
}

/// Wait until the link is drained (see the module doc), at most `--drain-timeout`.
fn drain(failover: &Failover, catalog: &Catalog, details: &mut Details) -> anyhow::Result<Snapshot> {
    let Failover { config, runtime, out } = *failover;
    let quiet = Duration::from_secs_f64(config.drain_quiet.max(0.0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(config.drain_timeout);
    let bucket = Bucket::open(config, catalog)?;
    let mut in_bucket = bucket.read(config, runtime)?;
    let mut bucket_read_at = Instant::now();
    let mut last = snapshot(config, catalog, &in_bucket)?;
    let mut still_since = Instant::now();
    let mut said_at = Instant::now();
    out.line(&format!(
        "[cut] draining: waiting until nothing is left to install and nothing changed for {:.1} s (at most {} s)",
        quiet.as_secs_f64(),
        config.drain_timeout
    ));
    loop {
        std::thread::sleep(POLL);
        if bucket_read_at.elapsed() >= BUCKET_POLL {
            in_bucket = bucket.read(config, runtime)?;
            bucket_read_at = Instant::now();
        }
        let now = snapshot(config, catalog, &in_bucket)?;
        if now != last {
            last = now;
            still_since = Instant::now();
            continue;
        }
        if last.partitions.values().all(PartitionView::drained) && still_since.elapsed() >= quiet {
            out.line(&format!("[cut] drained after {:.1} s", started.elapsed().as_secs_f64()));
            return Ok(last);
        }
        if said_at.elapsed() >= Duration::from_secs(10) {
            said_at = Instant::now();
            let behind = last.partitions.values().filter(|v| !v.drained()).count();
            out.line(&format!(
                "[cut] still draining after {:.0} s: {behind} partition(s) with something left, last change {:.1} s ago",
                started.elapsed().as_secs_f64(),
                still_since.elapsed().as_secs_f64()
            ));
        }
        if Instant::now() > deadline {
            let left = report(&last);
            out.left_behind(&left)?;
            details.cut = Some(left);
            bail!(
                "the link did not drain within {} s (what is left is listed above); run again with --now to cut \
                 anyway",
                config.drain_timeout
            );
        }
    }
}

/// Wait until no applier holds the mirror (the gate stops a running one within half a second of `promoted`).
fn wait_for_appliers(config: &FailoverConfig) -> anyhow::Result<()> {
    if !segmirror_applier::mirror::apply_lock_file(&config.mirror).exists() {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match segmirror_applier::lock_mirror(&config.mirror, segmirror_applier::LockWait::Fail) {
            Ok(lock) => {
                drop(lock);
                return Ok(());
            }
            Err(e) if Instant::now() > deadline => {
                bail!("an applier still holds the mirror 30 s after the link was promoted: {e}")
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// The left-behind table and its sums (`failover --json`'s `cut`, the human table, the journaled outcome).
pub fn report(snapshot: &Snapshot) -> CutReport {
    let left_behind: Vec<LeftBehind> = snapshot
        .partitions
        .iter()
        .map(|((topic, partition), v)| LeftBehind {
            topic: topic.clone(),
            partition: *partition,
            installed_end: v.installed_end,
            known_source_end: v.source_end(),
            bucket_end: v.bucket_end,
            left_offsets: v.left_offsets(),
            left_bytes: v.lag_bytes,
            pending_versions: v.pending_segments,
        })
        .collect();
    let views = || snapshot.partitions.values();
    CutReport {
        rpo: Rpo {
            left_offsets: views().map(PartitionView::left_offsets).sum(),
            left_bytes: views().filter_map(|v| v.lag_bytes).sum(),
            pending_versions: views().map(|v| v.pending_segments).sum(),
            partitions_behind: views().filter(|v| !v.drained()).count(),
            partitions: snapshot.partitions.len(),
            installed_offsets: views().filter_map(|v| v.installed_end).sum(),
        },
        left_behind,
    }
}

/// What is left behind now (after the cut, nothing changes it any more: a rerun reports the cut's table).
/// A bucket that cannot be read does not stop a cut made now: in a disaster the source site's bucket may be gone with
/// it, and `--now` is how an operator fails over anyway. What is left behind is then what the catalog knows, and
/// the run says so (a drain, by contrast, needs the bucket: it waits for its newest versions).
pub fn left_behind_now(failover: &Failover, catalog: &Catalog) -> anyhow::Result<CutReport> {
    let Failover { config, runtime, out } = *failover;
    let in_bucket = match Bucket::open(config, catalog).and_then(|bucket| bucket.read(config, runtime)) {
        Ok(ends) => ends,
        Err(e) => {
            out.line(&format!(
                "[cut] warning: the link's bucket cannot be read ({e:#}): what is left behind below is what the \
                 catalog knows; versions shipped but never read by an applier are not counted"
            ));
            None
        }
    };
    Ok(report(&snapshot(config, catalog, &in_bucket)?))
}

/// The cut step; its left-behind table goes to `details.cut` too.
pub fn cut(failover: &Failover, catalog: &mut Catalog, details: &mut Details) -> anyhow::Result<String> {
    let Failover { config, out, .. } = *failover;
    let link = catalog.link(&config.link)?;
    match link.state {
        LinkState::Promoted => out.line("[cut] the link is already promoted: no drain, no change"),
        LinkState::Deleted => bail!("link {} is deleted", config.link),
        LinkState::Active | LinkState::Paused => {
            if config.cut == CutMode::Drain {
                if link.state == LinkState::Paused {
                    bail!(
                        "link {} is paused: nothing moves, so it cannot drain; resume it (`segmirror link resume`) \
                         or cut with --now",
                        config.link
                    );
                }
                drain(failover, catalog, details)?;
            }
            catalog.promote_link(&config.link)?;
            // Where the topics live now, for `segmirror serve` and `status` to name (an operator's --target kept).
            if let Some(bootstrap) = &config.bootstrap {
                catalog.name_link_target(&config.link, bootstrap)?;
            }
            out.line(&format!(
                "[cut] link {} is promoted: its appliers install nothing more",
                config.link
            ));
        }
    }
    wait_for_appliers(config)?;
    let at_cut = left_behind_now(failover, catalog)?;
    out.left_behind(&at_cut)?;
    let rpo = &at_cut.rpo;
    let outcome = format!(
        "RPO: {} record offset(s), {} byte(s) and {} shipped version(s) known on the source side and not installed, \
         in {} of {} partition(s) ({} offsets installed; records neither shipped nor consumed on the source are not \
         known here)",
        rpo.left_offsets,
        rpo.left_bytes,
        rpo.pending_versions,
        rpo.partitions_behind,
        rpo.partitions,
        rpo.installed_offsets
    );
    details.cut = Some(at_cut);
    Ok(outcome)
}
