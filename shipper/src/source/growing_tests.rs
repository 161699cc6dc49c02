//! The incremental tail reader over a `.log` that grows batch by batch, with
//! partial writes, bounds and limits, and over files truncated, replaced,
//! rewritten or corrupted under the position.

use std::io::Write as _;
use std::path::Path;

use segment_format::batch::seal_crc;
use segment_format::record::{BatchBuilder, RecordSpec};

use super::*;

/// Batch `i` at `offset` with `records` records, its value size varied by `i`.
fn batch_at(offset: i64, records: i32, i: usize, epoch: i32) -> Vec<u8> {
    let specs = (0..records)
        .map(|r| {
            RecordSpec::new(r, 1_700_000_000_000 + i as i64)
                .with_value(vec![b'a' + (i % 26) as u8; 50 + (i * 37) % 900])
        })
        .collect::<Vec<_>>();
    BatchBuilder::new(offset)
        .partition_leader_epoch(epoch)
        .records(specs)
        .build()
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// [`read_tail`] and [`read_tail_into`] at `at`: both must come to the same outcome, and the content handed over
/// must be the chunk's very bytes of the file and its batches (the shipped path reads into its own buffer and
/// scans there; the other scans through [`LogFile::scan_range`]).
fn read_both(at: &TailPosition, options: &TailOptions) -> Result<TailRead, Error> {
    let plain = read_tail(at, options);
    let mut content = ChunkContent::default();
    let into = read_tail_into(at, options, &mut content);
    assert_eq!(
        format!("{plain:?}"),
        format!("{into:?}"),
        "read_tail and read_tail_into differ"
    );
    match &into {
        Ok(TailRead::Appended { chunk, .. }) if !chunk.is_empty() => {
            let file = std::fs::read(&at.path).unwrap();
            assert_eq!(content.bytes, file[chunk.from as usize..chunk.to as usize]);
            assert_eq!(crc32c::crc32c(&content.bytes), chunk.crc32c);
            assert_eq!(content.batches.len() as u64, chunk.batches);
            assert_eq!(content.batches.first().map(|b| b.position), Some(chunk.from));
        }
        _ => assert!(content.bytes.is_empty() && content.batches.is_empty()),
    }
    plain
}

fn appended(read: TailRead) -> (Chunk, TailPosition) {
    match read {
        TailRead::Appended { chunk, next } => (chunk, next),
        other => panic!("expected Appended, got {other:?}"),
    }
}

fn new_log(dir: &Path, base: i64) -> std::path::PathBuf {
    let path = dir.join(format!("{base:020}.log"));
    std::fs::write(&path, b"").unwrap();
    path
}

#[test]
fn every_byte_is_read_once_across_calls_with_partial_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 100);
    let mut at = TailPosition::start(&path, 100).unwrap();
    let mut boundaries = vec![0u64];
    let mut shipped: Vec<u8> = Vec::new();
    let mut offset = 100i64;
    let mut batches_seen = 0u64;
    let mut check = |at: &TailPosition, shipped: &mut Vec<u8>, boundaries: &[u64]| -> TailPosition {
        let (chunk, next) = appended(read_both(at, &TailOptions::default()).unwrap());
        let file = std::fs::read(&path).unwrap();
        assert_eq!(chunk.from, at.position);
        assert!(
            boundaries.contains(&chunk.to),
            "chunk ends at {} off a batch boundary",
            chunk.to
        );
        let bytes = &file[chunk.from as usize..chunk.to as usize];
        assert_eq!(chunk.crc32c, crc32c::crc32c(bytes));
        assert_eq!(chunk.pending, file.len() as u64 - chunk.to);
        shipped.extend_from_slice(bytes);
        batches_seen += chunk.batches;
        next
    };
    for i in 0..60usize {
        let records = 1 + (i % 4) as i32;
        let b = batch_at(offset, records, i, 3);
        offset += i64::from(records);
        let end = boundaries.last().copied().unwrap() + b.len() as u64;
        if i % 3 == 0 {
            // Written in two halves, read in between: the half is left pending.
            let cut = b.len() / 2 + i % 7;
            append(&path, &b[..cut]);
            at = check(&at, &mut shipped, &boundaries);
            assert_eq!(at.position, *boundaries.last().unwrap());
            append(&path, &b[cut..]);
            boundaries.push(end);
        } else {
            append(&path, &b);
            boundaries.push(end);
        }
        if i % 5 != 4 {
            at = check(&at, &mut shipped, &boundaries);
            assert_eq!(at.position, end);
            assert_eq!(at.next_offset, offset);
        }
    }
    at = check(&at, &mut shipped, &boundaries);
    assert_eq!(shipped, std::fs::read(&path).unwrap(), "every byte once, in order");
    // The prefix CRC the chunks add up to is the file's, as a sealing check reads it.
    assert_eq!(at.prefix_crc32c, crc32c::crc32c(&shipped));
    assert_eq!(prefix_crc32c(&path, at.position).unwrap(), Some(at.prefix_crc32c));
    assert_eq!(prefix_crc32c(&path, at.position + 1).unwrap(), None);
    assert_eq!(batches_seen, 60);
    assert_eq!((at.next_offset, at.last_epoch), (offset, 3));
    // Nothing new: an empty chunk at the end.
    let (chunk, next) = appended(read_both(&at, &TailOptions::default()).unwrap());
    assert!(chunk.is_empty() && chunk.first_offset.is_none());
    assert_eq!(next, at);
}

