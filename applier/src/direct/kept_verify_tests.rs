//! `verify_kept`: a mirror the appender wrote verifies clean; facts that do not describe its bytes are found.

use std::path::{Path, PathBuf};

use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::report::Severity;
use segment_format::writer::{PartitionWriter, WriterConfig};

use super::*;
use crate::direct::tests::{chunks_of, fixture_with, pref, seal_of, Fixture};

/// A writer of the fixture's source partition under `root`, with segments of a few batches.
fn source_writer(root: &Path) -> PartitionWriter {
    let cfg = WriterConfig {
        segment_bytes: 12_000,
        fsync: false,
        topic_id: Some(Uuid(pref().topic_id)),
        ..WriterConfig::default()
    };
    PartitionWriter::create(root, &pref().topic, pref().partition, 0, cfg).unwrap()
}

/// A source partition under two leader epochs, with batches large enough for index entries.
fn write_source(root: &Path) -> PathBuf {
    let mut w = source_writer(root);
    for epoch in [3, 4] {
        w.become_leader(epoch);
        for _ in 0..14 {
            let base = w.next_offset();
            let b = BatchBuilder::new(base)
                .partition_leader_epoch(epoch)
                .record(RecordSpec::new(0, 1_700_000_000_000 + base).with_value(vec![b'v'; 1500]));
            w.append(b).unwrap();
        }
    }
    let dir = w.dir().to_path_buf();
    w.close().unwrap();
    dir
}

/// The source `write` writes, appended in chunks of two batches, every segment but the last sealed.
async fn tailed(write: fn(&Path) -> PathBuf) -> Fixture {
    let f = fixture_with(write);
    tail(&f).await;
    f
}

/// `f`'s source appended by a new appender, in chunks of two batches, every segment but the last sealed.
async fn tail(f: &Fixture) -> TailAppender {
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let last = f.segs.len() - 1;
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        for c in chunks_of(*base, bytes, 2) {
            a.apply_chunk(&c).await.unwrap();
        }
        if i < last {
            a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
        }
    }
    a
}

fn state_path(f: &Fixture) -> PathBuf {
    mirror::state_file(&f.mirror, &format!("{}-{}", pref().topic, pref().partition))
}

/// The state file with `change` applied to its `kept` object.
fn edit_kept(f: &Fixture, change: impl FnOnce(&mut serde_json::Value)) {
    let path = state_path(f);
    let mut state: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(state.get_mut("kept").expect("kept facts"));
    std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
}

#[tokio::test]
async fn what_the_appender_kept_verifies_clean_and_a_changed_fact_is_found() {
    let f = tailed(write_source).await;
    let kept: Kept = {
        let state: serde_json::Value = serde_json::from_slice(&std::fs::read(state_path(&f)).unwrap()).unwrap();
        serde_json::from_value(state["kept"].clone()).unwrap()
    };
    assert!(kept.offset_index.entries > 1, "the active segment is indexed: {kept:?}");
    let epochs = kept.epochs.clone().unwrap();
    assert_eq!(epochs.from_offset, 0);
    assert_eq!(epochs.changes.len(), 2, "{epochs:?}");
    // No transaction, no closed log: not even an empty file.
    assert_eq!(kept.closed_log, FileRecord::default());
    let closed_log = mirror::closed_log_file(&f.mirror, &format!("{}-{}", pref().topic, pref().partition));
    assert!(!closed_log.exists() && !closed_log.parent().unwrap().exists());
    let (findings, io_errors) = verify_kept(&f.mirror);
    assert!(io_errors.is_empty(), "{io_errors:?}");
    assert!(findings.is_empty(), "{findings:#?}");

    // An index CRC that is not the segment's: an error naming the state file.
    edit_kept(&f, |k| {
        k["offset_index"]["crc32c"] = serde_json::json!(kept.offset_index.crc32c ^ 1)
    });
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].severity, Severity::Error);
    assert_eq!(findings[0].path, state_path(&f));
    assert!(
        findings[0].defect.to_string().contains("offset index"),
        "{}",
        findings[0].defect
    );

    // An epoch history that moves the second epoch's start: the batches it misplaces are found.
    edit_kept(&f, |k| {
        k["offset_index"]["crc32c"] = serde_json::json!(kept.offset_index.crc32c);
        let (epoch, start) = epochs.changes[1];
        k["epochs"]["changes"][1] = serde_json::json!([epoch, start + 1]);
    });
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].severity, Severity::Error);
    let text = findings[0].defect.to_string();
    assert!(text.contains(&format!("offset {}", epochs.changes[1].1)), "{text}");

    // A `.txnindex` entry count that does not match: a warning (see the module docs).
    edit_kept(&f, |k| {
        k["epochs"]["changes"][1] = serde_json::json!([epochs.changes[1].0, epochs.changes[1].1]);
        k["txn_index"]["entries"] = serde_json::json!(1);
    });
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].severity, Severity::Warning);
}

