//! Legacy (magic 0/1) message sets: parsing, wrappers, compression, malformed input.

use super::*;
use proptest::prelude::*;

fn limits() -> DeepLimits {
    DeepLimits::default()
}

/// (offset, timestamp, key, value) of each message.
type Collected = Vec<(i64, i64, Option<Vec<u8>>, Option<Vec<u8>>)>;

fn collect(frame: &[u8]) -> Result<Collected, ParseError> {
    let mut out = vec![];
    for_each_message(frame, &limits(), |m| {
        out.push((
            m.offset,
            m.timestamp,
            m.key.map(<[u8]>::to_vec),
            m.value.map(<[u8]>::to_vec),
        ));
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

fn specs() -> Vec<LegacySpec> {
    vec![
        LegacySpec {
            offset: 40,
            timestamp: 1000,
            key: Some(b"a".to_vec()),
            value: Some(b"one".to_vec()),
        },
        LegacySpec {
            offset: 41,
            timestamp: 3000,
            key: None,
            value: Some(vec![9; 500]),
        },
        LegacySpec {
            offset: 43,
            timestamp: 2000,
            key: Some(vec![]),
            value: None,
        },
    ]
}

#[test]
fn v0_and_v1_byte_layout() {
    let v0 = encode_message(7, 0, 999, TimestampType::CreateTime, Some(b"k"), Some(b"val"));
    let mut expected = vec![];
    expected.extend_from_slice(&7i64.to_be_bytes());
    expected.extend_from_slice(&(14i32 + 1 + 3).to_be_bytes());
    expected.extend_from_slice(&[0; 4]);
    expected.extend_from_slice(&[0, 0]); // magic 0, attributes 0
    expected.extend_from_slice(&1i32.to_be_bytes());
    expected.push(b'k');
    expected.extend_from_slice(&3i32.to_be_bytes());
    expected.extend_from_slice(b"val");
    let crc = crc32fast::hash(&expected[16..]);
    expected[12..16].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(v0, expected);

    let v1 = encode_message(8, 1, 1234, TimestampType::LogAppendTime, None, Some(b""));
    assert_eq!(v1.len(), 12 + 22);
    assert_eq!(&v1[16..18], &[1, 0x08]);
    assert_eq!(&v1[18..26], &1234i64.to_be_bytes());
    assert_eq!(&v1[26..30], &(-1i32).to_be_bytes());
    assert_eq!(&v1[30..34], &0i32.to_be_bytes());
    let m = parse_message(&v1).unwrap();
    verify_crc(&v1, &m).unwrap();
    assert_eq!((m.key, m.value, m.timestamp), (None, Some(&b""[..]), Some(1234)));
    assert_eq!(m.timestamp_type(), Some(TimestampType::LogAppendTime));
}

#[test]
fn plain_messages_walk_and_shallow_info() {
    for magic in [0i8, 1] {
        let f = encode_message(5, magic, 77, TimestampType::CreateTime, Some(b"k"), None);
        let ts = if magic == 0 { -1 } else { 77 };
        assert_eq!(collect(&f).unwrap(), vec![(5, ts, Some(b"k".to_vec()), None)]);
        let info = shallow_info(&f, 100).unwrap();
        assert_eq!((info.position, info.size, info.magic), (100, f.len() as u64, magic));
        assert_eq!((info.base_offset, info.last_offset, info.records_count), (5, 5, 1));
        assert_eq!(info.max_timestamp, ts);
        assert_eq!(info.partition_leader_epoch, -1);
    }
}

#[test]
fn compressed_wrappers_round_trip_with_absolute_offsets() {
    for magic in [0i8, 1] {
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
            let w = encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &specs());
            let m = parse_message(&w).unwrap();
            verify_crc(&w, &m).unwrap();
            assert_eq!(m.offset, 43);
            let got = collect(&w).unwrap();
            let want: Vec<_> = specs()
                .into_iter()
                .map(|s| (s.offset, if magic == 0 { -1 } else { s.timestamp }, s.key, s.value))
                .collect();
            assert_eq!(got, want, "magic {magic} {codec:?}");
            let shallow = shallow_info(&w, 0).unwrap();
            assert_eq!((shallow.base_offset, shallow.records_count), (43, -1));
            assert_eq!(shallow.max_timestamp, if magic == 0 { -1 } else { 3000 });
            let deep = deep_batch_info(&w, 0, &limits()).unwrap();
            assert_eq!((deep.base_offset, deep.last_offset, deep.records_count), (40, 43, 3));
        }
    }
}

#[test]
fn v1_relative_offsets_and_log_append_time() {
    let w = encode_wrapper(1, Compression::Gzip, TimestampType::LogAppendTime, 5555, &specs());
    // Inner offsets are stored relative: 0, 1, 3.
    let m = parse_message(&w).unwrap();
    let mut inner = vec![];
    walk_inner(&m, Compression::Gzip, m.value.unwrap(), &limits(), |v, _| {
        inner.push(v.offset);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(inner, vec![0, 1, 3]);
    let got = collect(&w).unwrap();
    assert_eq!(
        got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(),
        vec![(40, 5555), (41, 5555), (43, 5555)]
    );
    // A wrapper offset of 0 (old librdkafka) means base 0.
    let mut zero = w.clone();
    zero[..8].copy_from_slice(&0i64.to_be_bytes());
    assert_eq!(
        collect(&zero).unwrap().iter().map(|g| g.0).collect::<Vec<_>>(),
        vec![0, 1, 3]
    );
    // Wrapper offset below the last inner offset.
    let mut low = w;
    low[..8].copy_from_slice(&2i64.to_be_bytes());
    assert!(format!("{:?}", collect(&low).unwrap_err()).contains("below its last inner offset"));
}

#[test]
fn magic_0_lz4_uses_the_broken_checksum() {
    let w = encode_wrapper(0, Compression::Lz4, TimestampType::CreateTime, -1, &specs());
    let m = parse_message(&w).unwrap();
    let v = m.value.unwrap();
    let correct = ((twox_hash::XxHash32::oneshot(0, &v[4..6]) >> 8) & 0xff) as u8;
    let broken = ((twox_hash::XxHash32::oneshot(0, &v[..6]) >> 8) & 0xff) as u8;
    assert_eq!(v[6], broken);
    assert_ne!(broken, correct, "this sample must tell the two apart");
    assert_eq!(collect(&w).unwrap().len(), 3);
}

#[test]
fn inner_defects_are_reported() {
    let inner_ok = encode_message(0, 1, 1, TimestampType::CreateTime, None, Some(b"x"));
    let wrap = |stream: &[u8], magic: i8, codec: Compression| {
        let value = compression::compress_for_magic(codec, stream, magic);
        encode_raw(
            10,
            magic,
            attributes(magic, codec, TimestampType::CreateTime),
            1,
            None,
            Some(&value),
        )
    };
    let expect_at = |frame: Vec<u8>, needle: &str, at: u64| {
        let err = collect(&frame).unwrap_err();
        let ParseError::Corrupt {
            position,
            offset,
            defect,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert!(defect.to_string().contains(needle), "{needle}: {defect}");
        assert_eq!((*position, *offset), (at, Some(10)), "{needle}");
    };
    let expect = |frame: Vec<u8>, needle: &str| expect_at(frame, needle, 0);
    // Inner CRC.
    let mut bad_crc = inner_ok.clone();
    bad_crc[34] ^= 1; // the value byte
    expect(wrap(&bad_crc, 1, Compression::Gzip), "CRC mismatch");
    // Inner magic differs.
    let v0 = encode_message(0, 0, 1, TimestampType::CreateTime, None, Some(b"x"));
    expect(wrap(&v0, 1, Compression::Gzip), "differs from the wrapper's magic");
    // Nested compression.
    let nested = wrap(&inner_ok, 1, Compression::Gzip);
    expect(wrap(&nested, 1, Compression::Gzip), "must not be compressed");
    // Offsets not increasing.
    let mut two = inner_ok.clone();
    two.extend_from_slice(&inner_ok);
    expect(wrap(&two, 1, Compression::Gzip), "does not follow");
    // Partial message at the end.
    let mut partial = inner_ok.clone();
    partial.extend_from_slice(&inner_ok[..5]);
    expect(wrap(&partial, 1, Compression::Snappy), "5 bytes into a message header");
    let mut cut = inner_ok.clone();
    cut.pop();
    expect(wrap(&cut, 1, Compression::Gzip), "stream ends after");
    // Empty wrapper.
    expect(wrap(&[], 1, Compression::Gzip), "without inner messages");
    // zstd is not a legacy codec.
    expect_at(
        wrap(&inner_ok, 1, Compression::Zstd),
        "zstd",
        LEGACY_ATTRIBUTES_OFFSET as u64,
    );
    // v0 wrapper offset must be the last inner offset.
    let v0_inner = encode_message(3, 0, 0, TimestampType::CreateTime, None, Some(b"x"));
    expect(
        wrap(&v0_inner, 0, Compression::Gzip),
        "differs from its last inner offset 3",
    );
}

#[test]
fn structural_defects_of_a_message() {
    let good = encode_message(1, 1, 5, TimestampType::CreateTime, Some(b"abc"), Some(b"de"));
    let err_at = |f: &[u8]| match parse_message(f) {
        Err(ParseError::Corrupt { position, defect, .. }) => (position, defect.to_string()),
        other => panic!("{other:?}"),
    };
    let mut bad_key = good.clone();
    bad_key[26..30].copy_from_slice(&100i32.to_be_bytes());
    assert_eq!(err_at(&bad_key).0, 26);
    let mut neg = good.clone();
    neg[26..30].copy_from_slice(&(-2i32).to_be_bytes());
    assert!(err_at(&neg).1.contains("negative"));
    let mut short_val = good.clone();
    short_val[33..37].copy_from_slice(&1i32.to_be_bytes());
    assert!(err_at(&short_val).1.contains("1 bytes after the value"));
    let mut magic = good.clone();
    magic[16] = 3;
    assert_eq!(err_at(&magic).0, 16);
    let mut small = good.clone();
    small[8..12].copy_from_slice(&20i32.to_be_bytes());
    assert!(err_at(&small).1.contains("message size 20"));
    assert!(parse_message(&good[..good.len() - 1]).unwrap_err().is_incomplete());
    let mut crc = good.clone();
    crc[38] ^= 0x10;
    let m = parse_message(&crc).unwrap();
    assert!(matches!(
        verify_crc(&crc, &m),
        Err(ParseError::Corrupt { position: 12, .. })
    ));
}

proptest! {
    #[test]
    fn wrapper_round_trip(
        magic in 0i8..2,
        codec_id in 1u8..4,
        gaps in proptest::collection::vec((1i64..5, 0i64..10_000, proptest::option::of(proptest::collection::vec(any::<u8>(), 0..50))), 1..15),
    ) {
        let codec = Compression::from_id(codec_id).unwrap();
        let mut offset = 1000;
        let specs: Vec<LegacySpec> = gaps.into_iter().map(|(g, ts, value)| {
            offset += g;
            LegacySpec { offset, timestamp: ts, key: None, value }
        }).collect();
        let w = encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &specs);
        let got = collect(&w).unwrap();
        let offsets: Vec<i64> = got.iter().map(|g| g.0).collect();
        // v0 stores absolute offsets, v1 relative ones re-based on the wrapper: both
        // must come back as the absolute offsets encoded.
        let want: Vec<i64> = specs.iter().map(|s| s.offset).collect();
        prop_assert_eq!(offsets, want);
        prop_assert_eq!(got.iter().map(|g| g.3.clone()).collect::<Vec<_>>(), specs.iter().map(|s| s.value.clone()).collect::<Vec<_>>());
    }

    #[test]
    fn hostile_frames_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 12..300), magic in 0u8..2, codec in 0u8..8) {
        let len = (bytes.len() - 12) as i32;
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
        if bytes.len() > 17 {
            bytes[16] = magic;
            bytes[17] = codec;
        }
        let _ = parse_message(&bytes);
        let _ = shallow_info(&bytes, 0);
        let _ = collect(&bytes);
    }

    #[test]
    fn mutations_are_caught(flip_at in any::<usize>(), x in 1u8..=255, magic in 0i8..2, codec_id in 0u8..4) {
        let codec = Compression::from_id(codec_id).unwrap();
        let good = if codec == Compression::None {
            encode_message(9, magic, 3, TimestampType::CreateTime, Some(b"key"), Some(b"value"))
        } else {
            encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &specs())
        };
        let mut b = good.clone();
        let i = 16 + flip_at % (b.len() - 16);
        b[i] ^= x;
        if let Ok(m) = parse_message(&b) {
            prop_assert!(verify_crc(&b, &m).is_err());
        }
        let _ = collect(&b);
    }
}
