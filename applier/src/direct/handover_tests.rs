//! The hand-over from a mirror `apply` installed: the position derived from the catalog and checked against the
//! files, and each refusal.

use segment_format::log::scan_frames;
use segment_format::partition_metadata::Uuid;
use segmirror_catalog::{Catalog, PartitionKey, PartitionState as CatalogState, SegmentVersion, Upsert};
use segmirror_transport::direct::session::ChunkApplier;
use sha2::Digest;

use super::tests::{boundaries, chunk, chunks_of, fixture, mirror_log, pref, seal_of, Fixture};
use super::*;

pub(super) const LINK: &str = "seeded";
const TOPIC_ID: [u8; 16] = [7; 16];

fn key(link: &str) -> PartitionKey {
    PartitionKey::new(link, "orders", 2)
}

/// A catalog file in `dir`, opened twice: one for the appender, one to set up and look at.
pub(super) fn catalogs(dir: &Path) -> (Catalog, Catalog) {
    let path = dir.join("catalog.sqlite");
    let setup = Catalog::open(&path).unwrap();
    (Catalog::open(&path).unwrap(), setup)
}

/// Installs `bytes` as segment `base` of the mirror the way `apply` leaves it: the `.log` in the partition
/// directory, the version recorded installed in `catalog` under `link` (sealed with `next` its next offset, or an
/// unsealed prefix ending at its last batch).
pub(super) fn install(f: &Fixture, catalog: &mut Catalog, link: &str, base: i64, bytes: &[u8], next: Option<i64>) {
    if catalog.link(link).is_err() {
        catalog
            .create_link(&segmirror_catalog::LinkSpec {
                name: link.into(),
                store_url: "file:///bucket".into(),
                topics_regex: ".*".into(),
                groups_regex: None,
            })
            .unwrap();
    }
    let path = mirror_log(&f.mirror, base);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    let last_offset = scan_frames(bytes, 0).last().unwrap().unwrap().info.last_offset;
    let topic_id = Uuid(TOPIC_ID).to_string();
    let id = match catalog.upsert_partition(&key(link), &topic_id, 0).unwrap() {
        Upsert::Created(row) | Upsert::Existing(row) => row.id,
        other => panic!("{other:?}"),
    };
    let version = SegmentVersion {
        base_offset: base,
        next_offset: next.unwrap_or(last_offset + 1),
        last_offset,
        size: bytes.len() as u64,
        sha256: sha2::Sha256::digest(bytes).into(),
        manifest_key: format!("bucket/orders/2/{base}.json"),
        sealed: next.is_some(),
    };
    catalog.mark_installed(id, &topic_id, &version).unwrap();
}

/// `apply` installed segment 0 sealed and a prefix (half its batches) of segment 1; returns the prefix length.
fn seed_with_prefix(f: &Fixture, catalog: &mut Catalog) -> usize {
    let (base0, bytes0) = &f.segs[0];
    let (base1, bytes1) = &f.segs[1];
    install(f, catalog, LINK, *base0, bytes0, Some(*base1));
    let b = boundaries(bytes1);
    let cut = b[b.len() / 2];
    install(f, catalog, LINK, *base1, &bytes1[..cut], None);
    cut
}

pub(super) fn appender(f: &Fixture, catalog: Catalog, link: &str) -> TailAppender {
    TailAppender::open_with_catalog(&f.mirror, TailCatalog::open(catalog, link).unwrap()).unwrap()
}

async fn positions(a: &mut TailAppender) -> Vec<(i64, u64, bool)> {
    a.durable_positions()
        .await
        .unwrap()
        .iter()
        .map(|d| (d.position.segment_base, d.position.position, d.sealed))
        .collect()
}

async fn refusal(a: &mut TailAppender) -> String {
    match a.durable_positions().await {
        Ok(p) => panic!("handed over: {p:?}"),
        Err(e) => format!("{e}: {:?}", std::error::Error::source(&e)),
    }
}

