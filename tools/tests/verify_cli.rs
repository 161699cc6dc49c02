//! `segmirror verify` end to end: one test per defect class, each run against the
//! built binary on a partition written the way a healthy broker writes it, with
//! exactly one thing broken. Every test asserts the exit status (0 sound, 1
//! corruption, 2 usage or I/O) and where the finding points: the file, the byte
//! position and, where known, the offset.

mod common;

use std::path::Path;

use common::*;
use proptest::prelude::*;
use segment_format::batch::{ControlType, CRC_OFFSET, RECORD_BATCH_OVERHEAD};
use segment_format::index::{OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE};
use segment_format::legacy::LEGACY_CRC_OFFSET;
use segment_format::txn_index::{self, AbortedTxn, ABORTED_TXN_SIZE};
use segment_format::verify::MAX_FINDINGS_PER_FILE;

/// `orders-0`: a sealed segment of offsets 0..=19 (4 batches, leader epoch 1)
/// and the newest segment of offsets 20..=34 (3 batches, epoch 2). An index entry
/// for every batch but the first of each segment.
fn orders(parent: &Path) -> BuiltPartition {
    write_partition(parent, &orders_spec())
}

fn orders_spec() -> PartitionSpec {
    PartitionSpec::new(
        "orders",
        0,
        vec![
            SegmentSpec::new(data_batches(0, 4, 5, 1)),
            SegmentSpec::new(data_batches(20, 3, 5, 2)),
        ],
    )
}

fn one_segment(parent: &Path, topic: &str, batches: Vec<Vec<u8>>) -> BuiltPartition {
    write_partition(parent, &PartitionSpec::new(topic, 0, vec![SegmentSpec::new(batches)]))
}

/// The summary row the text report prints for `name`, split into columns.
fn text_row<'a>(run: &'a Run, name: &str) -> Vec<&'a str> {
    run.stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no summary row for {name}\n{run}"))
        .split_whitespace()
        .collect()
}

/// Assert a JSON partition summary against what was written.
fn assert_summary(summary: &serde_json::Value, p: &BuiltPartition, segments: u64) {
    assert_eq!(summary["segments"], segments, "{summary:#}");
    assert_eq!(summary["batches"], p.batches(), "{summary:#}");
    assert_eq!(summary["records"], p.records(), "{summary:#}");
    assert_eq!(summary["bytes"], p.bytes(), "{summary:#}");
    assert_eq!(summary["first_offset"], p.first_offset(), "{summary:#}");
    assert_eq!(summary["last_offset"], p.last_offset(), "{summary:#}");
    assert_eq!(summary["errors"], 0, "{summary:#}");
    assert_eq!(summary["warnings"], 0, "{summary:#}");
}

// ---------------------------------------------------------------------------------------------------------------
// Sound data
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn sound_partition_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    assert_eq!((p.batches(), p.records(), p.last_offset()), (7, 35, 34));

    let run = verify(&[&p.dir], &[]);
    run.expect_code(0)
        .expect_stdout("SOUND: 1 partition(s), 0 error(s), 0 warning(s)");
    let bytes = p.bytes().to_string();
    assert_eq!(
        text_row(&run, "orders-0"),
        ["orders-0", "2", "7", "35", bytes.as_str(), "0..34", "0", "0"]
    );

    let report = verify_json(&[&p.dir], &[], 0);
    assert_eq!(report.doc["sound"], true);
    assert_eq!(report.doc["errors"], 0);
    assert_eq!(report.doc["warnings"], 0);
    assert_eq!(
        report.doc["findings"].as_array().map(Vec::len),
        Some(0),
        "{:#}",
        report.doc
    );
    let summary = report.partition();
    assert_eq!(summary["topic"], "orders");
    assert_eq!(summary["partition"], 0);
    assert_summary(summary, &p, 2);
}

#[test]
fn sound_log_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("kafka-logs");
    let payments = PartitionSpec::new(
        "payments",
        3,
        vec![SegmentSpec::new(vec![
            compressed_batch(0, 10, 4, segment_format::batch::Compression::Gzip),
            compressed_batch(10, 10, 4, segment_format::batch::Compression::Zstd),
        ])],
    );
    let built = write_log_dir(&root, &[orders_spec(), payments]);

    let run = verify(&[&root], &[]);
    run.expect_code(0)
        .expect_stdout("SOUND: 2 partition(s), 0 error(s), 0 warning(s)");
    assert_eq!(
        text_row(&run, "orders-0")[1..6],
        ["2", "7", "35", &built[0].bytes().to_string(), "0..34"]
    );
    assert_eq!(
        text_row(&run, "payments-3")[1..6],
        ["1", "2", "20", &built[1].bytes().to_string(), "0..19"]
    );

    let report = verify_json(&[&root], &["--deep"], 0);
    assert_eq!(report.doc["sound"], true, "{:#}", report.doc);
    let parts = report.doc["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 2);
    assert_summary(&parts[0], &built[0], 2);
    assert_summary(&parts[1], &built[1], 1);
    assert_eq!(parts[1]["topic"], "payments");
    assert_eq!(parts[1]["partition"], 3);
}

