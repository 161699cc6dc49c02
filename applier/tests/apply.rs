//! The applier end to end against a local-folder bucket: sample partitions of every shape are shipped by hand
//! (`common::ship_partition_dir`), applied, and the mirror compared with the source byte for byte; then everything
//! that must be refused, skipped or reconciled.

mod common;

use std::path::Path;

use common::*;
use segment_format::closed_log;
use segment_format::dir::{segment_file_name, SegmentFileKind, PARTITION_METADATA_FILE};
use segment_format::log::LogFile;
use segment_format::partition_metadata::Uuid;
use segment_format::report::Severity;
use segment_format::txn_ends::{open_producers, OpenDetails};
use segment_format::txn_index::TxnTracker;
use segment_format::verify::{verify_paths, Depth, NoProgress as NoVerifyProgress, Strictness, VerifyOptions};
use segment_format::writer::sample::{write_sample, SampleOptions};
use segmirror_applier::mirror::INSTALL_STAGING_DIR as STAGING_DIR;
use segmirror_applier::verify::verify_recorded_transactions;
use segmirror_applier::{ApplyConfig, Error, PartitionOutcome, Refusal, SkipReason, SkipSegment, Verdict};
use segmirror_catalog::{EventKind, PartitionKey, PartitionState, Subject};
use segmirror_transport::manifest::KeyPrefix;

fn id(n: u8) -> Uuid {
    Uuid([n; 16])
}

fn outcome<'a>(report: &'a segmirror_applier::ApplyReport, topic: &str) -> &'a PartitionOutcome {
    &report
        .partitions
        .iter()
        .find(|p| p.topic == topic)
        .unwrap_or_else(|| panic!("no partition {topic} in {report:#?}"))
        .outcome
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = tree(dir)
        .into_keys()
        .filter(|n| n.ends_with(".log") || n.ends_with("index") || n.ends_with(".snapshot"))
        .collect();
    names.sort();
    names
}

/// A test world with the sample set written into its `source` log dir (not shipped yet).
fn sample_world() -> (World, segment_format::writer::sample::Manifest) {
    let w = World::new();
    let source = w.path("source");
    let sample = write_sample(
        &source,
        &SampleOptions {
            fsync: false,
            ..SampleOptions::default()
        },
    )
    .unwrap();
    (w, sample)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipped_sample_set_is_mirrored_byte_for_byte_and_a_rerun_fetches_nothing() {
    let (w, sample) = sample_world();
    let mut manifests = 0;
    for p in &sample.partitions {
        manifests += ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &p.written.dir)
            .await
            .len();
    }
    w.counting.reset();

    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    assert_eq!(report.segments_installed(), manifests);
    assert!(report.ignored_keys.is_empty());
    for p in &sample.partitions {
        let name = p.written.dir.file_name().unwrap();
        let mirror = w.mirror().join(name);
        assert_mirrors(&p.written.dir, &mirror);
        // Kafka uses a .log's mtime for retention when its time index is empty: the mirror keeps the source's.
        for s in &p.written.segments {
            let file = format!("{:020}.log", s.base_offset);
            let src = std::fs::metadata(p.written.dir.join(&file))
                .unwrap()
                .modified()
                .unwrap();
            let dst = std::fs::metadata(mirror.join(&file)).unwrap().modified().unwrap();
            let ms = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
            assert_eq!(ms(src), ms(dst), "{file}");
        }
        let outcome = &report
            .partitions
            .iter()
            .find(|r| r.name() == name.to_str().unwrap())
            .unwrap()
            .outcome;
        assert_eq!(outcome, &PartitionOutcome::Complete);
    }
    assert!(!w.mirror().join(STAGING_DIR).exists());
    // The verification engine agrees the mirror is sound.
    let dirs: Vec<_> = sample
        .partitions
        .iter()
        .map(|p| w.mirror().join(p.written.dir.file_name().unwrap()))
        .collect();
    let verified = verify_paths(
        &dirs,
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Lenient,
        },
        &NoVerifyProgress,
    );
    assert!(
        verified.is_sound() && verified.io_errors.is_empty(),
        "{:#?}",
        verified.findings
    );
    // Every manifest and every data object was read exactly once.
    let data_gets = w.counting.data_gets();
    let mut unique = data_gets.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), data_gets.len(), "a data object was fetched twice");

    // The catalog knows it all.
    let catalog = w.catalog();
    for p in &sample.partitions {
        let key = PartitionKey::new(LINK, p.written.topic.clone(), p.written.partition);
        let recorded = catalog.partition(&key).unwrap();
        assert_eq!(recorded.installed_end_offset, Some(p.written.log_end_offset), "{key}");
        assert_eq!(recorded.source_topic_id, p.written.topic_id.to_string());
        assert_eq!(recorded.state, PartitionState::Mirroring);
        assert_eq!(
            catalog.installed_segments(recorded.id).unwrap().len(),
            p.written.segments.len()
        );
    }
    drop(catalog);

    // A rerun fetches no data; only the manifests of the (unsealed) active segments are read again.
    w.counting.reset();
    let again = w.apply().await;
    assert_eq!(again.verdict(), Verdict::Ok);
    assert_eq!(again.segments_installed(), 0);
    assert_eq!(again.bytes_fetched(), 0);
    assert!(w.counting.data_gets().is_empty(), "{:?}", w.counting.data_gets());
    assert_eq!(
        w.counting.gets().len(),
        sample.partitions.len(),
        "{:?}",
        w.counting.gets()
    );
    for p in &again.partitions {
        assert!(p.skipped.iter().all(|s| s.why == SkipSegment::AlreadyInstalled));
        assert!(p.removed.is_empty());
    }
    for p in &sample.partitions {
        assert_mirrors(&p.written.dir, &w.mirror().join(p.written.dir.file_name().unwrap()));
    }
}