#[tokio::test]
async fn handover_continues_an_unsealed_prefix_and_seals_it_in_the_catalog() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let cut = seed_with_prefix(&f, &mut look);
    let mut a = appender(&f, mine, LINK);
    let (base1, bytes1) = &f.segs[1];
    assert_eq!(positions(&mut a).await, vec![(*base1, cut as u64, false)]);
    // The state file now exists: the next session reads it rather than deriving again.
    assert!(crate::mirror::state_file(&f.mirror, "orders-2").is_file());

    // The rest of the source's segment 1 continues the prefix, then its seal replaces the unsealed version.
    let b = boundaries(bytes1);
    let from = b.iter().position(|&x| x == cut).unwrap();
    for w in b[from..].windows(2) {
        a.apply_chunk(&chunk(*base1, bytes1, w[0], w[1])).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base1, bytes1, true)).await.unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base1)).unwrap(), *bytes1);
    let id = look.partition(&key(LINK)).unwrap().id;
    let installed: Vec<(i64, u64, bool)> = look
        .installed_segments(id)
        .unwrap()
        .iter()
        .map(|s| (s.version.base_offset, s.version.size, s.version.sealed))
        .collect();
    assert_eq!(
        installed,
        vec![
            (f.segs[0].0, f.segs[0].1.len() as u64, true),
            (*base1, bytes1.len() as u64, true)
        ]
    );
    // And the next segment follows as in any tail.
    let (base2, bytes2) = &f.segs[2];
    for c in chunks_of(*base2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    assert_eq!(positions(&mut a).await, vec![(*base2, bytes2.len() as u64, false)]);
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base2)).unwrap(), *bytes2);
}

#[tokio::test]
async fn handover_after_a_sealed_segment_starts_the_next_one() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let (base0, bytes0) = &f.segs[0];
    let (base1, bytes1) = &f.segs[1];
    install(&f, &mut look, LINK, *base0, bytes0, Some(*base1));
    let mut a = appender(&f, mine, LINK);
    assert_eq!(positions(&mut a).await, vec![(*base0, bytes0.len() as u64, true)]);
    // A chunk into the sealed segment is refused; the seal again is accepted (already applied).
    assert!(a.apply_chunk(&chunk(*base0, bytes0, 0, bytes0.len())).await.is_err());
    a.apply_seal(&seal_of(&f.source, *base0, bytes0, false)).await.unwrap();
    for c in chunks_of(*base1, bytes1, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base1)).unwrap(), *bytes1);
}

#[tokio::test]
async fn handover_refuses_a_segment_of_another_size_naming_file_and_sizes() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    seed_with_prefix(&f, &mut look);
    let path = mirror_log(&f.mirror, f.segs[0].0);
    let mut grown = f.segs[0].1.clone();
    grown.extend_from_slice(b"xx");
    std::fs::write(&path, &grown).unwrap();
    let mut a = appender(&f, mine, LINK);
    let msg = refusal(&mut a).await;
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!(
            "{} bytes on disk, the catalog recorded {} bytes",
            grown.len(),
            f.segs[0].1.len()
        )),
        "{msg}"
    );
    assert!(!crate::mirror::state_file(&f.mirror, "orders-2").exists());
}

#[tokio::test]
async fn handover_refuses_a_missing_segment() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    seed_with_prefix(&f, &mut look);
    let path = mirror_log(&f.mirror, f.segs[0].0);
    std::fs::remove_file(&path).unwrap();
    let msg = refusal(&mut appender(&f, mine, LINK)).await;
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("missing"),
        "{msg}"
    );
}

#[tokio::test]
async fn handover_refuses_a_last_segment_whose_bytes_changed() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let cut = seed_with_prefix(&f, &mut look);
    let path = mirror_log(&f.mirror, f.segs[1].0);
    let mut changed = f.segs[1].1[..cut].to_vec();
    let last = changed.len() - 1;
    changed[last] ^= 0xff; // same size, another digest
    std::fs::write(&path, &changed).unwrap();
    let msg = refusal(&mut appender(&f, mine, LINK)).await;
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("SHA-256") && msg.contains("recorded"),
        "{msg}"
    );
}

#[tokio::test]
async fn handover_refuses_a_segment_the_catalog_does_not_know() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    seed_with_prefix(&f, &mut look);
    // A crash after `apply` renamed a segment in, before the catalog recorded it.
    let (base2, bytes2) = &f.segs[2];
    let path = mirror_log(&f.mirror, *base2);
    std::fs::write(&path, bytes2).unwrap();
    let msg = refusal(&mut appender(&f, mine, LINK)).await;
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("records no installed version"),
        "{msg}"
    );
}

