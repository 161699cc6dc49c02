//! Crash safety: the run is killed at each point of the install protocol (the `failpoints` feature), then run again.
//! The rerun must finish with a mirror byte-identical to the source, never fetch a segment the catalog lists as
//! installed, and take whatever an interrupted install left complete on disk instead of downloading it again.

mod common;

use std::sync::Arc;

use common::*;
use segment_format::partition_metadata::Uuid;
use segmirror_applier::failpoint::{Armed, FailPoint};
use segmirror_applier::mirror::INSTALL_STAGING_DIR as STAGING_DIR;
use segmirror_applier::{Error, NoProgress, PartitionOutcome, Verdict};
use segmirror_catalog::PartitionKey;
use segmirror_transport::manifest::KeyPrefix;

fn installed_bases(w: &World, topic: &str) -> Vec<i64> {
    let catalog = w.catalog();
    match catalog.partition(&PartitionKey::new(LINK, topic, 0)) {
        Ok(p) => catalog
            .installed_segments(p.id)
            .unwrap()
            .iter()
            .map(|s| s.version.base_offset)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Run with a kill point armed; the run must stop there.
async fn crash_at(w: &World, point: FailPoint, nth: u32) {
    let armed = Arc::new(Armed::new(point, nth));
    let config = w.config().with_failpoint(armed.clone());
    let err = segmirror_applier::apply(&config, w.catalog(), &NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Injected(p) if p == point), "{err}");
    assert!(armed.fired());
}

fn keys_of(shipped: &Shipped) -> Vec<String> {
    shipped.manifest.files.iter().map(|f| f.key.clone()).collect()
}

#[tokio::test]
async fn a_crash_at_any_point_of_a_new_segment_install_is_recovered_without_refetching() {
    let points = [
        (FailPoint::AfterStaging, 0),
        (FailPoint::AfterRename(1), 1),
        (FailPoint::AfterRename(2), 2),
        (FailPoint::AfterRename(3), 3),
        (FailPoint::BeforeCatalog, usize::MAX),
    ];
    for (point, renamed) in points {
        let w = World::new();
        let source = write_partition(&w.path("src"), "orders", Uuid([1; 16]), 30, 2048);
        let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &source).await;
        // Killed while installing the second segment.
        crash_at(&w, point, 2).await;
        assert_eq!(installed_bases(&w, "orders"), [0], "{point:?}");
        assert!(w.mirror().join(STAGING_DIR).exists(), "{point:?}");

        w.counting.reset();
        let report = w.apply().await;
        assert_eq!(report.verdict(), Verdict::Ok, "{point:?}: {report:#?}");
        assert_eq!(report.partitions[0].outcome, PartitionOutcome::Complete);
        assert_mirrors(&source, &w.mirror().join("orders-0"));
        assert!(!w.mirror().join(STAGING_DIR).exists());
        // Every kill point leaves the version's staging directory behind; the rerun removes it first.
        assert!(report.staging_cleared, "{point:?}");

        let gets = w.counting.data_gets();
        for key in keys_of(&shipped[0]) {
            assert!(
                !gets.contains(&key),
                "{point:?}: installed segment fetched again: {key}"
            );
        }
        let second = &shipped[1];
        let refetched = keys_of(second).iter().filter(|k| gets.contains(k)).count();
        let files = second.manifest.files.len();
        let expected_refetch = files - renamed.min(files);
        assert_eq!(refetched, expected_refetch, "{point:?}: {gets:?}");
        let first_installed = &report.partitions[0].installed[0];
        assert_eq!(first_installed.base_offset, second.manifest.base_offset);
        assert_eq!(
            first_installed.reused_files as usize,
            files - expected_refetch,
            "{point:?}"
        );
        assert_eq!(installed_bases(&w, "orders").len(), shipped.len());
    }
}

#[tokio::test]
async fn a_crash_while_replacing_a_grown_active_segment_is_recovered() {
    for (point, renamed) in [
        (FailPoint::AfterRename(1), 1usize),
        (FailPoint::BeforeCatalog, usize::MAX),
    ] {
        let w = World::new();
        let tid = Uuid([5; 16]);
        let v1 = write_partition(&w.path("v1"), "grow", tid, 4, 1 << 20);
        let v2 = write_partition(&w.path("v2"), "grow", tid, 9, 1 << 20);
        ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &v1).await;
        assert_eq!(w.apply().await.verdict(), Verdict::Ok);
        let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &v2).await;
        crash_at(&w, point, 1).await;
        // The catalog still lists version 1; the .log on disk is already version 2's.
        let catalog = w.catalog();
        let p = catalog.partition(&PartitionKey::new(LINK, "grow", 0)).unwrap();
        assert_eq!(p.installed_end_offset, Some(12), "{point:?}");
        drop(catalog);

        w.counting.reset();
        let report = w.apply().await;
        assert_eq!(report.verdict(), Verdict::Ok, "{point:?}: {report:#?}");
        assert_mirrors(&v2, &w.mirror().join("grow-0"));
        let installed = &report.partitions[0].installed;
        assert_eq!(installed.len(), 1);
        assert_eq!(installed[0].replaced, Some(12));
        let files = shipped[0].manifest.files.len();
        let renamed = renamed.min(files);
        assert_eq!(installed[0].reused_files as usize, renamed, "{point:?}");
        let fetched = keys_of(&shipped[0])
            .iter()
            .filter(|k| w.counting.data_gets().contains(k))
            .count();
        assert_eq!(fetched, files - renamed, "{point:?}");
    }
}

