//! Tests of the frame scan and of `LogFile` (reading, chunking, truncation).
use super::*;
use crate::batch::{seal_crc, Compression, ControlType, TimestampType};
use crate::control::{end_txn_marker_batch, EndTxnMarker};
use crate::legacy::{encode_message, encode_wrapper, LegacySpec};
use crate::record::{read_records, BatchBuilder, DeepLimits, RecordSpec};
use proptest::prelude::*;
use std::io::Write;

fn specs(n: i32) -> Vec<RecordSpec> {
    (0..n)
        .map(|i| {
            RecordSpec::new(i, 1000 + i64::from(i))
                .with_key(format!("key-{i}"))
                .with_value(vec![i as u8; 10])
                .with_header("h", Some(vec![i as u8]))
        })
        .collect()
}

fn batch(base: i64, codec: Compression, n: i32) -> Vec<u8> {
    BatchBuilder::new(base)
        .compression(codec)
        .partition_leader_epoch(3)
        .records(specs(n))
        .build()
}

fn collect(bytes: &[u8]) -> (Vec<Frame<'_>>, Option<ParseError>, u64) {
    let mut it = scan_frames(bytes, 1000);
    let mut frames = vec![];
    let mut err = None;
    for item in it.by_ref() {
        match item {
            Ok(f) => frames.push(f),
            Err(e) => err = Some(e),
        }
    }
    (frames, err, it.next_position())
}

#[test]
fn scans_mixed_segment_and_deep_walks_each_codec() {
    let mut seg = Vec::new();
    let mut base = 0;
    for codec in Compression::ALL {
        seg.extend_from_slice(&batch(base, codec, 5));
        base += 5;
    }
    let marker = EndTxnMarker {
        control_type: ControlType::Abort,
        coordinator_epoch: 2,
    };
    seg.extend_from_slice(&end_txn_marker_batch(base, 5000, 3, 7, 1, marker));
    seg.extend_from_slice(&encode_message(
        base + 1,
        1,
        77,
        TimestampType::CreateTime,
        None,
        Some(b"v1"),
    ));
    let wrapper = encode_wrapper(
        0,
        Compression::Gzip,
        TimestampType::CreateTime,
        -1,
        &[LegacySpec {
            offset: base + 2,
            ..LegacySpec::default()
        }],
    );
    seg.extend_from_slice(&wrapper);
    let (frames, err, end) = collect(&seg);
    assert_eq!(err, None);
    assert_eq!(end, 1000 + seg.len() as u64);
    assert_eq!(frames.len(), 8);
    let mut pos = 1000;
    for (i, f) in frames.iter().enumerate() {
        assert!(f.crc_matches(), "frame {i}");
        assert_eq!(f.info.position, pos);
        pos += f.info.size;
        if i < 5 {
            assert_eq!(
                (f.info.base_offset, f.info.last_offset),
                (5 * i as i64, 5 * i as i64 + 4)
            );
            assert_eq!(
                (
                    f.info.records_count,
                    f.info.max_timestamp,
                    f.info.partition_leader_epoch
                ),
                (5, 1004, 3)
            );
            let (_, recs) = read_records(f.bytes, &DeepLimits::default()).unwrap();
            assert_eq!(recs, specs(5), "frame {i}");
        }
    }
    let m = &frames[5].info;
    assert!(m.is_control && m.is_transactional);
    assert_eq!(
        (m.control, m.producer_id, m.producer_epoch),
        (Some(ControlType::Abort), 7, 1)
    );
    assert_eq!((frames[6].info.magic, frames[6].info.max_timestamp), (1, 77));
    assert_eq!((frames[7].info.magic, frames[7].info.records_count), (0, -1));
}