#[tokio::test]
async fn handover_skips_a_paused_partition_and_its_chunks_are_refused() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    seed_with_prefix(&f, &mut look);
    let id = look.partition(&key(LINK)).unwrap().id;
    look.set_partition_state(id, CatalogState::Paused).unwrap();
    let mut a = appender(&f, mine, LINK);
    assert_eq!(positions(&mut a).await, vec![]);
    let (base0, bytes0) = &f.segs[0];
    let err = a.apply_chunk(&chunks_of(*base0, bytes0, 1)[0]).await.unwrap_err();
    // The partition alone stops; the session goes on with the others.
    assert!(
        matches!(&err, DirectError::PartitionStopped { partition, .. } if *partition == pref()),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("paused"), "{msg}");
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base0)).unwrap(), *bytes0);
}

#[tokio::test]
async fn handover_refuses_a_partition_installed_for_another_link() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    seed_with_prefix(&f, &mut look);
    let mut a = appender(&f, mine, "other-link");
    assert_eq!(positions(&mut a).await, vec![]);
    let (base0, bytes0) = &f.segs[0];
    let err = a.apply_chunk(&chunks_of(*base0, bytes0, 1)[0]).await.unwrap_err();
    assert!(matches!(&err, DirectError::PartitionStopped { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("under link seeded") && msg.contains("serves link other-link"),
        "{msg}"
    );
}

#[tokio::test]
async fn handover_refuses_a_shipper_of_another_lineage() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let cut = seed_with_prefix(&f, &mut look);
    let mut a = appender(&f, mine, LINK);
    let (base1, bytes1) = &f.segs[1];
    assert_eq!(positions(&mut a).await, vec![(*base1, cut as u64, false)]);
    let b = boundaries(bytes1);
    let from = b.iter().position(|&x| x == cut).unwrap();
    let mut c = chunk(*base1, bytes1, b[from], b[from + 1]);
    c.partition = PartitionRef {
        topic_id: [9; 16],
        ..pref()
    };
    let err = a.apply_chunk(&c).await.unwrap_err();
    assert!(
        matches!(&err, DirectError::PartitionStopped { partition, .. } if partition.topic_id == [9; 16]),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("recreated") && msg.contains("reset-partition"), "{msg}");
    assert_eq!(
        std::fs::metadata(mirror_log(&f.mirror, *base1)).unwrap().len(),
        cut as u64
    );
    // Recorded for `status`: the partition paused, with an event naming both ids and the command; once only.
    let row = look.partition(&key(LINK)).unwrap();
    assert_eq!(row.state, CatalogState::Paused);
    a.apply_chunk(&c).await.unwrap_err();
    let breaks: Vec<_> = look
        .events(Some(segmirror_catalog::Subject::Partition(&key(LINK))), 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == segmirror_catalog::EventKind::LineageBreak)
        .collect();
    assert_eq!(breaks.len(), 1, "{breaks:?}");
    assert!(
        breaks[0].detail.contains(&Uuid([9; 16]).to_string()),
        "{}",
        breaks[0].detail
    );
}

/// The source rolled and its retention deleted the seeded active segment before the tail started: the shipper
/// resumes with the LogStart of its first segment (`shipper::direct::log_start::resume_or_skip`); the handed-over
/// prefix goes as a segment retention deleted, and the tail continues at the source's first segment.
#[tokio::test]
async fn handover_of_a_prefix_the_source_deleted_follows_the_log_start() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let cut = seed_with_prefix(&f, &mut look);
    let mut a = appender(&f, mine, LINK);
    let (base1, _) = &f.segs[1];
    assert_eq!(positions(&mut a).await, vec![(*base1, cut as u64, false)]);
    let (base2, bytes2) = &f.segs[2];
    let log_start = segmirror_transport::direct::payload::LogStart {
        partition: pref(),
        log_start_offset: *base2,
    };
    a.apply_log_start(&log_start).await.unwrap();
    for c in chunks_of(*base2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    assert_eq!(positions(&mut a).await, vec![(*base2, bytes2.len() as u64, false)]);
    assert!(
        !mirror_log(&f.mirror, f.segs[0].0).exists(),
        "segment 0 deleted as at the source"
    );
    assert!(
        !mirror_log(&f.mirror, *base1).exists(),
        "the unsealed prefix deleted as at the source"
    );
    assert_eq!(std::fs::read(mirror_log(&f.mirror, *base2)).unwrap(), *bytes2);
    let row = look.partition(&key(LINK)).unwrap();
    assert_eq!(row.log_start_offset, *base2);
    a.apply_seal(&seal_of(&f.source, *base2, bytes2, true)).await.unwrap();
    let installed: Vec<i64> = look
        .installed_segments(row.id)
        .unwrap()
        .iter()
        .map(|s| s.version.base_offset)
        .collect();
    assert_eq!(installed, vec![*base2]);
}
