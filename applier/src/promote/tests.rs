//! Promotion against writer-made mirrors and a broker-shaped target log dir (no broker: the real-broker tests are
//! `tests/tests/e2e_promote.rs`). Crashes are simulated by a step hook that panics, which stops the run exactly
//! where a killed process would stop (no cleanup runs); the rerun must then finish the job.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint, OffsetCheckpoint, OffsetCheckpointEntry};
use segment_format::dir::{
    LogDir, RootCheckpoint, CLEANER_OFFSET_CHECKPOINT_FILE, LEADER_EPOCH_CHECKPOINT_FILE, LOCK_FILE,
    PARTITION_METADATA_FILE,
};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::report::Severity;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::writer::{
    write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig, WrittenPartition,
};
use segmirror_catalog::{Catalog, LinkSpec, PartitionKey, PartitionState, Preceded, SegmentVersion, Upsert};

use super::journal::{Planned, ReplicaDir, TailActive};
use super::*;

const LINK: &str = "l";
const TOPIC: &str = "orders";
const SOURCE_ID: Uuid = Uuid([1; 16]);
const TARGET_ID: Uuid = Uuid([2; 16]);
/// The epoch the target partitions last led in.
const TARGET_EPOCH: i32 = 2;
/// Offset the source's log start moved to for partition 1 (inside its third segment).
const TRIMMED_START: i64 = 23;

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) mirror: PathBuf,
    pub(super) target: PathBuf,
    pub(super) catalog: Catalog,
    pub(super) written: Vec<WrittenPartition>,
}

pub(super) fn config(topic_id: Uuid) -> WriterConfig {
    WriterConfig {
        segment_bytes: 600,
        fsync: false,
        topic_id: Some(topic_id),
        ..WriterConfig::default()
    }
}

/// A source-like partition: leader epochs 3 then 7, several segments.
fn write_mirror_partition(root: &Path, partition: i32) -> WrittenPartition {
    let mut w = PartitionWriter::create(root, TOPIC, partition, 0, config(SOURCE_ID)).unwrap();
    for (epoch, batches) in [(3, 6), (7, 6)] {
        w.become_leader(epoch);
        for _ in 0..batches {
            let base = w.next_offset();
            let mut b = BatchBuilder::new(base).partition_leader_epoch(epoch);
            for i in 0..3 {
                b = b.record(
                    RecordSpec::new(i, 1_700_000_000_000 + base + i64::from(i))
                        .with_key(format!("k{partition}-{base}-{i}"))
                        .with_value(vec![b'v'; 40]),
                );
            }
            w.append(b).unwrap();
        }
    }
    w.close().unwrap()
}

/// An empty partition as the target broker leaves it after creating the topic and leading it in `TARGET_EPOCH`.
/// An empty target partition last led in `epoch`.
fn write_target_partition_at(root: &Path, topic: &str, partition: i32, id: Uuid, epoch: i32) -> WrittenPartition {
    let mut w = PartitionWriter::create(root, topic, partition, 0, config(id)).unwrap();
    w.become_leader(epoch);
    w.close().unwrap()
}

/// Record every segment of `w` installed, with what an install records of its transactions when `ends` says so.
fn record_installed(catalog: &mut Catalog, w: &WrittenPartition, log_start: i64, ends: bool) {
    let recorded = ends.then(|| recorded_ends(w));
    let key = PartitionKey::new(LINK, TOPIC, w.partition);
    let id = match catalog
        .upsert_partition(&key, &SOURCE_ID.to_string(), log_start)
        .unwrap()
    {
        Upsert::Created(p) | Upsert::Existing(p) => p.id,
        other => panic!("{other:?}"),
    };
    let n = w.segments.len();
    for (i, s) in w.segments.iter().enumerate() {
        let Some(last) = s.last_offset else { continue };
        let next = w.segments.get(i + 1).map_or(w.log_end_offset, |n| n.base_offset);
        let version = SegmentVersion {
            base_offset: s.base_offset,
            next_offset: next,
            last_offset: last,
            size: s.size,
            sha256: [9; 32],
            manifest_key: format!("{LINK}/{TOPIC}/{}/m/{}.json", w.partition, s.base_offset),
            sealed: i + 1 < n,
        };
        let txn_ends = recorded
            .as_ref()
            .and_then(|r| r.get(&s.base_offset))
            .and_then(|(_, e)| e.as_ref());
        catalog
            .mark_installed_after(id, &SOURCE_ID.to_string(), &version, Preceded::ByInstalled, txn_ends)
            .unwrap();
    }
}

