//! Truncations of a tailed mirror: inside the active segment, at its base, into a sealed segment (which becomes the
//! active one again, the later ones removed whole), refused at the log start and on hostile evidence; archive,
//! catalog and state after each crash point of the protocol.

use std::sync::Arc;

use segment_format::log::scan_frames;
use segmirror_catalog::{Catalog, TruncationKind};
use segmirror_transport::direct::payload::{LogEnd, Truncate, TruncateMode};
use segmirror_transport::direct::session::ChunkApplier;

use super::tests::{boundaries, chunk, chunks_of, fixture, mirror_log, pref, seal_of, Fixture};
use super::*;
use crate::failpoint::{Armed, FailPoint};

const LINK: &str = "tail-link";

fn catalogs(dir: &Path) -> (Catalog, Catalog) {
    let path = dir.join("catalog.sqlite");
    (Catalog::open(&path).unwrap(), Catalog::open(&path).unwrap())
}

fn open(f: &Fixture, catalog: Catalog) -> TailAppender {
    TailAppender::open_with_catalog(&f.mirror, TailCatalog::open(catalog, LINK).unwrap()).unwrap()
}

/// Base offset of the batch at byte `at` of `bytes`.
fn base_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// One past the last offset of `bytes`.
fn end_of(bytes: &[u8]) -> i64 {
    scan_frames(bytes, 0)
        .map(|f| f.unwrap().info.last_offset)
        .last()
        .unwrap()
        + 1
}

/// The mirror: the source's first segment sealed, its second appended whole and not sealed (the active one).
async fn mirrored(f: &Fixture, a: &mut TailAppender) {
    a.durable_positions().await.unwrap();
    let (base0, bytes0) = &f.segs[0];
    for c in chunks_of(*base0, bytes0, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base0, bytes0, true)).await.unwrap();
    let (base1, bytes1) = &f.segs[1];
    for c in chunks_of(*base1, bytes1, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
}

/// A Truncate of the active segment (the source's second) at its `k`-th batch boundary, with consistent evidence.
fn cut_at(f: &Fixture, k: usize) -> Truncate {
    let (base, bytes) = &f.segs[1];
    let b = boundaries(bytes);
    let to = if b[k] == 0 { *base } else { base_at(bytes, b[k]) };
    Truncate {
        partition: pref(),
        truncate_to: to,
        segment_base: *base,
        position: b[k] as u64,
        mode: TruncateMode::LogEnd,
        mirror_end_offset: end_of(bytes),
        mirror_epoch: 3,
        source_epoch: 3,
        source_end_offset: to,
    }
}

fn refused(e: &segmirror_transport::direct::DirectError, needles: &[&str]) {
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "{n:?} not in: {text}");
    }
}

#[tokio::test]
async fn a_cut_inside_the_active_segment_archives_the_batches_and_continues_there() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (cat, view) = catalogs(tmp.path());
    let mut a = open(&f, cat);
    mirrored(&f, &mut a).await;
    let (base, bytes) = &f.segs[1];
    let b = boundaries(bytes);
    let k = b.len() / 2;
    let t = cut_at(&f, k);
    // The Resume's log end is read off the mirror's bytes.
    let positions = a.durable_positions().await.unwrap();
    let ends = a.log_ends(&positions).await.unwrap().unwrap();
    assert_eq!(
        ends,
        vec![LogEnd {
            end_offset: end_of(bytes),
            last_epoch: 3
        }]
    );

    let at = a.apply_truncate(&t).await.unwrap().expect("a new end");
    assert_eq!((at.segment_base, at.position), (*base, b[k] as u64));
    let log = mirror_log(&f.mirror, *base);
    assert_eq!(std::fs::read(&log).unwrap(), &bytes[..b[k]]);
    // The archive: the removed bytes, raw batches, with a sidecar naming the range.
    let rel = archive_path("orders", 2, t.truncate_to, end_of(bytes));
    let archived = std::fs::read(f.mirror.join(&rel)).unwrap();
    assert_eq!(archived, &bytes[b[k]..]);
    assert!(scan_frames(&archived, 0).all(|fr| fr.is_ok()));
    let sidecar: ArchivedRange =
        serde_json::from_slice(&std::fs::read(f.mirror.join(&rel).with_extension("json")).unwrap()).unwrap();
    assert_eq!((sidecar.from_offset, sidecar.to_offset), (t.truncate_to, end_of(bytes)));
    assert_eq!(sidecar.batches as usize, b.len() - 1 - k);
    assert_eq!(sidecar.sha256.as_deref(), Some(hex(&sha256(&archived)).as_str()));
    // The catalog lists it; nothing is left in the journal.
    let rows = view.truncations(Some(LINK)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].kind, TruncationKind::Truncated);
    assert_eq!((rows[0].from_offset, rows[0].to_offset), (t.truncate_to, end_of(bytes)));
    assert_eq!(rows[0].archive_path.as_deref(), Some(rel.as_str()));
    assert!(!crate::mirror::truncation_journal_file(&f.mirror, "orders-2").exists());
    // The archive is outside the partition directory.
    assert!(!rel.starts_with("orders-2/"));

    // A restarted appender resumes at the cut and takes the source's batches from there again.
    drop(a);
    let mut a = open(&f, Catalog::open(tmp.path().join("catalog.sqlite")).unwrap());
    let positions = a.durable_positions().await.unwrap();
    assert_eq!(positions[0].position.position, b[k] as u64);
    a.apply_chunk(&chunk(*base, bytes, b[k], bytes.len())).await.unwrap();
    assert_eq!(std::fs::read(&log).unwrap(), *bytes);
}

