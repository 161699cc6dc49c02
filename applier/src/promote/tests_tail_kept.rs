//! Promotion of a mirror the tail appender wrote, from what it kept (`tail_kept`) against the walks: the same
//! files byte for byte, with transactions committed, aborted and one left open, and several leader epochs; and
//! the same after the appender is killed at every step of a chunk's append.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use segment_format::batch::ControlType;
use segment_format::closed_log;
use segment_format::control::EndTxnMarker;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig, WrittenPartition};
use segmirror_catalog::Catalog;
use segmirror_transport::direct::payload::{Chunk, Companion, CompanionKind, PartitionRef, SegmentSeal};
use segmirror_transport::direct::session::ChunkApplier;
use sha2::Digest;

use super::plan::FIXED_NOW_MS;
use super::tail_kept::used;
use super::tests::{config, target_state, write_target};
use super::*;
use crate::direct::{TailAppender, TailCatalog};
use crate::failpoint::{Armed, FailPoint};

const LINK: &str = "l";
const TOPIC: &str = "orders";
const SOURCE_ID: Uuid = Uuid([1; 16]);
/// The epoch the fixture's target partitions last led in (`tests::write_target`).
const TARGET_EPOCH: i32 = 2;
/// Batches per chunk, and chunks per group commit.
const BATCHES_PER_CHUNK: usize = 3;
const CHUNKS_PER_GROUP: usize = 2;

/// A source partition with transactions committed and aborted in every segment, one aborted across segments,
/// idempotent writes between, under two leader epochs (partition 0: 1 then the target's, so its later segments
/// need no restamping; partition 1: 3 then 5) and, with `open_at_end`, a transaction left open at its end.
fn write_source(root: &Path, partition: i32, shape: Shape) -> WrittenPartition {
    let cfg = WriterConfig {
        segment_bytes: shape.segment_bytes,
        ..config(SOURCE_ID)
    };
    let mut w = PartitionWriter::create(root, TOPIC, partition, 0, cfg).unwrap();
    let mut sequences = [0i32; 4];
    let mut send = |w: &mut PartitionWriter, producer: usize, transactional: bool, epoch: i32| {
        let base = w.next_offset();
        let mut b = BatchBuilder::new(base)
            .partition_leader_epoch(epoch)
            .producer(100 + producer as i64, 1, sequences[producer])
            .transactional(transactional);
        for i in 0..2 {
            b = b.record(RecordSpec::new(i, timestamp(shape, base)).with_value(vec![b'v'; shape.value_bytes]));
        }
        w.append(b).unwrap();
        sequences[producer] += 2;
    };
    let end = |w: &mut PartitionWriter, producer: usize, control_type: ControlType, epoch: i32| {
        let marker = EndTxnMarker {
            control_type,
            coordinator_epoch: 4,
        };
        w.append_end_txn_marker(100 + producer as i64, 1, marker, 1_700_000_000_000, epoch)
            .unwrap();
    };
    let epochs = if partition == 0 { [1, TARGET_EPOCH] } else { [3, 5] };
    for epoch in epochs {
        w.become_leader(epoch);
        for round in 0..shape.rounds {
            send(&mut w, 0, true, epoch);
            send(&mut w, 1, true, epoch);
            send(&mut w, 2, false, epoch);
            let decided = if round % 2 == 0 {
                ControlType::Abort
            } else {
                ControlType::Commit
            };
            end(&mut w, 1, decided, epoch);
            if round % 3 == 2 {
                end(&mut w, 0, ControlType::Abort, epoch);
            }
        }
    }
    let last = epochs[1];
    end(&mut w, 0, ControlType::Commit, last);
    for _ in 0..shape.tail_batches {
        send(&mut w, 2, false, last);
    }
    if shape.open_at_end {
        send(&mut w, 3, true, last);
        send(&mut w, 2, false, last);
        send(&mut w, 3, true, last);
    }
    w.close().unwrap()
}

/// What [`write_source`] writes.
#[derive(Debug, Clone, Copy)]
struct Shape {
    open_at_end: bool,
    /// Rounds of transactions per leader epoch.
    rounds: usize,
    segment_bytes: u64,
    /// Each record's value: batches large enough for the segments' indexes to hold entries (one per 4 KiB).
    value_bytes: usize,
    /// Idempotent batches written last, so that the active segment is large enough for several index entries.
    tail_batches: usize,
    /// Timestamps rising with the offset (a consistent cut's fixture) instead of scattered over 50 ms.
    rising: bool,
}

/// The timestamp of every record of the batch at `base`.
fn timestamp(shape: Shape, base: i64) -> i64 {
    if shape.rising {
        1_700_000_000_000 + base
    } else {
        1_700_000_000_000 + base * 7 % 50
    }
}

impl Shape {
    fn of(open_at_end: bool) -> Shape {
        Shape {
            open_at_end,
            rounds: 8,
            segment_bytes: 24_000,
            value_bytes: 400,
            tail_batches: 20,
            rising: false,
        }
    }
}

fn pref(partition: i32) -> PartitionRef {
    PartitionRef {
        topic: TOPIC.into(),
        partition,
        topic_id: SOURCE_ID.0,
    }
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

fn inline(kind: CompanionKind, bytes: Vec<u8>) -> Companion {
    Companion {
        kind,
        size: bytes.len() as u64,
        sha256: sha(&bytes),
        inline: Some(Bytes::from(bytes)),
        index_interval: None,
    }
}

/// One test's directories: the source, the mirror and its catalog, the target log dir.
struct Site {
    _dir: Option<tempfile::TempDir>,
    root: PathBuf,
    written: Vec<WrittenPartition>,
}

impl Site {
    /// A site with nothing mirrored yet: a stopped target holding `partitions` of the topic, and an empty mirror.
    fn empty(partitions: &[i32]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("site");
        write_target(&root.join("target"), 1, partitions, TARGET_EPOCH);
        std::fs::create_dir_all(root.join("mirror")).unwrap();
        Site {
            _dir: Some(dir),
            root,
            written: Vec::new(),
        }
    }

    fn new(shape: Shape) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("site");
        let written = (0..2).map(|p| write_source(&root.join("source"), p, shape)).collect();
        write_target(&root.join("target"), 1, &[0, 1], TARGET_EPOCH);
        std::fs::create_dir_all(root.join("mirror")).unwrap();
        Site {
            _dir: Some(dir),
            root,
            written,
        }
    }

    /// A site whose source is shipped whole through an appender, which is then dropped.
    async fn shipped(shape: Shape) -> Site {
        let site = Site::new(shape);
        let mut a = site.appender();
        ship(&site, &mut a).await.unwrap();
        site
    }

    fn mirror(&self) -> PathBuf {
        self.root.join("mirror")
    }

    fn catalog_path(&self) -> PathBuf {
        self.root.join("catalog.sqlite")
    }

    fn appender(&self) -> TailAppender {
        let catalog = TailCatalog::open(Catalog::open(self.catalog_path()).unwrap(), LINK).unwrap();
        TailAppender::open_with_catalog(self.mirror(), catalog).unwrap()
    }

    /// The same site copied beside this one (`name`), for a second promotion of the same mirror.
    fn copy(&self, name: &str) -> Site {
        let root = self.root.with_file_name(name);
        copy_dir(&self.root, &root);
        Site {
            _dir: None,
            root,
            written: self.written.clone(),
        }
    }

    /// Every partition's state file without what the appender kept: what an older appender left.
    fn forget_kept(&self) {
        forget_kept_in(&self.mirror(), 2);
    }

    fn promote(&self, handover: Handover) -> Result<PromoteReport> {
        self.promote_with(handover, &mut |_| {})
    }

    /// [`Self::promote`], with `hook` called at every step (`promote_with`).
    fn promote_with(&self, handover: Handover, hook: &mut dyn FnMut(super::journal::Step)) -> Result<PromoteReport> {
        self.promote_cut(handover, None, hook)
    }

    /// [`Self::promote_with`] with a consistent cut at `cut` (ms).
    fn promote_cut(
        &self,
        handover: Handover,
        cut: Option<i64>,
        hook: &mut dyn FnMut(super::journal::Step),
    ) -> Result<PromoteReport> {
        self.promote_killed(handover, cut, None, hook)
    }

    /// [`Self::promote_cut`] with a kill point armed inside the handover builds.
    fn promote_killed(
        &self,
        handover: Handover,
        cut: Option<i64>,
        failpoint: Option<std::sync::Arc<Armed>>,
        hook: &mut dyn FnMut(super::journal::Step),
    ) -> Result<PromoteReport> {
        let mut catalog = Catalog::open(self.catalog_path()).unwrap();
        let request = PromoteRequest {
            mirror_root: self.mirror(),
            log_dir: self.root.join("target"),
            handover,
            consistent_cut: cut,
            parallel: 1,
            failpoint,
            ..PromoteRequest::default()
        };
        FIXED_NOW_MS.with(|t| t.set(Some(1_800_000_000_000)));
        let report = super::promote_with(&request, &mut catalog, hook);
        FIXED_NOW_MS.with(|t| t.set(None));
        report
    }
}

