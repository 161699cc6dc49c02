//! Indexes of a `.log` prefix, rebuilt, and the prefix's CRC-32C.
//!
//! The active segment's `.index` and `.timeindex` are preallocated with a zero
//! tail and rewritten in place by the broker, so they cannot be shipped as
//! they are; instead they are rebuilt for exactly the shipped prefix with the
//! builders the partition writer uses, in the form a clean shutdown leaves
//! (trimmed, with the final time-index entry). The same scan computes the
//! prefix's CRC-32C from the batch CRCs it checks anyway, which the uploader
//! compares with what it read: the guard for a prefix that was rewritten
//! between the scan and the upload.

use std::ops::ControlFlow;
use std::path::Path;

use segment_format::crc_combine::PrefixCrc;
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder};
use segment_format::log::{Frame, LogFile};
use segment_format::Error;

use super::guard::is_not_found;

/// Indexes rebuilt for a `.log` prefix.
#[derive(Debug)]
pub struct Rebuilt {
    /// The `.index`, trimmed.
    pub offset_index: Vec<u8>,
    /// Sealed: ends with the segment's max timestamp, as after roll or close.
    pub time_index: Vec<u8>,
    /// CRC-32C of the prefix.
    pub crc32c: u32,
    /// Batches indexed.
    pub batches: u64,
    /// End of the last batch indexed.
    pub end: u64,
}

/// The indexes and prefix CRC-32C of a run of frames, built one frame at a time: fed by [`rebuild`]'s own scan, or
/// by the check's scan (`segment_format::verify::check_segment_observed`, what [`super::bound_active`] does, so the
/// active segment is read once, not twice).
#[derive(Debug)]
pub struct IndexRebuild {
    offset_index: OffsetIndexBuilder,
    time_index: TimeIndexBuilder,
    crc: PrefixCrc,
    batches: u64,
    end: u64,
    /// Why the frames cannot be what was verified; nothing is taken after it.
    problem: Option<String>,
}

impl IndexRebuild {
    pub fn new(base: i64, index_interval_bytes: u64) -> IndexRebuild {
        IndexRebuild {
            offset_index: OffsetIndexBuilder::new(base, index_interval_bytes),
            time_index: TimeIndexBuilder::new(base, index_interval_bytes),
            crc: PrefixCrc::default(),
            batches: 0,
            end: 0,
            problem: None,
        }
    }

    /// Take the next frame of `log`: `Break` once a frame is refused (a CRC that does not match, an offset that
    /// cannot be indexed), which [`IndexRebuild::finish`] then names.
    pub fn push(&mut self, log: &Path, frame: &Frame<'_>) -> ControlFlow<()> {
        if self.problem.is_some() {
            return ControlFlow::Break(());
        }
        let info = &frame.info;
        if let Some(defect) = frame.crc_defect() {
            self.problem = Some(format!("{}: byte {}: {defect}", log.display(), frame.crc_position()));
            return ControlFlow::Break(());
        }
        if let Err(e) = self.offset_index.push(info).and_then(|_| self.time_index.push(info)) {
            self.problem = Some(e.at(log).to_string());
            return ControlFlow::Break(());
        }
        self.crc.append(frame);
        self.batches += 1;
        self.end = info.position + info.size;
        ControlFlow::Continue(())
    }

    /// The indexes of the frames taken (sealed, as after a roll or close), or why they are not usable.
    pub fn finish(mut self) -> std::result::Result<Rebuilt, String> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        self.time_index.seal();
        Ok(Rebuilt {
            offset_index: self.offset_index.to_bytes(),
            time_index: self.time_index.to_bytes(),
            crc32c: self.crc.value(),
            batches: self.batches,
            end: self.end,
        })
    }
}

