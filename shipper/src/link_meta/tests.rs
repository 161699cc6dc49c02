//! A source log dir with a metadata log and `__consumer_offsets`: the link's topics and filtered offsets are
//! published, a read with nothing changed publishes nothing, a new commit publishes the next version.

use std::io::Write;
use std::str::FromStr;

use segment_format::group_records::encode::{offset_commit_key, offset_commit_value};
use segment_format::group_records::OffsetCommitValue;
use segment_format::metadata_log::encode::{write_metadata_log, TopicSpec};
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segmirror_transport::{Store, StoreUrl};

use super::*;

fn commit_batch(base: i64, group: &str, topic: &str, partition: i32, offset: i64) -> Vec<u8> {
    let value = OffsetCommitValue {
        version: 3,
        offset,
        leader_epoch: Some(4),
        metadata: String::new(),
        commit_timestamp: 1_700_000_000_000,
        expire_timestamp: None,
        topic_id: None,
    };
    BatchBuilder::new(base)
        .record(
            RecordSpec::new(0, 0)
                .with_key(offset_commit_key(1, group, topic, partition))
                .with_value(offset_commit_value(&value)),
        )
        .build()
}

/// A batch of one KRaft `NoOpRecord` (api key 24, version 0, no fields, no tagged fields) at `base`.
fn no_op_batch(base: i64) -> Vec<u8> {
    const FRAME_VERSION: u8 = 1;
    const NO_OP_RECORD: u8 = 24;
    BatchBuilder::new(base)
        .record(RecordSpec::new(0, 0).with_value(vec![FRAME_VERSION, NO_OP_RECORD, 0, 0]))
        .build()
}

#[tokio::test]
async fn topics_and_filtered_offsets_are_published_once_per_change() {
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("logs");
    let orders = Uuid::from_str("MZ3ezZJvTAWUZ0oR9yzcCQ").unwrap();
    let other = Uuid::from_str("AAAAAAAAAAAAAAAAAAAAAQ").unwrap();
    write_metadata_log(
        &log_dir,
        &[
            TopicSpec {
                name: "orders",
                id: orders,
                partitions: 3,
                configs: &[("retention.ms", "60000"), ("cleanup.policy", "delete")],
            },
            TopicSpec {
                name: "other",
                id: other,
                partitions: 1,
                configs: &[],
            },
        ],
    )
    .unwrap();
    let offsets_dir = log_dir.join("__consumer_offsets-0");
    std::fs::create_dir_all(&offsets_dir).unwrap();
    let log = offsets_dir.join(format!("{:020}.log", 0));
    std::fs::write(
        &log,
        [
            commit_batch(0, "app", "orders", 1, 42),
            commit_batch(1, "app", "other", 0, 7),
            commit_batch(2, "skip-me", "orders", 1, 9),
        ]
        .concat(),
    )
    .unwrap();

    let config = MetaConfig::find(
        std::slice::from_ref(&log_dir),
        None,
        "app|other-app",
        TopicFilter::new("orders").unwrap(),
        "east",
    )
    .unwrap()
    .expect("the metadata log is in the log dir");
    let url = StoreUrl::parse(dir.path().join("bucket").to_str().unwrap()).unwrap();
    let store = Store::open(&url, &Default::default()).unwrap();
    let prefix = KeyPrefix::new("").unwrap();
    let mut publisher = MetaPublisher::new(MetaReader::new(config).unwrap(), prefix.clone(), "test");

    let first = publisher.publish_if_changed(&store).await.unwrap();
    assert_eq!(
        first,
        Published::Version {
            version: 1,
            topics: 1,
            offsets: 1
        }
    );
    let read = link_meta::read_latest(&store, &prefix, "east").await.unwrap().unwrap();
    assert_eq!(read.topics.topics[0].name, "orders");
    assert_eq!(read.topics.topics[0].partitions, 3);
    assert_eq!(read.topics.topics[0].configs["retention.ms"], "60000");
    assert_eq!(read.topics.topics[0].topic_id, orders.to_string());
    let o = &read.offsets.offsets[0];
    assert_eq!(
        (o.group.as_str(), o.topic.as_str(), o.partition, o.offset),
        ("app", "orders", 1, 42)
    );

    assert_eq!(
        publisher.publish_if_changed(&store).await.unwrap(),
        Published::Unchanged
    );

    // A live controller appends to the metadata log with nothing the link carries changing (a `NoOpRecord`, as
    // KRaft writes every half second or so): its end moves, and no version follows.
    let metadata_log = log_dir.join(METADATA_DIR).join(format!("{:020}.log", 0));
    let end = read_metadata_dir(&log_dir.join(METADATA_DIR)).unwrap().end_offset;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&metadata_log)
        .unwrap()
        .write_all(&no_op_batch(end))
        .unwrap();
    assert_eq!(
        read_metadata_dir(&log_dir.join(METADATA_DIR)).unwrap().end_offset,
        end + 1,
        "the metadata log's end moved"
    );
    assert_eq!(
        publisher.publish_if_changed(&store).await.unwrap(),
        Published::Unchanged,
        "a moved metadata log end alone is no new version"
    );

    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(&commit_batch(3, "app", "orders", 1, 50))
        .unwrap();
    let second = publisher.publish_if_changed(&store).await.unwrap();
    assert_eq!(
        second,
        Published::Version {
            version: 2,
            topics: 1,
            offsets: 1
        }
    );
    let read = link_meta::read_latest(&store, &prefix, "east").await.unwrap().unwrap();
    assert_eq!(read.offsets.offsets[0].offset, 50);

    // A restarted shipper continues after the bucket's version.
    let config = MetaConfig::find(&[log_dir], None, ".*", TopicFilter::new("orders").unwrap(), "east")
        .unwrap()
        .unwrap();
    let mut restarted = MetaPublisher::new(MetaReader::new(config).unwrap(), prefix.clone(), "test");
    let third = restarted.publish_if_changed(&store).await.unwrap();
    assert!(
        matches!(
            third,
            Published::Version {
                version: 3,
                offsets: 2,
                ..
            }
        ),
        "{third:?}"
    );

    // A bad group pattern is refused by name.
    let err = MetaConfig::find(&[], None, "(", TopicFilter::all(), "east").unwrap_err();
    assert!(err.to_string().contains("groups"), "{err}");
}
