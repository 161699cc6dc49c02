//! The metadata-log reader against hand-built logs (the real broker's log is read in
//! `tests/tests/metadata_log.rs`): record semantics in log order, snapshot then segments, and hostile input.

use std::path::Path;

use proptest::prelude::*;

use super::encode::*;
use super::*;
use crate::batch::Compression;
use crate::record::{BatchBuilder, RecordSpec};

const A: Uuid = Uuid([0xa; 16]);
const B: Uuid = Uuid([0xb; 16]);
const C: Uuid = Uuid([0xc; 16]);

/// One batch at `base` holding `values` as consecutive records.
fn batch(base: i64, values: &[Vec<u8>]) -> Vec<u8> {
    batch_with(base, values, Compression::None)
}

fn batch_with(base: i64, values: &[Vec<u8>], codec: Compression) -> Vec<u8> {
    let mut b = BatchBuilder::new(base).compression(codec);
    for (i, v) in values.iter().enumerate() {
        b = b.record(RecordSpec::new(i as i32, 1_700_000_000_000).with_value(v.clone()));
    }
    b.build()
}

/// A control batch (a leader-change record, whose value is not a metadata frame).
fn control(base: i64) -> Vec<u8> {
    BatchBuilder::new(base)
        .control(true)
        .record(
            RecordSpec::new(0, 1_700_000_000_000)
                .with_key(vec![0, 0, 0, 2])
                .with_value(vec![0, 0, 0xff, 0xff]),
        )
        .build()
}

fn write(dir: &Path, name: &str, frames: &[Vec<u8>]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, frames.concat()).unwrap();
    path
}

fn segment_name(base: i64) -> String {
    format!("{base:020}.log")
}

fn snapshot_name(end: i64, epoch: i32) -> String {
    format!("{end:020}-{epoch:010}{SNAPSHOT_SUFFIX}")
}

#[test]
fn topics_partitions_and_configs_in_log_order() {
    let dir = tempfile::tempdir().unwrap();
    let frames = vec![
        control(0),
        batch(
            1,
            &[
                topic_record("orders", A),
                partition_record(0, A),
                partition_record(1, A),
                partition_record(1, A), // a repeated partition (a reassignment) is still one partition
                config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("1000")),
                config_record(RESOURCE_TOPIC, "orders", "cleanup.policy", Some("delete")),
            ],
        ),
        batch(
            7,
            &[
                topic_record("gone", B),
                partition_record(0, B),
                config_record(RESOURCE_TOPIC, "gone", "retention.ms", Some("5")),
                config_record(RESOURCE_BROKER, "", "log.retention.ms", Some("60000")),
                config_record(RESOURCE_BROKER, "1", "log.retention.ms", Some("120000")),
                vec![1, 99, 0, 1, 2, 3], // an unknown record type: skipped
            ],
        ),
        batch(
            13,
            &[
                config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("2000")),
                config_record(RESOURCE_TOPIC, "orders", "cleanup.policy", None),
                remove_topic_record(B),
                // The name again, with a new id: its old configs do not come back.
                topic_record("gone", C),
                partition_record(0, C),
                partition_record(1, C),
                partition_record(2, C),
            ],
        ),
    ];
    write(dir.path(), &segment_name(0), &frames);
    let m = read_metadata_dir(dir.path()).unwrap();
    assert_eq!(m.end_offset, 20);
    assert_eq!(m.snapshot, None);
    let orders = m.topic("orders").unwrap();
    assert_eq!(orders.topic_id, A);
    assert_eq!(orders.partition_count(), 2);
    assert_eq!(
        orders.configs,
        BTreeMap::from([("retention.ms".to_string(), "2000".to_string())])
    );
    let gone = m.topic("gone").unwrap();
    assert_eq!((gone.topic_id, gone.partition_count()), (C, 3));
    assert!(gone.configs.is_empty(), "{gone:?}");
    assert_eq!(m.broker_config(1, "log.retention.ms"), Some("120000"));
    assert_eq!(m.broker_config(2, "log.retention.ms"), Some("60000"));
    assert_eq!(m.broker_config(2, "log.retention.bytes"), None);
}

