//! LinkMeta frames: a version cut into pieces of any size and put together again is the version sent (through the
//! frame codec too); pieces out of order, a tampered document, a hostile size and another link's documents are
//! refused naming what is wrong.

use bytes::BytesMut;
use proptest::prelude::*;

use super::*;
use crate::bucket::link_meta::tests::sample;
use crate::direct::frame::{encode, Frame};
use crate::direct::FrameError;

fn decode(buf: &mut BytesMut, max: u32) -> std::result::Result<Option<Frame>, FrameError> {
    crate::direct::frame::decode(buf, 0, max).map(|d| d.map(|(frame, _)| frame))
}

fn through_codec(piece: LinkMetaPiece) -> LinkMetaPiece {
    let mut buf = BytesMut::new();
    encode(&Frame::LinkMeta(piece), MAX_PAYLOAD_LEN, &mut buf).unwrap();
    match decode(&mut buf, MAX_PAYLOAD_LEN).unwrap() {
        Some(Frame::LinkMeta(p)) => p,
        other => panic!("decoded {other:?}"),
    }
}

fn assemble(pieces: Vec<LinkMetaPiece>) -> Result<Vec<LinkMeta>> {
    let mut assembler = MetaAssembler::new("east");
    let mut out = Vec::new();
    for piece in pieces {
        if let Some(meta) = assembler.accept(through_codec(piece))? {
            out.push(meta);
        }
    }
    Ok(out)
}

#[test]
fn a_version_round_trips_in_one_piece_per_document_and_in_many() {
    let meta = sample(3);
    let encoded = EncodedLinkMeta::encode(&meta).unwrap();
    assert_eq!(encoded.pieces(META_PIECE_BYTES).len(), 2);
    assert_eq!(assemble(encoded.pieces(META_PIECE_BYTES)).unwrap(), vec![meta.clone()]);
    let many = encoded.pieces(7);
    assert!(many.len() > 20, "{}", many.len());
    assert_eq!(assemble(many).unwrap(), vec![meta.clone()]);
    // Two versions one after the other on one session.
    let next = sample(4);
    let mut both = encoded.pieces(50);
    both.extend(EncodedLinkMeta::encode(&next).unwrap().pieces(50));
    assert_eq!(assemble(both).unwrap(), vec![meta, next]);
}

#[test]
fn a_tampered_document_is_refused_by_its_digest_before_it_is_parsed() {
    let mut pieces = EncodedLinkMeta::encode(&sample(1)).unwrap().pieces(16);
    let last_topics = pieces.iter().rposition(|p| p.part == MetaPart::Topics).unwrap();
    let mut bytes = pieces[last_topics].bytes.to_vec();
    bytes[0] ^= 1;
    pieces[last_topics].bytes = bytes.into();
    let e = assemble(pieces).unwrap_err().to_string();
    assert!(e.contains("version 1 topics.json: SHA-256 mismatch"), "{e}");
}

#[test]
fn pieces_out_of_order_missing_or_of_another_version_are_refused() {
    let pieces = EncodedLinkMeta::encode(&sample(1)).unwrap().pieces(16);
    // Offsets first.
    let first_offsets = pieces.iter().position(|p| p.part == MetaPart::Offsets).unwrap();
    let e = assemble(pieces[first_offsets..].to_vec()).unwrap_err().to_string();
    assert!(e.contains("expected topics.json first"), "{e}");
    // A gap.
    let mut gap = pieces.clone();
    gap.remove(1);
    let e = assemble(gap).unwrap_err().to_string();
    assert!(
        e.contains("piece at position 32, the document has 16 bytes so far"),
        "{e}"
    );
    // Offsets of another version after version 1's topics.
    let mut mixed: Vec<_> = pieces[..first_offsets].to_vec();
    mixed.extend(
        EncodedLinkMeta::encode(&sample(2))
            .unwrap()
            .pieces(16)
            .into_iter()
            .filter(|p| p.part == MetaPart::Offsets),
    );
    let e = assemble(mixed).unwrap_err().to_string();
    assert!(e.contains("the topics document before it is of version 1"), "{e}");
}

#[test]
fn documents_of_another_link_or_that_do_not_validate_are_refused_naming_the_field() {
    let mut other = sample(1);
    other.topics.link = "west".into();
    other.offsets.link = "west".into();
    let e = assemble(EncodedLinkMeta::encode(&other).unwrap().pieces(1 << 20))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("topics.json: invalid: link: belongs to link \"west\", not \"east\""),
        "{e}"
    );
    // A negative offset: valid JSON, invalid document (encoded by hand, `encode` validates).
    let mut bad = sample(1);
    bad.offsets.offsets[0].offset = -5;
    assert!(EncodedLinkMeta::encode(&bad).unwrap_err().contains("offsets[0].offset"));
    let good = EncodedLinkMeta::encode(&sample(1)).unwrap();
    let offsets = bytes::Bytes::from(serde_json::to_vec(&bad.offsets).unwrap());
    let forged = EncodedLinkMeta {
        offsets_sha256: super::sha256(&offsets),
        offsets,
        ..good
    };
    let e = assemble(forged.pieces(1 << 20)).unwrap_err().to_string();
    assert!(
        e.contains("offsets.json: invalid: offsets[0].offset: -5 is negative"),
        "{e}"
    );
}