/// A partition of three segments, shipped; returns (source dir, shipped manifests).
async fn shipped_partition(w: &World, topic: &str, topic_id: Uuid) -> (std::path::PathBuf, Vec<Shipped>) {
    let source = write_partition(&w.path(&format!("src-{topic}")), topic, topic_id, 30, 2048);
    let shipped = ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &source).await;
    assert!(shipped.len() >= 3, "{}", shipped.len());
    (source, shipped)
}

#[tokio::test]
async fn a_crc_level_corruption_with_a_matching_sha_is_refused_and_nothing_installed() {
    let w = World::new();
    let (_, mut shipped) = shipped_partition(&w, "orders", id(1)).await;
    // Flip one byte inside the first batch's records and rewrite the manifest so that size and hashes match the
    // corrupt object: only the batch CRC can tell.
    let first = &mut shipped[0].manifest;
    let log = first
        .files
        .iter_mut()
        .find(|f| f.name.to_string().ends_with(".log"))
        .unwrap();
    let mut bytes = w.store.get_bytes(&log.key, u64::MAX).await.unwrap().to_vec();
    bytes[100] ^= 0xff;
    w.store.put_bytes(&log.key, bytes.clone()).await.unwrap();
    let digest = segmirror_transport::digest::digest_of(&bytes);
    log.sha256 = digest.sha256;
    log.crc32c = digest.crc32c;
    put_manifest(&w.store, &shipped[0]).await;

    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Refused);
    match outcome(&report, "orders") {
        PartitionOutcome::Refused(r) => {
            assert_eq!(r.base_offset, 0);
            assert_eq!(r.manifest_key, shipped[0].key);
            match &r.refusal {
                Refusal::Corrupt { findings, .. } => {
                    let text = findings.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n");
                    assert!(text.to_lowercase().contains("crc"), "{text}");
                    // Findings name the object in the bucket, not a staging path.
                    assert!(
                        findings.iter().any(|f| f.path == Path::new(&log_key(&shipped[0]))),
                        "{findings:?}"
                    );
                }
                other => panic!("expected a corrupt refusal, got {other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    let dir = w.mirror().join("orders-0");
    assert!(segment_files(&dir).is_empty(), "{:?}", segment_files(&dir));
    let staging = w.mirror().join(STAGING_DIR).join("orders-0");
    assert!(
        tree(&staging).is_empty(),
        "staged files of a refused version are removed"
    );
    let catalog = w.catalog();
    let p = catalog.partition(&PartitionKey::new(LINK, "orders", 0)).unwrap();
    assert_eq!(p.installed_end_offset, None);
    let events = catalog.events(Some(Subject::Partition(&p.key)), 10).unwrap();
    assert!(
        events.iter().any(|e| e.kind == EventKind::SegmentRejected),
        "{events:?}"
    );
}

fn log_key(s: &Shipped) -> String {
    s.manifest
        .files
        .iter()
        .find(|f| f.name.to_string().ends_with(".log"))
        .unwrap()
        .key
        .clone()
}

#[tokio::test]
async fn objects_that_differ_from_their_manifest_are_refused() {
    // A sha256 mismatch in the second segment: the first is installed, the partition stops at the second.
    let w = World::new();
    let (_, shipped) = shipped_partition(&w, "orders", id(1)).await;
    let key = log_key(&shipped[1]);
    let mut bytes = w.store.get_bytes(&key, u64::MAX).await.unwrap().to_vec();
    bytes[50] ^= 1;
    w.store.put_bytes(&key, bytes).await.unwrap();
    let report = w.apply().await;
    match outcome(&report, "orders") {
        PartitionOutcome::Refused(r) => {
            assert_eq!(r.base_offset, shipped[1].manifest.base_offset);
            assert!(
                matches!(&r.refusal, Refusal::Mismatch { what, key: k, .. } if what == "sha256" && *k == key),
                "{:?}",
                r.refusal
            );
        }
        other => panic!("{other:?}"),
    }
    let installed: Vec<i64> = report.partitions[0].installed.iter().map(|s| s.base_offset).collect();
    assert_eq!(installed, [0]);
    assert_eq!(
        segment_files(&w.mirror().join("orders-0")),
        [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex"
        ]
    );

    // A manifest that lies about a size: refused before a byte is read.
    let w = World::new();
    let (_, mut shipped) = shipped_partition(&w, "orders", id(1)).await;
    let index = shipped[0]
        .manifest
        .files
        .iter_mut()
        .find(|f| f.name.to_string().ends_with(".index"))
        .unwrap();
    index.size += 8;
    put_manifest(&w.store, &shipped[0]).await;
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Refused);
    match outcome(&report, "orders") {
        PartitionOutcome::Refused(r) => {
            assert!(
                matches!(&r.refusal, Refusal::Mismatch { what, .. } if what == "size"),
                "{:?}",
                r.refusal
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(segment_files(&w.mirror().join("orders-0")).is_empty());
}

#[tokio::test]
async fn hostile_manifests_are_rejected_and_nothing_is_written_outside_the_mirror() {
    type Mutation = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "key escaping the data folder",
            Box::new(|m| m["files"][0]["key"] = "east/orders/0/../../../../outside.log".into()),
        ),
        (
            "file name that is not a Kafka name",
            Box::new(|m| m["files"][0]["name"] = "../../outside.sh".into()),
        ),
        (
            "topic that is not a Kafka topic",
            Box::new(|m| m["topic"] = "../etc".into()),
        ),
        ("another partition's manifest", Box::new(|m| m["partition"] = 7.into())),
        ("offsets that do not add up", Box::new(|m| m["next_offset"] = 1.into())),
        (
            "sha256 that is not hex",
            Box::new(|m| m["files"][0]["sha256"] = "zz".into()),
        ),
        (
            "a format from the future",
            Box::new(|m| m["format"] = "segmirror.manifest.v2".into()),
        ),
    ];
    for (what, mutate) in cases {
        let w = World::new();
        let (_, shipped) = shipped_partition(&w, "orders", id(1)).await;
        let mut json: serde_json::Value = serde_json::from_slice(&shipped[0].manifest.to_json()).unwrap();
        mutate(&mut json);
        w.store
            .put_bytes(&shipped[0].key, serde_json::to_vec(&json).unwrap())
            .await
            .unwrap();
        let before: Vec<String> = tree(w.tmp.path())
            .into_keys()
            .filter(|k| !k.starts_with("catalog/"))
            .collect();
        let report = w.apply().await;
        assert_eq!(report.verdict(), Verdict::Refused, "{what}: {report:#?}");
        match outcome(&report, "orders") {
            PartitionOutcome::Refused(r) => {
                assert_eq!(r.base_offset, 0, "{what}");
                assert!(
                    matches!(r.refusal, Refusal::InvalidManifest { .. }),
                    "{what}: {:?}",
                    r.refusal
                );
            }
            other => panic!("{what}: {other:?}"),
        }
        let after: Vec<String> = tree(w.tmp.path())
            .into_keys()
            .filter(|k| !k.starts_with("catalog/"))
            .collect();
        let new: Vec<&String> = after.iter().filter(|k| !before.contains(k)).collect();
        assert!(new.is_empty(), "{what}: wrote {new:?}");
        assert!(!w.path("outside.log").exists() && !w.path("outside.sh").exists());
    }

    // An oversized manifest is refused before it is parsed; a key that is not a contract key is ignored.
    let w = World::new();
    let (_, shipped) = shipped_partition(&w, "orders", id(1)).await;
    let mut big = shipped[0].manifest.to_json();
    big.extend(vec![b' '; 2 << 20]);
    w.store.put_bytes(&shipped[0].key, big).await.unwrap();
    w.store.put_bytes("east/orders/0/readme.txt", &b"hi"[..]).await.unwrap();
    let report = w.apply().await;
    match outcome(&report, "orders") {
        PartitionOutcome::Refused(r) => assert!(matches!(r.refusal, Refusal::InvalidManifest { .. })),
        other => panic!("{other:?}"),
    }
    assert_eq!(report.ignored_keys.len(), 1, "{:?}", report.ignored_keys);
    assert_eq!(report.ignored_keys[0].key, "east/orders/0/readme.txt");
}

#[tokio::test]
async fn a_grown_active_segment_replaces_the_installed_version() {
    let w = World::new();
    let tid = id(9);
    // Version 1: the active segment holds 4 batches. Version 2: 8 batches, still active. Version 3: the source
    // rolled; the segment is sealed and a new one follows.
    let v1 = write_partition(&w.path("v1"), "grow", tid, 4, 1 << 20);
    let v2 = write_partition(&w.path("v2"), "grow", tid, 8, 1 << 20);
    ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &v1).await;
    let report = w.apply().await;
    assert_eq!(report.partitions[0].installed.len(), 1);
    assert!(!report.partitions[0].installed[0].sealed);
    assert_mirrors(&v1, &w.mirror().join("grow-0"));

    ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &v2).await;
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    let installed = &report.partitions[0].installed;
    assert_eq!(installed.len(), 1);
    assert_eq!(installed[0].replaced, Some(12));
    assert_eq!(installed[0].next_offset, 24);
    assert_mirrors(&v2, &w.mirror().join("grow-0"));

    // Version 3: the same bytes, now sealed (the source rolled past the segment).
    ship_partition_dir_sealing(&w.store, &KeyPrefix::root(), LINK, &v2, true).await;
    let report = w.apply().await;
    let installed = &report.partitions[0].installed;
    assert_eq!(installed.len(), 1, "{report:#?}");
    assert!(installed[0].sealed);
    assert_eq!(
        installed[0].reused_files as usize, 3,
        "unchanged files are not fetched again"
    );
    let catalog = w.catalog();
    let p = catalog.partition(&PartitionKey::new(LINK, "grow", 0)).unwrap();
    let segments = catalog.installed_segments(p.id).unwrap();
    assert_eq!(segments.len(), 1);
    assert!(segments[0].version.sealed);
    assert_eq!(p.installed_end_offset, Some(24));
}

/// Each install records, with the version, how its batches leave every transactional producer; folded from the
/// first segment they give exactly the producers the broker's rule (`TxnTracker` over every batch of the source)
/// holds open at the end, which promotion relies on to skip reading the segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_install_records_how_its_batches_leave_the_transactions() {
    let (w, sample) = sample_world();
    for p in &sample.partitions {
        ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &p.written.dir).await;
    }
    assert_eq!(w.apply().await.verdict(), Verdict::Ok);
    let catalog = w.catalog();
    let mut transactional = 0;
    for p in &sample.partitions {
        let written = &p.written;
        let mut tracker = TxnTracker::new();
        for s in &written.segments {
            let path = written.dir.join(segment_file_name(s.base_offset, SegmentFileKind::Log));
            let mut log = LogFile::open(&path).unwrap();
            let len = log.len();
            log.scan_range(0, len, |frame| {
                tracker.on_batch(&frame.info);
                std::ops::ControlFlow::Continue(())
            })
            .unwrap();
        }
        let id = catalog
            .partition(&PartitionKey::new(LINK, &written.topic, written.partition))
            .unwrap()
            .id;
        let recorded = catalog.installed_txn_ends(id).unwrap();
        assert_eq!(
            recorded.len(),
            written.segments.iter().filter(|s| s.last_offset.is_some()).count()
        );
        let mut open = std::collections::BTreeSet::new();
        let mut details = std::collections::BTreeMap::new();
        for (base, (_, ends)) in &recorded {
            let ends = ends
                .as_ref()
                .unwrap_or_else(|| panic!("{} segment {base}: nothing recorded", written.topic));
            ends.fold(&mut open);
            ends.fold_runs(&mut details);
            transactional += usize::from(!ends.open.is_empty() || !ends.closed.is_empty());
        }
        assert_eq!(open, open_producers(&tracker), "{}", written.topic);
        // Each open transaction's first offset and tally, as promotion aborts it without reading the batches.
        let tracked: std::collections::BTreeMap<i64, OpenDetails> = tracker
            .open_tallied()
            .map(|o| (o.producer_id, o.tally.map(|t| (o.first_offset, t))))
            .collect();
        assert_eq!(details, tracked, "{}", written.topic);
    }
    assert!(transactional > 0, "the sample's transactions were recorded");

    // `verify --deep --catalog` holds every record to the batches: sound as installed, an error once one lies.
    let (findings, io_errors) = verify_recorded_transactions(&w.mirror(), &catalog);
    assert!(
        findings.is_empty() && io_errors.is_empty(),
        "{findings:#?} {io_errors:?}"
    );
    // Each install wrote its segment's log of every marker beside the mirror, as recorded: entry for entry what
    // the batches give.
    let mut logs = Vec::new();
    for p in &sample.partitions {
        let written = &p.written;
        let id = catalog
            .partition(&PartitionKey::new(LINK, &written.topic, written.partition))
            .unwrap()
            .id;
        for (base, (next, ends)) in catalog.installed_txn_ends(id).unwrap() {
            let Some(record) = ends.and_then(|e| e.log) else {
                continue;
            };
            let name = format!("{}-{}", written.topic, written.partition);
            let path = segmirror_applier::mirror::segment_log_file(&w.mirror(), &name, base);
            let bytes = closed_log::read_recorded(&path, record)
                .unwrap()
                .expect("the recorded log");
            let segment = w
                .mirror()
                .join(&name)
                .join(segment_file_name(base, SegmentFileKind::Log));
            let (_, every) = segment_format::txn_ends::logged_of_log(&segment, next).unwrap();
            assert_eq!(closed_log::parse_segment(&bytes).unwrap(), every, "{}", path.display());
            logs.push((path, base, record));
        }
    }
    let (path, base, record) = logs.first().cloned().expect("segments with markers have a log");
    // An entry that lies, recorded as written: an error. A byte changed behind the record: a warning (not used).
    let kept = std::fs::read(&path).unwrap();
    let mut lying = closed_log::parse_segment(&kept).unwrap();
    if let Some((_, tally)) = &mut lying[0].data {
        tally.records += 1;
    } else {
        lying[0].whole = !lying[0].whole;
    }
    let lie = closed_log::serialize_segment(&lying);
    std::fs::write(&path, &lie).unwrap();
    let relogged = segment_format::file_record::FileRecord::of(&lie, lying.len());
    let record_text = |r: segment_format::file_record::FileRecord| format!(";l:{}/{}", r.entries, r.crc32c);
    let rerecord = |from: &str, to: &str| {
        rusqlite::Connection::open(w.catalog_path())
            .unwrap()
            .execute(
                "UPDATE segments SET txn_ends = replace(txn_ends, ?1, ?2) WHERE base_offset = ?3",
                rusqlite::params![from, to, base],
            )
            .unwrap()
    };
    // `verify` finds exactly one finding, of `severity`, saying `text`.
    let found_only = |severity: Severity, text: &str| {
        let (findings, _) = verify_recorded_transactions(&w.mirror(), &w.catalog());
        assert!(
            findings.len() == 1 && findings[0].severity == severity && findings[0].to_string().contains(text),
            "{findings:#?}"
        );
    };
    assert!(rerecord(&record_text(record), &record_text(relogged)) >= 1);
    found_only(Severity::Error, "which a consistent cut trusts");
    std::fs::write(&path, &kept).unwrap();
    found_only(Severity::Warning, "is not the one recorded");
    rerecord(&record_text(relogged), &record_text(record));
    drop(catalog);
    let lied = rusqlite::Connection::open(w.catalog_path())
        .unwrap()
        .execute(
            "UPDATE segments SET txn_ends = 'o:;c:' WHERE txn_ends NOT IN ('o:;c:', 'o:;c:;m:') AND base_offset = \
             (SELECT MIN(base_offset) FROM segments WHERE txn_ends NOT IN ('o:;c:', 'o:;c:;m:'))",
            [],
        )
        .unwrap();
    assert!(lied >= 1);
    let (findings, _) = verify_recorded_transactions(&w.mirror(), &w.catalog());
    assert_eq!(findings.len(), lied, "{findings:#?}");
    assert!(findings
        .iter()
        .all(|f| f.severity == Severity::Error && f.to_string().contains("which promotion trusts, says o:;c:")));
}