#[test]
fn chunk_summary_and_combined_crc_match_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 0);
    let at = TailPosition::start(&path, 0).unwrap();
    let (a, b) = (batch_at(0, 2, 1, 0), batch_at(2, 3, 2, 1));
    append(&path, &a);
    let (c1, at) = appended(read_both(&at, &TailOptions::default()).unwrap());
    append(&path, &b);
    let (c2, _) = appended(read_both(&at, &TailOptions::default()).unwrap());
    assert_eq!((c1.first_offset, c1.last_offset, c1.batches), (Some(0), Some(1), 1));
    assert_eq!((c2.first_offset, c2.last_offset, c2.batches), (Some(2), Some(4), 1));
    assert_eq!(c2.max_timestamp, 1_700_000_000_002);
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(combine_crc32c(c1.crc32c, c2.crc32c, c2.len()), crc32c::crc32c(&whole));
    // Large batches (whose CRC is combined, not hashed again) between small ones.
    let big = |offset: i64| {
        BatchBuilder::new(offset)
            .partition_leader_epoch(1)
            .record(RecordSpec::new(0, 9).with_value(vec![0xa5; 64 * 1024]))
            .build()
    };
    append(&path, &big(5));
    append(&path, &batch_at(6, 1, 3, 1));
    append(&path, &big(7));
    let (c3, _) = appended(read_both(&at, &TailOptions::default()).unwrap());
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(c3.batches, 4);
    assert_eq!(c3.crc32c, crc32c::crc32c(&whole[c3.from as usize..]));
}

#[test]
fn the_bound_and_the_chunk_limit_cut_on_batch_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 0);
    let mut ends = vec![];
    let mut offset = 0;
    for i in 0..10 {
        let b = batch_at(offset, 2, i, 0);
        append(&path, &b);
        offset += 2;
        ends.push(std::fs::metadata(&path).unwrap().len());
    }
    let start = TailPosition::start(&path, 0).unwrap();
    // High watermark 7: batches [0,1] [2,3] [4,5] ship; [6,7] has its last offset at the bound.
    let bounded = TailOptions {
        upto: Some(7),
        ..TailOptions::default()
    };
    let (chunk, at) = appended(read_both(&start, &bounded).unwrap());
    assert_eq!((chunk.to, chunk.last_offset, chunk.at_bound), (ends[2], Some(5), true));
    // Exactly at a batch end: [6,7] ships too.
    let (chunk, at) = appended(
        read_both(
            &at,
            &TailOptions {
                upto: Some(8),
                ..bounded
            },
        )
        .unwrap(),
    );
    assert_eq!((chunk.to, chunk.last_offset), (ends[3], Some(7)));
    // A small chunk limit: one batch per call at least, never more than the limit otherwise.
    let limited = TailOptions {
        max_chunk_bytes: 1,
        ..TailOptions::default()
    };
    let mut at = at;
    for &end in &ends[4..] {
        let (chunk, next) = appended(read_both(&at, &limited).unwrap());
        assert_eq!((chunk.to, chunk.batches), (end, 1));
        at = next;
    }
}

