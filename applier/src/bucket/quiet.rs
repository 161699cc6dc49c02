//! A follower's memory of the partitions it has nothing to do for: each partition whose last run ended complete
//! (every version its listing offered installed) is remembered with that listing, and the next runs skip it — no
//! catalog queries, no manifest reads, no scan of its directory — for as long as the store lists exactly the same
//! objects for it (keys, sizes, entity tags, times).
//!
//! Why: a follower runs every 250 ms, and a run used to do per-partition work whatever changed; with 10,000
//! partitions at rest that kept two thirds of a core busy. The listing still runs whenever something may have
//! changed (below: it is how a new version is seen at all); what the listing does not show — a partition reset by
//! an operator, files removed from the mirror by hand — is caught by a full run every [`FULL_RUN_INTERVAL`], which
//! forgets everything (or less often when full runs take long: they take at most a fiftieth of the time,
//! [`FULL_RUN_SHARE`]).
//!
//! Only a complete partition is remembered: one that was refused, failed, skipped (paused, lineage break) or waits
//! for the shipper runs every time, so its report (and a refusal's log line, once) stays what a full run gives.
//!
//! **Whole runs passed over.** The listing itself is the rest of an idle follower's cost (with 10,000 partitions,
//! tens of thousands of directory entries four times a second). Writers rewrite the link's change notice after
//! their commits (`segmirror_contract::link_changes`), so a run first reads what the store says of the notice and
//! the catalog's `data_version` (which changes when another connection commits: an operator's pause, resume or
//! reset). When both are what they were before the last run's listing, that run failed and refused no partition,
//! and no full run is due, the bucket and the catalog are as that run left them: the run is passed over whole,
//! without a listing. No notice in the store (an older shipper) means a listing every run, as before.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use segmirror_transport::ObjectInfo;

use super::read::PartitionObjects;
use crate::report::{PartitionOutcome, PartitionReport};

/// How long a remembered partition may be skipped before a run looks at everything again, at least.
pub(crate) const FULL_RUN_INTERVAL: Duration = Duration::from_secs(30);

/// Full runs take at most one fiftieth of the time: after a full run that took `d` over `n` listed partitions, the
/// next one, over the `m` partitions listed now, is expected to take `d m / n` and is due after
/// `max(interval, 50 d m / n)`. With 10,000 partitions a full run costs about 4 s of CPU (every partition's catalog
/// rows and active manifest); every 30 s that was 13% of a core at rest, every 200 s it is 2%. Scaled by the
/// partitions because a catch-up's first full run lists the few partitions committed so far: unscaled, the next
/// came 30 s later over all of them, in the middle of a 10,000-partition catch-up.
const FULL_RUN_SHARE: u32 = 50;

type Tp = (String, i32);

#[derive(Debug)]
pub(crate) struct QuietPartitions {
    complete: HashMap<Tp, PartitionObjects>,
    last_full_run: Option<Instant>,
    interval: Duration,
    /// How long the last full run took, and how many partitions it listed (see [`FULL_RUN_SHARE`]).
    last_full_run_took: Duration,
    last_full_run_partitions: usize,
    /// How many partitions the last listing had.
    partitions_listed: usize,
    /// The share of time full runs may take, `None` for exactly `interval` (tests).
    share: Option<u32>,
    /// What the last run saw before its listing, if it left the link settled (see the module doc).
    settled: Option<Settled>,
    /// The link the last run that listed applied: whose notice the next run reads when none was named.
    link: Option<String>,
}

/// What a run read before its listing: the link's change notice and the catalog's `data_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Before {
    pub(crate) link: String,
    pub(crate) notice: ObjectInfo,
    pub(crate) data_version: i64,
}

#[derive(Debug)]
struct Settled {
    before: Before,
    /// Partitions that run listed: what a passed-over run reports as unchanged.
    partitions: usize,
}

impl Default for QuietPartitions {
    fn default() -> Self {
        QuietPartitions {
            share: Some(FULL_RUN_SHARE),
            ..QuietPartitions::with_interval(FULL_RUN_INTERVAL)
        }
    }
}

/// The partitions a run looks at, and what it skips.
pub(crate) struct Split {
    pub(crate) changed: BTreeMap<Tp, PartitionObjects>,
    /// The listing of each partition looked at, to remember it by if the run completes it.
    pub(crate) listed: HashMap<Tp, PartitionObjects>,
    pub(crate) skipped: usize,
    /// This run is a full one: nothing was skipped.
    pub(crate) full: bool,
}