/// A source partition whose transactional producer 7 commits three transactions of two batches each (plain batches
/// between, so that they span segment rolls), then producer 9 aborts a transaction without data.
fn write_transactional_source(root: &Path) -> PathBuf {
    use segment_format::batch::ControlType;
    use segment_format::control::EndTxnMarker;
    let mut w = source_writer(root);
    w.become_leader(3);
    let marker = |control_type| EndTxnMarker {
        control_type,
        coordinator_epoch: 0,
    };
    let mut sequence = 0;
    for _ in 0..3 {
        for _ in 0..2 {
            let base = w.next_offset();
            let b = BatchBuilder::new(base)
                .partition_leader_epoch(3)
                .producer(7, 1, sequence)
                .transactional(true)
                .record(RecordSpec::new(0, 1_700_000_000_000 + base).with_value(vec![b'v'; 1500]));
            w.append(b).unwrap();
            sequence += 1;
            for _ in 0..2 {
                let base = w.next_offset();
                w.append(
                    BatchBuilder::new(base)
                        .partition_leader_epoch(3)
                        .record(RecordSpec::new(0, 1_700_000_000_000 + base).with_value(vec![b'p'; 1500])),
                )
                .unwrap();
            }
        }
        w.append_end_txn_marker(7, 1, marker(ControlType::Commit), 1_700_000_000_000, 3)
            .unwrap();
    }
    w.append_end_txn_marker(9, 0, marker(ControlType::Abort), 1_700_000_000_000, 3)
        .unwrap();
    let dir = w.dir().to_path_buf();
    w.close().unwrap();
    dir
}

/// Each producer's last closed transaction, as the appender keeps it for a consistent cut: recorded with the
/// marker and the transaction it closed, carried over seals, verified clean; one whose tally or marker is not
/// what the data says is an error.
#[tokio::test]
async fn the_kept_last_closed_transactions_verify_clean_and_a_changed_one_is_found() {
    let f = tailed(write_transactional_source).await;
    assert!(f.segs.len() >= 3, "{} segments", f.segs.len());
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(state_path(&f)).unwrap()).unwrap();
    let kept: Kept = serde_json::from_value(state["kept"].clone()).unwrap();
    // Producer 7's third transaction (offsets 14 to 19, its marker at 20), then 9's abort that closed nothing.
    let ids: Vec<(i64, i64, Option<i64>)> = kept
        .closed
        .iter()
        .map(|c| (c.producer_id, c.marker_offset, c.first_offset))
        .collect();
    assert_eq!(ids, vec![(7, 20, Some(14)), (9, 21, None)]);
    let tally = kept.closed[0].tally.expect("tallied");
    assert_eq!((tally.producer_epoch, tally.records, tally.batches), (1, 2, 2));
    let (findings, io_errors) = verify_kept(&f.mirror);
    assert!(io_errors.is_empty(), "{io_errors:?}");
    assert!(findings.is_empty(), "{findings:#?}");

    // A tally with a record more than the data holds: an error.
    edit_kept(&f, |k| k["closed"][0]["tally"]["records"] = serde_json::json!(3));
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].severity, Severity::Error);
    let text = findings[0].defect.to_string();
    assert!(
        text.contains("last transaction closed") && text.contains("3 records"),
        "{text}"
    );

    // Producer 7's second commit (offset 13) as its last: the data ends it at 20, an error.
    edit_kept(&f, |k| {
        k["closed"][0]["tally"]["records"] = serde_json::json!(2);
        k["closed"][0]["marker_offset"] = serde_json::json!(13);
        k["closed"][0]["first_offset"] = serde_json::json!(7);
    });
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let text = findings[0].defect.to_string();
    assert!(text.contains("marker at 13") && text.contains("marker at 20"), "{text}");
}

