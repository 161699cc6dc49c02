use super::*;
use crate::dir::SegmentRole;
use crate::error::IndexKind;
use crate::report::{Finding, Severity};
use proptest::prelude::*;

pub(super) fn b(position: u64, size: u64, base: i64, last: i64, max_ts: i64) -> BatchInfo {
    BatchInfo {
        position,
        size,
        magic: 2,
        base_offset: base,
        last_offset: last,
        max_timestamp: max_ts,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        is_transactional: false,
        control: None,
        is_control: false,
        records_count: (last - base + 1) as i32,
    }
}

/// Ten contiguous 3000-byte batches of 5 records from offset 100; timestamps
/// rise except batch 5, which goes back in time.
fn segment() -> Vec<BatchInfo> {
    (0..10)
        .map(|k| {
            let ts = if k == 5 { 500 } else { 1000 + 10 * k as i64 };
            b(3000 * k, 3000, 100 + 5 * k as i64, 104 + 5 * k as i64, ts)
        })
        .collect()
}

fn log_end(batches: &[BatchInfo]) -> u64 {
    batches.last().map_or(0, |b| b.position + b.size)
}

fn off(rel: i32, pos: i32) -> OffsetIndexEntry {
    OffsetIndexEntry {
        relative_offset: rel,
        position: pos,
    }
}

fn ts(timestamp: i64, rel: i32) -> TimeIndexEntry {
    TimeIndexEntry {
        timestamp,
        relative_offset: rel,
    }
}

/// The role a test names by whether the segment is the newest.
fn role(newest: bool) -> SegmentRole {
    if newest {
        SegmentRole::Newest
    } else {
        SegmentRole::Sealed
    }
}

fn check_offset(bytes: &[u8], base: i64, newest: bool, batches: &[BatchInfo]) -> Vec<Finding> {
    let mut c = OffsetIndexChecker::new("00000000000000000100.index", bytes, base, role(newest));
    batches.iter().for_each(|x| c.on_batch(x));
    c.finish(log_end(batches))
}

fn check_time(bytes: &[u8], base: i64, newest: bool, batches: &[BatchInfo]) -> Vec<Finding> {
    let mut c = TimeIndexChecker::new("00000000000000000100.timeindex", bytes, base, role(newest));
    batches.iter().for_each(|x| c.on_batch(x));
    c.finish(log_end(batches))
}

fn summary(f: &[Finding]) -> Vec<(Severity, Option<u64>, Option<i64>)> {
    f.iter().map(|f| (f.severity, f.position, f.offset)).collect()
}

fn build(batches: &[BatchInfo], base: i64, interval: u64) -> (Vec<u8>, Vec<u8>) {
    let mut o = OffsetIndexBuilder::new(base, interval);
    let mut t = TimeIndexBuilder::new(base, interval);
    for x in batches {
        o.push(x).expect("offset push");
        t.push(x).expect("time push");
    }
    t.seal();
    (o.to_bytes(), t.to_bytes())
}

#[test]
fn entry_layouts_are_big_endian() {
    assert_eq!(off(0x01020304, 0x05060708).to_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        ts(0x0102030405060708, 0x090a0b0c).to_bytes(),
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    );
    assert_eq!(OffsetIndexEntry::from_bytes(&[0, 0, 0, 7, 0, 0, 0x10, 0]), off(7, 4096));
    assert_eq!(off(3, 0).offset(100), 103);
}

#[test]
fn builders_follow_log_segment_recover() {
    // Entries when more than 4096 bytes lie since the last entry: batches 2, 4, 6, 8.
    let (oi, ti) = build(&segment(), 100, DEFAULT_INDEX_INTERVAL_BYTES);
    let expected_offsets = vec![off(14, 6000), off(24, 12000), off(34, 18000), off(44, 24000)];
    assert_eq!(oi, serialize_offset_index(&expected_offsets));
    assert_eq!(OffsetIndex::parse(&oi).entries, expected_offsets);
    // Max timestamp so far at each entry (batch 5 goes back, so batch 6's entry
    // is 1060), then the roll entry with the segment max (1090 at offset 149).
    let expected_times = vec![ts(1020, 14), ts(1040, 24), ts(1060, 34), ts(1080, 44), ts(1090, 49)];
    assert_eq!(TimeIndex::parse(&ti).entries, expected_times);
    assert_eq!(ti.len(), 5 * TIME_INDEX_ENTRY_SIZE);
}

