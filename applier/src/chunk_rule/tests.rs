use segment_format::log::scan_frames;
use segment_format::record::{BatchBuilder, RecordSpec};

use super::*;

/// A v2 batch of `records` records from `base`.
fn batch(base: i64, records: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new(base);
    for r in 0..records {
        b = b.record(RecordSpec::new(r, 1_700_000_000_000).with_value(vec![b'v'; 10]));
    }
    b.build()
}

/// A magic 1 message at `offset` (offset, size, CRC-32, magic, attributes, timestamp, null key, 1-byte value).
fn legacy(offset: i64) -> Vec<u8> {
    let mut body = vec![1u8, 0];
    body.extend_from_slice(&0i64.to_be_bytes());
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.push(b'x');
    let mut frame = offset.to_be_bytes().to_vec();
    frame.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&body);
    let crc = segment_format::legacy::compute_crc(&frame);
    frame[12..16].copy_from_slice(&crc.to_be_bytes());
    frame
}

/// Runs the rule over `bytes`: the first defect, else the chunk's verdict.
fn run(bytes: &[u8], floor: Floor, legacy: LegacyFrames) -> Result<Result<i64, ChunkDefect>, BatchDefect> {
    let mut rule = ChunkRule::new(floor, legacy);
    let mut iter = scan_frames(bytes, 0);
    for frame in iter.by_ref() {
        let frame = match frame {
            Ok(frame) => frame,
            Err(_) => break,
        };
        rule.accept(&frame)?;
    }
    Ok(rule.finish(iter.next_position(), bytes.len() as u64))
}

#[test]
fn increasing_batches_are_accepted_gaps_included() {
    // 10..=12, then 20..=21: a compacted log's hole between them.
    let bytes = [batch(10, 3), batch(20, 2)].concat();
    assert_eq!(run(&bytes, Floor::SegmentBase(10), LegacyFrames::Refuse), Ok(Ok(21)));
    assert_eq!(run(&bytes, Floor::After(10), LegacyFrames::Refuse), Ok(Ok(21)));
    let mut rule = ChunkRule::new(Floor::After(7), LegacyFrames::Refuse);
    assert_eq!(rule.next_floor(), 7);
    rule.accept(&scan_frames(&bytes, 0).next().unwrap().unwrap()).unwrap();
    assert_eq!(rule.next_floor(), 13, "past the accepted batch's last offset");
}

#[test]
fn a_batch_whose_crc_does_not_match_is_refused() {
    let mut bytes = batch(0, 2);
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    assert!(matches!(
        run(&bytes, Floor::SegmentBase(0), LegacyFrames::Accept),
        Err(BatchDefect::Crc { stored, computed }) if stored != computed
    ));
}

#[test]
fn legacy_frames_are_refused_or_taken_as_the_path_says() {
    let bytes = [legacy(5), legacy(6)].concat();
    assert_eq!(
        run(&bytes, Floor::SegmentBase(5), LegacyFrames::Refuse),
        Err(BatchDefect::Legacy { magic: 1 })
    );
    assert_eq!(run(&bytes, Floor::After(5), LegacyFrames::Accept), Ok(Ok(6)));
}

#[test]
fn offsets_that_do_not_increase_are_refused() {
    // A batch repeating the previous one's offsets.
    let repeat = [batch(10, 3), batch(12, 1)].concat();
    assert_eq!(
        run(&repeat, Floor::SegmentBase(0), LegacyFrames::Refuse),
        Err(BatchDefect::BaseBelowExpected {
            base: 12,
            last: 12,
            expected: 13
        })
    );
    // A first batch below the durable end it continues.
    assert_eq!(
        run(&batch(10, 1), Floor::After(11), LegacyFrames::Accept),
        Err(BatchDefect::BaseBelowExpected {
            base: 10,
            last: 10,
            expected: 11
        })
    );
    // A first batch below its segment's base.
    assert_eq!(
        run(&batch(10, 2), Floor::SegmentBase(11), LegacyFrames::Refuse),
        Err(BatchDefect::BaseBelowSegment {
            base: 10,
            last: 11,
            segment_base: 11
        })
    );
}

#[test]
fn a_last_offset_below_the_base_is_refused() {
    let mut b = BatchBuilder::new(10).record(RecordSpec::new(0, 1_700_000_000_000));
    b.last_offset_delta = Some(-2);
    assert_eq!(
        run(&b.build(), Floor::SegmentBase(0), LegacyFrames::Refuse),
        Err(BatchDefect::LastBelowBase { base: 10, last: 8 })
    );
}

#[test]
fn a_chunk_ends_on_a_batch_boundary_and_holds_a_batch() {
    let bytes = [batch(0, 1), batch(1, 1)].concat();
    let cut = &bytes[..bytes.len() - 3];
    assert_eq!(
        run(cut, Floor::SegmentBase(0), LegacyFrames::Refuse),
        Ok(Err(ChunkDefect::NotOnBoundary {
            end: batch(0, 1).len() as u64
        }))
    );
    assert_eq!(
        run(&[], Floor::After(0), LegacyFrames::Accept),
        Ok(Err(ChunkDefect::NoBatch))
    );
}
