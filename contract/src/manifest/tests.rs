//! Tests of the bucket contract: key layout and round trips, hostile keys,
//! manifest and lease validation, and parsers on random input.

use proptest::prelude::*;

use super::*;

fn tid() -> Uuid {
    Uuid([7; 16])
}

fn pk(prefix: &str) -> PartitionKey {
    PartitionKey::new(KeyPrefix::new(prefix).unwrap(), "dc1-to-dc2", "orders.v1", 3).unwrap()
}

fn manifest(prefix: &str) -> Manifest {
    let p = pk(prefix);
    let range = SegmentRange::new(100, 250).unwrap();
    let file = |kind, size| {
        let name = SegmentFileName::new(100, kind);
        ManifestFile {
            name,
            key: p.data_key(&tid(), range, name).unwrap(),
            size,
            crc32c: 0xdead_beef,
            sha256: Sha256Digest([0xab; 32]),
            mtime_ms: 1_700_000_000_000,
        }
    };
    Manifest {
        format: MANIFEST_FORMAT_V1.into(),
        link: "dc1-to-dc2".into(),
        topic: "orders.v1".into(),
        partition: 3,
        source_topic_id: tid(),
        source_cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
        base_offset: 100,
        first_offset: Some(100),
        last_offset: Some(249),
        next_offset: 250,
        batches: 10,
        records: 150,
        max_timestamp: 1_700_000_000_123,
        sealed: true,
        epochs: vec![
            EpochStart {
                epoch: 3,
                start_offset: 40,
            },
            EpochStart {
                epoch: 5,
                start_offset: 200,
            },
        ],
        log_start_offset: 0,
        files: vec![
            file(SegmentFileKind::Log, 9000),
            file(SegmentFileKind::Index, 16),
            file(SegmentFileKind::TimeIndex, 24),
            file(SegmentFileKind::Snapshot, 10 + 46),
        ],
        end_snapshot: None,
        log_chunks: Vec::new(),
        shipper: ShipperStamp {
            id: "host-a/1234".into(),
            lease_epoch: 2,
        },
        created_at_ms: 1_700_000_001_000,
    }
}

#[test]
fn keys_have_the_documented_layout() {
    let p = pk("backups/kafka");
    assert_eq!(p.dir(), "backups/kafka/dc1-to-dc2/orders.v1/3");
    assert_eq!(
        p.lease_key(7),
        "backups/kafka/dc1-to-dc2/orders.v1/3/lease/00000000000000000007.json"
    );
    let id = tid().to_string();
    assert_eq!(id.len(), 22);
    assert_eq!(
        p.manifest_key(&tid(), 100).unwrap(),
        format!("backups/kafka/dc1-to-dc2/orders.v1/3/{id}/manifests/00000000000000000100.json")
    );
    let range = SegmentRange::new(100, 250).unwrap();
    assert_eq!(
        p.data_key(&tid(), range, SegmentFileName::new(100, SegmentFileKind::TimeIndex)).unwrap(),
        format!(
            "backups/kafka/dc1-to-dc2/orders.v1/3/{id}/data/00000000000000000100/00000000000000000250/00000000000000000100.timeindex"
        )
    );
    // Root prefix: keys start with the link.
    assert_eq!(
        pk("").lease_key(1),
        "dc1-to-dc2/orders.v1/3/lease/00000000000000000001.json"
    );
    assert_eq!(pk("/a/b/").dir(), "a/b/dc1-to-dc2/orders.v1/3");
}

#[test]
fn builders_refuse_illegal_input() {
    let root = KeyPrefix::root();
    assert!(PartitionKey::new(root.clone(), "..", "t", 0).is_err());
    assert!(PartitionKey::new(root.clone(), "a/b", "t", 0).is_err());
    assert!(PartitionKey::new(root.clone(), "l", "..", 0).is_err());
    assert!(PartitionKey::new(root.clone(), "l", "a/b", 0).is_err());
    assert!(PartitionKey::new(root.clone(), "l", &"x".repeat(250), 0).is_err());
    assert!(PartitionKey::new(root, "l", "t", -1).is_err());
    assert!(KeyPrefix::new("a/../b").is_err());
    assert!(KeyPrefix::new("a//b").is_err());
    assert!(KeyPrefix::new("a/ b").is_err());
    assert!(KeyPrefix::new("a\\b").is_err());
    let p = pk("");
    assert!(p.manifest_key(&tid(), -1).is_err());
    let range = SegmentRange::new(100, 200).unwrap();
    assert!(p
        .data_key(&tid(), range, SegmentFileName::new(99, SegmentFileKind::Log))
        .is_err());
    assert!(SegmentRange::new(-1, 5).is_err());
    assert!(SegmentRange::new(5, 4).is_err());
}