#[test]
fn time_builder_skips_non_increasing_timestamps_and_unsealed_has_no_final_entry() {
    let batches = vec![b(0, 5000, 0, 0, 50), b(5000, 5000, 1, 1, 40), b(10000, 5000, 2, 2, 45)];
    let mut t = TimeIndexBuilder::new(0, 4096);
    for x in &batches {
        t.push(x).expect("push");
    }
    // Entry at batch 1 (max so far 50 @ 0); at batch 2 the max is still 50: skipped.
    assert_eq!(t.entries(), &[ts(50, 0)]);
    t.seal();
    assert_eq!(
        t.entries(),
        &[ts(50, 0)],
        "final entry equal to the last is not repeated"
    );
}

#[test]
fn builders_reject_what_the_broker_rejects() {
    let mut o = OffsetIndexBuilder::new(100, 0);
    assert!(matches!(
        o.push(&b(0, 10, 99, 99, 0)),
        Err(ParseError::Corrupt {
            defect: Defect::OffsetOverflow { .. },
            ..
        })
    ));
    let far = 100 + i64::from(i32::MAX) + 1;
    assert!(o.push(&b(0, 10, far, far, 0)).is_err());
    o.push(&b(0, 10, 100, 100, 0)).expect("first");
    o.push(&b(10, 10, 101, 105, 0)).expect("second");
    assert!(matches!(
        o.push(&b(20, 10, 103, 103, 0)),
        Err(ParseError::Corrupt {
            position: 20,
            defect: Defect::OffsetOutOfOrder {
                previous: 105,
                found: 103
            },
            ..
        })
    ));
}

#[test]
fn built_indexes_pass_the_checkers() {
    let batches = segment();
    let (oi, ti) = build(&batches, 100, 4096);
    assert_eq!(check_offset(&oi, 100, false, &batches), vec![]);
    assert_eq!(check_time(&ti, 100, false, &batches), vec![]);
}

#[test]
fn zero_tail_is_fine_in_the_newest_segment_and_an_error_in_a_sealed_one() {
    let batches = segment();
    let (mut oi, mut ti) = build(&batches, 100, 4096);
    let entries = oi.len();
    oi.resize(oi.len() + 80, 0);
    ti.resize(ti.len() + 120, 0);
    let parsed = OffsetIndex::parse(&oi);
    assert_eq!((parsed.entries.len(), parsed.layout.zero_tail), (4, 10));
    assert_eq!(TimeIndex::parse(&ti).layout.zero_tail, 10);
    assert_eq!(check_offset(&oi, 100, true, &batches), vec![]);
    assert_eq!(check_time(&ti, 100, true, &batches), vec![]);
    let f = check_offset(&oi, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(entries as u64), None)]);
    let f = check_time(&ti, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(60), None)]);
}

#[test]
fn preallocated_empty_index_of_the_active_segment() {
    let batches = vec![b(0, 200, 0, 4, 10)];
    let zeros = vec![0u8; 8 * 16];
    assert_eq!(check_offset(&zeros, 0, true, &batches), vec![]);
    let f = check_offset(&zeros, 0, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(0), None)], "{f:?}");
    let tzeros = vec![0u8; 12 * 16];
    assert_eq!(check_time(&tzeros, 0, true, &batches), vec![]);
    let layout = IndexLayout::of(&zeros, 8);
    assert_eq!((layout.entries, layout.zero_tail), (0, 16));
}

#[test]
fn ambiguous_first_slot_is_an_entry_when_the_log_agrees() {
    // Offset index (0, 0): the batch at 0 is the single record at the base offset.
    let batches = vec![b(0, 100, 0, 0, 0), b(100, 100, 1, 3, 7)];
    let one_zero = vec![0u8; 8];
    assert_eq!(check_offset(&one_zero, 0, false, &batches), vec![]);
    // Time index (timestamp 0, base) when the first batch's max timestamp is 0:
    // a real entry, but a sealed segment still needs the final max entry.
    let mut t = vec![0u8; 12];
    t.extend_from_slice(&ts(7, 3).to_bytes());
    assert_eq!(check_time(&t, 0, false, &batches), vec![]);
    let only_zero = vec![0u8; 12];
    let f = check_time(&only_zero, 0, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(0))], "{f:?}");
    // When the log disagrees, the zero slot is tail.
    let other = vec![b(0, 100, 0, 9, 5)];
    let f = check_time(&only_zero, 0, false, &other);
    assert_eq!(f.len(), 2, "no entries + zero tail: {f:?}");
}