#[tokio::test]
async fn a_cut_at_the_active_segments_base_empties_it() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (cat, view) = catalogs(tmp.path());
    let mut a = open(&f, cat);
    mirrored(&f, &mut a).await;
    let (base, bytes) = &f.segs[1];
    let t = cut_at(&f, 0);
    assert_eq!(t.truncate_to, *base);
    let at = a.apply_truncate(&t).await.unwrap().expect("a new end");
    assert_eq!((at.segment_base, at.position), (*base, 0));
    assert_eq!(std::fs::metadata(mirror_log(&f.mirror, *base)).unwrap().len(), 0);
    assert_eq!(view.truncations(Some(LINK)).unwrap().len(), 1);
    // The log end is now the sealed segment's.
    let positions = a.durable_positions().await.unwrap();
    let ends = a.log_ends(&positions).await.unwrap().unwrap();
    assert_eq!(ends[0].end_offset, *base);
    a.apply_chunk(&chunk(*base, bytes, 0, bytes.len())).await.unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base)).unwrap(), *bytes);
}

#[tokio::test]
async fn cuts_outside_the_mirror_at_the_log_start_or_off_the_evidence_are_refused() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (cat, view) = catalogs(tmp.path());
    let mut a = open(&f, cat);
    mirrored(&f, &mut a).await;
    let (base0, bytes0) = &f.segs[0];
    let (base1, bytes1) = &f.segs[1];
    let b1 = boundaries(bytes1);
    let k = b1.len() / 2;

    let mut no_segment = cut_at(&f, k);
    no_segment.segment_base = *base0 + 1;
    no_segment.position = boundaries(bytes0)[2] as u64;
    no_segment.truncate_to = base_at(bytes0, boundaries(bytes0)[2]);
    no_segment.source_end_offset = no_segment.truncate_to;
    let mut above_active = cut_at(&f, k);
    above_active.segment_base = *base1 + 1;
    let mut not_boundary = cut_at(&f, k);
    not_boundary.position += 1;
    let mut wrong_offset = cut_at(&f, k);
    wrong_offset.truncate_to += 1;
    wrong_offset.source_end_offset += 1;
    let mut wrong_end = cut_at(&f, k);
    wrong_end.mirror_end_offset += 5;
    let mut wrong_epoch = cut_at(&f, k);
    wrong_epoch.mirror_epoch = 4;
    let mut above_source = cut_at(&f, k);
    above_source.source_end_offset = above_source.truncate_to - 1;
    let mut kept_diverge = cut_at(&f, k);
    kept_diverge.source_epoch = 2;
    let mut beyond = cut_at(&f, k);
    beyond.position = bytes1.len() as u64;
    beyond.truncate_to = end_of(bytes1);
    let mut other_lineage = cut_at(&f, k);
    other_lineage.partition.topic_id = [8; 16];
    let no_such = format!("no segment {}", *base0 + 1);
    let cases: Vec<(Truncate, Vec<&str>)> = vec![
        (no_segment, vec!["orders-2", &no_such]),
        (above_active, vec!["orders-2", "above the segment"]),
        (not_boundary, vec!["orders-2", "not a batch boundary"]),
        (wrong_offset, vec!["orders-2", "starts at offset"]),
        (wrong_end, vec!["orders-2", "bytes end at offset"]),
        (wrong_epoch, vec!["orders-2", "epoch 4"]),
        (above_source, vec!["orders-2", "above where the source"]),
        (kept_diverge, vec!["orders-2", "above the source's epoch 2"]),
        (beyond, vec!["orders-2", "nothing to truncate"]),
        (other_lineage, vec!["orders-2", "topic id"]),
    ];
    let log = mirror_log(&f.mirror, *base1);
    for (t, needles) in cases {
        let e = a.apply_truncate(&t).await.expect_err("refused");
        refused(&e, &needles);
        refused(&e, &[&format!("offset {}", t.truncate_to)]);
        assert_eq!(std::fs::read(&log).unwrap(), *bytes1, "nothing changed after {e}");
    }
    assert!(view.truncations(None).unwrap().is_empty());
    assert!(!crate::mirror::archive_dir(&f.mirror).exists());

    // At the log start: a mirror of one unsealed segment cut at its base keeps nothing.
    let g = fixture();
    let mut a = TailAppender::open(&g.mirror).unwrap();
    a.durable_positions().await.unwrap();
    let (base, bytes) = &g.segs[0];
    a.apply_chunk(&chunk(*base, bytes, 0, bytes.len())).await.unwrap();
    let t = Truncate {
        partition: pref(),
        truncate_to: *base,
        segment_base: *base,
        position: 0,
        mode: TruncateMode::LogEnd,
        mirror_end_offset: end_of(bytes),
        mirror_epoch: 3,
        source_epoch: 3,
        source_end_offset: *base,
    };
    let e = a.apply_truncate(&t).await.expect_err("refused");
    refused(&e, &["orders-2", "log start"]);
}