#[test]
fn snapshot_first_then_segment_records_from_its_end() {
    let dir = tempfile::tempdir().unwrap();
    // The snapshot holds the state of offsets < 5.
    write(
        dir.path(),
        &snapshot_name(5, 1),
        &[batch(
            0,
            &[
                topic_record("orders", A),
                partition_record(0, A),
                config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("1000")),
            ],
        )],
    );
    // An older snapshot that must not be used (it lacks the topic).
    write(dir.path(), &snapshot_name(2, 1), &[batch(0, &[topic_record("old", B)])]);
    // The segment still holds offsets 0..5, already in the snapshot: applying them again would repeat the topic.
    write(
        dir.path(),
        &segment_name(0),
        &[
            batch(0, &[topic_record("orders", A), partition_record(0, A)]),
            batch(
                2,
                &[
                    config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("1000")),
                    vec![1, 99, 0],
                    vec![1, 99, 0],
                    // Offset 5 on: after the snapshot.
                    config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("3000")),
                ],
            ),
            batch(6, &[partition_record(1, A)]),
        ],
    );
    let m = read_metadata_dir(dir.path()).unwrap();
    assert_eq!(m.snapshot, Some(dir.path().join(snapshot_name(5, 1))));
    assert!(m.topic("old").is_none());
    let orders = m.topic("orders").unwrap();
    assert_eq!(orders.configs["retention.ms"], "3000");
    assert_eq!(orders.partition_count(), 2);
    assert_eq!(m.end_offset, 7);
}

#[test]
fn segments_wholly_below_the_snapshot_are_skipped_and_a_gap_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        &snapshot_name(4, 1),
        &[batch(0, &[topic_record("orders", A)])],
    );
    // Garbage in a segment the snapshot supersedes is never read.
    std::fs::write(dir.path().join(segment_name(0)), b"not a segment at all, never read").unwrap();
    write(
        dir.path(),
        &segment_name(3),
        &[batch(3, &[vec![1, 99, 0], partition_record(0, A)])],
    );
    let m = read_metadata_dir(dir.path()).unwrap();
    assert_eq!(m.topic("orders").unwrap().partition_count(), 1);

    // Without the snapshot, records 0..3 are missing.
    std::fs::remove_file(dir.path().join(snapshot_name(4, 1))).unwrap();
    std::fs::remove_file(dir.path().join(segment_name(0))).unwrap();
    let err = read_metadata_dir(dir.path()).unwrap_err().to_string();
    assert!(err.contains("records 0..3 are missing"), "{err}");
    assert!(err.contains(&segment_name(3)), "{err}");
}

#[test]
fn compressed_batches_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let values = [
        topic_record("zipped", A),
        partition_record(0, A),
        partition_record(1, A),
    ];
    write(
        dir.path(),
        &segment_name(0),
        &[batch_with(0, &values, Compression::Gzip)],
    );
    let m = read_metadata_dir(dir.path()).unwrap();
    assert_eq!(m.topic("zipped").unwrap().partition_count(), 2);
}

#[test]
fn a_partial_last_frame_ends_the_newest_segment_but_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let whole = batch(0, &[topic_record("orders", A)]);
    let partial = batch(1, &[partition_record(0, A)]);
    let cut = partial.get(..partial.len() - 3).unwrap().to_vec();
    write(dir.path(), &segment_name(0), &[whole.clone(), cut.clone()]);
    let m = read_metadata_dir(dir.path()).unwrap();
    assert_eq!(m.topic("orders").unwrap().partition_count(), 0);
    assert_eq!(m.end_offset, 1);

    // The same cut in a snapshot is an error: snapshots are written whole.
    write(dir.path(), &snapshot_name(1, 1), &[whole, cut]);
    let err = read_metadata_dir(dir.path()).unwrap_err();
    assert!(err.is_incomplete(), "{err}");
    assert!(err.to_string().contains(SNAPSHOT_SUFFIX), "{err}");
}

