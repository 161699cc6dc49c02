//! Unit tests of restamping leader epochs in a copied `.log`.

use super::*;
use proptest::prelude::*;
use segment_format::batch::TimestampType;
use segment_format::batch::{compute_crc, parse_header};
use segment_format::error::Error as FormatError;
use segment_format::legacy::encode_message;
use segment_format::record::{BatchBuilder, RecordSpec};

fn batch(base: i64, records: i32, epoch: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new(base).partition_leader_epoch(epoch);
    for i in 0..records {
        b = b.record(RecordSpec::new(i, 1_700_000_000_000 + i64::from(i)).with_value(vec![b'v'; 10]));
    }
    b.build()
}

fn write(dir: &Path, frames: &[Vec<u8>]) -> std::path::PathBuf {
    let path = dir.join("00000000000000000000.log");
    std::fs::write(&path, frames.concat()).unwrap();
    path
}

#[test]
fn restamps_only_the_epoch_field_and_keeps_crcs_valid() {
    let dir = tempfile::tempdir().unwrap();
    let frames = vec![batch(0, 3, 7), batch(3, 2, 9), batch(5, 1, 4)];
    let path = write(dir.path(), &frames);
    let before = std::fs::read(&path).unwrap();
    let walk = walk_log(&path, Some(4)).unwrap();
    assert_eq!(
        walk,
        LogWalk {
            frames: 3,
            restamped: 2,
            last_offset: Some(5),
            size: before.len() as u64
        }
    );
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after.len(), before.len());
    let mut at = 0;
    for (i, f) in frames.iter().enumerate() {
        let got = &after[at..at + f.len()];
        // Exactly bytes 12..16 may differ, and they now say 4.
        assert_eq!(&got[..12], &f[..12], "batch {i}");
        assert_eq!(&got[16..], &f[16..], "batch {i}");
        assert_eq!(&got[12..16], &4i32.to_be_bytes(), "batch {i}");
        let header = parse_header(got).unwrap();
        assert_eq!(header.partition_leader_epoch, 4);
        assert_eq!(compute_crc(got), header.crc, "batch {i}: the CRC must still match");
        at += f.len();
    }
    // Idempotent: a second pass changes nothing.
    assert_eq!(walk_log(&path, Some(4)).unwrap().restamped, 0);
    assert_eq!(std::fs::read(&path).unwrap(), after);
}

#[test]
fn inspecting_writes_nothing_and_reports_the_last_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &[batch(10, 5, 3), batch(20, 2, 3)]);
    let before = std::fs::read(&path).unwrap();
    let walk = walk_log(&path, None).unwrap();
    assert_eq!((walk.frames, walk.restamped, walk.last_offset), (2, 0, Some(21)));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn empty_file_has_no_frames() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &[]);
    assert_eq!(walk_log(&path, Some(1)).unwrap(), LogWalk::default());
}

#[test]
fn legacy_messages_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = encode_message(0, 1, 5, TimestampType::CreateTime, None, Some(b"old"));
    let frames = vec![legacy.clone(), batch(1, 1, 8)];
    let path = write(dir.path(), &frames);
    let walk = walk_log(&path, Some(2)).unwrap();
    assert_eq!((walk.frames, walk.restamped, walk.last_offset), (2, 1, Some(1)));
    let after = std::fs::read(&path).unwrap();
    assert_eq!(
        &after[..legacy.len()],
        &legacy[..],
        "a legacy frame's bytes 12..16 are its CRC"
    );
}

#[test]
fn partial_tail_is_refused_with_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let first = batch(0, 2, 1);
    let second = batch(2, 2, 1);
    let mut bytes = first.clone();
    bytes.extend_from_slice(&second[..second.len() - 3]);
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(&path, &bytes).unwrap();
    let err = walk_log(&path, Some(0)).unwrap_err();
    match err {
        Error::Format(FormatError::Corrupt { position, offset, .. }) => {
            assert_eq!(position, first.len() as u64);
            assert_eq!(offset, Some(2));
        }
        other => panic!("expected a corrupt-data error, got {other:?}"),
    }
    // A few stray bytes too short for a header.
    std::fs::write(&path, [first.as_slice(), &[0u8; 5]].concat()).unwrap();
    let err = walk_log(&path, None).unwrap_err();
    assert!(
        matches!(err, Error::Format(FormatError::Corrupt { position, .. }) if position == first.len() as u64),
        "{err:?}"
    );
}

