//! Replaying hand-built `__consumer_offsets` partitions: plain and transactional commits, markers, tombstones,
//! compression, legacy messages, several segments, filters, and corrupt or cut input.

use std::path::Path;

use super::*;
use crate::batch::{Compression, TimestampType};
use crate::control::{control_key, end_txn_marker_value};
use crate::group_records::encode::*;
use crate::group_records::GroupMetadataValue;
use crate::record::{BatchBuilder, RecordSpec};

pub(super) const TS: i64 = 1_700_000_000_000;

pub(super) fn commit(
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    version: i16,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let value = OffsetCommitValue {
        version,
        offset,
        leader_epoch: (version >= 3).then_some(0),
        metadata: String::new(),
        commit_timestamp: TS,
        expire_timestamp: None,
        topic_id: None,
    };
    (
        offset_commit_key(if version == 0 { 0 } else { 1 }, group, topic, partition),
        Some(offset_commit_value(&value)),
    )
}

pub(super) fn tombstone(group: &str, topic: &str, partition: i32) -> (Vec<u8>, Option<Vec<u8>>) {
    (offset_commit_key(1, group, topic, partition), None)
}

/// A batch of `records` at `base`, transactional for `Some(producer id)`.
pub(super) fn batch(
    base: i64,
    records: &[(Vec<u8>, Option<Vec<u8>>)],
    txn: Option<i64>,
    codec: Compression,
) -> Vec<u8> {
    let mut b = BatchBuilder::new(base).compression(codec);
    if let Some(pid) = txn {
        b = b.producer(pid, 0, 0).transactional(true);
    }
    for (i, (k, v)) in records.iter().enumerate() {
        let mut r = RecordSpec::new(i as i32, TS).with_key(k.clone());
        if let Some(v) = v {
            r = r.with_value(v.clone());
        }
        b = b.record(r);
    }
    b.build()
}

