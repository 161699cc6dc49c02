//! Shared bodies of the `segment-format` fuzz targets, and the seed corpus.
//!
//! The targets in `fuzz_targets/` are one-line wrappers around the functions
//! here, so the same checks can be replayed without libFuzzer, from a test or
//! the `seeds` and `replay` examples. Each body does two things: it runs a parser on
//! hostile bytes (the contract is: no panic, no read past the end, no allocation
//! sized by an unchecked length), and it asserts the properties that hold for
//! *every* input — error positions inside the input, frames contiguous, a CRC
//! that was sealed verifies, parse → encode → parse is the identity, indexes the
//! builders derive from a sound log pass the checkers. A failed assertion is a
//! finding just like a crash.

use std::ops::ControlFlow;
use std::path::Path;

use segment_format::batch::{
    self, BatchHeader, BatchInfo, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, RECORD_BATCH_OVERHEAD,
};
use segment_format::checkpoint::{LeaderEpochCheckpoint, MetaProperties, OffsetCheckpoint};
use segment_format::control;
use segment_format::dir::{
    classify_partition_file, is_internal_topic, validate_topic_name, PartitionDirName, SegmentRole,
};
use segment_format::index::{
    OffsetIndex, OffsetIndexBuilder, OffsetIndexChecker, TimeIndex, TimeIndexBuilder, TimeIndexChecker,
};
use segment_format::legacy;
use segment_format::log::scan_frames;
use segment_format::partition_metadata::PartitionMetadata;
use segment_format::record::{for_each_record, read_records, BatchBuilder, DeepLimits};
use segment_format::report::Severity;
use segment_format::snapshot::{self, ProducerSnapshot};
use segment_format::txn_index::{TxnIndex, TxnIndexChecker, TxnTracker};
use segment_format::ParseError;

pub mod direct;
pub mod endpoint;
pub mod seeds;
pub mod session;

/// Decompressed bytes below which `batch_deep` also collects the records and
/// round-trips them through [`BatchBuilder`] (collecting allocates per record;
/// the streaming walk does not).
const ROUND_TRIP_MAX_BYTES: u64 = 1 << 20;

fn error_position(e: &ParseError) -> u64 {
    match e {
        ParseError::Corrupt { position, .. } | ParseError::Incomplete { position, .. } => *position,
    }
}

/// An error from a parser of `len` bytes must point inside them (or at the end).
fn assert_inside(e: &ParseError, len: usize, what: &str) {
    assert!(
        error_position(e) <= len as u64,
        "{what}: error position outside the {len} input bytes: {e:?}"
    );
}

/// Deep walk of one scanned frame, as `verify --deep` does, plus control decoding.
/// Returns the number of records walked when the walk succeeded.
pub fn deep_walk(frame: &[u8], info: &BatchInfo) -> Option<u64> {
    let limits = DeepLimits::default();
    if info.magic >= 2 {
        let header = match batch::parse_header(frame) {
            Ok(h) => h,
            Err(e) => panic!("a frame the scan accepted has an unparsable header: {e:?}"),
        };
        if header.is_control() {
            if let Err(e) = control::decode_control_batch(frame, &header, &limits) {
                assert_inside(&e, frame.len(), "decode_control_batch");
            }
        }
        let mut headers_ok = true;
        let walked = for_each_record(frame, &header, &limits, |r| {
            headers_ok &= r.headers().count() == r.header_count();
            let _ = r.to_spec(header.base_timestamp);
            ControlFlow::Continue(())
        });
        assert!(headers_ok, "a validated record's header iterator ended early");
        match walked {
            Ok(stats) => Some(u64::from(stats.records)),
            Err(e) => {
                assert_inside(&e, frame.len(), "for_each_record");
                None
            }
        }
    } else {
        if let Err(e) = legacy::deep_batch_info(frame, info.position, &limits) {
            assert_inside(&e, frame.len(), "deep_batch_info");
        }
        match legacy::for_each_message(frame, &limits, |_| ControlFlow::Continue(())) {
            Ok(stats) => Some(u64::from(stats.messages)),
            Err(e) => {
                assert_inside(&e, frame.len(), "for_each_message");
                None
            }
        }
    }
}

