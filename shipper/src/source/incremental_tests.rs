use segment_format::batch::TimestampType;
use segment_format::legacy;
use segment_format::record::{BatchBuilder, RecordSpec};

use super::*;
use crate::source::rebuild::rebuild;

fn batch(base: i64, n: usize) -> Vec<u8> {
    let specs: Vec<RecordSpec> = (0..n)
        .map(|i| RecordSpec::new(i as i32, 1_700_000_000_000 + base + i as i64).with_value(vec![b'x'; 700]))
        .collect();
    BatchBuilder::new(base).records(specs).build()
}

fn grown(a: Advance) -> (ActiveTail, u64, Option<(tempfile::NamedTempFile, Digest)>) {
    match a {
        Advance::Grown {
            next, read, new_bytes, ..
        } => (*next, read, new_bytes),
        Advance::Unusable(reason) => panic!("unusable: {reason}"),
    }
}

#[test]
fn advancing_piece_by_piece_gives_the_indexes_and_digest_of_a_full_rebuild_and_stages_only_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("00000000000000000100.log");
    let mut bytes = Vec::new();
    let mut offset = 100;
    for n in [3usize, 1, 7, 2, 5, 9] {
        bytes.extend(batch(offset, n));
        offset += n as i64;
    }
    let first = bytes.len() as u64 / 2;
    std::fs::write(&log, &bytes).unwrap();
    let state = ActiveTail::start(&log, 100, 4096).unwrap();
    // Established up to a byte bound: stops at the last batch ending inside it.
    let (state, read, staged) = grown(advance(&state, Some(first), None).unwrap());
    assert!(staged.is_none());
    assert!(state.len() <= first && read == state.len());
    let established = state.len();
    // A partial batch being written is not taken.
    let more = batch(offset, 4);
    bytes.extend(&more[..more.len() / 2]);
    std::fs::write(&log, &bytes).unwrap();
    let (state, read, staged) = grown(advance(&state, None, Some(dir.path())).unwrap());
    let complete = bytes.len() as u64 - (more.len() / 2) as u64;
    assert_eq!((state.len(), read), (complete, complete - established));
    let (file, digest) = staged.unwrap();
    assert_eq!(
        std::fs::read(file.path()).unwrap(),
        &bytes[established as usize..complete as usize]
    );
    assert_eq!(
        digest,
        segmirror_transport::digest::digest_of(&bytes[established as usize..complete as usize])
    );
    // Everything a version of that prefix is derived from equals the from-scratch results.
    let rebuilt = rebuild(&log, 100, complete, 4096).unwrap().unwrap();
    assert_eq!(state.offset_index(), rebuilt.offset_index);
    assert_eq!(state.time_index(), rebuilt.time_index);
    assert_eq!(
        state.digest(),
        segmirror_transport::digest::digest_of(&bytes[..complete as usize])
    );
    assert_eq!(
        (state.next_offset(), state.stats.batches, state.stats.records),
        (offset, 6, 27)
    );
}

#[test]
fn what_the_state_cannot_continue_is_unusable_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("00000000000000000000.log");
    let mut bytes = batch(0, 2);
    std::fs::write(&log, &bytes).unwrap();
    let (state, _, _) = grown(advance(&ActiveTail::start(&log, 0, 4096).unwrap(), None, None).unwrap());
    // A legacy message after it: its record count is the full scan's.
    let mut with_legacy = bytes.clone();
    with_legacy.extend(legacy::encode_message(
        2,
        1,
        1_000,
        TimestampType::CreateTime,
        None,
        Some(b"v"),
    ));
    std::fs::write(&log, &with_legacy).unwrap();
    match advance(&state, None, None).unwrap() {
        Advance::Unusable(reason) => assert!(reason.contains("legacy"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // An ABORT marker after it (a COMMIT marker continues).
    let marker = |base, control_type| {
        segment_format::control::end_txn_marker_batch(
            base,
            1_000,
            0,
            7,
            0,
            segment_format::control::EndTxnMarker {
                control_type,
                coordinator_epoch: 0,
            },
        )
    };
    let mut with_commit = bytes.clone();
    with_commit.extend(marker(2, segment_format::batch::ControlType::Commit));
    std::fs::write(&log, &with_commit).unwrap();
    let (after_commit, _, _) = grown(advance(&state, None, None).unwrap());
    assert_eq!(after_commit.next_offset(), 3);
    with_commit.extend(marker(3, segment_format::batch::ControlType::Abort));
    std::fs::write(&log, &with_commit).unwrap();
    match advance(&after_commit, None, None).unwrap() {
        Advance::Unusable(reason) => assert!(reason.contains("transaction marker at offset 3"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A corrupt batch after it.
    let mut bad = batch(2, 1);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    bytes.extend(&bad);
    std::fs::write(&log, &bytes).unwrap();
    match advance(&state, None, None).unwrap() {
        Advance::Unusable(reason) => assert!(reason.contains("CRC") || reason.contains("crc"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Truncated below the state.
    std::fs::write(&log, &bytes[..10]).unwrap();
    match advance(&state, None, None).unwrap() {
        Advance::Unusable(reason) => assert!(reason.contains("truncated"), "{reason}"),
        other => panic!("{other:?}"),
    }
}