/// A partition promoted from what the appender kept (`kept`) ended, restamped, aborted and was cut as the walk's
/// (`walk`) was.
fn assert_promoted_alike(kept: &PromotedPartition, walk: &PromotedPartition) {
    let facts = |p: &PromotedPartition| {
        (
            p.log_end_offset,
            p.log_bytes,
            p.batches_restamped,
            p.transactions_aborted.clone(),
            p.consistent_cut.clone(),
        )
    };
    assert_eq!(facts(kept), facts(walk));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let path = e.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(e.file_name()));
        } else {
            std::fs::copy(&path, to.join(e.file_name())).unwrap();
        }
    }
}

/// Each segment of the source partition as the chunks it is shipped in (`BATCHES_PER_CHUNK` batches each) and
/// whether it is sealed (every one but the last).
fn shipped(site: &Site, w: &WrittenPartition) -> Vec<(i64, Vec<u8>, Vec<usize>, bool)> {
    let dir = site.root.join("source").join(format!("{TOPIC}-{}", w.partition));
    let n = w.segments.len();
    w.segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let bytes = std::fs::read(dir.join(segment_file_name(s.base_offset, SegmentFileKind::Log))).unwrap();
            let starts: Vec<usize> = scan_frames(&bytes, 0)
                .map(|f| f.unwrap().info.position as usize)
                .collect();
            if i + 1 == n {
                let index = dir.join(segment_file_name(s.base_offset, SegmentFileKind::Index));
                let len = std::fs::metadata(&index).unwrap().len();
                assert!(
                    len > 8,
                    "the active segment's index has entries: {index:?} {len} {:?}",
                    w.segments
                );
            }
            let mut cuts: Vec<usize> = starts.iter().copied().step_by(BATCHES_PER_CHUNK).collect();
            cuts.push(bytes.len());
            (s.base_offset, bytes, cuts, i + 1 < n)
        })
        .collect()
}