#[test]
fn keys_parse_back() {
    for prefix in ["", "a", "a/b=c/d"] {
        let p = pk(prefix);
        let prefix = KeyPrefix::new(prefix).unwrap();
        let range = SegmentRange::new(100, 250).unwrap();
        let cases = [
            (p.lease_key(42), ObjectKind::Lease { epoch: 42 }),
            (
                p.manifest_key(&tid(), 100).unwrap(),
                ObjectKind::Manifest {
                    topic_id: tid(),
                    base_offset: 100,
                },
            ),
            (
                p.data_key(&tid(), range, SegmentFileName::new(100, SegmentFileKind::Log))
                    .unwrap(),
                ObjectKind::Data {
                    topic_id: tid(),
                    range,
                    file: SegmentFileName::new(100, SegmentFileKind::Log),
                },
            ),
        ];
        for (key, kind) in cases {
            let parsed = ObjectKey::parse(&prefix, &key).unwrap();
            assert_eq!(parsed.partition, p);
            assert_eq!(parsed.kind, kind);
            assert_eq!(parsed.to_key(), key);
        }
    }
}

#[test]
fn hostile_keys_are_rejected() {
    let id = tid().to_string();
    let prefix = KeyPrefix::new("p").unwrap();
    let data = |tail: &str| format!("p/l/t/0/{id}/data/{tail}");
    let bad = [
        "other/l/t/0/lease/00000000000000000001.json".to_string(),
        "p/../t/0/lease/00000000000000000001.json".into(),
        "p/l/../0/lease/00000000000000000001.json".into(),
        "p/l/t/00/lease/00000000000000000001.json".into(),
        "p/l/t/-1/lease/00000000000000000001.json".into(),
        "p/l/t/+1/lease/00000000000000000001.json".into(),
        "p/l/t/0/lease/1.json".into(),
        "p/l/t/0/lease/00000000000000000001.json/x".into(),
        "p/l/t/0/lease/../00000000000000000001.json".into(),
        "p/l/t/0/lease".into(),
        "/p/l/t/0/lease/00000000000000000001.json".into(),
        "p//l/t/0/lease/00000000000000000001.json".into(),
        format!("p/l/t/0/{id}/manifests/9223372036854775808.json"),
        format!("p/l/t/0/{id}/manifests/00000000000000000100.JSON"),
        "p/l/t/0/AAAAAAAAAAAAAAAAAAAAAA/manifests/00000000000000000100.json".into(),
        format!("p/l/t/0/{id}==/manifests/00000000000000000100.json"),
        data("00000000000000000100/00000000000000000200/../../../../../../etc/passwd"),
        data("00000000000000000100/00000000000000000200/passwd"),
        data("00000000000000000100/00000000000000000200/00000000000000000100.log.deleted"),
        data("00000000000000000100/00000000000000000200/00000000000000000101.log"),
        data("00000000000000000100/00000000000000000200/100.log"),
        data("00000000000000000100/00000000000000000200/leader-epoch-checkpoint"),
        data("00000000000000000200/00000000000000000100/00000000000000000200.log"),
        data("00000000000000000100/00000000000000000200/00000000000000000100.log/x"),
    ];
    for key in bad {
        let err = ObjectKey::parse(&prefix, &key).expect_err(&key);
        assert!(
            matches!(err, Error::BadKey { key: ref at, .. } if at == &key),
            "{key}: {err}"
        );
    }
}

#[test]
fn a_valid_manifest_round_trips_through_json() {
    for prefix in ["", "backups"] {
        let m = manifest(prefix);
        m.validate().unwrap();
        let key = pk(prefix).manifest_key(&tid(), 100).unwrap();
        let json = m.to_json();
        let back = Manifest::from_json(&key, &json).unwrap();
        assert_eq!(back, m);
        back.check_location(&KeyPrefix::new(prefix).unwrap(), &key).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["format"], "segmirror.manifest.v1");
        assert_eq!(v["source_topic_id"], tid().to_string());
        assert_eq!(v["files"][0]["name"], "00000000000000000100.log");
        assert_eq!(v["files"][0]["sha256"], "ab".repeat(32));
        assert_eq!(v["files"][0]["crc32c"], 0xdead_beef_u32);
    }
}

