//! The replica over a mirror root: it serves exactly the ends its facts give (never a batch at or past the
//! durable end, even when the files hold more), follows open transactions for the last stable offset, wakes
//! waiters when an end moves, and leaves a partition whose facts did not move alone.

use std::path::Path;

use segment_format::batch::ControlType;
use segment_format::control::EndTxnMarker;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{AppendInfo, PartitionWriter, WriterConfig};

use super::*;

fn records(n: i32) -> Vec<RecordSpec> {
    (0..n)
        .map(|i| RecordSpec::new(i, 1_700_000_000_000 + i64::from(i)).with_value(vec![b'v'; 30]))
        .collect()
}

/// `t-0` under `root`: three plain batches of 2, then producer 5's transaction of 2 records, then a plain batch
/// of 2 (the transaction still open at its end), then with `commit` its commit marker at offset 10. Returns each
/// batch's append info.
fn write(root: &Path, commit: bool) -> Vec<AppendInfo> {
    let config = WriterConfig {
        fsync: false,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, "t", 0, 0, config).unwrap();
    let mut infos = Vec::new();
    for _ in 0..3 {
        infos.push(w.append(BatchBuilder::new(0).records(records(2))).unwrap());
    }
    infos.push(
        w.append(
            BatchBuilder::new(0)
                .producer(5, 0, 0)
                .transactional(true)
                .records(records(2)),
        )
        .unwrap(),
    );
    infos.push(w.append(BatchBuilder::new(0).records(records(2))).unwrap());
    if commit {
        let marker = EndTxnMarker {
            control_type: ControlType::Commit,
            coordinator_epoch: 1,
        };
        infos.push(w.append_end_txn_marker(5, 0, marker, 1_700_000_000_100, 0).unwrap());
    }
    w.close().unwrap();
    infos
}

fn facts(end: Option<i64>) -> LinkFacts {
    LinkFacts {
        state: ReplicaState::Replicating,
        topics: vec![TopicView {
            name: "t".into(),
            id: [1; 16],
            partitions: vec![0],
            configs: Vec::new(),
        }],
        partitions: vec![PartitionFacts {
            topic: "t".into(),
            partition: 0,
            durable_end: end,
            log_start: 0,
            committed_end: None,
        }],
    }
}

#[test]
fn only_what_the_facts_call_durable_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let infos = write(tmp.path(), false);
    let replica = MirrorReplica::new(tmp.path(), "east");
    assert!(matches!(replica.ends("t", 0), Err(ReadError::UnknownPartition)));

    // The files hold 10 records; the facts say 4 are durable: nothing past offset 4 is served.
    assert!(replica.refresh(&facts(Some(4))).is_empty());
    let ends = replica.ends("t", 0).unwrap();
    assert_eq!((ends.log_start, ends.high_watermark, ends.last_stable), (0, 4, 4));
    let read = replica.read("t", 0, 0, 1 << 20, Isolation::ReadUncommitted).unwrap();
    assert_eq!(read.bytes.len() as u64, infos[0].size + infos[1].size);
    assert!(matches!(
        replica.read("t", 0, 5, 1 << 20, Isolation::ReadUncommitted),
        Err(ReadError::OutOfRange { .. })
    ));
    assert!(replica
        .read("t", 0, 4, 1 << 20, Isolation::ReadUncommitted)
        .unwrap()
        .bytes
        .is_empty());

    // Up to the end: the open transaction holds the last stable offset at its first offset (6).
    let mut changes = replica.changes();
    changes.borrow_and_update();
    assert!(replica.refresh(&facts(Some(10))).is_empty());
    assert!(changes.has_changed().unwrap(), "a moved end wakes waiting fetches");
    let ends = replica.ends("t", 0).unwrap();
    assert_eq!((ends.high_watermark, ends.last_stable), (10, 6));
    let committed = replica.read("t", 0, 4, 1 << 20, Isolation::ReadCommitted).unwrap();
    assert_eq!(
        committed.bytes.len() as u64,
        infos[2].size,
        "read_committed stops at the last stable offset"
    );
    let uncommitted = replica.read("t", 0, 4, 1 << 20, Isolation::ReadUncommitted).unwrap();
    let rest: u64 = infos[2..].iter().map(|i| i.size).sum();
    assert_eq!(uncommitted.bytes.len() as u64, rest);

    // Same facts again: nothing is looked at (the directory may even be gone) and nobody is woken.
    changes.borrow_and_update();
    let moved = tmp.path().with_extension("moved");
    std::fs::rename(tmp.path().join("t-0"), &moved).unwrap();
    assert!(replica.refresh(&facts(Some(10))).is_empty());
    assert!(!changes.has_changed().unwrap());
    // New facts with the files gone: an error naming the directory, and the last ends kept.
    let failures = replica.refresh(&facts(Some(12)));
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("t-0"), "{failures:?}");
    assert_eq!(replica.ends("t", 0).unwrap().high_watermark, 10);
    std::fs::rename(&moved, tmp.path().join("t-0")).unwrap();
}

