//! The catalog follows retention and compaction replacements on a tailed mirror: after each (and after the
//! recovery at session start), its installed rows are the mirror's sealed segments, byte for byte in size and
//! SHA-256, and its log start is the one the retention record holds.

use segment_format::partition_metadata::Uuid;
use segmirror_catalog::{Catalog, EventKind, PartitionKey, PartitionState, Subject};
use segmirror_transport::direct::payload::{LogStart, PartitionRef};
use segmirror_transport::direct::session::ChunkApplier;

use super::replace::tests::{compacted, replace_seal};
use super::tests::{chunks_of, fixture, mirror_log, seal_of, Fixture};
use super::*;

const LINK: &str = "tail-link";

fn key() -> PartitionKey {
    PartitionKey::new(LINK, "orders", 2)
}

fn with_catalog(f: &Fixture, dir: &Path) -> TailAppender {
    let catalog = Catalog::open(dir.join("catalog.sqlite")).unwrap();
    TailAppender::open_with_catalog(&f.mirror, TailCatalog::open(catalog, LINK).unwrap()).unwrap()
}

fn look(dir: &Path) -> Catalog {
    Catalog::open(dir.join("catalog.sqlite")).unwrap()
}

/// Tails every segment, sealing all but the last; returns the partition.
async fn tail_all(f: &Fixture, a: &mut TailAppender) -> PartitionRef {
    let last = f.segs.len() - 1;
    let mut partition = None;
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        for c in chunks_of(*base, bytes, 2) {
            a.apply_chunk(&c).await.unwrap();
        }
        let seal = seal_of(&f.source, *base, bytes, true);
        partition = Some(seal.partition.clone());
        if i < last {
            a.apply_seal(&seal).await.unwrap();
        }
    }
    partition.unwrap()
}

/// (base, size, SHA-256) of every mirror `.log` but the one being tailed (the last, unsealed).
fn mirror_sealed(f: &Fixture) -> Vec<(i64, u64, [u8; 32])> {
    let dir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
    let mut out: Vec<(i64, u64, [u8; 32])> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let base: i64 = path.file_name()?.to_str()?.strip_suffix(".log")?.parse().ok()?;
            let bytes = std::fs::read(&path).unwrap();
            Some((base, bytes.len() as u64, sha256(&bytes)))
        })
        .collect();
    out.sort();
    let tailed = f.segs.last().unwrap().0;
    out.retain(|(base, _, _)| *base != tailed);
    out
}

fn catalog_rows(c: &Catalog) -> Vec<(i64, u64, [u8; 32])> {
    let id = c.partition(&key()).unwrap().id;
    c.installed_segments(id)
        .unwrap()
        .iter()
        .map(|s| (s.version.base_offset, s.version.size, s.version.sha256))
        .collect()
}

fn last_offset(log: &[u8]) -> i64 {
    segment_format::log::scan_frames(log, 0)
        .map(|frame| frame.unwrap().info.last_offset)
        .last()
        .unwrap()
}

fn kinds(c: &Catalog) -> Vec<EventKind> {
    c.events(Some(Subject::Partition(&key())), 100)
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect()
}

#[tokio::test]
async fn tail_catalog_follows_retention() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let mut a = with_catalog(&f, tmp.path());
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let c = look(tmp.path());
    assert_eq!(catalog_rows(&c).len(), bases.len() - 1);

    let start = bases[2] + 1;
    a.apply_log_start(&LogStart {
        partition: p.clone(),
        log_start_offset: start,
    })
    .await
    .unwrap();
    assert!(!mirror_log(&f.mirror, bases[1]).exists());
    let rows = catalog_rows(&c);
    assert_eq!(rows, mirror_sealed(&f));
    assert_eq!(rows[0].0, bases[2]);
    let row = c.partition(&key()).unwrap();
    assert_eq!(
        Some(row.log_start_offset),
        tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap()
    );
    assert_eq!(row.log_start_offset, start);
    assert_eq!(row.installed_end_offset, Some(*bases.last().unwrap()));
    assert!(kinds(&c).contains(&EventKind::LogStartMoved));

    // A crash after the deletions, before the catalog heard of them (here: an appender without the catalog did
    // them): the sweep at the next session start brings the catalog up to date.
    drop(a);
    let start = bases[3] + 1;
    let mut bare = TailAppender::open(&f.mirror).unwrap();
    bare.durable_positions().await.unwrap();
    bare.apply_log_start(&LogStart {
        partition: p.clone(),
        log_start_offset: start,
    })
    .await
    .unwrap();
    assert!(!mirror_log(&f.mirror, bases[2]).exists());
    assert_ne!(catalog_rows(&c), mirror_sealed(&f), "the catalog is behind the disk");
    let mut again = with_catalog(&f, tmp.path());
    again.durable_positions().await.unwrap();
    assert_eq!(catalog_rows(&c), mirror_sealed(&f));
    assert_eq!(c.partition(&key()).unwrap().log_start_offset, start);
}

