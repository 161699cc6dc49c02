//! The appender with a catalog: seals recorded as installed versions, paused and promoted partitions refused.

use segment_format::partition_metadata::Uuid;
use segmirror_catalog::{Catalog, PartitionKey, PartitionState};
use segmirror_transport::direct::payload::LogStart;
use segmirror_transport::direct::session::ChunkApplier;
use sha2::Digest;

use super::tests::{chunks_of, fixture, seal_of};
use super::*;

const LINK: &str = "tail-link";

fn appender(f: &super::tests::Fixture, catalog: Catalog) -> TailAppender {
    TailAppender::open_with_catalog(&f.mirror, TailCatalog::open(catalog, LINK).unwrap()).unwrap()
}

fn key() -> PartitionKey {
    PartitionKey::new(LINK, "orders", 2)
}

/// A catalog file in `dir`, opened twice: one for the appender, one to look at (WAL: readers see commits).
fn catalogs(dir: &Path) -> (Catalog, Catalog) {
    let path = dir.join("catalog.sqlite");
    (Catalog::open(&path).unwrap(), Catalog::open(&path).unwrap())
}

#[tokio::test]
async fn tail_catalog_records_each_sealed_segment_as_installed() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, look) = catalogs(tmp.path());
    let mut a = appender(&f, mine);
    let (base0, bytes0) = &f.segs[0];
    for c in chunks_of(*base0, bytes0, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    // Chunks alone record the partition, nothing installed.
    let row = look.partition(&key()).unwrap();
    assert_eq!(row.source_topic_id, Uuid([7; 16]).to_string());
    assert_eq!(row.state, PartitionState::Mirroring);
    assert_eq!(row.installed_end_offset, None);
    assert!(look.installed_segments(row.id).unwrap().is_empty());

    a.apply_seal(&seal_of(&f.source, *base0, bytes0, true)).await.unwrap();
    let (base1, _) = &f.segs[1];
    let installed = look.installed_segments(row.id).unwrap();
    assert_eq!(installed.len(), 1, "{installed:?}");
    let v = &installed[0].version;
    assert_eq!(
        (v.base_offset, v.next_offset, v.last_offset, v.size, v.sealed),
        (*base0, *base1, base1 - 1, bytes0.len() as u64, true)
    );
    let digest: [u8; 32] = sha2::Sha256::digest(bytes0).into();
    assert_eq!(v.sha256, digest);
    assert_eq!(look.partition(&key()).unwrap().installed_end_offset, Some(*base1));

    // A crash after the catalog recorded the seal but before the state file did: the seal comes again and is
    // accepted as the same version.
    let state = crate::mirror::state_file(&f.mirror, "orders-2");
    let mut recorded: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    recorded["sealed"] = serde_json::Value::Bool(false);
    std::fs::write(&state, serde_json::to_vec(&recorded).unwrap()).unwrap();
    let (_, again) = catalogs(tmp.path());
    let mut b = appender(&f, again);
    b.durable_positions().await.unwrap();
    b.apply_seal(&seal_of(&f.source, *base0, bytes0, false)).await.unwrap();
    assert_eq!(look.installed_segments(row.id).unwrap().len(), 1);

    // The next segment's chunks go on; a chunk into the sealed, installed segment is refused.
    let (base1, bytes1) = &f.segs[1];
    for c in chunks_of(*base1, bytes1, 3) {
        b.apply_chunk(&c).await.unwrap();
    }
    b.apply_seal(&seal_of(&f.source, *base1, bytes1, true)).await.unwrap();
    let ends: Vec<i64> = look
        .installed_segments(row.id)
        .unwrap()
        .iter()
        .map(|s| s.version.base_offset)
        .collect();
    assert_eq!(ends, vec![*base0, *base1]);
}

