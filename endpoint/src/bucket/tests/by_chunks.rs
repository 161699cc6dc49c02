//! A newest segment too large for the cache is served chunk by chunk: every byte at the source offsets, the cache
//! under its bound, lookups by time, the largest timestamp, and `read_committed` (the last stable offset followed
//! through the chunks, the aborted list from the segment's `.txnindex`).

use segment_format::control::{end_txn_marker_batch, EndTxnMarker};
use segment_format::txn_index::AbortedTxn as IndexEntry;

use super::*;

/// The source's active segment (base 0) grows by `batches`, written as a broker appends them.
fn append(w: &World, batches: &[Vec<u8>]) {
    let log = w.source_dir().join(segment_file_name(0, SegmentFileKind::Log));
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    for b in batches {
        f.write_all(b).unwrap();
    }
}

/// One shipper round and one refresh, which must see `hw` and fail nowhere.
async fn ship_and_follow(w: &World, replica: &Arc<BucketReplica>, hw: i64) {
    w.ship().await;
    let report = replica.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(replica.ends(TOPIC, 0).unwrap().high_watermark, hw);
}

fn held_by_chunks(replica: &BucketReplica) -> bool {
    let p = replica.partition(TOPIC, 0).unwrap();
    replica.cache.by_chunks(p.view.tail().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_segment_larger_than_the_cache_is_served_chunk_by_chunk() {
    // Batch i holds offsets 2i and 2i+1, timestamps TS0 + 1000 i and one more.
    let w = World::new(10, 1 << 20);
    w.ship().await;
    let bound: u64 = 12 << 10;
    let replica = w.replica(bound);
    replica.refresh().await.unwrap();
    let cache = w.cache_dir();
    let check = || {
        assert!(replica.cached_bytes() <= bound, "{} > {bound}", replica.cached_bytes());
        assert!(
            dir_bytes(&cache) <= bound + 64,
            "on disk {} > {bound}",
            dir_bytes(&cache)
        );
    };
    let mut batches = 10;
    for _ in 0..14 {
        let grown: Vec<Vec<u8>> = (batches..batches + 5).map(|i| batch_at(2 * i, i).build()).collect();
        append(&w, &grown);
        batches += 5;
        ship_and_follow(&w, &replica, 2 * batches).await;
        check();
    }
    let segment = std::fs::metadata(w.source_dir().join(segment_file_name(0, SegmentFileKind::Log)))
        .unwrap()
        .len();
    assert!(
        segment > 2 * bound,
        "the segment ({segment} bytes) outgrew the cache ({bound})"
    );
    assert!(held_by_chunks(&replica));
    assert_eq!(replica.ends(TOPIC, 0).unwrap().last_stable, 2 * batches);

    // Every byte, at the source offsets, in small and in large fetches; the cache stays under its bound.
    assert_eq!(read_all(&replica, 0, 1000, &check).await, w.source_bytes());
    assert_eq!(read_all(&replica, 0, 1 << 20, &check).await, w.source_bytes());
    // A fetch from the middle of a batch starts at that batch.
    let mid = read(&replica, 2 * 37 + 1, 1000).await.unwrap();
    assert_eq!(i64::from_be_bytes(mid.bytes[..8].try_into().unwrap()), 2 * 37);

    // ListOffsets by time and MAX_TIMESTAMP walk the chunks.
    let at = |ts: i64| {
        let r = replica.clone();
        async move {
            tokio::task::spawn_blocking(move || r.offset_for_timestamp(TOPIC, 0, ts))
                .await
                .unwrap()
                .unwrap()
        }
    };
    for i in [0, 11, 42, batches - 1] {
        assert_eq!(at(TS0 + 1000 * i).await, Some((2 * i, TS0 + 1000 * i)), "batch {i}");
        assert_eq!(
            at(TS0 + 1000 * i + 1).await,
            Some((2 * i + 1, TS0 + 1000 * i + 1)),
            "batch {i}"
        );
    }
    assert_eq!(at(TS0 + 1000 * batches).await, None);
    let r = replica.clone();
    let max = tokio::task::spawn_blocking(move || r.max_timestamp(TOPIC, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(max, Some((2 * batches - 1, TS0 + 1000 * (batches - 1) + 1)));
    check();

    // The same bucket through a cache that holds the segment whole serves the same bytes.
    let whole = {
        let config = BucketConfig {
            prefix: KeyPrefix::root(),
            link: LINK.into(),
            cache_dir: w.tmp.path().join("whole"),
            cache_size: 64 << 20,
        };
        Arc::new(BucketReplica::new(Arc::new(w.store.clone()), &config).unwrap())
    };
    whole.refresh().await.unwrap();
    assert!(!held_by_chunks(&whole));
    assert_eq!(read_all(&whole, 0, 1 << 20, &|| {}).await, w.source_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_through_chunks_follows_open_transactions_and_lists_aborts() {
    let w = World::new(10, 1 << 20);
    w.ship().await;
    let bound: u64 = 12 << 10;
    let replica = w.replica(bound);
    replica.refresh().await.unwrap();
    let txn = |pid: i64, seq: i32, offset: i64, i: i64| batch_at(offset, i).producer(pid, 0, seq).transactional(true);
    let abort = EndTxnMarker {
        control_type: segment_format::batch::ControlType::Abort,
        coordinator_epoch: 1,
    };
    let txn_index = w.source_dir().join(segment_file_name(0, SegmentFileKind::TxnIndex));
    let mut offset = 20;
    let mut i = 10;
    let plain = |n: usize, offset: &mut i64, i: &mut i64| -> Vec<Vec<u8>> {
        (0..n)
            .map(|_| {
                let b = batch_at(*offset, *i).build();
                *offset += 2;
                *i += 1;
                b
            })
            .collect()
    };
    // Plain batches until the segment is held by chunks.
    while !held_by_chunks(&replica) {
        let grown = plain(6, &mut offset, &mut i);
        append(&w, &grown);
        ship_and_follow(&w, &replica, offset).await;
    }
    // Transaction A (producer 7) opens: read_committed stops at its first offset, round after round.
    let a_first = offset;
    append(&w, &[txn(7, 0, offset, i).build()]);
    offset += 2;
    i += 1;
    ship_and_follow(&w, &replica, offset).await;
    assert_eq!(replica.ends(TOPIC, 0).unwrap().last_stable, a_first);
    for seq in [2, 4] {
        let mut grown = plain(3, &mut offset, &mut i);
        grown.push(txn(7, seq, offset, i).build());
        offset += 2;
        i += 1;
        append(&w, &grown);
        ship_and_follow(&w, &replica, offset).await;
        assert_eq!(replica.ends(TOPIC, 0).unwrap().last_stable, a_first);
    }
    // A aborts: its marker, and the `.txnindex` entry the broker writes with it.
    let marker = offset;
    append(&w, &[end_txn_marker_batch(marker, TS0 + 1000 * i, 0, 7, 0, abort)]);
    offset += 1;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&txn_index)
        .unwrap();
    f.write_all(&IndexEntry::new(7, a_first, marker, a_first).to_bytes())
        .unwrap();
    drop(f);
    // Transaction B (producer 8) stays open at the end.
    let mut grown = plain(4, &mut offset, &mut i);
    let b_first = offset;
    grown.push(txn(8, 0, offset, i).build());
    offset += 2;
    i += 1;
    grown.extend(plain(2, &mut offset, &mut i));
    append(&w, &grown);
    ship_and_follow(&w, &replica, offset).await;
    assert!(held_by_chunks(&replica));
    let ends = replica.ends(TOPIC, 0).unwrap();
    assert_eq!(ends.last_stable, b_first, "B bounds read_committed");

    let committed = |from: i64, max_bytes: usize| {
        let r = replica.clone();
        async move {
            tokio::task::spawn_blocking(move || r.read(TOPIC, 0, from, max_bytes, Isolation::ReadCommitted))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let at_a = committed(a_first, 1 << 20).await;
    assert!(!at_a.bytes.is_empty());
    assert_eq!(
        at_a.aborted,
        [crate::replica::AbortedTxn {
            producer_id: 7,
            first_offset: a_first
        }]
    );
    assert!(next_offset(&at_a.bytes) <= b_first);
    assert!(committed(b_first, 1 << 20).await.bytes.is_empty());
    assert!(committed(0, 1000).await.aborted.is_empty());

    // A new replica (a restarted serve) starts its follower from the segment's first chunk and agrees.
    let restarted = {
        let config = BucketConfig {
            prefix: KeyPrefix::root(),
            link: LINK.into(),
            cache_dir: w.tmp.path().join("restarted"),
            cache_size: bound,
        };
        Arc::new(BucketReplica::new(Arc::new(w.store.clone()), &config).unwrap())
    };
    let report = restarted.refresh().await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(restarted.ends(TOPIC, 0).unwrap().last_stable, b_first);
    assert!(restarted.cached_bytes() <= bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_larger_than_the_whole_cache_is_refused_with_the_size_to_raise_it_to() {
    // The first version (v1, 40 batches, ~17 KB) becomes the first chunk of every grown version.
    let w = World::new(40, 1 << 20);
    w.ship().await;
    let grown: Vec<Vec<u8>> = (40..45).map(|i| batch_at(2 * i, i).build()).collect();
    append(&w, &grown);
    w.ship().await;
    let bound: u64 = 8 << 10;
    let replica = w.replica(bound);
    let report = replica.refresh().await.unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert!(
        report.failures[0].contains("more than the whole cache") && report.failures[0].contains("--cache-size"),
        "{report:?}"
    );
    assert!(replica.cached_bytes() <= bound);
}