#[test]
fn crc_mismatch_does_not_stop_the_scan() {
    let mut seg = batch(0, Compression::None, 3);
    let second = seg.len();
    seg.extend_from_slice(&batch(3, Compression::Lz4, 3));
    let third = seg.len();
    seg.extend_from_slice(&encode_message(6, 0, 0, TimestampType::CreateTime, Some(b"k"), None));
    seg[second + 40] ^= 1; // maxTimestamp byte of the second batch
    seg[third + 20] ^= 1; // legacy key length
    let (frames, err, _) = collect(&seg);
    assert_eq!(err, None);
    let ok: Vec<bool> = frames.iter().map(Frame::crc_matches).collect();
    assert_eq!(ok, vec![true, false, false]);
    assert_eq!(frames[1].crc_position(), 1000 + second as u64 + 17);
    assert_eq!(frames[2].crc_position(), 1000 + third as u64 + 12);
    assert!(matches!(frames[1].crc_defect(), Some(Defect::CrcMismatch { .. })));
}

#[test]
fn framing_defects_stop_with_the_frame_position() {
    let good = batch(0, Compression::None, 2);
    let p = good.len() as u64;
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(Mutation, Defect)> = vec![
        (
            Box::new(|b: &mut Vec<u8>| b[8..12].copy_from_slice(&13i32.to_be_bytes())),
            Defect::BadLength {
                field: "batch length",
                value: 13,
            },
        ),
        (
            Box::new(|b: &mut Vec<u8>| b[8..12].copy_from_slice(&48i32.to_be_bytes())),
            Defect::BadLength {
                field: "batch length",
                value: 48,
            },
        ),
        (Box::new(|b: &mut Vec<u8>| b[16] = 3), Defect::BadMagic { magic: 3 }),
        (Box::new(|b: &mut Vec<u8>| b[16] = 0xff), Defect::BadMagic { magic: -1 }),
    ];
    for (mutate, defect) in cases {
        let mut second = batch(2, Compression::None, 2);
        mutate(&mut second);
        let mut seg = good.clone();
        seg.extend_from_slice(&second);
        seg.extend_from_slice(&good);
        let (frames, err, end) = collect(&seg);
        assert_eq!(frames.len(), 1);
        assert_eq!(
            err,
            Some(ParseError::Corrupt {
                position: 1000 + p,
                offset: Some(2),
                defect
            })
        );
        assert_eq!(end, 1000 + p);
    }
    // A legacy v1 message too short for its timestamp keeps the framing.
    let mut short = encode_message(9, 0, 0, TimestampType::CreateTime, None, None);
    short[16] = 1;
    seal_crc_legacy(&mut short);
    let (frames, err, _) = collect(&short);
    assert_eq!((frames.len(), err), (1, None));
    assert_eq!(frames[0].info.max_timestamp, -1);
    assert!(frames[0].crc_matches());
}

fn seal_crc_legacy(frame: &mut [u8]) {
    let crc = legacy::compute_crc(frame);
    frame[12..16].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn truncated_tail_is_incomplete_at_the_frame_start() {
    let a = batch(0, Compression::None, 2);
    let b = batch(2, Compression::Gzip, 2);
    let mut seg = a.clone();
    seg.extend_from_slice(&b);
    for cut in 1..b.len() {
        let bytes = &seg[..a.len() + cut];
        let (frames, err, end) = collect(bytes);
        assert_eq!(frames.len(), 1);
        let needed = if cut < 17 { 17 } else { b.len() as u64 };
        assert_eq!(
            err,
            Some(ParseError::Incomplete {
                position: 1000 + a.len() as u64,
                offset: (cut >= 8).then_some(2),
                needed,
                available: cut as u64,
            }),
            "cut {cut}"
        );
        assert_eq!(end, 1000 + a.len() as u64);
    }
}

#[test]
fn log_file_open_scan_and_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("00000000000000000000.log");
    std::fs::File::create(&empty).unwrap();
    let mut log = LogFile::open(&empty).unwrap();
    assert!(log.is_empty());
    assert_eq!(log.scan(|_| ControlFlow::Continue(())).unwrap(), ScanSummary::default());

    let path = dir.path().join("00000000000000000010.log");
    let mut seg = batch(10, Compression::Snappy, 4);
    seg.extend_from_slice(&batch(14, Compression::None, 1)[..30]);
    std::fs::write(&path, &seg).unwrap();
    let mut log = LogFile::open(&path).unwrap();
    let mut seen = vec![];
    let err = log
        .scan(|f| {
            seen.push(f.info.base_offset);
            ControlFlow::Continue(())
        })
        .unwrap_err();
    assert_eq!(seen, vec![10]);
    match err {
        Error::Incomplete {
            path: p,
            position,
            offset,
            ..
        } => {
            assert_eq!(p, path);
            assert_eq!(position, (seg.len() - 30) as u64);
            assert_eq!(offset, Some(14));
        }
        other => panic!("{other}"),
    }
    let missing = LogFile::open(dir.path().join("nope.log")).unwrap_err();
    assert!(matches!(missing, Error::Io { .. }));
}

