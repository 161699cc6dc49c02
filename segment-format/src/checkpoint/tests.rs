use super::*;
use crate::batch::BatchInfo;
use crate::batch::ControlType;
use crate::java_text::parse_java_properties;
use crate::partition_metadata::Uuid;
use crate::report::Severity;
use proptest::prelude::*;

#[test]
fn leader_epoch_checkpoint_exact_bytes_and_round_trip() {
    let cp = LeaderEpochCheckpoint::new(vec![
        EpochEntry {
            epoch: 0,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 3,
            start_offset: 1500,
        },
    ]);
    assert_eq!(cp.encode(), "0\n2\n0 0\n3 1500\n");
    let parsed = LeaderEpochCheckpoint::parse(cp.encode().as_bytes()).expect("parse");
    assert_eq!(parsed.entries, cp.entries);
    assert_eq!(parsed.epoch_at(1499), Some(0));
    assert_eq!(parsed.epoch_at(1500), Some(3));
    assert_eq!(parsed.epoch_at(-1), None);
}

#[test]
fn offset_checkpoint_exact_bytes_and_round_trip() {
    let cp = OffsetCheckpoint {
        entries: vec![
            OffsetCheckpointEntry {
                topic: "orders".into(),
                partition: 0,
                offset: 42,
            },
            OffsetCheckpointEntry {
                topic: "a.b-c".into(),
                partition: 12,
                offset: 0,
            },
        ],
    };
    assert_eq!(cp.encode(), "0\n2\norders 0 42\na.b-c 12 0\n");
    assert_eq!(OffsetCheckpoint::parse(cp.encode().as_bytes()), Ok(cp.clone()));
    assert_eq!(cp.get("a.b-c", 12), Some(0));
    assert_eq!(cp.get("a.b-c", 11), None);
}

#[test]
fn reader_follows_checkpoint_file_rules() {
    let empty = OffsetCheckpoint::parse(b"").expect("empty file");
    assert!(empty.entries.is_empty());
    assert!(OffsetCheckpoint::parse(b"0\n")
        .expect("no count line")
        .entries
        .is_empty());
    // CRLF and a missing final newline are fine; tabs and repeated spaces split.
    let cp = OffsetCheckpoint::parse(b"0\r\n1\r\nt\t3  7").expect("crlf");
    assert_eq!(cp.get("t", 3), Some(7));
    // Trailing whitespace is dropped by split; leading whitespace is not.
    assert!(OffsetCheckpoint::parse(b"0\n1\nt 3 7 \n").is_ok());
    let err = OffsetCheckpoint::parse(b"0\n1\n t 3 7\n").expect_err("leading space");
    assert_corrupt_at(err, 4, "line 3");
}

