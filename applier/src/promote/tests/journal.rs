//! An interrupted promotion: a crash at any step finished by the next run, a staging directory without a journal
//! discarded, a damaged journal stopping the run, and the journal's round trip.

use super::*;

#[test]
fn a_crash_at_any_step_is_finished_by_the_next_run() {
    let reference = {
        let mut f = fixture();
        f.promote().unwrap();
        target_state(&f.target)
    };
    let all = steps();
    assert_eq!(all.len(), 9, "{all:?}");
    for crash_at in &all {
        let mut f = fixture();
        let request = f.request();
        let crashed = catch_unwind(AssertUnwindSafe(|| {
            promote_with(&request, &mut f.catalog, &mut |s| {
                if &s == crash_at {
                    panic!("crash at {s:?}");
                }
            })
        }));
        assert!(crashed.is_err(), "the hook fired at {crash_at:?}");
        // While the promotion is unfinished the log dir holds a directory the broker cannot parse: a broker
        // started now refuses to start (our own listing reports the same).
        let listing = LogDir::open(&f.target).unwrap();
        assert!(
            listing
                .findings
                .iter()
                .any(|x| x.severity == Severity::Error && x.path.ends_with(PROMOTION_DIR)),
            "crash at {crash_at:?}: {:?}",
            listing.findings
        );
        if *crash_at == Step::Journaled {
            // A crash in the middle of building leaves a partial `.building` directory.
            let partial = f.target.join(PROMOTION_DIR).join("orders-0.building");
            std::fs::create_dir_all(&partial).unwrap();
            std::fs::write(partial.join("00000000000000000000.log"), b"partial").unwrap();
        }
        let report = f.promote().unwrap();
        assert_eq!(report.changed(), 2, "crash at {crash_at:?}");
        assert!(
            report.partitions.iter().all(|p| p.outcome == Outcome::Resumed),
            "crash at {crash_at:?}: {:?}",
            report.partitions
        );
        assert_eq!(target_state(&f.target), reference, "crash at {crash_at:?}");
        assert_eq!(
            (f.state(0), f.state(1)),
            (PartitionState::Promoted, PartitionState::Promoted)
        );
    }
}

#[test]
fn a_staging_directory_without_a_journal_is_discarded() {
    let mut f = fixture();
    let staging = f.target.join(PROMOTION_DIR);
    std::fs::create_dir_all(staging.join("orders-0.building")).unwrap();
    std::fs::write(staging.join(format!("{JOURNAL_FILE}.tmp")), b"{").unwrap();
    let report = f.promote().unwrap();
    assert!(report.partitions.iter().all(|p| p.outcome == Outcome::Promoted));
    assert!(!staging.exists());
}

#[test]
fn a_damaged_journal_stops_the_run() {
    let mut f = fixture();
    let staging = f.target.join(PROMOTION_DIR);
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join(JOURNAL_FILE), br#"{"format":"segmirror.promotion.v1","link":"l","mirror_root":"/m","partitions":[{"topic":"../x","partition":0,"target_topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","leader_epoch":0,"log_start_offset":0,"log_end_offset":1,"segments":[0],"snapshots":[],"previous_state":"mirroring"}]}"#).unwrap();
    let err = f.promote().unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if path.ends_with(JOURNAL_FILE)),
        "{err:?}"
    );
    assert!(err.to_string().contains("topic"), "{err}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A journal is read back from the target log dir: damaged bytes give an error naming the file, never a panic.
    #[test]
    fn random_journal_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(JOURNAL_FILE), &bytes).unwrap();
        if let Err(e) = read_journal(dir.path()) {
            proptest::prop_assert!(matches!(&e, Error::Io { path, .. } if path.ends_with(JOURNAL_FILE)), "{e:?}");
        }
    }
}

