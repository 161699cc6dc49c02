//! Promotion into several replicas' log dirs in one run: one plan (the highest epoch of every replica, one abort
//! timestamp), identical bytes in every log dir, a partition only where its broker holds it, rename into the last
//! log dir only, a crash between (or inside) log dirs finished identically, and a replica holding other data
//! refused with nothing changed anywhere.

use std::collections::BTreeSet;

use segment_format::dir::{segment_file_name, SegmentFileKind, META_PROPERTIES_FILE};

use super::*;
use crate::promote::journal::JOURNAL_FILE;

type State = (BTreeMap<PathBuf, Vec<u8>>, BTreeMap<String, Vec<OffsetCheckpointEntry>>);

/// A log dir's state without its broker's identity (`meta.properties` names the node): what must be identical
/// across replicas.
fn replica_state(dir: &Path) -> State {
    let (mut files, checkpoints) = target_state(dir);
    files.remove(Path::new(META_PROPERTIES_FILE));
    (files, checkpoints)
}

/// The fixture plus two more brokers' log dirs holding `orders` partitions `holds[i]`, last led in `epochs[i]`.
fn with_replicas(holds: [&[i32]; 2], epochs: [i32; 2]) -> (Fixture, Vec<PathBuf>) {
    let f = fixture();
    let base = f.target.parent().unwrap().to_path_buf();
    let dirs: Vec<PathBuf> = (0..2).map(|i| base.join(format!("broker-{}", i + 2))).collect();
    for (i, dir) in dirs.iter().enumerate() {
        write_target(dir, i as i32 + 2, holds[i], epochs[i]);
    }
    (f, dirs)
}

fn request(f: &Fixture, replicas: &[PathBuf], handover: Handover) -> PromoteRequest {
    PromoteRequest {
        replica_log_dirs: replicas.to_vec(),
        handover,
        ..f.request()
    }
}

fn replicas_of(f: &Fixture, partition: i32) -> Vec<String> {
    let id = f
        .catalog
        .partition(&PartitionKey::new(LINK, TOPIC, partition))
        .unwrap()
        .id;
    f.catalog.promoted_replicas(id).unwrap()
}

fn sorted(dirs: &[&Path]) -> Vec<String> {
    let mut v: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    v.sort();
    v
}

#[test]
fn every_replica_gets_the_same_bytes_restamped_to_the_highest_epoch() {
    let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [5, TARGET_EPOCH]);
    let report = promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    let outcomes: Vec<(PathBuf, ReplicaOutcome, usize)> = report
        .log_dirs
        .iter()
        .map(|r| (r.log_dir.clone(), r.outcome, r.partitions))
        .collect();
    assert_eq!(
        outcomes,
        [
            (f.target.clone(), ReplicaOutcome::Installed, 2),
            (dirs[0].clone(), ReplicaOutcome::Installed, 2),
            (dirs[1].clone(), ReplicaOutcome::Installed, 2),
        ]
    );
    assert!(report.log_dirs.iter().all(|r| r.log_bytes > 0));
    for p in &report.partitions {
        assert_eq!(p.leader_epoch, Some(5), "the highest epoch any replica led in: {p:?}");
        assert_eq!(p.log_dirs, [f.target.clone(), dirs[0].clone(), dirs[1].clone()]);
    }
    let reference = replica_state(&f.target);
    assert_eq!(replica_state(&dirs[0]), reference);
    assert_eq!(replica_state(&dirs[1]), reference);
    // The bytes are the mirror's restamped to 5, the epoch checkpoint says 5.
    let name = segment_file_name(f.written[0].segments[0].base_offset, SegmentFileKind::Log);
    let promoted = std::fs::read(dirs[1].join("orders-0").join(&name)).unwrap();
    let mirrored = std::fs::read(f.mirror.join("orders-0").join(&name)).unwrap();
    assert_eq!(promoted, restamped(&mirrored, 5));
    let epochs = LeaderEpochCheckpoint::read(&dirs[1].join("orders-0").join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
    assert_eq!(epochs.entries.iter().map(|e| e.epoch).collect::<Vec<_>>(), [5]);
    let all = sorted(&[&f.target, &dirs[0], &dirs[1]]);
    assert_eq!((replicas_of(&f, 0), replicas_of(&f, 1)), (all.clone(), all));
    assert_eq!(
        (f.state(0), f.state(1)),
        (PartitionState::Promoted, PartitionState::Promoted)
    );
    // Again: already promoted, nothing changed.
    let again = promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap();
    assert_eq!(again.changed(), 0);
    assert_eq!(replica_state(&dirs[1]), reference);
}