#[test]
fn bad_length_and_unknown_magic_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = batch(0, 1, 1);
    bad[8..12].copy_from_slice(&3i32.to_be_bytes());
    let path = write(dir.path(), &[bad]);
    assert!(matches!(
        walk_log(&path, None).unwrap_err(),
        Error::Format(FormatError::Corrupt { position: 8, .. })
    ));
    let mut magic = batch(0, 1, 1);
    magic[16] = 3;
    let path = write(dir.path(), &[magic]);
    assert!(matches!(
        walk_log(&path, None).unwrap_err(),
        Error::Format(FormatError::Corrupt { position: 16, .. })
    ));
}

/// The one-pass copy against the two-pass reference (kernel copy, then `walk_log` restamping the copy).
fn assert_copy_matches_two_passes(dir: &Path, frames: &[Vec<u8>], epoch: i32, chunk: usize) {
    let from = write(dir, frames);
    let reference = dir.join("reference.log");
    std::fs::copy(&from, &reference).unwrap();
    let expected = walk_log(&reference, Some(epoch)).unwrap();
    let to = dir.join("copy.log");
    let got = copy_log_restamping_in_chunks(&from, &to, epoch, chunk, None).unwrap();
    assert_eq!(got, expected, "chunk {chunk}");
    assert_eq!(
        std::fs::read(&to).unwrap(),
        std::fs::read(&reference).unwrap(),
        "chunk {chunk}"
    );
    // The kernel copy, patched in place through the mapping, chunk by chunk.
    let to = dir.join("kernel.log");
    let got = match copy_log_in_kernel(&from, &to, epoch, chunk, None).unwrap() {
        KernelCopy::Copied(walk) => walk,
        KernelCopy::Unsupported => panic!("copy_file_range within one directory of a local file system"),
    };
    assert_eq!(got, expected, "kernel, chunk {chunk}");
    assert_eq!(
        std::fs::read(&to).unwrap(),
        std::fs::read(&reference).unwrap(),
        "kernel, chunk {chunk}"
    );
}

/// A consistent cut copies a prefix: the same bytes and walk as the whole copy of just those frames, by both
/// copies and for every chunk size; a prefix longer than the file is an error naming it.
#[test]
fn a_prefix_copy_restamps_exactly_the_frames_before_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let frames = vec![batch(0, 3, 7), batch(3, 2, 9), batch(5, 4, 1)];
    let whole = write(dir.path(), &frames);
    let prefix_dir = tempfile::tempdir().unwrap();
    let prefix = write(prefix_dir.path(), &frames[..2]);
    let limit = (frames[0].len() + frames[1].len()) as u64;
    let reference = dir.path().join("reference.log");
    std::fs::copy(&prefix, &reference).unwrap();
    let expected = walk_log(&reference, Some(2)).unwrap();
    assert_eq!(expected.last_offset, Some(4));
    for chunk in [1, 17, 61, 100, 1 << 20] {
        let to = dir.path().join("buffered.log");
        let got = copy_log_restamping_in_chunks(&whole, &to, 2, chunk, Some(limit)).unwrap();
        assert_eq!(got, expected, "buffered, chunk {chunk}");
        assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&reference).unwrap());
        let to = dir.path().join("kernel.log");
        let KernelCopy::Copied(got) = copy_log_in_kernel(&whole, &to, 2, chunk, Some(limit)).unwrap() else {
            panic!("copy_file_range within one directory of a local file system")
        };
        assert_eq!(got, expected, "kernel, chunk {chunk}");
        assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&reference).unwrap());
    }
    let too_long = std::fs::metadata(&whole).unwrap().len() + 1;
    let err = copy_log_restamping(&whole, &dir.path().join("x.log"), 2, Some(too_long)).unwrap_err();
    assert!(err.to_string().contains("00000000000000000000.log"), "{err}");
    assert!(err.to_string().contains("fewer than"), "{err}");
}

