//! Promotion of a mirror the tail appender wrote (with its catalog) after the source ran retention on one
//! partition and compaction on the other: the catalog followed both, so promotion succeeds and the target's
//! `log-start-offset-checkpoint` carries the source's log start.

use std::path::Path;

use bytes::Bytes;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::scan_frames;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
use segment_format::writer::{PartitionWriter, WrittenPartition};
use segmirror_catalog::{Catalog, PartitionKey};
use segmirror_transport::direct::payload::{Chunk, Companion, CompanionKind, LogStart, PartitionRef, SegmentSeal};
use segmirror_transport::direct::session::ChunkApplier;
use sha2::Digest;

use super::tests::{config, fixture_with, target_state};
use crate::direct::{rebuild_index, ReplaceSeal, TailAppender, TailCatalog};

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

/// Tail every segment of the source partitions `written` (under `source`) into the appender: each one's bytes as one
/// chunk, every segment but the last sealed with its indexes. Returns each partition's segment bases.
async fn tail_every_segment(a: &mut TailAppender, source: &Path, written: &[WrittenPartition]) -> Vec<Vec<i64>> {
    let mut bases = Vec::new();
    for w in written {
        let dir = source.join(format!("{TOPIC}-{}", w.partition));
        let segs: Vec<i64> = w.segments.iter().map(|s| s.base_offset).collect();
        assert!(segs.len() >= 4, "the source rolls: {segs:?}");
        for (i, base) in segs.iter().enumerate() {
            let bytes = std::fs::read(dir.join(segment_file_name(*base, SegmentFileKind::Log))).unwrap();
            a.apply_chunk(&Chunk {
                partition: pref(w.partition),
                segment_base: *base,
                position: 0,
                bytes: Bytes::from(bytes.clone()),
                crcs: Default::default(),
            })
            .await
            .unwrap();
            if i + 1 < segs.len() {
                let file = |kind| std::fs::read(dir.join(segment_file_name(*base, kind))).unwrap();
                a.apply_seal(&SegmentSeal {
                    partition: pref(w.partition),
                    segment_base: *base,
                    final_size: bytes.len() as u64,
                    log_sha256: sha(&bytes),
                    companions: vec![
                        inline(CompanionKind::OffsetIndex, file(SegmentFileKind::Index)),
                        inline(CompanionKind::TimeIndex, file(SegmentFileKind::TimeIndex)),
                    ],
                })
                .await
                .unwrap();
            }
        }
        bases.push(segs);
    }
    bases
}

/// Replace partition 1's first two segments (`bases`) in the mirror as the source's cleaner would: merged into one,
/// keeping every other batch, staged and installed through the appender. Returns the merged `.log`.
async fn merge_first_two(a: &mut TailAppender, mirror: &Path, source: &Path, bases: &[i64]) -> Vec<u8> {
    let dir1 = mirror.join(format!("{TOPIC}-1"));
    let mut merged = Vec::new();
    for (n, frame) in bases[..2]
        .iter()
        .flat_map(|b| {
            let bytes = std::fs::read(dir1.join(segment_file_name(*b, SegmentFileKind::Log))).unwrap();
            scan_frames(&bytes, 0)
                .map(|fr| {
                    let fr = fr.unwrap();
                    bytes[fr.info.position as usize..(fr.info.position + fr.info.size) as usize].to_vec()
                })
                .collect::<Vec<_>>()
        })
        .enumerate()
    {
        if n % 2 == 0 {
            merged.extend_from_slice(&frame);
        }
    }
    a.stage_replacement(&pref(1), bases[0], 0, merged.clone())
        .await
        .unwrap();
    let staged = source.with_file_name("merged.log");
    std::fs::write(&staged, &merged).unwrap();
    let index = |kind| rebuild_index(&staged, bases[0], kind).unwrap();
    a.install_replacement(&ReplaceSeal {
        partition: pref(1),
        replaced_bases: bases[..2].to_vec(),
        final_size: merged.len() as u64,
        log_sha256: sha(&merged),
        companions: vec![
            inline(CompanionKind::OffsetIndex, index(CompanionKind::OffsetIndex)),
            inline(CompanionKind::TimeIndex, index(CompanionKind::TimeIndex)),
        ],
        next_base: None,
    })
    .await
    .unwrap();
    merged
}

#[tokio::test]
async fn a_tailed_mirror_after_retention_and_a_compaction_swap_is_promoted_with_the_log_start() {
    let mut f = fixture_with(write_source, [0, 0]);
    // The fixture wrote the partitions where the mirror goes: they are the source; the tail writes the mirror.
    let source = f.mirror.with_file_name("source");
    std::fs::rename(&f.mirror, &source).unwrap();
    let catalog_path = source.with_file_name("catalog.sqlite");
    let mut a = TailAppender::open_with_catalog(
        &f.mirror,
        TailCatalog::open(Catalog::open(&catalog_path).unwrap(), LINK).unwrap(),
    )
    .unwrap();
    let bases = tail_every_segment(&mut a, &source, &f.written).await;
    // Partition 0: the source's log start moved inside its third segment; the first two go.
    let log_start = bases[0][2] + 1;
    a.apply_log_start(&LogStart {
        partition: pref(0),
        log_start_offset: log_start,
    })
    .await
    .unwrap();
    // Partition 1: the cleaner merged its first two segments, keeping every other batch.
    let merged = merge_first_two(&mut a, &f.mirror, &source, &bases[1]).await;
    drop(a);

    f.catalog = Catalog::open(&catalog_path).unwrap();
    assert_eq!(
        f.catalog
            .partition(&PartitionKey::new(LINK, TOPIC, 0))
            .unwrap()
            .log_start_offset,
        log_start
    );
    let report = f.promote().unwrap();
    assert_eq!(report.changed(), 2);
    for (w, start) in f.written.iter().zip([log_start, 0]) {
        let p = report.partitions.iter().find(|p| p.partition == w.partition).unwrap();
        assert_eq!((p.log_start_offset, p.log_end_offset), (start, Some(w.log_end_offset)));
    }
    let (files, checkpoints) = target_state(&f.target);
    let entries: Vec<(String, i32, i64)> = checkpoints["log-start-offset-checkpoint"]
        .iter()
        .map(|e| (e.topic.clone(), e.partition, e.offset))
        .collect();
    assert_eq!(entries, vec![(TOPIC.to_string(), 0, log_start)]);
    // Partition 0 starts at the segment holding the log start; partition 1 with the merged segment.
    let logs = |p: i32| -> Vec<String> {
        let mut v: Vec<String> = files
            .keys()
            .filter_map(|k| k.to_str())
            .filter(|k| k.starts_with(&format!("{TOPIC}-{p}/")) && k.ends_with(".log"))
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    // Partition 0 starts at the segment holding the log start; partition 1 with the merged segment (promotion may
    // add an empty segment at the log end).
    let names = |p: i32, bases: &[i64]| -> Vec<String> {
        bases
            .iter()
            .map(|b| format!("{TOPIC}-{p}/{}", segment_file_name(*b, SegmentFileKind::Log)))
            .collect()
    };
    assert_eq!(logs(0)[..bases[0].len() - 2], names(0, &bases[0][2..]));
    let mut kept1 = vec![bases[1][0]];
    kept1.extend_from_slice(&bases[1][2..]);
    assert_eq!(logs(1)[..kept1.len()], names(1, &kept1));
    let merged_in_target = std::fs::read(f.target.join(&logs(1)[0])).unwrap();
    assert_eq!(
        merged_in_target.len(),
        merged.len(),
        "the merged segment, restamped in place"
    );
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
