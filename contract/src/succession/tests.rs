use proptest::prelude::*;

use super::*;

/// `[base, next)` with content `c` (its size), sealed or not.
fn v(base: i64, next: i64, sealed: bool, c: u64) -> Version {
    Version::new(base, next, sealed, Content::of_size(c))
}

fn sealed(base: i64, next: i64) -> Version {
    v(base, next, true, 0)
}

fn open(base: i64, next: i64) -> Version {
    v(base, next, false, 0)
}

fn gap(from: i64, to: i64, kind: GapKind) -> Option<Gap> {
    Some(Gap { from, to, kind })
}

#[test]
fn every_verdict_in_a_table() {
    use Verdict::*;
    let chain = [sealed(0, 100), open(100, 150)];
    let sealed_chain = [sealed(0, 100), sealed(100, 150)];
    let lineage = |mut x: Version, l: u128| {
        x.lineage = Some(l);
        x
    };
    let epochs = |mut x: Version, first: i32, last: i32| {
        x.epochs = Some(EpochSpan { first, last });
        x
    };
    let at = |mut x: Version, ms: i64| {
        x.committed_at_ms = Some(ms);
        x
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<Version>, Version, i64, Verdict)> = vec![
        // Lineage.
        ("other topic id", vec![lineage(sealed(0, 10), 1)], lineage(sealed(10, 20), 2), 0, LineageBreak),
        ("same topic id", vec![lineage(sealed(0, 10), 1)], lineage(sealed(10, 20), 1), 0, Next),
        ("lineage unknown on one side", vec![sealed(0, 10)], lineage(sealed(10, 20), 2), 0, Next),
        // Empty chain.
        ("empty chain", vec![], sealed(500, 600), 0, First),
        ("empty chain, empty version", vec![], open(7, 7), 0, First),
        // Same base.
        ("same sealed", chain.to_vec(), sealed(0, 100), 0, Same),
        ("same unsealed", chain.to_vec(), open(100, 150), 0, Same),
        ("unsealed report of a sealed one", sealed_chain.to_vec(), open(100, 150), 0, Same),
        ("empty, twice", vec![open(5, 5)], open(5, 5), 0, Same),
        ("tail grows", chain.to_vec(), open(100, 180), 0, Replaces { previous_next_offset: 150 }),
        ("tail grows and seals", chain.to_vec(), v(100, 180, true, 9), 0, Replaces { previous_next_offset: 150 }),
        ("tail seals, same bytes", chain.to_vec(), sealed(100, 150), 0, Replaces { previous_next_offset: 150 }),
        ("grows under a successor", vec![open(0, 100), open(100, 150)], open(0, 120), 0,
            GrowsUnderSuccessor { previous_next_offset: 100 }),
        ("seals under a successor", vec![open(0, 100), sealed(100, 150)], sealed(0, 100), 0,
            GrowsUnderSuccessor { previous_next_offset: 100 }),
        ("sealed grows (cleaner merged)", sealed_chain.to_vec(), sealed(100, 200), 0,
            SealedGrown { previous_next_offset: 150 }),
        ("sealed one shorter", sealed_chain.to_vec(), sealed(100, 120), 0,
            Truncated { previous_next_offset: 150, previous_sealed: true }),
        ("unsealed one shorter", chain.to_vec(), open(100, 120), 0,
            Truncated { previous_next_offset: 150, previous_sealed: false }),
        ("empty over a version", chain.to_vec(), open(100, 100), 0,
            Truncated { previous_next_offset: 150, previous_sealed: false }),
        ("sealed, other bytes", sealed_chain.to_vec(), v(100, 150, true, 7), 0, Rewritten { previous_sealed: true }),
        ("unsealed, other bytes", chain.to_vec(), v(100, 150, false, 7), 0, Rewritten { previous_sealed: false }),
        ("unsealed, other bytes, now sealed", chain.to_vec(), v(100, 150, true, 7), 0,
            Rewritten { previous_sealed: false }),
        // New base below the end.
        ("before the start", vec![sealed(500, 600)], sealed(0, 100), 0, BeforeStart { first_base_offset: 500 }),
        ("ends at the start", vec![sealed(500, 600)], sealed(400, 500), 0, BeforeStart { first_base_offset: 500 }),
        ("straddles the start", vec![sealed(500, 600)], sealed(400, 550), 0, Overlap { end: 600 }),
        ("inside (merged)", vec![sealed(0, 150)], sealed(100, 150), 0, Covered { by: 0 }),
        ("empty, inside", vec![sealed(0, 150)], open(100, 100), 0, Covered { by: 0 }),
        ("inside a newer one", vec![at(sealed(0, 150), 2000)], at(sealed(100, 150), 1000), 0, Covered { by: 0 }),
        ("inside an older one", vec![at(sealed(0, 150), 1000)], at(sealed(100, 150), 2000), 0, Overlap { end: 150 }),
        ("overlaps the end", chain.to_vec(), sealed(120, 200), 0, Overlap { end: 150 }),
        // At or after the end.
        ("next", sealed_chain.to_vec(), sealed(150, 200), 0, Next),
        ("next, empty", sealed_chain.to_vec(), open(150, 150), 0, Next),
        ("after an unsealed tail", chain.to_vec(), sealed(150, 200), 0,
            AwaitsSeal { tail_base: 100, tail_next: 150, gap: None }),
        ("hole after an unsealed tail", chain.to_vec(), sealed(170, 200), 0,
            AwaitsSeal { tail_base: 100, tail_next: 150, gap: gap(150, 170, GapKind::Offsets) }),
        ("explained hole after an unsealed tail", chain.to_vec(), sealed(170, 200), 170,
            AwaitsSeal { tail_base: 100, tail_next: 150, gap: gap(150, 170, GapKind::Retention) }),
        ("hole, log start at its base", sealed_chain.to_vec(), sealed(170, 200), 170, RetentionGap { from: 150, to: 170 }),
        ("hole, log start beyond", sealed_chain.to_vec(), sealed(170, 200), 190, RetentionGap { from: 150, to: 170 }),
        ("hole, log start one short", sealed_chain.to_vec(), sealed(170, 200), 169, OffsetGap { from: 150, to: 170 }),
        ("hole", sealed_chain.to_vec(), sealed(170, 200), 0, OffsetGap { from: 150, to: 170 }),
        ("empty after a hole", sealed_chain.to_vec(), open(170, 170), 0, OffsetGap { from: 150, to: 170 }),
        // Leader epochs.
        ("epoch back", vec![epochs(sealed(0, 10), 3, 5)], epochs(sealed(10, 20), 4, 6), 0,
            EpochRegression { last_epoch: 5, first_epoch: 4 }),
        ("epoch same", vec![epochs(sealed(0, 10), 3, 5)], epochs(sealed(10, 20), 5, 6), 0, Next),
        ("epoch unknown", vec![epochs(sealed(0, 10), 3, 5)], sealed(10, 20), 0, Next),
        ("epoch back after an unsealed tail", vec![epochs(open(0, 10), 5, 5)], epochs(sealed(10, 20), 4, 4), 0,
            EpochRegression { last_epoch: 5, first_epoch: 4 }),
        ("epoch back over an explained hole", vec![epochs(sealed(0, 10), 5, 5)], epochs(sealed(20, 30), 4, 4), 20,
            EpochRegression { last_epoch: 5, first_epoch: 4 }),
        ("an unexplained hole wins over epochs", vec![epochs(sealed(0, 10), 5, 5)], epochs(sealed(20, 30), 4, 4), 0,
            OffsetGap { from: 10, to: 20 }),
    ];
    for (what, chain, offered, log_start, expected) in cases {
        assert_eq!(
            succession(&chain, &offered, log_start),
            expected,
            "{what}: {chain:?} <- {offered:?}"
        );
    }
}

