//! Frames of the direct protocol: every type round-trips, and truncated,
//! oversized, corrupt, unknown and malformed frames give typed errors that name
//! the frame, field and byte offset, without reading or allocating by a hostile length.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use segmirror_transport::direct::frame::{self, FrameCodec, FrameType, FRAME_OVERHEAD, HEADER_LEN, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::handshake::FEATURE_CLUSTER_SHIPPERS;
use segmirror_transport::direct::payload::HELLO_MAGIC;
use segmirror_transport::direct::payload::{ChunkCrcs, LayoutSegment, MirrorLayout};
use segmirror_transport::direct::{
    Chunk, Claim, ClaimResult, ClaimVerdict, ClaimedAt, Companion, CompanionKind, Frame, FrameError, Goodbye,
    GoodbyeReason, Hello, HelloAck, LogStart, PartitionRef, Position, Refuse, RefuseReason, ReplaceEnd, Revoke, Role,
    Roll, SegmentReplace, SegmentSeal, Shipped, SourceProgress,
};
use tokio_util::codec::{Decoder, Encoder};

fn encode(frame: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame::encode(frame, MAX_PAYLOAD_LEN, &mut out).expect("encode");
    out.to_vec()
}

/// A frame with a correct CRC around any header and payload.
fn raw(frame_type: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![frame_type, flags];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn arb_string(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..max).prop_map(|c| c.into_iter().collect())
}