impl QuietPartitions {
    pub(crate) fn with_interval(interval: Duration) -> Self {
        QuietPartitions {
            complete: HashMap::new(),
            last_full_run: None,
            interval,
            last_full_run_took: Duration::ZERO,
            last_full_run_partitions: 0,
            partitions_listed: 0,
            share: None,
            settled: None,
            link: None,
        }
    }

    /// Time between full runs: the interval, or longer when the next full run is expected to take long (see
    /// [`FULL_RUN_SHARE`]).
    fn full_run_interval(&self) -> Duration {
        match self.share {
            Some(share) => {
                let listed = u32::try_from(self.partitions_listed.max(1)).unwrap_or(u32::MAX);
                let per = u32::try_from(self.last_full_run_partitions.max(1)).unwrap_or(u32::MAX);
                let expected = self.last_full_run_took.saturating_mul(listed) / per;
                self.interval.max(expected.saturating_mul(share))
            }
            None => self.interval,
        }
    }

    /// Whether a run starting at `now` is to be a full one.
    fn full_run_due(&self, now: Instant) -> bool {
        self.last_full_run
            .is_none_or(|at| now.saturating_duration_since(at) >= self.full_run_interval())
    }

    /// A run ended that [`split`](Self::split) made a full one, `took` after it started.
    pub(crate) fn full_run_took(&mut self, took: Duration) {
        self.last_full_run_took = took;
    }

    /// The link whose notice to read before a run: the one the last run that listed applied.
    pub(crate) fn link(&self) -> Option<&str> {
        self.link.as_deref()
    }

    /// Whether the run about to start may be passed over whole (see the module doc), given what it read first:
    /// `Some(partitions unchanged)` if so.
    pub(crate) fn pass_over(&self, before: &Before, now: Instant) -> Option<usize> {
        match &self.settled {
            Some(settled) if !self.full_run_due(now) && settled.before == *before => Some(settled.partitions),
            _ => None,
        }
    }

    /// After a run that listed: whether it left the link settled. Only a run that read a notice first, passed the
    /// link's gate, and neither failed nor refused a partition does; anything else makes the next run list again.
    /// A failure may clear by itself (a full disk, a busy catalog), and a refusal by a hand that mends the bucket
    /// without a notice, so both are looked at again every run, as a full run would.
    pub(crate) fn settle(
        &mut self,
        link: &str,
        before: Option<Before>,
        reports: &[PartitionReport],
        partitions: usize,
    ) {
        self.link = Some(link.to_string());
        let unsettled = reports.iter().any(|r| {
            matches!(
                r.outcome,
                PartitionOutcome::Failed { .. } | PartitionOutcome::Refused(_)
            )
        });
        self.settled = match before {
            Some(before) if !unsettled => Some(Settled { before, partitions }),
            _ => None,
        };
    }

    /// A run that ended early (a skipped link, an error): the next one lists.
    pub(crate) fn unsettle(&mut self) {
        self.settled = None;
    }

    /// Split a run's listing into the partitions to look at and those remembered complete with the same listing.
    /// A full run is due every `interval` (longer after a full run that took long): then nothing is skipped.
    /// Partitions no longer listed are forgotten.
    pub(crate) fn split(&mut self, partitions: BTreeMap<Tp, PartitionObjects>, now: Instant) -> Split {
        self.partitions_listed = partitions.len();
        let full = self.full_run_due(now);
        if full {
            self.complete.clear();
            self.last_full_run = Some(now);
            self.last_full_run_partitions = partitions.len();
        }
        let mut remembered = std::mem::take(&mut self.complete);
        let mut split = Split {
            changed: BTreeMap::new(),
            listed: HashMap::new(),
            skipped: 0,
            full,
        };
        for (tp, objects) in partitions {
            match remembered.remove(&tp) {
                Some(before) if before == objects => {
                    self.complete.insert(tp, before);
                    split.skipped += 1;
                }
                _ => {
                    split.listed.insert(tp.clone(), objects.clone());
                    split.changed.insert(tp, objects);
                }
            }
        }
        split
    }

    /// After a run that finished: remember each partition it completed with the listing it saw.
    pub(crate) fn remember(&mut self, reports: &[PartitionReport], mut listed: HashMap<Tp, PartitionObjects>) {
        for r in reports {
            if r.outcome != PartitionOutcome::Complete {
                continue;
            }
            let tp = (r.topic.clone(), r.partition);
            if let Some(objects) = listed.remove(&tp) {
                self.complete.insert(tp, objects);
            }
        }
    }
}

#[cfg(test)]
#[path = "quiet_tests.rs"]
mod tests;