/// Ship the source into the mirror from where the appender stands (its durable positions, as a session start
/// reads them): chunks in groups, every segment but the last sealed. Stops at the first error (a kill point).
async fn ship(site: &Site, a: &mut TailAppender) -> std::result::Result<(), String> {
    let durable = a.durable_positions().await.map_err(|e| e.to_string())?;
    for w in &site.written {
        let at = durable.iter().find(|d| d.position.partition.partition == w.partition);
        let src = site.root.join("source").join(format!("{TOPIC}-{}", w.partition));
        for (base, bytes, cuts, sealed) in shipped(site, w) {
            let (from, is_sealed) = match at {
                Some(d) if base < d.position.segment_base => continue,
                Some(d) if base == d.position.segment_base => (d.position.position as usize, d.sealed),
                _ => (0, false),
            };
            let chunks: Vec<Chunk> = cuts
                .windows(2)
                .filter(|c| c[0] >= from)
                .map(|c| Chunk {
                    partition: pref(w.partition),
                    segment_base: base,
                    position: c[0] as u64,
                    bytes: Bytes::copy_from_slice(&bytes[c[0]..c[1]]),
                    crcs: Default::default(),
                })
                .collect();
            for group in chunks.chunks(CHUNKS_PER_GROUP) {
                a.apply_chunks(group).await.map_err(|e| e.to_string())?;
            }
            if sealed && !is_sealed {
                let read = |kind| std::fs::read(src.join(segment_file_name(base, kind))).unwrap();
                a.apply_seal(&SegmentSeal {
                    partition: pref(w.partition),
                    segment_base: base,
                    final_size: bytes.len() as u64,
                    log_sha256: sha(&bytes),
                    companions: vec![
                        inline(CompanionKind::OffsetIndex, read(SegmentFileKind::Index)),
                        inline(CompanionKind::TimeIndex, read(SegmentFileKind::TimeIndex)),
                    ],
                })
                .await
                .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// Each sealed segment's record of how its batches leave each transactional producer, as the seal wrote it in the
/// catalog, against the same derived from the segment's bytes: equal wherever there is one; and the segment's log
/// the seal wrote, entry for entry the batches' (`verify --deep --catalog` finds nothing either). Returns how many
/// segments have a record.
fn seal_records_hold(site: &Site) -> usize {
    let catalog = Catalog::open(site.catalog_path()).unwrap();
    let mut recorded = 0;
    for p in catalog.partitions(LINK).unwrap() {
        let dir = site.mirror().join(format!("{TOPIC}-{}", p.key.partition));
        for (base, (next, ends)) in catalog.installed_txn_ends(p.id).unwrap() {
            let Some(ends) = ends else { continue };
            let log = dir.join(segment_file_name(base, SegmentFileKind::Log));
            let (derived, closings) = segment_format::txn_ends::logged_of_log(&log, next).unwrap();
            assert_eq!(Some(ends.without_log()), derived, "{}", log.display());
            // A seal writes the segment's log where it has an entry (a transaction begun in the segment).
            let Some(log_record) = ends.log else {
                recorded += 1;
                continue;
            };
            let logged = crate::segment_log::read(&dir, base, log_record)
                .unwrap()
                .expect("the recorded log");
            for c in &logged {
                let walked = closed_log::find_in_segment(&closings, c.producer_id, c.marker_offset);
                assert_eq!(walked.map(|w| w.data), Some(c.data), "{}: {c:?}", log.display());
            }
            recorded += 1;
        }
    }
    let (findings, io_errors) = crate::verify::verify_recorded_transactions(&site.mirror(), &catalog);
    assert!(
        findings.is_empty() && io_errors.is_empty(),
        "{findings:?} {io_errors:?}"
    );
    recorded
}

/// Promote `site` from what was kept and a copy of it with nothing kept (the walks): the same outcome, and when
/// both succeed the same target log dir, file for file and byte for byte. Returns what the first promotion used of
/// the kept facts, and whether it succeeded.
fn promote_both_ways(site: &Site, handover: Handover, copy_name: &str) -> (Vec<&'static str>, bool) {
    promote_both_ways_at(site, handover, copy_name, None)
}

/// [`promote_both_ways`] with a consistent cut at `cut` (ms).
fn promote_both_ways_at(
    site: &Site,
    handover: Handover,
    copy_name: &str,
    cut: Option<i64>,
) -> (Vec<&'static str>, bool) {
    let (used, kept) = promote_against_walk(site, handover, copy_name, cut);
    (used, kept.is_some())
}

/// [`promote_both_ways_at`] that returns the report of the promotion from what was kept (`None`: both refused).
fn promote_against_walk(
    site: &Site,
    handover: Handover,
    copy_name: &str,
    cut: Option<i64>,
) -> (Vec<&'static str>, Option<PromoteReport>) {
    let walked = site.copy(copy_name);
    walked.forget_kept();
    let kept = site.promote_cut(handover, cut, &mut |_| {});
    let walk = walked.promote_cut(handover, cut, &mut |_| {});
    let used = used::under(&site.root);
    // Nothing kept, nothing used; a cut inside the first segment has no segment before it to fold the records of.
    let walk_used = used::under(&walked.root);
    assert!(
        walk_used.is_empty() || (cut.is_some() && walk_used == ["recorded-transactions"]),
        "nothing kept, nothing used: {walk_used:?}"
    );
    let kept = match (kept, walk) {
        (Ok(k), Ok(w)) => {
            let (kept_files, kept_checkpoints) = target_state(&site.root.join("target"));
            let (walked_files, walked_checkpoints) = target_state(&walked.root.join("target"));
            // Named file by file (sizes and digests) before the bytes are compared.
            let summary = |files: &std::collections::BTreeMap<PathBuf, Vec<u8>>| -> Vec<(PathBuf, usize, [u8; 32])> {
                files.iter().map(|(p, b)| (p.clone(), b.len(), sha(b))).collect()
            };
            assert_eq!(
                summary(&kept_files),
                summary(&walked_files),
                "the promoted log dirs differ (kept facts used: {used:?})"
            );
            assert!(kept_files == walked_files);
            assert_eq!(kept_checkpoints, walked_checkpoints);
            for (pk, pw) in k.partitions.iter().zip(&w.partitions) {
                assert_promoted_alike(pk, pw);
            }
            Some(k)
        }
        (Err(Error::Refused { refusals: a }), Err(Error::Refused { refusals: b })) => {
            assert_eq!(a.len(), b.len(), "{a:?} / {b:?}");
            None
        }
        (k, w) => panic!("kept: {k:?}, walked: {w:?}"),
    };
    std::fs::remove_dir_all(&walked.root).unwrap();
    (used, kept)
}

#[tokio::test]
async fn a_tailed_mirror_promoted_from_what_was_kept_matches_the_walks_byte_for_byte() {
    for open_at_end in [false, true] {
        for handover in [Handover::Rename, Handover::Copy] {
            let site = Site::new(Shape::of(open_at_end));
            let mut a = site.appender();
            ship(&site, &mut a).await.unwrap();
            drop(a);
            // What was kept says what the bytes say (`verify --deep`), transactions and epochs included.
            let (findings, io_errors) = crate::direct::verify_kept(&site.mirror());
            assert!(
                findings.is_empty() && io_errors.is_empty(),
                "{findings:#?} {io_errors:?}"
            );
            // Every sealed segment's transactions recorded by its seal, from the batches as they were appended.
            let sealed: usize = site.written.iter().map(|w| w.segments.len() - 1).sum();
            assert_eq!(seal_records_hold(&site), sealed);
            let (used, ok) = promote_both_ways(&site, handover, "walked");
            assert!(ok, "open {open_at_end} {handover:?}");
            // The indexes, the `.txnindex` and the open transactions (none, or one aborted from its tally) from what
            // was kept; partition 0's active segment, all in the target's epoch, settled without a walk when handed
            // over (an open transaction's abort marker is appended to the handed-over file).
            let mut expected = vec!["indexes", "txn-index", "open-transactions"];
            if handover == Handover::Rename {
                expected.push("epochs");
            }
            expected.sort_unstable();
            assert_eq!(used, expected, "open {open_at_end} {handover:?}");
            let report = site.promote(handover).unwrap();
            assert!(report.partitions.iter().all(|p| p.outcome == Outcome::AlreadyPromoted));
        }
    }
}

#[tokio::test]
async fn a_promotion_killed_after_abort_markers_were_appended_to_handed_over_segments_finishes_with_the_same_bytes() {
    let site = Site::shipped(Shape::of(true)).await;
    // The uninterrupted promotion, and every step a promotion passes.
    let whole = site.copy("whole");
    let mut steps = Vec::new();
    let report = whole.promote_with(Handover::Rename, &mut |s| steps.push(s)).unwrap();
    assert!(report.partitions.iter().all(|p| p.transactions_aborted.len() == 1));
    let reference = target_state(&whole.root.join("target"));
    assert!(
        steps.iter().any(|s| matches!(s, super::journal::Step::Built(_))),
        "{steps:?}"
    );
    for (i, crash_at) in steps.into_iter().enumerate() {
        let crashed = site.copy(&format!("crashed-{i}"));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crashed.promote_with(Handover::Rename, &mut |s| {
                if s == crash_at {
                    panic!("crash at {s:?}");
                }
            })
        }));
        assert!(outcome.is_err(), "the hook fired at {crash_at:?}");
        // The rerun cuts each handed-over last segment back to the mirror's bytes and appends the same markers.
        crashed.promote(Handover::Rename).unwrap();
        assert!(
            target_state(&crashed.root.join("target")) == reference,
            "crash at {crash_at:?}"
        );
        std::fs::remove_dir_all(&crashed.root).unwrap();
    }
    std::fs::remove_dir_all(&whole.root).unwrap();
}

/// Every state file's open transactions edited by `edit` (a JSON array of them).
fn edit_open_transactions(mirror: &Path, edit: impl Fn(&mut Vec<serde_json::Value>)) {
    for p in 0..2 {
        let path = crate::mirror::state_file(mirror, &format!("{TOPIC}-{p}"));
        let mut state: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(state["open_transactions"].as_array_mut().unwrap());
        std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    }
}

#[tokio::test]
async fn open_transactions_recorded_without_tallies_are_walked_and_a_wrong_tally_is_an_error_for_verify() {
    let site = Site::shipped(Shape::of(true)).await;
    // What an appender that did not tally left: the walk finds the transaction, and the target is the same.
    let untallied = site.copy("untallied");
    edit_open_transactions(&untallied.mirror(), |open| {
        assert_eq!(open.len(), 1, "{open:?}");
        for o in open.iter_mut() {
            o.as_object_mut().unwrap().remove("tally").unwrap();
        }
    });
    let (used, ok) = promote_both_ways(&untallied, Handover::Rename, "untallied-walked");
    assert!(ok);
    assert!(!used.contains(&"open-transactions"), "{used:?}");
    assert!(used.contains(&"txn-index"), "{used:?}");
    // A tally that does not add up to the batches: promotion would trust it, so `verify --deep` says so as an error.
    let lying = site.copy("lying");
    edit_open_transactions(&lying.mirror(), |open| {
        let records = open[0]["tally"]["records"].as_u64().unwrap();
        open[0]["tally"]["records"] = (records + 1).into();
    });
    let (findings, _) = crate::direct::verify_kept(&lying.mirror());
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == segment_format::report::Severity::Error)
        .map(|f| f.to_string())
        .collect();
    assert_eq!(errors.len(), 2, "{findings:#?}");
    assert!(errors.iter().all(|e| e.contains("open transactions")), "{errors:?}");
    for s in [untallied, lying] {
        std::fs::remove_dir_all(&s.root).unwrap();
    }
}

#[test]
fn open_transactions_are_taken_from_the_record_only_where_it_holds_what_the_walk_finds() {
    use segment_format::txn_index::{OpenTransaction, TxnTally};
    let tally = |records| {
        Some(TxnTally {
            producer_epoch: 3,
            records,
            batches: 1,
            bytes: 100,
        })
    };
    let open = |producer_id, first_offset, tally| OpenTransaction {
        producer_id,
        first_offset,
        tally,
    };
    // As promotion aborts them: markers from the end on.
    let open_transactions = |open: &[OpenTransaction], first_base, end| {
        super::tail_kept::tallied(open, first_base, end).map(|t| super::txn_cut::cut_at_end(t, end))
    };
    let both = [open(7, 120, tally(4)), open(5, 100, tally(2))];
    let cut = open_transactions(&both, 50, 200).unwrap();
    // In order of first offset, markers from the end on, the one coordinator epoch of promotion's markers.
    let got: Vec<_> = cut
        .iter()
        .map(|c| {
            (
                c.producer_id,
                c.first_offset,
                c.marker_offset,
                c.records,
                c.producer_epoch,
            )
        })
        .collect();
    assert_eq!(got, vec![(5, 100, 200, 2, 3), (7, 120, 201, 4, 3)]);
    assert!(cut
        .iter()
        .all(|c| c.coordinator_epoch == super::txn_cut::MARKER_COORDINATOR_EPOCH));
    assert_eq!(open_transactions(&[], 50, 200), Some(Vec::new()));
    // Begun before the first segment (the walk would start it at its first batch in the mirror), or untallied.
    assert_eq!(open_transactions(&both, 110, 200), None);
    assert_eq!(open_transactions(&[both[0], open(5, 100, None)], 50, 200), None);
}