#[test]
fn truncated_replaced_deleted_and_rewritten_files_are_typed_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 0);
    let (a, b) = (batch_at(0, 1, 1, 0), batch_at(1, 1, 2, 0));
    append(&path, &a);
    append(&path, &b);
    let (_, at) = appended(read_both(&TailPosition::start(&path, 0).unwrap(), &TailOptions::default()).unwrap());

    // Truncated below the position.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(a.len() as u64).unwrap();
    match read_both(&at, &TailOptions::default()).unwrap() {
        TailRead::Truncated { len, position, .. } => assert_eq!((len, position), (a.len() as u64, at.position)),
        other => panic!("{other:?}"),
    }

    // Truncated, then other batches appended past the position: the tripwire.
    let other = batch_at(1, 1, 7, 1);
    append(&path, &other);
    append(&path, &batch_at(2, 1, 8, 1));
    assert!(std::fs::metadata(&path).unwrap().len() >= at.position);
    assert!(matches!(
        read_both(&at, &TailOptions::default()).unwrap(),
        TailRead::Changed { .. }
    ));

    // Replaced by a rename (a compaction swap).
    let swap = dir.path().join("swap.tmp");
    std::fs::write(&swap, [a.clone(), b.clone()].concat()).unwrap();
    std::fs::rename(&swap, &path).unwrap();
    assert!(matches!(
        read_both(&at, &TailOptions::default()).unwrap(),
        TailRead::Replaced { .. }
    ));

    // Deleted.
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        read_both(&at, &TailOptions::default()).unwrap(),
        TailRead::Replaced { .. }
    ));
}

#[test]
fn hostile_lengths_are_refused_naming_file_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 0);
    let a = batch_at(0, 1, 1, 0);
    append(&path, &a);
    // A header claiming a 2 GiB - 1 batch: never waited for, never buffered.
    let mut hostile = batch_at(1, 1, 2, 0);
    hostile[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    append(&path, &hostile);
    let at = TailPosition::start(&path, 0).unwrap();
    // The sound batch ships; the next call stops at the hostile one.
    let (chunk, at) = appended(read_both(&at, &TailOptions::default()).unwrap());
    assert_eq!(chunk.to, a.len() as u64);
    match read_both(&at, &TailOptions::default()).unwrap() {
        TailRead::Corrupt(Error::Corrupt {
            path: p,
            position,
            defect: Defect::TooLarge { .. },
            ..
        }) => assert_eq!((p, position), (path.clone(), a.len() as u64)),
        other => panic!("{other:?}"),
    }
    // A complete batch over a lower configured limit.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(a.len() as u64).unwrap();
    append(&path, &batch_at(1, 1, 20, 0));
    let small = TailOptions {
        max_batch_bytes: 200,
        ..TailOptions::default()
    };
    assert!(matches!(
        read_both(&at, &small).unwrap(),
        TailRead::Corrupt(Error::Corrupt { position, defect: Defect::TooLarge { .. }, .. }) if position == a.len() as u64
    ));
}

#[test]
fn corrupt_crc_and_backward_offsets_stop_the_chunk_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 0);
    let a = batch_at(0, 2, 1, 0);
    append(&path, &a);
    let mut bad = batch_at(2, 1, 2, 0);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    append(&path, &bad);
    let at = TailPosition::start(&path, 0).unwrap();
    // The good batch alone ships; the bad one is reported on the next call, and every call after.
    let (chunk, next) = appended(read_both(&at, &TailOptions::default()).unwrap());
    assert_eq!(chunk.to, a.len() as u64);
    for _ in 0..2 {
        match read_both(&next, &TailOptions::default()).unwrap() {
            TailRead::Corrupt(Error::Corrupt {
                defect: Defect::CrcMismatch { .. },
                position,
                ..
            }) => assert!(position >= a.len() as u64),
            other => panic!("{other:?}"),
        }
    }

    // Offsets going backwards.
    let path = new_log(dir.path(), 50);
    append(&path, &batch_at(50, 2, 1, 0));
    let mut back = batch_at(51, 1, 2, 0);
    seal_crc(&mut back);
    append(&path, &back);
    let at = TailPosition::start(&path, 50).unwrap();
    let (chunk, at) = appended(read_both(&at, &TailOptions::default()).unwrap());
    assert_eq!(chunk.last_offset, Some(51));
    assert!(matches!(
        read_both(&at, &TailOptions::default()).unwrap(),
        TailRead::Corrupt(Error::Corrupt {
            defect: Defect::OffsetOutOfOrder { .. },
            ..
        })
    ));
}

#[test]
fn a_preallocated_zero_tail_is_pending_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_log(dir.path(), 0);
    let a = batch_at(0, 1, 1, 0);
    append(&path, &a);
    append(&path, &[0u8; 4096]);
    let at = TailPosition::start(&path, 0).unwrap();
    let (chunk, _) = appended(read_both(&at, &TailOptions::default()).unwrap());
    assert_eq!((chunk.to, chunk.pending), (a.len() as u64, 4096));
}
