//! Unit tests of the install protocol's pieces: epoch merging, size bounds, rename order, lineage tags.

use super::place::{place, Placement};
use super::validate::{implausible_sizes, merge_epochs};
use super::*;
use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint};
use segmirror_transport::manifest::EpochStart;

fn e(epoch: i32, start_offset: i64) -> EpochEntry {
    EpochEntry { epoch, start_offset }
}

fn s(epoch: i32, start_offset: i64) -> EpochStart {
    EpochStart { epoch, start_offset }
}

#[test]
fn epochs_merge_by_epoch_keeping_the_earliest_start() {
    assert_eq!(merge_epochs(&[], &[s(0, 0), s(1, 80)]), [e(0, 0), e(1, 80)]);
    assert_eq!(
        merge_epochs(&[e(0, 0), e(1, 80)], &[s(1, 80), s(4, 155)]),
        [e(0, 0), e(1, 80), e(4, 155)]
    );
    // The source truncated epoch 10's start to its new log start offset; the mirror keeps the older start.
    assert_eq!(
        merge_epochs(&[e(10, 1_000_000)], &[s(10, 1_000_089), s(11, 1_000_100)]),
        [e(10, 1_000_000), e(11, 1_000_100)]
    );
    // A contradiction survives the merge for the checker to find.
    let merged = merge_epochs(&[e(5, 300)], &[s(4, 400)]);
    assert_eq!(merged, [e(4, 400), e(5, 300)]);
    assert!(!LeaderEpochCheckpoint::new(merged).check(Path::new("x")).is_empty());
}

#[test]
fn index_sizes_are_bounded_by_the_batches_before_anything_is_fetched() {
    use segmirror_transport::manifest::{SegmentFileName, Sha256Digest, ShipperStamp, MANIFEST_FORMAT_V1};
    let file = |kind, size| ManifestFile {
        name: SegmentFileName::new(0, kind),
        key: String::new(),
        size,
        crc32c: 0,
        sha256: Sha256Digest([0; 32]),
        mtime_ms: 0,
    };
    let mut m = Manifest {
        format: MANIFEST_FORMAT_V1.into(),
        link: "l".into(),
        topic: "t".into(),
        partition: 0,
        source_topic_id: Uuid([1; 16]),
        source_cluster_id: "c".into(),
        base_offset: 0,
        first_offset: Some(0),
        last_offset: Some(9),
        next_offset: 10,
        batches: 10,
        records: 10,
        max_timestamp: -1,
        sealed: true,
        epochs: Vec::new(),
        log_start_offset: 0,
        files: vec![
            file(SegmentFileKind::Log, 1000),
            file(SegmentFileKind::Index, 80),
            file(SegmentFileKind::TimeIndex, 132),
            file(SegmentFileKind::TxnIndex, 340),
            file(SegmentFileKind::Snapshot, 56),
        ],
        end_snapshot: None,
        log_chunks: Vec::new(),
        shipper: ShipperStamp {
            id: "s".into(),
            lease_epoch: 1,
        },
        created_at_ms: 0,
    };
    assert_eq!(implausible_sizes(&m), None);
    m.files[1].size = 88;
    assert!(
        implausible_sizes(&m).is_some(),
        "11 offset-index entries for 10 batches"
    );
    m.files[1].size = 80;
    m.files[2].size = 144;
    assert!(implausible_sizes(&m).is_some());
    m.files[2].size = 132;
    // Claimed batches are also bounded by the log's size.
    m.batches = 1_000_000;
    m.files[1].size = 8 * 1_000;
    assert!(
        implausible_sizes(&m).is_some(),
        "a 1000-byte log holds at most 39 frames"
    );
    m.batches = 10;
    m.files[1].size = 80;
    m.files[4].size = MAX_SNAPSHOT_BYTES + 46;
    assert!(implausible_sizes(&m).is_some());
}

#[test]
fn mtimes_convert_both_ways_of_the_epoch() {
    assert_eq!(system_time(0), Some(UNIX_EPOCH));
    assert_eq!(system_time(1_500), Some(UNIX_EPOCH + Duration::from_millis(1_500)));
    assert_eq!(system_time(-1_000), UNIX_EPOCH.checked_sub(Duration::from_secs(1)));
}