#[tokio::test]
async fn tail_catalog_follows_a_replacement() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let mut a = with_catalog(&f, tmp.path());
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let c = look(tmp.path());
    let end_before = c.partition(&key()).unwrap().installed_end_offset;

    let new = compacted(&f.segs[..2]);
    a.stage_replacement(&p, bases[0], 0, new.clone()).await.unwrap();
    a.install_replacement(&replace_seal(&p, &bases[..2], &new))
        .await
        .unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, bases[0])).unwrap(), new);
    let rows = catalog_rows(&c);
    assert_eq!(rows, mirror_sealed(&f));
    assert_eq!(rows[0], (bases[0], new.len() as u64, sha256(&new)));
    let id = c.partition(&key()).unwrap().id;
    let merged = c.segment(id, bases[0]).unwrap().unwrap().version;
    assert_eq!(merged.next_offset, bases[2], "the replaced range's end");
    assert!(merged.last_offset < bases[2] && merged.sealed);
    assert_eq!(c.partition(&key()).unwrap().installed_end_offset, end_before);
    assert!(kinds(&c).contains(&EventKind::SegmentsReplaced));

    // The tail goes on: the next seal is recorded after the replaced history.
    let (last_base, last_bytes) = f.segs.last().unwrap();
    a.apply_seal(&seal_of(&f.source, *last_base, last_bytes, true))
        .await
        .unwrap();
    assert_eq!(catalog_rows(&c).last().unwrap().0, *last_base);
}

#[tokio::test]
async fn tail_catalog_replacement_recovered_after_the_journal_is_recorded() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let mut a = with_catalog(&f, tmp.path());
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let new = compacted(&f.segs[1..3]);
    let seal = replace_seal(&p, &bases[1..3], &new);
    // A crash right after the commit point: `.swap` files and the journal, nothing renamed, catalog untouched.
    let dir = mirror_log(&f.mirror, 0).parent().unwrap().to_path_buf();
    let log_name = segment_file_name(bases[1], SegmentFileKind::Log);
    std::fs::write(dir.join(format!("{log_name}.swap")), &new).unwrap();
    let mut delete: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| {
            n.starts_with(&format!("{:020}.", bases[2]))
                || (n.starts_with(&format!("{:020}.", bases[1])) && !n.ends_with(".log") && !n.ends_with(".swap"))
        })
        .collect();
    delete.sort();
    let journal = serde_json::json!({
        "topic": p.topic, "partition": p.partition, "delete": delete, "install": [log_name],
        "catalog": {
            "topic_id": p.topic_id, "replaced_bases": &bases[1..3], "size": new.len(),
            "sha256": seal.log_sha256, "last_offset": last_offset(&new), "manifest_key": "tail:orders-2/x",
        },
    });
    let jpath = crate::mirror::replace_journal_file(&f.mirror, "orders-2");
    std::fs::create_dir_all(jpath.parent().unwrap()).unwrap();
    std::fs::write(&jpath, serde_json::to_vec(&journal).unwrap()).unwrap();
    drop(a);
    let c = look(tmp.path());
    let old_rows = catalog_rows(&c);
    assert_eq!(old_rows.len(), bases.len() - 1);

    let mut again = with_catalog(&f, tmp.path());
    again.durable_positions().await.unwrap();
    assert!(!jpath.exists());
    assert_eq!(std::fs::read(mirror_log(&f.mirror, bases[1])).unwrap(), new);
    assert_eq!(catalog_rows(&c), mirror_sealed(&f));
    assert_eq!(catalog_rows(&c).len(), old_rows.len() - 1, "two rows became one");
    // And once more (a crash after the catalog call, before the journal went): nothing changes.
    std::fs::write(&jpath, serde_json::to_vec(&journal).unwrap()).unwrap();
    let mut third = with_catalog(&f, tmp.path());
    third.durable_positions().await.unwrap();
    assert_eq!(catalog_rows(&c), mirror_sealed(&f));
}