#[tokio::test]
async fn tail_catalog_refuses_chunks_of_paused_and_promoted_partitions() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let mut a = appender(&f, mine);
    let (base0, bytes0) = &f.segs[0];
    let chunks = chunks_of(*base0, bytes0, 1);
    assert!(chunks.len() >= 3);
    a.apply_chunk(&chunks[0]).await.unwrap();
    let id = look.partition(&key()).unwrap().id;
    let log = super::tests::mirror_log(&f.mirror, *base0);
    let len_before = std::fs::metadata(&log).unwrap().len();

    look.set_partition_state(id, PartitionState::Paused).unwrap();
    let err = a.apply_chunk(&chunks[1]).await.unwrap_err().to_string();
    assert!(err.contains("orders-2") && err.contains("paused"), "{err}");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), len_before, "nothing written");

    // Resumed: it goes on from where it was.
    look.set_partition_state(id, PartitionState::Mirroring).unwrap();
    a.apply_chunk(&chunks[1]).await.unwrap();
    let len_mid = std::fs::metadata(&log).unwrap().len();

    look.set_partition_state(id, PartitionState::Promoted).unwrap();
    let err = a.apply_chunk(&chunks[2]).await.unwrap_err().to_string();
    assert!(err.contains("orders-2") && err.contains("promoted"), "{err}");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), len_mid, "nothing written");
    // A restarted appender refuses it too, and writes no companion: the index the appender kept while the
    // partition was mirrored (`companions`) stays the very file it was.
    let index = log.with_extension("index");
    let own_index = || {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&index).unwrap();
        (m.ino(), m.mtime_nsec(), std::fs::read(&index).unwrap())
    };
    let before = own_index();
    let (_, again) = catalogs(tmp.path());
    let mut b = appender(&f, again);
    b.durable_positions().await.unwrap();
    let mut rest = chunks[2..].iter();
    let err = b.apply_chunk(rest.next().unwrap()).await.unwrap_err().to_string();
    assert!(err.contains("promoted"), "{err}");
    assert!(own_index() == before, "no companion written");
}

#[tokio::test]
async fn tail_catalog_refuses_another_lineage() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mut mine, look) = catalogs(tmp.path());
    mine.create_link(&segmirror_catalog::LinkSpec {
        name: LINK.into(),
        store_url: "file:///elsewhere".into(),
        topics_regex: ".*".into(),
        groups_regex: None,
    })
    .unwrap();
    mine.upsert_partition(&key(), &Uuid([9; 16]).to_string(), 0).unwrap();
    let mut a = appender(&f, mine);
    let (base0, bytes0) = &f.segs[0];
    let err = a
        .apply_chunk(&chunks_of(*base0, bytes0, 1)[0])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("recreated"), "{err}");
    assert!(!super::tests::mirror_log(&f.mirror, *base0).exists());
    assert_eq!(
        look.partition(&key()).unwrap().source_topic_id,
        Uuid([9; 16]).to_string()
    );
}

/// Retention skipped a segment: segment 1 is gone at the source before it was shipped, so segment 2 follows the
/// sealed segment 0. Retention deletes from the front, so segment 0 is gone at the source too, and the feed tells
/// it with a LogStart (`shipper::direct::log_start`), before the seal of segment 2 or, when the listings raced,
/// after it. The gap alone moves nothing (at the applier it looks like a cleaned segment's hole, see the next
/// test); the LogStart moves the log start to segment 2 and takes segment 0 with it, in either order.
#[tokio::test]
async fn tail_catalog_records_a_gap_after_a_seal_as_a_log_start_move() {
    for log_start_first in [true, false] {
        let f = fixture();
        assert!(f.segs.len() >= 4, "{} segments", f.segs.len());
        let tmp = tempfile::tempdir().unwrap();
        let (mine, look) = catalogs(tmp.path());
        let mut a = appender(&f, mine);
        let log_start = LogStart {
            partition: super::tests::pref(),
            log_start_offset: f.segs[2].0,
        };
        for i in [0, 2] {
            let (base, bytes) = &f.segs[i];
            for c in chunks_of(*base, bytes, 2) {
                a.apply_chunk(&c).await.unwrap();
            }
            if i == 2 && log_start_first {
                a.apply_log_start(&log_start).await.unwrap();
            }
            a.apply_seal(&seal_of(&f.source, *base, bytes, false)).await.unwrap();
        }
        let row = look.partition(&key()).unwrap();
        if !log_start_first {
            assert_eq!(row.log_start_offset, 0, "the gap alone moves nothing");
            a.apply_log_start(&log_start).await.unwrap();
        }
        let row = look.partition(&key()).unwrap();
        let installed: Vec<i64> = look
            .installed_segments(row.id)
            .unwrap()
            .iter()
            .map(|s| s.version.base_offset)
            .collect();
        assert_eq!(installed, vec![f.segs[2].0], "LogStart first: {log_start_first}");
        assert_eq!(
            row.log_start_offset, f.segs[2].0,
            "the source's log start reached segment 2"
        );
        assert_eq!(row.installed_end_offset, Some(f.segs[3].0));
        assert!(!super::tests::mirror_log(&f.mirror, f.segs[0].0).exists());
    }
}