/// What an install of each segment of `w` records of its transactions (its batches, read once).
pub(super) fn recorded_ends(w: &WrittenPartition) -> super::recorded_txns::Recorded {
    w.segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let next = w.segments.get(i + 1).map_or(w.log_end_offset, |n| n.base_offset);
            let log = w.dir.join(segment_format::dir::segment_file_name(
                s.base_offset,
                segment_format::dir::SegmentFileKind::Log,
            ));
            (
                s.base_offset,
                (next, segment_format::txn_ends::of_log(&log, next).unwrap()),
            )
        })
        .collect()
}

/// The target's metadata log as a broker writes it after creating `orders` (2 partitions, `TARGET_ID`, the topic
/// configs given) and `other`.
fn write_target_metadata(target: &Path, orders_configs: &[(&str, &str)]) {
    use segment_format::metadata_log::{encode, METADATA_DIR, RESOURCE_TOPIC};
    let mut values = vec![
        encode::topic_record(TOPIC, TARGET_ID),
        encode::partition_record(0, TARGET_ID),
        encode::partition_record(1, TARGET_ID),
        encode::topic_record("other", Uuid([3; 16])),
        encode::partition_record(0, Uuid([3; 16])),
    ];
    for (k, v) in orders_configs {
        values.push(encode::config_record(RESOURCE_TOPIC, TOPIC, k, Some(v)));
    }
    let mut batch = BatchBuilder::new(0);
    for (i, v) in values.into_iter().enumerate() {
        batch = batch.record(RecordSpec::new(i as i32, 1).with_value(v));
    }
    let dir = target.join(METADATA_DIR);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("00000000000000000000.log"), batch.build()).unwrap();
}

fn fixture() -> Fixture {
    let f = fixture_with(write_mirror_partition, [0, TRIMMED_START]);
    assert!(
        f.written.iter().all(|w| w.segments.len() >= 4),
        "several segments per partition"
    );
    f
}

/// Two mirror partitions written by `write` (recorded installed with log start offsets `starts`), and a target
/// log dir as a stopped broker leaves it after creating the topic (plus another topic).
pub(super) fn fixture_with(write: impl Fn(&Path, i32) -> WrittenPartition, starts: [i64; 2]) -> Fixture {
    fixture_recording(write, starts, false)
}