#[test]
fn unknown_fields_are_ignored_and_unknown_formats_rejected() {
    let key = "k.json";
    let mut v: serde_json::Value = serde_json::from_slice(&manifest("").to_json()).unwrap();
    v["added_in_a_later_v1"] = serde_json::json!({"x": 1});
    Manifest::from_json(key, &serde_json::to_vec(&v).unwrap()).unwrap();
    v["format"] = "segmirror.manifest.v3".into();
    let err = Manifest::from_json(key, &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(
        err.to_string().contains("unsupported format 'segmirror.manifest.v3'"),
        "{err}"
    );
    let err = Manifest::from_json(key, b"{\"link\": 1}").unwrap_err();
    assert!(err.to_string().contains("no 'format' field"), "{err}");
    // Syntax errors name the byte: the offending one, or the last one read at EOF.
    for (doc, at) in [(&b"{\n  \"format\" x}"[..], 13), (b"{\n  \"format\": ", 13)] {
        match Manifest::from_json(key, doc).unwrap_err() {
            Error::BadDocument {
                position,
                problem: DocumentProblem::Invalid { .. },
                ..
            } => assert_eq!(position, at),
            other => panic!("{other}"),
        }
    }
}

#[test]
fn oversized_documents_are_refused_before_parsing() {
    let big = vec![b' '; MAX_MANIFEST_BYTES as usize + 1];
    let err = Manifest::from_json("k", &big).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadDocument {
                problem: DocumentProblem::TooLarge { .. },
                ..
            }
        ),
        "{err}"
    );
    let big = vec![b' '; MAX_LEASE_BYTES as usize + 1];
    assert!(Lease::from_json("k", &big).is_err());
}

fn invalid(mutate: impl FnOnce(&mut Manifest), expect: &str) {
    let mut m = manifest("pre");
    mutate(&mut m);
    let defect = m.validate().expect_err(expect);
    assert!(
        defect.to_string().contains(expect),
        "expected '{expect}', got '{defect}'"
    );
    // And the same through JSON, where most hostile manifests arrive.
    assert!(Manifest::from_json("k", &serde_json::to_vec(&m).unwrap()).is_err());
}

#[test]
fn inconsistent_manifests_are_invalid() {
    invalid(|m| m.first_offset = Some(99), "base 100 <= first 99");
    invalid(|m| m.last_offset = Some(250), "last 250 < next 250");
    invalid(|m| m.first_offset = Some(200), "records do not fit");
    invalid(|m| m.last_offset = None, "both be present");
    invalid(|m| m.next_offset = 99, "below base offset");
    invalid(|m| m.base_offset = -1, "negative");
    invalid(|m| m.batches = 0, "batches cannot hold");
    invalid(|m| m.records = 151, "records do not fit");
    invalid(|m| m.topic = "a/b".into(), "topic");
    invalid(|m| m.link = "..".into(), "not allowed");
    invalid(|m| m.partition = -3, "negative");
    invalid(|m| m.source_cluster_id = String::new(), "source cluster id");
    invalid(|m| m.shipper.id = "a\nb".into(), "printable");
    invalid(
        |m| m.files.retain(|f| f.name.kind != SegmentFileKind::Log),
        "no .log file",
    );
    invalid(
        |m| m.files.retain(|f| f.name.kind != SegmentFileKind::TimeIndex),
        "no .timeindex file",
    );
    invalid(
        |m| {
            let dup = m.files[0].clone();
            m.files.push(dup)
        },
        "more than one .log",
    );
    invalid(|m| m.files[1].size = 12, "8-byte entries");
    invalid(|m| m.files[2].size = 16, "12-byte entries");
    invalid(|m| m.files[3].size = 50, "snapshot header");
    invalid(|m| m.files[0].size = 1 << 31, "segment limit");
    invalid(|m| m.files[0].size = 0, "batches in a .log of 0 bytes");
    invalid(
        |m| m.files[0].name = SegmentFileName::new(99, SegmentFileKind::Log),
        "not named after",
    );
    invalid(
        |m| m.files[0].key = m.files[0].key.replace("orders.v1", "other"),
        "not its data key",
    );
    invalid(
        |m| m.files[0].key = format!("../{}", m.files[0].key),
        "not its data key",
    );
    invalid(
        |m| m.files[1].key = m.files[1].key.replacen("pre/", "", 1),
        "different prefixes",
    );
    invalid(
        |m| {
            m.epochs.push(EpochStart {
                epoch: 4,
                start_offset: 220,
            })
        },
        "increasing",
    );
    invalid(
        |m| {
            m.epochs.push(EpochStart {
                epoch: 9,
                start_offset: 251,
            })
        },
        "after the segment's next offset",
    );
    invalid(
        |m| {
            m.epochs.insert(
                0,
                EpochStart {
                    epoch: 1,
                    start_offset: 0,
                },
            )
        },
        "only the one in force",
    );
    invalid(|m| m.max_timestamp = -2, "below -1");
    invalid(|m| m.format = "x".into(), "format");
}