fn kernel_copy_error(from: &Path, to: &Path, epoch: i32, chunk: usize) -> Result<LogWalk> {
    match copy_log_in_kernel(from, to, epoch, chunk, None)? {
        KernelCopy::Copied(walk) => Ok(walk),
        KernelCopy::Unsupported => panic!("copy_file_range within one directory of a local file system"),
    }
}

#[test]
fn one_pass_copy_restamps_like_the_two_pass_walk_whatever_the_chunk_size() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = encode_message(0, 1, 5, TimestampType::CreateTime, None, Some(b"old"));
    let frames = vec![legacy, batch(1, 3, 7), batch(4, 1, 2), batch(5, 20, 9), batch(25, 2, 2)];
    let total: usize = frames.iter().map(Vec::len).sum();
    // Chunks that cut headers before, inside and after the magic byte and the epoch field, and whole files.
    for chunk in [1, 2, 5, 16, 17, 18, 60, 61, 62, 100, 333, total - 1, total, 1 << 20] {
        assert_copy_matches_two_passes(dir.path(), &frames, 2, chunk);
    }
    assert_copy_matches_two_passes(dir.path(), &[], 2, 7);
}

/// The mirror's `.log` is read once by the kernel copy: its pages leave the page cache as they are copied, and
/// the copy is the same bytes.
#[cfg(target_os = "linux")]
#[test]
fn the_kernel_copy_leaves_the_mirrors_pages_out_of_the_page_cache() {
    use segment_format::durable::cached_pages;
    let dir = tempfile::tempdir().unwrap();
    let frames: Vec<Vec<u8>> = (0..2000).map(|i| batch(i * 3, 3, 7)).collect();
    let from = write(dir.path(), &frames);
    let reference = dir.path().join("reference.log");
    std::fs::copy(&from, &reference).unwrap();
    let expected = walk_log(&reference, Some(2)).unwrap();
    let source = std::fs::File::open(&from).unwrap();
    source.sync_all().unwrap();
    let len = std::fs::read(&from).unwrap().len() as u64;
    let before = cached_pages(&source, len).unwrap();
    assert!(
        before > 8,
        "the mirror's file is cached before the copy ({before} pages)"
    );
    let to = dir.path().join("kernel.log");
    let KernelCopy::Copied(got) = copy_log_in_kernel(&from, &to, 2, 64 << 10, None).unwrap() else {
        panic!("copy_file_range within one directory of a local file system");
    };
    let after = cached_pages(&source, len).unwrap();
    assert_eq!(got, expected);
    assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&reference).unwrap());
    assert!(
        after <= 1,
        "the mirror's pages are dropped as copied ({after} of {before} left)"
    );
}

/// Across file systems (tmpfs to the temp dir's) the kernel may refuse `copy_file_range` (EXDEV since Linux
/// 5.19): `copy_log_restamping` then copies through its buffer, with the same bytes either way.
#[test]
fn a_copy_between_file_systems_restamps_the_same_bytes_whichever_path_it_takes() {
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let frames = vec![batch(0, 3, 7), batch(3, 2, 9), batch(5, 4, 1)];
    let from = write(shm.path(), &frames);
    let reference = dir.path().join("reference.log");
    std::fs::copy(&from, &reference).unwrap();
    let expected = walk_log(&reference, Some(1)).unwrap();
    let to = dir.path().join("copy.log");
    assert_eq!(copy_log_restamping(&from, &to, 1, None).unwrap(), expected);
    assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&reference).unwrap());
}