/// Every partition's closed log as promotion reads it: the recorded entries (the bytes match the record), each the
/// transaction its marker closed as a walk of the partition from its first segment finds it. How many there are.
fn closed_logs_hold(site: &Site, partitions: &[i32]) -> usize {
    let mut entries = 0;
    for &p in partitions {
        let name = format!("{TOPIC}-{p}");
        // A partition a kill left without a state, or whose claim or seal carries no facts: nothing to use.
        let Ok(Some(state)) = crate::direct::recorded_active_segment(&site.mirror(), TOPIC, p) else {
            continue;
        };
        let Some(kept) = state.kept.as_ref() else { continue };
        let logged = super::tail_kept::closed_log(kept, &site.mirror(), &name).unwrap();
        assert_eq!(
            logged.len() as u64,
            kept.closed_log.entries,
            "{name}: the log is not the recorded one"
        );
        let listed = segment_format::dir::PartitionDir::open(&site.mirror().join(&name)).unwrap();
        let mut tracker = segment_format::txn_index::TxnTracker::new();
        let mut walked = std::collections::BTreeMap::new();
        for f in &listed.segments {
            segment_format::log::LogFile::open(&f.log)
                .unwrap()
                .scan(|frame| {
                    if let (_, Some(c)) = tracker.on_batch_closing(&frame.info) {
                        walked.insert(c.marker_offset, c);
                    }
                    std::ops::ControlFlow::Continue(())
                })
                .unwrap();
        }
        for c in &logged {
            assert!(
                c.marker_offset >= state.segment_base,
                "{name}: {c:?} below the active segment"
            );
            assert_eq!(Some(c), walked.get(&c.marker_offset), "{name}");
        }
        entries += logged.len();
    }
    entries
}

/// The active segment's index files and closed log as a crash can leave them when their last writes never reached
/// the disk: an entry short (the appender does not fsync them).
fn lose_unsynced_index_writes(site: &Site) {
    for p in 0..2 {
        let Ok(Some(state)) = crate::direct::recorded_active_segment(&site.mirror(), TOPIC, p) else {
            continue;
        };
        let dir = site.mirror().join(format!("{TOPIC}-{p}"));
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            let path = dir.join(segment_file_name(state.segment_base, kind));
            if let Ok(bytes) = std::fs::read(&path) {
                let entry = if kind == SegmentFileKind::Index { 8 } else { 12 };
                // The last entry's write lost: whole entries, just not all of them.
                std::fs::write(&path, &bytes[..bytes.len().saturating_sub(entry)]).unwrap();
            }
        }
        let log = crate::mirror::closed_log_file(&site.mirror(), &format!("{TOPIC}-{p}"));
        if let Ok(bytes) = std::fs::read(&log) {
            let entry = segment_format::closed_log::CLOSED_ENTRY_SIZE;
            std::fs::write(&log, &bytes[..bytes.len().saturating_sub(entry)]).unwrap();
        }
    }
}

/// The appender killed at every step of a chunk, then promoted as the kill left it and after a restart shipped the
/// rest: the walks' bytes every time, also with a consistent cut whose producers' markers follow it (decided by the
/// kept closed transactions, which survive every kill, without reading back from the cut).
#[tokio::test]
async fn an_appender_killed_at_any_step_of_a_chunk_leaves_a_mirror_promoted_as_the_walks_promote_it() {
    let points = [
        FailPoint::TailChunkWritten,
        FailPoint::TailCompanionsWritten,
        FailPoint::TailGroupSynced,
        FailPoint::TailRecorded,
    ];
    // How many times each point is reached in a whole run; how many cuts the kept closed transactions decided.
    let (mut runs, mut cuts, mut cuts_by_closed, mut logged) = (0, 0, 0, 0);
    for point in points {
        let mut nth = 1;
        loop {
            // Smaller than the other test's (every kill costs four promotions), still several segments.
            let site = Site::new(Shape {
                open_at_end: true,
                rounds: 2,
                segment_bytes: 40_000,
                value_bytes: 1200,
                tail_batches: 6,
                rising: true,
            });
            let armed = std::sync::Arc::new(Armed::new(point, nth));
            let mut a = site.appender().with_failpoint(armed.clone());
            let shipped = ship(&site, &mut a).await;
            drop(a);
            if !armed.fired() {
                shipped.unwrap();
                break;
            }
            assert!(shipped.is_err(), "{point:?} #{nth}");
            // Every other kill also loses the index writes the page cache held; the others leave the closed logs
            // as promotion reads them.
            if nth % 2 == 0 {
                lose_unsynced_index_writes(&site);
            } else {
                logged += closed_logs_hold(&site, &[0, 1]);
            }
            // Promoted as the crash left it (refused alike where the `.log` holds unacknowledged bytes)...
            seal_records_hold(&site);
            let (_, promoted) = promote_both_ways(&site, Handover::Rename, "walked-now");
            if !promoted {
                // ...and after a restart that ships the rest: the seals after it read the file for their records.
                let mut a = site.appender();
                ship(&site, &mut a).await.unwrap();
                drop(a);
                let sealed: usize = site.written.iter().map(|w| w.segments.len() - 1).sum();
                assert_eq!(seal_records_hold(&site), sealed, "{point:?} #{nth}");
                logged += closed_logs_hold(&site, &[0, 1]);
                // A consistent cut before the last round's idempotent batch (24 offsets before the end: the batch
                // of producer 1 before it): producer 1's transaction of that round and producer 0's (its only one)
                // are open at the cut, their markers after it.
                let cut_site = site.copy("cut");
                let end = site.written[0].log_end_offset;
                let (used, ok) = promote_both_ways_at(
                    &cut_site,
                    Handover::Rename,
                    "walked-cut",
                    Some(1_700_000_000_000 + end - 24),
                );
                assert!(ok, "{point:?} #{nth}");
                cuts += 1;
                cuts_by_closed += usize::from(used.contains(&"closed-transactions") && !used.contains(&"read-back"));
                std::fs::remove_dir_all(&cut_site.root).unwrap();
                let (used, ok) = promote_both_ways(&site, Handover::Rename, "walked-later");
                assert!(ok, "{point:?} #{nth}");
                assert!(used.contains(&"txn-index"), "{point:?} #{nth}: {used:?}");
                // The open transaction's tally survived the kill: aborted from the record, as the walk aborts it.
                assert!(used.contains(&"open-transactions"), "{point:?} #{nth}: {used:?}");
            }
            runs += 1;
            nth += 1;
        }
    }
    assert!(runs > 40, "{runs} kill points");
    // The closed transactions survived every kill: each cut decided without reading back.
    assert!(cuts > 20 && cuts_by_closed == cuts, "{cuts_by_closed} of {cuts} cuts");
    // The closed logs, cut back or started over after each kill, name their markers' transactions as the walk does.
    assert!(logged > 20, "{logged} closed log entries");
    eprintln!("{runs} kill points, {cuts} cuts, {cuts_by_closed} decided by the kept closed transactions");
}

/// Every state file of the `partitions` partitions under `mirror` without what the appender kept, and the catalog
/// beside it without the seals' transaction records: a mirror an older appender wrote.
fn forget_kept_in(mirror: &Path, partitions: i32) {
    // And the seals' records of each segment's transactions, which an older appender did not write either.
    let catalog = mirror.with_file_name("catalog.sqlite");
    if catalog.exists() {
        let db = rusqlite::Connection::open(&catalog).unwrap();
        db.execute("UPDATE segments SET txn_ends = NULL", []).unwrap();
    }
    for p in 0..partitions {
        let path = crate::mirror::state_file(mirror, &format!("{TOPIC}-{p}"));
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let mut state: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        state.as_object_mut().unwrap().remove("kept");
        std::fs::write(&path, serde_json::to_vec(&state).unwrap()).unwrap();
    }
}