#[test]
fn an_empty_segment_is_valid_without_offsets() {
    let mut m = manifest("");
    m.first_offset = None;
    m.last_offset = None;
    m.batches = 0;
    m.records = 0;
    m.files[0].size = 0;
    m.validate().unwrap();
    m.records = 1;
    assert!(m.validate().is_err());
}

#[test]
fn check_location_refuses_a_moved_manifest() {
    let m = manifest("pre");
    let prefix = KeyPrefix::new("pre").unwrap();
    let right = pk("pre").manifest_key(&tid(), 100).unwrap();
    m.check_location(&prefix, &right).unwrap();
    let other_partition = PartitionKey::new(prefix.clone(), "dc1-to-dc2", "orders.v1", 4).unwrap();
    assert!(m
        .check_location(&prefix, &other_partition.manifest_key(&tid(), 100).unwrap())
        .is_err());
    assert!(m
        .check_location(&prefix, &pk("pre").manifest_key(&tid(), 0).unwrap())
        .is_err());
    assert!(m.check_location(&KeyPrefix::root(), &right).is_err());
}

#[test]
fn leases_round_trip_and_validate() {
    let lease = Lease::new("host-a/77", 3, 1_700_000_000_000);
    let back = Lease::from_json("k", &lease.to_json()).unwrap();
    assert_eq!(back, lease);
    assert!(Lease::from_json("k", &Lease::new("", 3, 0).to_json()).is_err());
    assert!(Lease::from_json("k", &Lease::new("a", 0, 0).to_json()).is_err());
    let mut v: serde_json::Value = serde_json::from_slice(&lease.to_json()).unwrap();
    v["format"] = "segmirror.lease.v9".into();
    let err = Lease::from_json("k", &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(err.to_string().contains("unsupported format"), "{err}");
}

#[test]
fn sha256_text_is_strict() {
    let d: Sha256Digest = "00ff".repeat(16).parse().unwrap();
    assert_eq!(d.0[1], 0xff);
    assert_eq!(d.to_string(), "00ff".repeat(16));
    assert!("00FF".repeat(16).parse::<Sha256Digest>().is_err());
    assert!("0".repeat(63).parse::<Sha256Digest>().is_err());
    assert!("g".repeat(64).parse::<Sha256Digest>().is_err());
    assert!("é".repeat(32).parse::<Sha256Digest>().is_err());
}

proptest! {
    #[test]
    fn parse_never_panics_and_accepted_keys_round_trip(key in "[a-z0-9./_=+-]{0,120}") {
        let prefix = KeyPrefix::root();
        if let Ok(parsed) = ObjectKey::parse(&prefix, &key) {
            prop_assert_eq!(parsed.to_key(), key.clone());
            prop_assert!(!key.split('/').any(|c| c.is_empty() || c == "." || c == ".."));
        }
    }

    #[test]
    fn structured_keys_round_trip(
        link in "[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,20}",
        topic in "[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,20}",
        partition in 0..i32::MAX,
        id in any::<[u8; 16]>(),
        base in 0..i64::MAX / 2,
        len in 0..i64::MAX / 2,
        epoch in any::<u64>(),
        kind in proptest::sample::select(SegmentFileKind::ALL.to_vec()),
    ) {
        prop_assume!(id != [0; 16]);
        let id = Uuid(id);
        let p = PartitionKey::new(KeyPrefix::new("x/y").unwrap(), &link, &topic, partition).unwrap();
        let prefix = p.prefix().clone();
        let range = SegmentRange::new(base, base + len).unwrap();
        let keys = [
            (p.lease_key(epoch), ObjectKind::Lease { epoch }),
            (p.manifest_key(&id, base).unwrap(), ObjectKind::Manifest { topic_id: id, base_offset: base }),
            (
                p.data_key(&id, range, SegmentFileName::new(base, kind)).unwrap(),
                ObjectKind::Data { topic_id: id, range, file: SegmentFileName::new(base, kind) },
            ),
        ];
        for (key, kind) in keys {
            let parsed = ObjectKey::parse(&prefix, &key).unwrap();
            prop_assert_eq!(&parsed.partition, &p);
            prop_assert_eq!(parsed.kind, kind);
        }
    }

    #[test]
    fn documents_never_panic_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Manifest::from_json("k", &bytes);
        let _ = Lease::from_json("k", &bytes);
    }

    #[test]
    fn mutated_manifests_never_panic(pos in 0usize..4096, byte in any::<u8>()) {
        let mut json = manifest("p").to_json();
        let len = json.len().max(1);
        if let Some(b) = json.get_mut(pos % len) {
            *b = byte;
        }
        if let Ok(m) = Manifest::from_json("k", &json) {
            prop_assert!(m.validate().is_ok());
        }
    }
}

