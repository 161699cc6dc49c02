//! The appender against segments written byte for byte by segment-format's writer.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig};
use segmirror_transport::direct::error::ErrorClass;
use segmirror_transport::direct::payload::{Companion, CompanionKind, PartitionRef, SegmentSeal};
use sha2::Digest;

use super::*;

const TOPIC: &str = "orders";
const PARTITION: i32 = 2;
const TOPIC_ID: [u8; 16] = [7; 16];
/// Small segments so the source rolls: several segments of several batches.
const SEGMENT_BYTES: u64 = 1500;
const BATCHES: i64 = 30;

pub(super) fn pref() -> PartitionRef {
    PartitionRef {
        topic: TOPIC.into(),
        partition: PARTITION,
        topic_id: TOPIC_ID,
    }
}

/// Writes a source partition; returns its directory.
fn write_source(root: &Path) -> PathBuf {
    let cfg = WriterConfig {
        segment_bytes: SEGMENT_BYTES,
        fsync: false,
        topic_id: Some(Uuid(TOPIC_ID)),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, TOPIC, PARTITION, 0, cfg).unwrap();
    w.become_leader(3);
    for i in 0..BATCHES {
        let base = w.next_offset();
        let mut b = BatchBuilder::new(base).partition_leader_epoch(3);
        for r in 0..(1 + i % 3) as i32 {
            b = b.record(RecordSpec::new(r, 1_700_000_000_000 + base).with_value(vec![b'v'; 40 + i as usize]));
        }
        w.append(b).unwrap();
    }
    let dir = w.dir().to_path_buf();
    w.close().unwrap();
    dir
}

/// The source's segments: (base offset, .log bytes), in order.
fn segments(dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let mut out: Vec<(i64, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let base = name.strip_suffix(".log")?.parse().ok()?;
            Some((base, std::fs::read(dir.join(&name)).unwrap()))
        })
        .collect();
    out.sort();
    out
}

/// Batch boundaries of a log: start positions of every batch, then its end.
pub(super) fn boundaries(bytes: &[u8]) -> Vec<usize> {
    let mut out: Vec<usize> = scan_frames(bytes, 0)
        .map(|f| f.unwrap().info.position as usize)
        .collect();
    out.push(bytes.len());
    out
}

pub(super) fn chunk(base: i64, bytes: &[u8], from: usize, to: usize) -> Chunk {
    Chunk {
        partition: pref(),
        segment_base: base,
        position: from as u64,
        bytes: Bytes::copy_from_slice(&bytes[from..to]),
        crcs: Default::default(),
    }
}