/// What a scan of a whole `.log` found.
#[derive(Debug, Default)]
pub struct Scanned {
    pub batches: Vec<BatchInfo>,
    /// End of the well-framed prefix.
    pub end: u64,
    /// The scan stopped on an error (framing, partial frame).
    pub stopped: bool,
}

/// `log_scan`: scan `data` as a whole `.log` starting at `base`; deep-walk each frame.
pub fn log_scan(data: &[u8], base: u64, deep: bool) -> Scanned {
    let mut frames = scan_frames(data, base);
    let mut scanned = Scanned::default();
    let mut expected_position = base;
    while let Some(item) = frames.next() {
        match item {
            Ok(frame) => {
                let info = frame.info;
                assert_eq!(info.position, expected_position, "frames are not contiguous");
                assert_eq!(frame.bytes.len() as u64, info.size, "frame bytes and size disagree");
                let start = (info.position - base) as usize;
                assert_eq!(
                    data.get(start..start + frame.bytes.len()),
                    Some(frame.bytes),
                    "frame is not the input"
                );
                if info.magic >= 2 {
                    assert!(info.size >= RECORD_BATCH_OVERHEAD as u64);
                    if let Ok(header) = batch::parse_header(frame.bytes) {
                        assert_eq!(batch::verify_crc(frame.bytes, &header).is_ok(), frame.crc_matches());
                    }
                }
                assert!(frame.crc_position() < info.position + info.size);
                expected_position += info.size;
                if deep {
                    deep_walk(frame.bytes, &info);
                }
                scanned.batches.push(info);
            }
            Err(e) => {
                assert_eq!(
                    error_position(&e),
                    frames.next_position(),
                    "scan error is not at the frame start"
                );
                scanned.stopped = true;
            }
        }
    }
    scanned.end = frames.next_position();
    assert_eq!(scanned.end, expected_position);
    assert!(scanned.end <= base + data.len() as u64);
    if !scanned.stopped {
        assert_eq!(
            scanned.end,
            base + data.len() as u64,
            "a clean scan must consume everything"
        );
    }
    scanned
}

