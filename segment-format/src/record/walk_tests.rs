//! Walking the records of a v2 batch: stats, malformed records, limits.

use super::super::tests::{limits, sample_records};
use super::*;
use crate::batch::{seal_crc, verify_crc};
use crate::record::BatchBuilder;
use crate::varint::write_varint;
use proptest::prelude::*;

fn walk(batch: &[u8]) -> Result<RecordStats, ParseError> {
    let h = parse_header(batch).unwrap();
    for_each_record(batch, &h, &limits(), |_| ControlFlow::Continue(()))
}

fn corrupt_defect(r: Result<RecordStats, ParseError>) -> (u64, Option<i64>, Defect) {
    match r {
        Err(ParseError::Corrupt {
            position,
            offset,
            defect,
        }) => (position, offset, defect),
        other => panic!("expected corrupt, got {other:?}"),
    }
}

#[test]
fn broken_invariants_with_valid_crc_are_caught() {
    // Offsets not increasing.
    let b = BatchBuilder::new(10)
        .record(RecordSpec::new(1, 1))
        .record(RecordSpec::new(1, 1))
        .build();
    let (pos, off, d) = corrupt_defect(walk(&b));
    assert_eq!(
        d,
        Defect::OffsetOutOfOrder {
            previous: 11,
            found: 11
        }
    );
    assert_eq!(off, Some(11));
    assert_eq!(pos, 61 + 7, "second record starts after the 7-byte first record");

    // Offset delta above lastOffsetDelta.
    let b = BatchBuilder::new(0)
        .record(RecordSpec::new(4, 1))
        .last_offset_delta(2)
        .build();
    let (_, off, d) = corrupt_defect(walk(&b));
    assert!(d.to_string().contains("lastOffsetDelta"), "{d}");
    assert_eq!(off, Some(4));

    // Record timestamp above maxTimestamp (CreateTime).
    let b = BatchBuilder::new(0)
        .record(RecordSpec::new(0, 50))
        .max_timestamp(40)
        .build();
    assert!(corrupt_defect(walk(&b)).2.to_string().contains("maxTimestamp"));

    // Same in a compressed batch: position 0, index and stream byte in the message.
    let b = BatchBuilder::new(0)
        .compression(Compression::Zstd)
        .record(RecordSpec::new(0, 1))
        .record(RecordSpec::new(1, 50))
        .max_timestamp(40)
        .build();
    let (pos, off, d) = corrupt_defect(walk(&b));
    assert_eq!((pos, off), (0, Some(1)));
    let msg = d.to_string();
    assert!(
        msg.contains("record 1") && msg.contains("byte 7 of the decompressed"),
        "{msg}"
    );
}

/// Rewrite the records count and reseal the CRC.
fn with_count(mut b: Vec<u8>, count: i32) -> Vec<u8> {
    b[57..61].copy_from_slice(&count.to_be_bytes());
    seal_crc(&mut b);
    b
}

#[test]
fn record_count_must_match() {
    for codec in [Compression::None, Compression::Gzip, Compression::Lz4] {
        let b = BatchBuilder::new(0)
            .compression(codec)
            .records(sample_records())
            .build();
        let (_, _, d) = corrupt_defect(walk(&with_count(b.clone(), 4)));
        assert_eq!(d, Defect::RecordCountMismatch { header: 4, found: 3 }, "{codec:?}");
        let (_, _, d) = corrupt_defect(walk(&with_count(b.clone(), 2)));
        assert_eq!(d, Defect::RecordCountMismatch { header: 2, found: 3 }, "{codec:?}");
        let (_, _, d) = corrupt_defect(walk(&with_count(b, -1)));
        assert!(matches!(d, Defect::BadLength { .. }));
    }
}

#[test]
fn trailing_garbage_in_uncompressed_batch() {
    let mut b = BatchBuilder::new(0).record(RecordSpec::new(0, 1)).build();
    b.extend_from_slice(&[0xff, 0xff]);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    seal_crc(&mut b);
    let (pos, _, d) = corrupt_defect(walk(&b));
    assert_eq!(pos, 61 + 7);
    assert!(d.to_string().contains("2 bytes after the last"), "{d}");
}

/// A batch with one raw record body (length varint computed here).
fn batch_with_body(body: &[u8]) -> Vec<u8> {
    let mut rec = Vec::new();
    write_varint(&mut rec, body.len() as i32);
    rec.extend_from_slice(body);
    let mut b = BatchBuilder::new(0).record(RecordSpec::new(0, 0)).build();
    b.truncate(RECORD_BATCH_OVERHEAD);
    b.extend_from_slice(&rec);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    seal_crc(&mut b);
    b
}

