//! The seed's memory end to end: a rerun with nothing new reads no byte of any segment (counted by the report's
//! read seam, `log_bytes_scanned`), and anything that changed the source is read again.

use std::path::Path;

use segment_format::dir::{segment_file_name, SegmentFileKind};

use super::memory::TAIL_CHECK_BYTES;
use super::tests::{append_batch, batch, config, finish_log_dir, recording, topic_id, write_partition};
use super::*;

fn scanned(report: &SeedReport) -> u64 {
    report.partitions.iter().map(|p| p.log_bytes_scanned).sum()
}

fn with_memory(log_dir: &Path, memory: &Path) -> SeedConfig {
    let mut c = config(log_dir);
    c.memory_file = Some(memory.to_path_buf());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_memory_a_rerun_reads_no_segment_and_a_grown_one_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let orders = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    let audit = write_partition(&log_dir, "audit", 12, true, topic_id(8))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, &[orders.clone(), audit.clone()], true);
    // Facts about files written within the racy margin are not recorded (tested below): let it pass once.
    std::thread::sleep(RACY_MARGIN + std::time::Duration::from_millis(100));
    let memory = dir.path().join("seed-memory.json");
    let (rec, store) = recording(dir.path());

    let first = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(first.is_complete(), "{first:#?}");
    assert!(scanned(&first) > 0);
    assert!(memory.is_file());

    // Nothing new: nothing written, and not one byte of a segment read.
    rec.clear();
    let second = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(second.is_complete(), "{second:#?}");
    assert_eq!(rec.puts(), Vec::<String>::new());
    assert_eq!(second.segments_shipped(), 0);
    assert_eq!(second.segments_already_shipped(), first.segments_shipped());
    for (a, b) in first.partitions.iter().zip(&second.partitions) {
        assert_eq!(b.log_bytes_scanned, 0, "{} read again", b.name());
        // Only the bounded window around the prefix's end was read: the whole file here (these segments are
        // under 64 KiB), never more than two windows.
        assert!(
            b.tail_check_bytes > 0 && b.tail_check_bytes <= 2 * TAIL_CHECK_BYTES,
            "{b:#?}"
        );
        assert_eq!(a.tail_check_bytes, 0, "{a:#?}");
        assert_eq!(
            (b.shipped_through, b.excluded_tail_bytes),
            (a.shipped_through, a.excluded_tail_bytes)
        );
    }

    // The same rerun without the memory scans every active segment (the seam counts what is read).
    let active_len = |w: &segment_format::writer::WrittenPartition| {
        let a = w.segments.last().unwrap();
        std::fs::metadata(w.dir.join(segment_file_name(a.base_offset, SegmentFileKind::Log)))
            .unwrap()
            .len()
    };
    let without = seed(&store, &config(&log_dir), &NoProgress).await.unwrap();
    assert!(without.is_complete(), "{without:#?}");
    assert_eq!(without.segments_shipped(), 0);
    for (w, name) in [(&orders, "orders"), (&audit, "audit")] {
        let p = without.partition(name, 0).unwrap();
        assert!(p.log_bytes_scanned >= active_len(w), "{p:#?}");
    }

    // A batch appended to one active segment: that segment is read and its new version shipped; the other
    // partition still reads nothing.
    let active = orders.segments.last().unwrap();
    let log = orders
        .dir
        .join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    append_batch(&log, orders.log_end_offset, 31);
    let third = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(third.is_complete(), "{third:#?}");
    let o = third.partition("orders", 0).unwrap();
    assert_eq!(o.segments_shipped, 1);
    assert_eq!(o.shipped_through, Some(orders.log_end_offset + 2));
    assert!(o.log_bytes_scanned >= active_len(&orders));
    assert_eq!(third.partition("audit", 0).unwrap().log_bytes_scanned, 0);

    // Just written, the grown segment's stamp is racy: not remembered, so the next rerun reads it again (and
    // ships nothing); the untouched partition still reads nothing.
    let fourth = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(fourth.is_complete(), "{fourth:#?}");
    assert_eq!(fourth.segments_shipped(), 0);
    assert!(fourth.partition("orders", 0).unwrap().log_bytes_scanned > 0);
    assert_eq!(fourth.partition("audit", 0).unwrap().log_bytes_scanned, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_segment_rewritten_under_the_same_name_is_read_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let orders = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&orders), true);
    std::thread::sleep(RACY_MARGIN + std::time::Duration::from_millis(100));
    let memory = dir.path().join("seed-memory.json");
    let (_rec, store) = recording(dir.path());
    let first = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(first.is_complete(), "{first:#?}");

    // The active segment truncated and rewritten to the same length with other bytes (a follower's truncation
    // and refetch), its modification time set back to what it was: the memory must not be believed.
    let active = orders.segments.last().unwrap();
    let log = orders
        .dir
        .join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let before = std::fs::metadata(&log).unwrap();
    let mut bytes = std::fs::read(&log).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff; // inside the last batch's records: its CRC no longer matches
    std::fs::write(&log, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&log)
        .unwrap()
        .set_modified(before.modified().unwrap())
        .unwrap();
    let second = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    let p = second.partition("orders", 0).unwrap();
    // Found only by reading the file: the remembered fact was not believed.
    assert!(
        matches!(
            p.status,
            PartitionStatus::Refused { .. } | PartitionStatus::Diverged { .. }
        ),
        "{p:#?}"
    );
}