/// Segment size of the benchmark's mirror: Kafka's default `segment.bytes`, so that up to 1 GiB per partition
/// stays in its active segment.
const BENCH_SEGMENT_BYTES: u64 = 1 << 30;

/// How a benchmark partition ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BenchEnd {
    /// Data batches only.
    Data,
    /// Four batches of one transactional producer, no marker after them: open at the end.
    OpenTransaction,
    /// The same four batches, then their commit marker: a cut inside them leaves the producer open at the cut with
    /// its marker after it, read backwards from the cut. With `earlier`, another transaction of the producer is
    /// committed just before (a producer committing often: the reading back stops at its marker); without, this is
    /// the producer's only one (the reading back goes to the segment's base).
    CommittedTransaction { earlier: bool },
    /// The same four batches end a segment, which is then sealed; the next (active) segment holds their commit
    /// marker, another transaction of the producer (one batch) and its commit, and two data batches: a cut inside the
    /// four leaves the producer open at the cut with its first marker after it in a later segment and another after
    /// that, decided by the sealed segment's record (a build without that rule reads back to the segment's base).
    CommittedAfterRoll,
    /// The same four batches, their commit marker, one more transaction of the producer (one batch) and its commit,
    /// then two data batches, all in the active segment: a cut inside the four leaves the producer open at the cut
    /// with two markers after it, decided by the closed log (without it, read back to the segment's base).
    CommittedTwice,
    /// [`BenchEnd::CommittedTwice`], then the segment sealed and two data batches in the next (active) one: a cut
    /// inside the four lies in a sealed segment with two of the producer's markers after it there, decided by the
    /// segment's log (without it, read back to the segment's base).
    CommittedTwiceThenRoll,
}

/// Appends `bytes` of 16 KiB batches (four 4 KiB records, all in the target's epoch: nothing to restamp, as in a
/// source whose leader never changed) to partition `partition` through `a`, in 1 MiB chunks committed eight at a
/// time; a segment reaching [`BENCH_SEGMENT_BYTES`] is sealed and the next one started, the last stays active.
async fn feed_bench_partition(a: &mut TailAppender, partition: i32, bytes: u64, end: BenchEnd) {
    let value = vec![b'x'; 4096];
    let (mut next, mut written) = (0i64, 0u64);
    let mut segment = BenchSegment::new(0);
    let mut group = Vec::new();
    while written < bytes {
        let mut chunk = Vec::with_capacity(1 << 20);
        while chunk.len() < 1 << 20 && written + (chunk.len() as u64) < bytes {
            let batch = bench_data_batch(next, &value);
            if segment.position + (chunk.len() + batch.len()) as u64 > BENCH_SEGMENT_BYTES {
                break;
            }
            chunk.extend_from_slice(&batch);
            next += 4;
        }
        if chunk.is_empty() {
            // The segment is full: what is pending made durable, then sealed as the shipper would seal it.
            a.apply_chunks(&std::mem::take(&mut group)).await.unwrap();
            let full = std::mem::replace(&mut segment, BenchSegment::new(next));
            a.apply_seal(&full.seal(partition)).await.unwrap();
            continue;
        }
        written += chunk.len() as u64;
        group.push(segment.append(partition, chunk));
        if group.len() == 8 {
            a.apply_chunks(&std::mem::take(&mut group)).await.unwrap();
        }
    }
    if matches!(end, BenchEnd::CommittedTwice | BenchEnd::CommittedTwiceThenRoll) {
        let mut chunk = Vec::new();
        for sequence in 0..4 {
            chunk.extend_from_slice(&bench_txn_batch(next, sequence * 4, &value));
            next += 4;
        }
        chunk.extend_from_slice(&commit_marker(next));
        next += 1;
        group.push(segment.append(partition, chunk));
        // The second commit and the data after it in a later chunk: the closed log appended to, not written whole.
        group.push(segment.append(partition, committed_again_then_data(&mut next, &value)));
        a.apply_chunks(&std::mem::take(&mut group)).await.unwrap();
        if end == BenchEnd::CommittedTwiceThenRoll {
            let sealed = std::mem::replace(&mut segment, BenchSegment::new(next));
            a.apply_seal(&sealed.seal(partition)).await.unwrap();
            let mut chunk = bench_data_batch(next, &value);
            chunk.extend_from_slice(&bench_data_batch(next + 4, &value));
            a.apply_chunks(&[segment.append(partition, chunk)]).await.unwrap();
        }
        return;
    }
    if end == BenchEnd::CommittedAfterRoll {
        let mut chunk = Vec::new();
        for sequence in 0..4 {
            chunk.extend_from_slice(&bench_txn_batch(next, sequence * 4, &value));
            next += 4;
        }
        group.push(segment.append(partition, chunk));
        a.apply_chunks(&std::mem::take(&mut group)).await.unwrap();
        let sealed = std::mem::replace(&mut segment, BenchSegment::new(next));
        a.apply_seal(&sealed.seal(partition)).await.unwrap();
        // The commit, then one more transaction of the producer, committed: the appender's entry for the producer
        // then names the later commit, and only the sealed segment's record describes the transaction across the cut.
        let mut chunk = commit_marker(next);
        next += 1;
        chunk.extend_from_slice(&committed_again_then_data(&mut next, &value));
        a.apply_chunks(&[segment.append(partition, chunk)]).await.unwrap();
        return;
    }
    if end != BenchEnd::Data {
        let mut chunk = Vec::new();
        let mut sequence_base = 0;
        if end == (BenchEnd::CommittedTransaction { earlier: true }) {
            for sequence in 0..4 {
                chunk.extend_from_slice(&bench_txn_batch(next, sequence * 4, &value));
                next += 4;
            }
            chunk.extend_from_slice(&commit_marker(next));
            next += 1;
            sequence_base = 16;
        }
        for sequence in 0..4 {
            chunk.extend_from_slice(&bench_txn_batch(next, sequence_base + sequence * 4, &value));
            next += 4;
        }
        if matches!(end, BenchEnd::CommittedTransaction { .. }) {
            chunk.extend_from_slice(&commit_marker(next));
        }
        group.push(segment.append(partition, chunk));
    }
    a.apply_chunks(&group).await.unwrap();
}

/// From `next` on (moved past them): one more transaction of the benchmark's producer (one batch, sequence 16) and its
/// commit, then two data batches.
fn committed_again_then_data(next: &mut i64, value: &[u8]) -> Vec<u8> {
    let mut bytes = bench_txn_batch(*next, 16, value);
    *next += 4;
    bytes.extend_from_slice(&commit_marker(*next));
    *next += 1;
    for _ in 0..2 {
        bytes.extend_from_slice(&bench_data_batch(*next, value));
        *next += 4;
    }
    bytes
}

/// The segment a benchmark partition appends to: where it ends, and what its seal says of it.
struct BenchSegment {
    base: i64,
    position: u64,
    digest: sha2::Sha256,
    offsets: segment_format::index::OffsetIndexBuilder,
    times: segment_format::index::TimeIndexBuilder,
}