/// A tail mirror's root as `apply --listen` leaves it: the partitions beside segmirror's own state, written out
/// here by name (not from the applier's list, so that a name dropped from that list fails this test). `verify`
/// and `verify --strict` call it sound, as the README's runbook expects; a directory that is not segmirror's still
/// stops a broker and still fails, as does one of segmirror's names at a broker's log dir.
#[test]
fn a_mirror_roots_own_state_is_not_a_finding_and_a_stray_directory_still_is() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("mirror");
    std::fs::create_dir_all(&root).unwrap();
    let p = orders(&root);
    for dir in [
        ".tail/staging",
        ".tail/replace",
        ".tail/progress",
        ".tail/claims",
        ".tail/truncations",
        ".tail/retention",
        ".archive/orders-0",
        ".staging/orders-0.0-20",
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    for (file, bytes) in [
        (".segmirror-apply.lock", &b""[..]),
        (".segmirror-apply.holder", b"pid 1 since 2026-01-01T00:00:00Z\n"),
        // A state file as an appender that kept nothing for promotion writes it (`--deep` checks only what is kept).
        (
            ".tail/orders-0.json",
            br#"{"topic":"orders","partition":0,"topic_id":[7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7],"segment_base":0,"position":0,"sealed":false,"next_offset":null}"#,
        ),
        (
            ".archive/orders-0/00000000000000000035-00000000000000000040.log",
            b"archived",
        ),
        ("catalog.sqlite", b""),
        ("catalog.sqlite-wal", b""),
        ("catalog.sqlite-shm", b""),
    ] {
        std::fs::write(root.join(file), bytes).unwrap();
    }
    for flags in [&[][..], &["--strict"], &["--strict", "--deep"]] {
        verify(&[&root], flags)
            .expect_code(0)
            .expect_stdout("SOUND: 1 partition(s), 0 error(s), 0 warning(s)");
    }
    let report = verify_json(&[&root], &["--strict"], 0);
    assert_summary(&report.doc["partitions"][0], &p, 2);

    // One of our names of the wrong kind is not ours: `.tail` as a file is an unknown file (a warning).
    let stray_file = tmp.path().join("mirror-file");
    std::fs::create_dir_all(&stray_file).unwrap();
    orders(&stray_file);
    std::fs::write(stray_file.join(".tail"), b"").unwrap();
    verify(&[&stray_file], &[]).expect_code(0).expect_stdout("unknown file");

    // A directory that is not ours is reported as before: the broker would not start with it.
    std::fs::create_dir(root.join(".stray")).unwrap();
    let run = verify(&[&root], &[]);
    run.expect_code(1)
        .expect_stdout("the broker fails to start with this directory present");
    assert!(
        !run.stdout.contains(".tail") && !run.stdout.contains(".archive"),
        "{run}"
    );
    std::fs::remove_dir(root.join(".stray")).unwrap();

    // In a broker's log dir, `.tail` is a directory that stops the broker.
    let logs = tmp.path().join("kafka-logs");
    write_log_dir(&logs, &[orders_spec()]);
    std::fs::create_dir(logs.join(".tail")).unwrap();
    verify(&[&logs], &[])
        .expect_code(1)
        .expect_stdout("the broker fails to start with this directory present");
}

/// The mirror root a real `ship` + `tail-apply` pair leaves, its catalog inside it: sound under `verify` and
/// `verify --strict` while the applier holds it (lock, holder, `.tail` state) and after both stopped.
#[test]
fn a_live_tail_mirror_verifies_sound() {
    use common::service::{wait_mirrored, Service};
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let partition = |topic: &str, n: i32| {
        PartitionSpec::new(
            topic,
            n,
            vec![
                SegmentSpec::new(data_batches(0, 20, 3, 0)),
                SegmentSpec::new(data_batches(60, 10, 3, 0)),
            ],
        )
        .index_interval(4096)
    };
    write_log_dir(&source, &[partition("orders", 0), partition("payments", 1)]);
    let mirror = tmp.path().join("mirror");
    let text = |p: &Path| p.display().to_string();
    let catalog = text(&mirror.join("catalog.sqlite"));
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut applier = Service::start(
        "tail-apply",
        &args(&[
            "tail-apply",
            "--mirror",
            &text(&mirror),
            "--link",
            "dr",
            "--catalog",
            &catalog,
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
        ]),
    );
    let addr = applier.bound();
    let log_dir = text(&source);
    let mut shipper = Service::start(
        "ship",
        &args(&[
            "ship",
            "--log-dir",
            &log_dir,
            "--link",
            "dr",
            "--upto",
            "log-end",
            "--connect",
            &addr,
            "--plaintext",
        ]),
    );
    wait_mirrored(&source, &mirror, "", &mut [&mut applier, &mut shipper]);
    for name in [
        ".segmirror-apply.lock",
        ".segmirror-apply.holder",
        ".tail",
        "catalog.sqlite",
    ] {
        assert!(mirror.join(name).exists(), "{name} is not in the live mirror root");
    }
    let sound = |when: &str| {
        for flags in [&[][..], &["--strict"]] {
            let run = verify(&[&mirror], flags);
            assert_eq!(run.code, Some(0), "{when}, verify {flags:?}:\n{run}");
            run.expect_stdout("SOUND: 2 partition(s), 0 error(s), 0 warning(s)");
        }
    };
    sound("while the applier runs");
    let (ship_code, ship_log) = shipper.stop();
    let (apply_code, apply_log) = applier.stop();
    assert_eq!((ship_code, apply_code), (Some(0), Some(0)), "{ship_log}\n{apply_log}");
    sound("after both stopped");
}

#[test]
fn sound_single_log_file() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);

    // Inside its partition directory: verified in context (a sealed segment).
    let run = verify(&[&seg.log], &[]);
    run.expect_code(0).expect_stdout("SOUND");
    assert_eq!(
        text_row(&run, "orders-0")[1..6],
        ["1", "4", "20", &seg.log_len().to_string(), "0..19"]
    );
    let report = verify_json(&[&seg.log], &[], 0);
    let summary = report.partition();
    assert_eq!(
        (summary["segments"].as_u64(), summary["batches"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(
        (summary["records"].as_u64(), summary["bytes"].as_u64()),
        (Some(20), Some(seg.log_len()))
    );
    assert_eq!(
        (summary["first_offset"].as_i64(), summary["last_offset"].as_i64()),
        (Some(0), Some(19))
    );

    // Copied out with its indexes into a directory that is not a partition.
    let loose = tmp.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    for f in [&seg.log, &seg.index, &seg.time_index] {
        std::fs::copy(f, loose.join(f.file_name().unwrap())).unwrap();
    }
    let log = loose.join(seg.log.file_name().unwrap());
    let report = verify_json(&[&log], &[], 0);
    report.expect_no_errors();
    assert_eq!(report.partition()["batches"], 4);
    assert_eq!(report.partition()["last_offset"], 19);
}

// ---------------------------------------------------------------------------------------------------------------
// Batches
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn crc_mismatch_reports_every_corrupt_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let (b1, b3) = (seg.batches[1], seg.batches[3]);
    flip(&seg.log, b1.position + RECORD_BATCH_OVERHEAD as u64 + 10);
    flip(&seg.log, b3.position + b3.size - 1);

    let run = verify(&[&p.dir], &[]);
    run.expect_code(1).expect_stdout("CORRUPT");
    run.expect_stdout(&format!(
        "{} (offset 5): CRC mismatch",
        place(&seg.log, b1.position + CRC_OFFSET as u64)
    ));
    run.expect_stdout(&format!(
        "{} (offset 15): CRC mismatch",
        place(&seg.log, b3.position + CRC_OFFSET as u64)
    ));

    let report = verify_json(&[&p.dir], &[], 1);
    report.expect_error("crc_mismatch", &seg.log, Some(b1.position + CRC_OFFSET as u64), Some(5));
    report.expect_error(
        "crc_mismatch",
        &seg.log,
        Some(b3.position + CRC_OFFSET as u64),
        Some(15),
    );
    assert_eq!(
        report.errors().len(),
        2,
        "only the two CRCs are wrong: {:#}",
        report.doc
    );
    // The scan went on past both: every batch is still counted.
    assert_eq!(report.partition()["batches"], 7);
}

#[test]
fn frame_length_below_legacy_minimum() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let b2 = seg.batches[2];
    overwrite(&seg.log, b2.position + 8, &13i32.to_be_bytes());

    let run = verify(&[&p.dir], &[]);
    run.expect_code(1).expect_stdout(&format!(
        "{} (offset 10): invalid batch length 13",
        place(&seg.log, b2.position)
    ));
    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("bad_length", &seg.log, Some(b2.position), Some(10));
    assert_eq!(f.defect["value"], 13);
}