/// A segment of `batches` batches of about 1 MiB each (offsets 0, 1, ...).
fn big_segment(path: &Path, batches: usize) {
    let one = BatchBuilder::new(0)
        .record(RecordSpec::new(0, 1).with_value(vec![0x5a; 1 << 20]))
        .build();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..batches {
        let mut b = one.clone();
        b[..8].copy_from_slice(&(i as i64).to_be_bytes());
        seal_crc(&mut b);
        file.write_all(&b).unwrap();
    }
    file.into_inner().unwrap().sync_all().unwrap();
}

/// Scanning a segment much larger than a chunk keeps the process's resident
/// set bounded: the file is read into reused buffers, never held whole.
#[cfg(target_os = "linux")]
#[test]
fn scan_keeps_memory_bounded() {
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    const BATCHES: usize = 160;
    big_segment(&path, BATCHES);
    let before = rss_kib();
    let mut log = LogFile::open(&path).unwrap();
    let mut peak = 0;
    let summary = log
        .scan(|f| {
            if f.info.base_offset % 8 == 0 {
                peak = peak.max(rss_kib().saturating_sub(before));
            }
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(summary.frames, BATCHES as u64);
    assert_eq!(summary.end, log.len());
    // 160 MiB scanned; held whole it would be ~160 MiB resident. Read in
    // chunks: two buffers of CHUNK_BYTES plus their carry room, and slack for
    // what the tests running beside this one allocate (VmRSS is the process's).
    let bound = (2 * (CHUNK_BYTES + CARRY_ROOM) / 1024 + 40 * 1024) as u64;
    assert!(peak < bound, "resident set grew by {peak} KiB (bound {bound} KiB)");
}

/// A segment truncated while it is scanned (as a follower truncates) ends
/// the scan with "changed while read" naming the file and where it ended:
/// never a SIGBUS, as a mapping would.
#[test]
fn truncation_under_the_scan_is_changed_while_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    // Larger than two chunks, so that reads continue after the first frames.
    let batches = 2 * CHUNK_BYTES / (1 << 20) + 8;
    big_segment(&path, batches);
    let len = std::fs::metadata(&path).unwrap().len();
    for cut in [0, len / 3, len - 100] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len)
            .unwrap();
        big_segment(&path, batches);
        let mut log = LogFile::open(&path).unwrap();
        let mut seen = 0u64;
        let err = log
            .scan(|_| {
                if seen == 0 {
                    // The truncation lands after the first frame was handed out.
                    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                    f.set_len(cut).unwrap();
                }
                seen += 1;
                ControlFlow::Continue(())
            })
            .unwrap_err();
        assert!(err.is_changed_while_read(), "{err}");
        assert_eq!(err.path(), path);
        let text = err.to_string();
        assert!(text.contains("changed while read"), "{text}");
        assert!(text.contains(&format!("{len} bytes when opened")), "{text}");
        assert!(seen < batches as u64, "cut at {cut}: {seen} frames");
    }
}