#[test]
fn one_pass_copy_refuses_what_the_walk_refuses_at_the_same_position() {
    let dir = tempfile::tempdir().unwrap();
    let first = batch(0, 2, 1);
    let second = batch(2, 2, 1);
    let mut magic = batch(2, 1, 1);
    magic[16] = 3;
    let cases: Vec<Vec<u8>> = vec![
        // A partial batch at the end, and stray bytes too few for a header.
        [first.as_slice(), &second[..second.len() - 3]].concat(),
        [first.as_slice(), &[0u8; 5]].concat(),
        [first.as_slice(), &magic].concat(),
    ];
    for bytes in cases {
        let from = dir.path().join("00000000000000000000.log");
        std::fs::write(&from, &bytes).unwrap();
        let walked = walk_log(&from, None).unwrap_err().to_string();
        for chunk in [3, 40, 1 << 20] {
            let copied = copy_log_restamping_in_chunks(&from, &dir.path().join("copy.log"), 4, chunk, None)
                .unwrap_err()
                .to_string();
            assert_eq!(copied, walked, "chunk {chunk}");
            assert!(copied.contains("00000000000000000000.log"), "{copied}");
            let kernel = kernel_copy_error(&from, &dir.path().join("kernel.log"), 4, chunk)
                .unwrap_err()
                .to_string();
            assert_eq!(kernel, walked, "kernel, chunk {chunk}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Hostile bytes never panic the one-pass copy either, and it fails exactly where the walk fails.
    #[test]
    fn one_pass_copy_of_random_bytes_agrees_with_the_walk(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        chunk in 1usize..128,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("00000000000000000000.log");
        std::fs::write(&from, &bytes).unwrap();
        let copied = copy_log_restamping_in_chunks(&from, &dir.path().join("copy.log"), 3, chunk, None);
        let kernel = kernel_copy_error(&from, &dir.path().join("kernel.log"), 3, chunk);
        // In place (a handed-over file): same result and same error as the walk, which names the same path.
        let (in_place, walked_copy) = (dir.path().join("in-place.log"), dir.path().join("walked-copy.log"));
        std::fs::copy(&from, &in_place).unwrap();
        std::fs::copy(&from, &walked_copy).unwrap();
        let walked_in_place =
            walk_log(&walked_copy, Some(3)).map_err(|e| e.to_string().replace("walked-copy.log", "in-place.log"));
        prop_assert_eq!(
            crate::promote::kcopy::restamp_in_place(&in_place, 3).map_err(|e| e.to_string()),
            walked_in_place
        );
        prop_assert_eq!(std::fs::read(&in_place).unwrap(), std::fs::read(&walked_copy).unwrap());
        let walked = walk_log(&from, Some(3));
        let walked = walked.map_err(|e| e.to_string());
        prop_assert_eq!(copied.map_err(|e| e.to_string()), walked.clone());
        prop_assert_eq!(kernel.map_err(|e| e.to_string()), walked);
    }

    /// Hostile bytes never panic: the walk ends in a summary or an error.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, &bytes).unwrap();
        let _ = walk_log(&path, Some(3));
        prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    }

    /// Any sequence of batches restamps to exactly the input with bytes 12..16 replaced.
    #[test]
    fn restamp_round_trip(epochs in proptest::collection::vec((0i32..50, 1i32..4), 1..8), target in 0i32..50) {
        let dir = tempfile::tempdir().unwrap();
        let mut frames = Vec::new();
        let mut next = 0i64;
        for (epoch, n) in &epochs {
            frames.push(batch(next, *n, *epoch));
            next += i64::from(*n);
        }
        let path = write(dir.path(), &frames);
        let walk = walk_log(&path, Some(target)).unwrap();
        prop_assert_eq!(walk.last_offset, Some(next - 1));
        prop_assert_eq!(walk.restamped as usize, epochs.iter().filter(|(e, _)| *e != target).count());
        let after = std::fs::read(&path).unwrap();
        let mut expected = Vec::new();
        for f in &frames {
            let mut f = f.clone();
            f[12..16].copy_from_slice(&target.to_be_bytes());
            expected.extend_from_slice(&f);
        }
        prop_assert_eq!(after, expected);
    }
}
