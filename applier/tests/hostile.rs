//! A bucket is untrusted input: manifests whose offsets, counts, timestamps, epochs or chain do not hold are refused
//! with the manifest's key, before anything reaches the mirror or the catalog.

mod common;

use std::time::Duration;

use common::*;
use segment_format::partition_metadata::Uuid;
use segmirror_applier::{ApplyReport, PartitionOutcome, Refusal, Verdict};
use segmirror_catalog::{EventKind, PartitionKey, Subject};
use segmirror_transport::manifest::{EpochStart, KeyPrefix};

/// No hostile input may hang a run.
const RUN_LIMIT: Duration = Duration::from_secs(120);

async fn apply(w: &World) -> ApplyReport {
    tokio::time::timeout(RUN_LIMIT, w.apply()).await.expect("apply hung")
}

fn id(n: u8) -> Uuid {
    Uuid([n; 16])
}

async fn shipped(w: &World) -> Vec<Shipped> {
    let source = write_partition(&w.path("src"), "orders", id(1), 30, 2048);
    let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &source).await;
    assert!(shipped.len() >= 3, "{}", shipped.len());
    shipped
}

fn refusal(report: &ApplyReport) -> (String, i64, Refusal) {
    match &report.partitions[0].outcome {
        PartitionOutcome::Refused(r) => (r.manifest_key.clone(), r.base_offset, r.refusal.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// What the catalog and the mirror hold for the partition: installed bases, recorded log start offset, and the
/// `.log` files in the mirror.
fn recorded(w: &World) -> (Vec<i64>, i64, Vec<String>) {
    let catalog = w.catalog();
    let p = catalog.partition(&PartitionKey::new(LINK, "orders", 0)).unwrap();
    let bases = catalog
        .installed_segments(p.id)
        .unwrap()
        .iter()
        .map(|s| s.version.base_offset)
        .collect();
    let logs = tree(&w.mirror().join("orders-0"))
        .into_keys()
        .filter(|k| k.ends_with(".log"))
        .collect();
    (bases, p.log_start_offset, logs)
}

fn rejections(w: &World) -> Vec<String> {
    w.catalog()
        .events(Some(Subject::Partition(&PartitionKey::new(LINK, "orders", 0))), 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::SegmentRejected)
        .map(|e| e.detail)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_missing_from_the_middle_of_a_chain_is_a_refused_gap_not_a_silent_hole() {
    let w = World::new();
    let mut shipped = shipped(&w).await;
    w.store.delete(&shipped[1].key).await.unwrap();
    let report = apply(&w).await;
    assert_eq!(report.verdict(), Verdict::Refused, "{report:#?}");
    let (key, base, refusal) = refusal(&report);
    let (from, to) = (shipped[0].manifest.next_offset, shipped[2].manifest.base_offset);
    assert_eq!((key.as_str(), base), (shipped[2].key.as_str(), to));
    assert_eq!(
        refusal,
        Refusal::Gap {
            from,
            to,
            after: shipped[0].key.clone(),
            log_start_offset: 0
        }
    );
    let message = refusal.to_string();
    assert!(
        message.contains(&format!("missing offsets [{from}, {to}) between {}", shipped[0].key)),
        "{message}"
    );
    // Only the segment before the hole is installed and recorded; the rejection is logged with the key.
    assert_eq!(recorded(&w), (vec![0], 0, vec!["00000000000000000000.log".to_string()]));
    assert!(rejections(&w)
        .iter()
        .any(|d| d.contains(&shipped[2].key) && d.contains("missing offsets")));

    // A rerun refuses again (nothing changed in the bucket) ...
    let report = apply(&w).await;
    assert_eq!(report.verdict(), Verdict::Refused);
    // ... until the source's log start offset proves the hole: retention deleted it before it was shipped.
    for s in &mut shipped[2..] {
        s.manifest.log_start_offset = to;
        put_manifest(&w.store, s).await;
    }
    let report = apply(&w).await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    let (bases, log_start, _) = recorded(&w);
    assert_eq!(bases.len(), shipped.len() - 1);
    assert_eq!(log_start, to);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_offsets_and_counts_are_refused_with_the_manifest_key_and_nothing_is_recorded() {
    type Mutation = fn(&mut segmirror_transport::manifest::Manifest);
    let cases: [(&str, Mutation, &str); 6] = [
        (
            "log start offset 2^63-1",
            |m| m.log_start_offset = i64::MAX,
            "log start offset 9223372036854775807",
        ),
        ("batch count", |m| m.batches += 1, "batches"),
        ("record count", |m| m.records -= 1, "records"),
        ("max timestamp", |m| m.max_timestamp += 1, "max timestamp"),
        // Counts that disagree with the offsets they claim are caught when the manifest is read.
        (
            "last offset",
            |m| m.last_offset = m.last_offset.map(|l| l - 1),
            "do not fit in offsets",
        ),
        // The newest segment is shipped unsealed; its next offset is where its last batch ends.
        (
            "next offset of an unsealed segment",
            |m| m.next_offset += 5,
            "next offset",
        ),
    ];
    for (what, mutate, named) in cases {
        let w = World::new();
        let mut shipped = shipped(&w).await;
        let target = if what.starts_with("next offset") {
            shipped.len() - 1
        } else {
            0
        };
        let old_next = shipped[target].manifest.next_offset;
        mutate(&mut shipped[target].manifest);
        let new_next = shipped[target].manifest.next_offset;
        if new_next != old_next {
            // Data keys name the range: move the objects where the lie says they are.
            for f in &mut shipped[target].manifest.files {
                let key = f
                    .key
                    .replace(&format!("/{old_next:020}/"), &format!("/{new_next:020}/"));
                let bytes = w.store.get_bytes(&f.key, u64::MAX).await.unwrap();
                w.store.put_bytes(&key, bytes).await.unwrap();
                f.key = key;
            }
        }
        put_manifest(&w.store, &shipped[target]).await;
        let report = apply(&w).await;
        assert_eq!(report.verdict(), Verdict::Refused, "{what}: {report:#?}");
        let (key, _, refusal) = refusal(&report);
        assert_eq!(key, shipped[target].key, "{what}");
        let message = refusal.to_string();
        assert!(message.contains(named), "{what}: {message}");
        if target == 0 {
            assert!(
                matches!(refusal, Refusal::InvalidManifest { .. } if message.contains(&key))
                    || matches!(refusal, Refusal::ManifestDataMismatch { .. }),
                "{what}: {refusal:?}"
            );
        }
        // Nothing of the refused version (or after it) reached the mirror or the catalog; an absurd log start
        // offset is not recorded.
        let (bases, log_start, logs) = recorded(&w);
        assert_eq!(bases.len(), target, "{what}");
        assert_eq!(logs.len(), target, "{what}");
        assert_eq!(log_start, 0, "{what}");
        assert!(rejections(&w).iter().any(|d| d.contains(&key)), "{what}");
    }

    // next < base never gets past parsing.
    let w = World::new();
    let shipped = shipped(&w).await;
    let mut json: serde_json::Value = serde_json::from_slice(&shipped[1].manifest.to_json()).unwrap();
    json["next_offset"] = (shipped[1].manifest.base_offset - 1).into();
    w.store
        .put_bytes(&shipped[1].key, serde_json::to_vec(&json).unwrap())
        .await
        .unwrap();
    let report = apply(&w).await;
    let (key, _, refusal) = refusal(&report);
    assert_eq!(key, shipped[1].key);
    assert!(matches!(refusal, Refusal::InvalidManifest { .. }), "{refusal:?}");
    assert_eq!(recorded(&w).0, [0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_epochs_that_disagree_with_the_batches_are_refused() {
    // The sample partition's batches carry epoch 1, then 2 from batch 10; the manifests say so. Claim others.
    let cases: [(&str, Vec<EpochStart>); 2] = [
        (
            "an epoch no batch carries",
            vec![EpochStart {
                epoch: 7,
                start_offset: 0,
            }],
        ),
        (
            "epoch 2 starting before its first batch",
            vec![
                EpochStart {
                    epoch: 1,
                    start_offset: 0,
                },
                EpochStart {
                    epoch: 2,
                    start_offset: 3,
                },
            ],
        ),
    ];
    for (what, epochs) in cases {
        let w = World::new();
        let mut shipped = shipped(&w).await;
        shipped[0].manifest.epochs = epochs;
        put_manifest(&w.store, &shipped[0]).await;
        let report = apply(&w).await;
        assert_eq!(report.verdict(), Verdict::Refused, "{what}: {report:#?}");
        let (key, _, refusal) = refusal(&report);
        assert_eq!(key, shipped[0].key);
        match &refusal {
            Refusal::Epochs { message } => {
                assert!(message.contains(&key), "{what}: {message}");
                assert!(message.contains("disagree with its batches"), "{what}: {message}");
            }
            other => panic!("{what}: {other:?}"),
        }
        let (bases, _, logs) = recorded(&w);
        assert!(bases.is_empty() && logs.is_empty(), "{what}");
        assert!(!w.mirror().join("orders-0/leader-epoch-checkpoint").exists(), "{what}");
    }
}

/// The link's metadata is recorded with the segments; an offset beyond the installed data is clamped; a hostile
/// version is refused naming the key and field, the segments still install and the catalog keeps the last good one.
#[tokio::test]
async fn link_metadata_is_recorded_clamped_and_a_hostile_version_refused_without_stopping_installs() {
    use segmirror_applier::report::LinkMetaOutcome;
    use segmirror_transport::bucket::link_meta::{self, GroupOffset, LinkMeta, TopicMeta};

    let w = World::new();
    let shipped = shipped(&w).await;
    let end = shipped.iter().map(|s| s.manifest.next_offset).max().unwrap();
    let meta = |version: u64, offset: i64| {
        LinkMeta::new(
            LINK,
            version,
            5,
            vec![TopicMeta {
                name: "orders".into(),
                topic_id: id(1).to_string(),
                partitions: 1,
                configs: Default::default(),
            }],
            ".*",
            vec![GroupOffset {
                group: "g".into(),
                topic: "orders".into(),
                partition: 0,
                offset,
                leader_epoch: None,
                metadata: String::new(),
                commit_timestamp: 1,
            }],
        )
    };
    link_meta::publish(&w.store, &KeyPrefix::root(), &meta(1, end + 5), "test")
        .await
        .unwrap();
    let report = apply(&w).await;
    assert_eq!(
        report.link_meta,
        Some(LinkMetaOutcome::Recorded {
            version: 1,
            topics: 1,
            offsets: 1
        })
    );
    let rows = w.catalog().link_offsets(LINK).unwrap();
    assert_eq!(
        (rows[0].source_offset, rows[0].committable, rows[0].clamped),
        (end + 5, Some(end), true)
    );
    assert_eq!(
        apply(&w).await.link_meta,
        Some(LinkMetaOutcome::Unchanged { version: 1 })
    );

    // Version 2's offsets document is hostile (a negative partition) but consistent with its manifest.
    let mut bad = meta(2, 3);
    bad.offsets.offsets[0].partition = -1;
    let offsets_key = link_meta::data_key(&KeyPrefix::root(), LINK, 2, link_meta::OFFSETS_NAME);
    let topics_key = link_meta::data_key(&KeyPrefix::root(), LINK, 2, link_meta::TOPICS_NAME);
    let offsets_json = serde_json::to_vec(&bad.offsets).unwrap();
    let topics_json = serde_json::to_vec(&bad.topics).unwrap();
    w.store.put_bytes(&offsets_key, offsets_json.clone()).await.unwrap();
    w.store.put_bytes(&topics_key, topics_json.clone()).await.unwrap();
    let digest = |b: &[u8]| segmirror_transport::digest::digest_of(b);
    let manifest = link_meta::MetaManifest {
        format: link_meta::META_MANIFEST_FORMAT.into(),
        link: LINK.into(),
        version: 2,
        shipper_id: "mallory".into(),
        created_at_ms: 0,
        topics: link_meta::MetaObject {
            key: topics_key,
            size: topics_json.len() as u64,
            sha256: digest(&topics_json).sha256,
        },
        offsets: link_meta::MetaObject {
            key: offsets_key.clone(),
            size: offsets_json.len() as u64,
            sha256: digest(&offsets_json).sha256,
        },
    };
    w.store
        .put_bytes(
            &link_meta::manifest_key(&KeyPrefix::root(), LINK),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .await
        .unwrap();
    let report = apply(&w).await;
    match &report.link_meta {
        Some(LinkMetaOutcome::Refused { reason }) => {
            assert!(
                reason.contains(&offsets_key) && reason.contains("offsets[0].partition"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(
        report.ignored_keys.is_empty(),
        "metadata keys are the contract's: {:?}",
        report.ignored_keys
    );
    assert_eq!(w.catalog().link_meta(LINK).unwrap().unwrap().version, 1);
    assert_eq!(w.catalog().link_offsets(LINK).unwrap()[0].source_offset, end + 5);
}