#[tokio::test]
async fn an_unsealed_segment_followed_by_more_waits_for_its_sealed_version() {
    let w = World::new();
    let (_, mut shipped) = shipped_partition(&w, "orders", id(1)).await;
    shipped[1].manifest.sealed = false;
    put_manifest(&w.store, &shipped[1]).await;
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok);
    match outcome(&report, "orders") {
        PartitionOutcome::Waiting { base_offset, .. } => assert_eq!(*base_offset, shipped[1].manifest.base_offset),
        other => panic!("{other:?}"),
    }
    assert_eq!(report.partitions[0].installed.len(), 2);
    shipped[1].manifest.sealed = true;
    put_manifest(&w.store, &shipped[1]).await;
    let report = w.apply().await;
    assert_eq!(outcome(&report, "orders"), &PartitionOutcome::Complete);
    // Sealing the same bytes re-installs nothing but the catalog's record (all files reused).
    assert_eq!(
        report.partitions[0].installed[0].reused_files as usize,
        shipped[1].manifest.files.len()
    );
    assert_eq!(report.partitions[0].installed.len(), shipped.len() - 1);
}

#[tokio::test]
async fn a_lineage_break_is_reported_logged_and_never_merged() {
    let w = World::new();
    let (source_a, _) = shipped_partition(&w, "orders", id(1)).await;
    assert_eq!(w.apply().await.verdict(), Verdict::Ok);
    // The topic is recreated (new id) and shipped again; its manifests are newer.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let source_b = write_partition(&w.path("src-b"), "orders", id(2), 5, 2048);
    ship_partition_dir(&w.store, &KeyPrefix::root(), LINK, &source_b).await;
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok);
    match outcome(&report, "orders") {
        PartitionOutcome::Skipped {
            reason: SkipReason::LineageBreak { recorded, offered },
        } => assert_eq!(
            (recorded.as_str(), offered.as_str()),
            (&*id(1).to_string(), &*id(2).to_string())
        ),
        other => panic!("{other:?}"),
    }
    assert_mirrors(&source_a, &w.mirror().join("orders-0"));
    let catalog = w.catalog();
    let key = PartitionKey::new(LINK, "orders", 0);
    let p = catalog.partition(&key).unwrap();
    assert_eq!(p.state, PartitionState::Paused);
    assert_eq!(p.source_topic_id, id(1).to_string());
    let events = catalog.events(Some(Subject::Partition(&key)), 5).unwrap();
    assert!(events.iter().any(|e| e.kind == EventKind::LineageBreak), "{events:?}");
    drop(catalog);
    // Paused now: skipped as such.
    let report = w.apply().await;
    assert!(matches!(
        outcome(&report, "orders"),
        PartitionOutcome::Skipped {
            reason: SkipReason::Paused
        }
    ));
}