#[test]
fn a_partition_goes_only_into_the_log_dirs_of_its_replicas() {
    // Three brokers, RF 2: the first holds partition 0 only (its topic dir for 1 is removed), the second 0 and 1,
    // the third 1.
    let (mut f, dirs) = with_replicas([&[0, 1], &[1]], [TARGET_EPOCH, TARGET_EPOCH]);
    std::fs::remove_dir_all(f.target.join("orders-1")).unwrap();
    let report = promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    assert!(
        !f.target.join("orders-1").exists(),
        "not created where the broker holds no replica"
    );
    assert!(!dirs[1].join("orders-0").exists());
    for (tp, a, b) in [("orders-0", &f.target, &dirs[0]), ("orders-1", &dirs[0], &dirs[1])] {
        assert_eq!(tree(&a.join(tp)), tree(&b.join(tp)), "{tp}");
    }
    assert_eq!(replicas_of(&f, 0), sorted(&[&f.target, &dirs[0]]));
    assert_eq!(replicas_of(&f, 1), sorted(&[&dirs[0], &dirs[1]]));
    let p1 = report.partitions.iter().find(|p| p.partition == 1).unwrap();
    assert_eq!(p1.log_dirs, [dirs[0].clone(), dirs[1].clone()]);
    // A partition no named log dir holds is refused.
    let (mut f, dirs) = with_replicas([&[0], &[0]], [TARGET_EPOCH, TARGET_EPOCH]);
    std::fs::remove_dir_all(f.target.join("orders-1")).unwrap();
    let err = promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap_err();
    let found = refusals(err);
    assert!(
        found.iter().any(|r| matches!(
            r,
            Refusal::PartitionCountMismatch {
                target_partitions: 1,
                ..
            }
        )),
        "{found:?}"
    );
}

#[test]
fn a_handover_renames_into_the_last_log_dir_and_copies_into_the_others() {
    let reference = {
        let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
        promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap();
        replica_state(&f.target)
    };
    let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
    let report = promote(&request(&f, &dirs, Handover::Rename), &mut f.catalog).unwrap();
    assert!(
        report.partitions.iter().all(|p| p.handed_over),
        "{:?}",
        report.partitions
    );
    for dir in [&f.target, &dirs[0], &dirs[1]] {
        assert_eq!(replica_state(dir), reference, "{}", dir.display());
    }
    assert!(
        promoted_segment_files_left(&f.mirror, &f.target).is_empty(),
        "the mirror's promoted files went to the last log dir"
    );
    // Not one inode shared between replicas: a broker rewrites its files in place.
    use std::os::unix::fs::MetadataExt;
    let name = segment_file_name(f.written[0].segments[1].base_offset, SegmentFileKind::Log);
    let inodes: BTreeSet<u64> = [&f.target, &dirs[0], &dirs[1]]
        .iter()
        .map(|d| std::fs::metadata(d.join("orders-0").join(&name)).unwrap().ino())
        .collect();
    assert_eq!(inodes.len(), 3);
    let last = dirs[1].display().to_string();
    let status = f.catalog.status().unwrap();
    for p in &status.links[0].partitions {
        assert_eq!(p.handed_over_to.as_deref(), Some(last.as_str()), "{p:?}");
    }
}

/// Every step of a promotion into three log dirs (a hook call each), with copy or rename.
fn step_count(handover: Handover) -> usize {
    let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
    let mut n = 0;
    promote_with(&request(&f, &dirs, handover), &mut f.catalog, &mut |_| n += 1).unwrap();
    n
}

