//! Retention on the mirror: what the source deleted goes, durably, never the segment being tailed; a longer keep
//! is honoured across restarts; an interrupted deletion is completed at the next session start.

use std::path::Path;
use std::time::Duration;

use segmirror_transport::direct::payload::{LogStart, PartitionRef};

use super::super::tests::{chunks_of, fixture, mirror_log, seal_of, Fixture};
use super::*;

/// A keep long enough that no test run reaches it.
const LONG_KEEP: Duration = Duration::from_secs(24 * 3600);

/// Tails every segment of the fixture, sealing all but the last; returns the partition.
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

fn exists(path: &Path) -> bool {
    path.exists()
}

fn companion(mirror: &Path, base: i64, kind: SegmentFileKind) -> PathBuf {
    mirror_log(mirror, base).with_file_name(segment_file_name(base, kind))
}

fn log_start(partition: &PartitionRef, offset: i64) -> LogStart {
    LogStart {
        partition: partition.clone(),
        log_start_offset: offset,
    }
}

#[tokio::test]
async fn tail_retention_deletes_whole_segments_below_the_log_start_and_records_it() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    // A log start inside segment 2: segments 0 and 1 are wholly below it, segment 2 holds it.
    let start = bases[2] + 1;
    a.apply_log_start(&log_start(&p, start)).await.unwrap();
    for base in &bases[..2] {
        assert!(!exists(&mirror_log(&f.mirror, *base)), "segment {base} deleted");
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            assert!(
                !exists(&companion(&f.mirror, *base, kind)),
                "{kind:?} of {base} deleted"
            );
        }
    }
    for (base, bytes) in &f.segs[2..] {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base} kept"
        );
    }
    assert_eq!(tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(), Some(start));
    // The tail goes on where it was.
    let (last_base, last_bytes) = f.segs.last().unwrap();
    let d = a.durable_positions().await.unwrap();
    assert_eq!(
        (d[0].position.segment_base, d[0].position.position),
        (*last_base, last_bytes.len() as u64)
    );
    // A log start beyond every segment still keeps the one being tailed.
    a.apply_log_start(&log_start(&p, last_base + 1_000)).await.unwrap();
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *last_base)).unwrap(), last_bytes);
    for (base, _) in &f.segs[..f.segs.len() - 1] {
        assert!(!exists(&mirror_log(&f.mirror, *base)), "segment {base} deleted");
    }
}

#[tokio::test]
async fn tail_retention_a_log_start_going_backwards_or_of_another_topic_id_changes_nothing() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    a.apply_log_start(&log_start(&p, bases[1])).await.unwrap();
    assert!(!exists(&mirror_log(&f.mirror, bases[0])));
    a.apply_log_start(&log_start(&p, bases[0])).await.unwrap();
    assert_eq!(
        tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(),
        Some(bases[1])
    );
    let other = PartitionRef {
        topic_id: [9; 16],
        ..p.clone()
    };
    assert!(a.apply_log_start(&log_start(&other, bases[3])).await.is_err());
    assert!(
        exists(&mirror_log(&f.mirror, bases[1])),
        "nothing deleted for another lineage"
    );
    assert_eq!(
        tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(),
        Some(bases[1])
    );
}

#[tokio::test]
async fn tail_retention_keeps_deleted_segments_for_the_configured_time_across_restarts() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap().retain_deleted_for(LONG_KEEP);
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    a.apply_log_start(&log_start(&p, bases[2])).await.unwrap();
    for base in &bases {
        assert!(exists(&mirror_log(&f.mirror, *base)), "segment {base} kept for now");
    }
    // Restarted with the same keep: still there, and the clock is the recorded one.
    let mut again = TailAppender::open(&f.mirror).unwrap().retain_deleted_for(LONG_KEEP);
    again.durable_positions().await.unwrap();
    assert!(exists(&mirror_log(&f.mirror, bases[0])));
    let record_file = record_path(&f.mirror, &format!("{}-{}", p.topic, p.partition));
    let mut record: RetentionState = serde_json::from_slice(&std::fs::read(&record_file).unwrap()).unwrap();
    assert_eq!(
        record.below_start_since.keys().copied().collect::<Vec<_>>(),
        bases[..2].to_vec()
    );
    // The keep runs out for segment 0 only (its clock set back past it): the next session start deletes it.
    let long_ago = now_ms() - u64::try_from(LONG_KEEP.as_millis()).unwrap() - 1;
    record.below_start_since.insert(bases[0], long_ago);
    std::fs::write(&record_file, serde_json::to_vec(&record).unwrap()).unwrap();
    again.durable_positions().await.unwrap();
    assert!(!exists(&mirror_log(&f.mirror, bases[0])), "segment 0 deleted when due");
    assert!(exists(&mirror_log(&f.mirror, bases[1])), "segment 1 not due yet");
    let record: RetentionState = serde_json::from_slice(&std::fs::read(&record_file).unwrap()).unwrap();
    assert_eq!(
        record.below_start_since.keys().copied().collect::<Vec<_>>(),
        vec![bases[1]]
    );
}

#[tokio::test]
async fn tail_retention_an_interrupted_deletion_is_completed_at_the_next_session_start() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let p = tail_all(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    // A crash after the log start was recorded and segment 0's `.log` unlinked, before anything else went.
    let record = RetentionState {
        topic: p.topic.clone(),
        partition: p.partition,
        topic_id: p.topic_id,
        log_start: Some(bases[2]),
        below_start_since: BTreeMap::new(),
    };
    let record_file = record_path(&f.mirror, &format!("{}-{}", p.topic, p.partition));
    std::fs::create_dir_all(record_file.parent().unwrap()).unwrap();
    std::fs::write(&record_file, serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::remove_file(mirror_log(&f.mirror, bases[0])).unwrap();
    assert!(exists(&companion(&f.mirror, bases[0], SegmentFileKind::Index)));

    let mut again = TailAppender::open(&f.mirror).unwrap();
    again.durable_positions().await.unwrap();
    for base in &bases[..2] {
        for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            assert!(
                !exists(&companion(&f.mirror, *base, kind)),
                "{kind:?} of {base} deleted"
            );
        }
    }
    for (base, bytes) in &f.segs[2..] {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base} kept"
        );
    }
}