/// Chunks of `per` batches each covering the whole segment.
pub(super) fn chunks_of(base: i64, bytes: &[u8], per: usize) -> Vec<Chunk> {
    let b = boundaries(bytes);
    b.iter()
        .step_by(per)
        .zip(b.iter().skip(per).step_by(per).chain(std::iter::once(&bytes.len())))
        .filter(|(from, to)| from < to)
        .map(|(&from, &to)| chunk(base, bytes, from, to))
        .collect()
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// A seal with the source's indexes: the offset index inline and the time index as a digest (rebuilt by the
/// appender), or the reverse.
pub(super) fn seal_of(dir: &Path, base: i64, bytes: &[u8], inline_offsets: bool) -> SegmentSeal {
    let companion = |kind: CompanionKind, file: SegmentFileKind, inline: bool| {
        let b = std::fs::read(dir.join(segment_file_name(base, file))).unwrap();
        Companion {
            kind,
            size: b.len() as u64,
            sha256: sha(&b),
            inline: inline.then(|| Bytes::from(b)),
            index_interval: None,
        }
    };
    SegmentSeal {
        partition: pref(),
        segment_base: base,
        final_size: bytes.len() as u64,
        log_sha256: sha(bytes),
        companions: vec![
            companion(CompanionKind::OffsetIndex, SegmentFileKind::Index, inline_offsets),
            companion(CompanionKind::TimeIndex, SegmentFileKind::TimeIndex, !inline_offsets),
        ],
    }
}

pub(super) fn mirror_log(mirror: &Path, base: i64) -> PathBuf {
    mirror
        .join(format!("{TOPIC}-{PARTITION}"))
        .join(segment_file_name(base, SegmentFileKind::Log))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

async fn position(a: &mut TailAppender) -> Option<(i64, u64, bool)> {
    let all = a.durable_positions().await.unwrap();
    assert!(all.len() <= 1);
    all.first()
        .map(|d| (d.position.segment_base, d.position.position, d.sealed))
}

pub(super) struct Fixture {
    _tmp: tempfile::TempDir,
    pub(super) source: PathBuf,
    pub(super) mirror: PathBuf,
    pub(super) segs: Vec<(i64, Vec<u8>)>,
}

pub(super) fn fixture() -> Fixture {
    fixture_with(write_source)
}

/// A fixture whose source partition `write` writes (under the given root; it returns the partition directory).
pub(super) fn fixture_with(write: fn(&Path) -> PathBuf) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let source = write(&tmp.path().join("source"));
    let mirror = tmp.path().join("mirror");
    let segs = segments(&source);
    assert!(segs.len() >= 3, "the source must roll: {} segments", segs.len());
    Fixture {
        _tmp: tmp,
        source,
        mirror,
        segs,
    }
}

#[tokio::test]
async fn tail_chunks_in_pieces_reproduce_the_source_byte_for_byte() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let last = f.segs.len() - 1;
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        for (n, c) in chunks_of(*base, bytes, 1 + i % 3).iter().enumerate() {
            a.apply_chunk(c).await.unwrap();
            let end = c.position + c.bytes.len() as u64;
            assert_eq!(
                position(&mut a).await,
                Some((*base, end, false)),
                "chunk {n} of segment {base}"
            );
        }
        if i < last {
            a.apply_seal(&seal_of(&f.source, *base, bytes, i % 2 == 0))
                .await
                .unwrap();
            assert_eq!(position(&mut a).await, Some((*base, bytes.len() as u64, true)));
            for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
                let name = segment_file_name(*base, kind);
                assert_eq!(
                    std::fs::read(f.mirror.join(format!("{TOPIC}-{PARTITION}")).join(&name)).unwrap(),
                    std::fs::read(f.source.join(&name)).unwrap(),
                    "{name}"
                );
            }
        }
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base}"
        );
    }
    // A restarted appender reads the same positions back.
    let mut again = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[last];
    assert_eq!(position(&mut again).await, Some((*base, bytes.len() as u64, false)));
}

/// Applies the first two batches of segment 0; returns the durable end.
async fn started(f: &Fixture, a: &mut TailAppender) -> usize {
    let (base, bytes) = &f.segs[0];
    let b = boundaries(bytes);
    a.apply_chunk(&chunk(*base, bytes, 0, b[2])).await.unwrap();
    b[2]
}