#[tokio::test]
async fn a_promoted_partition_is_never_written_again_and_paused_links_are_skipped() {
    let w = World::new();
    let (_, shipped) = shipped_partition(&w, "orders", id(1)).await;
    let last = shipped.last().unwrap().manifest.base_offset;
    // Install all but the last segment, then promote.
    let last_key = shipped.last().unwrap().key.clone();
    let held = w.store.get_bytes(&last_key, u64::MAX).await.unwrap();
    w.store.delete(&last_key).await.unwrap();
    w.apply().await;
    let before = tree(&w.mirror());
    {
        let mut catalog = w.catalog();
        let p = catalog.partition(&PartitionKey::new(LINK, "orders", 0)).unwrap();
        catalog.set_partition_state(p.id, PartitionState::Promoted).unwrap();
    }
    w.store.put_bytes(&last_key, held).await.unwrap();
    w.counting.reset();
    let report = w.apply().await;
    assert!(matches!(
        outcome(&report, "orders"),
        PartitionOutcome::Skipped {
            reason: SkipReason::Promoted
        }
    ));
    assert_eq!(tree(&w.mirror()), before);
    assert!(w.counting.gets().is_empty(), "nothing of a promoted partition is read");
    assert!(!w.mirror().join(format!("orders-0/{last:020}.log")).exists());

    {
        let mut catalog = w.catalog();
        catalog
            .set_link_state(LINK, segmirror_catalog::LinkState::Paused)
            .unwrap();
    }
    let report = w.apply().await;
    assert_eq!(report.link_skipped, Some(SkipReason::LinkPaused));
    assert!(report.partitions.is_empty());
}