/// `batch_deep`: treat `data` as one frame, fix its length and CRC so the walk
/// gets past them, then walk it. Byte 16 (magic) 0 or 1 takes the legacy path;
/// anything else is forced to magic 2.
pub fn batch_deep(data: &[u8]) {
    let mut buf = data.to_vec();
    if buf.len() < HEADER_SIZE_UP_TO_MAGIC {
        return;
    }
    let Ok(length) = i32::try_from(buf.len() - LOG_OVERHEAD) else {
        return;
    };
    buf[8..12].copy_from_slice(&length.to_be_bytes());
    let magic = buf[MAGIC_OFFSET];
    if magic <= 1 {
        if buf.len() < legacy::record_overhead(magic as i8) + LOG_OVERHEAD {
            let _ = legacy::parse_message(&buf);
            return;
        }
        let crc = legacy::compute_crc(&buf);
        buf[legacy::LEGACY_CRC_OFFSET..legacy::LEGACY_CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        if let Ok(message) = legacy::parse_message(&buf) {
            assert!(
                legacy::verify_crc(&buf, &message).is_ok(),
                "sealed legacy CRC does not verify"
            );
        }
        let info = match legacy::shallow_info(&buf, 0) {
            Ok(info) => info,
            Err(e) => {
                assert_inside(&e, buf.len(), "legacy::shallow_info");
                return;
            }
        };
        deep_walk(&buf, &info);
        return;
    }
    if buf.len() < RECORD_BATCH_OVERHEAD {
        return;
    }
    buf[MAGIC_OFFSET] = 2;
    let header = match batch::parse_header(&buf) {
        Ok(h) => h,
        Err(e) => {
            assert_inside(&e, buf.len(), "parse_header");
            return;
        }
    };
    batch::seal_crc(&mut buf);
    let header = BatchHeader {
        crc: batch::compute_crc(&buf),
        ..header
    };
    assert!(batch::verify_crc(&buf, &header).is_ok(), "sealed CRC does not verify");
    assert_eq!(batch::parse_header(&buf).ok(), Some(header));
    let info = match scan_frames(&buf, 0).next() {
        Some(Ok(frame)) => {
            assert!(frame.crc_matches());
            frame.info
        }
        Some(Err(e)) => panic!("a sealed batch with a parsable header does not scan: {e:?}"),
        None => panic!("scan of a non-empty batch yields nothing"),
    };
    deep_walk(&buf, &info);
    let limits = DeepLimits::default();
    let Ok(stats) = for_each_record(&buf, &header, &limits, |_| ControlFlow::Continue(())) else {
        return;
    };
    if stats.uncompressed_bytes > ROUND_TRIP_MAX_BYTES {
        return;
    }
    round_trip(&buf, &header, &limits);
}

/// A batch that walks cleanly, rebuilt from its records with the same header
/// fields, walks cleanly to the same records.
fn round_trip(buf: &[u8], header: &BatchHeader, limits: &DeepLimits) {
    let (h, specs) = match read_records(buf, limits) {
        Ok(r) => r,
        Err(e) => panic!("read_records fails on a batch for_each_record accepts: {e:?}"),
    };
    let Some(compression) = h.attributes.compression() else {
        return;
    };
    let mut builder = BatchBuilder::new(h.base_offset)
        .compression(compression)
        .partition_leader_epoch(h.partition_leader_epoch)
        .producer(h.producer_id, h.producer_epoch, h.base_sequence)
        .transactional(h.is_transactional())
        .control(h.is_control())
        .last_offset_delta(h.last_offset_delta)
        .max_timestamp(h.max_timestamp)
        .records(specs.clone());
    if h.attributes.timestamp_type() == batch::TimestampType::LogAppendTime {
        builder = builder.log_append_time(h.max_timestamp).max_timestamp(h.max_timestamp);
    }
    if h.attributes.has_delete_horizon() {
        builder = builder.delete_horizon(h.base_timestamp);
    }
    let rebuilt = builder.build();
    match read_records(&rebuilt, limits) {
        Ok((h2, specs2)) => {
            assert_eq!(specs2, specs, "records changed in a rebuild");
            assert_eq!(h2.records_count, header.records_count);
            assert_eq!(h2.last_offset_delta, header.last_offset_delta);
        }
        Err(e) => panic!("a rebuilt batch does not walk: {e:?}"),
    }
}

/// The parts `index_check` splits its input into.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IndexInput {
    /// bit 0: newest segment; bit 1: base offset = first frame's offset (else 0);
    /// bits 4..8: index interval = `(n + 1) * 64` bytes for the builders.
    pub flags: u8,
    pub offset_index: Vec<u8>,
    pub time_index: Vec<u8>,
    pub txn_index: Vec<u8>,
    pub log: Vec<u8>,
}

impl IndexInput {
    /// `flags u8 | three u16 lengths | offset index | time index | txn index | log`;
    /// lengths are clamped to what is there.
    pub fn split(data: &[u8]) -> IndexInput {
        let mut rest = data;
        let mut take = |n: usize| {
            let (a, b) = rest.split_at(n.min(rest.len()));
            rest = b;
            a.to_vec()
        };
        let flags = take(1).first().copied().unwrap_or(0);
        let mut len = || {
            let b = take(2);
            usize::from(u16::from_be_bytes([
                b.first().copied().unwrap_or(0),
                b.get(1).copied().unwrap_or(0),
            ]))
        };
        let (a, b, c) = (len(), len(), len());
        let offset_index = take(a);
        let time_index = take(b);
        let txn_index = take(c);
        let log = take(usize::MAX);
        IndexInput {
            flags,
            offset_index,
            time_index,
            txn_index,
            log,
        }
    }

    /// The inverse of [`IndexInput::split`] (for seeds).
    pub fn join(&self) -> Vec<u8> {
        let mut out = vec![self.flags];
        for part in [&self.offset_index, &self.time_index, &self.txn_index] {
            out.extend_from_slice(&u16::try_from(part.len()).unwrap_or(u16::MAX).to_be_bytes());
        }
        out.extend_from_slice(&self.offset_index);
        out.extend_from_slice(&self.time_index);
        out.extend_from_slice(&self.txn_index);
        out.extend_from_slice(&self.log);
        out
    }