#[test]
fn hostile_records_are_errors_naming_file_and_offset() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0, 2, 0], "frame version 0"),
        (vec![1, 2, 1, 0], "TopicRecord version 1 is newer"),
        (vec![1, 2, 0, 200], "TopicRecord.Name"),
        (vec![1, 4, 0, 2, 1, 1], "ConfigRecord.Value"),
        (vec![1, 4, 0, 2, 1, 0], "ConfigRecord.Name is null"),
        (vec![1, 0xff, 0xff, 0xff, 0xff, 0x7f], "record type: varint overflows"),
        (partition_record(0, B), "unknown topic id"),
        (remove_topic_record(B), "unknown topic id"),
        (topic_record("orders", C), "TopicRecord for \"orders\""),
        (topic_record("again", A), "repeats topic id"),
    ];
    for (value, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            &segment_name(0),
            &[
                batch(0, &[topic_record("orders", A)]),
                batch(1, &[vec![1, 99, 0], value]),
            ],
        );
        let err = read_metadata_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains(expected), "{expected}: {err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains("offset 2"), "{err}");
    }
}

#[test]
fn a_crc_mismatch_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = batch(0, &[topic_record("orders", A)]);
    let last = b.len() - 1;
    b[last] ^= 0xff;
    write(dir.path(), &segment_name(0), &[b]);
    let err = read_metadata_dir(dir.path()).unwrap_err();
    assert!(err.is_corrupt(), "{err}");
}

#[test]
fn the_entry_cap_holds() {
    let mut m = ClusterMetadata {
        entries: MAX_ENTRIES,
        ..ClusterMetadata::default()
    };
    let err = m.replay(&topic_record("one-too-many", A)).unwrap_err();
    assert!(err.contains("more than"), "{err}");
}

#[test]
fn a_missing_directory_is_an_io_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join(METADATA_DIR);
    let err = read_metadata_dir(&missing).unwrap_err().to_string();
    assert!(err.contains(METADATA_DIR), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hostile_record_values_never_panic(value in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut m = ClusterMetadata::default();
        let _ = m.replay(&topic_record("t", A));
        let _ = m.replay(&value);
    }

    #[test]
    fn hostile_frame_prefixes_never_panic(
        api_key in 0u8..12,
        version in 0u8..4,
        tail in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        let mut m = ClusterMetadata::default();
        let _ = m.replay(&topic_record("t", A));
        let mut value = vec![1, api_key, version];
        value.extend(tail);
        let _ = m.replay(&value);
    }

    #[test]
    fn hostile_segment_bytes_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = [
            batch(0, &[topic_record("orders", A), partition_record(0, A)]),
            batch(2, &[config_record(RESOURCE_TOPIC, "orders", "retention.ms", Some("1"))]),
        ]
        .concat();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        std::fs::write(dir.path().join(segment_name(0)), &bytes).unwrap();
        let _ = read_metadata_dir(dir.path());
    }
}

#[test]
fn server_properties_are_read_with_java_rules_and_size_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.properties");
    std::fs::write(
        &path,
        "# comment\nlog.retention.hours=24\nlog.retention.ms = 5000\nlog.dirs=/a,\\\n  /b\nlog.retention.ms=6000\n",
    )
    .unwrap();
    let props = read_server_properties(&path).unwrap();
    assert_eq!(props["log.retention.hours"], "24");
    assert_eq!(props["log.retention.ms"], "6000", "later keys win");
    assert_eq!(props["log.dirs"], "/a,/b");
    let err = read_server_properties(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn the_test_writer_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let topics = [
        TopicSpec {
            name: "a",
            id: A,
            partitions: 3,
            configs: &[("retention.ms", "-1")],
        },
        TopicSpec {
            name: "b",
            id: B,
            partitions: 1,
            configs: &[],
        },
    ];
    write_metadata_log(dir.path(), &topics).unwrap();
    let m = read_metadata_dir(&dir.path().join(METADATA_DIR)).unwrap();
    assert_eq!(m.topic("a").unwrap().partition_count(), 3);
    assert_eq!(m.topic("a").unwrap().configs["retention.ms"], "-1");
    assert_eq!((m.topic("b").unwrap().topic_id, m.end_offset), (B, 7));
}
