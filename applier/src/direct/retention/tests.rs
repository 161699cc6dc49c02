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
    // A log start at the installed end still keeps the segment being tailed (it holds the end).
    let end = installed_end(&a, &p);
    a.apply_log_start(&log_start(&p, end)).await.unwrap();
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *last_base)).unwrap(), last_bytes);
    for (base, _) in &f.segs[..f.segs.len() - 1] {
        assert!(!exists(&mirror_log(&f.mirror, *base)), "segment {base} deleted");
    }
    assert_eq!(tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(), Some(end));
}

/// The partition's installed end: the offset after its last durable batch.
fn installed_end(a: &TailAppender, p: &PartitionRef) -> i64 {
    let inner = a.inner.lock().unwrap();
    inner.states[&tp_name(p)].next_offset.expect("batches installed")
}

/// The `.log` files of the mirror's partition, by base offset.
fn mirror_bases(f: &Fixture) -> Vec<i64> {
    let dir = mirror_log(&f.mirror, f.segs[0].0).parent().unwrap().to_path_buf();
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log").map(|b| b.parse().unwrap())
        })
        .collect();
    bases.sort_unstable();
    bases
}

#[tokio::test]
async fn tail_retention_a_log_start_beyond_the_installed_end_deletes_nothing_then_or_at_later_seals() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    // Every segment but the last tailed and sealed; the last one tailed, not sealed.
    let p = tail_all(&f, &mut a).await;
    let all: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let end = installed_end(&a, &p);
    // A forged log start far beyond what the mirror holds (and what any source holds): nothing deleted, nothing
    // recorded as the log start, the catalog-facing value unchanged.
    a.apply_log_start(&log_start(&p, 1_000_000_000_000)).await.unwrap();
    a.apply_log_start(&log_start(&p, end + 1)).await.unwrap();
    assert_eq!(mirror_bases(&f), all, "nothing deleted");
    assert_eq!(tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(), None);
    // The tail goes on: the last segment sealed (a sweep runs at every seal) deletes nothing either.
    let (last_base, last_bytes) = f.segs.last().unwrap();
    a.apply_seal(&seal_of(&f.source, *last_base, last_bytes, true))
        .await
        .unwrap();
    assert_eq!(mirror_bases(&f), all, "nothing deleted at the seal");
    // A new session drops the held value: nothing it could prove later deletes anything.
    a.durable_positions().await.unwrap();
    let record = read_record(&record_path(&f.mirror, &tp_name(&p))).unwrap().unwrap();
    assert_eq!((record.log_start, record.held), (None, None));
    assert_eq!(mirror_bases(&f), all);
    // An honest log start within the installed range still applies: whole segments below it go.
    a.apply_log_start(&log_start(&p, all[1] + 1)).await.unwrap();
    assert_eq!(mirror_bases(&f), all[1..].to_vec());
}

