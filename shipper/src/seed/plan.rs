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

/// See the module doc.
pub(crate) fn decide(shipped: Option<Version>, source: Version) -> Action {
    let Some(shipped) = shipped else {
        return Action::Ship;
    };
    if shipped.next > source.next {
        return Action::Diverged(Divergence::Truncated);
    }
    if shipped.next < source.next {
        return Action::Ship;
    }
    match (shipped.sealed, source.sealed) {
        (true, _) => Action::Skip,
        (false, true) => Action::Seal,
        (false, false) if shipped.log_size == source.log_size => Action::Skip,
        (false, false) => Action::Diverged(Divergence::Rewritten),
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