/// The seal of `bytes` as segment `base`, its indexes rebuilt from them (a cleaned segment has no source index to
/// read here): the offset index inline, the time index as a digest.
fn seal_rebuilt(base: i64, bytes: &[u8]) -> SegmentSeal {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.log");
    std::fs::write(&path, bytes).unwrap();
    let companion = |kind: CompanionKind, inline: bool| {
        let b = rebuild_index(&path, base, kind).unwrap();
        segmirror_transport::direct::payload::Companion {
            kind,
            size: b.len() as u64,
            sha256: sha2::Sha256::digest(&b).into(),
            inline: inline.then(|| bytes::Bytes::from(b)),
            index_interval: None,
        }
    };
    SegmentSeal {
        partition: super::tests::pref(),
        segment_base: base,
        final_size: bytes.len() as u64,
        log_sha256: sha2::Sha256::digest(bytes).into(),
        companions: vec![
            companion(CompanionKind::OffsetIndex, true),
            companion(CompanionKind::TimeIndex, false),
        ],
    }
}

/// The issue-9 bug of compacted topics under process kills: the feed reached a segment only after the source's
/// cleaner had rewritten it, so its offsets have holes (taken, as a Kafka follower takes them) and its last batch
/// ends below the next segment's base (the cleaner removed the segment's newest records, never its offset range).
/// The next seal starts above the installed end: a hole *inside* the previous segment's range, not a segment the
/// source deleted. The catalog's log start stays where
/// the source's is (0), the cleaned segment's range reaches the next base, and `promote` keeps every segment.
#[tokio::test]
async fn tail_catalog_takes_a_cleaned_segments_hole_as_its_range_not_a_log_start_move() {
    let f = fixture();
    assert!(f.segs.len() >= 4, "{} segments", f.segs.len());
    let tmp = tempfile::tempdir().unwrap();
    let (mine, look) = catalogs(tmp.path());
    let mut a = appender(&f, mine);
    let (base0, bytes0) = &f.segs[0];
    for c in chunks_of(*base0, bytes0, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base0, bytes0, true)).await.unwrap();
    // Segment 1 as the cleaner left it: its second batch and its last removed (overwritten keys), so its offsets
    // have a hole inside and one at the end.
    let (base1, bytes1) = &f.segs[1];
    let b = super::tests::boundaries(bytes1);
    assert!(b.len() >= 5, "{b:?}");
    let cleaned = [&bytes1[..b[1]], &bytes1[b[2]..b[b.len() - 2]]].concat();
    let cleaned = &cleaned[..];
    for c in chunks_of(*base1, cleaned, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_rebuilt(*base1, cleaned)).await.unwrap();
    let (base2, bytes2) = &f.segs[2];
    for c in chunks_of(*base2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base2, bytes2, false)).await.unwrap();

    let row = look.partition(&key()).unwrap();
    assert_eq!(row.log_start_offset, 0, "no retention happened at the source");
    let installed: Vec<(i64, i64)> = look
        .installed_segments(row.id)
        .unwrap()
        .iter()
        .map(|s| (s.version.base_offset, s.version.next_offset))
        .collect();
    assert_eq!(
        installed,
        vec![(*base0, *base1), (*base1, *base2), (*base2, f.segs[3].0)],
        "the cleaned segment's range reaches the next segment's base"
    );
    assert!(look.installed_segments(row.id).unwrap()[1].version.last_offset < base2 - 1);
    assert_eq!(row.installed_end_offset, Some(f.segs[3].0));
    for base in [base0, base1, base2] {
        assert!(super::tests::mirror_log(&f.mirror, *base).exists());
    }
}