#[tokio::test]
async fn tail_catalog_paused_partition_is_neither_swept_nor_replaced() {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let mut a = with_catalog(&f, tmp.path());
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let mut c = look(tmp.path());
    let id = c.partition(&key()).unwrap().id;
    c.set_partition_state(id, PartitionState::Paused).unwrap();
    let before = mirror_sealed(&f);

    let new = compacted(&f.segs[..2]);
    a.stage_replacement(&p, bases[0], 0, new.clone()).await.unwrap();
    let err = a
        .install_replacement(&replace_seal(&p, &bases[..2], &new))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("paused"), "{err}");
    let err = a
        .apply_log_start(&LogStart {
            partition: p.clone(),
            log_start_offset: bases[2],
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("paused"), "{err}");
    assert_eq!(mirror_sealed(&f), before, "nothing deleted or replaced");
    assert_eq!(catalog_rows(&c), before);
    // A session start does not sweep it either, and does not fail.
    let mut again = with_catalog(&f, tmp.path());
    again.durable_positions().await.unwrap();
    assert_eq!(mirror_sealed(&f), before);
    assert_eq!(
        Uuid(p.topic_id).to_string(),
        c.partition(&key()).unwrap().source_topic_id
    );
}

/// Seen in e2e_tail_processes (pull, compaction): the tail sealed segment 1 (catalog row `[b1, b2)`), the source's
/// cleaner merged segment 2 into segment 0 before the tail reached it, so the tail went on at segment 3; then the
/// merged segment 0 arrives as a replacement of the mirror's `[b0, b1]`, holding records up to `b3`. The catalog
/// must take it ending at the mirror's next segment (`b3`), not refuse it at the old row's end (`b2`).
#[tokio::test]
async fn tail_catalog_replacement_reaching_over_a_segment_the_mirror_never_received_ends_at_the_next_mirror_segment() {
    let f = fixture();
    assert!(f.segs.len() >= 4, "four segments needed: {}", f.segs.len());
    let tmp = tempfile::tempdir().unwrap();
    let mut a = with_catalog(&f, tmp.path());
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let mut p = None;
    for i in [0, 1] {
        let (base, bytes) = &f.segs[i];
        for c in chunks_of(*base, bytes, 2) {
            a.apply_chunk(&c).await.unwrap();
        }
        let seal = seal_of(&f.source, *base, bytes, true);
        p = Some(seal.partition.clone());
        a.apply_seal(&seal).await.unwrap();
    }
    let p = p.unwrap();
    // Segment 2 never reaches the mirror: the tail goes on at segment 3.
    let (b3, s3) = &f.segs[3];
    for c in chunks_of(*b3, s3, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let c = look(tmp.path());
    let id = c.partition(&key()).unwrap().id;
    assert_eq!(c.segment(id, bases[1]).unwrap().unwrap().version.next_offset, bases[2]);

    let new = compacted(&f.segs[..3]);
    assert!(
        last_offset(&new) >= bases[2],
        "the merged segment reaches beyond row 1's end"
    );
    a.stage_replacement(&p, bases[0], 0, new.clone()).await.unwrap();
    let seal = ReplaceSeal {
        next_base: Some(bases[3]),
        ..replace_seal(&p, &bases[..2], &new)
    };
    a.install_replacement(&seal).await.unwrap();
    assert_eq!(std::fs::read(mirror_log(&f.mirror, bases[0])).unwrap(), new);
    let merged = c.segment(id, bases[0]).unwrap().unwrap().version;
    assert_eq!((merged.next_offset, merged.last_offset), (bases[3], last_offset(&new)));
    assert_eq!(catalog_rows(&c), mirror_sealed(&f));
    // The tail goes on at segment 3 and its seal follows the replaced history.
    a.apply_seal(&seal_of(&f.source, *b3, s3, true)).await.unwrap();
    assert_eq!(catalog_rows(&c).last().unwrap().0, *b3);
}