#[tokio::test]
async fn tail_retention_a_held_log_start_applies_when_the_shipper_continues_past_the_end_at_a_sealed_segment() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    // Segments 0 and 1 tailed and sealed; segment 2 never shipped: retention deleted it at the source, and the
    // shipper continues at segment 3, telling its base first.
    let mut p = None;
    for (base, bytes) in &f.segs[..2] {
        for c in chunks_of(*base, bytes, 2) {
            a.apply_chunk(&c).await.unwrap();
        }
        let seal = seal_of(&f.source, *base, bytes, true);
        a.apply_seal(&seal).await.unwrap();
        p = Some(seal.partition);
    }
    let p = p.unwrap();
    assert!(installed_end(&a, &p) < bases[3]);
    a.apply_log_start(&log_start(&p, bases[3])).await.unwrap();
    assert_eq!(mirror_bases(&f), bases[..2].to_vec(), "held: nothing deleted yet");
    let (b3, bytes3) = &f.segs[3];
    for c in chunks_of(*b3, bytes3, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    // Proven by the segment the shipper continued at: at the next sweep (a seal, or a session start) the
    // segments below it go and the log start is recorded.
    a.apply_seal(&seal_of(&f.source, *b3, bytes3, true)).await.unwrap();
    assert_eq!(mirror_bases(&f), vec![*b3]);
    assert_eq!(tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(), Some(*b3));
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
    // A negative one is bad peer data: refused (the session's end, not the process's), nothing recorded.
    let e = a.apply_log_start(&log_start(&p, -5)).await.unwrap_err();
    assert!(matches!(e, DirectError::PeerData { .. }), "{e}");
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
        unsealed: BTreeSet::new(),
        held: None,
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

/// Segment 0 tailed and sealed, segment 1 tailed partly (its first chunk) and not sealed; returns the partition
/// and the durable position in segment 1.
async fn tail_into_segment_1(f: &Fixture, a: &mut TailAppender) -> (PartitionRef, u64) {
    let (b0, bytes0) = &f.segs[0];
    for c in chunks_of(*b0, bytes0, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let seal = seal_of(&f.source, *b0, bytes0, true);
    a.apply_seal(&seal).await.unwrap();
    let (b1, bytes1) = &f.segs[1];
    let first = chunks_of(*b1, bytes1, 2).remove(0);
    a.apply_chunk(&first).await.unwrap();
    (seal.partition, first.bytes.len() as u64)
}

/// Every chunk of segment 2, applied.
async fn tail_segment_2(f: &Fixture, a: &mut TailAppender) {
    let (b2, bytes2) = &f.segs[2];
    for c in chunks_of(*b2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
}

#[tokio::test]
async fn tail_retention_an_unsealed_segment_the_source_deleted_is_dropped_and_the_tail_goes_on() {
    let f = fixture();
    // A long keep: the sealed segment 0 is kept, the unsealed segment 1 goes all the same.
    let mut a = TailAppender::open(&f.mirror).unwrap().retain_deleted_for(LONG_KEEP);
    let (p, partway) = tail_into_segment_1(&f, &mut a).await;
    let bases: Vec<i64> = f.segs.iter().map(|(b, _)| *b).collect();
    let (b2, bytes2) = &f.segs[2];
    // Without a LogStart past it, leaving an unsealed segment is refused.
    let first2 = chunks_of(*b2, bytes2, 2).remove(0);
    let err = a.apply_chunk(&first2).await.unwrap_err().to_string();
    assert!(err.contains("not sealed yet"), "{err}");
    assert!(!exists(&mirror_log(&f.mirror, *b2)));
    // The source deleted segments 0 and 1: the LogStart alone keeps the segment being tailed.
    a.apply_log_start(&log_start(&p, *b2)).await.unwrap();
    assert!(exists(&mirror_log(&f.mirror, bases[1])));
    // The shipper continues at segment 2: segment 1 is dropped, segment 2 accepted from 0.
    tail_segment_2(&f, &mut a).await;
    assert!(!exists(&mirror_log(&f.mirror, bases[1])), "unsealed segment 1 deleted");
    assert!(
        exists(&mirror_log(&f.mirror, bases[0])),
        "sealed segment 0 kept for the long keep"
    );
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *b2)).unwrap(), bytes2);
    let d = a.durable_positions().await.unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].position.segment_base, d[0].position.position),
        (*b2, bytes2.len() as u64)
    );
    assert!(partway > 0);
    let record = read_record(&record_path(&f.mirror, &tp_name(&p))).unwrap().unwrap();
    assert!(record.unsealed.is_empty(), "{record:?}");
    assert_eq!(record.log_start, Some(*b2));
}