/// A seal the catalog's history refuses (here: another sealed version already installed at its base) stops that
/// partition, not the applier: the refusal names the conflict, the state file stays unsealed so the seal is
/// offered again, and once the history admits it the same seal is recorded.
#[tokio::test]
async fn tail_catalog_conflict_at_a_seal_stops_the_partition_only() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let mut a = appender(&f, mine);
    let (base0, bytes0) = &f.segs[0];
    let (base1, _) = &f.segs[1];
    for c in chunks_of(*base0, bytes0, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let row = look.partition(&key()).unwrap();
    let other = segmirror_catalog::SegmentVersion {
        base_offset: *base0,
        next_offset: *base1,
        last_offset: base1 - 1,
        size: bytes0.len() as u64,
        sha256: [1; 32],
        manifest_key: "elsewhere".into(),
        sealed: true,
    };
    look.mark_installed(row.id, &row.source_topic_id, &other).unwrap();

    let err = a
        .apply_seal(&seal_of(&f.source, *base0, bytes0, true))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DirectError::PartitionStopped { partition, reason }
            if *partition == super::tests::pref() && reason.contains("conflicts with the installed segments")),
        "{err:?}"
    );
    let state = crate::mirror::state_file(&f.mirror, "orders-2");
    let recorded: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(recorded["sealed"], serde_json::Value::Bool(false), "{recorded}");
    assert_eq!(look.installed_segments(row.id).unwrap()[0].version.sha256, [1; 32]);

    // The history admits it again (here the foreign row is dropped): the same seal is recorded.
    look.truncate_installed(row.id, &row.source_topic_id, *base0).unwrap();
    a.apply_seal(&seal_of(&f.source, *base0, bytes0, true)).await.unwrap();
    let digest: [u8; 32] = sha2::Sha256::digest(bytes0).into();
    assert_eq!(look.installed_segments(row.id).unwrap()[0].version.sha256, digest);
    assert_eq!(look.partition(&key()).unwrap().installed_end_offset, Some(*base1));
}

/// A catalog whose recorded installed end lies past its rows (a replacement dropped a row reaching further than
/// its own end, and the end stayed): the next seal is judged by the rows, the hole below it bridged as the
/// cleaner's, and installed, where the recorded end alone hid the hole and the catalog refused the seal.
#[tokio::test]
async fn tail_catalog_judges_a_seal_by_the_rows_below_it_not_by_the_recorded_end() {
    let f = fixture();
    assert!(f.segs.len() >= 4, "{} segments", f.segs.len());
    let tmp = tempfile::tempdir().unwrap();
    let (mine, mut look) = catalogs(tmp.path());
    let mut a = appender(&f, mine);
    for (base, bytes) in &f.segs[..2] {
        for c in chunks_of(*base, bytes, 2) {
            a.apply_chunk(&c).await.unwrap();
        }
        a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
    }
    let (b0, b1, b2, b3) = (f.segs[0].0, f.segs[1].0, f.segs[2].0, f.segs[3].0);
    let row = look.partition(&key()).unwrap();
    let first = look.installed_segments(row.id).unwrap()[0].version.clone();
    let shorter = segmirror_catalog::Replacement {
        size: first.size,
        sha256: first.sha256,
        last_offset: Some(first.last_offset),
        manifest_key: first.manifest_key.clone(),
        next_offset: Some(b1 + 1),
    };
    look.replace_sealed(row.id, &row.source_topic_id, &[b0], &shorter)
        .unwrap();
    let ranges = |look: &Catalog| -> Vec<(i64, i64)> {
        look.installed_segments(row.id)
            .unwrap()
            .iter()
            .map(|s| (s.version.base_offset, s.version.next_offset))
            .collect()
    };
    assert_eq!(ranges(&look), vec![(b0, b1 + 1)]);
    assert_eq!(
        look.partition(&key()).unwrap().installed_end_offset,
        Some(b2),
        "the recorded end stayed"
    );

    let (_, bytes2) = &f.segs[2];
    for c in chunks_of(b2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, b2, bytes2, true)).await.unwrap();
    assert_eq!(ranges(&look), vec![(b0, b2), (b2, b3)]);
    assert_eq!(look.partition(&key()).unwrap().installed_end_offset, Some(b3));
}
