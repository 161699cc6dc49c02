//! Handover by rename (`--handover rename|auto`): the same log dir as a copy, the mirror left without the promoted
//! segments, and a crash between renames or at any step finished by the next run without losing a file.

use super::*;

fn handover_request(f: &Fixture, handover: Handover) -> PromoteRequest {
    PromoteRequest {
        handover,
        ..f.request()
    }
}

#[test]
fn a_handover_by_rename_leaves_the_same_log_dir_as_a_copy_and_the_mirror_without_its_segments() {
    let reference = {
        let mut f = fixture();
        let report = f.promote().unwrap();
        assert!(report.partitions.iter().all(|p| !p.handed_over));
        target_state(&f.target)
    };
    let mut f = fixture();
    let before = mirror_segment_files(&f.mirror);
    assert!(before.len() > 10, "{before:?}");
    let report = promote(&handover_request(&f, Handover::Rename), &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    assert!(
        report.partitions.iter().all(|p| p.handed_over),
        "{:?}",
        report.partitions
    );
    assert!(report.partitions.iter().all(|p| p.batches_restamped > 0));
    assert_eq!(target_state(&f.target), reference);
    assert_eq!(
        promoted_segment_files_left(&f.mirror, &f.target),
        Vec::<PathBuf>::new(),
        "every promoted segment file moved"
    );
    assert!(
        mirror_segment_files(&f.mirror).len() < before.len() / 2,
        "the mirror keeps only what was not promoted"
    );
    // A partition directory holding only what the build takes or replaces (its segments, checkpoint, metadata and
    // snapshots) went over whole, by one rename; the target holds none of its snapshots (the same log dir as a
    // copy, above). One holding segments not promoted keeps them.
    assert!(!f.mirror.join("orders-0").exists());
    assert!(f.mirror.join("orders-1").join("00000000000000000000.log").exists());
    // The catalog says where the files went, and the status shows it.
    let status = f.catalog.status().unwrap();
    let target = f.target.display().to_string();
    for p in &status.links[0].partitions {
        assert_eq!(p.state, PartitionState::Promoted);
        assert_eq!(p.handed_over_to.as_deref(), Some(target.as_str()), "{p:?}");
    }
    // Promoting again is a no-op, as after a copy.
    let again = promote(&handover_request(&f, Handover::Rename), &mut f.catalog).unwrap();
    assert_eq!(again.changed(), 0);
}

#[test]
fn handover_auto_renames_only_when_the_whole_link_is_promoted() {
    let mut f = fixture();
    let part = PromoteRequest {
        topics: Some(topics_regex("nothing|orders").unwrap()),
        ..handover_request(&f, Handover::Auto)
    };
    // The selection covers the link: renamed.
    let report = promote(&part, &mut f.catalog).unwrap();
    assert!(report.partitions.iter().all(|p| p.handed_over), "{:?}", report.notes);

    // A second topic stays mirrored: copied, with a note saying why.
    let mut f = fixture();
    let key = PartitionKey::new(LINK, "kept", 0);
    f.catalog.upsert_partition(&key, &SOURCE_ID.to_string(), 0).unwrap();
    let request = PromoteRequest {
        topics: Some(topics_regex("orders").unwrap()),
        ..handover_request(&f, Handover::Auto)
    };
    let before = mirror_segment_files(&f.mirror);
    let report = promote(&request, &mut f.catalog).unwrap();
    assert!(report.partitions.iter().all(|p| !p.handed_over));
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("--handover auto copies") && n.contains("1 partition")),
        "{:?}",
        report.notes
    );
    assert_eq!(
        mirror_segment_files(&f.mirror),
        before,
        "a copy leaves the mirror as it was"
    );
}

/// A crash after any rename or in-place restamp of a handover: no segment file is lost (each is in the mirror or
/// in staging), and the rerun finishes with the log dir an uninterrupted handover leaves.
#[test]
fn a_crash_between_the_renames_of_a_handover_is_finished_by_the_next_run_and_loses_no_file() {
    use crate::failpoint::{Armed, FailPoint};
    use std::sync::Arc;
    let reference = {
        let mut f = fixture();
        promote(&handover_request(&f, Handover::Rename), &mut f.catalog).unwrap();
        target_state(&f.target)
    };
    // Every arrival at each point, until a run passes them all without firing.
    let mut crashes = 0;
    let mut next = Some((FailPoint::HandoverRenamed, 1));
    while let Some((point, nth)) = next.take() {
        next = Some((point, nth + 1));
        let mut f = fixture();
        let original = mirror_segment_files(&f.mirror);
        let armed = Arc::new(Armed::new(point, nth));
        let request = PromoteRequest {
            parallel: 1,
            failpoint: Some(armed.clone()),
            ..handover_request(&f, Handover::Rename)
        };
        let result = promote(&request, &mut f.catalog);
        if !armed.fired() {
            assert!(result.is_ok(), "{point:?} {nth}: {result:?}");
            next = (point == FailPoint::HandoverRenamed).then_some((FailPoint::HandoverRestamped, 1));
            continue;
        }
        crashes += 1;
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Injected(p) if p == point), "{err:?}");
        // Every file is in the mirror or in staging, with its bytes (a `.log` possibly restamped already).
        let staging = f.target.join(PROMOTION_DIR);
        for (path, bytes) in &original {
            let dir = path.parent().unwrap().to_str().unwrap();
            let name = path.file_name().unwrap();
            let building = staging.join(format!("{dir}.building")).join(name);
            let found = std::fs::read(f.mirror.join(path)).or_else(|_| std::fs::read(&building));
            let found = found.unwrap_or_else(|_| panic!("{point:?} {nth}: {} lost", path.display()));
            assert_eq!(found.len(), bytes.len(), "{point:?} {nth}: {}", path.display());
        }
        let report = f.promote().unwrap();
        assert_eq!(report.changed(), 2, "{point:?} {nth}");
        assert!(report
            .partitions
            .iter()
            .all(|p| p.outcome == Outcome::Resumed && p.handed_over));
        assert_eq!(target_state(&f.target), reference, "{point:?} {nth}");
        assert!(promoted_segment_files_left(&f.mirror, &f.target).is_empty());
        assert_eq!(
            (f.state(0), f.state(1)),
            (PartitionState::Promoted, PartitionState::Promoted)
        );
    }
    // 9 segments promoted, one restamp each: orders-0's 6 with their directory, by one rename (it holds nothing
    // else but what the build takes or replaces), orders-1's 3 file by file (4 files each, an absent `.txnindex`
    // counts; the directory keeps segments not promoted).
    assert_eq!(crashes, 1 + 3 * 4 + 9);
}

#[test]
fn a_crash_at_any_step_of_a_handover_is_finished_by_the_next_run() {
    let reference = {
        let mut f = fixture();
        promote(&handover_request(&f, Handover::Rename), &mut f.catalog).unwrap();
        target_state(&f.target)
    };
    for crash_at in steps() {
        let mut f = fixture();
        let request = handover_request(&f, Handover::Rename);
        let crashed = catch_unwind(AssertUnwindSafe(|| {
            promote_with(&request, &mut f.catalog, &mut |s| {
                if s == crash_at {
                    panic!("crash at {s:?}");
                }
            })
        }));
        assert!(crashed.is_err(), "the hook fired at {crash_at:?}");
        let report = f.promote().unwrap();
        assert_eq!(report.changed(), 2, "crash at {crash_at:?}");
        assert_eq!(target_state(&f.target), reference, "crash at {crash_at:?}");
        assert!(
            promoted_segment_files_left(&f.mirror, &f.target).is_empty(),
            "crash at {crash_at:?}"
        );
    }
}