#[test]
fn v2_length_below_batch_header() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let b1 = seg.batches[1];
    // 14 passes the frame check every magic shares, but a v2 batch needs 61 - 12.
    overwrite(&seg.log, b1.position + 8, &48i32.to_be_bytes());

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("bad_length", &seg.log, Some(b1.position), Some(5));
    assert_eq!(f.defect["value"], 48);
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&seg.log, b1.position));
}

#[test]
fn bad_magic_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(1);
    let b1 = seg.batches[1];
    overwrite(&seg.log, b1.position + 16, &[3]);

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("bad_magic", &seg.log, Some(b1.position), Some(25));
    assert_eq!(f.defect["magic"], 3);
    // A framing defect in the newest segment is corruption, not a partial write.
    verify(&[&p.dir], &[]).expect_code(1).expect_stdout(&format!(
        "{} (offset 25): unknown magic byte 3",
        place(&seg.log, b1.position)
    ));
}

#[test]
fn offsets_not_increasing_across_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let batches = vec![
        data_batch(0, 5, 1),
        data_batch(10, 5, 1),
        data_batch(5, 5, 1),
        data_batch(20, 5, 1),
    ];
    let p = one_segment(tmp.path(), "orders", batches);
    let seg = p.segment(0);
    let b2 = seg.batches[2];

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("offset_out_of_order", &seg.log, Some(b2.position), Some(5));
    assert_eq!(
        (f.defect["previous"].as_i64(), f.defect["found"].as_i64()),
        (Some(14), Some(5))
    );
    verify(&[&p.dir], &[]).expect_code(1).expect_stdout(&format!(
        "{} (offset 5): offsets not increasing",
        place(&seg.log, b2.position)
    ));
}

#[test]
fn batch_below_segment_base_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = PartitionSpec::new(
        "orders",
        0,
        vec![SegmentSpec::at(100, vec![data_batch(90, 5, 1), data_batch(100, 5, 1)])],
    );
    let p = write_partition(tmp.path(), &spec);
    let seg = p.segment(0);
    assert!(seg.log.ends_with("00000000000000000100.log"));

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("offset_outside_segment", &seg.log, Some(0), Some(90));
    assert_eq!(
        (f.defect["base_offset"].as_i64(), f.defect["found"].as_i64()),
        (Some(100), Some(90))
    );
    verify(&[&p.dir], &[]).expect_code(1).expect_stdout(&format!(
        "{} (offset 90): offset 90 below segment base offset 100",
        place(&seg.log, 0)
    ));
}

#[test]
fn batch_reaching_next_segment_base_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = PartitionSpec::new(
        "orders",
        0,
        vec![
            SegmentSpec::new(data_batches(0, 3, 5, 1)),
            SegmentSpec::at(12, data_batches(15, 2, 5, 1)),
        ],
    );
    let p = write_partition(tmp.path(), &spec);
    let seg = p.segment(0);
    let b2 = seg.batches[2];

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("offset_outside_segment", &seg.log, Some(b2.position), Some(10));
    assert_eq!(f.defect["next_base_offset"], 12);
    assert_eq!(f.defect["found"], 14);
    assert_eq!(
        report
            .errors()
            .iter()
            .filter(|f| f.kind == "offset_outside_segment")
            .count(),
        1
    );
    verify(&[&p.dir], &[]).expect_code(1).expect_stdout(&format!(
        "{} (offset 10): offset 14 outside segment range [0, 12)",
        place(&seg.log, b2.position)
    ));
}

#[test]
fn offset_not_expressible_relative_to_segment_base() {
    let tmp = tempfile::tempdir().unwrap();
    let far = i64::from(i32::MAX) - 2;
    let p = one_segment(tmp.path(), "orders", vec![data_batch(0, 5, 1), data_batch(far, 5, 1)]);
    let seg = p.segment(0);
    let b1 = seg.batches[1];

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("offset_overflow", &seg.log, Some(b1.position), Some(far));
    assert_eq!(f.defect["found"], far + 4);
    assert_eq!(f.defect["base_offset"], 0);
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&seg.log, b1.position));
}

// ---------------------------------------------------------------------------------------------------------------
// Segment tails
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn incomplete_batch_at_end_of_newest_segment_is_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(1);
    let end = seg.log_len();
    append(&seg.log, &data_batch(35, 5, 2)[..40]);

    let run = verify(&[&p.dir], &[]);
    run.expect_code(0).expect_stdout(&format!(
        "warning: {} (offset 35): incomplete batch",
        place(&seg.log, end)
    ));
    run.expect_stdout("SOUND: 1 partition(s), 0 error(s), 1 warning(s)");
    let report = verify_json(&[&p.dir], &[], 0);
    report.expect_no_errors();
    let w = report.expect("warning", "other", &seg.log, Some(end));
    assert_eq!(w.offset, Some(35));
    assert_eq!(report.partition()["batches"], 7, "the partial batch is not counted");
    assert_eq!(report.partition()["warnings"], 1);

    let strict = verify_json(&[&p.dir], &["--strict"], 1);
    strict.expect_error("trailing_bytes", &seg.log, Some(end), Some(35));
    verify(&[&p.dir], &["--strict"])
        .expect_code(1)
        .expect_stdout(&format!("error: {}", place(&seg.log, end)));
}

#[test]
fn incomplete_batch_at_end_of_older_segment_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let end = seg.log_len();
    append(&seg.log, &data_batch(20, 5, 1)[..40]);

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("trailing_bytes", &seg.log, Some(end), Some(20));
    assert_eq!(f.defect["bytes"], 40);
    verify(&[&p.dir], &[]).expect_code(1).expect_stdout(&format!(
        "error: {} (offset 20): 40 bytes after the last complete batch",
        place(&seg.log, end)
    ));
}

#[test]
fn zero_filled_tail_of_newest_log_is_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(1);
    let end = seg.log_len();
    append(&seg.log, &[0; 4096]);

    let run = verify(&[&p.dir], &[]);
    run.expect_code(0)
        .expect_stdout(&format!("warning: {}", place(&seg.log, end)));
    let report = verify_json(&[&p.dir], &[], 0);
    report.expect_no_errors();
    report.expect("warning", "other", &seg.log, Some(end));
    assert_eq!(report.partition()["batches"], 7);
}