fn arb_partition() -> impl Strategy<Value = PartitionRef> {
    // Kafka's topic names (the decoder refuses any other): its characters, never `.` or `..`.
    let topic = "[a-zA-Z0-9._-]{1,40}".prop_filter("Kafka refuses . and ..", |t: &String| t != "." && t != "..");
    (topic, 0..i32::MAX, any::<[u8; 16]>()).prop_map(|(topic, partition, topic_id)| PartitionRef {
        topic,
        partition,
        topic_id,
    })
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn arb_position() -> impl Strategy<Value = Position> {
    (arb_partition(), 0..i64::MAX, any::<u64>()).prop_map(|(partition, segment_base, position)| Position {
        partition,
        segment_base,
        position,
    })
}

fn arb_companions() -> impl Strategy<Value = Vec<Companion>> {
    proptest::collection::vec(
        (
            any::<bool>(),
            any::<[u8; 32]>(),
            arb_bytes(64),
            any::<bool>(),
            any::<u32>(),
            proptest::option::of(any::<u32>()),
        ),
        4,
    )
    .prop_map(|parts| {
        CompanionKind::ALL
            .iter()
            .zip(parts)
            .filter(|(_, (keep, ..))| *keep)
            .map(|(kind, (_, sha256, bytes, inline, size, interval))| Companion {
                kind: *kind,
                size: if inline { bytes.len() as u64 } else { u64::from(size) },
                sha256,
                index_interval: interval
                    .filter(|_| !inline && matches!(kind, CompanionKind::OffsetIndex | CompanionKind::TimeIndex)),
                inline: inline.then_some(bytes),
            })
            .collect()
    })
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    let role = prop_oneof![Just(Role::Shipper), Just(Role::Applier)];
    let hello = (
        (1..u16::MAX, any::<u16>(), any::<u64>(), any::<u64>()),
        role,
        arb_string(30),
        proptest::option::of(arb_string(30)),
        arb_string(30),
    )
        .prop_map(|((min, span, sup, req), role, link, cluster, software)| {
            Frame::Hello(Hello {
                min_version: min,
                max_version: min.saturating_add(span),
                features_supported: sup,
                features_required: req,
                role,
                link,
                source_cluster_id: cluster,
                software,
                // Present exactly when a shipper offers bit 6 (the codec refuses anything else).
                shipper_node_id: (role == Role::Shipper && sup & FEATURE_CLUSTER_SHIPPERS != 0)
                    .then_some((sup >> 32) as i32 & i32::MAX),
            })
        });
    prop_oneof![
        hello,
        (any::<u16>(), any::<u64>()).prop_map(|(version, features)| Frame::HelloAck(HelloAck { version, features })),
        (
            any::<u16>(),
            any::<u16>(),
            any::<u16>(),
            arb_string(30),
            arb_string(200)
        )
            .prop_map(|(code, min_version, max_version, link, message)| Frame::Refuse(Refuse {
                reason: RefuseReason::from_code(code),
                min_version,
                max_version,
                link,
                message,
            })),
        (arb_partition(), 0..i64::MAX, any::<u64>(), arb_bytes(2048)).prop_map(
            |(partition, segment_base, position, bytes)| Frame::Chunk(Chunk {
                partition,
                segment_base,
                position,
                bytes,
                crcs: Default::default(),
            })
        ),
        (
            arb_partition(),
            0..i64::MAX,
            any::<u64>(),
            any::<[u8; 32]>(),
            arb_companions()
        )
            .prop_map(
                |(partition, segment_base, final_size, log_sha256, companions)| Frame::SegmentSeal(SegmentSeal {
                    partition,
                    segment_base,
                    final_size,
                    log_sha256,
                    companions,
                })
            ),
        arb_position().prop_map(Frame::Ack),
        proptest::collection::vec(arb_position(), 0..20).prop_map(Frame::Resume),
        any::<u64>().prop_map(|sequence| Frame::Heartbeat { sequence }),
        any::<u64>().prop_map(|bytes| Frame::Credit { bytes }),
        (any::<u16>(), arb_string(100)).prop_map(|(code, message)| Frame::Goodbye(Goodbye {
            reason: GoodbyeReason::from_code(code),
            message,
        })),
        (
            arb_partition(),
            proptest::collection::btree_set(0..i64::MAX, 1..5),
            any::<u64>(),
            arb_bytes(200),
            proptest::option::of((any::<u64>(), any::<[u8; 32]>(), arb_companions())),
        )
            .prop_map(
                |(partition, bases, position, bytes, end)| Frame::SegmentReplace(SegmentReplace {
                    partition,
                    replaced_bases: bases.into_iter().collect(),
                    position,
                    bytes,
                    end: end.map(|(final_size, log_sha256, companions)| ReplaceEnd {
                        final_size,
                        log_sha256,
                        companions,
                        next_base: None,
                    }),
                })
            ),
        (arb_partition(), 0..i64::MAX).prop_map(|(partition, log_start_offset)| Frame::LogStart(LogStart {
            partition,
            log_start_offset
        })),
        (
            arb_partition(),
            0..i64::MAX,
            proptest::option::of(0..i64::MAX),
            0..i64::MAX,
            any::<u64>(),
            any::<u64>(),
            proptest::option::of((0..i64::MAX, any::<u64>(), 0..i64::MAX)),
        )
            .prop_map(|(partition, log_end_offset, high_watermark, base, size, at, shipped)| {
                Frame::SourceProgress(SourceProgress {
                    partition,
                    log_end_offset,
                    high_watermark,
                    active_segment_base: base,
                    active_segment_size: size,
                    shipper_time_ms: at,
                    shipped: shipped.map(|(segment_base, position, end_offset)| Shipped {
                        segment_base,
                        position,
                        end_offset,
                    }),
                })
            }),
        (arb_partition(), 0..i32::MAX).prop_map(|(partition, leader_epoch)| Frame::Claim(Claim {
            partition,
            leader_epoch
        })),
        (
            arb_partition(),
            proptest::option::of(proptest::option::of((
                0..i64::MAX,
                any::<u64>(),
                0..i64::MAX,
                proptest::option::of(any::<u32>()),
            ))),
            (0..i32::MAX, 0..i32::MAX),
        )
            .prop_map(|(partition, granted, (holder_node, holder_epoch))| {
                let verdict = match granted {
                    Some(durable) => ClaimVerdict::Granted {
                        durable: durable.map(|(segment_base, position, end_offset, last_batch_crc)| ClaimedAt {
                            segment_base,
                            position,
                            end_offset,
                            last_batch_crc,
                        }),
                    },
                    None => ClaimVerdict::Refused {
                        holder_node,
                        holder_epoch,
                    },
                };
                Frame::ClaimResult(ClaimResult { partition, verdict })
            }),
        (arb_partition(), 0..i32::MAX, 0..i32::MAX).prop_map(|(partition, holder_node, holder_epoch)| {
            Frame::Revoke(Revoke {
                partition,
                holder_node,
                holder_epoch,
            })
        }),
        (
            arb_partition(),
            0..i64::MAX / 2,
            1..i64::MAX / 2,
            any::<u64>(),
            proptest::option::of(any::<[u8; 32]>())
        )
            .prop_map(
                |(partition, segment_base, span, final_size, log_sha256)| Frame::Roll(Roll {
                    partition,
                    segment_base,
                    final_size,
                    next_offset: segment_base + span,
                    log_sha256,
                })
            ),
        (
            arb_partition(),
            any::<bool>(),
            proptest::collection::btree_map(0..i64::MAX, any::<u64>(), 0..20)
        )
            .prop_map(|(partition, last, segments)| Frame::MirrorLayout(MirrorLayout {
                partition,
                last,
                segments: segments
                    .into_iter()
                    .map(|(base, size)| LayoutSegment { base, size })
                    .collect(),
            })),
    ]
}

proptest! {
    #[test]
    fn every_frame_round_trips(frame in arb_frame()) {
        let bytes = encode(&frame);
        let decoded = frame::decode(&bytes, 0, MAX_PAYLOAD_LEN).expect("decode");
        prop_assert_eq!(decoded, Some((frame.clone(), bytes.len())));
        // Every strict prefix asks for more bytes rather than failing or guessing.
        for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN, bytes.len() / 2, bytes.len() - 1] {
            prop_assert_eq!(frame::decode(&bytes[..cut], 0, MAX_PAYLOAD_LEN).expect("prefix"), None);
        }
    }

    /// The codec decodes a stream of frames fed in arbitrary pieces.
    #[test]
    fn codec_decodes_frames_split_anywhere(frames in proptest::collection::vec(arb_frame(), 1..6), piece in 1usize..97) {
        let mut codec = FrameCodec::default();
        let mut wire = BytesMut::new();
        for f in &frames {
            codec.encode(f, &mut wire).expect("encode");
        }
        let total = wire.len() as u64;
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for part in wire.chunks(piece) {
            buf.extend_from_slice(part);
            while let Some(f) = codec.decode(&mut buf).expect("decode") {
                got.push(f);
            }
        }
        prop_assert_eq!(codec.decode_eof(&mut buf).expect("eof"), None);
        prop_assert_eq!(got, frames);
        prop_assert_eq!(codec.offset(), total);
    }

    /// Any single corrupted byte outside the length field is caught by the CRC
    /// before the payload is read.
    #[test]
    fn a_corrupted_byte_fails_the_crc(frame in arb_frame(), at in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let mut bytes = encode(&frame);
        let i = at.index(bytes.len());
        prop_assume!(!(2..HEADER_LEN).contains(&i));
        bytes[i] ^= xor;
        match frame::decode(&bytes, 100, MAX_PAYLOAD_LEN) {
            Err(FrameError::Crc { offset, .. }) => prop_assert_eq!(offset, 100),
            other => prop_assert!(false, "byte {} corrupted: {:?}", i, other),
        }
    }

    /// Hostile input never panics; an error's offset lies inside the input.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut codec = FrameCodec::new(256);
        let mut buf = BytesMut::from(&data[..]);
        loop {
            match codec.decode_eof(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(e) => {
                    if let FrameError::Field { offset, .. } | FrameError::Crc { offset, .. } = e {
                        prop_assert!(offset <= data.len() as u64);
                    }
                    break;
                }
            }
        }
    }
}