#[test]
fn journal_round_trips() {
    let journal = Journal {
        format: JOURNAL_FORMAT.into(),
        link: LINK.into(),
        mirror_root: PathBuf::from("/srv/mirror"),
        partitions: vec![Planned {
            topic: TOPIC.into(),
            partition: 3,
            target_topic_id: TARGET_ID.to_string(),
            leader_epoch: 4,
            log_start_offset: 10,
            log_end_offset: 99,
            segments: vec![0, 50],
            snapshots: vec![50],
            previous_state: "mirroring".into(),
            cut: vec![CutTransaction {
                producer_id: 7,
                producer_epoch: 1,
                coordinator_epoch: 2,
                first_offset: 90,
                records: 4,
                batches: 2,
                bytes: 400,
                marker_offset: 99,
            }],
            cut_timestamp: 1_700_000_000_000,
            tail_active: Some(TailActive {
                segment_base: 50,
                catalog_end_offset: Some(50),
            }),
            handover: true,
            last_segment_bytes: None,
            consistent_cut: Some(ConsistentCut {
                timestamp_ms: 1_700_000_000_000,
                mirror_end_offset: 120,
                cut_offset: 99,
                left_offsets: 21,
                left_batches: 3,
                left_bytes: 999,
                first_left_offset: 99,
                first_left_timestamp: 1_700_000_000_500,
                last_segment_bytes: Some(4096),
            }),
            tail_kept: None,
        }],
        replicas: vec![ReplicaDir {
            log_dir: PathBuf::from("/srv/kafka-2/logs"),
            partitions: vec![format!("{TOPIC}-3")],
        }],
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(JOURNAL_FILE), serde_json::to_vec(&journal).unwrap()).unwrap();
    assert_eq!(read_journal(dir.path()).unwrap(), Some(journal));
    assert_eq!(read_journal(&dir.path().join("absent")).unwrap(), None);
}

/// The log dir an uninterrupted promotion leaves, and a fixture whose promotion crashed right after its last
/// build, with its staging directory (each build's step shown to `on_built` with that directory first).
fn crashed_after_the_last_build(on_built: impl Fn(&Path)) -> (TargetState, Fixture, PathBuf) {
    let reference = {
        let mut f = fixture();
        f.promote().unwrap();
        target_state(&f.target)
    };
    let mut f = fixture();
    let request = f.request();
    let staging = f.target.join(PROMOTION_DIR);
    let mut built = 0;
    let crashed = catch_unwind(AssertUnwindSafe(|| {
        promote_with(&request, &mut f.catalog, &mut |s| {
            if let Step::Built(_) = s {
                built += 1;
                on_built(&staging);
                if built == 2 {
                    panic!("crash after the last build");
                }
            }
        })
    }));
    assert!(crashed.is_err());
    (reference, f, staging)
}

/// Builds are made durable together (one `syncfs` of the log dir's filesystem) before staging says so
/// (`BUILDS_DURABLE`): a crash right after the last build leaves every partition `.building` and no such name, and
/// the next run builds them again.
#[test]
fn no_partition_is_ready_before_every_build_is_durable() {
    let said_durable = |staging: &Path| staging.join(crate::promote::swap::BUILDS_DURABLE).exists();
    let (reference, mut f, staging) = crashed_after_the_last_build(|staging| {
        assert!(
            !said_durable(staging),
            "builds said durable before every build was done"
        );
    });
    for p in 0..2 {
        assert!(staging.join(format!("orders-{p}.building")).is_dir());
    }
    assert!(!said_durable(&staging));
    let report = f.promote().unwrap();
    assert!(report.partitions.iter().all(|p| p.outcome == Outcome::Resumed));
    assert_eq!(target_state(&f.target), reference);
}

/// A promotion interrupted by an earlier build, which renamed each durable build `.ready` instead of naming them
/// all durable at once: a rerun swaps the `.ready` ones in and builds the rest again, to the same bytes.
#[test]
fn a_staging_left_with_ready_partitions_by_an_earlier_build_is_finished() {
    let (reference, mut f, staging) = crashed_after_the_last_build(|_| {});
    // What the earlier build left: one partition renamed `.ready`, the other still `.building`.
    std::fs::rename(staging.join("orders-0.building"), staging.join("orders-0.ready")).unwrap();
    assert!(staging.join("orders-1.building").is_dir());
    let report = f.promote().unwrap();
    assert!(report.partitions.iter().all(|p| p.outcome == Outcome::Resumed));
    assert_eq!(target_state(&f.target), reference);
    assert!(!staging.exists());
}