/// [`fixture_with`], the catalog also holding what the installs recorded of each segment's transactions when
/// `ends`.
pub(super) fn fixture_recording(
    write: impl Fn(&Path, i32) -> WrittenPartition,
    starts: [i64; 2],
    ends: bool,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mirror = dir.path().join("mirror");
    let target = dir.path().join("target");
    let written: Vec<WrittenPartition> = (0..2).map(|p| write(&mirror, p)).collect();
    write_target(&target, 1, &[0, 1], TARGET_EPOCH);
    let mut catalog = Catalog::open_in_memory().unwrap();
    catalog
        .create_link(&LinkSpec {
            name: LINK.into(),
            store_url: "file:///bucket".into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
    record_installed(&mut catalog, &written[0], starts[0], ends);
    record_installed(&mut catalog, &written[1], starts[1], ends);
    Fixture {
        _dir: dir,
        mirror,
        target,
        catalog,
        written,
    }
}

/// A target log dir as a stopped broker (`node_id`) leaves it after creating `orders` with the given partitions
/// on it (last led in `epoch`) and another topic, with a metadata log and root checkpoints.
pub(super) fn write_target(target: &Path, node_id: i32, partitions: &[i32], epoch: i32) {
    let mut in_target: Vec<WrittenPartition> = partitions
        .iter()
        .map(|p| write_target_partition_at(target, TOPIC, *p, TARGET_ID, epoch))
        .collect();
    // Another topic the broker owns: promotion must leave it and its checkpoint entries alone.
    let mut other = PartitionWriter::create(target, "other", 0, 0, config(Uuid([3; 16]))).unwrap();
    other.become_leader(5);
    other
        .append(
            BatchBuilder::new(0)
                .partition_leader_epoch(5)
                .record(RecordSpec::new(0, 5).with_value("x")),
        )
        .unwrap();
    in_target.push(other.close().unwrap());
    let identity = LogDirIdentity {
        cluster_id: Uuid([4; 16]).to_string(),
        node_id,
        directory_id: Uuid([5; 16]),
    };
    write_log_dir_files(
        target,
        &identity,
        &in_target,
        LogDirState::CleanShutdown { broker_epoch: 9 },
    )
    .unwrap();
    // The source's timestamps are old: the fixture's target keeps data forever (tests of retention change it).
    write_target_metadata(target, &[("retention.ms", "-1")]);
    // A stale cleaner entry for a promoted partition and a live one for `other`.
    OffsetCheckpoint {
        entries: vec![
            OffsetCheckpointEntry {
                topic: TOPIC.into(),
                partition: 0,
                offset: 0,
            },
            OffsetCheckpointEntry {
                topic: "other".into(),
                partition: 0,
                offset: 1,
            },
        ],
    }
    .write(&target.join(CLEANER_OFFSET_CHECKPOINT_FILE))
    .unwrap();
}

impl Fixture {
    pub(super) fn promote_request(&self) -> PromoteRequest {
        self.request()
    }

    fn request(&self) -> PromoteRequest {
        PromoteRequest {
            mirror_root: self.mirror.clone(),
            log_dir: self.target.clone(),
            ..PromoteRequest::default()
        }
    }

    pub(super) fn promote(&mut self) -> Result<PromoteReport> {
        let request = self.request();
        promote(&request, &mut self.catalog)
    }

    fn state(&self, partition: i32) -> PartitionState {
        self.catalog
            .partition(&PartitionKey::new(LINK, TOPIC, partition))
            .unwrap()
            .state
    }
}

/// Every file under `dir`, relative path -> bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(
                    path.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The target log dir as promotion leaves it, with the root checkpoints compared by content (entry order is not
/// part of the format) and the lock file (created by promotion if missing) left out.
/// A log dir's files (bytes by path, the lock left out) and its root checkpoints (entries sorted).
pub(super) type TargetState = (BTreeMap<PathBuf, Vec<u8>>, BTreeMap<String, Vec<OffsetCheckpointEntry>>);

pub(super) fn target_state(dir: &Path) -> TargetState {
    let mut files = tree(dir);
    files.remove(Path::new(LOCK_FILE));
    let mut checkpoints = BTreeMap::new();
    for kind in RootCheckpoint::ALL {
        if let Some(bytes) = files.remove(Path::new(kind.file_name())) {
            let mut entries = OffsetCheckpoint::parse(&bytes).unwrap().entries;
            entries.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            checkpoints.insert(kind.file_name().to_string(), entries);
        }
    }
    (files, checkpoints)
}

/// `bytes` of a `.log` with every magic-2 batch's epoch set to `epoch`.
fn restamped(bytes: &[u8], epoch: i32) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for frame in scan_frames(bytes, 0) {
        let frame = frame.unwrap();
        let at = frame.info.position as usize + PARTITION_LEADER_EPOCH_OFFSET;
        out[at..at + 4].copy_from_slice(&epoch.to_be_bytes());
    }
    out
}

fn entry(topic: &str, partition: i32, offset: i64) -> OffsetCheckpointEntry {
    OffsetCheckpointEntry {
        topic: topic.into(),
        partition,
        offset,
    }
}

fn refusals(err: Error) -> Vec<Refusal> {
    match err {
        Error::Refused { refusals } => refusals,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn promotes_restamped_copies_with_target_ids_and_checkpoints() {
    let mut f = fixture();
    let mirror_before = tree(&f.mirror);
    let report = f.promote().unwrap();
    assert_eq!(report.link, LINK);
    assert_eq!(report.changed(), 2);
    assert!(report.notes.is_empty(), "{:?}", report.notes);
    assert_eq!(tree(&f.mirror), mirror_before, "the mirror is never changed");
    assert!(!f.target.join(PROMOTION_DIR).exists());

    for (w, log_start) in f.written.iter().zip([0, TRIMMED_START]) {
        let p = report.partitions.iter().find(|p| p.partition == w.partition).unwrap();
        assert_eq!(p.outcome, Outcome::Promoted);
        assert_eq!(p.target_topic_id.as_deref(), Some(TARGET_ID.to_string().as_str()));
        assert_eq!(p.leader_epoch, Some(TARGET_EPOCH));
        assert_eq!(
            (p.log_start_offset, p.log_end_offset),
            (log_start, Some(w.log_end_offset))
        );

        let src = f.mirror.join(format!("{TOPIC}-{}", w.partition));
        let dst = f.target.join(format!("{TOPIC}-{}", w.partition));
        let copied = tree(&dst);
        // Segments wholly below the log start offset are not copied; everything else is.
        let kept: Vec<i64> = w
            .segments
            .iter()
            .enumerate()
            .filter(|(i, _)| w.segments.get(i + 1).is_none_or(|n| n.base_offset > log_start))
            .map(|(_, s)| s.base_offset)
            .collect();
        assert_eq!(p.segments, kept.len());
        let kept_batches: u64 = w
            .segments
            .iter()
            .filter(|s| kept.contains(&s.base_offset))
            .map(|s| s.batches)
            .sum();
        assert_eq!(p.batches_restamped, kept_batches, "every batch carried epoch 3 or 7");
        if log_start > 0 {
            assert!(
                kept.len() < w.segments.len(),
                "the trimmed partition drops its first segments"
            );
        }
        let last_kept = *kept.last().unwrap();
        for (name, bytes) in tree(&src) {
            let file = name.to_str().unwrap();
            let base: Option<i64> = file.split('.').next().and_then(|b| b.parse().ok());
            match base {
                // No producer state of the source's reaches the target (see `producer_state`).
                Some(_) if file.ends_with(".snapshot") => {
                    assert!(!copied.contains_key(&name) || base == Some(w.log_end_offset), "{file}");
                }
                Some(b) if !kept.contains(&b) => assert!(!copied.contains_key(&name), "{file} not copied"),
                // The last mirror segment stops being the active one: its indexes are those of a rolled segment
                // (checked by the verify run below).
                Some(b) if b == last_kept && (file.ends_with(".index") || file.ends_with(".timeindex")) => {}
                Some(_) if file.ends_with(".log") => {
                    assert_eq!(
                        copied[&name],
                        restamped(&bytes, TARGET_EPOCH),
                        "{file}: only epochs differ"
                    )
                }
                Some(_) => assert_eq!(copied[&name], bytes, "{file} copied byte for byte"),
                None => {}
            }
        }
        assert_eq!(
            PartitionMetadata::read(&dst.join(PARTITION_METADATA_FILE))
                .unwrap()
                .topic_id,
            TARGET_ID
        );
        assert_eq!(
            LeaderEpochCheckpoint::read(&dst.join(LEADER_EPOCH_CHECKPOINT_FILE))
                .unwrap()
                .entries,
            vec![EpochEntry {
                epoch: TARGET_EPOCH,
                start_offset: log_start
            }]
        );
        // The catalog: promoted, with the target topic id; the applier's writes are refused from now on.
        let row = f
            .catalog
            .partition(&PartitionKey::new(LINK, TOPIC, w.partition))
            .unwrap();
        assert_eq!(row.state, PartitionState::Promoted);
        assert_eq!(row.mirror_topic_id.as_deref(), Some(TARGET_ID.to_string().as_str()));
        // Producer state starts empty at the log end, in a new, empty active segment there.
        let end = w.log_end_offset;
        let snapshots: Vec<&PathBuf> = copied
            .keys()
            .filter(|n| n.extension().is_some_and(|e| e == "snapshot"))
            .collect();
        assert_eq!(snapshots, vec![&PathBuf::from(format!("{end:020}.snapshot"))]);
        assert_eq!(
            segment_format::snapshot::ProducerSnapshot::read(&dst.join(snapshots[0])).unwrap(),
            segment_format::snapshot::ProducerSnapshot::default()
        );
        for ext in ["log", "index", "timeindex"] {
            assert_eq!(
                copied[&PathBuf::from(format!("{end:020}.{ext}"))],
                Vec::<u8>::new(),
                "{ext}"
            );
        }
        assert!(p.transactions_aborted.is_empty());
    }

    let (_, checkpoints) = target_state(&f.target);
    let leo = |p: usize| f.written[p].log_end_offset;
    assert_eq!(
        checkpoints["recovery-point-offset-checkpoint"],
        vec![
            entry("orders", 0, leo(0)),
            entry("orders", 1, leo(1)),
            entry("other", 0, 1)
        ]
    );
    assert_eq!(
        checkpoints["replication-offset-checkpoint"],
        vec![
            entry("orders", 0, leo(0)),
            entry("orders", 1, leo(1)),
            entry("other", 0, 1)
        ]
    );
    // Only the trimmed partition's log start lies above its first copied segment's base offset.
    assert_eq!(
        checkpoints["log-start-offset-checkpoint"],
        vec![entry("orders", 1, TRIMMED_START)]
    );
    assert_eq!(checkpoints["cleaner-offset-checkpoint"], vec![entry("other", 0, 1)]);

    // What a broker would load: sound, deep and strict, with epochs consistent with the checkpoint.
    let report = verify_paths(
        &[f.target.clone()],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}

#[test]
fn promoting_again_is_a_no_op() {
    let mut f = fixture();
    f.promote().unwrap();
    let before = target_state(&f.target);
    let report = f.promote().unwrap();
    assert_eq!(report.changed(), 0);
    assert!(report.partitions.iter().all(|p| p.outcome == Outcome::AlreadyPromoted));
    assert_eq!(
        report.partitions[0].target_topic_id.as_deref(),
        Some(TARGET_ID.to_string().as_str())
    );
    assert_eq!(target_state(&f.target), before);
}

#[test]
fn every_refusal_is_reported_and_nothing_changes() {
    let mut f = fixture();
    // Partition 0's target holds data; partition 1's mirror holds a leftover of an interrupted apply.
    let data = f.target.join("orders-0/00000000000000000000.log");
    std::fs::write(&data, b"not empty").unwrap();
    let leftover = f.mirror.join("orders-1/00000000000000000000.index.tmp");
    std::fs::write(&leftover, b"").unwrap();
    let before = target_state(&f.target);
    let got = refusals(f.promote().unwrap_err());
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(&Refusal::TargetNotEmpty {
        partition: TopicPartition::new(TOPIC, 0),
        log: data.clone(),
        size: 9
    }));
    assert!(got.contains(&Refusal::MirrorUnexpectedFile {
        partition: TopicPartition::new(TOPIC, 1),
        path: leftover.clone()
    }));
    let message = Error::Refused { refusals: got }.to_string();
    assert!(
        message.contains("2 reasons") && message.contains("--force"),
        "{message}"
    );
    assert_eq!(target_state(&f.target), before, "a refused promotion changes nothing");
    assert_eq!(f.state(0), PartitionState::Mirroring);
    assert_eq!(f.state(1), PartitionState::Mirroring);

    // With the leftover gone, --force replaces the target's data.
    std::fs::remove_file(&leftover).unwrap();
    let mut request = f.request();
    request.force = true;
    let report = promote(&request, &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    assert_eq!(
        std::fs::read(&data).unwrap(),
        restamped(
            &std::fs::read(f.mirror.join("orders-0/00000000000000000000.log")).unwrap(),
            TARGET_EPOCH
        )
    );
}

#[test]
fn target_topic_must_exist_with_the_same_partition_count() {
    let mut f = fixture();
    std::fs::remove_dir_all(f.target.join("orders-1")).unwrap();
    let got = refusals(f.promote().unwrap_err());
    assert!(got.contains(&Refusal::PartitionCountMismatch {
        topic: TOPIC.into(),
        mirror_partitions: 2,
        target_partitions: 1
    }));
    assert!(got.contains(&Refusal::TargetPartitionMissing {
        partition: TopicPartition::new(TOPIC, 1),
        path: f.target.join("orders-1")
    }));
    // A partition.metadata is what names the target topic id.
    let mut f = fixture();
    let metadata = f.target.join("orders-0").join(PARTITION_METADATA_FILE);
    std::fs::remove_file(&metadata).unwrap();
    assert_eq!(
        refusals(f.promote().unwrap_err()),
        vec![Refusal::TargetTopicIdMissing {
            partition: TopicPartition::new(TOPIC, 0),
            path: metadata
        }]
    );
    // Both partitions must carry the same id.
    let mut f = fixture();
    PartitionMetadata::new(Uuid([8; 16]))
        .write(&f.target.join("orders-1").join(PARTITION_METADATA_FILE))
        .unwrap();
    assert!(matches!(
        refusals(f.promote().unwrap_err()).as_slice(),
        [Refusal::TargetTopicIdsDiffer { topic, ids }] if topic == TOPIC && ids.len() == 2
    ));
}

#[test]
fn mirror_must_match_the_catalog() {
    let mut f = fixture();
    // The newest segment grew on disk behind the catalog's back.
    let last = f.written[0].segments.last().unwrap().base_offset;
    let log = f.mirror.join(format!("orders-0/{last:020}.log"));
    let extra = BatchBuilder::new(f.written[0].log_end_offset)
        .partition_leader_epoch(7)
        .record(RecordSpec::new(0, 1).with_value("late"))
        .build();
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&extra);
    std::fs::write(&log, &bytes).unwrap();
    assert_eq!(
        refusals(f.promote().unwrap_err()),
        vec![Refusal::MirrorCatalogMismatch {
            partition: TopicPartition::new(TOPIC, 0),
            log,
            mirror_end_offset: f.written[0].log_end_offset + 1,
            catalog_end_offset: Some(f.written[0].log_end_offset),
        }]
    );
    // A partition the catalog records but the mirror lacks.
    let mut f = fixture();
    std::fs::remove_dir_all(f.mirror.join("orders-1")).unwrap();
    assert_eq!(
        refusals(f.promote().unwrap_err()),
        vec![Refusal::MirrorPartitionMissing {
            partition: TopicPartition::new(TOPIC, 1),
            path: f.mirror.join("orders-1")
        }]
    );
}

#[test]
fn partitions_built_in_parallel_or_one_at_a_time_give_the_same_log_dir() {
    let mut states = Vec::new();
    for parallel in [1, 2, 8] {
        let mut f = fixture();
        let request = PromoteRequest {
            parallel,
            ..f.request()
        };
        let mut built = Vec::new();
        let report = promote_with(&request, &mut f.catalog, &mut |s| {
            if let Step::Built(tp) = s {
                built.push(tp);
            }
        })
        .unwrap();
        assert_eq!(report.changed(), 2, "parallel {parallel}");
        built.sort();
        assert_eq!(
            built,
            vec![TopicPartition::new(TOPIC, 0), TopicPartition::new(TOPIC, 1)],
            "parallel {parallel}: the hook sees every partition built once"
        );
        // The log dir's path differs between fixtures.
        let partitions: Vec<PromotedPartition> = report
            .partitions
            .into_iter()
            .map(|p| PromotedPartition {
                log_dirs: Vec::new(),
                ..p
            })
            .collect();
        states.push((partitions, target_state(&f.target)));
    }
    assert_eq!(states[0], states[1]);
    assert_eq!(states[0], states[2]);
}

/// The target log dir's files outside promotion's staging directory (what a broker would load).
fn live_files(target: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = tree(target);
    files.retain(|path, _| !path.starts_with(PROMOTION_DIR) && path != Path::new(LOCK_FILE));
    files
}

#[test]
fn a_partition_refused_while_others_build_in_parallel_leaves_them_built_and_the_live_log_dir_untouched() {
    let reference = {
        let mut f = fixture();
        f.promote().unwrap();
        target_state(&f.target)
    };
    let mut f = fixture();
    let live_before = live_files(&f.target);
    // Partition 1's newest segment grows after planning (as if an applier ignored the pause).
    let last = f.written[1].segments.last().unwrap().base_offset;
    let log = f.mirror.join(format!("orders-1/{last:020}.log"));
    let original = std::fs::read(&log).unwrap();
    let extra = BatchBuilder::new(f.written[1].log_end_offset)
        .partition_leader_epoch(7)
        .record(RecordSpec::new(0, 1).with_value("late"))
        .build();
    let request = PromoteRequest {
        parallel: 2,
        ..f.request()
    };
    let err = promote_with(&request, &mut f.catalog, &mut |s| {
        if s == Step::Journaled {
            std::fs::write(&log, [original.as_slice(), &extra].concat()).unwrap();
        }
    })
    .unwrap_err();
    assert_eq!(
        refusals(err),
        vec![Refusal::MirrorChanged {
            partition: TopicPartition::new(TOPIC, 1),
            log: log.clone(),
            planned_end_offset: f.written[1].log_end_offset,
            found_end_offset: f.written[1].log_end_offset + 1,
        }]
    );
    // The other partition, built next to it, is in staging but not said durable (no build is made durable while
    // one fails); nothing live changed, and the unfinished promotion keeps a broker from starting.
    let staging = f.target.join(PROMOTION_DIR);
    assert!(staging.join("orders-0.building").is_dir());
    assert!(!staging.join(crate::promote::swap::BUILDS_DURABLE).exists());
    assert!(staging.join(JOURNAL_FILE).is_file());
    assert_eq!(live_files(&f.target), live_before);
    assert_eq!(
        (f.state(0), f.state(1)),
        (PartitionState::Paused, PartitionState::Paused)
    );
    // With the mirror as planned again, a rerun finishes exactly the journaled promotion.
    std::fs::write(&log, &original).unwrap();
    let report = f.promote().unwrap();
    assert!(
        report.partitions.iter().all(|p| p.outcome == Outcome::Resumed),
        "{:?}",
        report.partitions
    );
    assert_eq!(target_state(&f.target), reference);
    assert_eq!(
        (f.state(0), f.state(1)),
        (PartitionState::Promoted, PartitionState::Promoted)
    );
}

#[test]
fn refuses_a_running_broker_and_a_directory_that_is_not_a_log_dir() {
    let mut f = fixture();
    // A broker holds an fcntl lock on `.lock`; python's lockf takes the same kind.
    let lock = f.target.join(LOCK_FILE);
    let script = format!(
        "import fcntl,sys\nf=open({lock:?},'a')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (the test harness needs it too)");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    assert_eq!(
        refusals(f.promote().unwrap_err()),
        vec![Refusal::BrokerRunning { lock_file: lock }]
    );
    drop(child.stdin.take());
    child.wait().unwrap();
    f.promote().unwrap();

    let mut f = fixture();
    let mut request = f.request();
    request.log_dir = f.mirror.clone();
    assert_eq!(
        refusals(promote(&request, &mut f.catalog).unwrap_err()),
        vec![Refusal::NotALogDir {
            log_dir: f.mirror.clone()
        }]
    );
}

#[test]
fn topic_selection_matches_whole_names() {
    let re = topics_regex("orders|pay.*").unwrap();
    assert!(re.is_match("orders") && re.is_match("payments"));
    assert!(!re.is_match("orders-eu") && !re.is_match("old-orders"));
    let mut f = fixture();
    let mut request = f.request();
    request.topics = Some(topics_regex("order").unwrap());
    assert_eq!(
        refusals(promote(&request, &mut f.catalog).unwrap_err()),
        vec![Refusal::NothingSelected { link: LINK.into() }]
    );
    request.topics = Some(topics_regex("ord.rs").unwrap());
    assert_eq!(promote(&request, &mut f.catalog).unwrap().changed(), 2);
}

#[test]
fn restamps_to_epoch_zero_when_the_target_never_led() {
    let mut f = fixture();
    for p in 0..2 {
        std::fs::remove_file(f.target.join(format!("orders-{p}")).join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
    }
    let report = f.promote().unwrap();
    assert!(report.partitions.iter().all(|p| p.leader_epoch == Some(0)));
}

/// The steps of an uninterrupted promotion of the fixture, in order.
fn steps() -> Vec<Step> {
    let mut f = fixture();
    let mut seen = Vec::new();
    promote_with(&f.request(), &mut f.catalog, &mut |s| seen.push(s)).unwrap();
    seen
}

mod handover;
mod journal;
mod refusals;
mod replicas;

/// The mirror's segment files a promotion took (everything but the segments wholly below partition 1's log start
/// offset, which stay in the mirror).
fn promoted_segment_files_left(mirror: &Path, target: &Path) -> Vec<PathBuf> {
    mirror_segment_files(mirror)
        .into_keys()
        .filter(|path| target.join(path).exists())
        .collect()
}

/// Every segment file of the fixture's mirror partitions: relative path -> bytes.
fn mirror_segment_files(mirror: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = tree(mirror);
    files.retain(|path, _| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        [".log", ".index", ".timeindex", ".txnindex"]
            .iter()
            .any(|ext| name.ends_with(ext))
    });
    files
}