#[test]
fn pre_kafka_806_follower_entries_are_accepted() {
    // A follower chunk of batches 2..=3 indexed as (last offset of batch 3, position of batch 2).
    let batches = segment();
    let bytes = serialize_offset_index(&[off(19, 6000), off(39, 18000)]);
    assert_eq!(check_offset(&bytes, 100, false, &batches), vec![]);
}

#[test]
fn misaligned_and_out_of_range_positions() {
    let batches = segment();
    let bytes = serialize_offset_index(&[off(14, 6000), off(24, 12001), off(34, 18000), off(44, 30000)]);
    let f = check_offset(&bytes, 100, false, &batches);
    assert_eq!(
        summary(&f),
        vec![
            (Severity::Error, Some(8), Some(124)),
            (Severity::Error, Some(24), Some(144))
        ],
        "{f:?}"
    );
    assert!(
        matches!(&f[0].defect, Defect::Index { index: IndexKind::Offset, message }
        if message.contains("inside the batch at 12000..15000"))
    );
}

#[test]
fn non_increasing_entries() {
    let batches = segment();
    let bytes = serialize_offset_index(&[off(24, 12000), off(14, 6000)]);
    let f = check_offset(&bytes, 100, false, &batches);
    // Offset and position both go back at slot 1 (byte 8); each entry still
    // matches its own batch.
    assert_eq!(
        summary(&f),
        vec![
            (Severity::Error, Some(8), Some(114)),
            (Severity::Error, Some(8), Some(114))
        ],
        "{f:?}"
    );
}

#[test]
fn broker_invariant_and_offsets_beyond_the_log() {
    let batches = segment();
    // Offset 110 at the position of the batch 115..=119: the batch before ends at 114 >= 110.
    let bytes = serialize_offset_index(&[off(10, 9000)]);
    let f = check_offset(&bytes, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(110))]);
    // Last entry beyond the log's last offset (149).
    let bytes = serialize_offset_index(&[off(14, 6000), off(60, 27000)]);
    let f = check_offset(&bytes, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(8), Some(160))]);
    // Inside the batch at its position: correct for lookups, not what Kafka writes.
    let bytes = serialize_offset_index(&[off(12, 6000)]);
    let f = check_offset(&bytes, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Warning, Some(0), Some(112))]);
}

#[test]
fn partial_trailing_bytes() {
    let batches = segment();
    let mut bytes = serialize_offset_index(&[off(14, 6000)]);
    bytes.extend_from_slice(&[1, 2, 3]);
    let f = check_offset(&bytes, 100, true, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(8), None)]);
    let mut t = serialize_time_index(&[ts(1090, 49)]);
    t.push(9);
    let f = check_time(&t, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(12), None)]);
}

#[test]
fn time_index_out_of_order() {
    let batches = segment();
    let bytes = serialize_time_index(&[ts(1040, 24), ts(1020, 14), ts(1090, 49)]);
    let f = check_time(&bytes, 100, false, &batches);
    // Slot 1: timestamp and offset both go back (both reported at byte 12).
    let at12: Vec<_> = f.iter().filter(|f| f.position == Some(12)).collect();
    assert_eq!(at12.len(), 2, "{f:?}");
    assert!(f
        .iter()
        .all(|f| f.severity == Severity::Error && f.position == Some(12)));
}

#[test]
fn time_index_wrong_final_timestamp_in_sealed_segment() {
    let batches = segment();
    let bytes = serialize_time_index(&[ts(1020, 14), ts(1080, 44)]);
    assert_eq!(
        check_time(&bytes, 100, true, &batches),
        vec![],
        "active segment: no roll entry yet"
    );
    let f = check_time(&bytes, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(12), Some(144))]);
    // No entries at all in a sealed segment with timestamps.
    let f = check_time(&[], 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(0), None)]);
}

