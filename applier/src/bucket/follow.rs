//! Follow mode (`segmirror apply --store URL --follow`): keep installing what a continuous shipper
//! (`segmirror ship --store`) commits to the bucket, until told to stop.
//!
//! Why a loop of ordinary runs: each run is the batch applier's whole path — list, read only the manifests the
//! catalog has not settled, plan with the succession rule, and install every new version after checking every
//! chunk (size, SHA-256, CRC-32C, batches, offsets: `install::chunks`) — so a followed mirror is the same mirror a
//! rerun of `apply` builds, recorded the same way, and a refusal names the same key and field. What follow mode
//! adds:
//!
//! - **The lock is held for the whole run** (as `apply --listen` does), taken once before the first run; runs do not
//!   take it again. A second applier on the same mirror is refused (or waits, with `--wait`) for as long as the
//!   follower runs.
//! - **Polling** every [`FollowConfig::poll_interval`] ([`DEFAULT_POLL_INTERVAL`]): a bucket has no notifications
//!   both S3 and a local folder offer, and a listing of one link's manifests is one request per 1,000 keys. After
//!   a run that listed, the next waits at least [`LISTING_SHARE`] times the listing's time (up to
//!   [`MAX_LISTING_PAUSE`]), so a link of many partitions is not listed back to back.
//! - **Read-only on the bucket, by type**: the applier holds the store as a `SegmentSource` (list, read, receive),
//!   which has no method that writes; any number of followers, each with its own mirror and catalog, can follow
//!   one bucket (fan-out) without coordinating.
//! - **A stop between runs**: the shutdown future is looked at only between runs, so a signal never interrupts an
//!   install (which is crash-safe anyway: staging, rename, catalog last).
//!
//! The link's state is read by every run: a paused link installs nothing until resumed (each run reports it
//! skipped), a promoted or deleted one ends the follower ([`Error::LinkClosed`]).
//!
//! A link the store does not hold yet (the follower started before the shipper's first commit) is waited for, with
//! a note in the run's report, not an error.
//!
//! A refused version stops its partition in that run, as in `apply`; the next run tries again (a shipper may commit
//! a newer version that supersedes it), and the caller reports a refusal once, not every poll.
//!
//! Cost per run: a follower's applier appends (`Applier::appending`, `install::append`): a grown active segment's
//! new chunks are checked and appended to the installed `.log` in place, its prefix proven once per process and
//! kept, so a run costs the listing, the unsettled manifests and the new chunks — not the segment. Versions the
//! append path does not take (a seal, a transaction index, another index interval) are installed through staging
//! as by `apply`.

use std::future::Future;
use std::time::Duration;

use segmirror_catalog::Catalog;

use super::apply::{Applier, ApplyConfig, RunLock};
use crate::error::{Error, Result};
use crate::lock::LockWait;
use crate::mirror::MirrorLayout;
use crate::report::{ApplyReport, SkipReason};
use segment_format::progress::NoProgress;

/// Default time between two runs of a follower (250 ms): half the shipper's default upload interval (500 ms), so a
/// committed version waits a quarter of a second on average before it is looked for — well inside the 2 s p99 the
/// object-store tail is meant to reach — while a follower idles at four listings a second (S3 LIST requests are
/// priced per thousand; four a second is ~350k a day per follower, a few dollars' worth at AWS list prices).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// A follower waits at least this many times as long as its last listing of the store took before the next run,
/// so listings take at most a tenth of its time whatever the number of partitions. A listing of 10,000 partitions'
/// objects takes tens of milliseconds: every 250 ms, while the shipper's notice kept changing, that alone was a
/// quarter of a core, and during a catch-up one listing per run grew with the partitions and with the runs.
pub const LISTING_SHARE: u32 = 10;

/// The longest wait [`LISTING_SHARE`] may make (a slow store's listing is mostly waiting, not work, and a follower
/// should still see a commit within a couple of seconds).
pub const MAX_LISTING_PAUSE: Duration = Duration::from_secs(2);

/// How a follower runs.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// What each run applies (store, prefix, link, mirror root, validation depth, `--wait` for the lock).
    pub apply: ApplyConfig,
    /// [`DEFAULT_POLL_INTERVAL`].
    pub poll_interval: Duration,
}

impl FollowConfig {
    pub fn new(apply: ApplyConfig) -> Self {
        FollowConfig {
            apply,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }
}

/// What a follower did, for its caller's last line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FollowStats {
    pub runs: u64,
    pub segments_installed: u64,
    pub bytes_fetched: u64,
}

/// Follow the bucket (see the module doc) until `shutdown` completes. `on_run` sees every run's report (for logs).
/// Fails when a run cannot apply anything at all (the mirror root, the lock, the catalog, the store listing after
/// its retries): the caller exits non-zero, and a restart continues from the catalog.
pub async fn follow(
    config: &FollowConfig,
    catalog: Catalog,
    shutdown: impl Future<Output = ()>,
    mut on_run: impl FnMut(&ApplyReport),
) -> Result<FollowStats> {
    // A zero interval would list the bucket in a busy loop; the command line refuses it, a library caller gets 1 ms.
    let poll_interval = config.poll_interval.max(Duration::from_millis(1));
    let root = config.apply.mirror_root().to_path_buf();
    let wait = match config.apply.lock {
        RunLock::Take(wait) => wait,
        // Not built by `ApplyConfig`'s API; the follower takes the lock for all its runs all the same.
        RunLock::HeldByCaller => LockWait::Fail,
    };
    let _lock = tokio::task::spawn_blocking(move || -> Result<_> {
        let layout = MirrorLayout::open(&root)?;
        Ok(crate::lock::lock_mirror(layout.root(), wait)?)
    })
    .await
    .map_err(|e| Error::task("lock the mirror", e))??;
    let mut apply = config.apply.clone();
    apply.lock = RunLock::HeldByCaller;
    let mut applier = Applier::new(apply, catalog).appending();
    let mut stats = FollowStats::default();
    tokio::pin!(shutdown);
    loop {
        let report = match applier.run(&NoProgress).await {
            Ok(report) => report,
            // A follower may start before the shipper's first commit: the link is not in the store yet. It waits
            // (the caller shows the note, so a mistyped link is visible), rather than exit as a one-shot apply.
            Err(e @ Error::UnknownLink { .. }) => ApplyReport {
                notes: vec![format!("waiting: {e}")],
                ..ApplyReport::default()
            },
            Err(e) => return Err(e),
        };
        // A pause is honoured by each run (it installs nothing and says so); promotion and deletion are final.
        let closed = match report.link_skipped {
            Some(SkipReason::LinkPromoted) => Some("promoted"),
            Some(SkipReason::LinkDeleted) => Some("deleted"),
            _ => None,
        };
        if let Some(state) = closed {
            on_run(&report);
            return Err(Error::LinkClosed {
                link: report.link.clone().unwrap_or_default(),
                state: state.to_string(),
            });
        }
        stats.runs += 1;
        stats.segments_installed += report.segments_installed() as u64;
        stats.bytes_fetched += report.bytes_fetched();
        on_run(&report);
        let pause = poll_interval.max(
            applier
                .last_listing_took()
                .saturating_mul(LISTING_SHARE)
                .min(MAX_LISTING_PAUSE),
        );
        tokio::select! {
            () = &mut shutdown => return Ok(stats),
            () = tokio::time::sleep(pause) => {}
        }
    }
}