#[test]
fn a_partition_with_nothing_installed_is_empty_at_its_log_start() {
    let tmp = tempfile::tempdir().unwrap();
    let replica = MirrorReplica::new(tmp.path(), "east");
    let mut f = facts(None);
    f.partitions[0].log_start = 40;
    assert!(replica.refresh(&f).is_empty());
    let ends = replica.ends("t", 0).unwrap();
    assert_eq!((ends.log_start, ends.high_watermark, ends.last_stable), (40, 40, 40));
    assert!(replica
        .read("t", 0, 40, 100, Isolation::ReadCommitted)
        .unwrap()
        .bytes
        .is_empty());
}

#[test]
fn a_transaction_closed_by_its_marker_releases_the_last_stable_offset() {
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), true);
    let replica = MirrorReplica::new(tmp.path(), "east");
    replica.refresh(&facts(Some(10)));
    assert_eq!(replica.ends("t", 0).unwrap().last_stable, 6);
    replica.refresh(&facts(Some(11)));
    assert_eq!(replica.ends("t", 0).unwrap().last_stable, 11);
}

/// A partition the direct applier fills has no `leader-epoch-checkpoint`: its epochs are learned from the batch
/// headers, so Metadata's epoch and OffsetForLeaderEpoch answer as the source broker does.
#[test]
fn without_a_checkpoint_the_epochs_come_from_the_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let config = WriterConfig {
        fsync: false,
        segment_bytes: 400,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(tmp.path(), "t", 0, 0, config).unwrap();
    let mut starts = Vec::new();
    for epoch in [0, 0, 3, 3, 3, 5, 5] {
        let info = w
            .append(BatchBuilder::new(0).partition_leader_epoch(epoch).records(records(2)))
            .unwrap();
        if starts.last().is_none_or(|&(e, _)| e != epoch) {
            starts.push((epoch, info.first_offset));
        }
    }
    w.close().unwrap();
    let _ = std::fs::remove_file(tmp.path().join("t-0").join("leader-epoch-checkpoint"));
    let replica = MirrorReplica::new(tmp.path(), "east");
    // Only the first four batches are durable: epoch 5 is not known yet.
    assert!(replica.refresh(&facts(Some(8))).is_empty());
    assert_eq!(replica.ends("t", 0).unwrap().leader_epoch, 3);
    assert_eq!(replica.epoch_end("t", 0, 3).unwrap(), (3, 8));
    assert!(replica.refresh(&facts(Some(14))).is_empty());
    assert_eq!(replica.ends("t", 0).unwrap().leader_epoch, 5);
    let start_of = |epoch: i32| starts.iter().find(|(e, _)| *e == epoch).unwrap().1;
    assert_eq!(replica.epoch_end("t", 0, 5).unwrap(), (5, 14));
    assert_eq!(replica.epoch_end("t", 0, 3).unwrap(), (3, start_of(5)));
    assert_eq!(replica.epoch_end("t", 0, 4).unwrap(), (3, start_of(5)));
    assert_eq!(replica.epoch_end("t", 0, 1).unwrap(), (0, start_of(3)));
    assert_eq!(replica.epoch_end("t", 0, 6).unwrap(), (-1, -1));
    // Back below what was walked (a truncation): learned again from the start.
    assert!(replica.refresh(&facts(Some(4))).is_empty());
    assert_eq!(replica.ends("t", 0).unwrap().leader_epoch, 0);
}

/// A mirror that may hold records the source has not committed (a shipper in `--upto log-end` mode): reads stop at
/// the high watermark the shipper reported, at both isolation levels, as a broker's consumers stop at its own.
#[test]
fn reads_stop_at_the_reported_high_watermark_when_the_mirror_holds_uncommitted_records() {
    let tmp = tempfile::tempdir().unwrap();
    let infos = write(tmp.path(), true);
    let end = infos.last().unwrap().last_offset + 1;
    let replica = MirrorReplica::new(tmp.path(), "east");
    let with_committed = |committed_end| {
        let mut f = facts(Some(end));
        f.partitions[0].committed_end = committed_end;
        f
    };
    assert!(replica.refresh(&with_committed(Some(4))).is_empty());
    let ends = replica.ends("t", 0).unwrap();
    assert_eq!((ends.high_watermark, ends.last_stable), (4, 4));
    for isolation in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
        let read = replica.read("t", 0, 0, 1 << 20, isolation).unwrap();
        assert_eq!(read.bytes.len() as u64, infos[0].size + infos[1].size);
        assert!(replica.read("t", 0, 4, 1 << 20, isolation).unwrap().bytes.is_empty());
    }

    // The report moves on: the reads follow (woken like any other move); no report caps nothing.
    let mut changes = replica.changes();
    changes.borrow_and_update();
    assert!(replica.refresh(&with_committed(Some(end))).is_empty());
    assert!(changes.has_changed().unwrap());
    assert_eq!(replica.ends("t", 0).unwrap().last_stable, end);
    let all = replica.read("t", 0, 0, 1 << 20, Isolation::ReadUncommitted).unwrap();
    assert_eq!(all.bytes.len() as u64, infos.iter().map(|i| i.size).sum::<u64>());
    assert!(replica.refresh(&with_committed(Some(-1))).is_empty());
    let ends = replica.ends("t", 0).unwrap();
    assert_eq!(
        (ends.high_watermark, ends.last_stable),
        (0, 0),
        "never below the log start"
    );
    assert!(replica.refresh(&with_committed(None)).is_empty());
    assert_eq!(replica.ends("t", 0).unwrap().high_watermark, end);
}