#[test]
fn zero_tail_is_read_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let mut seg = batch(0, Compression::None, 2);
    let end = seg.len() as u64;
    seg.extend(std::iter::repeat_n(0u8, 200_000));
    std::fs::write(&path, &seg).unwrap();
    let log = LogFile::open(&path).unwrap();
    assert!(log.is_zero_from(end).unwrap());
    assert!(!log.is_zero_from(0).unwrap());
    seg.push(1);
    std::fs::write(&path, &seg).unwrap();
    let log = LogFile::open(&path).unwrap();
    assert!(!log.is_zero_from(end).unwrap());
}

/// Frames cut by chunk boundaries, and a frame larger than a chunk, scan
/// as the in-memory iterator does.
/// Run `test` with the scan as the file's size picks it, then on one thread alone (as `verify`'s workers scan): the
/// two read in chunks of different sizes, and only the one-thread scan grows its chunks for large frames.
fn both_ways(test: impl Fn()) {
    test();
    without_crc_helper(&test);
}

#[test]
fn chunked_scan_matches_the_iterator() {
    both_ways(chunked_scan_matches_the_iterator_once);
}

fn chunked_scan_matches_the_iterator_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let mut seg = Vec::new();
    let mut offset = 0i64;
    // Odd sizes so that boundaries fall inside frames; one batch larger than a chunk.
    for size in [
        700_000usize,
        3_000_001,
        5_555_555,
        CHUNK_BYTES + 12345,
        1_000,
        9_999_999,
    ] {
        let b = BatchBuilder::new(offset)
            .record(RecordSpec::new(0, 1).with_value(vec![(size % 251) as u8; size]))
            .build();
        seg.extend(b);
        offset += 1;
    }
    seg.extend_from_slice(&batch(offset, Compression::None, 2)[..30]);
    std::fs::write(&path, &seg).unwrap();
    let (expected, expected_stop, _) = collect(&seg);
    let mut log = LogFile::open(&path).unwrap();
    let mut seen = vec![];
    let err = log
        .scan(|f| {
            seen.push((f.info.position, f.info.size, f.computed_crc, f.stored_crc));
            ControlFlow::Continue(())
        })
        .unwrap_err();
    let expected: Vec<_> = expected
        .iter()
        .map(|f| (f.info.position - 1000, f.info.size, f.computed_crc, f.stored_crc))
        .collect();
    assert_eq!(seen, expected);
    assert!(seen.iter().all(|(_, _, c, s)| c == s));
    match (err, expected_stop) {
        (Error::Incomplete { position, .. }, Some(ParseError::Incomplete { position: p, .. })) => {
            assert_eq!(position, p - 1000)
        }
        other => panic!("{other:?}"),
    }
}

/// `scan_range` from every frame boundary (and up to a cut inside a frame)
/// yields exactly the frames of a full scan that lie in the range, over chunk
/// boundaries and a frame larger than a chunk.
#[test]
fn scan_range_continues_from_a_boundary() {
    both_ways(scan_range_continues_from_a_boundary_once);
}

fn scan_range_continues_from_a_boundary_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let mut seg = Vec::new();
    for (i, size) in [100usize, CHUNK_BYTES + 77, 5_000, 3, 2_000_000]
        .into_iter()
        .enumerate()
    {
        seg.extend(
            BatchBuilder::new(i as i64)
                .record(RecordSpec::new(0, 1).with_value(vec![7; size]))
                .build(),
        );
    }
    std::fs::write(&path, &seg).unwrap();
    let (all, stop, _) = collect(&seg);
    assert!(stop.is_none());
    let frames: Vec<(u64, u64)> = all.iter().map(|f| (f.info.position - 1000, f.info.size)).collect();
    let mut log = LogFile::open(&path).unwrap();
    for &(from, _) in &frames {
        let mut seen = vec![];
        let summary = log
            .scan_range(from, seg.len() as u64, |f| {
                seen.push((f.info.position, f.info.size));
                ControlFlow::Continue(())
            })
            .unwrap();
        let expected: Vec<_> = frames.iter().copied().filter(|(p, _)| *p >= from).collect();
        assert_eq!(seen, expected);
        assert_eq!(summary.end, seg.len() as u64);
        // A limit inside the last frame: that frame is incomplete, the others are seen.
        let (last_pos, _) = *frames.last().unwrap();
        if from < last_pos {
            let mut seen = 0;
            let err = log
                .scan_range(from, last_pos + 10, |_| {
                    seen += 1;
                    ControlFlow::Continue(())
                })
                .unwrap_err();
            assert!(
                matches!(err, Error::Incomplete { position, .. } if position == last_pos),
                "{err:?}"
            );
            assert_eq!(seen, expected.len() - 1);
        }
    }
    // Nothing to scan at or past the end.
    let s = log
        .scan_range(seg.len() as u64 + 5, seg.len() as u64, |_| ControlFlow::Continue(()))
        .unwrap();
    assert_eq!((s.frames, s.end), (0, seg.len() as u64));
}