#[tokio::test]
async fn tail_bad_chunks_are_refused_with_nothing_written() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let end = started(&f, &mut a).await;
    let (base, bytes) = &f.segs[0];
    let b = boundaries(bytes);
    let path = mirror_log(&f.mirror, *base);
    let mut bad = Vec::new();
    // A flipped byte in a record: the batch CRC fails.
    let mut corrupt = chunk(*base, bytes, b[2], b[4]);
    let mut v = corrupt.bytes.to_vec();
    let last = v.len() - 1;
    v[last] ^= 0x55;
    corrupt.bytes = Bytes::from(v);
    bad.push(("corrupt batch", "CRC stored", corrupt));
    // Ends inside a batch.
    bad.push((
        "not on a boundary",
        "batch boundary",
        chunk(*base, bytes, b[2], b[3] + 10),
    ));
    // A gap: starts one batch beyond the durable end.
    bad.push(("gap", "the durable bytes end at", chunk(*base, bytes, b[3], b[4])));
    // Right position, but an earlier batch again (offsets go back). A chunk whose offsets skip ahead is taken:
    // a segment the cleaner rewrote has such holes (`catalog_tests`).
    let mut back = chunk(*base, bytes, b[0], b[1]);
    back.position = end as u64;
    bad.push(("offsets back", "previous batch's last offset + 1", back));
    // A later segment while this one is not sealed.
    let (base1, bytes1) = &f.segs[1];
    bad.push((
        "unsealed predecessor",
        "is not sealed yet",
        chunk(*base1, bytes1, 0, boundaries(bytes1)[1]),
    ));
    for (what, reason, c) in bad {
        let e = a.apply_chunk(&c).await.expect_err(what);
        // The shipper's bytes: the session ends, never the applier (`TailError::into_direct`).
        assert!(matches!(e, DirectError::PeerData { .. }), "{what}: {e}");
        assert_eq!(e.class(), ErrorClass::Transient, "{what}: {e}");
        assert!(e.to_string().contains(reason), "{what}: {e}");
        assert_eq!(file_len(&path), end as u64, "{what}: nothing written");
        assert_eq!(position(&mut a).await, Some((*base, end as u64, false)), "{what}");
    }
    assert!(!mirror_log(&f.mirror, *base1).exists());
    // The right chunk still applies afterwards.
    a.apply_chunk(&chunk(*base, bytes, end, b[3])).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes[..b[3]]);
}

#[tokio::test]
async fn tail_first_chunk_must_start_at_zero() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[0];
    let b = boundaries(bytes);
    let e = a.apply_chunk(&chunk(*base, bytes, b[1], b[2])).await.unwrap_err();
    assert!(e.to_string().contains("must start at 0"), "{e}");
    assert_eq!(position(&mut a).await, None);
    assert!(!mirror_log(&f.mirror, *base).exists());
}

#[tokio::test]
async fn tail_unacknowledged_bytes_are_truncated_at_restart() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let end = started(&f, &mut a).await;
    let path = mirror_log(&f.mirror, f.segs[0].0);
    // A crash after the write, before the record: bytes on disk nobody acknowledged.
    {
        use std::io::Write;
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[0xAB; 123]).unwrap();
    }
    drop(a);
    let mut a = TailAppender::open(&f.mirror).unwrap();
    assert_eq!(position(&mut a).await, Some((f.segs[0].0, end as u64, false)));
    assert_eq!(file_len(&path), end as u64);
    assert_eq!(std::fs::read(&path).unwrap(), f.segs[0].1[..end]);
    // Shorter than recorded: acknowledged bytes were lost, an error.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(end as u64 - 1).unwrap();
    let e = a.durable_positions().await.unwrap_err();
    assert!(e.to_string().contains("lost data"), "{e}");
}

