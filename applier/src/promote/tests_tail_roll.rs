//! Promotion of a tailed mirror whose segments were rolled by several shippers (feature bit 6): the first segment
//! of each partition ends where the old leader's shipping stopped (a Roll), the next one holds the rest of the
//! source's first segment in the new leader's layout and is rolled too, then the source's own layout follows.
//! Promotion takes it: every record at its offset, the target `verify --deep --strict` sound.

use std::path::Path;

use bytes::Bytes;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::scan_frames;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::writer::{PartitionWriter, WrittenPartition};
use segmirror_catalog::Catalog;
use segmirror_transport::direct::payload::{Chunk, Companion, CompanionKind, PartitionRef, Roll, SegmentSeal};
use segmirror_transport::direct::session::ChunkApplier;
use sha2::Digest;

use super::tests::{config, fixture_with};
use crate::direct::{TailAppender, TailCatalog};

const LINK: &str = "l";
const TOPIC: &str = "orders";
const SOURCE_ID: segment_format::partition_metadata::Uuid = segment_format::partition_metadata::Uuid([1; 16]);

fn write_source(root: &Path, partition: i32) -> WrittenPartition {
    let mut w = PartitionWriter::create(root, TOPIC, partition, 0, config(SOURCE_ID)).unwrap();
    w.become_leader(3);
    for _ in 0..14 {
        let base = w.next_offset();
        let mut b = BatchBuilder::new(base).partition_leader_epoch(3);
        for i in 0..3 {
            b = b.record(RecordSpec::new(i, 1_700_000_000_000 + base).with_value(vec![b'v'; 40]));
        }
        w.append(b).unwrap();
    }
    w.close().unwrap()
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

fn pref(partition: i32) -> PartitionRef {
    PartitionRef {
        topic: TOPIC.into(),
        partition,
        topic_id: SOURCE_ID.0,
    }
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

fn chunk(partition: i32, base: i64, position: usize, bytes: &[u8]) -> Chunk {
    Chunk {
        partition: pref(partition),
        segment_base: base,
        position: position as u64,
        bytes: Bytes::copy_from_slice(bytes),
        crcs: Default::default(),
    }
}

#[tokio::test]
async fn a_tailed_mirror_with_rolled_mirror_layout_segments_is_promoted() {
    let mut f = fixture_with(write_source, [0, 0]);
    let source = f.mirror.with_file_name("source");
    std::fs::rename(&f.mirror, &source).unwrap();
    let catalog_path = source.with_file_name("catalog.sqlite");
    let mut a = TailAppender::open_with_catalog(
        &f.mirror,
        TailCatalog::open(Catalog::open(&catalog_path).unwrap(), LINK).unwrap(),
    )
    .unwrap();
    for w in &f.written {
        let p = w.partition;
        let dir = source.join(format!("{TOPIC}-{p}"));
        let segs: Vec<i64> = w.segments.iter().map(|s| s.base_offset).collect();
        assert!(segs.len() >= 3, "the source rolls: {segs:?}");
        let read = |base: i64, kind| std::fs::read(dir.join(segment_file_name(base, kind))).unwrap();
        // The old leader shipped the first half of the source's first segment; the mirror's segment ends there.
        let first = read(segs[0], SegmentFileKind::Log);
        let frames: Vec<_> = scan_frames(&first, 0).map(|fr| fr.unwrap().info).collect();
        assert!(frames.len() >= 2, "a segment to split");
        let cut = &frames[frames.len() / 2];
        let (cut_at, cut_offset) = (cut.position as usize, cut.base_offset);
        a.apply_chunk(&chunk(p, segs[0], 0, &first[..cut_at])).await.unwrap();
        let roll = |base: i64, size: usize, next: i64, digest| Roll {
            partition: pref(p),
            segment_base: base,
            final_size: size as u64,
            next_offset: next,
            log_sha256: digest,
        };
        a.apply_roll(&roll(segs[0], cut_at, cut_offset, None)).await.unwrap();
        // The new leader's replica: the rest of those batches in a segment of their own, rolled at the source's
        // next segment.
        let rest = &first[cut_at..];
        a.apply_chunk(&chunk(p, cut_offset, 0, rest)).await.unwrap();
        a.apply_roll(&roll(cut_offset, rest.len(), segs[1], Some(sha(rest))))
            .await
            .unwrap();
        // Then the source's layout with ordinary seals; the last segment stays active.
        for (i, base) in segs.iter().enumerate().skip(1) {
            let bytes = read(*base, SegmentFileKind::Log);
            a.apply_chunk(&chunk(p, *base, 0, &bytes)).await.unwrap();
            if i + 1 < segs.len() {
                a.apply_seal(&SegmentSeal {
                    partition: pref(p),
                    segment_base: *base,
                    final_size: bytes.len() as u64,
                    log_sha256: sha(&bytes),
                    companions: vec![
                        inline(CompanionKind::OffsetIndex, read(*base, SegmentFileKind::Index)),
                        inline(CompanionKind::TimeIndex, read(*base, SegmentFileKind::TimeIndex)),
                    ],
                })
                .await
                .unwrap();
            }
        }
    }
    drop(a);

    f.catalog = Catalog::open(&catalog_path).unwrap();
    let report = f.promote().unwrap();
    assert_eq!(report.changed(), 2);
    for w in &f.written {
        let p = report.partitions.iter().find(|p| p.partition == w.partition).unwrap();
        assert_eq!((p.log_start_offset, p.log_end_offset), (0, Some(w.log_end_offset)));
        // The target holds every batch of the source, once and in order (restamped in place: same sizes).
        let tdir = f.target.join(format!("{TOPIC}-{}", w.partition));
        let mut logs: Vec<(i64, Vec<u8>)> = std::fs::read_dir(&tdir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                let base = name.strip_suffix(".log")?.parse().ok()?;
                Some((base, std::fs::read(tdir.join(&name)).unwrap()))
            })
            .collect();
        logs.sort();
        let offsets: Vec<(i64, i64)> = logs
            .iter()
            .flat_map(|(_, bytes)| {
                scan_frames(bytes, 0)
                    .map(|fr| {
                        let info = fr.unwrap().info;
                        (info.base_offset, info.last_offset)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(offsets.first().map(|o| o.0), Some(0));
        assert!(offsets.windows(2).all(|o| o[1].0 == o[0].1 + 1), "{offsets:?}");
        assert_eq!(offsets.last().map(|o| o.1 + 1), Some(w.log_end_offset));
    }
    let verified = verify_paths(
        &[f.target.clone()],
        &VerifyOptions {
            depth: Depth::Deep,
            strictness: Strictness::Strict,
        },
        &NoProgress,
    );
    assert!(verified.io_errors.is_empty(), "{:?}", verified.io_errors);
    assert!(verified.findings.is_empty(), "{:#?}", verified.findings);
}