#[tokio::test]
async fn in_high_watermark_mode_the_divergence_is_recorded_and_nothing_cut() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (cat, view) = catalogs(tmp.path());
    let mut a = open(&f, cat);
    mirrored(&f, &mut a).await;
    let (base, bytes) = &f.segs[1];
    let mut t = cut_at(&f, 2);
    t.mode = TruncateMode::HighWatermark;
    assert_eq!(a.apply_truncate(&t).await.unwrap(), None);
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base)).unwrap(), *bytes);
    let rows = view.truncations(Some(LINK)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].kind, TruncationKind::Diverged);
    assert_eq!((rows[0].from_offset, rows[0].to_offset), (t.truncate_to, end_of(bytes)));
    assert_eq!(rows[0].archive_path, None);
}

#[tokio::test]
async fn a_crash_at_any_step_of_a_truncation_is_finished_at_the_next_start() {
    for point in [
        FailPoint::TruncateJournaled,
        FailPoint::TruncateArchived,
        FailPoint::TruncateCut,
        FailPoint::TruncateRecorded,
    ] {
        let f = fixture();
        let tmp = tempfile::tempdir().unwrap();
        let (cat, view) = catalogs(tmp.path());
        let armed = Arc::new(Armed::new(point, 1));
        let mut a = open(&f, cat).with_failpoint(Arc::clone(&armed));
        mirrored(&f, &mut a).await;
        let (base, bytes) = &f.segs[1];
        let b = boundaries(bytes);
        let k = b.len() / 2;
        let t = cut_at(&f, k);
        let e = a.apply_truncate(&t).await.expect_err("killed");
        assert!(armed.fired(), "{point:?}: {e}");
        drop(a);

        let mut a = open(&f, Catalog::open(tmp.path().join("catalog.sqlite")).unwrap());
        let positions = a.durable_positions().await.unwrap();
        assert_eq!(
            (positions[0].position.segment_base, positions[0].position.position),
            (*base, b[k] as u64),
            "{point:?}"
        );
        let log = mirror_log(&f.mirror, *base);
        assert_eq!(std::fs::read(&log).unwrap(), &bytes[..b[k]], "{point:?}");
        let rel = archive_path("orders", 2, t.truncate_to, end_of(bytes));
        assert_eq!(std::fs::read(f.mirror.join(&rel)).unwrap(), &bytes[b[k]..], "{point:?}");
        assert_eq!(view.truncations(Some(LINK)).unwrap().len(), 1, "{point:?}");
        assert!(
            !crate::mirror::truncation_journal_file(&f.mirror, "orders-2").exists(),
            "{point:?}"
        );
        a.apply_chunk(&chunk(*base, bytes, b[k], bytes.len())).await.unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), *bytes, "{point:?}");
    }
}

/// The mirror of three segments: the source's first two sealed, the first half of its third appended (the active
/// one). Returns the third's appended length.
async fn mirrored_three(f: &Fixture, a: &mut TailAppender) -> usize {
    a.durable_positions().await.unwrap();
    for (base, bytes) in &f.segs[..2] {
        for c in chunks_of(*base, bytes, 3) {
            a.apply_chunk(&c).await.unwrap();
        }
        a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
    }
    let (base2, bytes2) = &f.segs[2];
    let b2 = boundaries(bytes2);
    let half = b2[b2.len() / 2];
    a.apply_chunk(&chunk(*base2, bytes2, 0, half)).await.unwrap();
    half
}

