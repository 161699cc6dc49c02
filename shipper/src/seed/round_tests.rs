//! Rounds of a continuous shipper (`crate::store_tail`): seed rounds that keep their leases.

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segmirror_transport::manifest::{KeyPrefix, PartitionKey};
use segmirror_transport::store::digest_of;
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
