//! Rounds of a continuous shipper (`crate::bucket::follow`): seed rounds that keep their leases.

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::bucket::link_changes::LINK_CHANGES_FILE;
use segmirror_transport::digest::digest_of;
use segmirror_transport::manifest::{KeyPrefix, PartitionKey};
use segmirror_transport::SegmentSink;

use super::tests::{
    append_batch, config, finish_log_dir, manifests, object, recording, topic_id, write_partition, LINK,
};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_keep_one_lease_and_upload_each_appended_byte_once_as_a_chunk_ending_on_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let (rec, store) = recording(dir.path());
    let held = HeldLeases::default();
    let first = seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap();
    assert!(first.is_complete(), "{first:#?}");
    let pk = PartitionKey::new(KeyPrefix::root(), LINK, "orders", 0).unwrap();
    assert_eq!(held.epoch(&pk), Some(1));

    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let mut next = w.log_end_offset;
    let mut sizes = vec![std::fs::metadata(&log).unwrap().len()];
    for round in 0..3 {
        // One round sees two appended batches, another one.
        for i in 0..(1 + round % 2) {
            append_batch(&log, next, 31 + round * 2 + i);
            next += 2;
        }
        sizes.push(std::fs::metadata(&log).unwrap().len());
        rec.clear();
        let report = seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
            .await
            .unwrap();
        assert!(report.is_complete(), "{report:#?}");
        let r = report.partition("orders", 0).unwrap();
        assert_eq!(r.lease_epoch, None, "round {round}: no new lease taken");
        assert!(
            !rec.puts().iter().any(|k| k.starts_with(&pk.lease_dir())),
            "round {round}: no lease written: {:?}",
            rec.puts()
        );
        let shipped = manifests(&store, "orders", 0, w.topic_id).await;
        let last = shipped.last().unwrap();
        assert_eq!(last.next_offset, next);
        // Only this round's bytes went up as data, in one new chunk; the rest is the version's small indexes.
        let new_chunk = last.log_chunks.last().unwrap();
        let appended = sizes[sizes.len() - 1] - sizes[sizes.len() - 2];
        assert_eq!(
            (new_chunk.from, new_chunk.to),
            (sizes[sizes.len() - 2], sizes[sizes.len() - 1])
        );
        assert_eq!(new_chunk.next_offset, next, "the chunk ends after its last batch");
        let indexes: u64 = last
            .files
            .iter()
            .filter(|f| f.name.kind != SegmentFileKind::Log)
            .map(|f| f.size)
            .sum();
        assert_eq!(r.bytes_uploaded, appended + indexes, "round {round}");
    }
    // The chunks are contiguous, one per round after the first version, and assemble to the source file.
    let last = manifests(&store, "orders", 0, w.topic_id).await.pop().unwrap();
    assert_eq!(last.log_chunks.len(), sizes.len());
    let mut assembled = Vec::new();
    for (c, pair) in last.log_chunks.iter().skip(1).zip(sizes.windows(2)) {
        assert_eq!((c.from, c.to), (pair[0], pair[1]));
    }
    for c in &last.log_chunks {
        assembled.extend(object(&store, &c.key).await);
    }
    assert_eq!(assembled, std::fs::read(&log).unwrap());
    assert_eq!(
        digest_of(&assembled).sha256,
        last.file(SegmentFileKind::Log).unwrap().sha256
    );
    assert_eq!(
        store.list(&pk.lease_dir()).await.unwrap().len(),
        1,
        "one lease object for the whole run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_fenced_by_a_second_shipper_is_never_written_again_by_this_run() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let (rec, store) = recording(dir.path());
    let held = HeldLeases::default();
    assert!(seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap()
        .is_complete());
    // A second shipper starts on the same bucket prefix: it takes the next lease.
    let pk = PartitionKey::new(KeyPrefix::root(), LINK, "orders", 0).unwrap();
    let usurper = store.acquire_lease(&pk, "second-shipper").await.unwrap();
    assert_eq!(usurper.epoch, 2);
    let before = manifests(&store, "orders", 0, w.topic_id).await;

    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let mut next = w.log_end_offset;
    for round in 0..2 {
        append_batch(&log, next, 40 + round);
        next += 2;
        rec.clear();
        let report = seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
            .await
            .unwrap();
        let r = report.partition("orders", 0).unwrap();
        assert!(
            matches!(
                r.status,
                PartitionStatus::Failed {
                    kind: FailureKind::Fenced,
                    ..
                }
            ),
            "round {round}: {r:#?}"
        );
        assert!(
            !rec.puts()
                .iter()
                .any(|k| k.contains("/manifests/") || k.starts_with(&pk.lease_dir())),
            "round {round}: no manifest and no lease written after the fence: {:?}",
            rec.puts()
        );
    }
    assert_eq!(held.fenced(), vec![pk.clone()]);
    assert_eq!(manifests(&store, "orders", 0, w.topic_id).await, before);
    assert_eq!(store.list(&pk.lease_dir()).await.unwrap().len(), 2);
}