#[test]
fn malformed_record_fields() {
    // attributes, ts delta, offset delta, key len, value len, header count
    let ok = [0u8, 0, 0, 1, 1, 0];
    walk(&batch_with_body(&ok)).unwrap();
    let cases: Vec<(Vec<u8>, &str, u64)> = vec![
        (vec![0, 0, 0, 3, 1, 0], "key length -2", 3),
        (vec![0, 0, 0, 1, 0x10, 0], "value length 8 exceeds", 4),
        (vec![0, 0, 0, 1, 1, 1], "header count -1", 5),
        (vec![0, 0, 0, 1, 1, 8, 0], "header count 4 exceeds", 5),
        (vec![0, 0, 0, 1, 1, 2, 1, 1], "header key length -1", 6),
        (vec![0, 0, 0, 1, 1, 2, 2, 0xff, 1], "UTF-8", 6),
        (vec![0, 0, 0, 1, 1, 0, 9], "fields end after 6", 6),
        (vec![0, 0, 0x80], "offset delta", 2),
        (vec![0, 0, 1, 1, 1, 0], "offset delta -1", 0),
    ];
    for (body, needle, at) in cases {
        let (pos, _, d) = corrupt_defect(walk(&batch_with_body(&body)));
        assert!(d.to_string().contains(needle), "{body:?}: {d}");
        // 61 header bytes + 1 length varint byte + position within the body,
        // except the offset-delta check, which names the record start.
        let expected = if needle == "offset delta -1" { 61 } else { 62 + at };
        assert_eq!(pos, expected, "{body:?}: {d}");
    }
}

#[test]
fn oversized_compressed_record_is_refused() {
    let b = BatchBuilder::new(0)
        .compression(Compression::Gzip)
        .record(RecordSpec::new(0, 0).with_value(vec![1u8; 5000]))
        .build();
    let h = parse_header(&b).unwrap();
    let tight = DeepLimits {
        max_record_bytes: 1000,
        ..DeepLimits::default()
    };
    let err = for_each_record(&b, &h, &tight, |_| ControlFlow::Continue(())).unwrap_err();
    assert!(
        matches!(
            err,
            ParseError::Corrupt {
                defect: Defect::BadLength { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn corrupt_compressed_payload_is_a_decompression_defect() {
    let mut b = BatchBuilder::new(0)
        .compression(Compression::Gzip)
        .records(sample_records())
        .build();
    let n = b.len();
    b[n - 6] ^= 0xff; // inside the gzip CRC trailer
    seal_crc(&mut b);
    let (pos, _, d) = corrupt_defect(walk(&b));
    assert_eq!(pos, 0);
    assert!(matches!(d, Defect::Decompression { codec: "gzip", .. }), "{d:?}");
}

#[test]
fn incomplete_batch_slice() {
    let b = BatchBuilder::new(3).records(sample_records()).build();
    let h = parse_header(&b).unwrap();
    let err = for_each_record(&b[..b.len() - 1], &h, &limits(), |_| ControlFlow::Continue(())).unwrap_err();
    assert_eq!(
        err,
        ParseError::Incomplete {
            position: 0,
            offset: Some(3),
            needed: b.len() as u64,
            available: b.len() as u64 - 1
        }
    );
}

#[test]
fn callback_can_stop_early() {
    let b = BatchBuilder::new(0).records(sample_records()).build();
    let h = parse_header(&b).unwrap();
    let stats = for_each_record(&b, &h, &limits(), |_| ControlFlow::Break(())).unwrap();
    assert!(stats.stopped_early);
    assert_eq!(stats.records, 1);
}

proptest! {
    #[test]
    fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 61..400), codec_id in 0u8..8) {
        bytes[16] = 2;
        let len = (bytes.len() - 12) as i32;
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
        bytes[22] = (bytes[22] & !7) | codec_id;
        let h = parse_header(&bytes).unwrap();
        let _ = for_each_record(&bytes, &h, &limits(), |r| { let _ = r.headers().count(); ControlFlow::Continue(()) });
    }

    #[test]
    fn mutations_are_caught_by_crc_or_walk_never_panics(
        codec_id in 0u8..5,
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..4),
    ) {
        let codec = Compression::from_id(codec_id).unwrap();
        let good = BatchBuilder::new(0).compression(codec).records(sample_records()).build();
        let mut b = good.clone();
        for (at, x) in &flips {
            let i = 21 + at % (b.len() - 21);
            b[i] ^= x;
        }
        let h = parse_header(&b).unwrap();
        if b != good {
            prop_assert!(verify_crc(&b, &h).is_err(), "CRC-32C must catch a change in [21, end)");
        }
        let _ = for_each_record(&b, &h, &limits(), |_| ControlFlow::Continue(()));
    }
}