/// Files of ~1 KiB batches over many one-thread chunks, scanned in turn so that each scan reads into buffers the
/// scan of the other file left (the spare buffers): every frame, CRC and bad CRC is that of the in-memory scan,
/// never a byte of the other file, also for a frame cut by a chunk boundary and for a scan of a range.
#[test]
fn one_thread_scans_of_small_batches_reuse_buffers_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (n, value) in [(700usize, 900usize), (333, 1500)] {
        let mut seg = Vec::new();
        for i in 0..n {
            seg.extend(
                BatchBuilder::new(i as i64)
                    .record(RecordSpec::new(0, 1).with_value(vec![(i % 251) as u8; value]))
                    .build(),
            );
        }
        // A bad CRC in the frame that the first chunk boundary cuts.
        let cut = scan_frames(&seg, 0)
            .map(|f| f.unwrap().info)
            .find(|i| i.position + i.size > SEQUENTIAL_CHUNK_BYTES as u64)
            .unwrap();
        seg[(cut.position + cut.size - 1) as usize] ^= 0xff;
        let path = dir.path().join(format!("{:020}.log", n));
        std::fs::write(&path, &seg).unwrap();
        files.push((path, seg));
    }
    let expected = |seg: &[u8], from: u64| -> Vec<(u64, u32, u32)> {
        scan_frames(seg, 0)
            .map(|f| f.unwrap())
            .filter(|f| f.info.position >= from)
            .map(|f| (f.info.position, f.computed_crc, f.stored_crc))
            .collect()
    };
    without_crc_helper(|| {
        for round in 0..3 {
            for (path, seg) in &files {
                let from = if round == 2 {
                    scan_frames(seg, 0).nth(150).unwrap().unwrap().info.position
                } else {
                    0
                };
                let mut seen = Vec::new();
                let summary = LogFile::open(path)
                    .unwrap()
                    .scan_range(from, seg.len() as u64, |f| {
                        seen.push((f.info.position, f.computed_crc, f.stored_crc));
                        ControlFlow::Continue(())
                    })
                    .unwrap();
                let expected = expected(seg, from);
                assert_eq!(seen, expected, "{} round {round}", path.display());
                let bad = expected
                    .iter()
                    .filter(|(_, computed, stored)| computed != stored)
                    .count() as u64;
                assert_eq!(summary.crc_mismatches, bad);
                assert_eq!(bad, u64::from(from == 0), "the bad CRC lies before the 150th frame");
                assert_eq!(summary.end, seg.len() as u64);
            }
        }
    });
    let spare = SPARE_BUFFERS.lock().unwrap();
    assert!(spare.len() <= MAX_SPARE_BUFFERS);
    assert!(spare.iter().all(|b| b.capacity() <= MAX_SPARE_CAPACITY));
}

