//! Feature bit 5 (`FEATURE_TRUNCATE`) on the wire: a Resume with the mirror's log ends and the Truncate frame
//! round-trip; hostile encodings are refused naming the field; an older applier's Resume stays a plain Resume.

use bytes::BytesMut;
use segmirror_transport::direct::frame::{self, FrameType, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::handshake::{FEATURE_TRUNCATE, SUPPORTED_FEATURES};
use segmirror_transport::direct::{
    Frame, FrameError, LogEnd, PartitionRef, Position, Truncate, TruncateMode, LOG_END_LEN,
};

fn encode(frame: &Frame) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame::encode(frame, MAX_PAYLOAD_LEN, &mut out).expect("encode");
    out.to_vec()
}

fn decode(bytes: &[u8]) -> Result<Frame, FrameError> {
    frame::decode(bytes, 0, MAX_PAYLOAD_LEN).map(|d| d.expect("a whole frame").0)
}

/// A frame with a correct CRC around `payload`.
fn raw(frame_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![frame_type, 0];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn payload(frame: &[u8]) -> Vec<u8> {
    frame[6..frame.len() - 4].to_vec()
}

fn partition() -> PartitionRef {
    PartitionRef {
        topic: "orders".into(),
        partition: 3,
        topic_id: [9; 16],
    }
}

fn at(base: i64, position: u64) -> Position {
    Position {
        partition: partition(),
        segment_base: base,
        position,
    }
}

fn truncate() -> Truncate {
    Truncate {
        partition: partition(),
        truncate_to: 150,
        segment_base: 100,
        position: 4096,
        mode: TruncateMode::LogEnd,
        mirror_end_offset: 180,
        mirror_epoch: 4,
        source_epoch: 4,
        source_end_offset: 150,
    }
}

#[test]
fn feature_bit_5_is_offered_and_frame_14_is_truncate() {
    assert_eq!(FEATURE_TRUNCATE, 0x20);
    assert_ne!(SUPPORTED_FEATURES & FEATURE_TRUNCATE, 0);
    assert_eq!(FrameType::from_code(14), Some(FrameType::Truncate));
    assert_eq!(FrameType::Truncate as u8, 14);
    assert!(FrameType::ALL.contains(&FrameType::Truncate));
}

#[test]
fn a_resume_with_log_ends_and_a_truncate_round_trip() {
    let resume = Frame::ResumeWithEnds {
        positions: vec![at(0, 100), at(100, 0)],
        ends: vec![
            LogEnd {
                end_offset: 7,
                last_epoch: 0,
            },
            LogEnd {
                end_offset: 100,
                last_epoch: -1,
            },
        ],
    };
    for f in [resume, Frame::Truncate(truncate())] {
        let bytes = encode(&f);
        assert_eq!(decode(&bytes).expect("decodes"), f);
    }
}

#[test]
fn a_resume_without_log_ends_is_what_an_older_applier_sends() {
    // The log ends trail the positions: without them the bytes are exactly a version-1 Resume.
    let plain = encode(&Frame::Resume(vec![at(0, 100)]));
    let with = encode(&Frame::ResumeWithEnds {
        positions: vec![at(0, 100)],
        ends: vec![LogEnd {
            end_offset: 7,
            last_epoch: 2,
        }],
    });
    assert_eq!(payload(&with).len(), payload(&plain).len() + LOG_END_LEN);
    assert_eq!(payload(&with)[..payload(&plain).len()], payload(&plain)[..]);
    assert_eq!(decode(&plain).expect("decodes"), Frame::Resume(vec![at(0, 100)]));
}

#[test]
fn log_ends_that_do_not_match_the_positions_are_refused() {
    // Encoding: one end per position, and at least one.
    for (positions, ends) in [
        (vec![at(0, 1)], vec![]),
        (
            vec![],
            vec![LogEnd {
                end_offset: 1,
                last_epoch: 0,
            }],
        ),
        (
            vec![at(0, 1), at(0, 2)],
            vec![LogEnd {
                end_offset: 1,
                last_epoch: 0,
            }],
        ),
    ] {
        let mut out = BytesMut::new();
        let e =
            frame::encode(&Frame::ResumeWithEnds { positions, ends }, MAX_PAYLOAD_LEN, &mut out).expect_err("refused");
        assert!(matches!(e, FrameError::Encode { field: "ends", .. }), "{e:?}");
        assert!(out.is_empty());
    }
    // Decoding: trailing bytes that are not exactly one log end per position.
    let one = payload(&encode(&Frame::ResumeWithEnds {
        positions: vec![at(0, 1)],
        ends: vec![LogEnd {
            end_offset: 5,
            last_epoch: 1,
        }],
    }));
    for cut in [1, 4, LOG_END_LEN - 1] {
        let e = decode(&raw(7, &one[..one.len() - cut])).expect_err("refused");
        assert!(
            matches!(
                &e,
                FrameError::Field {
                    frame: "Resume",
                    field: "ends",
                    ..
                }
            ),
            "cut {cut}: {e:?}"
        );
    }
    // An epoch below -1.
    let mut bad = one.clone();
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&(-2i32).to_be_bytes());
    let e = decode(&raw(7, &bad)).expect_err("refused");
    assert!(
        matches!(&e, FrameError::Field { field: "last_epoch", reason, .. } if reason.contains("-2")),
        "{e:?}"
    );
    // A negative end offset.
    let mut bad = one;
    let n = bad.len();
    bad[n - LOG_END_LEN..n - 4].copy_from_slice(&(-1i64).to_be_bytes());
    let e = decode(&raw(7, &bad)).expect_err("refused");
    assert!(
        matches!(
            &e,
            FrameError::Field {
                field: "end_offset",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn hostile_truncate_fields_are_refused_naming_them() {
    let good = payload(&encode(&Frame::Truncate(truncate())));
    // Offsets within the payload: partition = 2 + 6 ("orders") + 4 + 16 = 28.
    let truncate_to = 28;
    let segment_base = truncate_to + 8;
    let mode = segment_base + 8 + 8;
    let mirror_epoch = mode + 1 + 8;
    let source_epoch = mirror_epoch + 4;
    let cases: Vec<(&str, usize, Vec<u8>)> = vec![
        ("truncate_to", truncate_to, (-5i64).to_be_bytes().to_vec()),
        ("segment_base", segment_base, 151i64.to_be_bytes().to_vec()),
        ("mode", mode, vec![0]),
        ("mode", mode, vec![3]),
        ("mirror_epoch", mirror_epoch, (-7i32).to_be_bytes().to_vec()),
        ("source_epoch", source_epoch, (-9i32).to_be_bytes().to_vec()),
    ];
    for (field, offset, value) in cases {
        let mut bad = good.clone();
        bad[offset..offset + value.len()].copy_from_slice(&value);
        let e = decode(&raw(14, &bad)).expect_err("refused");
        assert!(
            matches!(&e, FrameError::Field { frame: "Truncate", field: f, .. } if *f == field),
            "{field}: {e:?}"
        );
    }
    // Short and long payloads.
    let e = decode(&raw(14, &good[..good.len() - 1])).expect_err("short");
    assert!(matches!(&e, FrameError::Field { frame: "Truncate", .. }), "{e:?}");
    let mut long = good;
    long.push(0);
    let e = decode(&raw(14, &long)).expect_err("long");
    assert!(matches!(&e, FrameError::TrailingBytes { .. }), "{e:?}");
}

mod support;

mod session {
    use bytes::Bytes;
    use futures::{SinkExt, StreamExt};
    use segmirror_transport::direct::handshake::FEATURE_TRUNCATE;
    use segmirror_transport::direct::session::{ApplierSession, BoxIo, FramedIo};
    use segmirror_transport::direct::{handshake, Chunk, DirectError, Frame, GoodbyeReason, Role, Session};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::sync::CancellationToken;

    use super::support::session::*;
    use super::{Truncate, TruncateMode};

    /// A shipper's framed stream and an applier session task; `truncate` says whether the applier offers bit 5.
    async fn pair(truncate: bool) -> ((FramedIo, Session), (FramedIo, Session)) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let applier = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut config = handshake_config(Role::Applier, LINK);
            if !truncate {
                config.features_supported &= !FEATURE_TRUNCATE;
            }
            handshake(Box::new(tcp) as BoxIo, &config).await
        });
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let shipper = handshake(Box::new(tcp) as BoxIo, &handshake_config(Role::Shipper, LINK))
            .await
            .expect("shipper handshake");
        (shipper, applier.await.expect("join").expect("applier handshake"))
    }

    async fn goodbye(framed: &mut FramedIo) -> String {
        loop {
            match framed.next().await {
                Some(Ok(Frame::Goodbye(g))) => {
                    assert_eq!(g.reason, GoodbyeReason::Error);
                    return g.message;
                }
                Some(Ok(_)) => continue,
                other => panic!("expected Goodbye, got {other:?}"),
            }
        }
    }

    fn truncate_at(position: u64) -> Frame {
        Frame::Truncate(Truncate {
            partition: partitions(1).remove(0),
            truncate_to: 10,
            segment_base: 0,
            position,
            mode: TruncateMode::LogEnd,
            mirror_end_offset: 20,
            mirror_epoch: 1,
            source_epoch: 1,
            source_end_offset: 10,
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_truncate_without_the_bit_or_not_below_the_durable_end_is_refused_naming_the_partition() {
        // Without bit 5: an unexpected frame.
        let ((mut s_framed, _), (a_framed, a_session)) = pair(false).await;
        assert_eq!(a_session.features & FEATURE_TRUNCATE, 0);
        let (mem, _, _) = MemApplier::new(None);
        let mut applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
        let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &CancellationToken::new()).await });
        s_framed.send(truncate_at(0)).await.expect("send");
        let message = goodbye(&mut s_framed).await;
        assert!(message.contains("Truncate"), "{message}");
        let err = a.await.expect("join").expect_err("refused");
        assert!(
            matches!(err, DirectError::UnexpectedFrame { got: "Truncate", .. }),
            "{err:?}"
        );

        // With it: a Truncate at or beyond the durable end (here 100 bytes of segment 0) is a protocol error.
        let ((mut s_framed, _), (a_framed, a_session)) = pair(true).await;
        assert_ne!(a_session.features & FEATURE_TRUNCATE, 0);
        let (mem, state, _) = MemApplier::new(None);
        let mut applier = ApplierSession::new(mem, session_config(1 << 20)).expect("applier");
        let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &CancellationToken::new()).await });
        s_framed
            .send(Frame::Chunk(Chunk {
                partition: partitions(1).remove(0),
                segment_base: 0,
                position: 0,
                bytes: Bytes::from_static(&[5u8; 100]),
                crcs: Default::default(),
            }))
            .await
            .expect("send");
        s_framed.send(truncate_at(100)).await.expect("send");
        let message = goodbye(&mut s_framed).await;
        for needle in [
            partitions(1)[0].topic.as_str(),
            "offset 10",
            "position 100",
            "not below the durable end",
        ] {
            assert!(message.contains(needle), "{needle:?} not in {message}");
        }
        let err = a.await.expect("join").expect_err("refused");
        assert!(matches!(err, DirectError::Protocol { .. }), "{err:?}");
        assert_eq!(state.lock().expect("lock").applied_chunks, 1);
    }
}