#[test]
fn truncated_stream_is_a_typed_error_at_eof() {
    let bytes = encode(&Frame::Heartbeat { sequence: 7 });
    let mut codec = FrameCodec::default();
    let mut buf = BytesMut::from(&bytes[..bytes.len() - 3]);
    assert_eq!(codec.decode(&mut buf).expect("partial"), None);
    assert_eq!(
        codec.decode_eof(&mut buf),
        Err(FrameError::Truncated {
            offset: 0,
            have: bytes.len() as u64 - 3,
            need: bytes.len() as u64,
        })
    );
    // Inside the header: the frame's size is not known yet, the header's is.
    let mut codec = FrameCodec::default();
    let mut second = BytesMut::from(&bytes[..]);
    second.extend_from_slice(&bytes[..3]);
    assert!(codec.decode_eof(&mut second).expect("first").is_some());
    assert_eq!(
        codec.decode_eof(&mut second),
        Err(FrameError::Truncated {
            offset: bytes.len() as u64,
            have: 3,
            need: HEADER_LEN as u64,
        })
    );
}

#[test]
fn oversized_length_is_refused_from_the_header_alone() {
    let header = [FrameType::Chunk as u8, 0, 0xff, 0xff, 0xff, 0xf0];
    assert_eq!(
        frame::decode(&header, 42, MAX_PAYLOAD_LEN),
        Err(FrameError::Oversized {
            offset: 42,
            declared: 0xffff_fff0,
            max: u64::from(MAX_PAYLOAD_LEN),
        })
    );
    // The codec neither waits for nor reserves the declared bytes.
    let mut codec = FrameCodec::new(1024);
    let mut buf = BytesMut::from(&raw(FrameType::Credit as u8, 0, &[0; 1025])[..HEADER_LEN]);
    let before = buf.capacity();
    assert!(matches!(
        codec.decode(&mut buf),
        Err(FrameError::Oversized {
            offset: 0,
            declared: 1025,
            max: 1024
        })
    ));
    assert_eq!(buf.capacity(), before);
    // A configured maximum above the protocol's is clamped.
    assert_eq!(FrameCodec::new(u32::MAX).max_payload(), MAX_PAYLOAD_LEN);
}

/// A chunk whose sender knows its bytes' CRC-32C gets the frame CRC combined from it: the very bytes a hashed frame
/// has, small or large; a wrong CRC gives a frame the receiver refuses, never one it takes.
#[test]
fn a_known_chunk_crc_gives_the_same_frame_and_a_wrong_one_a_refused_frame() {
    for len in [100usize, 256 * 1024, 1024 * 1024 + 7] {
        let bytes = Bytes::from((0..len).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>());
        let chunk = |crcs| {
            Frame::Chunk(Chunk {
                partition: PartitionRef {
                    topic: "t".into(),
                    partition: 3,
                    topic_id: [1; 16],
                },
                segment_base: 7,
                position: 4096,
                bytes: bytes.clone(),
                crcs,
            })
        };
        let hashed = encode(&chunk(ChunkCrcs::default()));
        let known = encode(&chunk(ChunkCrcs::of_bytes(crc32c::crc32c(&bytes))));
        assert_eq!(hashed, known, "{len} bytes");
        assert_eq!(
            frame::decode(&known, 0, MAX_PAYLOAD_LEN),
            Ok(Some((chunk(ChunkCrcs::default()), known.len())))
        );
        if len >= 256 * 1024 {
            let wrong = encode(&chunk(ChunkCrcs::of_bytes(crc32c::crc32c(&bytes) ^ 1)));
            assert!(
                matches!(frame::decode(&wrong, 0, MAX_PAYLOAD_LEN), Err(FrameError::Crc { .. })),
                "{len} bytes"
            );
        }
    }
}

