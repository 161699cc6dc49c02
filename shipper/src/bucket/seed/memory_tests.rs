//! The seed's memory end to end: a rerun with nothing new reads no byte of any segment (counted by the report's
//! read seam, `log_bytes_scanned`), and anything that changed the source is read again.

use std::path::Path;

use segment_format::dir::{segment_file_name, SegmentFileKind};

use super::tests::{append_batch, config, finish_log_dir, recording, topic_id, write_partition};
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