fn assert_corrupt_at(err: ParseError, position: u64, needle: &str) {
    match err {
        ParseError::Corrupt {
            position: p,
            defect: Defect::Checkpoint { message },
            ..
        } => {
            assert_eq!(p, position, "{message}");
            assert!(message.contains(needle), "{message} should mention {needle}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn reader_rejects_malformed_files_with_line_positions() {
    assert_corrupt_at(OffsetCheckpoint::parse(b"1\n0\n").expect_err("version"), 0, "version");
    assert_corrupt_at(
        OffsetCheckpoint::parse(b" 0\n0\n").expect_err("version ws"),
        0,
        "line 1",
    );
    assert_corrupt_at(OffsetCheckpoint::parse(b"0\nx\n").expect_err("count"), 2, "line 2");
    assert_corrupt_at(
        OffsetCheckpoint::parse(b"0\n-1\n").expect_err("negative"),
        2,
        "negative",
    );
    assert_corrupt_at(
        OffsetCheckpoint::parse(b"0\n2\nt 0 1\n").expect_err("short"),
        2,
        "expected 2",
    );
    assert_corrupt_at(
        OffsetCheckpoint::parse(b"0\n1\nt 0 1\nu 0 2\n").expect_err("long"),
        2,
        "found 2",
    );
    assert_corrupt_at(
        OffsetCheckpoint::parse(b"0\n2\nt 0 1\nt x 1\n").expect_err("partition"),
        10,
        "line 4",
    );
    assert_corrupt_at(
        LeaderEpochCheckpoint::parse(b"0\n1\n5 100 7\n").expect_err("3 fields"),
        4,
        "line 3",
    );
    assert_corrupt_at(
        LeaderEpochCheckpoint::parse(b"0\n2\n5 100\n\n").expect_err("empty line"),
        10,
        "line 4",
    );
    assert_corrupt_at(
        LeaderEpochCheckpoint::parse(b"0\n1\n\xff\n").expect_err("utf8"),
        4,
        "UTF-8",
    );
}

#[test]
fn read_and_write_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = leader_epoch_checkpoint_path(dir.path());
    let cp = LeaderEpochCheckpoint::new(vec![EpochEntry {
        epoch: 7,
        start_offset: 99,
    }]);
    cp.write(&path).expect("write");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "0\n1\n7 99\n");
    assert_eq!(LeaderEpochCheckpoint::read(&path).expect("read").entries, cp.entries);
    std::fs::write(&path, b"0\n1\nseven 99\n").expect("corrupt");
    let err = LeaderEpochCheckpoint::read(&path).expect_err("malformed");
    assert!(err.is_corrupt());
    assert_eq!(err.path(), path);
}

#[test]
fn epoch_checkpoint_check_reports_each_violation_at_its_line() {
    let cp = LeaderEpochCheckpoint::parse(b"0\n4\n1 0\n3 50\n3 60\n2 40\n").expect("parse");
    let path = Path::new("leader-epoch-checkpoint");
    let findings = cp.check(path);
    let got: Vec<_> = findings.iter().map(|f| (f.position, f.offset)).collect();
    // entry 3 (line at byte 13): epoch 3 repeats; entry 4 (byte 18): epoch and offset decrease.
    assert_eq!(
        got,
        vec![(Some(13), Some(60)), (Some(18), Some(40)), (Some(18), Some(40))]
    );
    assert!(findings.iter().all(|f| matches!(f.defect, Defect::Epoch { .. })));
    let good = LeaderEpochCheckpoint::parse(b"0\n2\n0 0\n2 10\n").expect("parse");
    assert!(good.check(path).is_empty());
}

fn batch(position: u64, base: i64, last: i64, epoch: i32) -> BatchInfo {
    BatchInfo {
        position,
        size: 100,
        magic: 2,
        base_offset: base,
        last_offset: last,
        max_timestamp: 0,
        partition_leader_epoch: epoch,
        producer_id: -1,
        producer_epoch: -1,
        is_transactional: false,
        control: None::<ControlType>,
        is_control: false,
        records_count: (last - base + 1) as i32,
    }
}

#[test]
fn epoch_checker_accepts_consistent_log() {
    let cp = LeaderEpochCheckpoint::new(vec![
        EpochEntry {
            epoch: 0,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 2,
            start_offset: 20,
        },
    ]);
    let mut c = LeaderEpochChecker::new(&cp);
    let log = Path::new("00000000000000000000.log");
    for b in [
        batch(0, 0, 9, 0),
        batch(100, 10, 19, 0),
        batch(200, 20, 29, 2),
        batch(300, 30, 30, 2),
    ] {
        c.on_batch(log, &b);
    }
    // Legacy and unstamped batches are ignored.
    let mut legacy = batch(400, 31, 31, 9);
    legacy.magic = 1;
    c.on_batch(log, &legacy);
    c.on_batch(log, &batch(500, 32, 32, -1));
    assert_eq!(c.finish(), vec![]);
}

#[test]
fn epoch_checker_reports_mismatch_once_per_run_and_decreases() {
    let cp = LeaderEpochCheckpoint::new(vec![
        EpochEntry {
            epoch: 1,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 2,
            start_offset: 20,
        },
    ]);
    let mut c = LeaderEpochChecker::new(&cp);
    let log = Path::new("x.log");
    c.on_batch(log, &batch(0, 0, 9, 1));
    c.on_batch(log, &batch(100, 10, 19, 2)); // epoch 2 before its start offset
    c.on_batch(log, &batch(200, 20, 29, 3)); // epoch 3 missing from checkpoint
    c.on_batch(log, &batch(300, 30, 39, 3)); // same run: not reported again
    c.on_batch(log, &batch(400, 40, 49, 2)); // decrease (and now consistent)
    let f = c.finish();
    let got: Vec<_> = f.iter().map(|f| (f.position, f.offset, f.severity)).collect();
    assert_eq!(
        got,
        vec![
            (Some(100), Some(10), Severity::Error),
            (Some(200), Some(20), Severity::Error),
            (Some(400), Some(40), Severity::Error),
        ]
    );
    assert!(matches!(&f[2].defect, Defect::Epoch { message } if message.contains("lower")));
}

#[test]
fn epoch_checker_before_first_entry_and_empty_checkpoint() {
    let cp = LeaderEpochCheckpoint::new(vec![EpochEntry {
        epoch: 5,
        start_offset: 100,
    }]);
    let mut c = LeaderEpochChecker::new(&cp);
    c.on_batch(Path::new("l"), &batch(0, 50, 59, 4)); // before log start offset: lower epoch fine
    c.on_batch(Path::new("l"), &batch(100, 100, 109, 5));
    assert!(c.finish().is_empty());
    let mut c = LeaderEpochChecker::new(&LeaderEpochCheckpoint::default());
    c.on_batch(Path::new("l"), &batch(0, 0, 0, 0));
    assert_eq!(c.finish().len(), 1);
}

#[test]
fn meta_properties_v1_round_trip_and_kafka_layout() {
    let text = b"#\n#Tue Oct 01 12:00:00 UTC 2024\nnode.id=3\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n";
    let m = MetaProperties::parse(text).expect("parse");
    assert_eq!(m.version, MetaPropertiesVersion::V1);
    assert_eq!(m.node_id, Some(3));
    assert_eq!(m.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
    assert_eq!(
        m.directory_id.map(|d| d.to_string()).as_deref(),
        Some("J8aAPcfLQt2bqs1JT_rMgQ")
    );
    assert_eq!(
        m.encode(),
        "#\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\nnode.id=3\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
    );
    assert_eq!(MetaProperties::parse(m.encode().as_bytes()), Ok(m));
}

#[test]
fn meta_properties_rules() {
    let v0 = MetaProperties::parse(b"broker.id=7\n").expect("v0 implicit");
    assert_eq!(
        (v0.version, v0.node_id, v0.cluster_id),
        (MetaPropertiesVersion::V0, Some(7), None)
    );
    assert!(
        MetaProperties::parse(b"version=1\nnode.id=1\n").is_err(),
        "v1 needs cluster.id"
    );
    assert!(
        MetaProperties::parse(b"version=1\ncluster.id=x\n").is_err(),
        "v1 needs node.id"
    );
    assert!(MetaProperties::parse(b"version=2\n").is_err());
    assert!(MetaProperties::parse(b"version=1\ncluster.id=x\nnode.id=one\n").is_err());
    assert!(MetaProperties::parse(b"version=1\ncluster.id=x\nnode.id=1\ndirectory.id=@@\n").is_err());
    // Java properties syntax: ':' and spaces separate, continuation lines, escapes.
    let m = MetaProperties::parse(b"! comment\n  version : 1\ncluster.id   abc\\\n  def\nnode.id=4\n").expect("syntax");
    assert_eq!(m.cluster_id.as_deref(), Some("abcdef"));
    assert_eq!(
        parse_java_properties(b"k\\=ey=v\\u0041\\tx"),
        vec![("k=ey".to_string(), "vA\tx".to_string())]
    );
}

#[test]
fn meta_properties_file_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.properties");
    let m = MetaProperties {
        version: MetaPropertiesVersion::V0,
        cluster_id: Some("c:1 =#!".into()),
        node_id: Some(0),
        directory_id: None,
    };
    m.write(&path).expect("write");
    assert_eq!(MetaProperties::read(&path).expect("read"), m);
}

proptest! {
    #[test]
    fn checkpoint_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = OffsetCheckpoint::parse(&bytes);
        let _ = LeaderEpochCheckpoint::parse(&bytes);
        let _ = MetaProperties::parse(&bytes);
    }

    #[test]
    fn checkpoint_text_never_panics(text in "[0-9 a\\n\\r\\t-]{0,80}") {
        let _ = OffsetCheckpoint::parse(text.as_bytes());
        let _ = LeaderEpochCheckpoint::parse(text.as_bytes());
    }

    #[test]
    fn offset_checkpoint_round_trip(entries in proptest::collection::vec(
        ("[a-zA-Z0-9._-]{1,30}", any::<i32>(), any::<i64>()), 0..20)) {
        let cp = OffsetCheckpoint { entries: entries.into_iter()
            .map(|(topic, partition, offset)| OffsetCheckpointEntry { topic, partition, offset }).collect() };
        prop_assert_eq!(OffsetCheckpoint::parse(cp.encode().as_bytes()), Ok(cp));
    }

    #[test]
    fn epoch_checkpoint_round_trip(entries in proptest::collection::vec((any::<i32>(), any::<i64>()), 0..20)) {
        let entries: Vec<_> = entries.into_iter()
            .map(|(epoch, start_offset)| EpochEntry { epoch, start_offset }).collect();
        let cp = LeaderEpochCheckpoint::new(entries);
        prop_assert_eq!(LeaderEpochCheckpoint::parse(cp.encode().as_bytes()).map(|c| c.entries), Ok(cp.entries));
    }

    #[test]
    fn meta_properties_round_trip(cluster in "\\PC{0,30}", node in any::<i32>(), v1 in any::<bool>(), id in any::<[u8; 16]>()) {
        let m = MetaProperties {
            version: if v1 { MetaPropertiesVersion::V1 } else { MetaPropertiesVersion::V0 },
            cluster_id: Some(cluster),
            node_id: Some(node),
            directory_id: Some(Uuid(id)),
        };
        let text = m.encode();
        prop_assert!(text.is_ascii());
        prop_assert_eq!(MetaProperties::parse(text.as_bytes()), Ok(m));
    }
}
