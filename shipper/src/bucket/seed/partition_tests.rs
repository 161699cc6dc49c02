//! Which leader epochs a version `[base, next)` carries (`epochs_for`).

use super::*;

fn e(epoch: i32, start_offset: i64) -> EpochEntry {
    EpochEntry { epoch, start_offset }
}

#[test]
fn epochs_in_force_and_starting_inside() {
    let entries = [e(0, 0), e(1, 100), e(4, 250), e(5, 300)];
    let starts = |base, next| -> Vec<(i32, i64)> {
        epochs_for(&entries, base, next)
            .into_iter()
            .map(|s| (s.epoch, s.start_offset))
            .collect()
    };
    assert_eq!(starts(0, 100), vec![(0, 0)]);
    assert_eq!(starts(50, 260), vec![(0, 0), (1, 100), (4, 250)]);
    assert_eq!(
        starts(100, 250),
        vec![(1, 100)],
        "an epoch starting at next belongs to the next segment"
    );
    assert_eq!(
        starts(300, 300),
        vec![(5, 300)],
        "an empty segment keeps the epoch in force at its base"
    );
    assert_eq!(starts(400, 500), vec![(5, 300)]);
    // No epoch known at the base: only those starting inside.
    assert_eq!(epochs_for(&[e(3, 10)], 0, 20).len(), 1);
    assert!(epochs_for(&[], 0, 20).is_empty());
}