/// A v2 batch frame of `size` bytes at `offset` (only its framing: the decoder's batch hashing reads no more).
fn v2_batch(offset: i64, size: usize, fill: u8) -> Vec<u8> {
    let mut b = Vec::with_capacity(size);
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&((size - 12) as i32).to_be_bytes());
    b.extend_from_slice(&5i32.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend((21..size).map(|i| fill.wrapping_add((i % 253) as u8)));
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A large chunk frame is checked batch by batch: the decoder hands the large batches' own CRCs on (so the applier
/// does not hash them again) and still refuses any flipped byte, in a batch body, a header or between batches.
#[test]
fn a_chunk_frame_is_checked_batch_by_batch_and_hands_the_batch_crcs_on() {
    let sizes = [5000usize, 100, 70_000, 4096, 300];
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    for (i, size) in sizes.iter().enumerate() {
        let batch = v2_batch(i as i64, *size, i as u8);
        if *size >= 4096 {
            expected.push((bytes.len() as u64, *size as u64, crc32c::crc32c(&batch[21..])));
        }
        bytes.extend_from_slice(&batch);
    }
    let chunk = Chunk {
        partition: PartitionRef {
            topic: "t".into(),
            partition: 0,
            topic_id: [2; 16],
        },
        segment_base: 0,
        position: 0,
        bytes: Bytes::from(bytes.clone()),
        crcs: ChunkCrcs::default(),
    };
    let encoded = encode(&Frame::Chunk(chunk.clone()));
    match frame::decode(&encoded, 0, MAX_PAYLOAD_LEN) {
        Ok(Some((Frame::Chunk(got), n))) => {
            assert_eq!((&got, n), (&chunk, encoded.len()));
            assert_eq!(got.crcs.bytes, Some(crc32c::crc32c(&bytes)));
            let known: Vec<_> = got
                .crcs
                .batches
                .iter()
                .map(|k| (k.position, k.size, k.crc32c))
                .collect();
            assert_eq!(known, expected);
        }
        other => panic!("expected the chunk, got {other:?}"),
    }
    let payload_start = encoded.len() - 4 - bytes.len();
    // The topic, a large batch's body, its length field, the last byte of the last (small) batch.
    for bad_at in [10, payload_start + 35_100, payload_start + 5_109, encoded.len() - 5] {
        let mut bad = encoded.clone();
        bad[bad_at] ^= 0x10;
        assert!(
            matches!(frame::decode(&bad, 0, MAX_PAYLOAD_LEN), Err(FrameError::Crc { .. })),
            "flipped byte {bad_at}"
        );
    }
}

/// `encode_split` (the writer's vectored path) gives, head + bytes + trailer, exactly the bytes `encode` gives, for
/// chunks on both sides of the split size and with or without a known CRC, other frames whole in the buffer; a
/// known CRC that is wrong still gives a frame the receiver refuses, and so does a cut or flipped split frame.
#[test]
fn a_split_chunk_frame_is_byte_for_byte_the_encoded_one() {
    let small = frame::SPLIT_MIN_CHUNK_BYTES - 1;
    for len in [0usize, 100, small, frame::SPLIT_MIN_CHUNK_BYTES, 1024 * 1024 + 7] {
        let bytes = Bytes::from((0..len).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>());
        let chunk = |crcs| {
            Frame::Chunk(Chunk {
                partition: PartitionRef {
                    topic: "t".into(),
                    partition: 3,
                    topic_id: [1; 16],
                },
                segment_base: 7,
                position: 4096,
                bytes: bytes.clone(),
                crcs,
            })
        };
        for crcs in [ChunkCrcs::default(), ChunkCrcs::of_bytes(crc32c::crc32c(&bytes))] {
            let whole = encode(&chunk(crcs.clone()));
            let mut out = BytesMut::from(&b"before"[..]);
            let tail = frame::encode_split(&chunk(crcs), MAX_PAYLOAD_LEN, &mut out).unwrap();
            assert_eq!(&out[..6], b"before", "what the buffer held stays");
            let mut split = out[6..].to_vec();
            match tail {
                Some(tail) => {
                    assert!(len >= frame::SPLIT_MIN_CHUNK_BYTES, "{len} bytes split");
                    assert_eq!(tail.bytes.as_ptr(), bytes.as_ptr(), "the chunk's own bytes, not a copy");
                    split.extend_from_slice(&tail.bytes);
                    split.extend_from_slice(&tail.trailer);
                }
                None => assert!(len < frame::SPLIT_MIN_CHUNK_BYTES, "{len} bytes not split"),
            }
            assert_eq!(split, whole, "{len} bytes");
            assert_eq!(
                frame::decode(&split, 0, MAX_PAYLOAD_LEN),
                Ok(Some((chunk(ChunkCrcs::default()), split.len())))
            );
            // Cut short: more bytes needed (a codec at EOF says truncated); a flipped byte: refused.
            assert_eq!(frame::decode(&split[..split.len() - 1], 0, MAX_PAYLOAD_LEN), Ok(None));
            let mut bad = split.clone();
            bad[split.len() / 2] ^= 0x40;
            assert!(
                matches!(frame::decode(&bad, 0, MAX_PAYLOAD_LEN), Err(FrameError::Crc { .. })),
                "{len} bytes, flipped"
            );
        }
        if len >= frame::SPLIT_MIN_CHUNK_BYTES {
            let mut out = BytesMut::new();
            let wrong = chunk(ChunkCrcs::of_bytes(crc32c::crc32c(&bytes) ^ 1));
            let tail = frame::encode_split(&wrong, MAX_PAYLOAD_LEN, &mut out)
                .unwrap()
                .expect("split");
            let mut split = out.to_vec();
            split.extend_from_slice(&tail.bytes);
            split.extend_from_slice(&tail.trailer);
            assert!(
                matches!(frame::decode(&split, 0, MAX_PAYLOAD_LEN), Err(FrameError::Crc { .. })),
                "{len} bytes, wrong known CRC"
            );
        }
    }
    // Not a chunk: encoded whole, nothing left out.
    let mut out = BytesMut::new();
    let ack = Frame::Heartbeat { sequence: 9 };
    assert!(frame::encode_split(&ack, MAX_PAYLOAD_LEN, &mut out).unwrap().is_none());
    assert_eq!(out.to_vec(), encode(&ack));
}

/// A split chunk over the maximum fails as `encode` does, naming the length, and leaves the buffer alone.
#[test]
fn a_split_chunk_over_the_maximum_fails_and_leaves_the_buffer_alone() {
    let chunk = Frame::Chunk(Chunk {
        partition: PartitionRef {
            topic: "t".into(),
            partition: 0,
            topic_id: [1; 16],
        },
        segment_base: 0,
        position: 0,
        bytes: Bytes::from(vec![0u8; frame::SPLIT_MIN_CHUNK_BYTES + 10]),
        crcs: Default::default(),
    });
    let mut out = BytesMut::from(&b"kept"[..]);
    let err = frame::encode_split(&chunk, frame::SPLIT_MIN_CHUNK_BYTES as u32, &mut out).expect_err("too big");
    assert!(
        matches!(
            err,
            FrameError::Encode {
                frame: "Chunk",
                field: "length",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(&out[..], b"kept");
}

#[test]
fn encoding_over_the_maximum_fails_and_leaves_the_buffer_alone() {
    let chunk = Frame::Chunk(Chunk {
        partition: PartitionRef {
            topic: "t".into(),
            partition: 0,
            topic_id: [1; 16],
        },
        segment_base: 0,
        position: 0,
        bytes: Bytes::from(vec![0u8; 2000]),
        crcs: Default::default(),
    });
    let mut out = BytesMut::from(&b"kept"[..]);
    let err = frame::encode(&chunk, 1000, &mut out).expect_err("too big");
    assert!(
        matches!(
            err,
            FrameError::Encode {
                frame: "Chunk",
                field: "length",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(&out[..], b"kept");
}

#[test]
fn unknown_type_and_flags_are_typed_errors_after_the_crc() {
    assert_eq!(
        frame::decode(&raw(99, 0, b"xyz"), 10, MAX_PAYLOAD_LEN),
        Err(FrameError::UnknownType {
            offset: 10,
            frame_type: 99
        })
    );
    let beat = 5u64.to_be_bytes();
    assert_eq!(
        frame::decode(&raw(FrameType::Heartbeat as u8, 0x80, &beat), 0, MAX_PAYLOAD_LEN),
        Err(FrameError::UnknownFlags {
            offset: 0,
            frame_type: 8,
            flags: 0x80
        })
    );
    // A bad CRC wins over an unknown type: corruption is reported as corruption.
    let mut bad = raw(99, 0, b"xyz");
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        frame::decode(&bad, 0, MAX_PAYLOAD_LEN),
        Err(FrameError::Crc { frame_type: 99, .. })
    ));
}

#[test]
fn malformed_payloads_name_frame_field_and_offset() {
    // Hello whose magic is wrong.
    let mut hello = encode(&Frame::Hello(Hello {
        min_version: 1,
        max_version: 1,
        features_supported: 0,
        features_required: 0,
        role: Role::Shipper,
        link: "l".into(),
        source_cluster_id: None,
        software: "s".into(),
        shipper_node_id: None,
    }));
    hello[HEADER_LEN] = b'X';
    let payload = &hello[HEADER_LEN..hello.len() - 4];
    let err = frame::decode(&raw(1, 0, payload), 0, MAX_PAYLOAD_LEN).expect_err("bad magic");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "Hello",
                field: "magic",
                offset: 6,
                ..
            }
        ),
        "{err}"
    );

    // Heartbeat one byte short, and one byte long.
    let err = frame::decode(&raw(8, 0, &[0; 7]), 0, MAX_PAYLOAD_LEN).expect_err("short");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "Heartbeat",
                field: "sequence",
                offset: 6,
                ..
            }
        ),
        "{err}"
    );
    let err = frame::decode(&raw(8, 0, &[0; 9]), 0, MAX_PAYLOAD_LEN).expect_err("long");
    assert_eq!(
        err,
        FrameError::TrailingBytes {
            frame: "Heartbeat",
            offset: 14,
            extra: 1
        }
    );

    // Resume claiming four billion positions in a few bytes: refused before any allocation.
    let err = frame::decode(&raw(7, 0, &[0xff, 0xff, 0xff, 0xff, 0, 0]), 0, MAX_PAYLOAD_LEN).expect_err("count");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "Resume",
                field: "count",
                offset: 6,
                ..
            }
        ),
        "{err}"
    );

    // Chunk with a negative segment base; topic "t" (2+1 bytes), partition (4), id (16) before it.
    let mut chunk = vec![0, 1, b't', 0, 0, 0, 3];
    chunk.extend_from_slice(&[9; 16]);
    chunk.extend_from_slice(&(-5i64).to_be_bytes());
    chunk.extend_from_slice(&0u64.to_be_bytes());
    chunk.extend_from_slice(&0u32.to_be_bytes());
    let err = frame::decode(&raw(4, 0, &chunk), 0, MAX_PAYLOAD_LEN).expect_err("negative");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "Chunk",
                field: "segment_base",
                offset: 29,
                ..
            }
        ),
        "{err}"
    );

    // Chunk whose byte run claims more than the payload holds.
    let mut chunk = vec![0, 1, b't', 0, 0, 0, 3];
    chunk.extend_from_slice(&[9; 16]);
    chunk.extend_from_slice(&0i64.to_be_bytes());
    chunk.extend_from_slice(&0u64.to_be_bytes());
    chunk.extend_from_slice(&1000u32.to_be_bytes());
    chunk.extend_from_slice(b"abc");
    let err = frame::decode(&raw(4, 0, &chunk), 0, MAX_PAYLOAD_LEN).expect_err("run");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "Chunk",
                field: "bytes",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("needs 1000 bytes, 3 left"), "{err}");

    // A link name that is not UTF-8 points at the bad byte.
    let mut hello = HELLO_MAGIC.to_vec();
    hello.extend_from_slice(&[0, 1, 0, 1]);
    hello.extend_from_slice(&[0; 16]);
    hello.push(1);
    hello.extend_from_slice(&[0, 2, b'a', 0xff]);
    let err = frame::decode(&raw(1, 0, &hello), 0, MAX_PAYLOAD_LEN).expect_err("utf8");
    assert!(
        matches!(err, FrameError::Field { frame: "Hello", field: "link", offset, .. } if offset == 6 + 4 + 4 + 16 + 1 + 2 + 1),
        "{err}"
    );

    // SegmentSeal listing one companion kind twice.
    let seal = Frame::SegmentSeal(SegmentSeal {
        partition: PartitionRef {
            topic: "t".into(),
            partition: 0,
            topic_id: [0; 16],
        },
        segment_base: 0,
        final_size: 10,
        log_sha256: [0; 32],
        companions: vec![Companion {
            kind: CompanionKind::TimeIndex,
            size: 0,
            sha256: [0; 32],
            inline: None,
            index_interval: None,
        }],
    });
    let bytes = encode(&seal);
    let mut payload = bytes[HEADER_LEN..bytes.len() - 4].to_vec();
    let n = payload.len();
    let companion = payload[n - 42..].to_vec();
    payload[n - 43] = 2;
    payload.extend_from_slice(&companion);
    let err = frame::decode(&raw(5, 0, &payload), 0, MAX_PAYLOAD_LEN).expect_err("dup");
    assert!(
        matches!(
            err,
            FrameError::Field {
                frame: "SegmentSeal",
                field: "kind",
                ..
            }
        ),
        "{err}"
    );
}

