//! MirrorLayout (frame 19, feature bit 7) and the trailing `next_base` of a replacement's end: round trips, and
//! hostile frames refused naming the field (a count beyond the frame, bases not increasing, a bad flag), without
//! allocating by a hostile count.

use bytes::{BufMut, Bytes, BytesMut};
use segmirror_transport::direct::frame::{self, HEADER_LEN, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::payload::{LayoutSegment, MirrorLayout, MAX_LAYOUT_SEGMENTS_PER_FRAME};
use segmirror_transport::direct::{Frame, FrameError, PartitionRef, ReplaceEnd, SegmentReplace};

fn partition() -> PartitionRef {
    PartitionRef {
        topic: "events".into(),
        partition: 3,
        topic_id: [7; 16],
    }
}

fn encode(frame: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame::encode(frame, MAX_PAYLOAD_LEN, &mut out).expect("encode");
    out.to_vec()
}

/// A frame with a correct CRC around any payload.
fn raw(frame_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![frame_type, 0];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn decode(bytes: &[u8]) -> Result<Frame, FrameError> {
    frame::decode(bytes, 0, MAX_PAYLOAD_LEN).map(|d| d.expect("a whole frame").0)
}

/// The payload of a MirrorLayout of `partition()` up to its segment list: partition, `last`, count.
fn layout_head(last: u8, count: u32) -> BytesMut {
    let good = encode(&Frame::MirrorLayout(MirrorLayout {
        partition: partition(),
        last: true,
        segments: Vec::new(),
    }));
    let mut payload = BytesMut::from(&good[HEADER_LEN..good.len() - 4 - 5]);
    payload.put_u8(last);
    payload.put_u32(count);
    payload
}

#[test]
fn a_mirror_layout_round_trips_empty_and_full() {
    for segments in [
        Vec::new(),
        (0..MAX_LAYOUT_SEGMENTS_PER_FRAME as i64)
            .map(|i| LayoutSegment {
                base: i * 100,
                size: 1000 + i as u64,
            })
            .collect(),
    ] {
        for last in [false, true] {
            let f = Frame::MirrorLayout(MirrorLayout {
                partition: partition(),
                last,
                segments: segments.clone(),
            });
            assert_eq!(decode(&encode(&f)).unwrap(), f);
        }
    }
}

#[test]
fn a_mirror_layout_over_the_frame_limit_or_not_increasing_is_not_encoded() {
    for segments in [
        (0..=MAX_LAYOUT_SEGMENTS_PER_FRAME as i64)
            .map(|base| LayoutSegment { base, size: 1 })
            .collect::<Vec<_>>(),
        vec![LayoutSegment { base: 5, size: 1 }, LayoutSegment { base: 5, size: 2 }],
    ] {
        let mut out = BytesMut::new();
        let err = frame::encode(
            &Frame::MirrorLayout(MirrorLayout {
                partition: partition(),
                last: true,
                segments,
            }),
            MAX_PAYLOAD_LEN,
            &mut out,
        )
        .expect_err("refused");
        assert!(
            matches!(
                err,
                FrameError::Encode {
                    frame: "MirrorLayout",
                    field: "segments",
                    ..
                }
            ),
            "{err}"
        );
        assert!(out.is_empty());
    }
}

#[test]
fn hostile_mirror_layouts_name_the_field() {
    // A count far beyond the bytes present: refused before any allocation.
    let payload = layout_head(1, u32::MAX);
    let err = decode(&raw(19, &payload)).expect_err("count");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "MirrorLayout",
                field: "count",
                ..
            }
        ),
        "{err}"
    );

    // A count above the per-frame maximum, even with the bytes present.
    let n = MAX_LAYOUT_SEGMENTS_PER_FRAME as u32 + 1;
    let mut payload = layout_head(1, n);
    for i in 0..i64::from(n) {
        payload.put_i64(i);
        payload.put_u64(1);
    }
    let err = decode(&raw(19, &payload)).expect_err("too many");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "MirrorLayout",
                field: "count",
                ..
            }
        ),
        "{err}"
    );

    // Bases not increasing.
    let mut payload = layout_head(0, 2);
    for base in [10i64, 10] {
        payload.put_i64(base);
        payload.put_u64(1);
    }
    let err = decode(&raw(19, &payload)).expect_err("not increasing");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "MirrorLayout",
                field: "base",
                ..
            }
        ),
        "{err}"
    );

    // A negative base.
    let mut payload = layout_head(0, 1);
    payload.put_i64(-1);
    payload.put_u64(1);
    let err = decode(&raw(19, &payload)).expect_err("negative");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "MirrorLayout",
                field: "base",
                ..
            }
        ),
        "{err}"
    );

    // A flag byte other than 0 or 1.
    let payload = layout_head(2, 0);
    let err = decode(&raw(19, &payload)).expect_err("flag");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "MirrorLayout",
                field: "last",
                ..
            }
        ),
        "{err}"
    );

    // Bytes after the list.
    let mut payload = layout_head(1, 0);
    payload.put_u8(0);
    assert!(decode(&raw(19, &payload)).is_err());
}

#[test]
fn a_replacement_end_carries_its_next_base_only_when_set() {
    for next_base in [None, Some(4242)] {
        let f = Frame::SegmentReplace(SegmentReplace {
            partition: partition(),
            replaced_bases: vec![100, 250],
            position: 10,
            bytes: Bytes::from_static(b"piece"),
            end: Some(ReplaceEnd {
                final_size: 15,
                log_sha256: [9; 32],
                companions: Vec::new(),
                next_base,
            }),
        });
        let bytes = encode(&f);
        assert_eq!(decode(&bytes).unwrap(), f);
        if next_base.is_none() {
            // What an older shipper sends: the frame ends after the companions.
            let with = encode(&Frame::SegmentReplace(SegmentReplace {
                end: Some(ReplaceEnd {
                    next_base: Some(1),
                    ..match &f {
                        Frame::SegmentReplace(r) => r.end.clone().unwrap(),
                        _ => unreachable!(),
                    }
                }),
                ..match &f {
                    Frame::SegmentReplace(r) => r.clone(),
                    _ => unreachable!(),
                }
            }));
            assert_eq!(with.len(), bytes.len() + 8);
        }
    }
}
