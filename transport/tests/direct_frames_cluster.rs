//! Frames of feature bit 6 (several shippers on one link): the cluster shipper's Hello with its trailing node id,
//! Claim, ClaimResult, Revoke and Roll. Hostile payloads are refused with the frame, field and byte offset named
//! (round trips of every frame are in `direct_frames.rs`).

use bytes::BytesMut;
use segmirror_transport::direct::frame::{self, FrameType, HEADER_LEN, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::handshake::FEATURE_CLUSTER_SHIPPERS;
use segmirror_transport::direct::{
    Claim, ClaimResult, ClaimVerdict, ClaimedAt, Frame, FrameError, Hello, PartitionRef, Revoke, Role, Roll,
};

fn partition() -> PartitionRef {
    PartitionRef {
        topic: "t".into(),
        partition: 3,
        topic_id: [7; 16],
    }
}

/// Encoded bytes of the partition field for topic "t": string (2 + 1), partition (4), topic id (16).
const PARTITION_LEN: usize = 2 + 1 + 4 + 16;

fn encode(frame: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame::encode(frame, MAX_PAYLOAD_LEN, &mut out).expect("encode");
    out.to_vec()
}

/// A frame with a correct CRC around any header and payload.
fn raw(frame_type: FrameType, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![frame_type as u8, 0];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// The payload of an encoded frame.
fn payload(bytes: &[u8]) -> Vec<u8> {
    bytes[HEADER_LEN..bytes.len() - 4].to_vec()
}

fn field_error(bytes: &[u8]) -> (String, String, u64, String) {
    match frame::decode(bytes, 0, MAX_PAYLOAD_LEN) {
        Err(FrameError::Field {
            frame,
            field,
            offset,
            reason,
        }) => (frame.to_string(), field.to_string(), offset, reason),
        other => panic!("expected a field error, got {other:?}"),
    }
}

fn hello(role: Role, features: u64, node: Option<i32>) -> Hello {
    Hello {
        min_version: 1,
        max_version: 1,
        features_supported: features,
        features_required: features,
        role,
        link: "dr".into(),
        source_cluster_id: Some("c".into()),
        software: "s".into(),
        shipper_node_id: node,
    }
}

#[test]
fn a_cluster_shippers_hello_carries_its_node_id_and_nobody_elses_does() {
    let h = hello(Role::Shipper, FEATURE_CLUSTER_SHIPPERS, Some(2));
    let bytes = encode(&Frame::Hello(h.clone()));
    assert_eq!(
        frame::decode(&bytes, 0, MAX_PAYLOAD_LEN).expect("decode"),
        Some((Frame::Hello(h), bytes.len()))
    );
    // The node id is the last 4 bytes of the payload.
    let p = payload(&bytes);
    assert_eq!(p[p.len() - 4..], 2i32.to_be_bytes());

    // A shipper offering bit 6 without a node, an applier with one, a shipper without the bit with one: not encoded.
    for bad in [
        hello(Role::Shipper, FEATURE_CLUSTER_SHIPPERS, None),
        hello(Role::Applier, FEATURE_CLUSTER_SHIPPERS, Some(1)),
        hello(Role::Shipper, 0, Some(1)),
        hello(Role::Shipper, FEATURE_CLUSTER_SHIPPERS, Some(-1)),
    ] {
        let mut out = BytesMut::new();
        let err = frame::encode(&Frame::Hello(bad.clone()), MAX_PAYLOAD_LEN, &mut out).expect_err("refused");
        assert!(
            matches!(
                err,
                FrameError::Encode {
                    field: "shipper_node_id",
                    ..
                }
            ),
            "{bad:?}: {err}"
        );
        assert!(out.is_empty());
    }

    // The same shipper's Hello without the trailing node id: the field is missing, named.
    let without = &p[..p.len() - 4];
    let (frame, field, offset, _) = field_error(&raw(FrameType::Hello, without));
    assert_eq!((frame.as_str(), field.as_str()), ("Hello", "shipper_node_id"));
    assert_eq!(offset, (HEADER_LEN + without.len()) as u64);
    // A negative node id.
    let mut negative = p.clone();
    let n = negative.len();
    negative[n - 4..].copy_from_slice(&(-1i32).to_be_bytes());
    let (_, field, offset, reason) = field_error(&raw(FrameType::Hello, &negative));
    assert_eq!(field, "shipper_node_id");
    assert_eq!(offset, (HEADER_LEN + n - 4) as u64);
    assert!(reason.contains("-1"), "{reason}");
    // An applier's Hello (or a shipper's without bit 6) with 4 bytes more: trailing bytes, as for an older decoder.
    let mut applier = payload(&encode(&Frame::Hello(hello(
        Role::Applier,
        FEATURE_CLUSTER_SHIPPERS,
        None,
    ))));
    applier.extend_from_slice(&5i32.to_be_bytes());
    assert!(matches!(
        frame::decode(&raw(FrameType::Hello, &applier), 0, MAX_PAYLOAD_LEN),
        Err(FrameError::TrailingBytes {
            frame: "Hello",
            extra: 4,
            ..
        })
    ));
}

#[test]
fn claims_with_a_negative_epoch_are_refused_naming_the_field() {
    let bytes = encode(&Frame::Claim(Claim {
        partition: partition(),
        leader_epoch: 4,
    }));
    let mut p = payload(&bytes);
    p[PARTITION_LEN..].copy_from_slice(&(-1i32).to_be_bytes());
    let (frame, field, offset, _) = field_error(&raw(FrameType::Claim, &p));
    assert_eq!((frame.as_str(), field.as_str()), ("Claim", "leader_epoch"));
    assert_eq!(offset, (HEADER_LEN + PARTITION_LEN) as u64);
    // Cut short: the epoch does not fit.
    let (_, field, _, _) = field_error(&raw(FrameType::Claim, &p[..PARTITION_LEN + 2]));
    assert_eq!(field, "leader_epoch");
    let mut out = BytesMut::new();
    assert!(frame::encode(
        &Frame::Claim(Claim {
            partition: partition(),
            leader_epoch: -1
        }),
        MAX_PAYLOAD_LEN,
        &mut out
    )
    .is_err());
}

#[test]
fn claim_results_with_bad_presence_bytes_or_extra_bytes_are_refused() {
    let granted = encode(&Frame::ClaimResult(ClaimResult {
        partition: partition(),
        verdict: ClaimVerdict::Granted {
            durable: Some(ClaimedAt {
                segment_base: 100,
                position: 4096,
                end_offset: 140,
                last_batch_crc: None,
            }),
        },
    }));
    let p = payload(&granted);
    assert_eq!(p.len(), PARTITION_LEN + 2 + 24);
    // granted = 2
    let mut bad = p.clone();
    bad[PARTITION_LEN] = 2;
    let (frame, field, offset, _) = field_error(&raw(FrameType::ClaimResult, &bad));
    assert_eq!((frame.as_str(), field.as_str()), ("ClaimResult", "granted"));
    assert_eq!(offset, (HEADER_LEN + PARTITION_LEN) as u64);
    // durable = 9
    let mut bad = p.clone();
    bad[PARTITION_LEN + 1] = 9;
    let (_, field, offset, _) = field_error(&raw(FrameType::ClaimResult, &bad));
    assert_eq!(field, "durable");
    assert_eq!(offset, (HEADER_LEN + PARTITION_LEN + 1) as u64);
    // A negative end offset.
    let mut bad = p.clone();
    let n = bad.len();
    bad[n - 8..].copy_from_slice(&(-5i64).to_be_bytes());
    let (_, field, _, _) = field_error(&raw(FrameType::ClaimResult, &bad));
    assert_eq!(field, "end_offset");
    // "No durable position" followed by a position: trailing bytes.
    let mut bad = p.clone();
    bad[PARTITION_LEN + 1] = 0;
    assert!(matches!(
        frame::decode(&raw(FrameType::ClaimResult, &bad), 0, MAX_PAYLOAD_LEN),
        Err(FrameError::TrailingBytes {
            frame: "ClaimResult",
            extra: 24,
            ..
        })
    ));
    // A refusal naming a negative holder.
    let refused = encode(&Frame::ClaimResult(ClaimResult {
        partition: partition(),
        verdict: ClaimVerdict::Refused {
            holder_node: 1,
            holder_epoch: 5,
        },
    }));
    let mut bad = payload(&refused);
    bad[PARTITION_LEN + 1..PARTITION_LEN + 5].copy_from_slice(&(-3i32).to_be_bytes());
    let (_, field, _, _) = field_error(&raw(FrameType::ClaimResult, &bad));
    assert_eq!(field, "holder_node");
}

/// The CRC of the mirror's last batch is a trailing field of a granted ClaimResult: absent, the payload ends after
/// the end offset (as before the field existed); present, exactly four more bytes. A payload cut inside it is
/// refused naming the field, one with more is refused as trailing bytes.
#[test]
fn a_claim_results_last_batch_crc_is_an_optional_trailing_field() {
    let at = |crc| {
        Frame::ClaimResult(ClaimResult {
            partition: partition(),
            verdict: ClaimVerdict::Granted {
                durable: Some(ClaimedAt {
                    segment_base: 100,
                    position: 4096,
                    end_offset: 140,
                    last_batch_crc: crc,
                }),
            },
        })
    };
    let without = payload(&encode(&at(None)));
    let with = payload(&encode(&at(Some(0xdead_beef))));
    assert_eq!(with.len(), without.len() + 4);
    assert_eq!(&with[..without.len()], without.as_slice());
    assert_eq!(&with[without.len()..], &0xdead_beefu32.to_be_bytes());
    let (decoded, _) = frame::decode(&raw(FrameType::ClaimResult, &with), 0, MAX_PAYLOAD_LEN)
        .unwrap()
        .unwrap();
    assert_eq!(decoded, at(Some(0xdead_beef)));
    // Cut inside the CRC.
    let cut = &with[..with.len() - 1];
    let (frame, field, offset, _) = field_error(&raw(FrameType::ClaimResult, cut));
    assert_eq!((frame.as_str(), field.as_str()), ("ClaimResult", "last_batch_crc"));
    assert_eq!(offset, (HEADER_LEN + without.len()) as u64);
    // One byte more than a CRC.
    let mut long = with.clone();
    long.push(0);
    assert!(matches!(
        frame::decode(&raw(FrameType::ClaimResult, &long), 0, MAX_PAYLOAD_LEN),
        Err(FrameError::TrailingBytes {
            frame: "ClaimResult",
            extra: 1,
            ..
        })
    ));
}

#[test]
fn revokes_and_rolls_with_hostile_fields_are_refused_naming_the_field() {
    let revoke = encode(&Frame::Revoke(Revoke {
        partition: partition(),
        holder_node: 2,
        holder_epoch: 6,
    }));
    let mut bad = payload(&revoke);
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&i32::MIN.to_be_bytes());
    let (frame, field, _, _) = field_error(&raw(FrameType::Revoke, &bad));
    assert_eq!((frame.as_str(), field.as_str()), ("Revoke", "holder_epoch"));

    let roll = Roll {
        partition: partition(),
        segment_base: 100,
        final_size: 4096,
        next_offset: 140,
        log_sha256: None,
    };
    let p = payload(&encode(&Frame::Roll(roll.clone())));
    assert_eq!(p.len(), PARTITION_LEN + 8 + 8 + 8 + 1);
    // next_offset not above the base.
    let mut bad = p.clone();
    bad[PARTITION_LEN + 16..PARTITION_LEN + 24].copy_from_slice(&100i64.to_be_bytes());
    let (frame, field, offset, reason) = field_error(&raw(FrameType::Roll, &bad));
    assert_eq!((frame.as_str(), field.as_str()), ("Roll", "next_offset"));
    assert_eq!(offset, (HEADER_LEN + PARTITION_LEN + 16) as u64);
    assert!(reason.contains("not above the segment base 100"), "{reason}");
    // The digest's presence byte 2; a digest announced but cut short.
    let mut bad = p.clone();
    bad[PARTITION_LEN + 24] = 2;
    let (_, field, _, _) = field_error(&raw(FrameType::Roll, &bad));
    assert_eq!(field, "log_sha256");
    let mut bad = p.clone();
    bad[PARTITION_LEN + 24] = 1;
    bad.extend_from_slice(&[0; 31]);
    let (_, field, _, _) = field_error(&raw(FrameType::Roll, &bad));
    assert_eq!(field, "log_sha256");
    // An encoder refuses the same.
    let mut out = BytesMut::new();
    let backwards = Roll {
        next_offset: 100,
        ..roll
    };
    assert!(matches!(
        frame::encode(&Frame::Roll(backwards), MAX_PAYLOAD_LEN, &mut out),
        Err(FrameError::Encode {
            field: "next_offset",
            ..
        })
    ));
}

#[test]
fn the_new_frame_codes_are_15_to_18() {
    assert_eq!(FrameType::from_code(15), Some(FrameType::Claim));
    assert_eq!(FrameType::from_code(16), Some(FrameType::ClaimResult));
    assert_eq!(FrameType::from_code(17), Some(FrameType::Revoke));
    assert_eq!(FrameType::from_code(18), Some(FrameType::Roll));
}