    pub fn interval(&self) -> u64 {
        (u64::from(self.flags >> 4) + 1) * 64
    }
}

/// `index_check`: run the three index checkers and the transaction tracker
/// beside a scan of the log, as `verify` does for one segment; then check that
/// the indexes the builders derive from a sound log pass the checkers.
pub fn index_check(data: &[u8]) {
    let input = IndexInput::split(data);
    let role = if input.flags & 1 != 0 {
        SegmentRole::Newest
    } else {
        SegmentRole::Sealed
    };
    let scanned = log_scan(&input.log, 0, false);
    let base = if input.flags & 2 != 0 {
        scanned.batches.first().map_or(0, |b| b.base_offset)
    } else {
        0
    };
    let _ = OffsetIndex::parse(&input.offset_index);
    let _ = TimeIndex::parse(&input.time_index);
    let _ = TxnIndex::parse(&input.txn_index);
    let path = Path::new("fuzz");
    let mut offsets = OffsetIndexChecker::new(path, &input.offset_index, base, role);
    let mut times = TimeIndexChecker::new(path, &input.time_index, base, role);
    let mut txns = TxnIndexChecker::new(path, &input.txn_index, base, role);
    let mut tracker = TxnTracker::new();
    let mut expected_txn = Vec::new();
    for info in &scanned.batches {
        offsets.on_batch(info);
        times.on_batch(info);
        let expected = tracker.on_batch(info);
        txns.on_batch(info, expected.as_ref());
        expected_txn.extend(expected);
    }
    let findings = offsets.finish(scanned.end).len() + times.finish(scanned.end).len() + txns.finish().len();
    std::hint::black_box(findings);
    let _ = tracker.first_unstable_offset();
    builders_pass_checkers(&input, &scanned, base, &expected_txn);
}

/// Differential check: on a log whose batches are well ordered, the indexes
/// the builders write pass the checkers without an error.
fn builders_pass_checkers(
    input: &IndexInput,
    scanned: &Scanned,
    base: i64,
    expected_txn: &[segment_format::txn_index::AbortedTxn],
) {
    if scanned.stopped || scanned.batches.is_empty() {
        return;
    }
    let mut prev_last: Option<i64> = None;
    for b in &scanned.batches {
        let ordered = b.last_offset >= b.base_offset && prev_last.is_none_or(|p| b.base_offset > p);
        if !ordered || b.base_offset < base || b.last_offset.saturating_sub(base) > i64::from(i32::MAX) {
            return;
        }
        prev_last = Some(b.last_offset);
    }
    let mut offset_builder = OffsetIndexBuilder::new(base, input.interval());
    let mut time_builder = TimeIndexBuilder::new(base, input.interval());
    for b in &scanned.batches {
        if offset_builder.push(b).is_err() || time_builder.push(b).is_err() {
            return;
        }
    }
    time_builder.seal();
    let offset_bytes = offset_builder.to_bytes();
    let time_bytes = time_builder.to_bytes();
    let txn_bytes = segment_format::txn_index::serialize(expected_txn);
    let path = Path::new("built");
    let mut offsets = OffsetIndexChecker::new(path, &offset_bytes, base, SegmentRole::Sealed);
    let mut times = TimeIndexChecker::new(path, &time_bytes, base, SegmentRole::Sealed);
    let mut txns = TxnIndexChecker::new(path, &txn_bytes, base, SegmentRole::Sealed);
    let mut tracker = TxnTracker::new();
    for info in &scanned.batches {
        offsets.on_batch(info);
        times.on_batch(info);
        let expected = tracker.on_batch(info);
        txns.on_batch(info, expected.as_ref());
    }
    for f in offsets
        .finish(scanned.end)
        .into_iter()
        .chain(times.finish(scanned.end))
        .chain(txns.finish())
    {
        assert!(f.severity != Severity::Error, "a built index fails its checker: {f}");
    }
}

