//! Unit tests of the mirror partition's log end as promotion reads it.

use super::*;
use segment_format::record::{BatchBuilder, RecordSpec};

const BASE: i64 = 100;

/// A segment at `BASE` of `n` batches of 3 records each; returns the log's path and every batch's position.
fn segment(dir: &Path, n: i64) -> (std::path::PathBuf, Vec<u64>) {
    let mut bytes = Vec::new();
    let mut positions = Vec::new();
    for i in 0..n {
        let mut b = BatchBuilder::new(BASE + 3 * i).partition_leader_epoch(5);
        for r in 0..3 {
            b = b.record(RecordSpec::new(r, 1_700_000_000_000).with_value(vec![b'x'; 50]));
        }
        positions.push(bytes.len() as u64);
        bytes.extend_from_slice(&b.build());
    }
    let log = dir.join(format!("{BASE:020}.log"));
    std::fs::write(&log, bytes).unwrap();
    (log, positions)
}

fn write_index(log: &Path, entries: &[(i32, u32)], zero_tail_entries: usize) {
    let mut bytes = Vec::new();
    for (relative, position) in entries {
        bytes.extend_from_slice(&relative.to_be_bytes());
        bytes.extend_from_slice(&position.to_be_bytes());
    }
    bytes.resize(bytes.len() + 8 * zero_tail_entries, 0);
    std::fs::write(log.with_extension("index"), bytes).unwrap();
}

#[test]
fn the_walk_starts_at_the_index_s_last_entry_and_finds_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let (log, at) = segment(dir.path(), 10);
    // Entries as Kafka writes them: the largest offset of an append and the position of its first batch.
    write_index(&log, &[(2, at[1] as u32), (20, at[6] as u32)], 0);
    let end = log_end(&log, BASE).unwrap();
    assert_eq!(
        end,
        LogEnd {
            end_offset: BASE + 30,
            walked_from: at[6],
            size: std::fs::metadata(&log).unwrap().len(),
        }
    );
    // A preallocated index (zeros after the entries) gives the same hint.
    write_index(&log, &[(2, at[1] as u32), (20, at[6] as u32)], 1000);
    assert_eq!(
        log_end(&log, BASE).unwrap(),
        LogEnd {
            end_offset: BASE + 30,
            walked_from: at[6],
            size: std::fs::metadata(&log).unwrap().len(),
        }
    );
}

#[test]
fn an_index_that_does_not_check_out_falls_back_to_the_whole_walk() {
    let dir = tempfile::tempdir().unwrap();
    let (log, at) = segment(dir.path(), 10);
    let whole = LogEnd {
        end_offset: BASE + 30,
        walked_from: 0,
        size: std::fs::metadata(&log).unwrap().len(),
    };
    assert_eq!(log_end(&log, BASE).unwrap(), whole, "no index");
    write_index(&log, &[], 100);
    assert_eq!(log_end(&log, BASE).unwrap(), whole, "only zero-fill");
    // Inside a batch, past the end of the file, at a batch below the entry's offset's batch or past the end
    // offset.
    for entry in [
        (20, at[6] as u32 + 7),
        (20, 1 << 30),
        (20, at[8] as u32),
        (40, at[6] as u32),
    ] {
        write_index(&log, &[entry], 0);
        assert_eq!(log_end(&log, BASE).unwrap(), whole, "{entry:?}");
    }
    // The whole walk's errors are the answer when the file itself is bad.
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&log, &bytes).unwrap();
    let err = log_end(&log, BASE).unwrap_err().to_string();
    assert!(
        err.contains(&log.display().to_string()) && err.contains("past the end"),
        "{err}"
    );
}

#[test]
fn a_last_batch_whose_crc_does_not_match_is_refused_naming_its_position_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (log, at) = segment(dir.path(), 4);
    write_index(&log, &[(8, at[2] as u32)], 0);
    let mut bytes = std::fs::read(&log).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x01;
    std::fs::write(&log, &bytes).unwrap();
    match log_end(&log, BASE).unwrap_err() {
        Error::Format(segment_format::Error::Corrupt {
            path,
            position,
            offset,
            defect,
        }) => {
            assert_eq!((path, position, offset), (log.clone(), at[3], Some(BASE + 9)));
            assert!(defect.to_string().contains("CRC-32C"), "{defect}");
        }
        other => panic!("expected a corrupt-data error, got {other:?}"),
    }
}

#[test]
fn an_empty_segment_ends_at_its_base() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join(format!("{BASE:020}.log"));
    std::fs::write(&log, b"").unwrap();
    write_index(&log, &[], 10);
    assert_eq!(
        log_end(&log, BASE).unwrap(),
        LogEnd {
            end_offset: BASE,
            walked_from: 0,
            size: 0,
        }
    );
}