/// Companion form 2 (an index to rebuild with the named `index.interval.bytes`, feature bit 3): round trip, and only
/// for an offset or time index sent as a digest; a form byte beyond 2 is refused by name.
#[test]
fn an_index_interval_travels_only_with_a_digest_only_index() {
    let seal = |kind, inline: Option<Bytes>, index_interval| {
        Frame::SegmentSeal(SegmentSeal {
            partition: PartitionRef {
                topic: "t".into(),
                partition: 0,
                topic_id: [0; 16],
            },
            segment_base: 0,
            final_size: 10,
            log_sha256: [0; 32],
            companions: vec![Companion {
                kind,
                size: inline.as_ref().map_or(96, |b| b.len() as u64),
                sha256: [9; 32],
                inline,
                index_interval,
            }],
        })
    };
    let ok = seal(CompanionKind::OffsetIndex, None, Some(1024));
    let bytes = encode(&ok);
    // The companion ends with form byte 2 and the interval.
    assert_eq!(&bytes[bytes.len() - 9..bytes.len() - 4], &[2, 0, 0, 4, 0]);
    assert_eq!(
        frame::decode(&bytes, 0, MAX_PAYLOAD_LEN).unwrap().map(|(f, _)| f),
        Some(ok)
    );

    for bad in [
        seal(CompanionKind::TxnIndex, None, Some(1024)),
        seal(CompanionKind::TimeIndex, Some(Bytes::from_static(b"abc")), Some(1024)),
    ] {
        let mut out = BytesMut::new();
        let err = frame::encode(&bad, MAX_PAYLOAD_LEN, &mut out).expect_err("encoded");
        assert!(err.to_string().contains("index interval"), "{err}");
    }
    // Decoding: form 2 on a txn index, and form 3.
    let bytes = encode(&seal(CompanionKind::OffsetIndex, None, Some(1024)));
    let mut payload = bytes[HEADER_LEN..bytes.len() - 4].to_vec();
    let n = payload.len();
    let kind_at = n - 4 - 1 - 32 - 8 - 1;
    payload[kind_at] = CompanionKind::TxnIndex.code();
    let err = frame::decode(&raw(5, 0, &payload), 0, MAX_PAYLOAD_LEN).expect_err("txn index with an interval");
    assert!(err.to_string().contains("no index interval"), "{err}");
    payload[kind_at] = CompanionKind::OffsetIndex.code();
    payload[n - 5] = 3;
    let err = frame::decode(&raw(5, 0, &payload), 0, MAX_PAYLOAD_LEN).expect_err("form 3");
    assert!(matches!(err, FrameError::Field { field: "inline", .. }), "{err}");
}