/// `text_files`: every text and small binary file parser on the same bytes,
/// with parse → encode → parse round trips.
pub fn text_files(data: &[u8]) {
    let len = data.len();
    match OffsetCheckpoint::parse(data) {
        Ok(cp) => {
            let again = OffsetCheckpoint::parse(cp.encode().as_bytes());
            assert_eq!(
                again.as_ref().ok(),
                Some(&cp),
                "offset checkpoint round trip: {:?}",
                cp.encode()
            );
        }
        Err(e) => assert_inside(&e, len, "OffsetCheckpoint::parse"),
    }
    match LeaderEpochCheckpoint::parse(data) {
        Ok(cp) => {
            for f in cp.check(Path::new("leader-epoch-checkpoint")) {
                assert!(
                    f.position.is_none_or(|p| p <= len as u64),
                    "finding outside the file: {f}"
                );
            }
            let encoded = cp.encode();
            match LeaderEpochCheckpoint::parse(encoded.as_bytes()) {
                Ok(again) => assert_eq!(again.entries, cp.entries, "epoch checkpoint round trip"),
                Err(e) => panic!("epoch checkpoint does not reparse: {e:?} in {encoded:?}"),
            }
        }
        Err(e) => assert_inside(&e, len, "LeaderEpochCheckpoint::parse"),
    }
    match MetaProperties::parse(data) {
        Ok(mp) => {
            let encoded = mp.encode();
            assert_eq!(
                MetaProperties::parse(encoded.as_bytes()).ok(),
                Some(mp),
                "meta.properties round trip: {encoded:?}"
            );
        }
        Err(e) => assert_inside(&e, len, "MetaProperties::parse"),
    }
    match PartitionMetadata::parse(data) {
        Ok(pm) => {
            let encoded = pm.encode();
            assert_eq!(
                PartitionMetadata::parse(encoded.as_bytes()).ok(),
                Some(pm),
                "partition.metadata round trip"
            );
        }
        Err(e) => assert_inside(&e, len, "PartitionMetadata::parse"),
    }
    producer_snapshot(data);
    // With the CRC fixed up, so the fuzzer reaches the entries behind it.
    if data.len() >= snapshot::PRODUCER_ENTRIES_OFFSET {
        let mut sealed = data.to_vec();
        seal_snapshot_crc(&mut sealed);
        producer_snapshot(&sealed);
    }
    let text = String::from_utf8_lossy(data);
    match PartitionDirName::parse(&text) {
        Ok(name) => {
            let again = PartitionDirName::parse(&name.dir_name());
            assert_eq!(
                again.as_ref().ok(),
                Some(&name),
                "dir name round trip: {:?}",
                name.dir_name()
            );
        }
        Err(reason) => assert!(!reason.is_empty()),
    }
    let _ = classify_partition_file(&text);
    let _ = validate_topic_name(&text);
    let _ = is_internal_topic(&text);
}

/// Store the CRC-32C of `[6, end)` at bytes 2..6, as Kafka writes it.
pub fn seal_snapshot_crc(bytes: &mut [u8]) {
    let crc = crc32c::crc32c(bytes.get(snapshot::PRODUCER_ENTRIES_OFFSET..).unwrap_or_default());
    if let Some(dst) = bytes.get_mut(snapshot::CRC_OFFSET..snapshot::PRODUCER_ENTRIES_OFFSET) {
        dst.copy_from_slice(&crc.to_be_bytes());
    }
}

fn producer_snapshot(data: &[u8]) {
    match ProducerSnapshot::parse(data) {
        Ok(snap) => {
            assert_eq!(snap.to_bytes(), data, "producer snapshot round trip");
            let _ = TxnTracker::from_snapshot(&snap).first_unstable_offset();
        }
        Err(e) => assert_inside(&e, data.len(), "ProducerSnapshot::parse"),
    }
}

