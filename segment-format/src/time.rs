//! The wall clock, in Kafka's unit.
//!
//! Why one function: Kafka timestamps, catalog rows, promotion's retention prediction and abort-marker times are all
//! milliseconds since the Unix epoch; one definition keeps their edge cases (a clock before 1970, an overflow) the
//! same everywhere.

/// Milliseconds since the Unix epoch (0 for a clock before it, `i64::MAX` past the year 292 million).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
