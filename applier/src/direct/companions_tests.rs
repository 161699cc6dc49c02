//! The active segment's companions on a tailed mirror (`companions`): its `.txnindex` equals the one the writer
//! (which emulates the broker) leaves, across rolls, restarts, crashes and a hand-over, and `verify --strict`
//! finds the mirror sound.

use std::path::{Path, PathBuf};

use segment_format::batch::ControlType;
use segment_format::control::EndTxnMarker;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::txn_index::TxnIndex;
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::writer::{PartitionWriter, WriterConfig};
use segmirror_transport::direct::session::ChunkApplier;

use super::handover_tests::{appender, catalogs, install, LINK};
use super::tests::{boundaries, chunk, chunks_of, fixture_with, mirror_log, seal_of, Fixture};
use super::*;

/// Segments large enough for offset and time index entries (one per 4 KiB), small enough to roll a few times.
const SEGMENT_BYTES: u64 = 16_000;
const EPOCH: i32 = 3;
/// Producer whose transactions stay open over several segments before their ABORT.
const LONG: i64 = 100;
/// Producer committing and aborting short transactions.
const SHORT: i64 = 101;
/// Idempotent, non-transactional producer.
const PLAIN: i64 = 102;
/// Producer whose transaction is still open at the source's end.
const OPEN: i64 = 103;

/// A source partition of transactions: `LONG` aborts transactions spanning rolls (the last one's ABORT lies in
/// the active segment, its first batch in the segment before), `SHORT` commits and aborts within a segment,
/// `OPEN` is left open at the end.
fn write_transactions(root: &Path) -> PathBuf {
    let cfg = WriterConfig {
        segment_bytes: SEGMENT_BYTES,
        fsync: false,
        topic_id: Some(Uuid([7; 16])),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, "orders", 2, 0, cfg).unwrap();
    w.become_leader(EPOCH);
    let mut sequences = std::collections::HashMap::<i64, i32>::new();
    let mut send = |w: &mut PartitionWriter, producer: i64, transactional: bool| {
        let base = w.next_offset();
        let seq = sequences.entry(producer).or_insert(0);
        let mut b = BatchBuilder::new(base)
            .partition_leader_epoch(EPOCH)
            .producer(producer, 1, *seq)
            .transactional(transactional);
        for i in 0..2 {
            b = b.record(RecordSpec::new(i, 1_700_000_000_000 + base).with_value(vec![b'v'; 400]));
        }
        w.append(b).unwrap();
        *seq += 2;
    };
    let end = |w: &mut PartitionWriter, producer: i64, control_type: ControlType| {
        let marker = EndTxnMarker {
            control_type,
            coordinator_epoch: 4,
        };
        w.append_end_txn_marker(producer, 1, marker, 1_700_000_000_000, EPOCH)
            .unwrap();
    };
    for round in 0..16 {
        send(&mut w, LONG, true);
        send(&mut w, SHORT, true);
        send(&mut w, PLAIN, false);
        let decision = if round % 2 == 0 {
            ControlType::Abort
        } else {
            ControlType::Commit
        };
        end(&mut w, SHORT, decision);
        if round % 7 == 6 {
            end(&mut w, LONG, ControlType::Abort);
        }
    }
    // The last `LONG` transaction starts before the roll and is aborted in the active segment.
    send(&mut w, LONG, true);
    w.roll().unwrap();
    send(&mut w, PLAIN, false);
    send(&mut w, SHORT, true);
    end(&mut w, LONG, ControlType::Abort);
    end(&mut w, SHORT, ControlType::Abort);
    send(&mut w, OPEN, true);
    // Past one index interval, so the active segment has offset and time index entries.
    for _ in 0..6 {
        send(&mut w, PLAIN, false);
    }
    let dir = w.dir().to_path_buf();
    w.close().unwrap();
    dir
}

fn fixture() -> Fixture {
    fixture_with(write_transactions)
}