#[tokio::test]
async fn tail_seal_with_a_wrong_digest_is_refused() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[0];
    for c in chunks_of(*base, bytes, 4) {
        a.apply_chunk(&c).await.unwrap();
    }
    let good = seal_of(&f.source, *base, bytes, true);
    // (A seal whose `.log` digest differs from the mirror's bytes quarantines the segment instead:
    // `peer_fault_tests::a_forged_segment_is_quarantined_at_its_seal_and_resent`.)
    let mut wrong_companion = good.clone();
    wrong_companion.companions[0].sha256[5] ^= 1;
    let mut twice = good.clone();
    twice.companions.push(good.companions[0].clone());
    let mut wrong_size = good.clone();
    wrong_size.final_size -= 1;
    let mut snapshot = good.clone();
    snapshot.companions.push(Companion {
        kind: CompanionKind::ProducerSnapshot,
        size: 10,
        sha256: sha2::Sha256::digest([0u8; 10]).into(),
        inline: Some(Bytes::from(vec![0u8; 10])),
        index_interval: None,
    });
    // The appender keeps the active segment's own index (`companions`); a refused seal leaves that file alone.
    let index = f
        .mirror
        .join(format!("{TOPIC}-{PARTITION}"))
        .join(segment_file_name(*base, SegmentFileKind::Index));
    let own_index = || {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&index).unwrap();
        (m.ino(), std::fs::read(&index).unwrap())
    };
    let before = own_index();
    for (what, seal) in [
        ("companion", wrong_companion),
        ("twice", twice),
        ("size", wrong_size),
        ("snapshot", snapshot),
    ] {
        let e = a.apply_seal(&seal).await.expect_err(what);
        assert!(e.to_string().contains("not sealed"), "{what}: {e}");
        assert_eq!(
            position(&mut a).await,
            Some((*base, bytes.len() as u64, false)),
            "{what}"
        );
        assert!(own_index() == before, "{what}: no companion written");
    }
    // A rebuilt index that does not match its digest (written with another interval) is refused too.
    let mut wrong_rebuild = good.clone();
    wrong_rebuild.companions[1].sha256[0] ^= 1;
    let e = a.apply_seal(&wrong_rebuild).await.unwrap_err();
    assert!(e.to_string().contains("(rebuilt)"), "{e}");
    assert_eq!(position(&mut a).await, Some((*base, bytes.len() as u64, false)));
    a.apply_seal(&good).await.unwrap();
    assert_eq!(position(&mut a).await, Some((*base, bytes.len() as u64, true)));
}

/// How many seals of `a` were checked against the running digest.
fn running_seals(a: &TailAppender) -> u64 {
    a.inner.lock().unwrap().running_seals
}

/// A segment this appender wrote from byte 0 seals from its running digest and kept indexes (the same files as the
/// source's); after a restart (no running state) the seal reads the file, so a mirror file changed on disk since
/// is refused by its SHA-256, and only the sound file seals.
#[tokio::test]
async fn tail_seal_uses_the_running_digest_and_after_a_restart_reads_the_file() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    for (base, bytes) in &f.segs[..2] {
        for c in chunks_of(*base, bytes, 3) {
            a.apply_chunk(&c).await.unwrap();
        }
        if *base == f.segs[0].0 {
            // Both indexes as digests: rebuilt from what was kept.
            let mut seal = seal_of(&f.source, *base, bytes, true);
            seal.companions[0].inline = None;
            a.apply_seal(&seal).await.unwrap();
            assert_eq!(running_seals(&a), 1, "sealed from the running digest");
            for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
                let name = segment_file_name(*base, kind);
                assert_eq!(
                    std::fs::read(f.mirror.join(format!("{TOPIC}-{PARTITION}")).join(&name)).unwrap(),
                    std::fs::read(f.source.join(&name)).unwrap(),
                    "{name}"
                );
            }
        }
    }
    // Restarted: segment 1's running state is gone. A byte of it flipped on disk (same size) is found.
    drop(a);
    let (base, bytes) = &f.segs[1];
    let path = mirror_log(&f.mirror, *base);
    let mut on_disk = std::fs::read(&path).unwrap();
    let last = on_disk.len() - 1;
    on_disk[last] ^= 0x40;
    std::fs::write(&path, &on_disk).unwrap();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let e = a
        .apply_seal(&seal_of(&f.source, *base, bytes, false))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("SHA-256"), "{e}");
    assert_eq!(running_seals(&a), 0, "the file was read");
    // The segment is quarantined (archived as a truncation) and starts again at byte 0; resent, it seals.
    assert!(e.to_string().contains("archived"), "{e}");
    assert_eq!(position(&mut a).await, Some((*base, 0, false)));
    for c in chunks_of(*base, bytes, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base, bytes, false)).await.unwrap();
    assert_eq!(position(&mut a).await, Some((*base, bytes.len() as u64, true)));
    assert_eq!(&std::fs::read(&path).unwrap(), bytes);
}

