//! The kept epoch history and file descriptions (`kept`).

use super::*;

fn batch(base: i64, last: i64, epoch: i32) -> BatchInfo {
    BatchInfo {
        position: 0,
        size: 100,
        magic: 2,
        base_offset: base,
        last_offset: last,
        max_timestamp: 0,
        partition_leader_epoch: epoch,
        producer_id: -1,
        producer_epoch: -1,
        is_transactional: false,
        control: None,
        is_control: false,
        records_count: 1,
    }
}

#[test]
fn the_history_names_one_epoch_only_for_ranges_it_saw_whole() {
    let h = KeptEpochs::starting(100)
        .with(&[batch(105, 109, 3), batch(110, 119, 3), batch(120, 129, 5)])
        .unwrap();
    // The first change starts where the history does: offsets 100..105 hold no batch.
    assert_eq!(h.changes, vec![(3, 100), (5, 120)]);
    assert_eq!(h.single_epoch(100, 120), Some(3));
    assert_eq!(h.single_epoch(120, 200), Some(5));
    assert_eq!(h.single_epoch(110, 121), None, "an epoch starts inside");
    assert_eq!(h.single_epoch(99, 110), None, "below the history");
    // Restricted: nothing below the new start, the epoch in force there kept.
    let r = h.restricted_to(115);
    assert_eq!(r.changes, vec![(3, 115), (5, 120)]);
    assert_eq!(r.single_epoch(110, 115), None);
    assert_eq!(r.single_epoch(115, 120), Some(3));
    assert_eq!(h.restricted_to(50), h);
}

#[test]
fn a_history_past_its_bound_is_dropped() {
    let batches: Vec<BatchInfo> = (0..=MAX_KEPT_EPOCHS as i64)
        .map(|i| batch(i, i, i32::try_from(i).unwrap()))
        .collect();
    assert!(KeptEpochs::starting(0).with(&batches[..MAX_KEPT_EPOCHS]).is_some());
    assert!(KeptEpochs::starting(0).with(&batches).is_none());
}

#[test]
fn a_file_matches_only_its_described_bytes() {
    let mut files = KeptFiles::default();
    let e = |o: i32| OffsetIndexEntry {
        relative_offset: o,
        position: o * 10,
    };
    files.offsets_written(true, &[e(1)]);
    files.offsets_written(false, &[e(2), e(3)]);
    let bytes = serialize_offset_index(&[e(1), e(2), e(3)]);
    assert_eq!(files.offset_index.entries, 3);
    assert!(files.offset_index.matches(&bytes, 8, true));
    assert!(!files.offset_index.matches(&bytes[..16], 8, true), "short");
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 8]);
    assert!(!files.offset_index.matches(&longer, 8, true), "longer");
    assert!(
        files.offset_index.matches(&longer, 8, false),
        "a prefix is enough when not exact"
    );
    let mut changed = bytes.clone();
    changed[9] ^= 1;
    assert!(!files.offset_index.matches(&changed, 8, true), "changed");
    files.offsets_written(true, &[e(1)]);
    assert!(files.offset_index.matches(&bytes[..8], 8, true), "rewritten whole");
}

#[test]
fn each_producer_keeps_its_last_closed_transaction_and_the_oldest_markers_go_past_the_bound() {
    let closed = |producer_id: i64, marker_offset: i64| ClosedTransaction {
        producer_id,
        marker_offset,
        first_offset: Some(marker_offset - 1),
        tally: None,
    };
    // Producer 1's second marker replaces its first, and moves to the end (the list stays by marker offset).
    let kept = with_closed(Vec::new(), &[closed(1, 10), closed(2, 11), closed(1, 12)]);
    assert_eq!(kept, vec![closed(2, 11), closed(1, 12)]);
    // Past the bound, the producers whose markers are oldest give way.
    let many: Vec<ClosedTransaction> = (0..MAX_KEPT_CLOSED as i64 + 3)
        .map(|p| closed(100 + p, 20 + p))
        .collect();
    let kept = with_closed(kept, &many);
    assert_eq!(kept.len(), MAX_KEPT_CLOSED);
    assert_eq!(kept.first(), Some(&closed(103, 23)));
    assert_eq!(kept.last(), many.last());
}
