//! Progress callbacks, so a front end can draw a bar with an ETA.
//!
//! The applier plans every partition before it installs anything, so the totals are known up front: [`Progress::planned`]
//! is called once per partition with what its plan will fetch at most, then [`Progress::advance`] as bytes arrive (or
//! are found on disk already) and [`Progress::segment_done`] per installed version. Called from the applier's task;
//! implementations must be cheap.

/// Told about progress.
pub trait Progress: Send + Sync {
    /// A partition's plan will install `segments` versions totalling at most `bytes` bytes.
    fn planned(&self, _segments: u64, _bytes: u64) {}
    /// `bytes` more bytes were downloaded or reused.
    fn advance(&self, _bytes: u64) {}
    /// One segment version was installed (or turned down, or the partition stopped before it).
    fn segment_done(&self) {}
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