impl BenchSegment {
    fn new(base: i64) -> BenchSegment {
        use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder, DEFAULT_INDEX_INTERVAL_BYTES};
        BenchSegment {
            base,
            position: 0,
            digest: sha2::Sha256::new(),
            offsets: OffsetIndexBuilder::new(base, DEFAULT_INDEX_INTERVAL_BYTES),
            times: TimeIndexBuilder::new(base, DEFAULT_INDEX_INTERVAL_BYTES),
        }
    }

    /// The chunk of `bytes` (whole batches) appended at the segment's end, noted for its seal.
    fn append(&mut self, partition: i32, bytes: Vec<u8>) -> Chunk {
        for frame in scan_frames(&bytes, self.position) {
            let info = frame.unwrap().info;
            self.offsets.push(&info).unwrap();
            self.times.push(&info).unwrap();
        }
        self.digest.update(&bytes);
        let at = self.position;
        self.position += bytes.len() as u64;
        chunk_at(partition, self.base, at, bytes)
    }

    /// Its seal, as the shipper sends it.
    fn seal(mut self, partition: i32) -> SegmentSeal {
        self.times.seal();
        SegmentSeal {
            partition: pref(partition),
            segment_base: self.base,
            final_size: self.position,
            log_sha256: self.digest.finalize().into(),
            companions: vec![
                inline(CompanionKind::OffsetIndex, self.offsets.to_bytes()),
                inline(CompanionKind::TimeIndex, self.times.to_bytes()),
            ],
        }
    }
}

/// One data batch at `offset` (no producer): four records of `value`.
fn bench_data_batch(offset: i64, value: &[u8]) -> Vec<u8> {
    BatchBuilder::new(offset)
        .partition_leader_epoch(TARGET_EPOCH)
        .records((0..4).map(|i| RecordSpec::new(i, 1_700_000_000_000 + offset).with_value(value.to_vec())))
        .build()
}

/// One batch at `offset` of the benchmark's transactional producer, four records of `value` from `sequence` on.
fn bench_txn_batch(offset: i64, sequence: i32, value: &[u8]) -> Vec<u8> {
    BatchBuilder::new(offset)
        .partition_leader_epoch(TARGET_EPOCH)
        .producer(4242, 0, sequence)
        .transactional(true)
        .records((0..4).map(|i| RecordSpec::new(i, 1_700_000_000_000 + offset).with_value(value.to_vec())))
        .build()
}

/// The benchmark producer's COMMIT marker at `offset`.
fn commit_marker(offset: i64) -> Vec<u8> {
    let marker = EndTxnMarker {
        control_type: ControlType::Commit,
        coordinator_epoch: 0,
    };
    segment_format::control::end_txn_marker_batch(offset, 1_700_000_000_000 + offset, TARGET_EPOCH, 4242, 0, marker)
}

/// The chunk of `bytes` at `position` of segment `base` of `partition`.
fn chunk_at(partition: i32, base: i64, position: u64, bytes: Vec<u8>) -> Chunk {
    Chunk {
        partition: pref(partition),
        segment_base: base,
        position,
        bytes: Bytes::from(bytes),
        crcs: Default::default(),
    }
}

/// Writes the fixture `tools/bench/tail_promote.sh` promotes (not a test of its own): a tail-fed mirror of
/// `SEGMIRROR_BENCH_MIB` MiB in `SEGMIRROR_BENCH_PARTITIONS` partitions under `SEGMIRROR_BENCH_DIR` (`mirror/`,
/// `catalog.sqlite`, and a stopped target log dir `target/` with the topic created), written by the tail appender;
/// with `SEGMIRROR_BENCH_FORGET_KEPT=1` its state files then lose what was kept (what an older appender wrote).
#[tokio::test]
#[ignore = "writes the tail promotion benchmark's fixture (tools/bench/tail_promote.sh)"]
async fn bench_fixture() {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let dir = PathBuf::from(env("SEGMIRROR_BENCH_DIR"));
    let mib: u64 = env("SEGMIRROR_BENCH_MIB").parse().unwrap();
    let partitions: i32 = env("SEGMIRROR_BENCH_PARTITIONS").parse().unwrap();
    let mirror = dir.join("mirror");
    std::fs::create_dir_all(&mirror).unwrap();
    write_target(
        &dir.join("target"),
        1,
        &(0..partitions).collect::<Vec<_>>(),
        TARGET_EPOCH,
    );
    let catalog = TailCatalog::open(Catalog::open(dir.join("catalog.sqlite")).unwrap(), LINK).unwrap();
    let mut a = TailAppender::open_with_catalog(&mirror, catalog).unwrap();
    let end = match std::env::var("SEGMIRROR_BENCH_OPEN_TXN").as_deref() {
        Ok("1") => BenchEnd::OpenTransaction,
        Ok("commit") => BenchEnd::CommittedTransaction { earlier: true },
        Ok("commit-only") => BenchEnd::CommittedTransaction { earlier: false },
        Ok("commit-after-roll") => BenchEnd::CommittedAfterRoll,
        Ok("commit-twice") => BenchEnd::CommittedTwice,
        Ok("commit-twice-roll") => BenchEnd::CommittedTwiceThenRoll,
        _ => BenchEnd::Data,
    };
    for p in 0..partitions {
        feed_bench_partition(&mut a, p, (mib << 20) / partitions as u64, end).await;
    }
    drop(a);
    if std::env::var("SEGMIRROR_BENCH_FORGET_KEPT").is_ok_and(|v| v == "1") {
        forget_kept_in(&mirror, partitions);
    }
}

/// A consistent cut inside a transaction whose commit marker follows the cut, of a tail-fed mirror: the appender's
/// record of each producer's last closed transaction says where it began and what it held, so nothing before the
/// cut is read back (the producer's only transaction in the segment used to be read back to the segment's base),
/// and the promoted log dir is byte for byte the walk's, the transaction aborted at the cut. With an earlier commit
/// of the producer just before, the same.
#[tokio::test]
async fn a_cut_inside_a_transaction_committed_after_it_is_decided_by_the_kept_closed_transaction() {
    for earlier in [false, true] {
        let site = Site::empty(&[0, 1]);
        let mut a = site.appender();
        for p in 0..2 {
            feed_bench_partition(&mut a, p, 256 << 10, BenchEnd::CommittedTransaction { earlier }).await;
        }
        drop(a);
        // The producer's last four batches (four records each) and their marker end the log: cut before the third.
        let state = crate::direct::recorded_active_segment(&site.mirror(), TOPIC, 0)
            .unwrap()
            .unwrap();
        let end = state.next_offset.unwrap();
        let closed = &state.kept.as_ref().expect("kept facts").closed;
        assert_eq!(
            closed
                .iter()
                .map(|c| (c.marker_offset, c.first_offset))
                .collect::<Vec<_>>(),
            vec![(end - 1, Some(end - 17))]
        );
        let t = 1_700_000_000_000 + end - 13;
        // The walk's log dir byte for byte (`promote_against_walk`).
        let (used, kept) = promote_against_walk(&site, Handover::Rename, &format!("walked-{earlier}"), Some(t));
        assert!(used.contains(&"closed-transactions"), "{used:?}");
        assert!(!used.contains(&"read-back"), "{used:?}");
        for k in &kept.expect("promoted").partitions {
            // Cut before the third batch, the abort marker there.
            assert_eq!(k.consistent_cut.as_ref().map(|c| c.cut_offset), Some(end - 9));
            assert_eq!(k.log_end_offset, Some(end - 8));
            assert_eq!(k.transactions_aborted.len(), 1, "{k:?}");
        }
    }
}

