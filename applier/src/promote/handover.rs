//! Handing a mirror partition's files over to the broker's log dir by rename (`--handover rename|auto`).
//!
//! Why: a copy makes failover time grow with the data (7–23 s of a 31–53 s end-to-end run for 4 GiB;
//! docs/BENCHMARKS.md).
//! When the mirror root and the log dir share a file system, each file is renamed from the mirror partition into
//! the partition being built in staging, and the `.log`s are restamped in place (`kcopy::restamp_in_place`: one
//! header touched per batch). Everything else of the build is unchanged: new companions are written next to the
//! moved files, and the `.building` directory is made durable and then live as for a copy.
//!
//! Crash safety: a rename moves a file atomically, so after a crash each journaled file is in exactly one of the
//! two places (or, on a file system that kept both names, in both, which is the same inode). A rerun of a
//! handover build therefore never removes `.building` (it may hold the only copy); it moves what is still in the
//! mirror, keeps what is already moved, and redoes the rest of the build, every step of which is idempotent:
//! restamping writes the same four bytes again, the companions are rewritten whole. The one step that is not —
//! abort markers appended to the last segment when a transaction is cut — is made so where the plan knows the
//! segment's size (a tailed partition's journaled record): a rerun cuts the handed-over `.log` back to that size
//! and appends the same journaled markers again (`build`, D0054). A segment a consistent cut falls inside is handed
//! over too and cut back to the journaled bytes, its companions' entries after the cut removed (a rerun cuts back
//! again, a no-op, and appends the same markers). Without a known size that segment's files are **copied**
//! instead (rebuilt from the mirror's untouched bytes on a rerun), so such a partition hands over all but its last
//! segment. The bytes after a cut are not kept anywhere: the mirror gave the segment up, and only the segments
//! wholly after the cut stay in it.
//!
//! The catalog records the log dir the files went to (`Catalog::set_handed_over`; `segmirror status` shows it),
//! and the partition is promoted, so a later `apply` never writes it again. A mirror partition directory that holds
//! only what the build takes or replaces (the planned segments, the leader-epoch checkpoint, `partition.metadata`,
//! snapshots) goes over whole by one rename, and its snapshots are removed in staging (`build::hand_over_directory`);
//! one that holds more keeps what promotion does not take.

use std::path::Path;

use super::error::{Error, Result};

/// Move `from` (a file of the mirror) to `to` (in `.building`) unless that already happened: `Ok(true)` when the
/// file is now at `to`, `Ok(false)` when it is in neither place (an optional file the segment never had).
pub(super) fn hand_over_file(from: &Path, to: &Path) -> Result<bool> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::symlink_metadata(to) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(to, e)),
        },
        Err(e) => Err(Error::io(from, e)),
    }
}

/// Crash-test kill points inside a handover build (the step hook lives on the calling thread; builds run on
/// workers). Compiled to nothing without the `failpoints` feature.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KillSwitch<'a> {
    #[cfg(feature = "failpoints")]
    armed: Option<&'a crate::failpoint::Armed>,
    #[cfg(not(feature = "failpoints"))]
    _none: std::marker::PhantomData<&'a ()>,
}

impl<'a> KillSwitch<'a> {
    pub(super) fn of(request: &'a super::PromoteRequest) -> Self {
        #[cfg(feature = "failpoints")]
        {
            KillSwitch {
                armed: request.failpoint.as_deref(),
            }
        }
        #[cfg(not(feature = "failpoints"))]
        {
            let _ = request;
            KillSwitch::default()
        }
    }

    /// A file was handed over (renamed into `.building`).
    pub(super) fn renamed(&self) -> Result<()> {
        #[cfg(feature = "failpoints")]
        {
            crate::failpoint::hit(self.armed, crate::failpoint::FailPoint::HandoverRenamed)
                .map_err(|i| Error::Injected(i.0))?;
        }
        Ok(())
    }

    /// A handed-over segment a consistent cut falls inside was cut back.
    pub(super) fn cut_back(&self) -> Result<()> {
        #[cfg(feature = "failpoints")]
        {
            crate::failpoint::hit(self.armed, crate::failpoint::FailPoint::HandoverCutBack)
                .map_err(|i| Error::Injected(i.0))?;
        }
        Ok(())
    }

    /// A handed-over `.log` was restamped in place.
    pub(super) fn restamped(&self) -> Result<()> {
        #[cfg(feature = "failpoints")]
        {
            crate::failpoint::hit(self.armed, crate::failpoint::FailPoint::HandoverRestamped)
                .map_err(|i| Error::Injected(i.0))?;
        }
        Ok(())
    }
}