/// The active segment's closed log, as the appender writes it: verified clean against the walk; an entry whose tally
/// is not what the data says, with a record that vouches for the changed bytes, is an error; a log that is not the
/// recorded one (a write a crash lost) is a warning.
#[tokio::test]
async fn the_closed_log_verifies_clean_and_a_changed_entry_is_found() {
    let f = tailed(write_transactional_source).await;
    let state: serde_json::Value = serde_json::from_slice(&std::fs::read(state_path(&f)).unwrap()).unwrap();
    let kept: Kept = serde_json::from_value(state["kept"].clone()).unwrap();
    let path = mirror::closed_log_file(&f.mirror, &format!("{}-{}", pref().topic, pref().partition));
    let mut logged = recorded_closed_log(&path, kept.closed_log)
        .unwrap()
        .expect("the recorded log");
    // Producer 9's abort at 21 closed nothing; the active segment holds it (and maybe 7's last commit).
    assert_eq!(
        logged.last().map(|c| (c.producer_id, c.marker_offset, c.first_offset)),
        Some((9, 21, None))
    );
    assert!(logged.len() as u64 == kept.closed_log.entries && !logged.is_empty());
    let (findings, io_errors) = verify_kept(&f.mirror);
    assert!(io_errors.is_empty(), "{io_errors:?}");
    assert!(findings.is_empty(), "{findings:#?}");

    // Producer 9's abort said to close a transaction from offset 21: an error.
    let last = logged.len() - 1;
    logged[last].first_offset = Some(21);
    logged[last].tally = Some(segment_format::txn_index::TxnTally::default());
    let bytes = segment_format::closed_log::serialize(&logged);
    std::fs::write(&path, &bytes).unwrap();
    edit_kept(&f, |k| {
        k["closed_log"]["crc32c"] = serde_json::json!(crc32c::crc32c(&bytes))
    });
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].severity, Severity::Error);
    let text = findings[0].defect.to_string();
    assert!(
        text.contains("closed log") && text.contains("marker at 21, from 21"),
        "{text}"
    );

    // Its last entry lost: not the recorded log, a warning.
    std::fs::write(
        &path,
        &bytes[..bytes.len() - segment_format::closed_log::CLOSED_ENTRY_SIZE],
    )
    .unwrap();
    let (findings, _) = verify_kept(&f.mirror);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].severity, Severity::Warning);
    assert!(
        findings[0].defect.to_string().contains("not the one recorded"),
        "{:?}",
        findings[0]
    );
}

/// A replacement of sealed segments (the source's cleaner) may remove batches of a transaction a closed log entry
/// counts from below the active segment: the recorded log is emptied before any file changes, so promotion reads
/// back instead of trusting it, and the mirror verifies clean.
#[tokio::test]
async fn a_replacement_of_sealed_segments_empties_the_closed_log() {
    use crate::direct::replace::tests::{compacted, replace_seal};
    let f = fixture_with(write_transactional_source);
    let mut a = tail(&f).await;
    let kept_now = || -> Kept {
        let state: serde_json::Value = serde_json::from_slice(&std::fs::read(state_path(&f)).unwrap()).unwrap();
        serde_json::from_value(state["kept"].clone()).unwrap()
    };
    assert!(kept_now().closed_log.entries > 0);
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let new = compacted(&f.segs[..2]);
    let half = new.len() / 2;
    a.stage_replacement(&pref(), bases[0], 0, new[..half].to_vec())
        .await
        .unwrap();
    a.stage_replacement(&pref(), bases[0], half as u64, new[half..].to_vec())
        .await
        .unwrap();
    a.install_replacement(&replace_seal(&pref(), &bases[..2], &new))
        .await
        .unwrap();
    drop(a);
    assert_eq!(kept_now().closed_log, FileRecord::default());
    let (findings, io_errors) = verify_kept(&f.mirror);
    assert!(io_errors.is_empty(), "{io_errors:?}");
    assert!(
        findings.iter().all(|f| !f.defect.to_string().contains("closed log")),
        "{findings:#?}"
    );
}