/// A Truncate into the first (sealed) segment at its `k`-th batch boundary, the mirror ending at `half` of the
/// third.
fn cut_into_first(f: &Fixture, k: usize, half: usize) -> Truncate {
    let (base0, bytes0) = &f.segs[0];
    let b0 = boundaries(bytes0);
    let to = base_at(bytes0, b0[k]);
    Truncate {
        partition: pref(),
        truncate_to: to,
        segment_base: *base0,
        position: b0[k] as u64,
        mode: TruncateMode::LogEnd,
        mirror_end_offset: end_of(&f.segs[2].1[..half]),
        mirror_epoch: 3,
        source_epoch: 3,
        source_end_offset: to,
    }
}

/// What a cut into the first segment leaves, checked after it and after every crash point: the first segment cut
/// and active at the cut, the later ones gone with their companions, the archive holding the removed bytes in
/// order, the catalog holding nothing installed from the first segment on, one truncation row, no journal; then
/// the source's batches from the cut on are taken again, the first segment sealed again, the next ones follow.
async fn check_cut_into_first(
    f: &Fixture,
    a: &mut TailAppender,
    view: &Catalog,
    t: &Truncate,
    half: usize,
    what: &str,
) {
    let (base0, bytes0) = &f.segs[0];
    let cut = t.position as usize;
    let positions = a.durable_positions().await.unwrap();
    assert_eq!(
        (
            positions[0].position.segment_base,
            positions[0].position.position,
            positions[0].sealed
        ),
        (*base0, t.position, false),
        "{what}"
    );
    let ends = a.log_ends(&positions).await.unwrap().unwrap();
    assert_eq!(ends[0].end_offset, t.truncate_to, "{what}");
    assert_eq!(
        std::fs::read(mirror_log(&f.mirror, *base0)).unwrap(),
        &bytes0[..cut],
        "{what}"
    );
    let pdir = f.mirror.join("orders-2");
    for (base, _) in &f.segs[1..3] {
        for kind in SegmentFileKind::ALL {
            assert!(
                !pdir.join(segment_file_name(*base, kind)).exists(),
                "{what}: {kind:?} of {base}"
            );
        }
    }
    let mut expected = bytes0[cut..].to_vec();
    expected.extend_from_slice(&f.segs[1].1);
    expected.extend_from_slice(&f.segs[2].1[..half]);
    let rel = archive_path("orders", 2, t.truncate_to, t.mirror_end_offset);
    let archived = std::fs::read(f.mirror.join(&rel)).unwrap();
    assert_eq!(archived, expected, "{what}");
    let offsets: Vec<i64> = scan_frames(&archived, 0)
        .map(|fr| fr.unwrap().info.base_offset)
        .collect();
    assert_eq!(offsets.first(), Some(&t.truncate_to), "{what}");
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "{what}: one run in offset order"
    );
    let sidecar: ArchivedRange =
        serde_json::from_slice(&std::fs::read(f.mirror.join(&rel).with_extension("json")).unwrap()).unwrap();
    assert_eq!(
        sidecar.removed_segments.iter().map(|r| r.base).collect::<Vec<_>>(),
        vec![f.segs[1].0, f.segs[2].0],
        "{what}"
    );
    assert_eq!(sidecar.uninstall_from, Some(*base0), "{what}");
    let rows = view.truncations(Some(LINK)).unwrap();
    assert_eq!(rows.len(), 1, "{what}");
    assert_eq!(
        (rows[0].from_offset, rows[0].to_offset),
        (t.truncate_to, t.mirror_end_offset),
        "{what}"
    );
    assert_eq!(rows[0].size, Some(expected.len() as u64), "{what}");
    let key = segmirror_catalog::PartitionKey::new(LINK, "orders", 2);
    let row = view.partition(&key).unwrap();
    assert!(view.installed_segments(row.id).unwrap().is_empty(), "{what}");
    assert_eq!(row.installed_end_offset, Some(*base0), "{what}");
    assert!(
        !crate::mirror::truncation_journal_file(&f.mirror, "orders-2").exists(),
        "{what}"
    );

    // The source's batches again, from the cut: the first segment grows, is sealed again, the next ones follow.
    a.apply_chunk(&chunk(*base0, bytes0, cut, bytes0.len())).await.unwrap();
    a.apply_seal(&seal_of(&f.source, *base0, bytes0, true)).await.unwrap();
    let (base1, bytes1) = &f.segs[1];
    a.apply_chunk(&chunk(*base1, bytes1, 0, bytes1.len())).await.unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base0)).unwrap(), *bytes0, "{what}");
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base1)).unwrap(), *bytes1, "{what}");
    let installed: Vec<i64> = view
        .installed_segments(row.id)
        .unwrap()
        .iter()
        .map(|s| s.version.base_offset)
        .collect();
    assert_eq!(installed, vec![*base0], "{what}");
}