#[test]
fn a_tls_client_hello_on_a_plaintext_stream_is_named() {
    // The first bytes of a TLS ClientHello record: handshake (0x16), TLS 1.x (0x03 0x01).
    let hello = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];
    let err = frame::decode(&hello, 0, MAX_PAYLOAD_LEN).expect_err("tls");
    assert_eq!(err, FrameError::PeerSpeaksTls { record: 0x16 });
    assert!(err.to_string().contains("--plaintext"), "{err}");
    // The alert a TLS server answers a plaintext Hello with: level fatal, then the description.
    let alert = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32];
    assert_eq!(
        frame::decode(&alert, 0, MAX_PAYLOAD_LEN),
        Err(FrameError::PeerSpeaksTls { record: 0x15 })
    );
    // Only at the start of the stream: later, those bytes are an unknown frame type's header.
    assert!(matches!(
        frame::decode(&alert, 1, MAX_PAYLOAD_LEN),
        Err(FrameError::Oversized { .. })
    ));
}

#[test]
fn frame_overhead_is_ten_bytes() {
    let bytes = encode(&Frame::Credit { bytes: 1 });
    assert_eq!(bytes.len(), FRAME_OVERHEAD + 8);
    assert_eq!(&bytes[..HEADER_LEN], &[9, 0, 0, 0, 0, 8]);
}