/// Where the last batch of a `.log` of complete batches starts (each is its 8-byte base offset, 4-byte length, then
/// that many bytes).
fn last_batch_start(log: &[u8]) -> u64 {
    let (mut at, mut last) = (0usize, 0usize);
    while at + 12 <= log.len() {
        last = at;
        at += 12 + u32::from_be_bytes(log[at + 8..at + 12].try_into().unwrap()) as usize;
    }
    assert_eq!(at, log.len());
    last as u64
}

/// A partition of `batches` batches of ~2.4 KiB in one active segment (the shared fixture rolls at 4 KiB).
fn one_active_segment(log_dir: &Path, batches: usize) -> segment_format::writer::WrittenPartition {
    use segment_format::record::{BatchBuilder, RecordSpec};
    use segment_format::writer::{PartitionWriter, WriterConfig};
    let config = WriterConfig {
        segment_bytes: 1 << 30,
        running: true,
        fsync: false,
        topic_id: Some(topic_id(7)),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, "orders", 0, 0, config).unwrap();
    for i in 0..batches {
        let ts = 1_700_000_000_000 + i as i64 * 1000;
        w.append(
            BatchBuilder::new(0).record(RecordSpec::new(0, ts).with_key(format!("k{i}")).with_value(vec![
                (i % 251)
                    as u8;
                2400
            ])),
        )
        .unwrap();
    }
    let written = w.close().unwrap();
    assert_eq!(written.segments.len(), 1);
    written
}

/// A partition of `batches` batches of ~2.4 KiB (one active segment, ~300 KiB for 120: several windows long),
/// shipped once with a memory the rerun can believe. Returns the partition, its active `.log`, the memory file and
/// the recording store.
async fn shipped_with_memory(
    dir: &Path,
    batches: usize,
) -> (
    segment_format::writer::WrittenPartition,
    std::path::PathBuf,
    std::path::PathBuf,
    std::sync::Arc<super::tests::RecordingStore>,
    segmirror_transport::Store,
) {
    let log_dir = dir.join("kafka");
    let orders = one_active_segment(&log_dir, batches);
    finish_log_dir(&log_dir, std::slice::from_ref(&orders), true);
    std::thread::sleep(RACY_MARGIN + std::time::Duration::from_millis(100));
    let memory = dir.join("seed-memory.json");
    let (rec, store) = recording(dir);
    let first = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(first.is_complete(), "{first:#?}");
    let active = orders.segments.last().unwrap();
    let log = orders
        .dir
        .join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    (orders, log, memory, rec, store)
}

/// A segment several windows long: the no-op rerun reads its window and nothing else, and uploads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_with_nothing_new_reads_only_the_window_of_a_large_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (orders, log, memory, rec, store) = shipped_with_memory(dir.path(), 120).await;
    let len = std::fs::metadata(&log).unwrap().len();
    assert!(len > 4 * TAIL_CHECK_BYTES, "{len}");
    rec.clear();
    let log_dir = dir.path().join("kafka");
    let rerun = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(rerun.is_complete(), "{rerun:#?}");
    assert_eq!(rec.puts(), Vec::<String>::new());
    let p = rerun.partition("orders", 0).unwrap();
    assert_eq!((p.segments_shipped, p.bytes_uploaded, p.log_bytes_scanned), (0, 0, 0));
    // The prefix is the whole file (no batch being written): the 64 KiB before its end.
    assert_eq!(p.tail_check_bytes, TAIL_CHECK_BYTES);
    assert_eq!(p.shipped_through, Some(orders.log_end_offset));
}

