//! `--max-bandwidth`: a token bucket over the shipper's payload bytes.
//!
//! Why a bucket of our own rather than a rate-limiting crate: the shipper does
//! not wait inside the limiter; its session loop asks *when* the next item may
//! go ([`TokenBucket::ready_at`]) and keeps reading Acks and heartbeats until
//! then, which the waiting APIs of the common crates do not offer. The bucket
//! is a dozen lines of arithmetic.
//!
//! The bucket holds at most one second of tokens ([`BURST`]), so after an idle
//! period the link gets at most a second's worth in a burst. An item larger
//! than the bucket goes when the bucket is full and drives it negative (a debt
//! repaid before the next item), so a chunk larger than a second's allowance
//! is never stuck.

use std::time::Duration;

use tokio::time::Instant;

/// The bucket's depth in seconds of the rate: a burst after idleness is at most this long.
pub const BURST: Duration = Duration::from_secs(1);

/// A token bucket of `rate` bytes per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    /// Tokens at `at`; negative while a large item is being paid off.
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket of `rate` bytes per second (`rate` > 0).
    pub fn new(rate: u64) -> TokenBucket {
        let rate = rate.max(1) as f64;
        let capacity = rate * BURST.as_secs_f64();
        TokenBucket {
            rate,
            capacity,
            tokens: capacity,
            at: Instant::now(),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
        self.at = now;
    }

    /// When `bytes` may be sent: now, or later when enough tokens have accumulated
    /// (a full bucket for an item larger than the bucket).
    pub fn ready_at(&mut self, bytes: u64) -> Instant {
        let now = Instant::now();
        self.refill(now);
        let need = (bytes as f64).min(self.capacity);
        if self.tokens >= need {
            now
        } else {
            now + Duration::from_secs_f64((need - self.tokens) / self.rate)
        }
    }

    /// Takes `bytes` tokens (call when sending, after [`TokenBucket::ready_at`] said now).
    pub fn take(&mut self, bytes: u64) {
        self.refill(Instant::now());
        self.tokens -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_bucket_paces_sends_at_its_rate() {
        let mut bucket = TokenBucket::new(1000);
        let start = Instant::now();
        // A full bucket: one second's worth goes at once.
        assert_eq!(bucket.ready_at(1000), start);
        bucket.take(1000);
        // Then 500 bytes take half a second of refill.
        assert_eq!(bucket.ready_at(500), start + Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(bucket.ready_at(500) <= Instant::now());
        bucket.take(500);
        // An item larger than the bucket waits for a full bucket, then goes into debt.
        let at = bucket.ready_at(5000);
        assert_eq!(at, Instant::now() + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        bucket.take(5000);
        assert_eq!(bucket.ready_at(1000), Instant::now() + Duration::from_secs(5));
    }
}