/// `verify_dir`: lay the input out as a partition directory and run a deep
/// verification of it. Layout: like [`IndexInput`]; the log becomes
/// `00000000000000000000.log`, and the third part is the `.txnindex`, or with the
/// flags' bit 2 the `leader-epoch-checkpoint`; bit 3 makes the run strict.
/// Every finding must name a position inside the file it is about.
pub fn verify_dir(data: &[u8]) {
    use segment_format::dir::{segment_file_name, SegmentFileKind, LEADER_EPOCH_CHECKPOINT_FILE};
    use segment_format::verify::{verify_paths, Depth, NoProgress, Strictness, VerifyOptions};
    let input = IndexInput::split(data);
    let Ok(root) = tempfile::tempdir() else { return };
    let dir = root.path().join("fuzz-0");
    if std::fs::create_dir(&dir).is_err() {
        return;
    }
    let third = if input.flags & 4 != 0 {
        LEADER_EPOCH_CHECKPOINT_FILE.to_string()
    } else {
        segment_file_name(0, SegmentFileKind::TxnIndex)
    };
    let files = [
        (segment_file_name(0, SegmentFileKind::Log), &input.log),
        (segment_file_name(0, SegmentFileKind::Index), &input.offset_index),
        (segment_file_name(0, SegmentFileKind::TimeIndex), &input.time_index),
        (third, &input.txn_index),
    ];
    for (i, (name, bytes)) in files.iter().enumerate() {
        if i > 0 && bytes.is_empty() {
            continue;
        }
        if std::fs::write(dir.join(name), bytes).is_err() {
            return;
        }
    }
    let options = VerifyOptions {
        depth: Depth::Deep,
        strictness: if input.flags & 8 != 0 {
            Strictness::Strict
        } else {
            Strictness::Lenient
        },
    };
    let report = verify_paths(std::slice::from_ref(&dir), &options, &NoProgress);
    assert!(
        report.io_errors.is_empty(),
        "verify hit I/O errors: {:?}",
        report.io_errors
    );
    for f in &report.findings {
        let file_len = std::fs::metadata(&f.path).map_or(0, |m| m.len());
        if let Some(p) = f.position {
            assert!(p <= file_len, "finding past the end of its {file_len}-byte file: {f}");
        }
    }
    let _ = (report.errors(), report.warnings(), report.is_sound());
}

/// `bucket`: the object-store side — keys listed from a bucket and the JSON
/// documents read from it are as hostile as a segment. Input: line 1 a key
/// prefix, line 2 an object key, the rest a manifest or lease document.
/// Properties: a parsed key renders back to itself and is made of safe path
/// components; a parsed prefix re-parses to itself; an accepted document
/// re-serialises to one that is accepted and equal.
pub fn bucket(data: &[u8]) {
    use segmirror_transport::manifest::{KeyPrefix, Lease, Manifest, ObjectKey};
    let text = String::from_utf8_lossy(data);
    let mut lines = text.splitn(3, '\n');
    let prefix_line = lines.next().unwrap_or_default();
    let key = lines.next().unwrap_or_default();
    let document = lines.next().unwrap_or_default().as_bytes();
    let prefix = match KeyPrefix::new(prefix_line) {
        Ok(prefix) => {
            let again = KeyPrefix::new(prefix.as_str()).ok();
            assert_eq!(again.as_ref(), Some(&prefix), "key prefix round trip");
            prefix
        }
        Err(_) => KeyPrefix::root(),
    };
    if let Ok(parsed) = ObjectKey::parse(&prefix, key) {
        assert_eq!(parsed.to_key(), key, "object key round trip");
        for part in key.split('/') {
            let safe = !part.is_empty() && part != "." && part != ".." && !part.contains(['\\', '\0']);
            assert!(safe, "parsed key {key:?} has an unsafe component {part:?}");
        }
        let _ = parsed.partition.dir();
    }
    if let Ok(manifest) = Manifest::from_json(key, document) {
        let json = manifest.to_json();
        match Manifest::from_json(key, &json) {
            Ok(again) => assert_eq!(again, manifest, "manifest round trip"),
            Err(e) => panic!("a re-serialised manifest is rejected: {e}"),
        }
        let _ = manifest.check_location(&prefix, key);
    }
    if let Ok(lease) = Lease::from_json(key, document) {
        let json = lease.to_json();
        match Lease::from_json(key, &json) {
            Ok(again) => assert_eq!(again, lease, "lease round trip"),
            Err(e) => panic!("a re-serialised lease is rejected: {e}"),
        }
    }
}