#[tokio::test]
async fn tail_resent_chunks_are_compared() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let end = started(&f, &mut a).await;
    let (base, bytes) = &f.segs[0];
    let b = boundaries(bytes);
    a.check_applied(&chunk(*base, bytes, 0, b[1])).await.unwrap();
    a.check_applied(&chunk(*base, bytes, b[1], end)).await.unwrap();
    let mut changed = chunk(*base, bytes, b[1], end);
    let mut v = changed.bytes.to_vec();
    v[30] ^= 1;
    changed.bytes = Bytes::from(v);
    let e = a.check_applied(&changed).await.unwrap_err();
    assert!(e.to_string().contains("differs"), "{e}");
    // Beyond the durable end is not a resend.
    assert!(a.check_applied(&chunk(*base, bytes, b[1], b[3])).await.is_err());
}

#[tokio::test]
async fn tail_never_touches_segments_it_did_not_write() {
    let f = fixture();
    let (base, bytes) = &f.segs[0];
    let path = mirror_log(&f.mirror, *base);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"installed by someone else").unwrap();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let e = a
        .apply_chunk(&chunk(*base, bytes, 0, boundaries(bytes)[1]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("did not write"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"installed by someone else");
    assert_eq!(position(&mut a).await, None);
}

#[tokio::test]
async fn tail_after_a_seal_a_gap_is_accepted_and_an_overlap_refused() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[0];
    for c in chunks_of(*base, bytes, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
    // A segment whose base lies inside the sealed one's offsets.
    let (base1, bytes1) = &f.segs[1];
    let mut overlap = chunk(*base1, bytes1, 0, boundaries(bytes1)[1]);
    overlap.segment_base = base1 - 1;
    let e = a.apply_chunk(&overlap).await.unwrap_err();
    assert!(e.to_string().contains("below the next offset"), "{e}");
    assert!(!mirror_log(&f.mirror, base1 - 1).exists());
    // Segment 1 gone at the source (retention): segment 2 follows the sealed segment 0.
    let (base2, bytes2) = &f.segs[2];
    for c in chunks_of(*base2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *base2)).unwrap(), bytes2);
    assert_eq!(position(&mut a).await, Some((*base2, bytes2.len() as u64, false)));
}

#[tokio::test]
async fn tail_a_crash_after_claiming_a_new_segment_resumes_at_its_start() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[0];
    for c in chunks_of(*base, bytes, 3) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal_of(&f.source, *base, bytes, true)).await.unwrap();
    // The crash: segment 2 (after a retention gap) claimed at 0, created, partly written, never recorded further.
    let (base2, bytes2) = &f.segs[2];
    {
        let mut inner = a.inner.lock().unwrap();
        let name = tp_name(&pref());
        let claim = PartitionState {
            segment_base: *base2,
            position: 0,
            sealed: false,
            ..inner.states[&name].clone()
        };
        inner.record(name, claim).unwrap();
    }
    std::fs::write(mirror_log(&f.mirror, *base2), &bytes2[..50]).unwrap();
    drop(a);
    let mut a = TailAppender::open(&f.mirror).unwrap();
    assert_eq!(position(&mut a).await, Some((*base2, 0, false)));
    assert_eq!(file_len(&mirror_log(&f.mirror, *base2)), 0);
    for c in chunks_of(*base2, bytes2, 2) {
        a.apply_chunk(&c).await.unwrap();
    }
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *base2)).unwrap(), bytes2);
}

