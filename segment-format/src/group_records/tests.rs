//! Decoding of hand-built `__consumer_offsets` keys and values of every version, byte layouts checked against
//! Kafka's schemas (literal bytes, not only round trips through our own encoder), and hostile input.

use proptest::prelude::*;

use super::encode::*;
use super::*;

fn value(version: i16) -> OffsetCommitValue {
    OffsetCommitValue {
        version,
        offset: 42,
        leader_epoch: (version >= 3).then_some(7),
        metadata: "meta".into(),
        commit_timestamp: 1_700_000_000_000,
        expire_timestamp: (version == 1).then_some(1_700_000_600_000),
        topic_id: (version >= 4).then_some([9; 16]),
    }
}

#[test]
fn offset_commit_key_v0_and_v1_literal_bytes() {
    for record_type in [0i16, 1] {
        let mut key = record_type.to_be_bytes().to_vec();
        key.extend_from_slice(&[0, 1, b'g', 0, 2, b't', b'p', 0, 0, 0, 3]);
        assert_eq!(key, offset_commit_key(record_type, "g", "tp", 3));
        let GroupRecord::OffsetCommit { key, value } = decode_record(Some(&key), None).unwrap() else {
            panic!("not an offset commit");
        };
        assert_eq!((key.group.as_str(), key.topic.as_str(), key.partition), ("g", "tp", 3));
        assert_eq!(value, None, "a null value is a tombstone");
    }
}

#[test]
fn offset_commit_value_every_version() {
    // v0: offset, metadata, commitTimestamp.
    let v0 = [
        &0i16.to_be_bytes()[..],
        &42i64.to_be_bytes(),
        &[0, 1, b'm'],
        &5i64.to_be_bytes(),
    ]
    .concat();
    let d = decode_offset_commit_value(&v0).unwrap();
    assert_eq!((d.offset, d.metadata.as_str(), d.commit_timestamp), (42, "m", 5));
    assert_eq!((d.leader_epoch, d.expire_timestamp), (None, None));
    // v1 adds expireTimestamp after commitTimestamp.
    let v1 = [
        &1i16.to_be_bytes()[..],
        &42i64.to_be_bytes(),
        &[0, 0],
        &5i64.to_be_bytes(),
        &9i64.to_be_bytes(),
    ]
    .concat();
    assert_eq!(decode_offset_commit_value(&v1).unwrap().expire_timestamp, Some(9));
    // v2 is v0's layout.
    let v2 = [&2i16.to_be_bytes()[..], &v0[2..]].concat();
    assert_eq!(decode_offset_commit_value(&v2).unwrap().offset, 42);
    // v3 puts leaderEpoch after offset; -1 means none.
    let v3 = [
        &3i16.to_be_bytes()[..],
        &42i64.to_be_bytes(),
        &(-1i32).to_be_bytes(),
        &[0, 0],
        &5i64.to_be_bytes(),
    ]
    .concat();
    assert_eq!(decode_offset_commit_value(&v3).unwrap().leader_epoch, None);
    // v4 is flexible: compact string metadata, tagged fields (topicId = tag 0).
    let v4 = [
        &4i16.to_be_bytes()[..],
        &42i64.to_be_bytes(),
        &3i32.to_be_bytes(),
        &[2, b'm'],
        &5i64.to_be_bytes(),
        &[1, 0, 16],
        &[7; 16],
    ]
    .concat();
    let d = decode_offset_commit_value(&v4).unwrap();
    assert_eq!(
        (d.leader_epoch, d.topic_id, d.metadata.as_str()),
        (Some(3), Some([7; 16]), "m")
    );
    for version in 0..=4 {
        let v = value(version);
        assert_eq!(
            decode_offset_commit_value(&offset_commit_value(&v)).unwrap(),
            v,
            "v{version}"
        );
    }
}