/// `manifest(prefix)` as the unsealed last version of its partition, with the producer snapshot a broker wrote at
/// its log end (`next` 250).
fn with_end_snapshot(prefix: &str) -> Manifest {
    let mut m = manifest(prefix);
    m.sealed = false;
    let range = m.range().unwrap();
    m.end_snapshot = Some(ManifestFile {
        name: SegmentFileName::new(250, SegmentFileKind::Snapshot),
        key: pk(prefix).end_snapshot_key(&tid(), range),
        size: 10 + 2 * 46,
        crc32c: 1,
        sha256: Sha256Digest([0xcd; 32]),
        mtime_ms: 1_700_000_002_000,
    });
    m
}

#[test]
fn a_manifest_with_and_without_an_end_snapshot_round_trips() {
    for prefix in ["", "backups"] {
        let key = pk(prefix).manifest_key(&tid(), 100).unwrap();
        let m = with_end_snapshot(prefix);
        m.validate().unwrap();
        let json = m.to_json();
        let back = Manifest::from_json(&key, &json).unwrap();
        assert_eq!(back, m);
        back.check_location(&KeyPrefix::new(prefix).unwrap(), &key).unwrap();
        let end = back.end_snapshot.as_ref().unwrap();
        let id = tid().to_string();
        let expected_key = KeyPrefix::new(prefix).unwrap().join(&format!(
            "dc1-to-dc2/orders.v1/3/{id}/data/00000000000000000100/00000000000000000250/00000000000000000250.snapshot"
        ));
        assert_eq!(end.key, expected_key);
        assert_eq!(back.all_files().count(), back.files.len() + 1);
        // The data key parses back as a data object of this version (listings and the audit accept it).
        let parsed = ObjectKey::parse(&KeyPrefix::new(prefix).unwrap(), &end.key).unwrap();
        assert_eq!(
            parsed.kind,
            ObjectKind::Data {
                topic_id: tid(),
                range: SegmentRange::new(100, 250).unwrap(),
                file: SegmentFileName::new(250, SegmentFileKind::Snapshot),
            }
        );
        assert_eq!(parsed.to_key(), end.key);
        // Written without one, the field is left out: the JSON is what a manifest of before the change was.
        let mut without = m.clone();
        without.end_snapshot = None;
        let v: serde_json::Value = serde_json::from_slice(&without.to_json()).unwrap();
        assert!(v.get("end_snapshot").is_none(), "{v}");
    }
}

