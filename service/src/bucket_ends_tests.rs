use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_shipper::bucket::seed::{self, HeldLeases, SeedConfig};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{Store, StoreUrl};

use super::{newest_versions_since, Newest, ReadManifests};

const LINK: &str = "east";

/// A bucket holding one partition of `orders` (10 batches) shipped by a seed: the store and the log end.
async fn shipped(tmp: &std::path::Path) -> (Store, i64) {
    let log_dir = tmp.join("source");
    let config = WriterConfig {
        running: true,
        fsync: false,
        topic_id: Some(Uuid([7; 16])),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(&log_dir, "orders", 0, 0, config).unwrap();
    w.become_leader(0);
    for i in 0..10 {
        w.append(BatchBuilder::new(0).record(RecordSpec::new(0, 1_700_000_000_000 + i).with_value("v")))
            .unwrap();
    }
    let written = w.close().unwrap();
    let identity = LogDirIdentity {
        cluster_id: "test-cluster-id".into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    write_log_dir_files(
        &log_dir,
        &identity,
        std::slice::from_ref(&written),
        LogDirState::Running,
    )
    .unwrap();
    std::fs::create_dir_all(tmp.join("bucket")).unwrap();
    let store = Store::open(
        &StoreUrl::parse(tmp.join("bucket").to_str().unwrap()).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let shipper = SeedConfig::new(vec![log_dir], LINK).unwrap();
    let report = seed::seed_round(&store, &shipper, &seed::NoProgress, Some(&HeldLeases::default()))
        .await
        .unwrap();
    assert!(report.is_complete(), "{report:#?}");
    (store, written.log_end_offset)
}

#[tokio::test]
async fn a_manifest_listed_as_before_is_not_read_again_and_a_changed_one_is() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, end) = shipped(tmp.path()).await;
    let prefix = KeyPrefix::root();
    let tp = ("orders".to_string(), 0);
    let (ends, read) = newest_versions_since(&store, &prefix, LINK, &ReadManifests::new())
        .await
        .unwrap();
    assert_eq!(ends.get(&tp).map(|n| n.end_offset), Some(end));
    let (object, version) = read.get(&tp).cloned().unwrap();

    // What was read from the same listed object is taken as it is (a figure no manifest holds proves it).
    let mut known = ReadManifests::new();
    let remembered = Newest {
        end_offset: 999,
        ..version
    };
    known.insert(tp.clone(), (object.clone(), remembered));
    let (ends, _) = newest_versions_since(&store, &prefix, LINK, &known).await.unwrap();
    assert_eq!(ends.get(&tp), Some(&remembered));

    // Another entity tag: the manifest is read again.
    let mut changed = object;
    changed.e_tag = Some("\"another\"".into());
    known.insert(tp.clone(), (changed, remembered));
    let (ends, _) = newest_versions_since(&store, &prefix, LINK, &known).await.unwrap();
    assert_eq!(ends.get(&tp).map(|n| n.end_offset), Some(end));
}
