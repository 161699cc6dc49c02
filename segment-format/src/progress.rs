//! The one progress observer of the workspace: `verify`, `seed` and `apply` report through it, a front end draws a
//! bar from it, and metrics will count from it.
//!
//! Why one trait: each command used to define its own, so a bar (and later a metrics exporter) had to be written
//! once per command. Every method has a no-op default, so an observer implements only what it shows, and a command
//! calls only the events it has. Called from the working tasks/threads: implementations must be cheap and must not
//! block.
//!
//! What each command reports:
//! - `verify`: [`Progress::advance`] per chunk of `.log` bytes scanned.
//! - `seed`: [`Progress::planned`] once after discovery (every selected segment), [`Progress::advance`] and
//!   [`Progress::segment_done`] per segment shipped or found already shipped.
//! - `apply`: [`Progress::planned`] once per partition plan, [`Progress::advance`] as bytes are downloaded or
//!   reused, [`Progress::segment_done`] per version installed, turned down, or not reached.

/// Told about progress. Totals from [`Progress::planned`] add up over calls.
pub trait Progress: Send + Sync {
    /// `segments` more segments totalling at most `bytes` bytes are planned.
    fn planned(&self, _segments: u64, _bytes: u64) {}
    /// `bytes` more bytes were processed (scanned, shipped, downloaded or found done already).
    fn advance(&self, _bytes: u64) {}
    /// One more segment is done (or turned down, or will not be reached).
    fn segment_done(&self) {}
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