/// Run the body of `target` on `data` (the fuzz targets and the seed replay).
///
/// # Panics
/// On an unknown target name, and whenever a checked property fails.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "log_scan" => {
            log_scan(data, 0, true);
        }
        "batch_deep" => batch_deep(data),
        "index_check" => index_check(data),
        "text_files" => text_files(data),
        "verify_dir" => verify_dir(data),
        "bucket" => bucket(data),
        "direct_frames" => direct::direct_frames(data),
        "direct_session" => session::direct_session(data),
        "endpoint_requests" => endpoint::endpoint_requests(data),
        _ => panic!("unknown fuzz target {target}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGETS: [&str; 9] = [
        "log_scan",
        "batch_deep",
        "index_check",
        "text_files",
        "verify_dir",
        "bucket",
        "direct_frames",
        "direct_session",
        "endpoint_requests",
    ];

    #[test]
    fn every_seed_passes_its_target() {
        for (target, seeds) in seeds::all() {
            assert!(TARGETS.contains(&target));
            assert!(!seeds.is_empty(), "{target} has no seeds");
            for seed in &seeds {
                run(target, seed);
            }
        }
    }

    /// Every target accepts every short input: the first `batch_deep` run found
    /// that the harness itself indexed the magic byte of a 15-byte input.
    #[test]
    fn short_inputs_do_not_panic_the_harness() {
        for len in 0..80 {
            for fill in [0x00, 0x01, 0x02, 0xff] {
                let data = vec![fill; len];
                for target in TARGETS {
                    run(target, &data);
                }
            }
        }
    }

    #[test]
    fn index_input_split_inverts_join() {
        for seed in seeds::index_inputs() {
            assert_eq!(IndexInput::split(&seed).join(), seed);
        }
        let cut = IndexInput::split(&[3, 0, 9]);
        assert_eq!((cut.flags, cut.offset_index.len(), cut.log.len()), (3, 0, 0));
    }

    #[test]
    fn scan_of_seed_segments_is_clean_and_walks_every_record() {
        let segment = &seeds::segments()[1];
        let scanned = log_scan(segment, 500, false);
        assert!(!scanned.stopped);
        assert_eq!(scanned.end, 500 + segment.len() as u64);
        assert_eq!(scanned.batches.len(), 5);
        for info in &scanned.batches {
            let start = (info.position - 500) as usize;
            let frame = &segment[start..start + info.size as usize];
            assert_eq!(deep_walk(frame, info), Some(5));
        }
    }

    #[test]
    fn batch_deep_fixes_the_crc_so_a_corrupted_record_is_reached() {
        let mut batch = seeds::batches()[0].clone();
        // The last byte is inside the last record; without the CRC fix-up the
        // walk would never be reached by a fuzzer mutating it.
        let last = batch.len() - 1;
        batch[last] ^= 0xff;
        batch_deep(&batch);
        let mut sealed = batch.clone();
        batch::seal_crc(&mut sealed);
        let header = batch::parse_header(&sealed).expect("header");
        assert!(batch::verify_crc(&sealed, &header).is_ok());
    }

    #[test]
    fn sealed_snapshot_crc_verifies() {
        let mut bytes = seeds::text_inputs()[6].clone();
        bytes[20] ^= 1;
        assert!(ProducerSnapshot::parse(&bytes).is_err());
        seal_snapshot_crc(&mut bytes);
        assert!(ProducerSnapshot::parse(&bytes).is_ok());
    }

    #[test]
    fn bucket_seeds_are_accepted_documents_at_their_keys() {
        use segmirror_transport::manifest::{KeyPrefix, Lease, Manifest, ObjectKey};
        let seeds = seeds::bucket_inputs();
        assert_eq!(seeds.len(), 5);
        let prefix = KeyPrefix::new("backups/kafka").expect("prefix");
        for (i, seed) in seeds.iter().enumerate() {
            let text = std::str::from_utf8(seed).expect("utf-8");
            let mut lines = text.splitn(3, '\n');
            let (_, key, doc) = (
                lines.next(),
                lines.next().unwrap_or_default(),
                lines.next().unwrap_or_default(),
            );
            assert!(ObjectKey::parse(&prefix, key).is_ok(), "{key}");
            match i {
                0 => assert!(Manifest::from_json(key, doc.as_bytes()).is_ok()),
                1 => assert!(Lease::from_json(key, doc.as_bytes()).is_ok()),
                _ => assert!(doc.is_empty()),
            }
        }
    }
}
