//! What a scan costs per batch, for the many-small-batches case (~930-byte batches, where per-batch work
//! weighs against the CRC of few bytes). An `#[ignore]`d measurement, run in release:
//!
//! ```sh
//! cargo test --release -p segment-format --lib -- --ignored --nocapture scan_cost_per_batch
//! ```
//!
//! It prints ns per batch for each layer of a scan over the same bytes: the frame walk alone (framing and header),
//! the CRC-32C alone, the two together as the one-thread scan runs them, [`LogFile::scan`] of the file from the page
//! cache (adds the `pread` copy), and `verify` of the partition (adds the index, offset, epoch and transaction
//! checks).

use std::hint::black_box;
use std::time::Instant;

use super::*;
use crate::verify::{verify_paths, NoProgress, VerifyOptions};
use crate::writer::sample::{write_bulk, BulkOptions};

/// Best of `rounds` timings of `f`, in ns per batch.
fn ns_per_batch(batches: u64, rounds: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let started = Instant::now();
        let seen = black_box(f());
        let elapsed = started.elapsed().as_nanos() as f64;
        assert_eq!(seen, batches);
        best = best.min(elapsed / batches as f64);
    }
    best
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn scan_cost_per_batch() {
    // The 64 MiB file takes the windowed two-thread path; the 2.6 MiB one (a partition of the many-small-partitions
    // benchmark, below `PARALLEL_MIN_BYTES`) the one-thread path, as every file does under `verify`'s workers.
    for total_bytes in [64 << 20, 2_700_000] {
        measure(total_bytes);
    }
    println!("reproduce: cargo test --release -p segment-format --lib -- --ignored --nocapture scan_cost_per_batch");
}

fn measure(total_bytes: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let options = BulkOptions {
        total_bytes,
        partitions: 1,
        fsync: false,
        records_per_batch: 1,
        value_bytes: 860,
        ..BulkOptions::default()
    };
    let manifest = write_bulk(tmp.path(), &options, &|_| {}).unwrap();
    let dir = manifest.partitions[0].written.dir.clone();
    let log = dir.join(crate::dir::segment_file_name(0, crate::dir::SegmentFileKind::Log));
    let bytes = std::fs::read(&log).unwrap();
    let batches = scan_frames(&bytes, 0).count() as u64;
    // Small files repeat more often, so that every layer runs long enough to time.
    let rounds = if bytes.len() < 8 << 20 { 61 } else { 7 };

    let walk = ns_per_batch(batches, rounds, || {
        let mut rest: &[u8] = &bytes;
        let mut position = 0u64;
        let mut n = 0;
        while !rest.is_empty() {
            let framed = frame_at(rest, position).unwrap();
            black_box(&framed.info);
            let size = framed.bytes.len();
            rest = &rest[size..];
            position += size as u64;
            n += 1;
        }
        n
    });
    let frames: Vec<&[u8]> = scan_frames(&bytes, 0).map(|f| f.unwrap().bytes).collect();
    let crc = ns_per_batch(batches, rounds, || {
        let mut n = 0;
        for frame in &frames {
            black_box(crate::batch::compute_crc(frame));
            n += 1;
        }
        n
    });
    let in_order = ns_per_batch(batches, rounds, || {
        scan_in_order(&bytes, 0, |_| ControlFlow::Continue(())).0.frames
    });
    let scan_file = || {
        LogFile::open(&log)
            .unwrap()
            .scan(|_| ControlFlow::Continue(()))
            .unwrap()
            .frames
    };
    let file = ns_per_batch(batches, rounds, scan_file);
    let file_one_thread = ns_per_batch(batches, rounds, || without_crc_helper(scan_file));
    let verify = ns_per_batch(batches, rounds, || {
        let report = verify_paths(std::slice::from_ref(&dir), &VerifyOptions::default(), &NoProgress);
        assert!(report.is_sound());
        report.partitions[0].batches
    });
    let size = bytes.len() as f64 / batches as f64;
    let mib = bytes.len() as f64 / 1048576.0;
    println!();
    println!("scan cost per batch: {batches} batches of {size:.0} bytes (one partition, {mib:.1} MiB, release build)");
    println!("| layer                                          | ns/batch | MiB/s  |");
    println!("|------------------------------------------------|----------|--------|");
    for (name, ns) in [
        ("frame walk (framing + header), no CRC", walk),
        ("CRC-32C alone", crc),
        ("one-thread scan in memory (walk + CRC)", in_order),
        ("LogFile::scan from the page cache", file),
        ("LogFile::scan, one thread (without_crc_helper)", file_one_thread),
        ("verify of the partition dir", verify),
    ] {
        println!("| {name:<46} | {ns:>8.1} | {:>6.0} |", size / ns * 1e9 / 1048576.0);
    }
}
