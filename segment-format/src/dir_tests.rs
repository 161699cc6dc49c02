//! Segment and partition directory names, listings and their findings.

use super::*;
use crate::report::Severity;
use proptest::prelude::*;

#[test]
fn segment_names_are_twenty_digits() {
    assert_eq!(segment_file_name(0, SegmentFileKind::Log), "00000000000000000000.log");
    assert_eq!(
        segment_file_name(1234, SegmentFileKind::TimeIndex),
        "00000000000000001234.timeindex"
    );
    assert_eq!(
        segment_file_name(i64::MAX, SegmentFileKind::Snapshot),
        "09223372036854775807.snapshot"
    );
}

#[test]
fn classifies_partition_files() {
    use PartitionFile::*;
    assert_eq!(
        classify_partition_file("00000000000000000042.txnindex"),
        Segment {
            base_offset: 42,
            kind: SegmentFileKind::TxnIndex
        }
    );
    assert_eq!(
        classify_partition_file("00000000000000000042.log.deleted"),
        Transient {
            base_offset: 42,
            kind: SegmentFileKind::Log,
            suffix: TransientSuffix::Deleted
        }
    );
    assert_eq!(
        classify_partition_file("00000000000000000000.index.swap"),
        Transient {
            base_offset: 0,
            kind: SegmentFileKind::Index,
            suffix: TransientSuffix::Swap
        }
    );
    assert_eq!(
        classify_partition_file("00000000000000000007.snapshot.cleaned"),
        Transient {
            base_offset: 7,
            kind: SegmentFileKind::Snapshot,
            suffix: TransientSuffix::Cleaned
        }
    );
    assert_eq!(
        classify_partition_file("leader-epoch-checkpoint"),
        LeaderEpochCheckpoint
    );
    assert_eq!(classify_partition_file("partition.metadata"), PartitionMetadata);
    assert_eq!(
        classify_partition_file("partition.metadata.tmp"),
        Temp {
            target: "partition.metadata".into()
        }
    );
    assert_eq!(classify_partition_file("notes.txt"), Unknown { fatal: false });
    assert_eq!(classify_partition_file("abc.log"), Unknown { fatal: true });
    assert_eq!(classify_partition_file("x.snapshot"), Unknown { fatal: true });
    // Unpadded numbers load in Kafka but are never written by it.
    assert_eq!(classify_partition_file("5.log"), Unknown { fatal: false });
    assert_eq!(
        classify_partition_file("00000000000000000042.bogus"),
        Unknown { fatal: false }
    );
}

#[test]
fn parses_partition_dir_names_at_the_last_dash() {
    let n = PartitionDirName::parse("my-topic.v2-17").expect("parse");
    assert_eq!(
        (n.topic.as_str(), n.partition, &n.kind),
        ("my-topic.v2", 17, &DirKind::Normal)
    );
    assert_eq!(n.dir_name(), "my-topic.v2-17");

    let n = PartitionDirName::parse("a.b-c-3.0123456789abcdef0123456789abcdef-delete").expect("delete");
    assert_eq!(n.topic, "a.b-c");
    assert_eq!(n.partition, 3);
    assert_eq!(
        n.kind,
        DirKind::Delete {
            unique_id: "0123456789abcdef0123456789abcdef".into()
        }
    );
    assert_eq!(n.dir_name(), "a.b-c-3.0123456789abcdef0123456789abcdef-delete");

    assert!(matches!(
        PartitionDirName::parse("t-0.abc-future").map(|n| n.kind),
        Ok(DirKind::Future { .. })
    ));
    assert!(matches!(
        PartitionDirName::parse("t-0.abc-stray").map(|n| n.kind),
        Ok(DirKind::Stray { .. })
    ));
    assert!(PartitionDirName::parse("__consumer_offsets-49")
        .expect("internal")
        .is_internal());
    assert!(!PartitionDirName::parse("orders-1").expect("plain").is_internal());

    for bad in [
        "nodash",
        "topic-",
        "-1",
        "topic-x",
        "topic-0-delete",
        "t-0.-delete",
        "staging",
    ] {
        assert!(PartitionDirName::parse(bad).is_err(), "{bad} must not parse");
    }
}