#[test]
fn a_new_segment_puts_its_log_last_and_a_replacement_first() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    let staging = dir.path().join("s");
    fs::create_dir_all(&part).unwrap();
    fs::create_dir_all(&staging).unwrap();
    let files: Vec<(SegmentFileKind, Source, String)> = [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::Snapshot,
    ]
    .into_iter()
    .map(|k| {
        let name = segment_format::dir::segment_file_name(7, k);
        fs::write(staging.join(&name), b"x").unwrap();
        (k, Source::Fetch(staging.join(&name)), name)
    })
    .collect();
    // A stale .txnindex of an older attempt at this base is not part of the version.
    fs::write(part.join("00000000000000000007.txnindex"), b"old").unwrap();
    let seen = std::cell::RefCell::new(Vec::new());
    let record = |n: u32| {
        let mut names: Vec<String> = fs::read_dir(&part)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        seen.borrow_mut().push((n, names));
        Ok(())
    };
    place(&part, (7, 20), &files, None, Placement::NewSegment, None, &record).unwrap();
    let seen = seen.into_inner();
    assert_eq!(seen.len(), 4);
    assert!(seen[..3]
        .iter()
        .all(|(_, names)| !names.iter().any(|n| n.ends_with(".log"))));
    assert!(
        seen[0].1.iter().all(|n| !n.ends_with(".txnindex")),
        "stale file removed first"
    );
    assert!(seen[3].1.contains(&"00000000000000000007.log".to_string()));

    for (_, source, name) in &files {
        fs::write(source.path(), b"yy").unwrap();
        let _ = name;
    }
    let first = std::cell::RefCell::new(None);
    place(&part, (7, 20), &files, None, Placement::Replacement, None, &|n| {
        if n == 1 {
            *first.borrow_mut() = Some(fs::read(part.join("00000000000000000007.log")).unwrap());
            assert_eq!(fs::read(part.join("00000000000000000007.index")).unwrap(), b"x");
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(first.into_inner().unwrap(), b"yy", "the .log is replaced first");
}

#[test]
fn a_foreign_partition_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    let a = Uuid([1; 16]);
    let b = Uuid([2; 16]);
    ensure_partition_dir(&part, &a).unwrap();
    assert_eq!(
        PartitionMetadata::read(&part.join(PARTITION_METADATA_FILE))
            .unwrap()
            .topic_id,
        a
    );
    ensure_partition_dir(&part, &a).unwrap();
    assert!(matches!(
        ensure_partition_dir(&part, &b),
        Err(Error::ForeignPartitionDir { .. })
    ));
}

#[test]
fn the_log_end_snapshot_is_placed_last_and_stale_ones_of_the_segment_go() {
    let dir = tempfile::tempdir().unwrap();
    let part = dir.path().join("t-0");
    let staging = dir.path().join("s");
    fs::create_dir_all(&part).unwrap();
    fs::create_dir_all(&staging).unwrap();
    let files: Vec<(SegmentFileKind, Source, String)> =
        [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex]
            .into_iter()
            .map(|k| {
                let name = segment_format::dir::segment_file_name(7, k);
                fs::write(staging.join(&name), b"x").unwrap();
                (k, Source::Fetch(staging.join(&name)), name)
            })
            .collect();
    let end_name = segment_format::dir::segment_file_name(20, SegmentFileKind::Snapshot);
    fs::write(staging.join(&end_name), b"end").unwrap();
    let end = (Source::Fetch(staging.join(&end_name)), end_name.clone());
    // The installed shorter version's files, its log-end snapshot at 12, the base snapshot, and a snapshot outside
    // the range (not this segment's business).
    for name in [
        "00000000000000000007.log",
        "00000000000000000007.index",
        "00000000000000000007.timeindex",
        "00000000000000000007.snapshot",
        "00000000000000000012.snapshot",
        "00000000000000000030.snapshot",
    ] {
        fs::write(part.join(name), b"old").unwrap();
    }
    // The partition's new leader-epoch checkpoint, staged and fsynced beside the version's files.
    let checkpoint = leader_epoch_checkpoint_path(&part);
    fs::write(&checkpoint, b"old epochs").unwrap();
    let staged_checkpoint = leader_epoch_checkpoint_path(&staging);
    fs::write(&staged_checkpoint, b"new epochs").unwrap();
    let end_seen = std::cell::RefCell::new(Vec::new());
    place(
        &part,
        (7, 20),
        &files,
        Some(&end),
        Placement::Replacement,
        Some(&staged_checkpoint),
        &|n| {
            end_seen.borrow_mut().push((n, part.join(&end_name).exists()));
            assert_eq!(
                fs::read(&checkpoint).unwrap(),
                b"old epochs",
                "the checkpoint is renamed after every file"
            );
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(fs::read(&checkpoint).unwrap(), b"new epochs");
    assert!(!staged_checkpoint.exists());
    assert_eq!(
        end_seen.into_inner(),
        [(1, false), (2, false), (3, false), (4, true)],
        "the log-end snapshot is renamed after the segment's files"
    );
    assert_eq!(fs::read(part.join(&end_name)).unwrap(), b"end");
    assert!(
        !part.join("00000000000000000012.snapshot").exists(),
        "stale log-end snapshot removed"
    );
    assert!(
        !part.join("00000000000000000007.snapshot").exists(),
        "a base snapshot the version does not have is not part of it"
    );
    assert!(part.join("00000000000000000030.snapshot").exists());
    assert_eq!(fs::read(part.join("00000000000000000007.log")).unwrap(), b"x");
}