/// Scan the batches that end within `prefix` bytes of `log` and build the
/// offset and time indexes Kafka keeps for them. `Ok(Err(reason))` when the
/// bytes do not look like the verified prefix any more (a batch whose CRC no
/// longer matches, an offset that cannot be indexed).
pub fn rebuild(
    log: &Path,
    base: i64,
    prefix: u64,
    index_interval_bytes: u64,
) -> std::result::Result<std::result::Result<Rebuilt, String>, Error> {
    let mut file = match LogFile::open(log) {
        Ok(f) => f,
        Err(e) if is_not_found(&e) => return Ok(Err(format!("{e} (deleted at the source)"))),
        Err(e) => return Err(e),
    };
    if file.len() < prefix {
        return Ok(Err(format!(
            "{}: shrank to {} bytes below the verified {prefix}",
            log.display(),
            file.len()
        )));
    }
    let mut rebuilt = IndexRebuild::new(base, index_interval_bytes);
    // A scan error after the prefix (the partial batch at the tail) is expected;
    // one inside it shows up as `end < prefix` below, except a truncation under
    // the scan, which is named.
    let scanned = file.scan(|frame| {
        let info = &frame.info;
        if info.position.saturating_add(info.size) > prefix {
            return ControlFlow::Break(());
        }
        rebuilt.push(log, frame)
    });
    if let Err(e) = scanned {
        if e.is_changed_while_read() {
            return Ok(Err(e.to_string()));
        }
    }
    Ok(rebuilt.finish())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use proptest::prelude::*;
    use segment_format::batch::TimestampType;
    use segment_format::dir::SegmentFiles;
    use segment_format::legacy;
    use segment_format::record::{BatchBuilder, RecordSpec};
    use segment_format::verify::{check_segment, TailPolicy, VerifyOptions};

    use super::*;
    use segment_format::batch::ATTRIBUTES_OFFSET;
    use segment_format::crc_combine::{crc32c_combine, crc32c_shift_operator, gf2_multiply};

    /// Costs behind [`COMBINE_MIN_FRAME_BYTES`]: `cargo test -p segmirror-shipper --release --lib prefix_crc_costs
    /// -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn prefix_crc_costs() {
        let rounds = 200_000u32;
        for len in [512usize, 1024, 4096, 16_384] {
            let bytes = vec![7u8; len];
            let start = std::time::Instant::now();
            let mut c = 0u32;
            for _ in 0..rounds {
                c = crc32c::crc32c_append(c, std::hint::black_box(&bytes));
            }
            let hash = start.elapsed() / rounds;
            let start = std::time::Instant::now();
            for i in 0..rounds {
                c ^= crc32c_shift_operator(std::hint::black_box(len + (i as usize & 63)));
            }
            let new_len = start.elapsed() / rounds;
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                c = gf2_multiply(std::hint::black_box(0x1234_5678), c);
            }
            let cached = start.elapsed() / rounds;
            let start = std::time::Instant::now();
            for _ in 0..rounds / 10 {
                c ^= crc32c::crc32c_combine(c, 5, std::hint::black_box(len));
            }
            let crate_combine = start.elapsed() / (rounds / 10);
            println!("{len:>6} B: hash {hash:?}, combine with a new length {new_len:?}, with the last length {cached:?}, crc32c crate's combine {crate_combine:?} ({c})");
        }
    }

    /// SHA-256 throughput of the workspace's hash (aws-lc-rs), to see whether it uses the CPU's SHA extensions
    /// (SHA-NI: well over 1 GB/s per core; without, ~0.4-0.5 GB/s): same command as `prefix_crc_costs`, name
    /// `sha256_throughput`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn sha256_throughput() {
        let bytes = vec![0x5au8; 64 << 20];
        let start = std::time::Instant::now();
        let mut digest = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        for _ in 0..4 {
            digest.update(std::hint::black_box(&bytes));
        }
        let secs = start.elapsed().as_secs_f64();
        let sha = digest.finish();
        let start = std::time::Instant::now();
        let mut crc = 0;
        for _ in 0..4 {
            crc = crc32c::crc32c_append(crc, std::hint::black_box(&bytes));
        }
        let crc_secs = start.elapsed().as_secs_f64();
        println!(
            "SHA-256 (aws-lc-rs): {:.0} MiB/s; CRC-32C: {:.0} MiB/s ({:?} {crc})",
            256.0 / secs,
            256.0 / crc_secs,
            &sha.as_ref()[..4]
        );
    }

    proptest! {
        #[test]
        fn the_prefix_crc_of_frames_is_the_crc_of_their_bytes(
            frames in proptest::collection::vec((0usize..12_000, any::<u8>(), any::<bool>()), 0..24),
        ) {
            // Frames of random lengths around the combine threshold, some repeating the length before them
            // (the cached operator), some without a known body CRC (legacy: hashed whole).
            let mut crc = PrefixCrc::default();
            let mut all = Vec::new();
            let mut last_len = 0usize;
            for (len, fill, repeat) in frames {
                let len = if repeat && last_len > 0 { last_len } else { len };
                last_len = len;
                let bytes: Vec<u8> = (0..len).map(|i| fill.wrapping_add((i * 31) as u8)).collect();
                let body_crc = bytes.get(ATTRIBUTES_OFFSET..).filter(|_| fill % 5 != 0).map(crc32c::crc32c);
                crc.append_parts(&bytes, body_crc);
                all.extend_from_slice(&bytes);
            }
            prop_assert_eq!(crc.value(), crc32c::crc32c(&all));
        }

        #[test]
        fn combining_crcs_is_crc_of_the_concatenation(
            a in proptest::collection::vec(any::<u8>(), 0..2000),
            b in proptest::collection::vec(any::<u8>(), 0..40_000),
        ) {
            let whole = [a.as_slice(), b.as_slice()].concat();
            let combined = crc32c_combine(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len());
            prop_assert_eq!(combined, crc32c::crc32c(&whole));
            prop_assert_eq!(combined, crc32c::crc32c_combine(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len()));
        }
    }

    #[test]
    fn the_rebuilt_prefix_crc_is_that_of_the_bytes() {
        // A legacy message, then magic-2 batches, then half a batch being written.
        let mut log = legacy::encode_message(0, 1, 1_000, TimestampType::CreateTime, Some(b"k"), Some(b"v"));
        for base in [1i64, 4, 7, 10] {
            let specs = (0..3).map(|i| RecordSpec::new(i, 2_000 + base).with_value(vec![base as u8; 100]));
            log.extend(BatchBuilder::new(base).records(specs.collect::<Vec<_>>()).build());
        }
        // A legacy message between batches of one length (the shift operator is reused), then others.
        log.extend(legacy::encode_message(
            13,
            1,
            1_500,
            TimestampType::CreateTime,
            None,
            Some(b"x"),
        ));
        for (base, n) in [(14i64, 1), (15, 5)] {
            let specs = (0..n).map(|i| RecordSpec::new(i, 2_500).with_value(vec![7; 33]));
            log.extend(BatchBuilder::new(base).records(specs.collect::<Vec<_>>()).build());
        }
        let prefix = log.len() as u64;
        let partial = BatchBuilder::new(20).record(RecordSpec::new(0, 3_000)).build();
        log.extend_from_slice(&partial[..partial.len() / 2]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, &log).unwrap();
        let rebuilt = rebuild(&path, 0, prefix, 64).unwrap().unwrap();
        assert_eq!(rebuilt.crc32c, crc32c::crc32c(&log[..prefix as usize]));
        assert_eq!((rebuilt.batches, rebuilt.end), (8, prefix));
    }

    /// A `.log` of `batches` batches of 1 MiB, written batch by batch; the end
    /// of each batch.
    fn big_log(path: &Path, batches: usize) -> Vec<u64> {
        let one = BatchBuilder::new(0)
            .record(RecordSpec::new(0, 1).with_value(vec![0x5a; 1 << 20]))
            .build();
        let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        let (mut ends, mut end) = (Vec::new(), 0);
        for i in 0..batches {
            let mut b = one.clone();
            b[..8].copy_from_slice(&(i as i64).to_be_bytes());
            segment_format::batch::seal_crc(&mut b);
            std::io::Write::write_all(&mut file, &b).unwrap();
            end += b.len() as u64;
            ends.push(end);
        }
        std::io::Write::flush(&mut file).unwrap();
        ends
    }

    /// Cut `path` to `len` bytes (as a follower truncates its log) as soon as
    /// this process has it open: while the seed reader reads it. `true` once done.
    fn truncate_when_opened(path: PathBuf, len: u64) -> std::thread::JoinHandle<bool> {
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while std::time::Instant::now() < deadline {
                let open = std::fs::read_dir("/proc/self/fd").is_ok_and(|fds| {
                    fds.flatten()
                        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))
                });
                if open {
                    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                    file.set_len(len).unwrap();
                    return true;
                }
                std::thread::yield_now();
            }
            false
        })
    }

    /// A segment truncated while the seed reads it: both of its reads (the
    /// check before upload and the index rebuild) report "changed while read"
    /// (or, truncated before the scan began, "shrank") naming the file, for the
    /// caller to read again; no SIGBUS, no refusal.
    ///
    /// The truncation comes from another thread once it sees the file open, so
    /// on a starved machine it can land only after the reader is done. Such an
    /// attempt must then have read the whole file consistently (it is retried,
    /// with a fresh file); a read that ended short without saying so fails at
    /// once. At least one attempt must see the truncation.
    #[cfg(target_os = "linux")]
    #[test]
    fn seed_reader_reports_a_segment_truncated_under_it() {
        const ATTEMPTS: usize = 10;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("00000000000000000000.log");
        let ends = big_log(&log, 160);
        let log = std::fs::canonicalize(&log).unwrap();
        let total = ends[ends.len() - 1];

        let mut rebuild_saw_it = false;
        for _ in 0..ATTEMPTS {
            big_log(&log, 160);
            let truncator = truncate_when_opened(log.clone(), ends[1]);
            let rebuilt = rebuild(&log, 0, total, 4096).unwrap();
            assert!(truncator.join().unwrap());
            match rebuilt {
                Err(reason) => {
                    // Truncated under the scan, or already before it began (between the open and the size check,
                    // when the truncating thread is quicker): both name the file.
                    assert!(
                        reason.contains("changed while read") || reason.contains("shrank to"),
                        "{reason}"
                    );
                    assert!(reason.contains(log.to_str().unwrap()), "{reason}");
                    rebuild_saw_it = true;
                    break;
                }
                Ok(whole) => assert_eq!((whole.batches, whole.end), (160, total), "a short read went unnoticed"),
            }
        }
        assert!(
            rebuild_saw_it,
            "the rebuild never saw the truncation in {ATTEMPTS} attempts"
        );

        let segment = SegmentFiles {
            base_offset: 0,
            log: log.clone(),
            index: None,
            time_index: None,
            txn_index: None,
        };
        let mut check_saw_it = false;
        for _ in 0..ATTEMPTS {
            big_log(&log, 160);
            let truncator = truncate_when_opened(log.clone(), ends[1]);
            let check = check_segment(&segment, Some(160), TailPolicy::Sealed, &VerifyOptions::default()).unwrap();
            assert!(truncator.join().unwrap());
            match check.changed_while_read() {
                Some(changed) => {
                    assert_eq!(changed.path, log);
                    assert!(changed.to_string().contains("truncated while it was read"), "{changed}");
                    check_saw_it = true;
                    break;
                }
                None => assert!(
                    check.is_sound(),
                    "a check that saw no truncation must be sound: {check:?}"
                ),
            }
        }
        assert!(
            check_saw_it,
            "the check never saw the truncation in {ATTEMPTS} attempts"
        );
    }
}