#[test]
fn zero_filled_tail_of_sealed_log_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let end = seg.log_len();
    append(&seg.log, &[0; 4096]);

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect("error", "trailing_bytes", &seg.log, Some(end));
    assert_eq!(f.defect["bytes"], 4096);
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&format!("error: {}", place(&seg.log, end)));
}

// ---------------------------------------------------------------------------------------------------------------
// Offset index
// ---------------------------------------------------------------------------------------------------------------

const OE: u64 = OFFSET_INDEX_ENTRY_SIZE as u64;

#[test]
fn offset_index_position_not_on_batch_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    // Slot 1 is (14, position of batch 2).
    let pos = seg.batches[2].position as i32 + 1;
    overwrite(&seg.index, OE + 4, &pos.to_be_bytes());

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.index, Some(OE), Some(14));
    assert_eq!(f.defect["index"], "offset");
    assert!(
        f.defect["message"]
            .as_str()
            .unwrap()
            .contains("not the start of a batch"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&format!("{} (offset 14): offset index", place(&seg.index, OE)));
}

#[test]
fn offset_index_entries_not_increasing() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    edit(&seg.index, |b| {
        let (first, second) = b.split_at_mut(OE as usize);
        first.swap_with_slice(&mut second[..OE as usize]);
    });

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.index, Some(OE), Some(9));
    assert!(
        f.defect["message"].as_str().unwrap().contains("does not increase"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&seg.index, OE));
}

#[test]
fn offset_index_length_not_a_multiple_of_entry_size() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let len = std::fs::metadata(&seg.index).unwrap().len();
    assert_eq!(len, 3 * OE);
    append(&seg.index, &[0, 0, 1]);

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.index, Some(len), None);
    assert!(
        f.defect["message"].as_str().unwrap().contains("not a multiple of 8"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&seg.index, len));
}

#[test]
fn zero_tail_of_sealed_offset_index_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let len = std::fs::metadata(&seg.index).unwrap().len();
    append(&seg.index, &[0; 16 * OFFSET_INDEX_ENTRY_SIZE]);

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.index, Some(len), None);
    assert!(
        f.defect["message"].as_str().unwrap().contains("16 zero-filled slots"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&seg.index, len));
}

#[test]
fn zero_tail_of_newest_offset_and_time_index_is_sound() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(1);
    // What a running broker's preallocated active indexes look like.
    append(&seg.index, &[0; 1024 * OFFSET_INDEX_ENTRY_SIZE]);
    append(&seg.time_index, &[0; 1024 * TIME_INDEX_ENTRY_SIZE]);

    let report = verify_json(&[&p.dir], &[], 0);
    report.expect_no_errors();
    verify(&[&p.dir], &["--strict"]).expect_code(0).expect_stdout("SOUND");

    // An active segment with a single batch has an all-zero index: nothing to check.
    let tmp = tempfile::tempdir().unwrap();
    let p = one_segment(tmp.path(), "fresh", vec![data_batch(0, 5, 1)]);
    let seg = p.segment(0);
    assert_eq!(std::fs::metadata(&seg.index).unwrap().len(), 0);
    append(&seg.index, &[0; 64 * OFFSET_INDEX_ENTRY_SIZE]);
    append(&seg.time_index, &[0; 64 * TIME_INDEX_ENTRY_SIZE]);
    verify_json(&[&p.dir], &[], 0).expect_no_errors();
}

// ---------------------------------------------------------------------------------------------------------------
// Time index
// ---------------------------------------------------------------------------------------------------------------

const TE: u64 = TIME_INDEX_ENTRY_SIZE as u64;

#[test]
fn time_index_timestamps_out_of_order() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    // Entries: (max ts of batch k, last offset of batch k) for k = 1, 2, 3.
    let ts0 = BASE_TS + 9;
    overwrite(&seg.time_index, TE, &(ts0 - 1).to_be_bytes());

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.time_index, Some(TE), Some(14));
    assert_eq!(f.defect["index"], "time");
    let messages: Vec<String> = report
        .errors()
        .iter()
        .filter(|f| f.path == seg.time_index && f.position == Some(TE))
        .map(|f| f.defect["message"].as_str().unwrap().to_string())
        .collect();
    assert!(messages.iter().any(|m| m.contains("does not increase")), "{messages:?}");
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&format!("{} (offset 14): time index", place(&seg.time_index, TE)));
}

#[test]
fn time_index_of_sealed_segment_lacks_max_timestamp() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    assert_eq!(std::fs::metadata(&seg.time_index).unwrap().len(), 3 * TE);
    // Drop the last entry, (max timestamp, 19): the last is now (ts of offset 14, 14).
    truncate(&seg.time_index, 2 * TE);

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.time_index, Some(TE), Some(14));
    let message = f.defect["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("not the segment's max timestamp {}", seg.max_timestamp())),
        "{message}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&seg.time_index, TE));

    // The same index in the newest segment is what a broker has before the roll.
    let tmp = tempfile::tempdir().unwrap();
    let p = one_segment(tmp.path(), "orders", data_batches(0, 4, 5, 1));
    truncate(&p.segment(0).time_index, 2 * TE);
    verify_json(&[&p.dir], &[], 0).expect_no_errors();
}

// ---------------------------------------------------------------------------------------------------------------
// Transaction index
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn missing_txn_index_entry_for_aborted_transaction() {
    let tmp = tempfile::tempdir().unwrap();
    let batches = vec![
        txn_batch(0, 3, 1, 7),
        marker(3, 1, 7, ControlType::Abort),
        data_batch(4, 5, 1),
        data_batch(9, 5, 1),
    ];
    let spec = PartitionSpec::new(
        "orders",
        0,
        vec![SegmentSpec::new(batches), SegmentSpec::new(data_batches(14, 2, 5, 1))],
    );
    let p = write_partition(tmp.path(), &spec);
    let seg = p.segment(0);
    assert_eq!(seg.txn_entries, [AbortedTxn::new(7, 0, 3, 4)]);
    verify_json(&[&p.dir], &[], 0).expect_no_errors();

    std::fs::remove_file(&seg.txn_index).unwrap();
    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("index", &seg.txn_index, Some(0), Some(3));
    assert_eq!(f.defect["index"], "transaction");
    assert!(
        f.defect["message"].as_str().unwrap().contains("READ_COMMITTED"),
        "{f:?}"
    );
    verify(&[&p.dir], &[]).expect_code(1).expect_stdout(&format!(
        "{} (offset 3): transaction index: no entry for the ABORT marker",
        place(&seg.txn_index, 0)
    ));
}