#[test]
fn content_compares_what_both_sides_know() {
    let known = Content {
        log_size: 10,
        last_offset: Some(9),
        sha256: Some([1; 32]),
    };
    let there = [Version::new(0, 10, false, known)];
    let other_hash = Content {
        sha256: Some([2; 32]),
        ..known
    };
    let other_last = Content {
        last_offset: Some(8),
        ..known
    };
    assert_eq!(succession(&there, &Version::new(0, 10, false, known), 0), Verdict::Same);
    for c in [other_hash, other_last, Content::of_size(10)] {
        assert_eq!(
            succession(&there, &Version::new(0, 10, false, c), 0),
            Verdict::Rewritten { previous_sealed: false },
            "{c:?}"
        );
    }
}

fn arb_version() -> impl Strategy<Value = Version> {
    (
        -2i64..12,
        0i64..4,
        any::<bool>(),
        0u64..3,
        prop::option::of(0u128..2),
        prop::option::of((0i32..3, 0i32..3)),
        prop::option::of(0i64..3),
    )
        .prop_map(|(base, len, sealed, c, lineage, epochs, at)| Version {
            base_offset: base * 10,
            next_offset: base * 10 + len * 10,
            sealed,
            content: Content::of_size(c),
            lineage,
            epochs: epochs.map(|(first, more)| EpochSpan {
                first,
                last: first + more,
            }),
            committed_at_ms: at,
        })
}

/// A chain in base order without overlap, at most one version per base.
fn arb_chain() -> impl Strategy<Value = Vec<Version>> {
    prop::collection::vec(arb_version(), 0..5).prop_map(|mut vs| {
        vs.sort_by_key(|v| v.base_offset);
        let mut chain: Vec<Version> = Vec::new();
        for v in vs {
            if chain
                .last()
                .is_none_or(|l| l.next_offset <= v.base_offset && l.base_offset < v.base_offset)
            {
                chain.push(v);
            }
        }
        chain
    })
}

proptest! {
    /// Total (never panics, any input) and deterministic; and the verdicts that accept a new base never hide a
    /// hole the log start does not explain, nor an overlap.
    #[test]
    fn total_deterministic_and_never_silent(chain in arb_chain(), offered in arb_version(), log_start in -10i64..130) {
        let verdict = succession(&chain, &offered, log_start);
        prop_assert_eq!(verdict, succession(&chain, &offered, log_start));
        if let Some(tail) = chain.last() {
            match verdict {
                Verdict::Next => prop_assert_eq!(offered.base_offset, tail.next_offset),
                Verdict::RetentionGap { from, to } => {
                    prop_assert!(from == tail.next_offset && to == offered.base_offset && log_start >= to);
                }
                Verdict::AwaitsSeal { gap, .. } => {
                    prop_assert!(!tail.sealed);
                    prop_assert_eq!(gap.is_some(), offered.base_offset > tail.next_offset);
                }
                Verdict::OffsetGap { to, .. } => prop_assert!(log_start < to && tail.sealed),
                Verdict::Replaces { previous_next_offset } => {
                    prop_assert_eq!(tail.base_offset, offered.base_offset);
                    prop_assert!(!tail.sealed && offered.next_offset >= previous_next_offset);
                }
                Verdict::First => prop_assert!(false, "a chain is there"),
                _ => {}
            }
        } else {
            prop_assert_eq!(verdict, Verdict::First);
        }
    }
}
