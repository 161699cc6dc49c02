//! Walking a `.log` frame by frame through its 61-byte headers, optionally rewriting each magic-2 batch's
//! `partitionLeaderEpoch`.
//!
//! Why restamp: a mirrored batch carries the leader epoch the *source* cluster's leader stamped on it, usually
//! higher than the target partition's epoch. KIP-320 clients remember the epoch of the last record they read and
//! commit it with their offsets; on the target that epoch is "from the future": the Java consumer refuses the
//! broker's metadata as stale and stops fetching, librdkafka's offset validation gets "no such epoch" back and
//! resets to `auto.offset.reset` (see docs/promotion.md, "Leader epochs", for the experiment). Kafka's
//! own leader restamps every batch it appends (`LogValidator`), and the field lies outside the CRC (which covers
//! bytes 21.. of a batch; `DefaultRecordBatch`), so rewriting those four bytes leaves every batch valid.
//!
//! Only the header is read (and at most four bytes written) per batch: the copy itself is a kernel copy
//! (`std::fs::copy`, which can share blocks on file systems with reflinks), and restamping touches one block per
//! batch. Legacy (magic 0/1) frames have no epoch field — bytes 12..16 are their CRC — and are left alone. The walk
//! is strict: a frame that does not fit the file, a length below Kafka's minimum or an unknown magic is an error
//! naming the file, position and offset; a mirror never holds partial batches.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use segment_format::batch::{
    HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, MIN_FRAME_LENGTH, RECORD_BATCH_OVERHEAD,
};
use segment_format::error::{Defect, Error as FormatError};

use super::error::{Error, Result};

/// Byte position of `partitionLeaderEpoch` in a magic-2 batch.
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
/// Byte position of `lastOffsetDelta` in a magic-2 batch.
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
/// Read buffer of the header walk: big enough to serve many small batches per read.
const WALK_BUFFER: usize = 64 * 1024;

/// What a walk over one `.log` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogWalk {
    /// Frames (batches and legacy messages) in the file.
    pub frames: u64,
    /// Magic-2 batches whose epoch was rewritten (0 when only inspecting).
    pub restamped: u64,
    /// Last offset of the last frame; `None` for an empty file.
    pub last_offset: Option<i64>,
    /// Bytes of the file.
    pub size: u64,
}

fn corrupt(path: &Path, position: u64, offset: Option<i64>, message: String) -> Error {
    Error::Format(FormatError::corrupt(path, position, offset, Defect::Other { message }))
}

/// Walk `path` and report its frames; with `epoch`, rewrite every magic-2 batch's `partitionLeaderEpoch` that
/// differs from it. The file must be a whole number of frames.
pub fn walk_log(path: &Path, epoch: Option<i32>) -> Result<LogWalk> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut reader = BufReader::with_capacity(WALK_BUFFER, file);
    let mut writer = match epoch {
        Some(_) => Some(
            OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| Error::io(path, e))?,
        ),
        None => None,
    };
    let mut walk = LogWalk {
        size,
        ..LogWalk::default()
    };
    let mut position = 0u64;
    let mut header = [0u8; RECORD_BATCH_OVERHEAD];
    while position < size {
        let remaining = size - position;
        if remaining < HEADER_SIZE_UP_TO_MAGIC as u64 {
            return Err(corrupt(
                path,
                position,
                None,
                format!("{remaining} trailing bytes, too few for a frame header (a partial batch)"),
            ));
        }
        let prefix = header.get_mut(..HEADER_SIZE_UP_TO_MAGIC).unwrap_or_default();
        reader.read_exact(prefix).map_err(|e| Error::io(path, e))?;
        let base_offset = i64::from_be_bytes(array(&header, 0));
        let length = i32::from_be_bytes(array(&header, 8));
        let magic = header.get(MAGIC_OFFSET).copied().unwrap_or_default() as i8;
        if length < MIN_FRAME_LENGTH {
            return Err(corrupt(
                path,
                position + 8,
                Some(base_offset),
                format!("frame length {length} is below Kafka's minimum {MIN_FRAME_LENGTH}"),
            ));
        }
        let frame_size = LOG_OVERHEAD as u64 + length as u64;
        if frame_size > remaining {
            return Err(corrupt(
                path,
                position,
                Some(base_offset),
                format!("frame of {frame_size} bytes runs past the end of the file ({remaining} bytes left)"),
            ));
        }
        let last_offset = match magic {
            0 | 1 => base_offset,
            2 => {
                if frame_size < RECORD_BATCH_OVERHEAD as u64 {
                    return Err(corrupt(
                        path,
                        position + 8,
                        Some(base_offset),
                        format!("magic-2 batch of {frame_size} bytes is smaller than its {RECORD_BATCH_OVERHEAD}-byte header"),
                    ));
                }
                let rest = header.get_mut(HEADER_SIZE_UP_TO_MAGIC..).unwrap_or_default();
                reader.read_exact(rest).map_err(|e| Error::io(path, e))?;
                let stored = i32::from_be_bytes(array(&header, PARTITION_LEADER_EPOCH_OFFSET));
                if let (Some(epoch), Some(out)) = (epoch, writer.as_mut()) {
                    if stored != epoch {
                        let at = position + PARTITION_LEADER_EPOCH_OFFSET as u64;
                        out.seek(SeekFrom::Start(at)).map_err(|e| Error::io(path, e))?;
                        out.write_all(&epoch.to_be_bytes()).map_err(|e| Error::io(path, e))?;
                        walk.restamped += 1;
                    }
                }
                let delta = i32::from_be_bytes(array(&header, LAST_OFFSET_DELTA_OFFSET));
                base_offset.checked_add(i64::from(delta)).ok_or_else(|| {
                    corrupt(
                        path,
                        position,
                        Some(base_offset),
                        format!("last offset delta {delta} overflows"),
                    )
                })?
            }
            other => {
                return Err(corrupt(
                    path,
                    position + MAGIC_OFFSET as u64,
                    Some(base_offset),
                    format!("unknown magic {other}"),
                ))
            }
        };
        let consumed = if magic == 2 {
            RECORD_BATCH_OVERHEAD
        } else {
            HEADER_SIZE_UP_TO_MAGIC
        } as u64;
        let skip = i64::try_from(frame_size - consumed).map_err(|_| {
            corrupt(
                path,
                position,
                Some(base_offset),
                format!("frame of {frame_size} bytes is too large"),
            )
        })?;
        reader.seek_relative(skip).map_err(|e| Error::io(path, e))?;
        walk.frames += 1;
        walk.last_offset = Some(last_offset);
        position += frame_size;
    }
    if let Some(out) = writer {
        out.sync_all().map_err(|e| Error::io(path, e))?;
    }
    Ok(walk)
}

/// `N` bytes of `buf` from `at` (zeros past its end; callers read fixed positions of a full header).
fn array<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = buf.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use segment_format::batch::TimestampType;
    use segment_format::batch::{compute_crc, parse_header};
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

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
}
