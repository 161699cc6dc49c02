//! `direct_frames`: the direct transport's frame decoder on hostile bytes.
//!
//! The bytes a peer sends are as hostile as a segment: a wrong or malicious
//! peer, a proxy, a bit flip on a plaintext link. Kept in a file of its own so
//! the `segment-format` targets and this one change independently.

use bytes::{Bytes, BytesMut};
use segmirror_transport::direct::frame::{self, FrameCodec, FRAME_OVERHEAD, HEADER_LEN, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::handshake::FEATURE_CLUSTER_SHIPPERS;
use segmirror_transport::direct::payload::{
    Claim, ClaimResult, ClaimVerdict, ClaimedAt, Companion, CompanionKind, LogStart, PartitionRef, Position, ReplaceEnd, Revoke, Roll, SegmentReplace,
    Shipped, SourceProgress,
    LogEnd, Truncate, TruncateMode,
    LayoutSegment, MirrorLayout,
    LinkId, LinkMetaPiece, MetaPart,
};
use segmirror_transport::direct::{
    Chunk, Frame, FrameError, Goodbye, GoodbyeReason, Hello, HelloAck, Refuse, RefuseReason, Role, SegmentSeal,
};
use tokio_util::codec::Decoder;

/// Maximum payload the target runs with when the first byte is odd: small, so
/// the fuzzer reaches the oversized path with short inputs.
const SMALL_MAX_PAYLOAD: u32 = 4096;

/// Runs [`check_stream`] on `data` as given, and again with the CRC of every
/// frame whose bytes are all present recomputed, so the fuzzer gets past the
/// CRC into the payload decoders (as `batch_deep` seals a batch's CRC).
pub fn direct_frames(data: &[u8]) {
    let max = if data.first().is_some_and(|b| b & 1 == 1) {
        SMALL_MAX_PAYLOAD
    } else {
        MAX_PAYLOAD_LEN
    };
    check_stream(data, max);
    let sealed = seal_crcs(data, max);
    if sealed != data {
        check_stream(&sealed, max);
    }
}

/// `data` with each complete frame's CRC-32C recomputed, frame after frame,
/// up to the first frame that is oversized or incomplete.
pub fn seal_crcs(data: &[u8], max: u32) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 0usize;
    while let Some(header) = out.get(at..at + HEADER_LEN) {
        let length = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
        if length > max {
            break;
        }
        let end = at + HEADER_LEN + length as usize;
        if out.len() < end + 4 {
            break;
        }
        let crc = crc32c::crc32c(&out[at..end]);
        out[end..end + 4].copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
    out
}

/// Decodes `data` as a stream of frames twice, with [`frame::decode`] over the
/// slice and with [`FrameCodec`] fed in two pieces (split at the first byte's
/// value), and checks:
/// - both agree on every frame and on the error that ends the stream;
/// - a decoded frame re-encodes to exactly the bytes it was decoded from;
/// - no frame is longer than the maximum, and an error's offset lies inside the input;
/// - a strict prefix of a frame asks for more bytes instead of failing.
pub fn check_stream(data: &[u8], max: u32) {
    let mut expected: Vec<Frame> = Vec::new();
    let mut offset = 0usize;
    let slice_end: Result<(), FrameError> = loop {
        match frame::decode(&data[offset..], offset as u64, max) {
            Ok(Some((f, used))) => {
                assert!(used >= FRAME_OVERHEAD && used - FRAME_OVERHEAD <= max as usize);
                let mut again = BytesMut::new();
                frame::encode(&f, max, &mut again).expect("a decoded frame re-encodes");
                assert_eq!(
                    &again[..],
                    &data[offset..offset + used],
                    "decode -> encode is not the identity"
                );
                for cut in [used / 2, used - 1] {
                    assert_eq!(frame::decode(&data[offset..offset + cut], offset as u64, max), Ok(None));
                }
                expected.push(f);
                offset += used;
            }
            Ok(None) => break Ok(()),
            Err(e) => {
                if let FrameError::Field { offset: at, .. } | FrameError::TrailingBytes { offset: at, .. } = e {
                    assert!(at <= data.len() as u64, "error offset {at} outside the input: {e}");
                }
                break Err(e);
            }
        }
    };
    let split = usize::from(data.first().copied().unwrap_or(0)).min(data.len());
    let mut codec = FrameCodec::new(max);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut codec_end = Ok(());
    'feed: for piece in [&data[..split], &data[split..]] {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => got.push(f),
                Ok(None) => break,
                Err(e) => {
                    codec_end = Err(e);
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(got, expected, "codec and slice decoder disagree");
    match (&slice_end, &codec_end) {
        (Err(a), Err(b)) => assert_eq!(a, b, "codec and slice decoder end differently"),
        (Ok(()), Ok(())) => {
            // Leftover bytes are a partial frame: at end of stream that is a truncation.
            let eof = codec.decode_eof(&mut buf);
            if offset == data.len() {
                assert_eq!(eof, Ok(None));
            } else {
                assert!(matches!(eof, Err(FrameError::Truncated { .. })), "{eof:?}");
            }
        }
        _ => panic!("codec ended with {codec_end:?}, slice decoder with {slice_end:?}"),
    }
}

/// Seeds: each frame type alone, and all of them as one stream.
pub fn seeds() -> Vec<Vec<u8>> {
    let partition = PartitionRef {
        topic: "orders".into(),
        partition: 3,
        topic_id: [7; 16],
    };
    let position = Position {
        partition: partition.clone(),
        segment_base: 1000,
        position: 4096,
    };
    let frames = vec![
        Frame::Hello(Hello {
            min_version: 1,
            max_version: 1,
            features_supported: 0,
            features_required: 0,
            role: Role::Shipper,
            link: "dr".into(),
            source_cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qk".into()),
            software: "segmirror 0.1.0".into(),
            shipper_node_id: None,
        }),
        Frame::HelloAck(HelloAck {
            version: 1,
            features: 0,
        }),
        Frame::Refuse(Refuse {
            reason: RefuseReason::Version,
            min_version: 2,
            max_version: 3,
            link: "dr".into(),
            message: "no common protocol version".into(),
        }),
        Frame::Chunk(Chunk {
            partition: partition.clone(),
            segment_base: 1000,
            position: 0,
            bytes: bytes::Bytes::from_static(&[0; 70]),
            crcs: Default::default(),
        }),
        Frame::SegmentSeal(SegmentSeal {
            partition,
            segment_base: 1000,
            final_size: 4096,
            log_sha256: [1; 32],
            companions: vec![
                Companion {
                    kind: CompanionKind::OffsetIndex,
                    size: 8,
                    sha256: [2; 32],
                    inline: Some(bytes::Bytes::from_static(&[0, 0, 0, 5, 0, 0, 0x10, 0])),
                    index_interval: None,
                },
                Companion {
                    kind: CompanionKind::TimeIndex,
                    size: 12,
                    sha256: [4; 32],
                    inline: None,
                    index_interval: Some(1024),
                },
                Companion {
                    kind: CompanionKind::ProducerSnapshot,
                    size: 120,
                    sha256: [3; 32],
                    inline: None,
                    index_interval: None,
                },
            ],
        }),
        Frame::Ack(position.clone()),
        Frame::LogStart(LogStart {
            partition: position.partition.clone(),
            log_start_offset: 4242,
        }),
        Frame::SourceProgress(SourceProgress {
            partition: position.partition.clone(),
            log_end_offset: 5000,
            high_watermark: Some(4990),
            active_segment_base: 4096,
            active_segment_size: 70_000,
            shipper_time_ms: 1_700_000_000_000,
            shipped: Some(Shipped {
                segment_base: 4096,
                position: 1200,
                end_offset: 4150,
            }),
        }),
        Frame::SegmentReplace(SegmentReplace {
            partition: position.partition.clone(),
            replaced_bases: vec![100, 250],
            position: 0,
            bytes: Bytes::from_static(b"compacted batches"),
            end: Some(ReplaceEnd {
                final_size: 17,
                log_sha256: [4; 32],
                companions: vec![Companion {
                    kind: CompanionKind::TxnIndex,
                    size: 3,
                    sha256: [5; 32],
                    inline: Some(Bytes::from_static(b"abc")),
                    index_interval: None,
                }],
                next_base: Some(400),
            }),
        }),
        // Feature bit 6: a cluster shipper's Hello (trailing node id), claims, revocations, rolls.
        Frame::Hello(Hello {
            min_version: 1,
            max_version: 1,
            features_supported: FEATURE_CLUSTER_SHIPPERS,
            features_required: FEATURE_CLUSTER_SHIPPERS,
            role: Role::Shipper,
            link: "dr".into(),
            source_cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qk".into()),
            software: "segmirror 0.1.0".into(),
            shipper_node_id: Some(2),
        }),
        Frame::Claim(Claim {
            partition: position.partition.clone(),
            leader_epoch: 7,
        }),
        Frame::ClaimResult(ClaimResult {
            partition: position.partition.clone(),
            verdict: ClaimVerdict::Granted {
                durable: Some(ClaimedAt {
                    segment_base: 1000,
                    position: 4096,
                    end_offset: 1042,
                    last_batch_crc: Some(0x1234_5678),
                }),
            },
        }),
        Frame::ClaimResult(ClaimResult {
            partition: position.partition.clone(),
            verdict: ClaimVerdict::Refused {
                holder_node: 1,
                holder_epoch: 8,
            },
        }),
        Frame::Revoke(Revoke {
            partition: position.partition.clone(),
            holder_node: 3,
            holder_epoch: 9,
        }),
        Frame::Roll(Roll {
            partition: position.partition.clone(),
            segment_base: 1000,
            final_size: 4096,
            next_offset: 1042,
            log_sha256: Some([6; 32]),
        }),
        Frame::ResumeWithEnds {
            positions: vec![position.clone()],
            ends: vec![LogEnd {
                end_offset: 120,
                last_epoch: 3,
            }],
        },
        Frame::Truncate(Truncate {
            partition: position.partition.clone(),
            truncate_to: 100,
            segment_base: 0,
            position: 4096,
            mode: TruncateMode::LogEnd,
            mirror_end_offset: 120,
            mirror_epoch: 3,
            source_epoch: 3,
            source_end_offset: 100,
        }),
        Frame::MirrorLayout(MirrorLayout {
            partition: position.partition.clone(),
            last: true,
            segments: vec![
                LayoutSegment { base: 0, size: 4096 },
                LayoutSegment { base: 100, size: 512 },
            ],
        }),
        // Feature bit 8: a link metadata piece (a document's middle: the size and position checks apply).
        Frame::LinkMeta(LinkMetaPiece {
            version: 3,
            part: MetaPart::Offsets,
            size: 64,
            sha256: [9; 32],
            position: 16,
            bytes: Bytes::from_static(b"{\"format\":\"segmirror.offsets.v1\""),
        }),
        // Feature bit 9: the shipper's link id.
        Frame::LinkId(LinkId {
            link_id: "0123456789abcdef0123456789abcdef".into(),
        }),
        Frame::Resume(vec![position.clone(), position]),
        Frame::Heartbeat { sequence: 9 },
        Frame::Credit { bytes: 1 << 20 },
        Frame::Goodbye(Goodbye {
            reason: GoodbyeReason::Shutdown,
            message: "SIGTERM".into(),
        }),
    ];
    let mut out = Vec::new();
    let mut stream = BytesMut::new();
    for f in &frames {
        let mut one = BytesMut::new();
        frame::encode(f, MAX_PAYLOAD_LEN, &mut one).expect("seed encodes");
        stream.extend_from_slice(&one);
        out.push(one.to_vec());
    }
    out.push(stream.to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sealing lets a mutated payload through the CRC to the payload decoder.
    #[test]
    fn sealing_reaches_the_payload_decoder() {
        let seeds = seeds();
        // The Refuse seed (type 3); bump its link length so the fields no longer fit.
        let mut refuse = seeds[2].clone();
        assert_eq!(refuse[0], 3);
        refuse[HEADER_LEN + 7] = 0xff;
        assert!(matches!(
            frame::decode(&refuse, 0, MAX_PAYLOAD_LEN),
            Err(FrameError::Crc { .. })
        ));
        let sealed = seal_crcs(&refuse, MAX_PAYLOAD_LEN);
        assert!(
            matches!(
                frame::decode(&sealed, 0, MAX_PAYLOAD_LEN),
                Err(FrameError::Field {
                    frame: "Refuse",
                    field: "link",
                    ..
                })
            ),
            "{:?}",
            frame::decode(&sealed, 0, MAX_PAYLOAD_LEN)
        );
        direct_frames(&refuse);
        // A whole valid stream is left as it is.
        let stream = seeds.last().expect("stream");
        assert_eq!(&seal_crcs(stream, MAX_PAYLOAD_LEN), stream);
    }
}