/// Wire bytes per log byte: a Chunk adds the envelope and its fixed fields,
/// as the specification's table lays them out, and nothing per batch.
#[test]
fn a_chunk_costs_its_fixed_fields_and_nothing_more() {
    let topic = "orders";
    let chunk = Frame::Chunk(Chunk {
        partition: PartitionRef {
            topic: topic.into(),
            partition: 0,
            topic_id: [3; 16],
        },
        segment_base: 0,
        position: 0,
        bytes: Bytes::from(vec![0u8; 64 << 10]),
        crcs: Default::default(),
    });
    let fixed = FRAME_OVERHEAD + (2 + topic.len()) + 4 + 16 + 8 + 8 + 4;
    let encoded = encode(&chunk);
    assert_eq!(encoded.len(), (64 << 10) + fixed);
    // Under 0.1 % for a 64 KiB chunk.
    assert!(fixed * 1000 < 64 << 10, "{fixed} bytes of overhead");
}

#[test]
fn a_log_start_with_a_negative_offset_names_the_field() {
    let mut bytes = encode(&Frame::LogStart(LogStart {
        partition: PartitionRef {
            topic: "t".into(),
            partition: 0,
            topic_id: [1; 16],
        },
        log_start_offset: 7,
    }));
    // Payload: topic (2 + 1), partition (4), topic id (16), then the offset; make it negative and re-seal the CRC.
    let at = HEADER_LEN + 2 + 1 + 4 + 16;
    bytes[at] = 0x80;
    let end = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_be_bytes());
    match frame::decode(&bytes, 0, MAX_PAYLOAD_LEN) {
        Err(FrameError::Field {
            frame: "LogStart",
            field: "log_start_offset",
            offset,
            ..
        }) => assert_eq!(offset, at as u64),
        other => panic!("expected a field error, got {other:?}"),
    }
}

fn progress(high_watermark: Option<i64>) -> Frame {
    Frame::SourceProgress(SourceProgress {
        partition: PartitionRef {
            topic: "t".into(),
            partition: 0,
            topic_id: [1; 16],
        },
        log_end_offset: 90,
        high_watermark,
        active_segment_base: 40,
        active_segment_size: 4096,
        shipper_time_ms: 1_700_000_000_000,
        shipped: None,
    })
}

