//! Promotion of tailed mirror partitions: the catalog holds the sealed segments, the tail state file the active
//! one, which has no companions in the mirror (as a mirror tailed before the appender kept them leaves it).

use std::path::{Path, PathBuf};

use segment_format::batch::ControlType;
use segment_format::control::EndTxnMarker;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::txn_index::TxnIndex;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};
use segmirror_catalog::{Catalog, LinkSpec, PartitionKey, PartitionState, SegmentVersion, Upsert};

use super::tests::{config, fixture_with, Fixture};
use super::*;

const LINK: &str = "l";
const TOPIC: &str = "orders";
const SOURCE_ID: Uuid = Uuid([1; 16]);
const SOURCE_EPOCH: i32 = 3;

/// A source partition whose producers commit and abort transactions in every segment (none left open), an
/// aborted one spanning segments, and idempotent writes between.
fn write_decided_transactions(root: &Path, partition: i32) -> WrittenPartition {
    let cfg = WriterConfig {
        segment_bytes: 900,
        ..config(SOURCE_ID)
    };
    let mut w = PartitionWriter::create(root, TOPIC, partition, 0, cfg).unwrap();
    w.become_leader(SOURCE_EPOCH);
    let mut sequences = [0i32; 3];
    let mut send = |w: &mut PartitionWriter, producer: usize, transactional: bool| {
        let base = w.next_offset();
        let mut b = BatchBuilder::new(base)
            .partition_leader_epoch(SOURCE_EPOCH)
            .producer(100 + producer as i64, 1, sequences[producer])
            .transactional(transactional);
        for i in 0..2 {
            b = b.record(RecordSpec::new(i, 1_700_000_000_000 + base).with_value(vec![b'v'; 30]));
        }
        w.append(b).unwrap();
        sequences[producer] += 2;
    };
    let end = |w: &mut PartitionWriter, producer: usize, control_type: ControlType| {
        let marker = EndTxnMarker {
            control_type,
            coordinator_epoch: 4,
        };
        w.append_end_txn_marker(100 + producer as i64, 1, marker, 1_700_000_000_000, SOURCE_EPOCH)
            .unwrap();
    };
    for round in 0..12 {
        // Producer 0 keeps one transaction open over several rounds (and segments), then aborts it.
        send(&mut w, 0, true);
        send(&mut w, 1, true);
        send(&mut w, 2, false);
        end(
            &mut w,
            1,
            if round % 2 == 0 {
                ControlType::Abort
            } else {
                ControlType::Commit
            },
        );
        if round % 5 == 4 {
            end(&mut w, 0, ControlType::Abort);
        }
    }
    end(&mut w, 0, ControlType::Abort);
    w.close().unwrap()
}

struct Tailed {
    f: Fixture,
    /// Per partition: the active segment's base, and the source's `.txnindex` of it.
    active: Vec<(i64, Vec<u8>)>,
}

fn state_file(mirror: &Path, partition: i32) -> PathBuf {
    crate::mirror::state_file(mirror, &format!("{TOPIC}-{partition}"))
}

/// The writer's partitions turned into what the tail appender leaves: no companions for the last segment, no
/// producer snapshots or checkpoints, a state file for the last segment, and only the sealed segments in the
/// catalog.
fn tailed() -> Tailed {
    let mut f = fixture_with(write_decided_transactions, [0, 0]);
    let mut catalog = Catalog::open_in_memory().unwrap();
    catalog
        .create_link(&LinkSpec {
            name: LINK.into(),
            store_url: crate::direct::TAIL_STORE_URL.into(),
            topics_regex: ".*".into(),
            groups_regex: None,
        })
        .unwrap();
    let mut active = Vec::new();
    for w in &f.written {
        assert!(w.segments.len() >= 3, "the source rolls");
        let dir = &w.dir;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name.ends_with(".snapshot") || !name.contains('.') || name == "partition.metadata" {
                std::fs::remove_file(&path).unwrap();
            }
        }
        let last = w.segments.last().unwrap();
        let txn = dir.join(segment_file_name(last.base_offset, SegmentFileKind::TxnIndex));
        let txn_bytes = std::fs::read(&txn).unwrap_or_default();
        for kind in [
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
            SegmentFileKind::TxnIndex,
        ] {
            let _ = std::fs::remove_file(dir.join(segment_file_name(last.base_offset, kind)));
        }
        active.push((last.base_offset, txn_bytes));
        let state = serde_json::json!({
            "topic": TOPIC,
            "partition": w.partition,
            "topic_id": SOURCE_ID.0,
            "segment_base": last.base_offset,
            "position": last.size,
            "sealed": false,
            "next_offset": w.log_end_offset,
        });
        std::fs::create_dir_all(crate::mirror::tail_dir(&f.mirror)).unwrap();
        std::fs::write(state_file(&f.mirror, w.partition), serde_json::to_vec(&state).unwrap()).unwrap();
        let key = PartitionKey::new(LINK, TOPIC, w.partition);
        let Upsert::Created(p) = catalog.upsert_partition(&key, &SOURCE_ID.to_string(), 0).unwrap() else {
            panic!("new partition")
        };
        for (i, s) in w.segments.iter().enumerate().take(w.segments.len() - 1) {
            let next = w.segments[i + 1].base_offset;
            let version = SegmentVersion {
                base_offset: s.base_offset,
                next_offset: next,
                last_offset: s.last_offset.unwrap(),
                size: s.size,
                sha256: [9; 32],
                manifest_key: format!("tail:{TOPIC}-{}/{}", w.partition, s.base_offset),
                sealed: true,
            };
            catalog.mark_installed(p.id, &SOURCE_ID.to_string(), &version).unwrap();
        }
    }
    f.catalog = catalog;
    Tailed { f, active }
}