/// The manifest fields a version is judged by, without the stamps (shipper, lease, creation time) and keys.
fn essence(m: &segmirror_transport::manifest::Manifest) -> String {
    let files: Vec<String> = m
        .files
        .iter()
        .map(|f| format!("{} {} {:08x} {}", f.name, f.size, f.crc32c, f.sha256))
        .collect();
    format!(
        "[{}, {}) first {:?} last {:?} batches {} records {} max ts {} sealed {} epochs {:?} files {files:?}",
        m.base_offset,
        m.next_offset,
        m.first_offset,
        m.last_offset,
        m.batches,
        m.records,
        m.max_timestamp,
        m.sealed,
        m.epochs
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_reads_only_the_appended_bytes_and_commits_the_version_a_full_seed_would() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let (rec, store) = recording(dir.path());
    let held = HeldLeases::default();
    assert!(seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap()
        .is_complete());
    assert!(w.segments.len() >= 3, "sealed segments too: {}", w.segments.len());
    // The first round prepares the active segment from byte 0 and establishes the state from the bucket's version.
    assert_eq!(held.full_reads(), 2);
    assert_eq!(held.tail_bytes_read(), 0);

    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let mut next = w.log_end_offset;
    for round in 0..3 {
        let before = std::fs::metadata(&log).unwrap().len();
        for i in 0..(1 + round % 2) {
            append_batch(&log, next, 50 + round * 2 + i);
            next += 2;
        }
        let appended = std::fs::metadata(&log).unwrap().len() - before;
        let read_before = held.tail_bytes_read();
        rec.clear();
        let report = seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
            .await
            .unwrap();
        assert!(report.is_complete(), "{report:#?}");
        let manifest_reads: Vec<String> = rec.gets().into_iter().filter(|k| k.contains("/manifests/")).collect();
        assert_eq!(
            manifest_reads.len(),
            1,
            "round {round}: only the active segment's manifest is read, the sealed ones are remembered: \
             {manifest_reads:?}"
        );
        assert_eq!(
            held.full_reads(),
            2,
            "round {round}: the segment was not read from byte 0 again"
        );
        assert_eq!(
            held.tail_bytes_read() - read_before,
            appended,
            "round {round}: exactly the appended bytes were read"
        );
        // What the incremental round committed is what a one-shot seed of the same source commits.
        let incremental = manifests(&store, "orders", 0, w.topic_id).await.pop().unwrap();
        assert_eq!(incremental.next_offset, next);
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = super::tests::local_store(fresh_dir.path());
        assert!(seed(&fresh, &config(&log_dir), &NoProgress)
            .await
            .unwrap()
            .is_complete());
        let full = manifests(&fresh, "orders", 0, w.topic_id).await.pop().unwrap();
        assert_eq!(essence(&incremental), essence(&full), "round {round}");
    }
    // A round with nothing appended reads nothing and ships nothing.
    let read_before = held.tail_bytes_read();
    let report = seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap();
    assert_eq!(report.segments_shipped(), 0);
    assert_eq!((held.tail_bytes_read(), held.full_reads()), (read_before, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_rewritten_under_the_kept_state_is_read_again_and_reported_diverged() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 30, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let (_rec, store) = recording(dir.path());
    let held = HeldLeases::default();
    assert!(seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap()
        .is_complete());
    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    let shipped_len = std::fs::metadata(&log).unwrap().len();
    let next = w.log_end_offset;
    append_batch(&log, next, 60);
    assert!(seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap()
        .is_complete());
    assert_eq!(held.full_reads(), 2);
    // The source truncates the batch shipped last and writes another one in its place (same offsets, other bytes),
    // then one more: the tripwire sees the rewrite; the state is dropped and the segment read from byte 0.
    let file = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    file.set_len(shipped_len).unwrap();
    drop(file);
    append_batch(&log, next, 61);
    append_batch(&log, next + 2, 62);
    let report = seed_round(&store, &config(&log_dir), &NoProgress, Some(&held))
        .await
        .unwrap();
    let r = report.partition("orders", 0).unwrap();
    assert!(matches!(r.status, PartitionStatus::Diverged { .. }), "{r:#?}");
    assert_eq!(held.full_reads(), 3, "read from byte 0 once more");
}

/// A high-watermark source the test moves.
#[derive(Default)]
struct TestHighWatermarks(std::sync::Mutex<Option<i64>>);

impl crate::source::bound_hw::HighWatermarkSource for TestHighWatermarks {
    fn high_watermark(&self, _topic: &str, _partition: i32) -> Option<crate::source::bound_hw::HighWatermark> {
        self.0
            .lock()
            .unwrap()
            .map(|offset| crate::source::bound_hw::HighWatermark {
                offset,
                as_of: std::time::SystemTime::now(),
            })
    }
}

/// `--upto high-watermark` through a bucket: a round uploads nothing of a version whose last offset the high
/// watermark does not cover (the partition reports `NotCommitted`), and ships it once the watermark passes it; the
/// bucket never holds an offset at or above the watermark the round saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_only_rounds_upload_a_version_only_once_the_high_watermark_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let w = write_partition(&log_dir, "orders", 10, true, topic_id(7))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, std::slice::from_ref(&w), true);
    let (rec, store) = recording(dir.path());
    let hws = std::sync::Arc::new(TestHighWatermarks::default());
    let mut config = config(&log_dir);
    config.committed_only =
        Some(committed::CommittedOnly::new(hws.clone()).with_wait(std::time::Duration::from_millis(200)));
    let held = HeldLeases::default();
    let end = w.log_end_offset;
    // Unknown, then one short of the log end: nothing goes up, the partition is left to a later round.
    for hw in [None, Some(end - 1)] {
        *hws.0.lock().unwrap() = hw;
        rec.clear();
        let report = seed_round(&store, &config, &NoProgress, Some(&held)).await.unwrap();
        let r = report.partition("orders", 0).unwrap();
        assert!(
            matches!(
                &r.status,
                PartitionStatus::Failed {
                    kind: FailureKind::NotCommitted,
                    ..
                }
            ),
            "hw {hw:?}: {r:#?}"
        );
        assert!(
            rec.puts()
                .iter()
                .all(|k| k.contains("/lease/") || k.ends_with(LINK_CHANGES_FILE)),
            "hw {hw:?}: only the lease (and the first round's change notice) may be written: {:?}",
            rec.puts()
        );
        assert!(manifests(&store, "orders", 0, w.topic_id).await.is_empty());
    }
    // Covered: shipped, through the log end.
    *hws.0.lock().unwrap() = Some(end);
    let report = seed_round(&store, &config, &NoProgress, Some(&held)).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    let shipped = manifests(&store, "orders", 0, w.topic_id).await;
    assert_eq!(shipped.last().unwrap().next_offset, end);
    // Grown past the watermark: the grown version waits; the bucket keeps the committed one.
    let active = w.segments.last().unwrap();
    let log = w.dir.join(segment_file_name(active.base_offset, SegmentFileKind::Log));
    append_batch(&log, end, 11);
    let report = seed_round(&store, &config, &NoProgress, Some(&held)).await.unwrap();
    assert!(report.has_failures(), "{report:#?}");
    assert_eq!(
        manifests(&store, "orders", 0, w.topic_id)
            .await
            .last()
            .unwrap()
            .next_offset,
        end
    );
    *hws.0.lock().unwrap() = Some(end + 2);
    let report = seed_round(&store, &config, &NoProgress, Some(&held)).await.unwrap();
    assert!(report.is_complete(), "{report:#?}");
    assert_eq!(
        manifests(&store, "orders", 0, w.topic_id)
            .await
            .last()
            .unwrap()
            .next_offset,
        end + 2
    );
}

/// A round of only the partitions the watcher named ships those and reads nothing of the others; a round of all
/// ships what the others hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_named_partitions_looks_at_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("kafka");
    let orders = write_partition(&log_dir, "orders", 10, true, topic_id(7))
        .close()
        .unwrap();
    let events = write_partition(&log_dir, "events", 10, true, topic_id(8))
        .close()
        .unwrap();
    finish_log_dir(&log_dir, &[orders.clone(), events.clone()], true);
    let (_rec, store) = recording(dir.path());
    let only: std::collections::HashSet<PathBuf> = [orders.dir.clone()].into_iter().collect();
    let held = HeldLeases::default();
    let named = seed_round_of(&store, &config(&log_dir), &NoProgress, Some(&held), Some(&only))
        .await
        .unwrap();
    let shipped: Vec<String> = named.partitions.iter().map(|p| p.name()).collect();
    assert_eq!(shipped, ["orders-0"], "{named:#?}");
    assert!(manifests(&store, "events", 0, events.topic_id).await.is_empty());

    let all = seed_round_of(&store, &config(&log_dir), &NoProgress, Some(&held), None)
        .await
        .unwrap();
    assert_eq!(all.partition("events", 0).unwrap().segments_shipped, 1, "{all:#?}");
    assert_eq!(all.partition("orders", 0).unwrap().segments_shipped, 0, "{all:#?}");
}
