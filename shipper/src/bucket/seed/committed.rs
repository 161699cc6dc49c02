//! Committed records only through a bucket (`segmirror ship --store --upto high-watermark`): a version of a segment
//! is uploaded only once the source's high watermark covers its last offset.
//!
//! Why a gate on the version and not a bound inside it: a round prepares a version exactly as `seed` does (the
//! active segment up to its last complete batch, verified, indexed, hashed), and that preparation is shared by the
//! one-shot seed, the incremental rounds and the seed's memory; cutting it at an offset would mean a second way of
//! deriving every field a manifest carries. The high watermark follows the log end within a replication round trip,
//! so instead the round waits — for the version it prepared, a fixed offset — until the source says it is
//! committed ([`CommittedOnly::wait`], at most [`COMMITTED_WAIT`]). Nothing of the version has left the machine
//! before that; if the watermark does not get there in time (replication stalled, the partition not led by the
//! asked broker), the partition ends the round as [`FailureKind::NotCommitted`](super::FailureKind::NotCommitted),
//! uploads nothing, and a later round prepares it again.
//!
//! Where the high watermark comes from is the direct tail's seam, reused: [`HighWatermarkSource`] with
//! [`bound`]/[`Bound::admits`] ([`crate::source::bound_hw`]); the command line gives the long-polling `Fetch`
//! source ([`crate::source::fetch_hw`], `--source-bootstrap`), a round trip behind the broker. (The checkpoint file lags by seconds: a version would
//! wait that long each round.)

use std::sync::Arc;
use std::time::Duration;

use crate::source::bound_hw::{bound, Bound, HighWatermarkSource, UptoPolicy};

/// Longest a prepared version waits for the high watermark (5 s): the source's followers fetch within
/// `replica.fetch.wait.max.ms` (500 ms) and the `ListOffsets` source answers every 50 ms, so a healthy partition
/// admits a version in well under a second; a partition whose watermark stays behind that long has a replication
/// problem, and its version is better prepared again (longer) at a later round than held.
pub const COMMITTED_WAIT: Duration = Duration::from_secs(5);

/// How often the high watermark is looked at again while a version waits, for a source that does not announce its
/// changes ([`HighWatermarkSource::changes`]).
const RECHECK: Duration = Duration::from_millis(20);

/// Upload committed records only (see the module doc).
#[derive(Clone)]
pub struct CommittedOnly {
    source: Arc<dyn HighWatermarkSource>,
    wait: Duration,
}

impl std::fmt::Debug for CommittedOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommittedOnly")
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// What [`CommittedOnly::wait`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The high watermark is above the version's last offset.
    Committed,
    /// It was not, by the deadline: the last bound seen.
    NotYet(Bound),
}

impl CommittedOnly {
    pub fn new(source: Arc<dyn HighWatermarkSource>) -> Self {
        CommittedOnly {
            source,
            wait: COMMITTED_WAIT,
        }
    }

    /// Wait at most `wait` (instead of [`COMMITTED_WAIT`]).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Wait until the high watermark of `topic`-`partition` is above `last_offset`, at most the configured wait.
    pub async fn wait(&self, topic: &str, partition: i32, last_offset: i64) -> Admission {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut changes = self.source.changes();
        loop {
            let source = self.source.clone();
            // A checkpoint source re-reads its files here (blocking I/O); a ListOffsets source does nothing.
            let _ = tokio::task::spawn_blocking(move || source.refresh()).await;
            let now = bound(UptoPolicy::HighWatermark, self.source.as_ref(), topic, partition);
            if now.admits(last_offset) {
                return Admission::Committed;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Admission::NotYet(now);
            }
            match changes.as_mut() {
                Some(rx) => {
                    // Announced changes wake the wait at once; the bound keeps a missed one from costing more.
                    let _ = tokio::time::timeout(left.min(RECHECK * 5), rx.changed()).await;
                }
                None => tokio::time::sleep(left.min(RECHECK)).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::SystemTime;

    use super::*;
    use crate::source::bound_hw::HighWatermark;

    #[derive(Default)]
    struct Fixed(Mutex<HashMap<(String, i32), i64>>);

    impl Fixed {
        fn set(&self, hw: i64) {
            self.0.lock().unwrap().insert(("t".into(), 0), hw);
        }
    }

    impl HighWatermarkSource for Fixed {
        fn high_watermark(&self, topic: &str, partition: i32) -> Option<HighWatermark> {
            self.0
                .lock()
                .unwrap()
                .get(&(topic.to_string(), partition))
                .map(|&offset| HighWatermark {
                    offset,
                    as_of: SystemTime::now(),
                })
        }
    }

    #[tokio::test]
    async fn a_version_waits_for_the_high_watermark_to_pass_its_last_offset() {
        let source = Arc::new(Fixed::default());
        let gate = CommittedOnly::new(source.clone()).with_wait(Duration::from_millis(100));
        // Unknown: nothing is admitted.
        assert_eq!(gate.wait("t", 0, 0).await, Admission::NotYet(Bound::Unknown));
        source.set(10);
        assert_eq!(gate.wait("t", 0, 9).await, Admission::Committed);
        // The high watermark is exclusive: offset 10 is not committed yet.
        assert_eq!(gate.wait("t", 0, 10).await, Admission::NotYet(Bound::Below(10)));
        // A watermark that moves while the version waits admits it.
        let later = source.clone();
        let mover = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            later.set(20);
        });
        let gate = gate.with_wait(Duration::from_secs(5));
        assert_eq!(gate.wait("t", 0, 15).await, Admission::Committed);
        mover.await.unwrap();
    }
}