#[test]
fn a_manifest_written_before_end_snapshots_still_parses() {
    // A bucket written before the change: no `end_snapshot` field at all.
    let mut v: serde_json::Value = serde_json::from_slice(&manifest("").to_json()).unwrap();
    v.as_object_mut().unwrap().remove("end_snapshot");
    assert!(v.get("end_snapshot").is_none());
    let key = pk("").manifest_key(&tid(), 100).unwrap();
    let m = Manifest::from_json(&key, &serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(m.end_snapshot, None);
    assert_eq!(m, manifest(""));
    assert_eq!(m.all_files().count(), m.files.len());
    // An explicit null reads the same.
    v["end_snapshot"] = serde_json::Value::Null;
    assert_eq!(Manifest::from_json(&key, &serde_json::to_vec(&v).unwrap()).unwrap(), m);
}

#[test]
fn a_wrong_end_snapshot_is_refused_naming_the_file_and_manifest_key() {
    let refused = |mutate: &dyn Fn(&mut Manifest), expect: &str| {
        let mut m = with_end_snapshot("pre");
        mutate(&mut m);
        let defect = m.validate().expect_err(expect);
        assert!(
            defect.to_string().contains(expect),
            "expected '{expect}', got '{defect}'"
        );
        let key = "pre/dc1-to-dc2/orders.v1/3/manifests/00000000000000000100.json";
        let err = Manifest::from_json(key, &serde_json::to_vec(&m).unwrap()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(key) && text.contains(expect), "{text}");
    };
    let end = |m: &mut Manifest| m.end_snapshot.as_mut().unwrap().clone();
    // Named after another offset than `next` (the base snapshot's name, or one past the end).
    for offset in [100, 249, 251] {
        refused(
            &|m: &mut Manifest| {
                let mut f = end(m);
                f.name = SegmentFileName::new(offset, SegmentFileKind::Snapshot);
                m.end_snapshot = Some(f);
            },
            "is not named after next offset 250",
        );
    }
    // Not a snapshot name.
    refused(
        &|m: &mut Manifest| {
            let mut f = end(m);
            f.name = SegmentFileName::new(250, SegmentFileKind::Log);
            m.end_snapshot = Some(f);
        },
        "is not named after next offset 250",
    );
    // Sizes no snapshot has, and one above the cap.
    refused(
        &|m: &mut Manifest| m.end_snapshot.as_mut().unwrap().size = 11,
        "not a 10-byte snapshot header plus 46-byte entries",
    );
    let oversized = 10 + 46 * ((MAX_SNAPSHOT_BYTES - 10) / 46 + 1);
    refused(
        &|m: &mut Manifest| m.end_snapshot.as_mut().unwrap().size = oversized,
        "exceed the limit",
    );
    // Only on an unsealed, non-empty version.
    refused(
        &|m: &mut Manifest| m.sealed = true,
        "a sealed version has no end snapshot",
    );
    // A key that is not its data key (another version's folder, or the base snapshot's object).
    refused(
        &|m: &mut Manifest| {
            let other = SegmentRange::new(100, 200).unwrap();
            m.end_snapshot.as_mut().unwrap().key = pk("pre").end_snapshot_key(&tid(), other);
        },
        "not its data key",
    );
    refused(
        &|m: &mut Manifest| {
            let key = m.file(SegmentFileKind::Snapshot).unwrap().key.clone();
            m.end_snapshot.as_mut().unwrap().key = key;
        },
        "not its data key",
    );
    // check_location: under another prefix than the manifest's.
    let m = with_end_snapshot("pre");
    let mut moved = m.clone();
    moved.end_snapshot.as_mut().unwrap().key = pk("other").end_snapshot_key(&tid(), m.range().unwrap());
    assert!(moved.validate().is_err());
}

#[test]
fn an_empty_version_has_no_end_snapshot() {
    let mut m = with_end_snapshot("");
    m.next_offset = 100;
    m.first_offset = None;
    m.last_offset = None;
    m.batches = 0;
    m.records = 0;
    m.max_timestamp = -1;
    m.epochs.truncate(1);
    for f in &mut m.files {
        f.key = pk("")
            .data_key(&tid(), SegmentRange::new(100, 100).unwrap(), f.name)
            .unwrap();
        if f.name.kind == SegmentFileKind::Log {
            f.size = 0;
        }
    }
    let defect = m.validate().unwrap_err().to_string();
    assert!(defect.contains("an empty version's end is its base"), "{defect}");
}

#[test]
fn a_data_key_named_after_next_parses_only_for_a_snapshot() {
    let prefix = KeyPrefix::root();
    let id = tid().to_string();
    let dir = format!("dc1-to-dc2/orders.v1/3/{id}/data/00000000000000000100/00000000000000000250");
    assert!(ObjectKey::parse(&prefix, &format!("{dir}/00000000000000000250.snapshot")).is_ok());
    for name in [
        "00000000000000000250.log",
        "00000000000000000250.index",
        "00000000000000000249.snapshot",
    ] {
        let err = ObjectKey::parse(&prefix, &format!("{dir}/{name}")).unwrap_err();
        assert!(
            err.to_string().contains("not named after base offset 100"),
            "{name}: {err}"
        );
    }
}