/// A seal naming another `index.interval.bytes` (feature bit 3): the indexes are rebuilt with it, and installed
/// equal to what the source's broker wrote; the same digests without the interval are refused.
#[tokio::test]
async fn tail_seal_rebuilds_indexes_with_the_interval_it_names() {
    const INTERVAL: u64 = 200;
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[0];
    for c in chunks_of(*base, bytes, 4) {
        a.apply_chunk(&c).await.unwrap();
    }
    // The indexes of a broker at INTERVAL.
    let mut offsets = segment_format::index::OffsetIndexBuilder::new(*base, INTERVAL);
    let mut times = segment_format::index::TimeIndexBuilder::new(*base, INTERVAL);
    for frame in scan_frames(bytes, 0) {
        let info = frame.unwrap().info;
        offsets.push(&info).unwrap();
        times.push(&info).unwrap();
    }
    times.seal();
    let (offsets, times) = (offsets.to_bytes(), times.to_bytes());
    let default = std::fs::read(f.source.join(segment_file_name(*base, SegmentFileKind::Index))).unwrap();
    assert_ne!(
        offsets, default,
        "the interval must change the index for the test to mean anything"
    );
    let digest = |kind, b: &[u8], index_interval| Companion {
        kind,
        size: b.len() as u64,
        sha256: sha(b),
        inline: None,
        index_interval,
    };
    let seal = |interval| SegmentSeal {
        partition: pref(),
        segment_base: *base,
        final_size: bytes.len() as u64,
        log_sha256: sha(bytes),
        companions: vec![
            digest(CompanionKind::OffsetIndex, &offsets, interval),
            digest(CompanionKind::TimeIndex, &times, interval),
        ],
    };
    let e = a.apply_seal(&seal(None)).await.unwrap_err();
    assert!(e.to_string().contains("index.interval.bytes 4096"), "{e}");
    a.apply_seal(&seal(Some(INTERVAL as u32))).await.unwrap();
    assert_eq!(position(&mut a).await, Some((*base, bytes.len() as u64, true)));
    let dir = f.mirror.join(format!("{TOPIC}-{PARTITION}"));
    assert_eq!(
        std::fs::read(dir.join(segment_file_name(*base, SegmentFileKind::Index))).unwrap(),
        offsets
    );
    assert_eq!(
        std::fs::read(dir.join(segment_file_name(*base, SegmentFileKind::TimeIndex))).unwrap(),
        times
    );
}

#[tokio::test]
async fn tail_a_group_of_chunks_is_recorded_once_all_of_it_is_durable() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let (base, bytes) = &f.segs[0];
    let group = chunks_of(*base, bytes, 1);
    assert!(group.len() >= 3, "several chunks: {}", group.len());
    a.apply_chunks(&group).await.unwrap();
    assert_eq!(position(&mut a).await, Some((*base, bytes.len() as u64, false)));
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *base)).unwrap(), bytes);
    // Recorded in the state file, not only in memory: a restarted appender reads the group's end back.
    let mut again = TailAppender::open(&f.mirror).unwrap();
    assert_eq!(position(&mut again).await, Some((*base, bytes.len() as u64, false)));
}

#[tokio::test]
async fn tail_a_group_with_a_bad_chunk_records_none_of_it() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let end = started(&f, &mut a).await;
    let (base, bytes) = &f.segs[0];
    let b = boundaries(bytes);
    let path = mirror_log(&f.mirror, *base);
    // A good chunk, then one with a flipped byte: the call fails, and nothing of the group is recorded (so
    // nothing of it is acknowledged), though the good chunk's bytes were written.
    let good = chunk(*base, bytes, b[2], b[3]);
    let mut corrupt = chunk(*base, bytes, b[3], b[4]);
    let mut v = corrupt.bytes.to_vec();
    v[0] ^= 0x55;
    corrupt.bytes = Bytes::from(v);
    let e = a.apply_chunks(&[good.clone(), corrupt]).await.unwrap_err();
    assert!(e.to_string().contains("bad batch"), "{e}");
    assert_eq!(position(&mut a).await, Some((*base, end as u64, false)));
    // A restart cuts the unrecorded bytes off ...
    drop(a);
    let mut a = TailAppender::open(&f.mirror).unwrap();
    assert_eq!(position(&mut a).await, Some((*base, end as u64, false)));
    assert_eq!(file_len(&path), end as u64);
    // ... and the group sent again applies.
    a.apply_chunks(&[good, chunk(*base, bytes, b[3], b[4])]).await.unwrap();
    assert_eq!(position(&mut a).await, Some((*base, b[4] as u64, false)));
    assert_eq!(std::fs::read(&path).unwrap(), bytes[..b[4]]);
}
