//! Which partitions a round of the tail feed steps.
//!
//! Why: a step lists its partition's directory and reads the tail of its active segment on the blocking pool (about
//! a tenth of a millisecond), and the feed used to step every partition at every wake: each append the watcher
//! reported anywhere, each high-watermark move, each acknowledgement, every poll interval. With 10,000 partitions
//! at rest that kept a core busy (`tools/bench/partitions.sh`). Yet when the log-dir watcher follows a partition,
//! nothing of it changes without an event naming its directory ([`crate::source::watch`]: every event is derived
//! from listings, and its own rescan is the net under lost notifications), so a round steps a partition only when
//! one of these holds:
//! - it was never stepped, or was asked for again: new, sought, released by the session, a claim answered or
//!   revoked, the partitions this broker leads changed;
//! - its last step yielded an item: there may be more (a chunk ends at the chunk size, a seal follows the last
//!   chunk), and nothing else would say so;
//! - its last item is recent ([`ACTIVE_WINDOW`]): a partition being written is stepped every round, as before, so
//!   its appends are read as soon as anything wakes the feed, not only at the watcher's coalescing tick;
//! - the watcher named its directory since its last step (an append, a roll, a deletion, a cleaner's rewrite);
//! - its high watermark moved since its last step (with the high-watermark bound), or differs from the one last
//!   reported (progress reports);
//! - a move of its first segment waits for the next listing to confirm it (`super::log_start`);
//! - a progress report may be owed: a step came before the report interval was up, so what it saw (a log end
//!   above the bound, a grown segment) waits for the interval's end;
//! - its entry in the log dir's `log-start-offset-checkpoint` moved (a log start `DeleteRecords` moved inside a
//!   segment, which no file of the partition's directory shows): the watcher names the file, the feed reads it and
//!   asks for the partitions whose entry changed;
//! - the sweep: each partition is stepped at least every [`SWEEP_INTERVAL`] (jittered, at most [`SWEEP_PER_ROUND`]
//!   a round), the net for what no event named (a notification lost and not yet found by the watcher's rescan, a
//!   checkpoint unreadable when it changed).
//!
//! Without a watcher following the partition (none started, it stopped, or the topic joined a filter changed after
//! it started) every round steps it, the poll interval pacing the rounds, as before.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// How long after its last item a partition is stepped every round (1 s): while it is written to, the feed reads it
/// whenever it wakes (an acknowledgement, another partition's event), as it did when every round stepped everything.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(1);

/// Longest a followed partition goes without a step (120 s, jittered between one and one and a half times it): the
/// net for what no event named. Cost: 10,000 partitions swept every 150 s on average is about 70 steps a second.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(120);

/// Most partitions a round steps for the sweep alone (64): however their due times bunch, a round that also carries
/// active partitions never spends more than a few milliseconds on them.
pub const SWEEP_PER_ROUND: usize = 64;

/// A partition's wake state (part of its [`super::PartState`], carried through its step).
#[derive(Debug, Clone, Default)]
pub(super) struct Wake {
    /// Stepped since it was new or last asked for.
    stepped: bool,
    /// Its last step yielded an item.
    yielded: bool,
    /// When its last item was yielded.
    last_item: Option<Instant>,
    /// The high watermark read when its last step started.
    high_watermark: Option<i64>,
    /// The source's high-watermark change count when that was read (`None`: the source counts none).
    hw_version: Option<u64>,
    /// When the sweep steps it at the latest.
    sweep_at: Option<Instant>,
    /// Whether its topic matches the running watcher's filter (which never changes), once asked.
    watch_match: Option<bool>,
}

/// Why a round steps a partition, or does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// Something names it (new, asked for, active, an event, a high watermark).
    Step,
    /// Only the sweep: it counts against [`SWEEP_PER_ROUND`].
    Sweep,
    /// Nothing changed.
    Skip,
}

/// What the feed knows of a partition at the start of its turn in a round.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    /// The watcher follows the partition's directory.
    pub watched: bool,
    /// The watcher named the directory since the partition's last step.
    pub touched: bool,
    /// The high watermark now, if it was looked up ([`Wake::hw_unchanged`] says when it need not be).
    pub high_watermark: Option<Option<i64>>,
    /// The high watermark last reported in progress, if any was.
    pub reported: Option<Option<i64>>,
    /// With the high-watermark bound.
    pub bounded: bool,
    /// A progress report may be owed by now.
    pub report_owed: bool,
    /// A move of the first segment waits for confirmation.
    pub log_start_unconfirmed: bool,
}

impl Wake {
    /// Whether a round steps the partition now.
    pub(super) fn want(&self, seen: Seen, now: Instant) -> Want {
        if !seen.watched || !self.stepped || seen.touched || seen.report_owed || seen.log_start_unconfirmed {
            return Want::Step;
        }
        if self.yielded || self.last_item.is_some_and(|at| now.duration_since(at) < ACTIVE_WINDOW) {
            return Want::Step;
        }
        if seen.bounded && seen.high_watermark.is_some_and(|hw| hw != self.high_watermark) {
            return Want::Step;
        }
        // Not looked up: it stands where the last step started.
        let hw = seen.high_watermark.unwrap_or(self.high_watermark);
        if hw.is_some() && seen.reported.is_some_and(|reported| reported != hw) {
            return Want::Step;
        }
        if self.sweep_at.is_none_or(|at| now >= at) {
            return Want::Sweep;
        }
        Want::Skip
    }

    /// Whether the high watermark cannot have moved since the last step started: the source counts its changes and
    /// the count is the one read then.
    pub(super) fn hw_unchanged(&self, version: Option<u64>) -> bool {
        self.stepped && version.is_some() && version == self.hw_version
    }

    /// A step starts with the high watermark `high_watermark`, read at the source's change count `version`.
    pub(super) fn starting(&mut self, high_watermark: Option<i64>, version: Option<u64>) {
        self.high_watermark = high_watermark;
        self.hw_version = version;
    }

    /// The step ended at `now`, with an item or not.
    pub(super) fn stepped(&mut self, yielded: bool, now: Instant) {
        self.stepped = true;
        self.yielded = yielded;
        if yielded {
            self.last_item = Some(now);
        }
        self.sweep_at = Some(now + jittered(SWEEP_INTERVAL));
    }

    /// Whether its topic matches the running watcher's filter: `matches` the first time, remembered after (a
    /// regular expression per partition per round was a third of an idle feed's time at 10,000 partitions).
    pub(super) fn matched(&mut self, matches: impl FnOnce() -> bool) -> bool {
        *self.watch_match.get_or_insert_with(matches)
    }

    /// The high watermark read when the last step started.
    pub(super) fn high_watermark(&self) -> Option<i64> {
        self.high_watermark
    }

    /// Stepped in the next round, whatever else holds.
    pub(super) fn ask(&mut self) {
        self.stepped = false;
    }
}

/// `interval` plus a random part of up to half of it, so that partitions stepped together at the start do not all
/// come due in the same round ever after.
fn jittered(interval: Duration) -> Duration {
    let random = RandomState::new().hash_one(0u8);
    let half = interval.as_millis() as u64 / 2;
    interval + Duration::from_millis(random % half.max(1))
}

#[cfg(test)]
#[path = "wake_tests.rs"]
mod tests;