#[test]
fn txn_index_entry_without_abort_marker() {
    let tmp = tempfile::tempdir().unwrap();
    let batches = vec![
        txn_batch(0, 3, 1, 7),
        marker(3, 1, 7, ControlType::Commit),
        data_batch(4, 5, 1),
    ];
    let p = one_segment(tmp.path(), "orders", batches);
    let seg = p.segment(0);
    assert!(seg.txn_entries.is_empty() && !seg.txn_index.exists());
    // One entry on the COMMIT marker, one inside a data batch.
    let entries = [AbortedTxn::new(7, 0, 3, 4), AbortedTxn::new(7, 4, 6, 9)];
    std::fs::write(&seg.txn_index, txn_index::serialize(&entries)).unwrap();

    let report = verify_json(&[&p.dir], &[], 1);
    let commit = report.expect_error("index", &seg.txn_index, Some(0), Some(3));
    assert!(
        commit.defect["message"]
            .as_str()
            .unwrap()
            .contains("COMMIT, not an ABORT"),
        "{commit:?}"
    );
    let inside = report.expect_error("index", &seg.txn_index, Some(ABORTED_TXN_SIZE as u64), Some(6));
    assert!(
        inside.defect["message"]
            .as_str()
            .unwrap()
            .contains("not on an ABORT marker"),
        "{inside:?}"
    );
    let run = verify(&[&p.dir], &[]);
    run.expect_code(1).expect_stdout(&place(&seg.txn_index, 0));
    run.expect_stdout(&place(&seg.txn_index, ABORTED_TXN_SIZE as u64));
}

// ---------------------------------------------------------------------------------------------------------------
// Partition-level files
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn leader_epoch_checkpoint_bad_version() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    std::fs::write(&p.epoch_checkpoint, "1\n2\n1 0\n2 20\n").unwrap();

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("checkpoint", &p.epoch_checkpoint, Some(0), None);
    assert!(
        f.defect["message"].as_str().unwrap().contains("unrecognised version 1"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&p.epoch_checkpoint, 0));
    // Verified alone, too.
    verify_json(&[&p.epoch_checkpoint], &[], 1).expect_error("checkpoint", &p.epoch_checkpoint, Some(0), None);
}

#[test]
fn leader_epoch_checkpoint_count_mismatch() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    std::fs::write(&p.epoch_checkpoint, "0\n3\n1 0\n2 20\n").unwrap();

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("checkpoint", &p.epoch_checkpoint, Some(2), None);
    assert!(
        f.defect["message"]
            .as_str()
            .unwrap()
            .contains("expected 3 entries, found 2"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&p.epoch_checkpoint, 2));
}

#[test]
fn leader_epoch_checkpoint_disagrees_with_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    assert_eq!(
        std::fs::read_to_string(&p.epoch_checkpoint).unwrap(),
        "0\n2\n1 0\n2 20\n"
    );
    // Epoch 2 claimed from offset 10, but batches 10..=19 carry epoch 1.
    std::fs::write(&p.epoch_checkpoint, "0\n2\n1 0\n2 10\n").unwrap();

    let seg = p.segment(0);
    let b2 = seg.batches[2];
    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("epoch", &seg.log, Some(b2.position), Some(10));
    assert!(f.defect["message"].as_str().unwrap().contains("batch epoch 1"), "{f:?}");
    // One finding for the run of disagreeing batches, not one per batch.
    assert_eq!(report.errors().len(), 1, "{:#}", report.doc);
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&format!("{} (offset 10): leader epoch", place(&seg.log, b2.position)));
}

#[test]
fn partition_metadata_bad_topic_id() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    std::fs::write(&p.partition_metadata, "version: 0\ntopic_id: not-a-topic-id").unwrap();

    let report = verify_json(&[&p.dir], &[], 1);
    let f = report.expect_error("checkpoint", &p.partition_metadata, Some(11), None);
    assert!(
        f.defect["message"].as_str().unwrap().contains("invalid topic id"),
        "{f:?}"
    );
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&p.partition_metadata, 11));
    verify_json(&[&p.partition_metadata], &[], 1).expect_error("checkpoint", &p.partition_metadata, Some(11), None);
}

#[test]
fn producer_snapshot_bad_crc() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    assert!(p.snapshot.ends_with("00000000000000000035.snapshot"));
    flip(&p.snapshot, 20);

    let report = verify_json(&[&p.dir], &[], 1);
    report.expect_error("crc_mismatch", &p.snapshot, Some(2), None);
    verify(&[&p.dir], &[])
        .expect_code(1)
        .expect_stdout(&place(&p.snapshot, 2));
    verify_json(&[&p.snapshot], &[], 1).expect_error("crc_mismatch", &p.snapshot, Some(2), None);
}

// ---------------------------------------------------------------------------------------------------------------
// Deep validation
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn deep_finds_malformed_record_behind_valid_crc() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    let b1 = seg.batches[1];
    // Record 0 of batch 1: length varint @61, attributes @62, timestamp delta @63,
    // offset delta @64, key length @65 (zig-zag 10 = "key-5"). Claim 63 bytes.
    let key_length_at = RECORD_BATCH_OVERHEAD + 4;
    edit_batch_and_reseal(&seg.log, &b1, |batch| {
        assert_eq!(batch[key_length_at], 10);
        batch[key_length_at] = 126;
    });

    verify_json(&[&p.dir], &[], 0).expect_no_errors();
    verify(&[&p.dir], &[]).expect_code(0).expect_stdout("SOUND");

    let at = b1.position + key_length_at as u64;
    let report = verify_json(&[&p.dir], &["--deep"], 1);
    let f = report.expect_error("malformed_record", &seg.log, Some(at), Some(5));
    assert!(f.defect["message"].as_str().unwrap().contains("key length 63"), "{f:?}");
    assert_eq!(report.errors().len(), 1, "{:#}", report.doc);
    verify(&[&p.dir], &["--deep"])
        .expect_code(1)
        .expect_stdout(&format!("{} (offset 5): malformed record", place(&seg.log, at)));
}

// ---------------------------------------------------------------------------------------------------------------
// Legacy magic 0/1
// ---------------------------------------------------------------------------------------------------------------

fn legacy_partition(parent: &Path) -> BuiltPartition {
    let spec = PartitionSpec::new(
        "legacy",
        0,
        vec![
            SegmentSpec::new(legacy_messages(0, 0..5)),
            SegmentSpec::new(legacy_messages(1, 5..10)),
        ],
    );
    write_partition(parent, &spec)
}

