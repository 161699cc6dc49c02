//! The two pure steps of staging a chunked `.log`: proving the installed prefix by the chunk digests, and checking
//! a downloaded chunk's bytes (whole batches, CRCs, offsets) before appending it.

use segment_format::record::{BatchBuilder, RecordSpec};
use segmirror_transport::digest::{digest_of, Hasher};

use super::*;

/// `n` batches of 2 records each from offset `base`, as one byte string, with each batch's end position.
fn batches(base: i64, n: i64) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut ends = Vec::new();
    for i in 0..n {
        let b = BatchBuilder::new(base + 2 * i)
            .record(RecordSpec::new(0, 1_700_000_000_000 + i).with_value(vec![b'v'; 50]))
            .record(RecordSpec::new(1, 1_700_000_000_001 + i).with_value(vec![b'w'; 5]))
            .build();
        out.extend_from_slice(&b);
        ends.push(out.len());
    }
    (out, ends)
}

fn chunk(from: u64, bytes: &[u8], next_offset: i64) -> LogChunk {
    let d = digest_of(bytes);
    LogChunk {
        from,
        to: from + bytes.len() as u64,
        next_offset,
        key: format!("chunk-{from}"),
        crc32c: d.crc32c,
        sha256: d.sha256,
    }
}

#[test]
fn the_installed_prefix_is_used_only_at_a_chunk_boundary_and_only_when_its_digests_match() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = batches(0, 10);
    let chunks = [
        chunk(0, &log[..300], 1),
        chunk(300, &log[300..700], 2),
        chunk(700, &log[700..], 3),
    ];
    let installed = dir.path().join("installed.log");
    let dest = dir.path().join("staged.log");

    // Ends where the second chunk ends: both reused, the staged file is that prefix.
    std::fs::write(&installed, &log[..700]).unwrap();
    let (covered, hasher) = copy_prefix(&installed, &chunks, &dest).unwrap().unwrap();
    assert_eq!(covered, 2);
    assert_eq!(hasher.finish(), digest_of(&log[..700]));
    assert_eq!(std::fs::read(&dest).unwrap(), &log[..700]);

    // Ends inside a chunk, or nothing installed: nothing reused, an empty staged file.
    for installed_len in [Some(500), None] {
        let _ = std::fs::remove_file(&installed);
        if let Some(len) = installed_len {
            std::fs::write(&installed, &log[..len]).unwrap();
        }
        let (covered, hasher) = copy_prefix(&installed, &chunks, &dest).unwrap().unwrap();
        assert_eq!((covered, hasher.size()), (0, 0));
        assert!(std::fs::read(&dest).unwrap().is_empty());
    }

    // Installed bytes other than the chunk's: refused, naming the chunk and the field.
    let mut other = log[..700].to_vec();
    other[400] ^= 0xff;
    std::fs::write(&installed, &other).unwrap();
    match copy_prefix(&installed, &chunks, &dest).unwrap() {
        Err(Refusal::Mismatch { key, what, .. }) => {
            assert!(key.starts_with("chunk-300 (installed bytes [300, 700))"), "{key}");
            assert_eq!(what, "crc32c");
        }
        other => panic!("{:?}", other.map(|(covered, _)| covered)),
    }
}

#[test]
fn a_downloaded_chunk_must_be_whole_crc_valid_batches_ending_at_its_next_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, ends) = batches(10, 4); // offsets 10..18
    let part = dir.path().join("x.chunk");
    let dest = dir.path().join("x.log");
    let run = |chunk_bytes: &[u8], previous_next: i64, next_offset: i64| {
        std::fs::write(&part, chunk_bytes).unwrap();
        std::fs::write(&dest, b"").unwrap();
        let c = chunk(0, chunk_bytes, next_offset);
        check_and_append(&c, previous_next, &part, &dest, Hasher::new()).unwrap()
    };
    let reason = |r: std::result::Result<Hasher, Refusal>| match r {
        Err(Refusal::InvalidManifest { reason }) => reason,
        other => panic!("{:?}", other.map(|h| h.finish())),
    };

    let appended = run(&bytes, 10, 18).unwrap();
    assert_eq!(appended.finish(), digest_of(&bytes));
    assert_eq!(std::fs::read(&dest).unwrap(), bytes);
    assert!(!part.exists(), "the downloaded piece is removed once appended");

    let cut = reason(run(&bytes[..ends[1] + 5], 10, 14));
    assert!(
        cut.contains("chunk-0") && cut.contains("to: not a batch boundary"),
        "{cut}"
    );

    let short = reason(run(&bytes, 10, 20));
    assert!(
        short.contains("next_offset: 20 but its batches end before offset 18"),
        "{short}"
    );

    let behind = reason(run(&bytes, 12, 18));
    assert!(behind.contains("holds offsets 10..=11, not above 11"), "{behind}");

    let mut flipped = bytes.clone();
    let last = flipped.len() - 3;
    flipped[last] ^= 1;
    let crc = reason(run(&flipped, 10, 18));
    assert!(crc.contains("CRC stored"), "{crc}");
    assert_eq!(
        std::fs::read(&dest).unwrap(),
        b"",
        "nothing appended from a refused chunk"
    );
}