/// A consistent cut inside a transaction of a producer that commits twice after the cut, in a tail-fed mirror's
/// active segment: the closed log names the first commit after the cut with where its transaction began and what
/// it held, so nothing before the cut is read back (each producer's last closed transaction names the second
/// commit: without the log, the producer's only earlier event is the segment's base). The promoted log dir is byte
/// for byte the walk's. With the log's unsynced bytes lost in a crash, or damaged, it is not used: read back, the
/// same bytes.
#[tokio::test]
async fn a_cut_before_two_commits_of_its_producer_is_decided_by_the_closed_log() {
    let site = Site::empty(&[0, 1]);
    let mut a = site.appender();
    for p in 0..2 {
        feed_bench_partition(&mut a, p, 256 << 10, BenchEnd::CommittedTwice).await;
    }
    drop(a);
    // The four batches (end - 30 .. end - 14), commit, one batch, commit, two data batches.
    let state = crate::direct::recorded_active_segment(&site.mirror(), TOPIC, 0)
        .unwrap()
        .unwrap();
    let end = state.next_offset.unwrap();
    let kept = state.kept.as_ref().expect("kept facts");
    assert_eq!(
        kept.closed.iter().map(|c| c.marker_offset).collect::<Vec<_>>(),
        vec![end - 9]
    );
    let log = crate::mirror::closed_log_file(&site.mirror(), &format!("{TOPIC}-0"));
    let logged = segment_format::closed_log::parse(&std::fs::read(&log).unwrap()).unwrap();
    assert_eq!(kept.closed_log.entries, 2);
    assert_eq!(
        logged
            .iter()
            .map(|c| (c.marker_offset, c.first_offset, c.tally.map(|t| t.batches)))
            .collect::<Vec<_>>(),
        vec![(end - 14, Some(end - 30), Some(4)), (end - 9, Some(end - 13), Some(1))]
    );
    // Cut before the third of the four batches. The log's last entry lost (written without an fsync), or a byte of
    // it changed: not the recorded one.
    let t = 1_700_000_000_000 + end - 26;
    let report = decided_by_else_read_back(&site, t, "closed-log", |copy, lost| {
        for p in 0..2 {
            let path = crate::mirror::closed_log_file(&copy.mirror(), &format!("{TOPIC}-{p}"));
            let mut bytes = std::fs::read(&path).unwrap();
            if lost {
                bytes.truncate(segment_format::closed_log::CLOSED_ENTRY_SIZE);
            } else {
                bytes[10] ^= 1;
            }
            std::fs::write(&path, bytes).unwrap();
        }
    });
    for k in &report.partitions {
        assert_eq!(k.consistent_cut.as_ref().map(|c| c.cut_offset), Some(end - 22));
        assert_eq!(k.transactions_aborted.len(), 1, "{k:?}");
        assert_eq!(k.transactions_aborted[0].first_offset, end - 30);
    }
}

/// `site` promoted with a consistent cut at `t`: decided by `by` with nothing read back, and the walk's log dir byte
/// for byte (`promote_against_walk`); then two copies with what `by` read harmed (`harm(copy, lost)`: lost, or a
/// byte changed) read back instead, to the same log dir. The report of the first promotion.
fn decided_by_else_read_back(site: &Site, t: i64, by: &str, harm: impl Fn(&Site, bool)) -> PromoteReport {
    let damaged = site.copy("damaged");
    let lost = site.copy("lost");
    let (used, report) = promote_against_walk(site, Handover::Rename, "walked", Some(t));
    assert!(used.contains(&by), "{used:?}");
    assert!(!used.contains(&"read-back"), "{used:?}");
    let target = target_state(&site.root.join("target"));
    for (copy, is_lost) in [(&lost, true), (&damaged, false)] {
        harm(copy, is_lost);
        copy.promote_cut(Handover::Rename, Some(t), &mut |_| {}).unwrap();
        let used = used::under(&copy.root);
        assert!(!used.contains(&by) && used.contains(&"read-back"), "{used:?}");
        assert!(
            target_state(&copy.root.join("target")) == target,
            "the promoted log dirs differ"
        );
    }
    for copy in [lost, damaged] {
        std::fs::remove_dir_all(&copy.root).unwrap();
    }
    report.expect("promoted")
}

/// The same shape sealed, two data batches after it in the next segment: the cut lies in a sealed segment, the
/// producer's first marker after it is not its last there, so neither the appender's entry (its last marker) nor the
/// seal's record (its last marker in the segment) names it; the segment's log, which the seal wrote from the closed
/// log, does. Nothing is read back, and the promoted log dir is the walk's byte for byte; with the segment's log
/// lost or a byte of it changed, the cut reads back, to the same bytes.
#[tokio::test]
async fn a_cut_in_a_sealed_segment_before_two_commits_of_its_producer_is_decided_by_the_segments_log() {
    let site = Site::empty(&[0, 1]);
    let mut a = site.appender();
    for p in 0..2 {
        feed_bench_partition(&mut a, p, 256 << 10, BenchEnd::CommittedTwiceThenRoll).await;
    }
    drop(a);
    assert!(seal_records_hold(&site) >= 2);
    // The four batches (end - 38 .. end - 22), commit, one batch, commit, two data batches; sealed; two data
    // batches (end - 8 .. end).
    let state = crate::direct::recorded_active_segment(&site.mirror(), TOPIC, 0)
        .unwrap()
        .unwrap();
    let end = state.next_offset.unwrap();
    let sealed_base = state.segment_base;
    assert_eq!(sealed_base, end - 8);
    let catalog = Catalog::open(site.catalog_path()).unwrap();
    let p0 = catalog
        .partitions(LINK)
        .unwrap()
        .into_iter()
        .find(|p| p.key.partition == 0)
        .unwrap();
    let recorded = catalog.installed_txn_ends(p0.id).unwrap();
    let (last_sealed, (_, ends)) = recorded.range(..sealed_base).next_back().unwrap();
    let ends = ends.clone().expect("the seal's record");
    assert_eq!(ends.log.map(|l| l.entries), Some(2));
    let dir = site.mirror().join(format!("{TOPIC}-0"));
    let logged = crate::segment_log::read(&dir, *last_sealed, ends.log.unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        logged
            .iter()
            .map(|c| (c.marker_offset, c.whole, c.data.map(|(first, t)| (first, t.batches))))
            .collect::<Vec<_>>(),
        vec![
            (end - 22, true, Some((end - 38, 4))),
            (end - 17, true, Some((end - 21, 1)))
        ]
    );
    // Cut before the third of the four batches. The segments' logs lost, or a byte of each changed.
    let t = 1_700_000_000_000 + end - 34;
    let report = decided_by_else_read_back(&site, t, "segment-log", |copy, lost| {
        for p in 0..2 {
            let dir = crate::mirror::segment_logs_dir(&copy.mirror(), &format!("{TOPIC}-{p}"));
            for file in std::fs::read_dir(&dir).unwrap() {
                let path = file.unwrap().path();
                if lost {
                    std::fs::remove_file(&path).unwrap();
                } else {
                    let mut bytes = std::fs::read(&path).unwrap();
                    bytes[10] ^= 1;
                    std::fs::write(&path, bytes).unwrap();
                }
            }
        }
    });
    for k in &report.partitions {
        assert_eq!(k.consistent_cut.as_ref().map(|c| c.cut_offset), Some(end - 30));
        assert_eq!(k.transactions_aborted.len(), 1, "{k:?}");
        assert_eq!(k.transactions_aborted[0].first_offset, end - 38);
    }
}

/// The appender killed once its closed log holds a chunk's entry and before the chunk is recorded: the next
/// session cuts the log back to the recorded entries and appends the chunk's again. Where the crash also lost the
/// log's unsynced bytes (they no longer begin with the recorded entries), the log starts over from the next chunk.
/// Either way it holds what the record says, each entry the walk's.
#[tokio::test]
async fn a_closed_log_is_cut_back_or_started_over_after_a_kill() {
    for lost in [false, true] {
        let site = Site::empty(&[0]);
        let value = vec![b'x'; 100];
        // Each chunk: one transactional batch (four offsets) and its commit.
        let committed = |offset: i64| {
            let mut chunk = bench_txn_batch(offset, i32::try_from(offset).unwrap(), &value);
            chunk.extend_from_slice(&commit_marker(offset + 4));
            chunk
        };
        let mut segment = BenchSegment::new(0);
        let first = segment.append(0, committed(0));
        let second = segment.append(0, committed(5));
        let third = segment.append(0, committed(10));
        let armed = std::sync::Arc::new(Armed::new(FailPoint::TailCompanionsWritten, 2));
        let mut a = site.appender().with_failpoint(armed.clone());
        a.apply_chunks(std::slice::from_ref(&first)).await.unwrap();
        assert!(a.apply_chunks(std::slice::from_ref(&second)).await.is_err());
        assert!(armed.fired());
        drop(a);
        let log = crate::mirror::closed_log_file(&site.mirror(), &format!("{TOPIC}-0"));
        let entry = segment_format::closed_log::CLOSED_ENTRY_SIZE;
        assert_eq!(
            std::fs::read(&log).unwrap().len(),
            2 * entry,
            "the second chunk's entry, not recorded"
        );
        if lost {
            std::fs::write(&log, []).unwrap();
        }
        // The shipper resends from the recorded position.
        let mut a = site.appender();
        a.apply_chunks(&[second]).await.unwrap();
        a.apply_chunks(&[third]).await.unwrap();
        drop(a);
        let logged = closed_logs_hold(&site, &[0]);
        assert_eq!(logged, if lost { 2 } else { 3 }, "lost {lost}");
    }
}