#[tokio::test]
async fn tail_retention_a_crash_while_dropping_an_unsealed_segment_recovers_at_the_next_session() {
    let bases_of = |f: &Fixture| f.segs.iter().map(|(b, _)| *b).collect::<Vec<i64>>();
    // Crash after the record noted segment 1 as deleted, before the state moved: the session resumes in
    // segment 1 (kept), and the shipper's LogStart and segment 2 drop it then.
    {
        let f = fixture();
        let bases = bases_of(&f);
        let mut a = TailAppender::open(&f.mirror).unwrap();
        let (p, partway) = tail_into_segment_1(&f, &mut a).await;
        a.apply_log_start(&log_start(&p, bases[2])).await.unwrap();
        a.inner
            .lock()
            .unwrap()
            .note_unsealed_deleted(&tp_name(&p), bases[1], partway)
            .unwrap();
        drop(a);
        let mut a = TailAppender::open(&f.mirror).unwrap();
        let d = a.durable_positions().await.unwrap();
        assert_eq!(
            (d[0].position.segment_base, d[0].position.position),
            (bases[1], partway)
        );
        assert!(exists(&mirror_log(&f.mirror, bases[1])));
        a.apply_log_start(&log_start(&p, bases[2])).await.unwrap();
        tail_segment_2(&f, &mut a).await;
        assert!(!exists(&mirror_log(&f.mirror, bases[1])));
        assert_eq!(&std::fs::read(mirror_log(&f.mirror, bases[2])).unwrap(), &f.segs[2].1);
    }
    // Crash after the state claimed segment 2 at 0, before the sweep: the next session start deletes segment 1
    // and resumes at segment 2 byte 0.
    {
        let f = fixture();
        let bases = bases_of(&f);
        let mut a = TailAppender::open(&f.mirror).unwrap();
        let (p, partway) = tail_into_segment_1(&f, &mut a).await;
        a.apply_log_start(&log_start(&p, bases[2])).await.unwrap();
        {
            let mut inner = a.inner.lock().unwrap();
            let name = tp_name(&p);
            inner.note_unsealed_deleted(&name, bases[1], partway).unwrap();
            let claim = PartitionState {
                segment_base: bases[2],
                position: 0,
                ..inner.states[&name].clone()
            };
            inner.record(name, claim).unwrap();
        }
        drop(a);
        let mut a = TailAppender::open(&f.mirror).unwrap();
        let d = a.durable_positions().await.unwrap();
        assert_eq!((d[0].position.segment_base, d[0].position.position), (bases[2], 0));
        assert!(
            !exists(&mirror_log(&f.mirror, bases[1])),
            "deleted by the recovery sweep"
        );
        tail_segment_2(&f, &mut a).await;
        assert_eq!(&std::fs::read(mirror_log(&f.mirror, bases[2])).unwrap(), &f.segs[2].1);
    }
}

/// Every chunk of segment `i` of the fixture, then its seal.
async fn tail_and_seal(f: &Fixture, a: &mut TailAppender, i: usize) -> PartitionRef {
    let (base, bytes) = &f.segs[i];
    for c in chunks_of(*base, bytes, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    let seal = seal_of(&f.source, *base, bytes, true);
    a.apply_seal(&seal).await.unwrap();
    seal.partition
}

#[tokio::test]
async fn tail_retention_a_held_log_start_the_tail_does_not_follow_with_a_skip_never_deletes() {
    let far = 1_000_000_000_000;
    // Told while a sealed segment was tailed: the next segments continue right at its end (no gap).
    {
        let f = fixture();
        let mut a = TailAppender::open(&f.mirror).unwrap();
        tail_and_seal(&f, &mut a, 0).await;
        let p = tail_and_seal(&f, &mut a, 1).await;
        a.apply_log_start(&log_start(&p, far)).await.unwrap();
        for i in 2..f.segs.len() {
            tail_and_seal(&f, &mut a, i).await;
        }
        assert_eq!(mirror_bases(&f), f.segs.iter().map(|(b, _)| *b).collect::<Vec<_>>());
        let record = read_record(&record_path(&f.mirror, &tp_name(&p))).unwrap().unwrap();
        assert_eq!(
            (record.log_start, record.held),
            (None, None),
            "dropped once the tail went on"
        );
    }
    // Told while an unsealed segment was tailed: it is completed and sealed, and the tail goes on.
    {
        let f = fixture();
        let mut a = TailAppender::open(&f.mirror).unwrap();
        let (p, _) = tail_into_segment_1(&f, &mut a).await;
        a.apply_log_start(&log_start(&p, far)).await.unwrap();
        let (b1, bytes1) = &f.segs[1];
        for c in chunks_of(*b1, bytes1, 2).into_iter().skip(1) {
            a.apply_chunk(&c).await.unwrap();
        }
        a.apply_seal(&seal_of(&f.source, *b1, bytes1, true)).await.unwrap();
        for i in 2..f.segs.len() {
            tail_and_seal(&f, &mut a, i).await;
        }
        assert_eq!(mirror_bases(&f), f.segs.iter().map(|(b, _)| *b).collect::<Vec<_>>());
        assert_eq!(tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(), None);
    }
}