#[test]
fn a_crash_at_any_step_of_any_log_dir_is_finished_identically_by_the_next_run() {
    for handover in [Handover::Copy, Handover::Rename] {
        let reference = {
            let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
            promote(&request(&f, &dirs, handover), &mut f.catalog).unwrap();
            replica_state(&f.target)
        };
        let steps = step_count(handover);
        // Journaled, per log dir 2 built + moved aside + swapped (hooks per partition), checkpointed; recorded;
        // two log dirs finished before the last.
        assert!(steps >= 3 * 7 + 2, "{steps}");
        let mut finished_earlier_seen = false;
        for crash_at in 0..steps {
            let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
            let req = request(&f, &dirs, handover);
            let mut seen = Vec::new();
            let crashed = catch_unwind(AssertUnwindSafe(|| {
                promote_with(&req, &mut f.catalog, &mut |s| {
                    seen.push(s.clone());
                    if seen.len() == crash_at + 1 {
                        panic!("crash at {s:?}");
                    }
                })
            }));
            assert!(crashed.is_err(), "{handover:?}: the hook fired at step {crash_at}");
            let report = promote(&req, &mut f.catalog).unwrap();
            let at = seen.last().cloned();
            assert_eq!(report.changed(), 2, "{handover:?} crash at {at:?}");
            finished_earlier_seen |= report
                .log_dirs
                .iter()
                .any(|r| r.outcome == ReplicaOutcome::FinishedEarlier);
            for dir in [&f.target, &dirs[0], &dirs[1]] {
                assert_eq!(
                    replica_state(dir),
                    reference,
                    "{handover:?} crash at {at:?}: {}",
                    dir.display()
                );
            }
            assert_eq!(
                (f.state(0), f.state(1)),
                (PartitionState::Promoted, PartitionState::Promoted),
                "{handover:?} crash at {at:?}"
            );
            assert_eq!(replicas_of(&f, 0).len(), 3, "{handover:?} crash at {at:?}");
        }
        assert!(
            finished_earlier_seen,
            "{handover:?}: a crash between log dirs skips the finished ones"
        );
    }
}

#[test]
fn a_crash_while_the_journals_are_written_gives_the_last_log_dirs_the_same_plan() {
    let reference = {
        let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
        promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap();
        replica_state(&f.target)
    };
    let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
    let req = request(&f, &dirs, Handover::Copy);
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        promote_with(&req, &mut f.catalog, &mut |s| {
            if s == Step::Journaled {
                panic!("crash at {s:?}");
            }
        })
    }));
    assert!(crashed.is_err());
    // As if the crash had come before the last log dir's journal was durable (its staging half made).
    std::fs::remove_file(dirs[1].join(PROMOTION_DIR).join(JOURNAL_FILE)).unwrap();
    // The rerun names the log dirs in another order: the journal decides.
    let rerun = PromoteRequest {
        log_dir: dirs[1].clone(),
        replica_log_dirs: vec![dirs[0].clone(), f.target.clone()],
        ..req
    };
    let report = promote(&rerun, &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    for dir in [&f.target, &dirs[0], &dirs[1]] {
        assert_eq!(replica_state(dir), reference, "{}", dir.display());
        assert!(!dir.join(PROMOTION_DIR).exists());
    }
}

#[test]
fn a_replica_holding_other_data_is_refused_naming_its_file_and_no_log_dir_changes() {
    let (mut f, dirs) = with_replicas([&[0, 1], &[0, 1]], [TARGET_EPOCH, TARGET_EPOCH]);
    // The second broker's partition 0 holds a record.
    std::fs::remove_dir_all(dirs[0].join("orders-0")).unwrap();
    let mut w = PartitionWriter::create(&dirs[0], TOPIC, 0, 0, config(TARGET_ID)).unwrap();
    w.become_leader(TARGET_EPOCH);
    w.append(
        BatchBuilder::new(0)
            .partition_leader_epoch(TARGET_EPOCH)
            .record(RecordSpec::new(0, 5).with_value("other")),
    )
    .unwrap();
    w.close().unwrap();
    let before: Vec<State> = [&f.target, &dirs[0], &dirs[1]]
        .iter()
        .map(|d| target_state(d))
        .collect();
    let err = promote(&request(&f, &dirs, Handover::Copy), &mut f.catalog).unwrap_err();
    let found = refusals(err);
    let named = found
        .iter()
        .any(|r| matches!(r, Refusal::TargetNotEmpty { log, .. } if log.starts_with(dirs[0].join("orders-0"))));
    assert!(named, "{found:?}");
    let after: Vec<State> = [&f.target, &dirs[0], &dirs[1]]
        .iter()
        .map(|d| target_state(d))
        .collect();
    assert_eq!(after, before, "nothing changed in any log dir");
    assert_eq!(
        (f.state(0), f.state(1)),
        (PartitionState::Mirroring, PartitionState::Mirroring)
    );
    assert!(replicas_of(&f, 0).is_empty());
    // The same log dir twice is refused too.
    let twice = PromoteRequest {
        replica_log_dirs: vec![f.target.clone()],
        ..f.request()
    };
    let found = refusals(promote(&twice, &mut f.catalog).unwrap_err());
    assert!(
        found.iter().any(|r| matches!(r, Refusal::DuplicateLogDir { .. })),
        "{found:?}"
    );
}