/// A consistent cut inside a sealed segment, at every batch of one, where a producer's transaction runs on past the
/// segment's end (producer 0 ends one every third round): a producer whose first marker after the cut lies in a
/// later segment stands at the cut as the segment's seal record says it stands at the segment's end, less its
/// batches after the cut there; the promoted log dir is the walk's, byte for byte.
#[tokio::test]
async fn a_cut_before_a_segment_end_that_a_transaction_runs_past_is_decided_by_the_seal_record() {
    let shape = Shape {
        rising: true,
        ..Shape::of(true)
    };
    let site = Site::shipped(shape).await;
    let w = &site.written[0];
    assert!(w.segments.len() >= 3, "{:?}", w.segments);
    let (mut cuts, mut at_segment_end) = (0, 0);
    for pair in w.segments.windows(2).take(w.segments.len() - 2) {
        let (base, end) = (pair[0].base_offset, pair[1].base_offset);
        // A cut at every data batch but the segment's first (markers carry an older timestamp: never the first batch
        // newer than `T`).
        let mut log =
            segment_format::log::LogFile::open(w.dir.join(segment_file_name(base, SegmentFileKind::Log))).unwrap();
        let mut data = Vec::new();
        log.scan(|f| {
            if !f.info.is_control && f.info.base_offset > base {
                data.push(f.info.base_offset);
            }
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        for first_left in data {
            assert!(first_left < end);
            let cut_site = site.copy("cut");
            let (used, ok) = promote_both_ways_at(
                &cut_site,
                Handover::Rename,
                "walked-cut",
                Some(1_700_000_000_000 + first_left - 1),
            );
            assert!(ok, "cut at {first_left}");
            cuts += 1;
            at_segment_end += usize::from(used.contains(&"open-at-segment-end"));
            std::fs::remove_dir_all(&cut_site.root).unwrap();
        }
    }
    assert!(cuts > 10 && at_segment_end > 2, "{at_segment_end} of {cuts} cuts");
}

/// A consistent cut of a tailed mirror inside its active segment (a transaction open at the cut) and inside a
/// sealed segment: handed over and cut back, the kept companions cut back with it, the same log dir byte for byte as
/// a copy that derives every companion from the kept bytes; and after a crash at every step of the handover, the
/// same again.
#[tokio::test]
async fn a_consistent_cut_hands_the_cut_segment_over_and_cuts_it_back_to_what_a_copy_keeps() {
    let shape = Shape {
        rising: true,
        ..Shape::of(true)
    };
    let site = Site::shipped(shape).await;
    let w = &site.written[0];
    let sealed = w.segments[w.segments.len() / 2].base_offset;
    assert!(w.segments.len() >= 3, "{:?}", w.segments);
    // Inside the active segment, between the two batches of the transaction left open at the end (the last three
    // batches, of two records each, are that transaction's, an idempotent one and that transaction's again); and
    // inside a sealed segment. Every record's timestamp is its batch's base offset past 1_700_000_000_000.
    for (name, first_left) in [("active", w.log_end_offset - 4), ("sealed", sealed + 5)] {
        let t = 1_700_000_000_000 + first_left - 1;
        let copied = site.copy(&format!("copied-{name}"));
        let copy = copied.promote_cut(Handover::Copy, Some(t), &mut |_| {}).unwrap();
        let reference = target_state(&copied.root.join("target"));
        let renamed = site.copy(&format!("renamed-{name}"));
        let mut steps = Vec::new();
        let rename = renamed
            .promote_cut(Handover::Rename, Some(t), &mut |s| steps.push(s))
            .unwrap();
        for (c, r) in copy.partitions.iter().zip(&rename.partitions) {
            let cut = r.consistent_cut.as_ref().expect("a cut");
            assert!(cut.last_segment_bytes.is_some(), "{name}: {cut:?}");
            assert!(r.handed_over, "{name}");
            assert_eq!(
                (
                    &c.consistent_cut,
                    c.log_end_offset,
                    &c.transactions_aborted,
                    c.log_bytes
                ),
                (
                    &r.consistent_cut,
                    r.log_end_offset,
                    &r.transactions_aborted,
                    r.log_bytes
                ),
                "{name}"
            );
        }
        // The transactions open at the cut never from a walk from the first segment; the active segment's indexes
        // the appender's, cut back.
        // Inside the active segment only data follows the cut: the appender's open transactions and the batches after
        // the cut tell; in a sealed one markers follow, and those producers are read backwards from the cut.
        let used = used::under(&renamed.root);
        assert!(used.contains(&"transactions-from-the-end"), "{name}: {used:?}");
        if name == "active" {
            assert!(rename.partitions.iter().any(|p| !p.transactions_aborted.is_empty()));
            assert!(used.contains(&"indexes") && used.contains(&"txn-index"), "{used:?}");
        }
        assert!(
            target_state(&renamed.root.join("target")) == reference,
            "{name}: the handed-over cut differs from the copy"
        );
        let verified = segment_format::verify::verify_paths(
            &[renamed.root.join("target")],
            &segment_format::verify::VerifyOptions {
                depth: segment_format::verify::Depth::Deep,
                strictness: segment_format::verify::Strictness::Strict,
            },
            &segment_format::verify::NoProgress,
        );
        assert!(verified.io_errors.is_empty(), "{name}: {:?}", verified.io_errors);
        assert!(verified.findings.is_empty(), "{name}: {:#?}", verified.findings);
        for (i, crash_at) in steps.into_iter().enumerate() {
            let crashed = site.copy(&format!("crashed-{name}-{i}"));
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                crashed.promote_cut(Handover::Rename, Some(t), &mut |s| {
                    if s == crash_at {
                        panic!("crash at {s:?}");
                    }
                })
            }));
            assert!(outcome.is_err(), "the hook fired at {crash_at:?}");
            crashed.promote_cut(Handover::Rename, Some(t), &mut |_| {}).unwrap();
            assert!(
                target_state(&crashed.root.join("target")) == reference,
                "{name}: crash at {crash_at:?}"
            );
            std::fs::remove_dir_all(&crashed.root).unwrap();
        }
        // Killed at every rename, cut-back and restamp inside the builds: the rerun finishes with the same bytes.
        let mut cut_backs = 0;
        for point in [
            FailPoint::HandoverRenamed,
            FailPoint::HandoverCutBack,
            FailPoint::HandoverRestamped,
        ] {
            for nth in 1.. {
                let killed = site.copy(&format!("killed-{name}-{point:?}-{nth}"));
                let armed = std::sync::Arc::new(Armed::new(point, nth));
                let outcome = killed.promote_killed(Handover::Rename, Some(t), Some(armed.clone()), &mut |_| {});
                let fired = armed.fired();
                if fired {
                    assert!(matches!(outcome, Err(Error::Injected(p)) if p == point), "{outcome:?}");
                    cut_backs += usize::from(point == FailPoint::HandoverCutBack);
                    killed.promote_cut(Handover::Rename, Some(t), &mut |_| {}).unwrap();
                } else {
                    outcome.unwrap();
                }
                assert!(
                    target_state(&killed.root.join("target")) == reference,
                    "{name}: killed at {point:?} {nth}"
                );
                std::fs::remove_dir_all(&killed.root).unwrap();
                if !fired {
                    break;
                }
            }
        }
        assert_eq!(cut_backs, 2, "{name}: one cut segment per partition");
        std::fs::remove_dir_all(&copied.root).unwrap();
        std::fs::remove_dir_all(&renamed.root).unwrap();
    }
}