#[test]
fn legacy_segments_are_sound() {
    let tmp = tempfile::tempdir().unwrap();
    let p = legacy_partition(tmp.path());
    let report = verify_json(&[&p.dir], &["--deep"], 0);
    report.expect_no_errors();
    let s = report.partition();
    assert_eq!(
        (s["segments"].as_u64(), s["batches"].as_u64(), s["records"].as_u64()),
        (Some(2), Some(10), Some(10))
    );
    assert_eq!(
        (s["first_offset"].as_i64(), s["last_offset"].as_i64()),
        (Some(0), Some(9))
    );
    verify(&[&p.dir], &[]).expect_code(0).expect_stdout("SOUND");
}

#[test]
fn legacy_crc32_mismatch() {
    let tmp = tempfile::tempdir().unwrap();
    let p = legacy_partition(tmp.path());
    for (seg, k, offset) in [(p.segment(0), 2, 2), (p.segment(1), 3, 8)] {
        let m = seg.batches[k];
        flip(&seg.log, m.position + m.size - 1);
        let at = m.position + LEGACY_CRC_OFFSET as u64;
        let report = verify_json(&[&p.dir], &[], 1);
        report.expect_error("crc_mismatch", &seg.log, Some(at), Some(offset));
        verify(&[&p.dir], &[])
            .expect_code(1)
            .expect_stdout(&format!("{} (offset {offset}): CRC mismatch", place(&seg.log, at)));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Usage and I/O
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn nonexistent_path_is_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-dir");
    let run = verify(&[&missing], &[]);
    run.expect_code(2).expect_stdout(&missing.display().to_string());
    let report = verify_json(&[&missing], &[], 2);
    assert_eq!(report.doc["sound"], false);
    assert_eq!(report.doc["io_errors"].as_array().map(Vec::len), Some(1));

    // A sound partition next to it does not hide the unreadable path.
    let p = orders(tmp.path());
    verify(&[&p.dir, &missing], &[]).expect_code(2);
}

#[test]
fn usage_errors_are_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    segmirror(["verify", "--no-such-flag", p.dir.to_str().unwrap()]).expect_code(2);
    segmirror(["verify"]).expect_code(2);
    segmirror(["no-such-command"]).expect_code(2);
    segmirror(["verify", "--help"]).expect_code(0);
}

#[test]
fn file_that_is_not_a_kafka_file_is_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "hello").unwrap();
    verify(&[&notes], &[])
        .expect_code(2)
        .expect_stdout(&notes.display().to_string());

    // An index whose segment has no .log.
    let p = orders(tmp.path());
    let stray = p.dir.join("00000000000000000500.index");
    std::fs::write(&stray, [0u8; 8]).unwrap();
    verify(&[&stray], &[]).expect_code(2).expect_stdout("no .log file");
}

