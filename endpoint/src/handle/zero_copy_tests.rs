//! Fetch responses sent from the segment files (`sendfile`, a plaintext socket) are byte for byte the responses
//! encoded with their records in one buffer (an in-memory pipe), at every Fetch version and both isolation levels,
//! across segments, with a response budget that cuts between batches.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::config::{Limits, ServeConfig};
use crate::group::{CommittedOffset, Coordinator, OffsetStore};
use crate::mirror::{LinkFacts, MirrorReplica, PartitionFacts};
use crate::replica::{ReplicaState, TopicView};
use crate::server::serve_connection;
use crate::Endpoint;

struct NoOffsets;

impl OffsetStore for NoOffsets {
    fn commit(&self, _: &str, _: &[CommittedOffset]) -> Result<(), String> {
        Ok(())
    }
    fn fetch(&self, _: &str) -> Result<Vec<CommittedOffset>, String> {
        Ok(Vec::new())
    }
    fn groups(&self) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

/// `t-0` in small segments: 60 batches of 3 records, a few KiB each.
fn endpoint(root: &std::path::Path) -> Arc<Endpoint> {
    let config = WriterConfig {
        fsync: false,
        segment_bytes: 40_000,
        index_interval_bytes: 4096,
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, "t", 0, 0, config).unwrap();
    let mut end = 0;
    for i in 0..60i64 {
        let records: Vec<RecordSpec> = (0..3)
            .map(|r| RecordSpec::new(r, 1_700_000_000_000 + i * 10 + i64::from(r)).with_value(vec![i as u8; 1500]))
            .collect();
        end = w
            .append(BatchBuilder::new(0).partition_leader_epoch(2).records(records))
            .unwrap()
            .last_offset
            + 1;
    }
    w.close().unwrap();
    let replica = Arc::new(MirrorReplica::new(root, "east"));
    let failures = replica.refresh(&LinkFacts {
        state: ReplicaState::Replicating,
        topics: vec![TopicView {
            name: "t".into(),
            id: [3; 16],
            partitions: vec![0],
            configs: Vec::new(),
        }],
        partitions: vec![PartitionFacts {
            topic: "t".into(),
            partition: 0,
            durable_end: Some(end),
            log_start: 0,
            committed_end: None,
        }],
    });
    assert!(failures.is_empty(), "{failures:?}");
    let groups = Coordinator::new(Arc::new(NoOffsets), "east".into(), Arc::new(|_: &str, _: i32| true));
    let config = ServeConfig {
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        node_id: 0,
        cluster_id: "c".into(),
        limits: Limits::default(),
    };
    Arc::new(Endpoint::new(replica, groups, config))
}

fn request(version: i16, offset: i64, max_bytes: i32, isolation: i8) -> Vec<u8> {
    let mut partition = FetchPartition::default();
    partition.fetch_offset = offset;
    partition.partition_max_bytes = max_bytes;
    let mut topic = FetchTopic::default();
    topic.topic = TopicName(StrBytes::from_static_str("t"));
    topic.topic_id = uuid::Uuid::from_bytes([3; 16]);
    topic.partitions = vec![partition];
    let mut fetch = FetchRequest::default();
    fetch.replica_id = BrokerId(-1);
    fetch.max_bytes = max_bytes;
    fetch.isolation_level = isolation;
    fetch.session_epoch = -1;
    fetch.topics = vec![topic];
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Fetch as i16;
    header.request_api_version = version;
    header.correlation_id = 7;
    let mut body = BytesMut::new();
    header.encode(&mut body, FetchRequest::header_version(version)).unwrap();
    fetch.encode(&mut body, version).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, frame: &[u8]) -> Bytes {
    stream.write_all(frame).await.unwrap();
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.unwrap();
    let mut response = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut response).await.unwrap();
    Bytes::from(response)
}

#[tokio::test]
async fn responses_sent_from_files_equal_the_buffered_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let endpoint = endpoint(tmp.path());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(crate::serve(listener, endpoint.clone(), None, std::future::pending()));
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let (mut pipe, server) = tokio::io::duplex(1 << 20);
    let buffered_side = endpoint.clone();
    tokio::spawn(async move { serve_connection(server, &buffered_side, None).await });
    let mut compared = 0;
    for version in [4, 11, 12, 13, 17] {
        for (offset, max_bytes) in [(0, 50 << 20), (7, 20_000), (100, 1), (179, 50 << 20), (180, 1 << 20)] {
            for isolation in [0, 1] {
                let frame = request(version, offset, max_bytes, isolation);
                let from_files = exchange(&mut socket, &frame).await;
                let buffered = exchange(&mut pipe, &frame).await;
                assert_eq!(
                    from_files, buffered,
                    "Fetch v{version} offset {offset} max {max_bytes} isolation {isolation}"
                );
                compared += from_files.len();
            }
        }
    }
    assert!(compared > 1 << 20, "only {compared} bytes compared");
    // The socket's answers were sent from the files (the pipe's were not): most of what was compared.
    let sent = endpoint.sent_from_files();
    assert!(
        sent as usize > compared / 3,
        "{sent} bytes sent from files of {compared} compared"
    );
}