#[test]
fn a_hostile_size_is_refused_by_the_decoder_before_anything_is_buffered() {
    let piece = LinkMetaPiece {
        version: 1,
        part: MetaPart::Topics,
        size: 10,
        sha256: [0; 32],
        position: 0,
        bytes: bytes::Bytes::from_static(b"0123456789"),
    };
    let mut buf = BytesMut::new();
    encode(&Frame::LinkMeta(piece.clone()), MAX_PAYLOAD_LEN, &mut buf).unwrap();
    // The size field sits after the 6-byte header, version (8) and part (1).
    let at = 6 + 8 + 1;
    buf[at..at + 8].copy_from_slice(&(segmirror_contract::link_meta::MAX_TOPICS_BYTES + 1).to_be_bytes());
    let crc = crc32c::crc32c(&buf[..buf.len() - 4]);
    let n = buf.len();
    buf[n - 4..].copy_from_slice(&crc.to_be_bytes());
    match decode(&mut buf.clone(), MAX_PAYLOAD_LEN) {
        Err(FrameError::Field {
            frame, field, reason, ..
        }) => {
            assert_eq!((frame, field), ("LinkMeta", "size"));
            assert!(reason.contains("over the maximum of 67108864 bytes"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A piece running past its document, an unknown part: refused naming the field; encoding refuses too.
    let past = LinkMetaPiece {
        size: 4,
        ..piece.clone()
    };
    let e = encode(&Frame::LinkMeta(past), MAX_PAYLOAD_LEN, &mut BytesMut::new()).unwrap_err();
    assert!(
        e.to_string()
            .contains("10 bytes at position 0 run past the 4-byte topics.json"),
        "{e}"
    );
    let mut buf = BytesMut::new();
    encode(&Frame::LinkMeta(piece), MAX_PAYLOAD_LEN, &mut buf).unwrap();
    buf[6 + 8] = 9;
    let crc = crc32c::crc32c(&buf[..buf.len() - 4]);
    let n = buf.len();
    buf[n - 4..].copy_from_slice(&crc.to_be_bytes());
    let e = decode(&mut buf, MAX_PAYLOAD_LEN).unwrap_err().to_string();
    assert!(e.contains("field `part`") && e.contains("unknown part 9"), "{e}");
}

#[test]
fn a_truncated_link_meta_frame_is_reported_as_truncated() {
    let piece = EncodedLinkMeta::encode(&sample(1)).unwrap().pieces(1 << 20).remove(0);
    let mut buf = BytesMut::new();
    encode(&Frame::LinkMeta(piece), MAX_PAYLOAD_LEN, &mut buf).unwrap();
    let whole = buf.len();
    let mut cut = BytesMut::from(&buf[..whole - 9]);
    // Incomplete: the decoder waits; at the end of the stream that is `Truncated`.
    assert_eq!(decode(&mut cut, MAX_PAYLOAD_LEN).unwrap(), None);
    let mut codec = crate::direct::FrameCodec::new(MAX_PAYLOAD_LEN);
    let e = tokio_util::codec::Decoder::decode_eof(&mut codec, &mut cut).unwrap_err();
    assert!(matches!(e, FrameError::Truncated { .. }), "{e:?}");
}

#[test]
fn a_link_id_frame_round_trips_and_a_malformed_id_is_refused() {
    let id = "0123456789abcdef0123456789abcdef".to_string();
    let mut buf = BytesMut::new();
    encode(
        &Frame::LinkId(crate::direct::LinkId { link_id: id.clone() }),
        MAX_PAYLOAD_LEN,
        &mut buf,
    )
    .unwrap();
    assert_eq!(
        decode(&mut buf, MAX_PAYLOAD_LEN).unwrap(),
        Some(Frame::LinkId(crate::direct::LinkId { link_id: id }))
    );
    let e = encode(
        &Frame::LinkId(crate::direct::LinkId { link_id: "zz".into() }),
        MAX_PAYLOAD_LEN,
        &mut BytesMut::new(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("\"zz\" is not 32 hex digits"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any version, cut at any piece size, round-trips through the codec and the assembler.
    #[test]
    fn any_version_at_any_piece_size_round_trips(
        version in 1u64..1_000_000,
        groups in proptest::collection::btree_set("[a-z]{1,12}", 0..20),
        offset in 0i64..i64::MAX / 2,
        piece_bytes in 1usize..600,
    ) {
        let mut meta = sample(version);
        let template = meta.offsets.offsets[0].clone();
        meta.offsets.offsets = groups
            .iter()
            .enumerate()
            .map(|(i, g)| segmirror_contract::link_meta::GroupOffset { group: g.clone(), offset: offset + i as i64, ..template.clone() })
            .collect();
        let encoded = EncodedLinkMeta::encode(&meta).unwrap();
        prop_assert_eq!(assemble(encoded.pieces(piece_bytes)).unwrap(), vec![meta]);
    }
}