fn companion(dir: &Path, base: i64, kind: SegmentFileKind) -> Option<Vec<u8>> {
    std::fs::read(dir.join(segment_file_name(base, kind))).ok()
}

/// Every segment's `.txnindex` on the mirror is the source's (the sealed ones kept from their active days: the
/// seals here carry no `.txnindex`), the active one holds an entry whose transaction began a segment earlier,
/// the active offset index is the source's, and `verify --strict` finds nothing.
fn assert_sound(f: &Fixture) {
    let mdir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
    for (base, _) in &f.segs {
        assert_eq!(
            companion(&f.source, *base, SegmentFileKind::TxnIndex),
            companion(&mdir, *base, SegmentFileKind::TxnIndex),
            ".txnindex of segment {base}"
        );
    }
    let (active, _) = f.segs.last().unwrap();
    let (previous, _) = f.segs[f.segs.len() - 2];
    let entries = TxnIndex::parse(&companion(&mdir, *active, SegmentFileKind::TxnIndex).unwrap()).entries;
    assert!(
        entries
            .iter()
            .any(|e| e.producer_id == LONG && e.first_offset >= previous && e.first_offset < *active),
        "an abort spanning the roll: {entries:?}"
    );
    let index = companion(&mdir, *active, SegmentFileKind::Index).unwrap();
    assert!(!index.is_empty(), "the active segment has offset index entries");
    assert_eq!(Some(index), companion(&f.source, *active, SegmentFileKind::Index));
    let report = verify_paths(
        std::slice::from_ref(&mdir),
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    assert!(report.io_errors.is_empty(), "{:?}", report.io_errors);
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}

async fn seal_all_but_last(a: &mut TailAppender, f: &Fixture, per: usize) {
    for (base, bytes) in &f.segs[..f.segs.len() - 1] {
        for c in chunks_of(*base, bytes, per) {
            a.apply_chunk(&c).await.unwrap();
        }
        a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
    }
}

#[tokio::test]
async fn companions_of_an_abort_spanning_a_roll_match_the_broker() {
    let f = fixture();
    assert!(f.segs.len() >= 3, "the source rolls");
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    seal_all_but_last(&mut a, &f, 3).await;
    let (base, bytes) = f.segs.last().unwrap();
    for c in chunks_of(*base, bytes, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    assert_sound(&f);
    // The state file records the transaction still open at the end.
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(crate::mirror::state_file(&f.mirror, "orders-2")).unwrap()).unwrap();
    let open = state["open_transactions"].as_array().unwrap();
    assert_eq!(open.len(), 1, "{state}");
    assert_eq!(open[0]["producer_id"], OPEN);
}

/// The session's group commit (`apply_chunks`): each segment's chunks, one batch each, applied as one group, so
/// a transaction opened by one chunk is aborted by a later chunk of the same group before anything of the group
/// is recorded; the companions are still the broker's.
#[tokio::test]
async fn companions_of_chunks_applied_as_one_group_match_the_broker() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        a.apply_chunks(&chunks_of(*base, bytes, 1)).await.unwrap();
        if i + 1 < f.segs.len() {
            a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
        }
    }
    assert_sound(&f);
}

