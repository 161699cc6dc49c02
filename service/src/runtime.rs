//! The process's one tokio runtime, built in one place.
//!
//! Why lazily: `main` creates one [`Runtime`] and hands it to every command that may run async work (`seed`,
//! `apply`, `demo`, `verify` of a store); the multi-thread runtime is built on the first [`Runtime::block_on`], so a
//! command that turns out to need none (`verify` of local paths only) never starts worker threads, and a command
//! that blocks on several futures (`seed`: leftovers then the seed; `verify`: one audit per store) reuses the same
//! runtime instead of building one per call.

use std::future::Future;
use std::sync::OnceLock;

use anyhow::Context as _;

/// The process's async runtime, built on first use.
#[derive(Default)]
pub struct Runtime {
    tokio: OnceLock<tokio::runtime::Runtime>,
}

impl Runtime {
    /// A runtime not built yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `future` to completion on the runtime, building it first if this is the first call.
    pub fn block_on<F: Future>(&self, future: F) -> anyhow::Result<F::Output> {
        Ok(self.tokio()?.block_on(future))
    }

    fn tokio(&self) -> anyhow::Result<&tokio::runtime::Runtime> {
        if let Some(built) = self.tokio.get() {
            return Ok(built);
        }
        let built = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(self.tokio.get_or_init(|| built))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_is_built_on_first_use_and_reused() {
        let runtime = Runtime::new();
        assert!(runtime.tokio.get().is_none(), "nothing is built before the first use");
        assert_eq!(runtime.block_on(async { 1 + 1 }).unwrap(), 2);
        let first: *const tokio::runtime::Runtime = runtime.tokio.get().unwrap();
        // A task spawned on the runtime of the first call is run by the second: the same runtime runs both.
        let handle = runtime.block_on(async { tokio::runtime::Handle::current() }).unwrap();
        let task = handle.spawn(async { 7 });
        assert_eq!(runtime.block_on(task).unwrap().unwrap(), 7);
        assert!(std::ptr::eq(first, runtime.tokio.get().unwrap()));
    }
}