// ---------------------------------------------------------------------------------------------------------------
// Report size
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn findings_are_capped_per_file() {
    let tmp = tempfile::tempdir().unwrap();
    let n = MAX_FINDINGS_PER_FILE + 50;
    let p = one_segment(tmp.path(), "orders", data_batches(0, n, 1, 1));
    let seg = p.segment(0);
    edit(&seg.log, |bytes| {
        for b in &seg.batches {
            bytes[(b.position + b.size - 1) as usize] ^= 0xff;
        }
    });

    let report = verify_json(&[&p.dir], &[], 1);
    let on_log = report.findings().into_iter().filter(|f| f.path == seg.log).count();
    assert_eq!(on_log, MAX_FINDINGS_PER_FILE);
    assert_eq!(report.doc["suppressed_findings"], 50);
    assert_eq!(report.doc["errors"], n as u64);
    assert_eq!(report.partition()["errors"], n as u64);
    assert_eq!(report.partition()["batches"], n as u64);
    // The kept ones are the first in the file.
    let last_kept = seg.batches[MAX_FINDINGS_PER_FILE - 1].position + CRC_OFFSET as u64;
    report.expect_error(
        "crc_mismatch",
        &seg.log,
        Some(last_kept),
        Some(MAX_FINDINGS_PER_FILE as i64 - 1),
    );

    let run = verify(&[&p.dir], &[]);
    run.expect_code(1).expect_stdout("... 50 more findings not shown");
    run.expect_stdout(&format!("CORRUPT: 1 partition(s), {n} error(s)"));
    assert_eq!(
        run.stdout.lines().filter(|l| l.contains("CRC mismatch")).count(),
        MAX_FINDINGS_PER_FILE
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile input
// ---------------------------------------------------------------------------------------------------------------

#[track_caller]
fn assert_rejected_without_crash(run: &Run) {
    assert!(matches!(run.code, Some(1) | Some(2)), "expected exit 1 or 2\n{run}");
    assert!(!run.stderr.contains("panicked"), "the binary panicked\n{run}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random bytes as any one file of a partition, verified as the whole dir.
    #[test]
    fn random_bytes_as_a_partition_file_never_crash(
        which in 0usize..8,
        bytes in proptest::collection::vec(any::<u8>(), 1..2048),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let p = orders(tmp.path());
        let target = [
            &p.segment(0).log,
            &p.segment(1).log,
            &p.segment(0).index,
            &p.segment(1).time_index,
            &p.segment(0).txn_index,
            &p.epoch_checkpoint,
            &p.partition_metadata,
            &p.snapshot,
        ][which];
        std::fs::write(target, &bytes).unwrap();
        assert_rejected_without_crash(&verify(&[&p.dir], &["--strict", "--deep"]));
        assert_rejected_without_crash(&verify(&[target], &["--strict", "--json"]));
    }

    /// Random bytes as a `.log` on its own, deep and shallow.
    #[test]
    fn random_log_file_never_crashes(bytes in proptest::collection::vec(any::<u8>(), 1..4096)) {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("00000000000000000000.log");
        std::fs::write(&log, &bytes).unwrap();
        assert_rejected_without_crash(&verify(&[&log], &["--strict"]));
        assert_rejected_without_crash(&verify(&[&log], &["--strict", "--deep", "--json"]));
    }

    /// Garbage behind a valid CRC inside compressed batches: only `--deep` looks,
    /// and the decompressors and record walker must reject it without crashing.
    #[test]
    fn resealed_garbage_in_compressed_batches_never_crashes(
        codec in 1u8..5,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let codec = segment_format::batch::Compression::from_id(codec).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let batches = (0..3).map(|k| compressed_batch(20 * k, 20, 1, codec)).collect();
        let p = one_segment(tmp.path(), "garbage", batches);
        let seg = p.segment(0);
        let b = seg.batches[1];
        edit_batch_and_reseal(&seg.log, &b, |batch| {
            let records = &mut batch[RECORD_BATCH_OVERHEAD..];
            for (at, value) in &edits {
                records[at.index(records.len())] = *value;
            }
        });
        verify(&[&p.dir], &[]).expect_code(0);
        let run = verify(&[&p.dir], &["--deep", "--json"]);
        prop_assert!(matches!(run.code, Some(0) | Some(1)), "{}", run);
        prop_assert!(!run.stderr.contains("panicked"), "{}", run);
    }

    /// A sealed segment cut anywhere short of its end is always detected.
    #[test]
    fn truncated_sealed_segment_is_detected(cut in 0u64..1000) {
        let tmp = tempfile::tempdir().unwrap();
        let p = orders(tmp.path());
        let seg = p.segment(0);
        let len = cut % seg.log_len();
        truncate(&seg.log, len);
        verify(&[&p.dir], &[]).expect_code(1);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// What healthy brokers leave must not be reported
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn transaction_spanning_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = PartitionSpec::new(
        "orders",
        0,
        vec![
            SegmentSpec::new(vec![data_batch(0, 5, 1), txn_batch(5, 3, 1, 7), data_batch(8, 2, 1)]),
            SegmentSpec::new(vec![
                txn_batch(10, 2, 1, 7),
                marker(12, 1, 7, ControlType::Abort),
                data_batch(13, 2, 1),
            ]),
        ],
    );
    let p = write_partition(tmp.path(), &spec);
    let seg = p.segment(1);
    // The entry belongs to the marker's segment and names the first offset in the older one.
    assert_eq!(seg.txn_entries, [AbortedTxn::new(7, 5, 12, 13)]);
    assert!(!p.segment(0).txn_index.exists());
    verify_json(&[&p.dir], &["--deep"], 0).expect_no_errors();
    // The newer segment alone: what came before is unknown, which must not be an error.
    verify_json(&[&seg.log], &[], 0).expect_no_errors();

    std::fs::remove_file(&seg.txn_index).unwrap();
    let report = verify_json(&[&p.dir], &[], 1);
    report.expect_error("index", &seg.txn_index, Some(0), Some(12));
}

#[test]
fn compacted_segment_with_gaps_and_empty_batches() {
    let tmp = tempfile::tempdir().unwrap();
    use segment_format::record::{BatchBuilder, RecordSpec};
    let gappy = BatchBuilder::new(0)
        .partition_leader_epoch(1)
        .record(RecordSpec::new(1, BASE_TS + 1).with_key("a").with_value("1"))
        .record(RecordSpec::new(4, BASE_TS + 4).with_key("b").with_value("2"))
        .last_offset_delta(6)
        .build();
    // Emptied by compaction: no records, header kept.
    let emptied = BatchBuilder::new(7)
        .partition_leader_epoch(1)
        .last_offset_delta(4)
        .max_timestamp(BASE_TS + 11)
        .build();
    // A commit marker whose transaction data was all removed, then the marker itself emptied.
    let emptied_marker = BatchBuilder::new(12)
        .partition_leader_epoch(1)
        .producer(9, 0, -1)
        .transactional(true)
        .control(true)
        .max_timestamp(BASE_TS + 12)
        .build();
    let spec = PartitionSpec::new(
        "compacted",
        0,
        vec![
            SegmentSpec::new(vec![gappy, emptied, emptied_marker, data_batch(20, 3, 1)]),
            SegmentSpec::new(vec![data_batch(23, 2, 2)]),
        ],
    );
    let p = write_partition(tmp.path(), &spec);
    let report = verify_json(&[&p.dir], &["--deep"], 0);
    report.expect_no_errors();
    assert!(report.warnings().is_empty(), "{:#}", report.doc);
    assert_eq!(report.partition()["records"], 7);
    assert_eq!(report.partition()["last_offset"], 24);
}

#[test]
fn every_codec_deep() {
    use segment_format::batch::Compression;
    let tmp = tempfile::tempdir().unwrap();
    let batches: Vec<Vec<u8>> = Compression::ALL
        .iter()
        .enumerate()
        .map(|(k, &c)| compressed_batch(10 * k as i64, 10, 1, c))
        .collect();
    let p = one_segment(tmp.path(), "codecs", batches);
    let report = verify_json(&[&p.dir], &["--deep"], 0);
    report.expect_no_errors();
    assert_eq!(report.partition()["records"], 50);
}

#[test]
fn freshly_rolled_empty_newest_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = PartitionSpec::new(
        "orders",
        0,
        vec![SegmentSpec::new(data_batches(0, 3, 5, 1)), SegmentSpec::at(15, vec![])],
    );
    let p = write_partition(tmp.path(), &spec);
    let seg = p.segment(1);
    assert_eq!(std::fs::metadata(&seg.log).unwrap().len(), 0);
    append(&seg.index, &[0; 128 * OFFSET_INDEX_ENTRY_SIZE]);
    append(&seg.time_index, &[0; 128 * TIME_INDEX_ENTRY_SIZE]);
    let report = verify_json(&[&p.dir], &["--strict"], 0);
    report.expect_no_errors();
    assert_eq!(report.partition()["segments"], 2);
    assert_eq!(report.partition()["last_offset"], 14);
}

#[test]
fn partition_dir_with_stray_sub_directory_is_still_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    std::fs::create_dir(p.dir.join("x-1")).unwrap();
    let seg = p.segment(0);
    let b1 = seg.batches[1];
    flip(&seg.log, b1.position + b1.size - 1);
    let report = verify_json(&[&p.dir], &[], 1);
    report.expect_error("crc_mismatch", &seg.log, Some(b1.position + CRC_OFFSET as u64), Some(5));
}

#[test]
fn legacy_compressed_wrappers() {
    use segment_format::batch::{Compression, TimestampType};
    use segment_format::legacy::{encode_wrapper, LegacySpec};
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = |offsets: std::ops::Range<i64>| {
        let inner: Vec<LegacySpec> = offsets
            .map(|o| LegacySpec {
                offset: o,
                timestamp: BASE_TS + o,
                key: Some(b"k".to_vec()),
                value: Some(b"v".to_vec()),
            })
            .collect();
        encode_wrapper(1, Compression::Gzip, TimestampType::CreateTime, -1, &inner)
    };
    let spec = PartitionSpec::new(
        "legacy",
        0,
        vec![
            SegmentSpec::at(0, vec![wrapper(0..5), wrapper(5..10)]),
            SegmentSpec::at(10, vec![wrapper(10..15)]),
        ],
    );
    let p = write_partition(tmp.path(), &spec);
    let report = verify_json(&[&p.dir], &["--deep"], 0);
    report.expect_no_errors();
    let s = report.partition();
    assert_eq!(
        (s["records"].as_u64(), s["last_offset"].as_i64()),
        (Some(15), Some(14)),
        "{s:#}"
    );
    assert_eq!(s["first_offset"], 0, "{s:#}");
    verify_json(&[&p.dir], &[], 0).expect_no_errors();
}

#[test]
fn open_transaction_and_snapshots_at_segment_bases() {
    use segment_format::snapshot::ProducerSnapshot;
    let tmp = tempfile::tempdir().unwrap();
    let spec = PartitionSpec::new(
        "orders",
        0,
        vec![
            SegmentSpec::new(data_batches(0, 2, 5, 1)),
            SegmentSpec::new(vec![txn_batch(10, 2, 1, 7), data_batch(12, 3, 1)]),
        ],
    );
    let p = write_partition(tmp.path(), &spec);
    // The broker snapshots at every roll, named for the new segment's base offset.
    ProducerSnapshot::default()
        .write(&p.dir.join("00000000000000000010.snapshot"))
        .unwrap();
    let report = verify_json(&[&p.dir], &[], 0);
    report.expect_no_errors();
    assert!(report.warnings().is_empty(), "{:#}", report.doc);
}

#[test]
fn relative_paths_keep_their_partition_context() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders(tmp.path());
    let seg = p.segment(0);
    // A zero tail is only legal in the newest segment: the context must be known.
    append(&seg.index, &[0; 4 * OFFSET_INDEX_ENTRY_SIZE]);
    let name = seg.log.file_name().unwrap().to_str().unwrap();
    for (cwd, args) in [
        (&p.dir, vec!["."]),
        (&p.dir, vec![name]),
        (&p.dir, vec!["--json", "."]),
        (&p.dir.join("..").join("orders-0"), vec!["../orders-0/."]),
    ] {
        let run = verify_in(cwd, &args);
        run.expect_code(1).expect_stdout("zero-filled slots");
    }
}

#[test]
fn overlapping_legacy_wrappers_are_found() {
    use segment_format::batch::{Compression, TimestampType};
    use segment_format::legacy::{encode_wrapper, LegacySpec};
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = |offsets: std::ops::Range<i64>| {
        let inner: Vec<LegacySpec> = offsets
            .map(|o| LegacySpec {
                offset: o,
                timestamp: BASE_TS + o,
                ..LegacySpec::default()
            })
            .collect();
        encode_wrapper(1, Compression::Snappy, TimestampType::CreateTime, -1, &inner)
    };
    // Offsets 3 and 4 are in both wrappers; the wrapper offsets (4, 9) still increase.
    let p = write_partition(
        tmp.path(),
        &PartitionSpec::new(
            "legacy",
            0,
            vec![SegmentSpec::at(0, vec![wrapper(0..5), wrapper(3..10)])],
        ),
    );
    let seg = p.segment(0);
    // A legacy wrapper has no record count or first offset in its header, so even the
    // shallow pass walks it: both modes see the overlap.
    for flags in [&[][..], &["--deep"][..]] {
        let report = verify_json(&[&p.dir], flags, 1);
        let f = report.expect_error("offset_out_of_order", &seg.log, Some(seg.batches[1].position), Some(3));
        assert_eq!(f.defect["previous"], 4);
    }
}

#[test]
fn malformed_log_dir_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("kafka-logs");
    write_log_dir(&root, &[orders_spec()]);
    let recovery = root.join("recovery-point-offset-checkpoint");
    std::fs::write(&recovery, "0\n1\norders 0\n").unwrap();
    let report = verify_json(&[&root], &[], 1);
    let f = report.expect_error("checkpoint", &recovery, Some(4), None);
    assert!(
        f.defect["message"].as_str().unwrap().contains("malformed line"),
        "{f:?}"
    );
    assert_eq!(report.partition()["errors"], 0, "a root file is not the partition's");
    verify(&[&root], &[]).expect_code(1).expect_stdout(&place(&recovery, 4));
    verify_json(&[&recovery], &[], 1).expect_error("checkpoint", &recovery, Some(4), None);

    let meta = root.join("meta.properties");
    std::fs::write(&meta, "version=1\nnode.id=1\n").unwrap();
    std::fs::write(&recovery, "0\n0\n").unwrap();
    let report = verify_json(&[&root], &[], 1);
    let f = report.expect_error("checkpoint", &meta, Some(0), None);
    assert!(f.defect["message"].as_str().unwrap().contains("cluster.id"), "{f:?}");
}

