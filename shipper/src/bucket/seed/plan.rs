//! What to do with one source segment given what the bucket already holds for
//! its base offset: the whole resume logic of a seed as one pure function,
//! [`decide`], so every case is a line in a table test.
//!
//! The rules come from two facts. Data keys include `[base, next)`, so a
//! version with a new `next` goes to new keys and never overwrites bytes a
//! committed manifest points at — but a version with the *same* range would.
//! And a segment's offsets only grow while the broker appends, so a source
//! whose `next` is below what was shipped has lost offsets the bucket has.
//!
//! | bucket has         | source is            | action |
//! |--------------------|----------------------|--------|
//! | nothing            | anything             | ship |
//! | next > source next | anything             | diverged (truncated at the source) |
//! | next < source next | anything             | ship (the active segment grew, was sealed, or the cleaner merged segments into this one) |
//! | same range, sealed | anything             | skip (already shipped; a later in-place compaction of a sealed segment is not re-shipped: the shipped version is an equally valid, less compacted, copy) |
//! | same range, unsealed | sealed             | seal: commit the same objects again as sealed (the shipped active prefix *is* the whole segment) |
//! | same range, unsealed | unsealed, same size | skip (the active segment has not grown) |
//! | same range, unsealed | unsealed, other size | diverged (same offsets, different bytes: truncated and rewritten) |
//!
//! The relationship is judged by the one succession rule ([`segmirror_transport::succession`]); this module maps
//! its verdict to the shipper's action.

/// A segment version, as far as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version {
    /// Exclusive end of the offsets the version holds.
    pub next: i64,
    pub sealed: bool,
    /// Bytes of its `.log` (for an active segment: up to the last complete batch).
    pub log_size: u64,
}

/// Why the source no longer matches the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Divergence {
    /// The source ends below what was shipped.
    Truncated,
    /// Same offsets, different bytes.
    Rewritten,
}

impl Divergence {
    pub fn describe(self) -> &'static str {
        match self {
            Divergence::Truncated => {
                "the source segment ends below what the bucket holds: the source was truncated (unclean leader \
                 election or a replica reset); the shipped offsets are not overwritten"
            }
            Divergence::Rewritten => {
                "the source holds different bytes for the offsets already shipped: it was truncated and rewritten; \
                 the shipped version is not overwritten"
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Upload the version and commit its manifest.
    Ship,
    /// The bucket already has it.
    Skip,
    /// Re-commit the shipped (unsealed) objects with `sealed: true`.
    Seal,
    /// Stop the partition and report.
    Diverged(Divergence),
}

/// See the module doc. The rule itself is [`segmirror_transport::succession`]; this maps its verdict for one
/// bucket version against the source's version of the same base (content known by size only).
pub(crate) fn decide(shipped: Option<Version>, source: Version) -> Action {
    use segmirror_transport::succession::{self, succession, Content, Verdict};
    let Some(shipped) = shipped else {
        return Action::Ship;
    };
    // Both versions have the same base; the rule compares ranges by their `next`, so any base does.
    let at_base = |v: Version| succession::Version::new(0, v.next, v.sealed, Content::of_size(v.log_size));
    match succession(&[at_base(shipped)], &at_base(source), 0) {
        Verdict::Same => Action::Skip,
        // Same range, same size, now sealed: the shipped active prefix is the whole segment.
        Verdict::Replaces { previous_next_offset } if previous_next_offset == source.next => Action::Seal,
        // Longer: new keys, nothing committed is overwritten (also over a sealed version: the cleaner merged).
        Verdict::Replaces { .. } | Verdict::SealedGrown { .. } => Action::Ship,
        // A sealed segment compacted in place: the shipped version is an equally valid, less compacted, copy.
        Verdict::Rewritten { previous_sealed: true } => Action::Skip,
        Verdict::Rewritten { .. } if source.sealed => Action::Seal,
        Verdict::Rewritten { .. } => Action::Diverged(Divergence::Rewritten),
        Verdict::Truncated { .. } => Action::Diverged(Divergence::Truncated),
        // One version at the same base yields none of these; stop and report rather than guess.
        Verdict::LineageBreak
        | Verdict::First
        | Verdict::GrowsUnderSuccessor { .. }
        | Verdict::BeforeStart { .. }
        | Verdict::Covered { .. }
        | Verdict::Overlap { .. }
        | Verdict::Next
        | Verdict::AwaitsSeal { .. }
        | Verdict::RetentionGap { .. }
        | Verdict::OffsetGap { .. }
        | Verdict::EpochRegression { .. } => Action::Diverged(Divergence::Rewritten),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(next: i64, sealed: bool, log_size: u64) -> Version {
        Version { next, sealed, log_size }
    }

    #[test]
    fn the_table() {
        use Action::*;
        let cases = [
            (None, v(10, true, 100), Ship),
            (None, v(0, false, 0), Ship),
            (Some(v(10, true, 100)), v(10, true, 100), Skip),
            (Some(v(10, true, 100)), v(10, true, 60), Skip),
            (Some(v(10, true, 100)), v(10, false, 100), Skip),
            (Some(v(10, true, 100)), v(20, true, 200), Ship),
            (Some(v(10, true, 100)), v(8, true, 80), Diverged(Divergence::Truncated)),
            (
                Some(v(10, false, 100)),
                v(8, false, 80),
                Diverged(Divergence::Truncated),
            ),
            (Some(v(10, false, 100)), v(10, true, 100), Seal),
            (Some(v(10, false, 100)), v(10, true, 70), Seal),
            (Some(v(10, false, 100)), v(10, false, 100), Skip),
            (
                Some(v(10, false, 100)),
                v(10, false, 90),
                Diverged(Divergence::Rewritten),
            ),
            (Some(v(10, false, 100)), v(12, false, 120), Ship),
            (Some(v(10, false, 100)), v(12, true, 120), Ship),
            (Some(v(5, false, 0)), v(5, false, 0), Skip),
        ];
        for (shipped, source, expected) in cases {
            assert_eq!(decide(shipped, source), expected, "{shipped:?} vs {source:?}");
        }
    }

    #[test]
    fn never_overwrites_a_committed_range_with_different_bytes() {
        // Property: whenever the action uploads (Ship), the range differs from the shipped one.
        for shipped_next in 0..6 {
            for source_next in 0..6 {
                for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
                    for size in [0, 1] {
                        let shipped = v(shipped_next, a, 0);
                        let source = v(source_next, b, size);
                        if decide(Some(shipped), source) == Action::Ship {
                            assert!(source_next > shipped_next);
                        }
                    }
                }
            }
        }
    }
}