#[test]
fn time_index_entry_semantics() {
    let batches = segment();
    // Record offset inside the batch holding the max (older leaders): accepted.
    let ok = serialize_time_index(&[ts(1020, 12), ts(1090, 49)]);
    assert_eq!(check_time(&ok, 100, false, &batches), vec![]);
    // Timestamp that is not the running max at its batch.
    let bad = serialize_time_index(&[ts(1025, 14), ts(1090, 49)]);
    let f = check_time(&bad, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(114))]);
    // Offset after the first batch reaching the timestamp (batch 5 keeps max 1040).
    let late = serialize_time_index(&[ts(1040, 29), ts(1090, 49)]);
    let f = check_time(&late, 100, false, &batches);
    assert_eq!(summary(&f), vec![(Severity::Error, Some(0), Some(129))]);
    // Offset not in any batch (gap) and beyond the log.
    let gappy = vec![b(0, 100, 0, 4, 10), b(100, 100, 10, 14, 20)];
    let bytes = serialize_time_index(&[ts(10, 7), ts(20, 30)]);
    let f = check_time(&bytes, 0, true, &gappy);
    assert_eq!(
        summary(&f),
        vec![
            (Severity::Error, Some(0), Some(7)),
            (Severity::Error, Some(12), Some(30))
        ]
    );
    // First timestamp must be above -1.
    let f = check_time(&serialize_time_index(&[ts(-1, 0)]), 0, true, &gappy);
    assert!(f.iter().any(|f| f.position == Some(0)));
}

fn any_segment() -> impl Strategy<Value = Vec<BatchInfo>> {
    proptest::collection::vec((1u64..3000, 0i64..5, 0i64..3, -1i64..200), 0..60).prop_map(|raw| {
        let mut pos = 0;
        let mut next = 1000;
        raw.into_iter()
            .map(|(size, len, gap, t)| {
                let base = next + gap;
                let x = b(pos, size, base, base + len, t);
                pos += size;
                next = base + len + 1;
                x
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn built_indexes_always_pass(batches in any_segment(), interval in 0u64..10_000, sealed in any::<bool>()) {
        let mut o = OffsetIndexBuilder::new(1000, interval);
        let mut t = TimeIndexBuilder::new(1000, interval);
        for x in &batches {
            o.push(x).expect("offset");
            t.push(x).expect("time");
        }
        if sealed {
            t.seal();
        }
        let oi = o.to_bytes();
        let ti = t.to_bytes();
        prop_assert_eq!(check_offset(&oi, 1000, !sealed, &batches), vec![]);
        prop_assert_eq!(check_time(&ti, 1000, !sealed, &batches), vec![]);
        prop_assert_eq!(serialize_offset_index(&OffsetIndex::parse(&oi).entries), oi);
    }

    #[test]
    fn entries_round_trip(raw in proptest::collection::vec((any::<i32>(), any::<i32>(), any::<i64>()), 0..50)) {
        let o: Vec<_> = raw.iter().map(|&(a, p, _)| off(a, p)).collect();
        let t: Vec<_> = raw.iter().map(|&(a, _, x)| ts(x, a)).collect();
        let ob = serialize_offset_index(&o);
        let tb = serialize_time_index(&t);
        let op = OffsetIndex::parse(&ob);
        let tp = TimeIndex::parse(&tb);
        // Trailing all-zero entries read back as the zero tail.
        let keep_o = o.len() - o.iter().rev().take_while(|e| **e == off(0, 0)).count();
        let keep_t = t.len() - t.iter().rev().take_while(|e| **e == ts(0, 0)).count();
        prop_assert_eq!(&op.entries[..], &o[..keep_o]);
        prop_assert_eq!(&tp.entries[..], &t[..keep_t]);
    }

    #[test]
    fn checkers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400),
                            batches in any_segment(), base in prop_oneof![Just(0i64), Just(1000), Just(i64::MAX)],
                            newest in any::<bool>()) {
        let _ = OffsetIndex::parse(&bytes);
        let _ = TimeIndex::parse(&bytes);
        let _ = check_offset(&bytes, base, newest, &batches);
        let _ = check_time(&bytes, base, newest, &batches);
    }

    #[test]
    fn checkers_never_panic_on_plausible_entries(
        entries in proptest::collection::vec((0i32..200, 0i32..100_000, -2i64..300), 0..40),
        batches in any_segment())
    {
        let o: Vec<_> = entries.iter().map(|&(r, p, _)| off(r, p)).collect();
        let t: Vec<_> = entries.iter().map(|&(r, _, x)| ts(x, r)).collect();
        let _ = check_offset(&serialize_offset_index(&o), 1000, false, &batches);
        let _ = check_time(&serialize_time_index(&t), 1000, false, &batches);
    }
}