#[tokio::test]
async fn a_lost_catalog_adopts_the_whole_mirror_without_downloading() {
    let w = World::new();
    let source = write_partition(&w.path("src"), "orders", Uuid([1; 16]), 30, 2048);
    let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &source).await;
    assert_eq!(w.apply().await.verdict(), Verdict::Ok);
    std::fs::remove_dir_all(w.catalog_path().parent().unwrap()).unwrap();

    w.counting.reset();
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    assert!(w.counting.data_gets().is_empty(), "{:?}", w.counting.data_gets());
    assert_eq!(report.partitions[0].installed.len(), shipped.len());
    assert!(report.partitions[0]
        .installed
        .iter()
        .all(|s| s.reused_files as usize == s_files(&shipped, s.base_offset)));
    assert_mirrors(&source, &w.mirror().join("orders-0"));
    assert_eq!(installed_bases(&w, "orders").len(), shipped.len());
}

fn s_files(shipped: &[Shipped], base: i64) -> usize {
    shipped
        .iter()
        .find(|s| s.manifest.base_offset == base)
        .map_or(0, |s| s.manifest.files.len())
}

/// A partition whose transactions cross segments: producer 7 commits or aborts every third batch, producer 8's
/// transaction stays open from its first batch to the end.
fn write_transactional(log_dir: &std::path::Path) -> std::path::PathBuf {
    use segment_format::batch::ControlType;
    use segment_format::control::EndTxnMarker;
    use segment_format::record::{BatchBuilder, RecordSpec};
    use segment_format::writer::{PartitionWriter, WriterConfig};
    let config = WriterConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        fsync: false,
        topic_id: Some(Uuid([3; 16])),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, "txns", 0, 0, config).unwrap();
    w.become_leader(1);
    for i in 0..30i64 {
        let producer = if i % 5 == 4 { 8 } else { 7 };
        let sequence = i32::try_from(i).unwrap();
        let batch = BatchBuilder::new(0)
            .partition_leader_epoch(1)
            .producer(producer, 0, sequence)
            .transactional(true)
            .record(RecordSpec::new(0, 1_700_000_000_000 + i).with_value(vec![b'v'; 100]));
        w.append(batch).unwrap();
        if i % 3 == 2 {
            let control_type = if i % 2 == 0 {
                ControlType::Commit
            } else {
                ControlType::Abort
            };
            let marker = EndTxnMarker {
                control_type,
                coordinator_epoch: 1,
            };
            w.append_end_txn_marker(7, 0, marker, 1_700_000_000_000 + i, 1).unwrap();
        }
    }
    w.close().unwrap().dir
}

/// Whatever point of an install the applier is killed at, the rerun leaves every installed segment with a record of
/// its transactions, and the records say what the batches say (what promotion then trusts instead of a walk).
#[tokio::test]
async fn a_crash_at_any_point_of_an_install_leaves_transaction_records_that_match_the_batches() {
    use segmirror_applier::verify::verify_recorded_transactions;
    let points = [
        FailPoint::AfterStaging,
        FailPoint::AfterRename(1),
        FailPoint::AfterRename(2),
        FailPoint::AfterRename(3),
        FailPoint::BeforeCatalog,
    ];
    for point in points {
        let w = World::new();
        let source = write_transactional(&w.path("src"));
        let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &source).await;
        assert!(shipped.len() >= 3, "{}", shipped.len());
        crash_at(&w, point, 2).await;
        assert_eq!(w.apply().await.verdict(), Verdict::Ok, "{point:?}");
        assert_mirrors(&source, &w.mirror().join("txns-0"));
        let catalog = w.catalog();
        let id = catalog.partition(&PartitionKey::new(LINK, "txns", 0)).unwrap().id;
        let recorded = catalog.installed_txn_ends(id).unwrap();
        assert_eq!(recorded.len(), shipped.len(), "{point:?}");
        let mut open = std::collections::BTreeSet::new();
        for (base, (_, ends)) in &recorded {
            ends.as_ref()
                .unwrap_or_else(|| panic!("{point:?}: segment {base} unrecorded"))
                .fold(&mut open);
        }
        assert_eq!(open, [8].into(), "{point:?}");
        let (findings, io_errors) = verify_recorded_transactions(&w.mirror(), &catalog);
        assert!(
            findings.is_empty() && io_errors.is_empty(),
            "{point:?}: {findings:#?} {io_errors:?}"
        );
    }
}