#[test]
fn offset_commit_value_unknown_tags_are_skipped_and_unknown_versions_refused() {
    let mut v4 = offset_commit_value(&OffsetCommitValue {
        topic_id: None,
        ..value(4)
    });
    v4.pop();
    v4.extend_from_slice(&[1, 5, 2, 0xaa, 0xbb]); // one tagged field, tag 5, 2 bytes
    assert_eq!(decode_offset_commit_value(&v4).unwrap().offset, 42);
    let mut v5 = offset_commit_value(&value(4));
    v5[..2].copy_from_slice(&5i16.to_be_bytes());
    let e = decode_offset_commit_value(&v5).unwrap_err();
    assert!(e.contains("OffsetCommitValue version 5"), "{e}");
}

fn group_value(version: i16) -> GroupMetadataValue {
    GroupMetadataValue {
        version,
        protocol_type: "consumer".into(),
        generation: 3,
        protocol: Some("range".into()),
        leader: None,
        current_state_timestamp: (version >= 2).then_some(1_700_000_000_000),
        members: vec![
            MemberMetadata {
                member_id: "m-1".into(),
                group_instance_id: (version >= 3).then(|| "static-1".into()),
                client_id: "client".into(),
                client_host: "/127.0.0.1".into(),
            },
            MemberMetadata {
                member_id: "m-2".into(),
                group_instance_id: None,
                client_id: "client".into(),
                client_host: "/127.0.0.1".into(),
            },
        ],
    }
}

#[test]
fn group_metadata_every_version() {
    let key = group_metadata_key("grp");
    assert_eq!(key, [0, 2, 0, 3, b'g', b'r', b'p']);
    for version in 0..=4 {
        let v = group_value(version);
        let bytes = group_metadata_value(&v);
        let GroupRecord::GroupMetadata { group, value } = decode_record(Some(&key), Some(&bytes)).unwrap() else {
            panic!("not group metadata");
        };
        assert_eq!(group, "grp");
        assert_eq!(value.unwrap(), v, "v{version}");
    }
    // v0 literal: an empty group with null protocol and leader.
    let v0 = [
        &0i16.to_be_bytes()[..],
        &[0, 0],
        &0i32.to_be_bytes(),
        &[0xff, 0xff, 0xff, 0xff],
        &0i32.to_be_bytes(),
    ]
    .concat();
    let d = decode_group_metadata_value(&v0).unwrap();
    assert_eq!(
        (d.protocol_type.as_str(), d.protocol, d.leader, d.members.len()),
        ("", None, None, 0)
    );
}

#[test]
fn kip848_share_and_streams_keys_are_decoded_values_only_checked() {
    let cases: &[(i16, Option<&str>, GroupType, bool)] = &[
        (3, None, GroupType::Consumer, true),
        (4, None, GroupType::Consumer, false),
        (5, Some("member"), GroupType::Consumer, false),
        (6, None, GroupType::Consumer, false),
        (7, Some("member"), GroupType::Consumer, false),
        (8, Some("member"), GroupType::Consumer, false),
        (9, None, GroupType::Share, false),
        (10, Some("member"), GroupType::Share, false),
        (11, None, GroupType::Share, true),
        (12, None, GroupType::Share, false),
        (13, Some("member"), GroupType::Share, false),
        (14, Some("member"), GroupType::Share, false),
        (15, None, GroupType::Share, false),
        (16, Some("topic-.*"), GroupType::Consumer, false),
        (17, None, GroupType::Streams, true),
        (19, Some("member"), GroupType::Streams, false),
        (20, None, GroupType::Streams, false),
        (21, Some("member"), GroupType::Streams, false),
        (22, Some("member"), GroupType::Streams, false),
        (23, None, GroupType::Streams, false),
    ];
    for &(record_type, second, group_type, is_metadata) in cases {
        let key = group_record_key(record_type, "g1", second);
        let value = [0u8, 1, 0xde, 0xad]; // version 1, a body this reader does not decode
        let record = decode_record(Some(&key), Some(&value)).unwrap();
        let GroupRecord::Group {
            record_type: t,
            group,
            second: s,
            group_type: gt,
            is_group_metadata,
            value_version,
            ..
        } = record
        else {
            panic!("type {record_type}: {record:?}");
        };
        assert_eq!(
            (t, group.as_str(), s.as_deref(), gt, is_group_metadata, value_version),
            (record_type, "g1", second, group_type, is_metadata, Some(1)),
            "type {record_type}"
        );
        // A key with its second string missing (or one too many) is refused, never misread.
        let wrong = group_record_key(record_type, "g1", if second.is_some() { None } else { Some("x") });
        let e = decode_record(Some(&wrong), None).unwrap_err();
        assert!(e.starts_with("key: "), "type {record_type}: {e}");
    }
}