/// Shrunk (the last batch truncated away): the identity differs, the segment is read, and the shorter source is
/// reported as diverged from what was shipped, as a scan always did; nothing is uploaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_segment_that_shrank_is_read_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (orders, log, memory, rec, store) = shipped_with_memory(dir.path(), 30).await;
    let len = std::fs::metadata(&log).unwrap().len();
    let last_batch = len - last_batch_start(&std::fs::read(&log).unwrap());
    std::fs::File::options()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len - last_batch)
        .unwrap();
    rec.clear();
    let log_dir = dir.path().join("kafka");
    let rerun = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    let p = rerun.partition("orders", 0).unwrap();
    assert!(p.log_bytes_scanned >= len - last_batch, "{p:#?}");
    assert!(
        matches!(p.status, PartitionStatus::Diverged { source_next_offset, .. } if source_next_offset == orders.log_end_offset - 1),
        "{p:#?}"
    );
    assert_eq!(rec.puts(), Vec::<String>::new());
}

/// Rewritten to the same length with other bytes at its end, on a file system whose stamps did not move (the
/// memory's recorded identity is set to the file's new one, its window left as it was): only the window can tell,
/// and it does — the segment is read and reported, not believed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_length_rewrite_that_keeps_the_stamps_is_caught_by_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let (_orders, log, memory, rec, store) = shipped_with_memory(dir.path(), 30).await;
    let mut bytes = std::fs::read(&log).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff; // inside the last batch's records: its CRC no longer matches
    std::fs::write(&log, &bytes).unwrap();
    // The memory as a file system that kept the stamps would leave it: the identity is the file's current one.
    let identity = crate::source::file_identity(&log).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&memory).unwrap()).unwrap();
    let key = std::path::absolute(&log).unwrap().to_str().unwrap().to_string();
    doc["active"][&key]["identity"] = serde_json::to_value(identity).unwrap();
    std::fs::write(&memory, serde_json::to_vec(&doc).unwrap()).unwrap();
    // Without the window this memory would be believed: the check's own seam shows it read the window.
    rec.clear();
    let log_dir = dir.path().join("kafka");
    let rerun = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    let p = rerun.partition("orders", 0).unwrap();
    // The window was read and did not match; the scan then found the bad batch (a refusal counts no scanned bytes).
    assert_eq!(p.tail_check_bytes, TAIL_CHECK_BYTES, "{p:#?}");
    assert!(
        matches!(
            p.status,
            PartitionStatus::Refused { .. } | PartitionStatus::Diverged { .. }
        ),
        "{p:#?}"
    );
    assert_eq!(rec.puts(), Vec::<String>::new());
}

/// Grown by a batch with the length put back (a preallocated segment written inside its zero tail) and the stamps
/// kept: the window reaches past the prefix's end, so the new batch is seen, read and shipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_written_into_a_preallocated_tail_is_caught_by_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let orders = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&orders), true);
    let active = orders.segments.last().unwrap();
    let log = orders
        .dir
        .join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let prefix = std::fs::metadata(&log).unwrap().len();
    // Preallocated: zeros after the last batch, as `file.preallocate` leaves the active segment.
    std::fs::File::options()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(prefix + 8192)
        .unwrap();
    std::thread::sleep(RACY_MARGIN + std::time::Duration::from_millis(100));
    let memory = dir.path().join("seed-memory.json");
    let (rec, store) = recording(dir.path());
    let first = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(first.is_complete(), "{first:#?}");
    assert_eq!(first.partition("orders", 0).unwrap().excluded_tail_bytes, 8192);
    // The next batch written into the zero tail, the length unchanged; the memory's identity set to the file's
    // new one (stamps that did not move).
    let next = batch(orders.log_end_offset, 31).build();
    assert!(next.len() < 8192);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options().write(true).open(&log).unwrap();
        f.write_all_at(&next, prefix).unwrap();
    }
    assert_eq!(std::fs::metadata(&log).unwrap().len(), prefix + 8192);
    let identity = crate::source::file_identity(&log).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&memory).unwrap()).unwrap();
    let key = std::path::absolute(&log).unwrap().to_str().unwrap().to_string();
    doc["active"][&key]["identity"] = serde_json::to_value(identity).unwrap();
    std::fs::write(&memory, serde_json::to_vec(&doc).unwrap()).unwrap();
    rec.clear();
    let rerun = seed(&store, &with_memory(&log_dir, &memory), &NoProgress)
        .await
        .unwrap();
    assert!(rerun.is_complete(), "{rerun:#?}");
    let p = rerun.partition("orders", 0).unwrap();
    assert_eq!(p.segments_shipped, 1, "{p:#?}");
    assert_eq!(p.shipped_through, Some(orders.log_end_offset + 2));
    assert!(!rec.puts().is_empty());
}