/// Sets `bytes[at] = value` in an encoded frame and re-seals its CRC, so the decoder reaches the field check.
fn patch(mut bytes: Vec<u8>, at: usize, value: u8) -> Vec<u8> {
    bytes[at] = value;
    let end = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn a_source_progress_with_a_bad_field_names_it() {
    // Payload: topic (2 + 1), partition (4), topic id (16), log end (8), presence (1), [high watermark (8)], base (8).
    let after_partition = HEADER_LEN + 2 + 1 + 4 + 16;
    let cases = [
        (progress(Some(80)), after_partition, 0x80, "log_end_offset"),
        (progress(Some(80)), after_partition + 8, 2, "high_watermark"),
        (progress(Some(80)), after_partition + 9, 0x80, "high_watermark"),
        (progress(None), after_partition + 9, 0x80, "active_segment_base"),
        (progress(Some(80)), after_partition + 17, 0x80, "active_segment_base"),
    ];
    for (frame, at, value, field) in cases {
        let bytes = patch(encode(&frame), at, value);
        match frame::decode(&bytes, 0, MAX_PAYLOAD_LEN) {
            Err(FrameError::Field {
                frame: "SourceProgress",
                field: got,
                offset,
                ..
            }) => {
                assert_eq!(got, field);
                assert_eq!(offset, at as u64, "{field}");
            }
            other => panic!("{field}: expected a field error, got {other:?}"),
        }
    }
    // Without a high watermark the frame is 8 bytes shorter, and a truncated one is an error, not a panic.
    assert_eq!(encode(&progress(Some(80))).len(), encode(&progress(None)).len() + 8);
    let whole = encode(&progress(None));
    for cut in HEADER_LEN..whole.len() {
        assert!(frame::decode(&whole[..cut], 0, MAX_PAYLOAD_LEN)
            .expect("a prefix is incomplete, not wrong")
            .is_none());
    }
}

/// The shipped position (feature bit 4) trails the frame: a frame without it (an older shipper's) decodes as
/// `None`, one with it round-trips, and a partial or negative one is a field error naming it.
#[test]
fn a_source_progress_carries_the_shipped_position_after_the_older_fields() {
    let Frame::SourceProgress(mut with) = progress(Some(80)) else {
        unreachable!()
    };
    with.shipped = Some(Shipped {
        segment_base: 40,
        position: 1000,
        end_offset: 77,
    });
    let old = encode(&progress(Some(80)));
    let new = encode(&Frame::SourceProgress(with.clone()));
    assert_eq!(new.len(), old.len() + 24);
    // The older fields are the same bytes: the extension only appends.
    assert_eq!(&new[HEADER_LEN..old.len() - 4], &old[HEADER_LEN..old.len() - 4]);
    let decoded = |bytes: &[u8]| frame::decode(bytes, 0, MAX_PAYLOAD_LEN).map(|f| f.map(|(f, _)| f));
    assert_eq!(decoded(&old).unwrap(), Some(progress(Some(80))));
    assert_eq!(decoded(&new).unwrap(), Some(Frame::SourceProgress(with)));
    // Only part of the block: the payload ends inside a field.
    let payload = &new[HEADER_LEN..new.len() - 4];
    let partial = raw(13, 0, &payload[..payload.len() - 5]);
    assert!(
        matches!(
            decoded(&partial),
            Err(FrameError::Field {
                field: "shipped_end_offset",
                ..
            })
        ),
        "{:?}",
        decoded(&partial)
    );
    // A negative shipped offset.
    let at = new.len() - 4 - 24;
    let negative = patch(new.clone(), at, 0x80);
    assert!(
        matches!(
            decoded(&negative),
            Err(FrameError::Field {
                field: "shipped_segment_base",
                ..
            })
        ),
        "{:?}",
        decoded(&negative)
    );
}

#[test]
fn a_segment_replace_with_bases_out_of_order_or_none_names_the_field() {
    let piece = |bases: Vec<i64>| {
        Frame::SegmentReplace(SegmentReplace {
            partition: PartitionRef {
                topic: "t".into(),
                partition: 0,
                topic_id: [1; 16],
            },
            replaced_bases: bases,
            position: 0,
            bytes: Bytes::from_static(b"x"),
            end: None,
        })
    };
    let mut out = BytesMut::new();
    assert!(frame::encode(&piece(vec![]), MAX_PAYLOAD_LEN, &mut out).is_err());
    assert!(frame::encode(&piece(vec![5, 5]), MAX_PAYLOAD_LEN, &mut out).is_err());
    assert!(out.is_empty());
    // Bases 5, 9 on the wire, the second rewritten to 3 and the CRC re-sealed: refused at that base.
    let mut bytes = encode(&piece(vec![5, 9]));
    let at = HEADER_LEN + 2 + 1 + 4 + 16 + 2 + 8;
    bytes[at + 7] = 3;
    let end = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_be_bytes());
    match frame::decode(&bytes, 0, MAX_PAYLOAD_LEN) {
        Err(FrameError::Field {
            frame: "SegmentReplace",
            field: "replaced_bases",
            offset,
            ..
        }) => assert_eq!(offset, at as u64),
        other => panic!("expected a field error, got {other:?}"),
    }
}

/// A topic name Kafka refuses (it would name a path outside the receiver's mirror root) is a `Field` error of the
/// decoder, and this side's encoder refuses to write one.
#[test]
fn a_topic_name_kafka_refuses_is_refused_both_ways() {
    let chunk = |topic: &str| {
        Frame::Chunk(Chunk {
            partition: PartitionRef {
                topic: topic.into(),
                partition: 0,
                topic_id: [1; 16],
            },
            segment_base: 0,
            position: 0,
            bytes: Bytes::from_static(b"x"),
            crcs: ChunkCrcs::default(),
        })
    };
    for bad in ["..", "a/b", "../etc", "t\u{e9}"] {
        let mut out = BytesMut::new();
        let e = frame::encode(&chunk(bad), MAX_PAYLOAD_LEN, &mut out).unwrap_err();
        assert!(e.to_string().contains("not a valid Kafka topic name"), "{bad}: {e}");
        // The same bytes as a peer that does not use this encoder sends them.
        let mut bytes = encode(&chunk(&"x".repeat(bad.len())));
        bytes[8..8 + bad.len()].copy_from_slice(bad.as_bytes());
        let n = bytes.len();
        let crc = crc32c::crc32c(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_be_bytes());
        match frame::decode(&bytes, 0, MAX_PAYLOAD_LEN) {
            Err(FrameError::Field {
                field: "topic",
                offset,
                reason,
                ..
            }) => {
                assert_eq!(offset, 6, "{bad}: the field's own offset");
                assert!(reason.contains("not a valid Kafka topic name"), "{bad}: {reason}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}
