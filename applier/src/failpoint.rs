//! Kill points inside the install protocol, compiled only with the `failpoints` feature (the crash tests enable it).
//!
//! A crash test arms one point; when the applier reaches it, [`hit`] returns [`Injected`] (which the crate error wraps; this module imports nothing of the crate) and the run stops
//! right there, exactly as if the process had died: no cleanup runs on the way out (the applier never cleans up on
//! error paths it could not also recover from after a real crash). The next run must then finish the job from the
//! state on disk and in the catalog. Like raft-engine's failpoints, this stays out of production builds.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Where in the install of one segment version to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPoint {
    /// Every file is downloaded and validated in staging; nothing renamed.
    AfterStaging,
    /// The `n`-th (1-based) file of the version has been renamed into the partition directory.
    AfterRename(u32),
    /// Every file is in place and fsynced, the leader-epoch checkpoint written; the catalog not yet told.
    BeforeCatalog,
    /// A tail truncation (`tail::truncate`): its journal written, nothing else.
    TruncateJournaled,
    /// A tail truncation: the archive durable, the mirror not cut.
    TruncateArchived,
    /// A tail truncation: the mirror cut, the catalog not told.
    TruncateCut,
    /// A tail truncation: the catalog told, the state file not.
    TruncateRecorded,
    /// A promotion handing files over by rename: one file of a segment was renamed from the mirror into staging
    /// (or found absent, for an optional index); `nth` counts them over the run.
    HandoverRenamed,
    /// A promotion handing files over by rename: a renamed `.log` was restamped in place.
    HandoverRestamped,
    /// A promotion handing over a segment a consistent cut falls inside: its `.log` was truncated at the cut and its
    /// companions cut back, not yet restamped.
    HandoverCutBack,
    /// The tail appender (`direct`): a chunk's bytes were written to its `.log`, not fsynced; nothing else.
    TailChunkWritten,
    /// The tail appender: a chunk's `.txnindex` entries were made durable and its index entries written.
    TailCompanionsWritten,
    /// The tail appender: a group's `.log`s were fsynced; no state recorded.
    TailGroupSynced,
    /// The tail appender: a partition's state (position and kept facts) was recorded.
    TailRecorded,
}

/// A kill point fired: the run must stop here, as if the process had died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("failpoint {0:?} hit")]
pub struct Injected(pub FailPoint);

/// An armed kill point: fires at the `nth` (1-based) time `point` is reached, once.
#[derive(Debug)]
pub struct Armed {
    point: FailPoint,
    nth: u32,
    seen: AtomicU32,
    fired: Mutex<bool>,
}

impl Armed {
    pub fn new(point: FailPoint, nth: u32) -> Self {
        Armed {
            point,
            nth: nth.max(1),
            seen: AtomicU32::new(0),
            fired: Mutex::new(false),
        }
    }

    /// Whether the point fired.
    pub fn fired(&self) -> bool {
        *self.fired.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Fail with [`Injected`] if `armed` is set for `point` and this is its `nth` arrival.
pub(crate) fn hit(armed: Option<&Armed>, point: FailPoint) -> Result<(), Injected> {
    let Some(armed) = armed else { return Ok(()) };
    if armed.point != point {
        return Ok(());
    }
    let seen = armed.seen.fetch_add(1, Ordering::SeqCst) + 1;
    if seen == armed.nth {
        *armed.fired.lock().unwrap_or_else(|p| p.into_inner()) = true;
        return Err(Injected(point));
    }
    Ok(())
}