#[test]
fn unknown_record_types_are_skipped_negative_refused() {
    for t in [18i16, 24, 999] {
        let key = group_record_key(t, "g", None);
        assert_eq!(
            decode_record(Some(&key), Some(&[0, 0])).unwrap(),
            GroupRecord::Unknown { record_type: t }
        );
    }
    let e = decode_record(Some(&[0xff, 0xff]), None).unwrap_err();
    assert!(e.contains("record type -1"), "{e}");
    let e = decode_record(None, None).unwrap_err();
    assert!(e.contains("null key"), "{e}");
}

#[test]
fn errors_name_the_field_and_byte() {
    let mut key = offset_commit_key(1, "group", "topic", 0);
    key.truncate(key.len() - 2);
    let e = decode_record(Some(&key), None).unwrap_err();
    assert_eq!(e, "key: OffsetCommitKey.partition needs 4 byte(s) at byte 16, 2 left");
    let mut key = offset_commit_key(1, "group", "topic", 0);
    key.push(0);
    let e = decode_record(Some(&key), None).unwrap_err();
    assert_eq!(e, "key: 1 byte(s) left after the OffsetCommitKey ended at byte 20");
    let mut value = group_metadata_value(&group_value(3));
    // The members array count (after version, "consumer", generation, "range", null leader, timestamp).
    let at = 2 + 10 + 4 + 7 + 2 + 8;
    value[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    let e = decode_group_metadata_value(&value).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "value: GroupMetadataValue.members at byte {at} claims 2147483647 elements"
        )),
        "{e}"
    );
    let bad_utf8 = [0u8, 2, 0, 1, 0xff];
    let e = decode_record(Some(&bad_utf8), None).unwrap_err();
    assert!(e.contains("GroupMetadataKey.group at byte 2 is not UTF-8"), "{e}");
}

proptest! {
    /// Hostile keys and values never panic, whatever the record type; every error names key or value.
    #[test]
    fn hostile_records_never_panic(
        record_type in prop_oneof![0i16..=24, any::<i16>()],
        key_tail in proptest::collection::vec(any::<u8>(), 0..64),
        value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..96)),
    ) {
        let key = [&record_type.to_be_bytes()[..], &key_tail].concat();
        if let Err(e) = decode_record(Some(&key), value.as_deref()) {
            prop_assert!(e.starts_with("key: ") || e.starts_with("value: "), "{}", e);
        }
    }

    /// Valid records with one byte flipped never panic; any strict prefix of one is refused.
    #[test]
    fn mutated_valid_values_never_panic(version in 0i16..=4, at in any::<prop::sample::Index>(), byte in any::<u8>(),
                                         cut in any::<prop::sample::Index>()) {
        let offsets = offset_commit_value(&value(version));
        let group = group_metadata_value(&group_value(version));
        prop_assert!(decode_offset_commit_value(&offsets[..cut.index(offsets.len())]).is_err());
        prop_assert!(decode_group_metadata_value(&group[..cut.index(group.len())]).is_err());
        for mut bytes in [offsets, group] {
            let i = at.index(bytes.len());
            bytes[i] = byte;
            let _ = decode_offset_commit_value(&bytes);
            let _ = decode_group_metadata_value(&bytes);
        }
    }
}