#[test]
fn a_tailed_partition_is_promoted_with_the_active_segments_companions_rebuilt() {
    let mut t = tailed();
    // The fixture's source aborts in the active segment, one transaction of which began segments earlier.
    for (base, txn) in &t.active {
        let entries = TxnIndex::parse(txn).entries;
        assert!(!entries.is_empty(), "segment {base}: an abort in the active segment");
    }
    let report = t.f.promote().unwrap();
    assert_eq!(report.changed(), 2);
    for (w, (base, txn)) in t.f.written.iter().zip(&t.active) {
        let p = report.partitions.iter().find(|p| p.partition == w.partition).unwrap();
        assert_eq!(p.log_end_offset, Some(w.log_end_offset));
        assert!(p.transactions_aborted.is_empty(), "nothing was open");
        let dir = t.f.target.join(format!("{TOPIC}-{}", w.partition));
        // The .txnindex a broker would have written for the active segment, entry for entry.
        let promoted = std::fs::read(dir.join(segment_file_name(*base, SegmentFileKind::TxnIndex))).unwrap();
        assert_eq!(TxnIndex::parse(&promoted).entries, TxnIndex::parse(txn).entries);
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            assert!(dir.join(segment_file_name(*base, kind)).is_file(), "{kind:?}");
        }
        let row =
            t.f.catalog
                .partition(&PartitionKey::new(LINK, TOPIC, w.partition))
                .unwrap();
        assert_eq!(row.state, PartitionState::Promoted);
    }
    let verified = verify_paths(
        &[t.f.target.clone()],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    assert!(verified.io_errors.is_empty(), "{:?}", verified.io_errors);
    assert!(verified.findings.is_empty(), "{:#?}", verified.findings);
}

#[test]
fn an_active_segment_longer_than_recorded_is_refused_naming_both_sizes() {
    let mut t = tailed();
    let w = &t.f.written[1];
    let (base, _) = t.active[1];
    let log = w.dir.join(segment_file_name(base, SegmentFileKind::Log));
    let recorded = std::fs::metadata(&log).unwrap().len();
    // Bytes written but never acknowledged (a crash mid-append).
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&[0u8; 17]);
    std::fs::write(&log, &bytes).unwrap();
    let refusals = match t.f.promote().unwrap_err() {
        Error::Refused { refusals } => refusals,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        refusals,
        vec![Refusal::TailActiveSizeMismatch {
            partition: segment_format::TopicPartition::new(TOPIC, 1),
            log: log.clone(),
            recorded,
            on_disk: recorded + 17,
        }]
    );
    let text = refusals[0].to_string();
    assert!(
        text.contains(&log.display().to_string()) && text.contains(&format!("{recorded}")),
        "{text}"
    );
    // Nothing changed: neither partition paused or promoted.
    for p in 0..2 {
        let row = t.f.catalog.partition(&PartitionKey::new(LINK, TOPIC, p)).unwrap();
        assert_eq!(row.state, PartitionState::Mirroring);
    }
    assert!(!t.f.target.join(PROMOTION_DIR).exists());
}

#[test]
fn promotion_is_refused_while_an_applier_holds_the_mirror() {
    let mut t = tailed();
    let held = crate::lock_mirror(&t.f.mirror, crate::LockWait::Fail).unwrap();
    let refusals = match t.f.promote().unwrap_err() {
        Error::Refused { refusals } => refusals,
        other => panic!("{other:?}"),
    };
    assert!(
        refusals.iter().any(|r| matches!(r, Refusal::MirrorBusy { holder, .. }
            if holder.contains(&format!("pid {}", std::process::id())))),
        "{refusals:?}"
    );
    drop(held);
    t.f.promote().unwrap();
}