#[tokio::test]
async fn companions_survive_restarts_crashes_and_old_state_files_mid_transaction() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    seal_all_but_last(&mut a, &f, 4).await;
    let (base, bytes) = f.segs.last().unwrap();
    let b = boundaries(bytes);
    let name = "orders-2".to_string();
    for (i, w) in b.windows(2).enumerate() {
        let c = chunk(*base, bytes, w[0], w[1]);
        let before = a.inner.lock().unwrap().states[&name].clone();
        a.apply_chunk(&c).await.unwrap();
        // (Not a crash at the first chunk of the segment: the claim at 0 is recorded before the file exists.)
        match (i + 2) % 3 {
            // A crash after the bytes and companions were written, before the record: the state file goes back.
            0 => {
                a.inner.lock().unwrap().record(name.clone(), before).unwrap();
                drop(a);
                a = TailAppender::open(&f.mirror).unwrap();
                a.durable_positions().await.unwrap();
                a.apply_chunk(&c).await.unwrap();
            }
            // A state file written before the open transactions were recorded: derived at the next start.
            1 => {
                let path = crate::mirror::state_file(&f.mirror, "orders-2");
                let mut state: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                state.as_object_mut().unwrap().remove("open_transactions").unwrap();
                std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
                drop(a);
                a = TailAppender::open(&f.mirror).unwrap();
                a.durable_positions().await.unwrap();
            }
            // A plain restart, the indexes' files made stale meanwhile (never fsynced: a crash may leave them so).
            _ => {
                drop(a);
                let mdir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
                for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
                    std::fs::write(mdir.join(segment_file_name(*base, kind)), [0u8; 5]).unwrap();
                }
                a = TailAppender::open(&f.mirror).unwrap();
                a.durable_positions().await.unwrap();
            }
        }
    }
    assert_sound(&f);
}

#[tokio::test]
async fn companions_after_a_handover_with_an_open_transaction() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let mdir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
    // `apply` installed every sealed segment with the source's companions, and a prefix of the active segment
    // that ends inside the `LONG` transaction begun in the segment before (its ABORT comes later). The prefix
    // comes with the source's (final) `.txnindex`: entries beyond the prefix, which the hand-over must drop.
    let last = f.segs.len() - 1;
    for i in 0..last {
        let (base, bytes) = &f.segs[i];
        install(&f, &mut look, LINK, *base, bytes, Some(f.segs[i + 1].0));
        for kind in [
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
            SegmentFileKind::TxnIndex,
        ] {
            if let Some(b) = companion(&f.source, *base, kind) {
                std::fs::write(mdir.join(segment_file_name(*base, kind)), b).unwrap();
            }
        }
    }
    let (base, bytes) = &f.segs[last];
    let b = boundaries(bytes);
    let cut = b[2]; // two batches: before the ABORT marker of `LONG`
    install(&f, &mut look, LINK, *base, &bytes[..cut], None);
    let stale = companion(&f.source, *base, SegmentFileKind::TxnIndex).unwrap();
    std::fs::write(mdir.join(segment_file_name(*base, SegmentFileKind::TxnIndex)), stale).unwrap();

    let mut a = appender(&f, mine, LINK);
    let positions = a.durable_positions().await.unwrap();
    assert_eq!(positions[0].position.position, cut as u64);
    assert!(
        companion(&mdir, *base, SegmentFileKind::TxnIndex).is_none(),
        "no abort in the prefix: the stale .txnindex is gone"
    );
    let from = b.iter().position(|&x| x == cut).unwrap();
    for w in b[from..].windows(2) {
        a.apply_chunk(&chunk(*base, bytes, w[0], w[1])).await.unwrap();
    }
    assert_sound(&f);
}

#[tokio::test]
async fn a_seal_without_indexes_leaves_them_as_a_rolled_segments() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    a.durable_positions().await.unwrap();
    let (base, bytes) = &f.segs[0];
    for c in chunks_of(*base, bytes, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
    let mdir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
    // While active: the appender's own time index, without the final entry a roll appends.
    let active_times = companion(&mdir, *base, SegmentFileKind::TimeIndex).unwrap();
    let mut seal = seal_of(&f.source, *base, bytes, true);
    seal.companions.clear();
    a.apply_seal(&seal).await.unwrap();
    for kind in [
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
    ] {
        assert_eq!(
            companion(&mdir, *base, kind),
            companion(&f.source, *base, kind),
            "{kind:?} of the sealed segment"
        );
    }
    assert_ne!(
        Some(active_times),
        companion(&mdir, *base, SegmentFileKind::TimeIndex),
        "the roll's final time index entry"
    );
}