#[tokio::test]
async fn files_changed_behind_the_catalog_stop_the_partition_without_guessing() {
    let w = World::new();
    let (_, _) = shipped_partition(&w, "orders", id(1)).await;
    w.apply().await;
    std::fs::remove_file(w.mirror().join("orders-0/00000000000000000000.index")).unwrap();
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Failed);
    match outcome(&report, "orders") {
        PartitionOutcome::Failed { error } => assert!(error.contains("00000000000000000000.index"), "{error}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn leftovers_the_catalog_does_not_list_are_removed() {
    let w = World::new();
    let (source, _) = shipped_partition(&w, "orders", id(1)).await;
    w.apply().await;
    let dir = w.mirror().join("orders-0");
    std::fs::write(dir.join("00000000000000999999.log"), b"junk").unwrap();
    std::fs::write(dir.join("00000000000000999999.index"), b"").unwrap();
    std::fs::write(dir.join("leader-epoch-checkpoint.tmp"), b"0\n").unwrap();
    std::fs::create_dir_all(w.mirror().join(STAGING_DIR).join("orders-0/5-9")).unwrap();
    let report = w.apply().await;
    assert_eq!(report.verdict(), Verdict::Ok);
    assert!(report.staging_cleared);
    assert_eq!(
        report.partitions[0].removed.len(),
        3,
        "{:?}",
        report.partitions[0].removed
    );
    assert_mirrors(&source, &dir);
    assert!(!w.mirror().join(STAGING_DIR).exists());
}

#[tokio::test]
async fn the_mirror_root_is_never_a_broker_log_dir_and_links_must_be_chosen() {
    let w = World::new();
    shipped_partition(&w, "orders", id(1)).await;
    std::fs::create_dir_all(w.mirror()).unwrap();
    std::fs::write(w.mirror().join("meta.properties"), b"version=1\n").unwrap();
    let err = segmirror_applier::apply(&w.config(), w.catalog(), &segmirror_applier::NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MirrorIsLogDir { .. }), "{err}");
    std::fs::remove_file(w.mirror().join("meta.properties")).unwrap();

    // Without --link, a store with one link applies it; with two, the caller must choose.
    let config = ApplyConfig::new(w.store.clone(), "bucket", w.mirror());
    let report = w.apply_with(config.clone()).await;
    assert_eq!(report.link.as_deref(), Some(LINK));
    let other = write_partition(&w.path("west"), "orders", id(3), 3, 2048);
    ship_partition_dir(&w.store, &KeyPrefix::root(), "west", &other).await;
    let err = segmirror_applier::apply(&config, w.catalog(), &segmirror_applier::NoProgress)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::AmbiguousLink { links, .. } if links == &["east", "west"]),
        "{err}"
    );
    let err = segmirror_applier::apply(&config.with_link("../x"), w.catalog(), &segmirror_applier::NoProgress)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadLinkName { .. }), "{err}");
}

#[tokio::test]
async fn a_prefix_and_a_plain_store_work_and_partition_metadata_tags_the_lineage() {
    let w = World::new();
    let prefix = KeyPrefix::new("team/mirror").unwrap();
    let source = write_partition(&w.path("src"), "payments", id(4), 12, 2048);
    ship_partition_dir(&w.plain_store(), &prefix, LINK, &source).await;
    let config = ApplyConfig::new(w.plain_store(), "bucket", w.mirror())
        .with_prefix(prefix)
        .with_link(LINK)
        .with_deep_validation(true);
    let report = w.apply_with(config).await;
    assert_eq!(report.verdict(), Verdict::Ok, "{report:#?}");
    assert_mirrors(&source, &w.mirror().join("payments-0"));
    let meta = std::fs::read_to_string(w.mirror().join("payments-0").join(PARTITION_METADATA_FILE)).unwrap();
    assert_eq!(meta, format!("version: 0\ntopic_id: {}", id(4)));
}