#[tokio::test]
async fn a_cut_into_a_sealed_segment_makes_it_active_again_and_removes_the_later_ones() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (cat, view) = catalogs(tmp.path());
    let mut a = open(&f, cat);
    let half = mirrored_three(&f, &mut a).await;
    let k = boundaries(&f.segs[0].1).len() / 2;
    let t = cut_into_first(&f, k, half);
    let at = a.apply_truncate(&t).await.unwrap().expect("a new end");
    assert_eq!((at.segment_base, at.position), (f.segs[0].0, t.position));
    // The cut segment's offset index is an active segment's again: rebuilt up to the cut.
    let index = f
        .mirror
        .join("orders-2")
        .join(segment_file_name(f.segs[0].0, SegmentFileKind::Index));
    let rebuilt = rebuild_index(
        &mirror_log(&f.mirror, f.segs[0].0),
        f.segs[0].0,
        CompanionKind::OffsetIndex,
    )
    .unwrap();
    assert_eq!(std::fs::read(&index).unwrap_or_default(), rebuilt);
    check_cut_into_first(&f, &mut a, &view, &t, half, "no crash").await;
}

#[tokio::test]
async fn a_crash_at_any_step_of_a_cut_into_a_sealed_segment_is_finished_at_the_next_start() {
    for point in [
        FailPoint::TruncateJournaled,
        FailPoint::TruncateArchived,
        FailPoint::TruncateCut,
        FailPoint::TruncateRecorded,
    ] {
        let f = fixture();
        let tmp = tempfile::tempdir().unwrap();
        let (cat, view) = catalogs(tmp.path());
        let armed = Arc::new(Armed::new(point, 1));
        let mut a = open(&f, cat).with_failpoint(Arc::clone(&armed));
        let half = mirrored_three(&f, &mut a).await;
        let t = cut_into_first(&f, 3, half);
        let e = a.apply_truncate(&t).await.expect_err("killed");
        assert!(armed.fired(), "{point:?}: {e}");
        drop(a);
        let mut a = open(&f, Catalog::open(tmp.path().join("catalog.sqlite")).unwrap());
        check_cut_into_first(&f, &mut a, &view, &t, half, &format!("{point:?}")).await;
    }
}

#[tokio::test]
async fn a_journal_naming_removed_segments_out_of_order_is_refused_with_nothing_changed() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (cat, view) = catalogs(tmp.path());
    let armed = Arc::new(Armed::new(FailPoint::TruncateJournaled, 1));
    let mut a = open(&f, cat).with_failpoint(Arc::clone(&armed));
    let half = mirrored_three(&f, &mut a).await;
    let t = cut_into_first(&f, 2, half);
    a.apply_truncate(&t).await.expect_err("killed");
    drop(a);
    let journal = crate::mirror::truncation_journal_file(&f.mirror, "orders-2");
    let written: ArchivedRange = serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
    assert_eq!(written.removed_segments.len(), 2);
    let pdir = f.mirror.join("orders-2");
    let files = || {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&pdir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                (
                    p.file_name().unwrap().to_string_lossy().to_string(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = files();
    // A hostile journal: the segments removed whole not above the cut one, or not in order.
    for removed in [
        vec![RemovedSegment {
            base: f.segs[0].0,
            size: 10,
        }],
        written.removed_segments.iter().rev().copied().collect(),
    ] {
        let hostile = ArchivedRange {
            removed_segments: removed,
            ..written.clone()
        };
        std::fs::write(&journal, serde_json::to_vec(&hostile).unwrap()).unwrap();
        let mut a = open(&f, Catalog::open(tmp.path().join("catalog.sqlite")).unwrap());
        let e = a.durable_positions().await.expect_err("refused");
        refused(&e, &["orders-2.json", "does not describe orders-2"]);
        assert_eq!(files(), before, "nothing changed after {e}");
    }
    assert!(view.truncations(None).unwrap().is_empty());
    assert!(!crate::mirror::archive_dir(&f.mirror).exists());
}
