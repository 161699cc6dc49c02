//! Unit tests of the consistent cut's offset search.

use super::*;
use segment_format::record::{BatchBuilder, RecordSpec};

const T0: i64 = 1_700_000_000_000;

/// A batch at `base` of `timestamps.len()` records with those timestamps.
fn batch(base: i64, timestamps: &[i64]) -> Vec<u8> {
    let mut b = BatchBuilder::new(base);
    for (i, ts) in timestamps.iter().enumerate() {
        b = b.record(RecordSpec::new(i as i32, *ts).with_value(vec![b'v'; 8]));
    }
    b.build()
}

fn segment(dir: &Path, base: i64, batches: &[Vec<u8>]) {
    std::fs::write(
        dir.join(segment_file_name(base, SegmentFileKind::Log)),
        batches.concat(),
    )
    .unwrap();
}

#[test]
fn cuts_before_the_first_batch_newer_than_t_even_when_later_ones_are_older() {
    let dir = tempfile::tempdir().unwrap();
    // Segment 0: offsets 0..3, 3..5; segment 5: 5..7 (max T0+20), 7..8 (T0+1, older but after: left behind).
    let s0 = [batch(0, &[T0, T0 + 1, T0 + 2]), batch(3, &[T0 + 5, T0 + 10])];
    let s5 = [batch(5, &[T0 + 11, T0 + 20]), batch(7, &[T0 + 1])];
    segment(dir.path(), 0, &s0);
    segment(dir.path(), 5, &s5);
    // T between the batches of segment 0: cut inside it.
    let p = find(dir.path(), &[0, 5], 0, 8, T0 + 4).unwrap().unwrap();
    assert_eq!(p.segments, vec![0]);
    let c = &p.cut;
    assert_eq!((c.cut_offset, c.mirror_end_offset, c.left_offsets), (3, 8, 5));
    assert_eq!((c.first_left_offset, c.first_left_timestamp), (3, T0 + 10));
    assert_eq!(c.left_batches, 3);
    assert_eq!(c.left_bytes, (s0[1].len() + s5[0].len() + s5[1].len()) as u64);
    assert_eq!(c.last_segment_bytes, Some(s0[0].len() as u64));
    // T equal to a batch's max timestamp keeps it (only newer batches are left); the cut at a segment's first
    // batch keeps the segments before it whole.
    let p = find(dir.path(), &[0, 5], 0, 8, T0 + 10).unwrap().unwrap();
    assert_eq!(
        (p.segments.clone(), p.cut.cut_offset, p.cut.last_segment_bytes),
        (vec![0], 5, None)
    );
    assert_eq!((p.cut.left_batches, p.cut.left_offsets), (2, 3));
    // Nothing newer: no cut.
    assert_eq!(find(dir.path(), &[0, 5], 0, 8, T0 + 20).unwrap(), None);
    // Everything newer: nothing kept, the log is empty from its start.
    let p = find(dir.path(), &[0, 5], 0, 8, T0 - 1).unwrap().unwrap();
    assert_eq!(
        (
            p.segments.clone(),
            p.cut.cut_offset,
            p.cut.left_offsets,
            p.cut.left_batches
        ),
        (vec![], 0, 8, 4)
    );
}

#[test]
fn batches_below_the_log_start_offset_do_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    segment(
        dir.path(),
        0,
        &[batch(0, &[T0 + 50]), batch(1, &[T0]), batch(2, &[T0 + 60])],
    );
    // Offset 0 lies below the log start (deleted on the source): only offset 2 is newer than T.
    let p = find(dir.path(), &[0], 1, 3, T0 + 10).unwrap().unwrap();
    assert_eq!(
        (p.cut.cut_offset, p.cut.first_left_offset, p.cut.left_batches),
        (2, 2, 1)
    );
    // Every visible batch newer: the cut is the log start offset itself, nothing promoted.
    let p = find(dir.path(), &[0], 2, 3, T0 + 10).unwrap().unwrap();
    assert_eq!((p.segments.clone(), p.cut.cut_offset), (vec![], 2));
}

#[test]
fn a_corrupt_batch_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = batch(0, &[T0]);
    let last = b.len() - 1;
    b[last] ^= 0xFF;
    segment(dir.path(), 0, &[b]);
    let err = find(dir.path(), &[0], 0, 1, T0).unwrap_err().to_string();
    assert!(err.contains("00000000000000000000.log"), "{err}");
}

#[test]
fn timestamps_parse_as_milliseconds_or_rfc_3339() {
    assert_eq!(parse_timestamp("1700000000123"), Ok(1_700_000_000_123));
    assert_eq!(parse_timestamp("2023-11-14T22:13:20.123Z"), Ok(1_700_000_000_123));
    assert_eq!(parse_timestamp("2023-11-14T23:13:20+01:00"), Ok(1_700_000_000_000));
    assert!(parse_timestamp("-5").unwrap_err().contains("before 1970"));
    assert!(parse_timestamp("yesterday").unwrap_err().contains("RFC 3339"));
}
