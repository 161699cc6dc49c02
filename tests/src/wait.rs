//! Polling with a deadline, for broker-side background work (log cleaner, retention) that has no completion event.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// Calls `check` every `every` until it returns `Ok(Some(v))` (→ `Ok(v)`), an error (→ that error), or `timeout`
/// passes (→ an error naming `what`).
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(every);
    }
}
