//! Rediscovery over a real log dir written by the test-data writer: a topic created while the feed runs is
//! shipped from byte 0 of its first segment, a topic deleted (Kafka's `-delete` rename, then removal) is dropped
//! without an error while the others go on, a session's resume position of a partition the feed did not follow
//! is honoured, and the watcher alone (no periodic listing) brings a new topic in. Waiting is only for an
//! expected item, with a generous timeout that a passing run never nears.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{write_log_dir_files, LogDirIdentity, LogDirState, PartitionWriter, WriterConfig};
use segmirror_transport::direct::payload::{PartitionRef, Position};
use segmirror_transport::direct::session::{ChunkFeed, FeedItem};

use super::*;
use crate::direct::{TailFeed, TailFeedConfig};
use crate::source::bound_hw::{CheckpointHighWatermarks, UptoPolicy};
use crate::source::discover::TopicFilter;

const CLUSTER: &str = "source-cluster";

/// Longest wait for an expected item (generous on a loaded machine).
const ITEM_TIMEOUT: Duration = Duration::from_secs(30);

fn topic_id(topic: &str) -> [u8; 16] {
    [topic.len() as u8 + 1; 16]
}

/// A running partition `topic-0` of `batches` one-record batches; returns its `.log` bytes.
fn write_partition(log_dir: &Path, topic: &str, batches: usize) -> Vec<u8> {
    let config = WriterConfig {
        segment_bytes: 1 << 20,
        running: true,
        fsync: false,
        topic_id: Some(Uuid(topic_id(topic))),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(log_dir, topic, 0, 0, config).unwrap();
    for i in 0..batches {
        w.append(
            BatchBuilder::new(0).record(RecordSpec::new(0, 1_700_000_000_000 + i as i64).with_value(vec![b'v'; 100])),
        )
        .unwrap();
    }
    let written = w.close().unwrap();
    std::fs::read(written.dir.join("00000000000000000000.log")).unwrap()
}

fn log_dir_with(topics: &[(&str, usize)]) -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let root = tempfile::tempdir().unwrap();
    let logs = topics
        .iter()
        .map(|(t, n)| write_partition(root.path(), t, *n))
        .collect();
    let identity = LogDirIdentity {
        cluster_id: CLUSTER.into(),
        node_id: 1,
        directory_id: Uuid([9; 16]),
    };
    write_log_dir_files(root.path(), &identity, &[], LogDirState::Running).unwrap();
    (root, logs)
}

fn pref(topic: &str) -> PartitionRef {
    PartitionRef {
        topic: topic.into(),
        partition: 0,
        topic_id: topic_id(topic),
    }
}

fn feed(log_dir: &Path, follow: &[&str], rediscovery: Rediscovery) -> TailFeed {
    let mut config = TailFeedConfig::new(Arc::new(CheckpointHighWatermarks::new(vec![log_dir.into()])));
    config.upto = UptoPolicy::LogEnd;
    config.poll_interval = Duration::from_millis(5);
    let parts = follow
        .iter()
        .map(|t| TailPartition {
            partition: pref(t),
            dir: log_dir.join(format!("{t}-0")),
        })
        .collect();
    TailFeed::new(parts, config).with_rediscovery(rediscovery)
}

/// The watcher alone tells the feed: no periodic listing within a test.
fn watcher_only(log_dir: &Path) -> Rediscovery {
    let mut r = Rediscovery::new(vec![log_dir.into()], TopicFilter::all(), CLUSTER);
    r.interval = Duration::from_secs(3600);
    r
}

fn every_round(log_dir: &Path) -> Rediscovery {
    let mut r = Rediscovery::new(vec![log_dir.into()], TopicFilter::all(), CLUSTER);
    r.interval = Duration::ZERO;
    r.watch = false;
    r
}