#[test]
fn topic_legality() {
    assert!(validate_topic_name("orders.v1_x-y").is_ok());
    for bad in ["", ".", "..", "has space", "ü"] {
        assert!(validate_topic_name(bad).is_err(), "{bad}");
    }
    assert!(validate_topic_name(&"a".repeat(249)).is_ok());
    assert!(validate_topic_name(&"a".repeat(250)).is_err());
}

#[test]
fn opens_a_partition_dir() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("orders-0");
    fs::create_dir(&dir).expect("mkdir");
    for name in [
        "00000000000000000000.log",
        "00000000000000000000.index",
        "00000000000000000000.timeindex",
        "00000000000000000100.log",
        "00000000000000000100.index",
        "00000000000000000100.txnindex",
        "00000000000000000100.snapshot",
        "00000000000000000050.index",
        "00000000000000000020.log.deleted",
        "leader-epoch-checkpoint",
        "partition.metadata",
        "leader-epoch-checkpoint.tmp",
        "README",
        "junk.log",
    ] {
        fs::write(dir.join(name), b"").expect("create");
    }
    let pd = PartitionDir::open(&dir).expect("open");
    assert_eq!(pd.name, PartitionDirName::new("orders", 0));
    assert_eq!(
        pd.segments.iter().map(|s| s.base_offset).collect::<Vec<_>>(),
        vec![0, 100]
    );
    assert!(pd.segments[0].time_index.is_some() && pd.segments[0].txn_index.is_none());
    assert!(pd.segments[1].txn_index.is_some() && pd.segments[1].time_index.is_none());
    assert_eq!(pd.newest_segment().map(|s| s.base_offset), Some(100));
    assert_eq!(pd.snapshots.len(), 1);
    assert_eq!(pd.orphan_indexes, vec![dir.join("00000000000000000050.index")]);
    assert_eq!(pd.transient_files.len(), 1);
    assert_eq!(pd.temp_files.len(), 1);
    assert!(pd.leader_epoch_checkpoint.is_some() && pd.partition_metadata.is_some());
    assert_eq!(pd.unknown_files.len(), 2);
    let errors: Vec<_> = pd.findings.iter().filter(|f| f.severity == Severity::Error).collect();
    assert_eq!(errors.len(), 1, "{:?}", pd.findings);
    assert_eq!(errors[0].path, dir.join("junk.log"));
    assert_eq!(
        pd.findings.len(),
        3,
        "README, junk.log, orphan index: {:?}",
        pd.findings
    );
}

#[test]
fn partition_dir_with_bad_name_is_an_error() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("staging");
    fs::create_dir(&dir).expect("mkdir");
    assert!(matches!(PartitionDir::open(&dir), Err(Error::BadName { .. })));
}