/// A frame larger than the chunk makes the one-thread scan read larger chunks from then on, up to `CHUNK_BYTES`.
#[test]
fn one_thread_chunks_grow_for_large_frames_only() {
    let mut sizes = ChunkSizes {
        chunk: SEQUENTIAL_CHUNK_BYTES,
        room: SEQUENTIAL_CHUNK_BYTES,
    };
    sizes.grow_for(1000);
    assert_eq!(
        (sizes.chunk, sizes.room),
        (SEQUENTIAL_CHUNK_BYTES, SEQUENTIAL_CHUNK_BYTES)
    );
    sizes.grow_for(300_000);
    assert_eq!((sizes.chunk, sizes.room), (2_400_000, 300_000));
    sizes.grow_for(200_000);
    assert_eq!((sizes.chunk, sizes.room), (2_400_000, 300_000), "never shrinks");
    sizes.grow_for(5 << 20);
    assert_eq!((sizes.chunk, sizes.room), (CHUNK_BYTES, CARRY_ROOM));
    sizes.grow_for(u64::MAX);
    assert_eq!((sizes.chunk, sizes.room), (CHUNK_BYTES, CARRY_ROOM));
}

/// The windowed two-thread scan is taken only for chunks whose first frames average 16 KiB or more.
#[test]
fn the_helper_is_for_large_frames_only() {
    let small: Vec<u8> = (0..40)
        .flat_map(|i| {
            BatchBuilder::new(i)
                .record(RecordSpec::new(0, 1).with_value(vec![7; 900]))
                .build()
        })
        .collect();
    assert!(!frames_are_large(&small));
    let large = BatchBuilder::new(0)
        .record(RecordSpec::new(0, 1).with_value(vec![7; PARALLEL_MIN_MEAN_FRAME_BYTES]))
        .build();
    assert!(frames_are_large(&large));
    // One large frame, cut by the chunk's end: large.
    assert!(frames_are_large(&large[..100]));
    // Small frames first, then large ones: judged on the sample at the start.
    let mut mixed = small[..small.len() / 40 * 3].to_vec();
    mixed.extend_from_slice(&large);
    assert!(!frames_are_large(&mixed));
    // Bytes that do not frame, and no bytes: left to the windowed scan, as before.
    assert!(frames_are_large(&[0xff; 64]));
    assert!(frames_are_large(&[]));
    assert!(frames_are_large(&[0; 11]));
}

/// A file large enough for the helper but made of ~1 KiB batches (scanned on one thread, in the helper's chunk
/// sizes), with large batches after them (scanned with the helper), one corrupt CRC in each part and a framing
/// defect at the end: `LogFile::scan` yields exactly the iterator's frames and stops at the same defect, naming the
/// file and the frame's position, both ways.
#[test]
fn large_files_of_small_batches_scan_as_the_iterator() {
    both_ways(large_files_of_small_batches_scan_as_the_iterator_once);
}

fn large_files_of_small_batches_scan_as_the_iterator_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let mut seg = Vec::new();
    let mut offset = 0i64;
    let mut corrupt_at = Vec::new();
    while (seg.len() as u64) < PARALLEL_MIN_BYTES + CHUNK_BYTES as u64 {
        let mut b = BatchBuilder::new(offset)
            .record(RecordSpec::new(0, 1).with_value(vec![(offset % 251) as u8; 860 + (offset % 7) as usize]))
            .build();
        if offset == 7_000 {
            corrupt_at.push(seg.len() as u64);
            let last = b.len() - 1;
            b[last] ^= 0x40;
        }
        seg.extend(b);
        offset += 1;
    }
    for i in 0..40 {
        let mut b = BatchBuilder::new(offset)
            .record(RecordSpec::new(0, 1).with_value(vec![i as u8; 100_000 + i]))
            .build();
        if i == 20 {
            corrupt_at.push(seg.len() as u64);
            b[5_000] ^= 1;
        }
        seg.extend(b);
        offset += 1;
    }
    let bad_frame = seg.len() as u64;
    let mut tail = batch(offset, Compression::None, 2);
    tail[8..12].copy_from_slice(&3i32.to_be_bytes());
    seg.extend_from_slice(&tail);
    std::fs::write(&path, &seg).unwrap();

    let mut it = scan_frames(&seg, 0);
    let expected: Vec<_> = it
        .by_ref()
        .map_while(Result::ok)
        .map(|f| (f.info, f.stored_crc, f.computed_crc))
        .collect();
    let mut seen = Vec::new();
    let err = LogFile::open(&path)
        .unwrap()
        .scan(|f| {
            seen.push((f.info, f.stored_crc, f.computed_crc));
            ControlFlow::Continue(())
        })
        .unwrap_err();
    assert_eq!(seen.len(), expected.len());
    assert!(seen == expected, "the scan's frames differ from the iterator's");
    let mismatched: Vec<u64> = seen
        .iter()
        .filter(|(_, stored, computed)| stored != computed)
        .map(|(info, _, _)| info.position)
        .collect();
    assert_eq!(mismatched, corrupt_at);
    assert_eq!(err.path(), path);
    match err {
        Error::Corrupt { position, .. } => assert_eq!(position, bad_frame),
        other => panic!("{other:?}"),
    }
    assert!(err_text_names(&path, bad_frame));
}