pub(super) fn plain(base: i64, records: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<u8> {
    batch(base, records, None, Compression::None)
}

pub(super) fn marker(base: i64, producer_id: i64, commit: bool) -> Vec<u8> {
    let kind = if commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    BatchBuilder::new(base)
        .producer(producer_id, 0, -1)
        .transactional(true)
        .control(true)
        .record(
            RecordSpec::new(0, TS)
                .with_key(control_key(kind).to_vec())
                .with_value(end_txn_marker_value(0).to_vec()),
        )
        .build()
}

pub(super) fn partition_dir(root: &Path, n: i32, segments: &[(i64, Vec<Vec<u8>>)]) -> PathBuf {
    let dir = root.join(format!("{CONSUMER_OFFSETS_TOPIC}-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    for (base, frames) in segments {
        std::fs::write(dir.join(format!("{base:020}.log")), frames.concat()).unwrap();
    }
    dir
}

pub(super) fn offsets(state: &ConsumerOffsets) -> Vec<(String, String, i32, i64)> {
    state
        .offsets
        .iter()
        .map(|(k, v)| (k.group.clone(), k.topic.clone(), k.partition, v.offset))
        .collect()
}

pub(super) fn row(g: &str, t: &str, p: i32, o: i64) -> (String, String, i32, i64) {
    (g.into(), t.into(), p, o)
}

#[test]
fn latest_commit_wins_tombstones_delete_and_group_tombstones_keep_offsets() {
    let root = tempfile::tempdir().unwrap();
    let classic = GroupMetadataValue {
        version: 3,
        protocol_type: "consumer".into(),
        generation: 1,
        protocol: Some("range".into()),
        leader: Some("m".into()),
        current_state_timestamp: Some(TS),
        members: vec![],
    };
    let dir = partition_dir(
        root.path(),
        7,
        &[
            (
                0,
                vec![
                    plain(0, &[(group_metadata_key("a"), Some(group_metadata_value(&classic)))]),
                    plain(
                        1,
                        &[
                            commit("a", "t", 0, 10, 3),
                            commit("a", "t", 1, 20, 0),
                            commit("b", "t", 0, 5, 1),
                        ],
                    ),
                    // A KIP-848 group: its records are decoded, not needed for offsets.
                    plain(
                        4,
                        &[
                            (group_record_key(3, "c", None), Some(vec![0, 0, 0, 0, 0, 1, 0])),
                            (group_record_key(8, "c", Some("member-1")), Some(vec![0, 0, 0xff])),
                            commit("c", "t", 0, 7, 4),
                        ],
                    ),
                ],
            ),
            (
                7,
                vec![
                    batch(7, &[commit("a", "t", 0, 15, 2)], None, Compression::Gzip),
                    // Group b deleted: its offsets' tombstones, then its metadata tombstone.
                    plain(8, &[tombstone("b", "t", 0), (group_metadata_key("b"), None)]),
                    // Group a's metadata removed (converted to a consumer group): offsets stay.
                    plain(
                        10,
                        &[
                            (group_metadata_key("a"), None),
                            (group_record_key(3, "a", None), Some(vec![0, 0])),
                        ],
                    ),
                ],
            ),
        ],
    );
    let state = read_partition_dir(&dir, &OffsetsFilter::default()).unwrap();
    assert_eq!(
        offsets(&state),
        vec![row("a", "t", 0, 15), row("a", "t", 1, 20), row("c", "t", 0, 7)]
    );
    assert_eq!(state.offsets.values().next().unwrap().record_offset, 7);
    assert_eq!(state.groups.keys().collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(state.groups["a"], BTreeSet::from([GroupType::Consumer]));
    assert_eq!(state.records, 12);
}

#[test]
fn transactional_commits_count_only_when_committed() {
    let root = tempfile::tempdir().unwrap();
    let dir = partition_dir(
        root.path(),
        0,
        &[(
            0,
            vec![
                plain(0, &[commit("g", "t", 0, 100, 3), commit("g", "t", 1, 100, 3)]),
                // Producer 1 commits 110 for p0, producer 2 commits 999 for p0 and p1 and aborts.
                batch(2, &[commit("g", "t", 0, 110, 3)], Some(1), Compression::None),
                batch(
                    3,
                    &[commit("g", "t", 0, 999, 3), commit("g", "t", 1, 999, 3)],
                    Some(2),
                    Compression::Lz4,
                ),
                marker(5, 2, false),
                marker(6, 1, true),
                // Producer 3's commit is overtaken by a plain commit at a later log offset before its marker:
                // the plain one stays (Kafka keeps the most recent record).
                batch(7, &[commit("g", "t", 1, 130, 3)], Some(3), Compression::None),
                plain(8, &[commit("g", "t", 1, 140, 3)]),
                marker(9, 3, true),
                // Producer 4's transaction is still open at the end of the log: not committed.
                batch(10, &[commit("g", "t", 2, 50, 3)], Some(4), Compression::None),
                // Producer 5's pending commit is dropped by a tombstone of the same key before its marker.
                batch(11, &[commit("g", "t", 3, 60, 3)], Some(5), Compression::None),
                plain(12, &[tombstone("g", "t", 3)]),
                marker(13, 5, true),
            ],
        )],
    );
    let state = read_partition_dir(&dir, &OffsetsFilter::default()).unwrap();
    assert_eq!(offsets(&state), vec![row("g", "t", 0, 110), row("g", "t", 1, 140)]);
    assert!(state.offsets.values().next().unwrap().transactional);
    let open: Vec<_> = state
        .open_transactions()
        .map(|(pid, k, v)| (pid, k.partition, v.offset))
        .collect();
    assert_eq!(open, vec![(4, 2, 50)]);
}

#[test]
fn filters_keep_only_matching_groups_and_topics_and_legacy_messages_are_read() {
    let root = tempfile::tempdir().unwrap();
    let (k, v) = commit("old", "t", 0, 3, 0);
    let legacy = crate::legacy::encode_message(0, 1, TS, TimestampType::CreateTime, Some(&k), v.as_deref());
    partition_dir(
        root.path(),
        1,
        &[(
            0,
            vec![
                legacy,
                plain(1, &[commit("keep", "t", 0, 1, 4), commit("keep", "x", 0, 2, 4)]),
            ],
        )],
    );
    partition_dir(root.path(), 2, &[(0, vec![plain(0, &[commit("drop", "t", 0, 9, 4)])])]);
    // Another topic's directory in the log dir is not read.
    partition_dir(root.path(), 3, &[]);
    std::fs::create_dir(root.path().join("orders-0")).unwrap();
    let all = read_log_dir(root.path(), &OffsetsFilter::default()).unwrap();
    assert_eq!(
        offsets(&all),
        vec![
            row("drop", "t", 0, 9),
            row("keep", "t", 0, 1),
            row("keep", "x", 0, 2),
            row("old", "t", 0, 3)
        ]
    );
    assert_eq!(all.partitions_read.len(), 3);
    let filter = OffsetsFilter {
        group: Box::new(|g| g != "drop"),
        topic: Box::new(|t| t == "t"),
    };
    let some = read_log_dir(root.path(), &filter).unwrap();
    assert_eq!(offsets(&some), vec![row("keep", "t", 0, 1), row("old", "t", 0, 3)]);
}

#[test]
fn corrupt_input_is_an_error_naming_file_and_offset_and_a_cut_tail_is_tolerated() {
    let root = tempfile::tempdir().unwrap();
    let good = plain(0, &[commit("g", "t", 0, 1, 3)]);
    let next = plain(1, &[commit("g", "t", 0, 2, 3)]);
    // A partial last batch in the newest segment: a broker stopped mid-write; the complete batches count.
    let dir = partition_dir(
        root.path(),
        0,
        &[(0, vec![good.clone(), next[..next.len() - 3].to_vec()])],
    );
    let state = read_partition_dir(&dir, &OffsetsFilter::default()).unwrap();
    assert_eq!(offsets(&state), vec![row("g", "t", 0, 1)]);
    // The same cut in an older segment is an error.
    let dir = partition_dir(
        root.path(),
        1,
        &[(0, vec![good.clone(), next[..next.len() - 3].to_vec()]), (2, vec![])],
    );
    let e = read_partition_dir(&dir, &OffsetsFilter::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("00000000000000000000.log"), "{e}");
    // A flipped byte: CRC mismatch.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    let dir = partition_dir(root.path(), 2, &[(0, vec![flipped])]);
    let e = read_partition_dir(&dir, &OffsetsFilter::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("00000000000000000000.log") && e.to_lowercase().contains("crc"),
        "{e}"
    );
    // A CRC-valid batch whose record value is of an unknown version: names file, byte, offset and field.
    let mut bad = commit("g", "t", 0, 1, 3);
    bad.1.as_mut().unwrap()[..2].copy_from_slice(&9i16.to_be_bytes());
    let dir = partition_dir(root.path(), 3, &[(0, vec![good, plain(1, &[bad])])]);
    let e = read_partition_dir(&dir, &OffsetsFilter::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("__consumer_offsets-3/00000000000000000000.log") && e.contains("offset 1"),
        "{e}"
    );
    assert!(e.contains("OffsetCommitValue version 9"), "{e}");
}

proptest::proptest! {
    /// A CRC-valid batch whose record bytes were changed (the CRC computed after the change, as a buggy writer
    /// would) is read or refused with an error, never a panic, compressed or not.
    #[test]
    fn resealed_mutated_batches_never_panic(
        at in proptest::prelude::any::<proptest::sample::Index>(),
        byte in proptest::prelude::any::<u8>(),
        gzip in proptest::prelude::any::<bool>(),
    ) {
        let records = [commit("g", "t", 0, 1, 4), commit("g", "t", 1, 2, 3), (group_metadata_key("g"), None)];
        let codec = if gzip { Compression::Gzip } else { Compression::None };
        let mut bytes = batch(0, &records, Some(3), codec);
        // Past the header (61 bytes): the records (or the compressed stream).
        let i = 61 + at.index(bytes.len() - 61);
        bytes[i] = byte;
        crate::batch::seal_crc(&mut bytes);
        let root = tempfile::tempdir().unwrap();
        let dir = partition_dir(root.path(), 0, &[(0, vec![bytes, marker(3, 3, true)])]);
        let _ = read_partition_dir(&dir, &OffsetsFilter::default());
    }
}

/// Throughput of the replay against the plain record walk of the same bytes (what `verify --deep` does per batch),
/// on a `__consumer_offsets` partition shaped like a busy cluster's: 1,000,000 uncompressed v4 offset commits (the
/// coordinator's default codec is none) in batches of 50, 200,000 distinct (group, topic, partition), each committed
/// five times, in 64 MiB segments. Prints a table; run with
/// `cargo test -p segment-format --release --lib -- --ignored --nocapture consumer_offsets_throughput`.
#[test]
#[ignore = "a measurement: run it in release with --nocapture"]
fn consumer_offsets_throughput() {
    use std::time::Instant;
    const GROUPS: usize = 2_000;
    const PARTITIONS: usize = 100; // per group: 10 topics x 10 partitions
    const ROUNDS: i64 = 5;
    const PER_BATCH: usize = 50;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(format!("{CONSUMER_OFFSETS_TOPIC}-0"));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut segment, mut segment_base, mut offset) = (Vec::new(), 0i64, 0i64);
    let mut pending = Vec::with_capacity(PER_BATCH);
    let flush_segment = |segment: &mut Vec<u8>, base: i64| {
        std::fs::write(dir.join(format!("{base:020}.log")), &segment).unwrap();
        segment.clear();
    };
    for round in 0..ROUNDS {
        for g in 0..GROUPS {
            for p in 0..PARTITIONS {
                let group = format!("consumer-group-{g:05}");
                let topic = format!("events-{:02}", p / 10);
                pending.push(commit(&group, &topic, (p % 10) as i32, round * 1_000 + g as i64, 4));
                if pending.len() == PER_BATCH {
                    segment.extend_from_slice(&plain(offset, &pending));
                    offset += PER_BATCH as i64;
                    pending.clear();
                    if segment.len() >= 64 << 20 {
                        flush_segment(&mut segment, segment_base);
                        segment_base = offset;
                    }
                }
            }
        }
    }
    flush_segment(&mut segment, segment_base);
    let bytes: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let records = offset as f64;
    let mib = bytes as f64 / (1 << 20) as f64;

    // Baseline: scan every segment, check CRCs and walk every record, touching key and value lengths.
    let walk = || {
        let mut touched = 0usize;
        let listing = PartitionDir::open(&dir).unwrap();
        for segment in &listing.segments {
            let mut file = LogFile::open(&segment.log).unwrap();
            file.scan(|frame| {
                assert!(frame.crc_matches());
                let header = parse_header(frame.bytes).unwrap();
                for_each_record(frame.bytes, &header, &DeepLimits::default(), |r| {
                    touched += r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len);
                    ControlFlow::Continue(())
                })
                .unwrap();
                ControlFlow::Continue(())
            })
            .unwrap();
        }
        touched
    };
    // The same walk, decoding every key and value (owned strings), kept nowhere: the replay minus its map.
    let decode = || {
        let mut decoded = 0usize;
        let listing = PartitionDir::open(&dir).unwrap();
        for segment in &listing.segments {
            let mut file = LogFile::open(&segment.log).unwrap();
            file.scan(|frame| {
                let header = parse_header(frame.bytes).unwrap();
                for_each_record(frame.bytes, &header, &DeepLimits::default(), |r| {
                    decoded += usize::from(decode_record(r.key, r.value).is_ok());
                    ControlFlow::Continue(())
                })
                .unwrap();
                ControlFlow::Continue(())
            })
            .unwrap();
        }
        decoded
    };
    let replay = || read_partition_dir(&dir, &OffsetsFilter::default()).unwrap();
    // Warm the page cache, then time each three times and keep the best.
    assert!(walk() > 0);
    let best = |f: &dyn Fn() -> usize| {
        (0..3)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(f());
                start.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    let state = replay();
    assert_eq!(state.offsets.len(), GROUPS * PARTITIONS);
    assert!(state.offsets.values().all(|o| o.offset >= (ROUNDS - 1) * 1_000));
    let walk_s = best(&walk);
    let decode_s = best(&decode);
    let replay_s = best(&|| replay().offsets.len());
    println!(
        "consumer offsets: {records} records, {mib:.0} MiB, {} distinct offsets",
        state.offsets.len()
    );
    println!("| pass | s | MiB/s | records/s | vs walk |");
    println!("|---|---|---|---|---|");
    for (name, s) in [
        ("record walk (baseline)", walk_s),
        ("walk + decode every key and value", decode_s),
        ("offsets replay", replay_s),
    ] {
        println!(
            "| {name} | {s:.3} | {:.0} | {:.2}M | {:.2}x |",
            mib / s,
            records / s / 1e6,
            s / walk_s
        );
    }
    println!("cargo test -p segment-format --release --lib -- --ignored --nocapture consumer_offsets_throughput");
}