#[test]
fn log_dir_with_unparseable_sub_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("kafka-logs");
    write_log_dir(&root, &[orders_spec()]);
    // A staging directory left by some tool: the broker refuses to start.
    let staging = root.join("copy-staging");
    std::fs::create_dir(&staging).unwrap();
    let report = verify_json(&[&root], &[], 1);
    report.expect_error("other", &staging, None, None);
    assert_eq!(report.partition()["errors"], 0);
    verify(&[&root], &[])
        .expect_code(1)
        .expect_stdout(&format!("error: {}", staging.display()));
}

/// `verify --deep --catalog` on a mirror applied from a seeded sample set (transactions included): sound as
/// installed; once the catalog's record of a segment's transactions lies, exit 1 naming that segment; a catalog
/// of another mirror root, or `--catalog` without `--deep`, is a usage error.
#[test]
fn the_catalogs_transaction_records_are_held_to_the_mirrors_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let path = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let (source, store, mirror, catalog) = (path("source"), path("store"), path("mirror"), path("catalog.sqlite"));
    for args in [
        vec!["generate", "--out", &source],
        vec!["seed", "--log-dir", &source, "--store", &store],
        vec!["apply", "--store", &store, "--mirror", &mirror, "--catalog", &catalog],
    ] {
        let r = segmirror(&args);
        assert_eq!(r.code, Some(0), "{args:?}\n{r}");
    }
    let r = segmirror(["verify", "--deep", "--catalog", &catalog, &mirror]);
    assert_eq!(r.code, Some(0), "{r}");
    let r = segmirror(["verify", "--catalog", &catalog, &mirror]);
    assert_eq!(r.code, Some(2), "{r}");
    let r = segmirror(["verify", "--deep", "--catalog", &catalog, &source]);
    assert_eq!(r.code, Some(2), "{r}");
    assert!(r.stderr.contains("belongs to mirror root"), "{r}");

    let lied = rusqlite::Connection::open(&catalog)
        .unwrap()
        .execute(
            "UPDATE segments SET txn_ends = 'o:;c:' WHERE (partition_id, base_offset) = \
             (SELECT partition_id, base_offset FROM segments WHERE txn_ends NOT IN ('o:;c:', 'o:;c:;m:') LIMIT 1)",
            [],
        )
        .unwrap();
    assert_eq!(lied, 1, "the sample set has transactions");
    let r = segmirror(["verify", "--deep", "--catalog", &catalog, &mirror]);
    assert_eq!(r.code, Some(1), "{r}");
    assert!(r.stdout.contains("which promotion trusts, says o:;c:"), "{r}");
}