/// Items until `topic`'s chunks have carried `bytes` (from byte 0 of segment 0); the items of other partitions
/// seen on the way are returned.
async fn ship_whole(feed: &mut TailFeed, topic: &str, bytes: &[u8]) -> Vec<FeedItem> {
    let mut got = Vec::new();
    let mut others = Vec::new();
    let done = tokio::time::timeout(ITEM_TIMEOUT, async {
        while got.len() < bytes.len() {
            match feed.next().await.unwrap() {
                FeedItem::Chunk(c) if c.partition == pref(topic) => {
                    assert_eq!(
                        (c.segment_base, c.position),
                        (0, got.len() as u64),
                        "{topic}: in order, once"
                    );
                    got.extend_from_slice(&c.bytes);
                }
                other => others.push(other),
            }
        }
    })
    .await;
    assert!(done.is_ok(), "{topic}: {} of {} bytes shipped", got.len(), bytes.len());
    assert_eq!(got, bytes, "{topic}: the log's own bytes");
    others
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_while_running_ships_from_byte_zero_and_a_deleted_one_is_dropped() {
    let (root, logs) = log_dir_with(&[("alpha", 5)]);
    let mut feed = feed(root.path(), &["alpha"], every_round(root.path()));
    feed.seek(&[]).await.unwrap();
    ship_whole(&mut feed, "alpha", &logs[0]).await;

    // Created while the feed runs: followed from its first segment, byte 0.
    let beta = write_partition(root.path(), "beta", 4);
    ship_whole(&mut feed, "beta", &beta).await;
    assert!(feed.position(&pref("beta")).is_some());

    // alpha deleted as Kafka does it: renamed `-delete`, later removed. No error; beta goes on.
    let deleted = root
        .path()
        .join(format!("alpha-0.{}-delete", "0123456789abcdef0123456789abcdef"));
    std::fs::rename(root.path().join("alpha-0"), &deleted).unwrap();
    let more = write_partition(root.path(), "gamma", 3);
    ship_whole(&mut feed, "gamma", &more).await;
    assert_eq!(feed.position(&pref("alpha")), None, "alpha is no longer followed");
    std::fs::remove_dir_all(&deleted).unwrap();
    assert!(feed.position(&pref("beta")).is_some() && feed.position(&pref("gamma")).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_directory_vanishes_under_a_step_is_dropped_not_an_error() {
    let (root, logs) = log_dir_with(&[("alpha", 3), ("beta", 3)]);
    // Listed rarely: the step sees the directory vanish before any listing does.
    let mut r = every_round(root.path());
    r.interval = Duration::from_secs(3600);
    let mut feed = feed(root.path(), &["alpha", "beta"], r);
    feed.seek(&[]).await.unwrap();
    ship_whole(&mut feed, "alpha", &logs[0]).await;
    std::fs::remove_dir_all(root.path().join("beta-0")).unwrap();
    // Wait for the feed to notice, then append to alpha: its next chunk comes, no error.
    let log = root.path().join("alpha-0").join("00000000000000000000.log");
    let before = logs[0].len() as u64;
    let mut batch = BatchBuilder::new(3).record(RecordSpec::new(0, 1_700_000_000_100).with_value(vec![b'w'; 80]));
    batch.base_offset = 3;
    let bytes = batch.build();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
        .unwrap();
    let found = tokio::time::timeout(ITEM_TIMEOUT, async {
        loop {
            if let FeedItem::Chunk(c) = feed.next().await.unwrap() {
                if c.partition == pref("alpha") {
                    return c;
                }
            }
        }
    })
    .await
    .expect("alpha's appended batch");
    assert_eq!((found.position, found.bytes.len()), (before, bytes.len()));
    assert_eq!(feed.position(&pref("beta")), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_position_of_a_partition_not_followed_at_start_is_honoured() {
    let (root, logs) = log_dir_with(&[("alpha", 6)]);
    // The feed follows nothing at first; the applier says it holds alpha's first batch.
    let mut feed = feed(root.path(), &[], every_round(root.path()));
    let first_batch = segment_format::log::scan_frames(&logs[0], 0).next().unwrap().unwrap();
    let boundary = first_batch.bytes.len() as u64;
    feed.seek(&[Position {
        partition: pref("alpha"),
        segment_base: 0,
        position: boundary,
    }])
    .await
    .unwrap();
    assert_eq!(feed.position(&pref("alpha")), Some((0, boundary)));
    let FeedItem::Chunk(c) = tokio::time::timeout(ITEM_TIMEOUT, feed.next()).await.unwrap().unwrap() else {
        panic!("a chunk first")
    };
    assert_eq!(
        (c.partition, c.position),
        (pref("alpha"), boundary),
        "continued, not resent from 0"
    );
    assert_eq!(
        &c.bytes[..],
        &logs[0][boundary as usize..boundary as usize + c.bytes.len()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_alone_brings_a_new_topic_in() {
    let (root, logs) = log_dir_with(&[("alpha", 2)]);
    // No periodic listing within the test: only a watcher event can add beta.
    let r = watcher_only(root.path());
    let mut feed = feed(root.path(), &["alpha"], r);
    feed.seek(&[]).await.unwrap();
    ship_whole(&mut feed, "alpha", &logs[0]).await;
    let beta = write_partition(root.path(), "beta", 3);
    ship_whole(&mut feed, "beta", &beta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_partition_the_listing_passes_over_while_its_directory_stays_keeps_its_position() {
    let (root, logs) = log_dir_with(&[("alpha", 3)]);
    let mut feed = feed(root.path(), &["alpha"], every_round(root.path()));
    feed.seek(&[]).await.unwrap();
    ship_whole(&mut feed, "alpha", &logs[0]).await;
    // Without its partition.metadata the listing does not select alpha-0; its directory is still there.
    let dir = root.path().join("alpha-0");
    std::fs::remove_file(dir.join("partition.metadata")).unwrap();
    let mut batch = BatchBuilder::new(3).record(RecordSpec::new(0, 1_700_000_000_100).with_value(vec![b'w'; 80]));
    batch.base_offset = 3;
    let bytes = batch.build();
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("00000000000000000000.log"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
        .unwrap();
    let FeedItem::Chunk(c) = tokio::time::timeout(ITEM_TIMEOUT, feed.next()).await.unwrap().unwrap() else {
        panic!("a chunk")
    };
    assert_eq!(
        (c.partition, c.position, c.bytes.len()),
        (pref("alpha"), logs[0].len() as u64, bytes.len()),
        "still followed, continued where it was"
    );
}

/// The link's topics filter changed while the feed runs: a topic the new filter selects is followed from byte 0,
/// one it no longer selects is dropped (its position kept), and selecting it again continues where it stopped
/// rather than from byte 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_topics_filter_change_follows_new_topics_and_drops_deselected_ones() {
    let (root, logs) = log_dir_with(&[("keep-a", 3), ("other-b", 4)]);
    let live: LiveTopicFilter = Arc::new(std::sync::RwLock::new(TopicFilter::new("keep-.*").unwrap()));
    let mut r = every_round(root.path());
    r.filter = TopicFilter::new("keep-.*").unwrap();
    r.live_filter = Some(live.clone());
    let mut feed = feed(root.path(), &["keep-a"], r);
    feed.seek(&[]).await.unwrap();
    let others = ship_whole(&mut feed, "keep-a", &logs[0]).await;
    assert!(
        !others
            .iter()
            .any(|i| matches!(i, FeedItem::Chunk(c) if c.partition == pref("other-b"))),
        "other-b is not selected"
    );
    assert_eq!(feed.position(&pref("other-b")), None);

    // The filter now selects other-b and no longer keep-a.
    *live.write().unwrap() = TopicFilter::new("other-.*").unwrap();
    ship_whole(&mut feed, "other-b", &logs[1]).await;
    let dropped = tokio::time::timeout(ITEM_TIMEOUT, async {
        while feed.position(&pref("keep-a")).is_some() {
            let _ = tokio::time::timeout(Duration::from_millis(50), feed.next()).await;
        }
    })
    .await;
    assert!(
        dropped.is_ok(),
        "keep-a is dropped once the filter no longer selects it"
    );

    // Selected again: it continues from its kept position (the end it had reached), not from byte 0.
    *live.write().unwrap() = TopicFilter::new("keep-.*,other-.*").unwrap();
    let back = tokio::time::timeout(ITEM_TIMEOUT, async {
        loop {
            if let Some(at) = feed.position(&pref("keep-a")) {
                return at;
            }
            if let Ok(item) = tokio::time::timeout(Duration::from_millis(50), feed.next()).await {
                if let FeedItem::Chunk(c) = item.unwrap() {
                    assert_ne!(c.partition, pref("keep-a"), "nothing of keep-a is shipped again");
                }
            }
        }
    })
    .await
    .expect("keep-a is followed again");
    assert_eq!(back, (0, logs[0].len() as u64), "continued where it stopped");
}

/// Items until none comes for `quiet`; each chunk's bytes added to its partition's count.
async fn drain_until_quiet(feed: &mut TailFeed, quiet: Duration) -> std::collections::HashMap<String, usize> {
    let mut shipped = std::collections::HashMap::new();
    while let Ok(item) = tokio::time::timeout(quiet, feed.next()).await {
        if let FeedItem::Chunk(c) = item.unwrap() {
            *shipped.entry(c.partition.topic.clone()).or_default() += c.bytes.len();
        }
    }
    shipped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_rest_with_a_watcher_no_partition_is_stepped_and_an_append_steps_its_own() {
    let topics: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
    let spec: Vec<(&str, usize)> = topics.iter().map(|t| (t.as_str(), 2)).collect();
    let (root, logs) = log_dir_with(&spec);
    // No periodic listing within the test: the watcher is what tells the feed.
    let r = watcher_only(root.path());
    let follow: Vec<&str> = topics.iter().map(String::as_str).collect();
    let mut feed = feed(root.path(), &follow, r);
    feed.seek(&[]).await.unwrap();
    // Everything ships; then nothing comes for longer than a partition stays active.
    let shipped = drain_until_quiet(&mut feed, crate::direct::wake::ACTIVE_WINDOW * 2).await;
    for (t, log) in topics.iter().zip(&logs) {
        assert_eq!(shipped.get(t), Some(&log.len()), "{t}: every byte once");
    }

    // At rest: rounds go on (the poll interval is 5 ms), steps do not.
    let before = feed.steps_started;
    assert!(tokio::time::timeout(Duration::from_millis(500), feed.next())
        .await
        .is_err());
    assert_eq!(
        feed.steps_started - before,
        0,
        "a feed at rest stepped partitions nothing named"
    );

    // An append to one partition: the watcher names it, and that is what is stepped.
    let batch = BatchBuilder::new(2)
        .record(RecordSpec::new(0, 1_700_000_000_100).with_value(vec![b'w'; 100]))
        .build();
    let log = root.path().join("t07-0").join("00000000000000000000.log");
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, &batch).unwrap();
    drop(file);
    let before = feed.steps_started;
    let item = tokio::time::timeout(ITEM_TIMEOUT, feed.next()).await.unwrap().unwrap();
    let FeedItem::Chunk(chunk) = item else {
        panic!("expected t07's chunk, got {item:?}")
    };
    assert_eq!(
        (chunk.partition.topic.as_str(), chunk.position),
        ("t07", logs[7].len() as u64)
    );
    assert_eq!(&chunk.bytes[..], &batch[..]);
    let stepped = feed.steps_started - before;
    assert!(stepped <= 2, "{stepped} steps for one partition's append among 20");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_rest_a_checkpoint_that_raises_the_high_watermark_ships_without_an_append() {
    let (root, logs) = log_dir_with(&[("alpha", 4)]);
    let write_checkpoint = |offset: i64| {
        let cp = segment_format::checkpoint::OffsetCheckpoint {
            entries: vec![segment_format::checkpoint::OffsetCheckpointEntry {
                topic: "alpha".into(),
                partition: 0,
                offset,
            }],
        };
        cp.write(&CheckpointHighWatermarks::checkpoint_path(root.path()))
            .unwrap();
    };
    write_checkpoint(2);
    let r = watcher_only(root.path());
    let mut config = TailFeedConfig::new(Arc::new(
        CheckpointHighWatermarks::new(vec![root.path().into()]).with_reload_interval(Duration::from_millis(20)),
    ));
    config.upto = UptoPolicy::HighWatermark;
    config.poll_interval = Duration::from_millis(5);
    let parts = vec![TailPartition {
        partition: pref("alpha"),
        dir: root.path().join("alpha-0"),
    }];
    let mut feed = TailFeed::new(parts, config).with_rediscovery(r);
    feed.seek(&[]).await.unwrap();
    // The two batches below the high watermark of 2, then nothing while it stands.
    let shipped = drain_until_quiet(&mut feed, crate::direct::wake::ACTIVE_WINDOW * 2).await;
    let half = shipped.get("alpha").copied().unwrap_or(0);
    assert!(
        half > 0 && half < logs[0].len(),
        "{half} of {} bytes below the high watermark",
        logs[0].len()
    );

    // Only the checkpoint moves: no append, no event naming the partition.
    write_checkpoint(4);
    let item = tokio::time::timeout(ITEM_TIMEOUT, feed.next()).await.unwrap().unwrap();
    let FeedItem::Chunk(chunk) = item else {
        panic!("expected the rest of alpha, got {item:?}")
    };
    assert_eq!(chunk.position, half as u64);
    assert_eq!(&chunk.bytes[..], &logs[0][half..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_left_mid_log_is_continued_however_long_the_feed_was_away() {
    let (root, logs) = log_dir_with(&[("alpha", 6)]);
    let r = watcher_only(root.path());
    let mut feed = feed(root.path(), &["alpha"], r);
    // A chunk of at most one batch: the log takes six.
    feed.config.max_chunk_bytes = 200;
    feed.seek(&[]).await.unwrap();
    let mut got = Vec::new();
    // Two chunks, the second after the watcher's first pass has named the partition (its start's events are
    // taken by then): from here on, no event will name it again, nothing at the source changes.
    for pause in [Duration::from_millis(500), Duration::ZERO] {
        tokio::time::sleep(pause).await;
        loop {
            let item = tokio::time::timeout(ITEM_TIMEOUT, feed.next()).await.unwrap().unwrap();
            if let FeedItem::Chunk(c) = item {
                assert_eq!(c.position, got.len() as u64);
                got.extend_from_slice(&c.bytes);
                break;
            }
        }
    }
    assert!(got.len() < logs[0].len());
    // The session was busy elsewhere for longer than a partition stays active.
    tokio::time::sleep(crate::direct::wake::ACTIVE_WINDOW + Duration::from_millis(200)).await;
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        while got.len() < logs[0].len() {
            if let FeedItem::Chunk(c) = feed.next().await.unwrap() {
                assert_eq!(c.position, got.len() as u64);
                got.extend_from_slice(&c.bytes);
            }
        }
    })
    .await;
    assert!(
        rest.is_ok(),
        "{} of {} bytes: the rest waited for the sweep",
        got.len(),
        logs[0].len()
    );
    assert_eq!(got, logs[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_named_by_the_watcher_but_not_followed_do_not_pile_up() {
    let (root, logs) = log_dir_with(&[("alpha", 2)]);
    let r = watcher_only(root.path());
    let mut feed = feed(root.path(), &["alpha"], r);
    feed.seek(&[]).await.unwrap();
    ship_whole(&mut feed, "alpha", &logs[0]).await;
    // Partitions deleted long ago, named by events the feed took and never stepped.
    feed.touched
        .extend((0..2000).map(|i| root.path().join(format!("gone-{i}"))));
    let _ = tokio::time::timeout(Duration::from_millis(100), feed.next()).await;
    assert!(
        feed.touched.len() <= 1,
        "{} directories kept for 1 partition followed",
        feed.touched.len()
    );
}