#[test]
fn opens_a_log_dir() {
    let root = tempfile::tempdir().expect("tempdir");
    let p = root.path();
    for d in [
        "b-1",
        "a-0",
        "a-10",
        "a-2",
        "__cluster_metadata-0",
        "remote-log-index-cache",
        "tmp-staging",
    ] {
        fs::create_dir(p.join(d)).expect("mkdir");
    }
    fs::create_dir(p.join("a-0.0123456789abcdef0123456789abcdef-delete")).expect("mkdir");
    for f in [
        "meta.properties",
        ".lock",
        ".kafka_cleanshutdown",
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
        "log-start-offset-checkpoint",
        "cleaner-offset-checkpoint",
        "bootstrap.checkpoint",
        "replication-offset-checkpoint.tmp",
        "stray.txt",
    ] {
        fs::write(p.join(f), b"").expect("create");
    }
    let ld = LogDir::open(p).expect("open");
    let names: Vec<_> = ld.partitions.iter().map(|e| e.name.dir_name()).collect();
    assert_eq!(
        names,
        vec![
            "a-0",
            "a-0.0123456789abcdef0123456789abcdef-delete",
            "a-2",
            "a-10",
            "b-1"
        ]
    );
    assert!(ld.metadata_log.is_some() && ld.remote_log_index_cache.is_some());
    assert!(ld.meta_properties.is_some() && ld.lock_file.is_some() && ld.clean_shutdown_file.is_some());
    assert!(ld.bootstrap_checkpoint.is_some());
    assert_eq!(ld.checkpoints.len(), 4);
    assert!(ld.checkpoint(RootCheckpoint::CleanerOffset).is_some());
    assert_eq!(ld.temp_files.len(), 1);
    // "tmp-staging" does not parse (partition "staging"): the broker would not start.
    let errors: Vec<_> = ld.findings.iter().filter(|f| f.severity == Severity::Error).collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].path, p.join("tmp-staging"));
    assert_eq!(ld.unknown.len(), 2);
}

#[test]
fn a_tools_own_entries_are_set_aside_outside_a_broker_log_dir_only() {
    const OWN: &[OwnEntry] = &[
        OwnEntry {
            name: ".state",
            kind: OwnKind::Dir,
        },
        OwnEntry {
            name: ".lock-of-tool",
            kind: OwnKind::File,
        },
        OwnEntry {
            name: ".wrong-kind",
            kind: OwnKind::File,
        },
    ];
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = tmp.path();
    for d in ["a-0", ".state", ".wrong-kind", ".stray"] {
        fs::create_dir(p.join(d)).expect("mkdir");
    }
    fs::write(p.join(".lock-of-tool"), b"").expect("create");
    let ld = LogDir::open_owned_by(p, OWN).expect("open");
    let mut own = ld.own.clone();
    own.sort();
    assert_eq!(own, [p.join(".lock-of-tool"), p.join(".state")]);
    assert_eq!(ld.partitions.len(), 1);
    // A directory where a file is expected, and a name the tool does not own, stop a broker as before.
    let mut errors: Vec<_> = ld.findings.iter().map(|f| (f.path.clone(), f.severity)).collect();
    errors.sort();
    assert_eq!(
        errors,
        [
            (p.join(".stray"), Severity::Error),
            (p.join(".wrong-kind"), Severity::Error)
        ]
    );
    // The same entries in a broker's log dir stop the broker: reported as without the list.
    fs::write(p.join(META_PROPERTIES_FILE), b"version=1\n").expect("create");
    let ld = LogDir::open_owned_by(p, OWN).expect("open");
    assert!(ld.own.is_empty());
    assert_eq!(ld.findings.len(), 4, "{:?}", ld.findings);
}

proptest! {
    #[test]
    fn dir_name_round_trip(topic in "[a-zA-Z0-9._-]{1,40}", partition in 0i32..100_000, uid in "[0-9a-f]{32}", k in 0u8..4) {
        let kind = match k {
            0 => DirKind::Normal,
            1 => DirKind::Delete { unique_id: uid },
            2 => DirKind::Future { unique_id: uid },
            _ => DirKind::Stray { unique_id: uid },
        };
        let name = PartitionDirName { topic, partition, kind };
        prop_assert_eq!(PartitionDirName::parse(&name.dir_name()), Ok(name));
    }

    #[test]
    fn segment_name_round_trip(offset in 0i64..=i64::MAX, k in 0usize..5) {
        let kind = SegmentFileKind::ALL[k];
        prop_assert_eq!(
            classify_partition_file(&segment_file_name(offset, kind)),
            PartitionFile::Segment { base_offset: offset, kind }
        );
    }

    #[test]
    fn names_never_panic(name in "\\PC{0,60}") {
        let _ = PartitionDirName::parse(&name);
        let _ = classify_partition_file(&name);
        let _ = validate_topic_name(&name);
    }
}