/// The error a scan of `path` ends with names the file and the position.
fn err_text_names(path: &Path, position: u64) -> bool {
    let err = LogFile::open(path)
        .unwrap()
        .scan(|_| ControlFlow::Continue(()))
        .unwrap_err();
    let text = err.to_string();
    text.contains(&path.display().to_string()) && text.contains(&position.to_string())
}

proptest! {
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let (frames, _, end) = collect(&bytes);
        let total: u64 = frames.iter().map(|f| f.info.size).sum();
        prop_assert_eq!(end, 1000 + total);
    }

    #[test]
    fn mutated_segments_never_panic(flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..5)) {
        let mut seg = batch(0, Compression::None, 3);
        seg.extend_from_slice(&batch(3, Compression::Zstd, 3));
        seg.extend_from_slice(&end_txn_marker_batch(6, 1, 0, 1, 0, EndTxnMarker { control_type: ControlType::Commit, coordinator_epoch: 0 }));
        let n = seg.len();
        for (at, x) in flips {
            seg[at % n] ^= x;
        }
        for f in collect(&seg).0 {
            if f.info.magic == 2 {
                let _ = read_records(f.bytes, &DeepLimits::default());
            }
        }
    }

    /// The one-thread scan of `LogFile::scan` reports what the iterator
    /// does, and stops where its callback asks.
    #[test]
    fn in_order_scan_matches_the_iterator(
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 0..3),
        cut in any::<usize>(),
        stop_after in 0u64..8,
    ) {
        let mut seg = batch(0, Compression::None, 3);
        seg.extend_from_slice(&batch(3, Compression::Lz4, 3));
        seg.extend_from_slice(&encode_message(6, 1, 0, TimestampType::CreateTime, None, Some(b"v")));
        seg.extend_from_slice(&batch(7, Compression::Gzip, 2));
        let n = seg.len();
        for (at, x) in flips {
            seg[at % n] ^= x;
        }
        seg.truncate(n - cut % 40);
        let mut it = scan_frames(&seg, 0);
        let expected: Vec<_> = it.by_ref().map_while(Result::ok).map(|f| (f.info, f.stored_crc, f.computed_crc)).collect();
        let expected_stop = scan_frames(&seg, 0).find_map(Result::err);
        let mut seen = vec![];
        let (summary, stop) = scan_in_order(&seg, 0, |f: &Frame<'_>| {
            seen.push((f.info, f.stored_crc, f.computed_crc));
            if seen.len() as u64 > stop_after { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        });
        let kept = expected.len().min(stop_after as usize + 1);
        prop_assert_eq!(&seen[..], &expected[..kept]);
        prop_assert_eq!(summary.frames, kept as u64);
        prop_assert_eq!(summary.crc_mismatches, seen.iter().filter(|(_, s, c)| s != c).count() as u64);
        if summary.stopped_early {
            let (info, _, _) = seen[kept - 1];
            prop_assert_eq!(summary.end, info.position + info.size);
            prop_assert_eq!(stop, None);
        } else {
            prop_assert_eq!(summary.end, it.next_position());
            prop_assert_eq!(stop, expected_stop);
        }
    }
}
